// Command line and config file of every vugpu subcommand, from one table per command: each
// option has a flag (--key) and, for `serve`, the same key in the config file (TOML, toml.ts).
// Every bad input — an unknown flag or key, a value of the wrong form, options that contradict
// each other — becomes a UsageError: ONE sentence naming the flag or key and the form expected.
// cli.ts prints it on stderr and exits 2 before anything starts (no stack trace, no pino line).
import fs from 'node:fs';
import { parseToml, TomlError, type TomlTable, type TomlValue } from './toml.ts';

/** Bad command line or config: the message is one sentence for the user (exit status 2). */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** The command line was right but the host refused (a port in use, a socket taken): exit 1. */
export class StartError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StartError';
  }
}

/** The value of an option as it came in: a CLI string, or a TOML value from the config file. */
type Raw = string | TomlValue;

export interface Kind<T> {
  /** The expected form, for error messages ("an integer from 1 to 128"). */
  readonly form: string;
  /** The value, or undefined when the input does not have the form. */
  parse(raw: Raw): T | undefined;
}

// ---- kinds ----

const MIB = 1 << 20;
const UNITS: Record<string, number> = { '': 1, K: 1024, M: MIB, G: 1 << 30, T: 2 ** 40 };

/** "1G", "256M", "256MiB", "4096K", "123" → bytes; undefined when it is not a size. */
export function sizeBytes(raw: Raw): number | undefined {
  if (typeof raw === 'number') return Number.isSafeInteger(raw) && raw >= 0 ? raw : undefined;
  if (typeof raw !== 'string') return undefined;
  const m = /^(\d+)([KMGT]?)(i?B)?$/i.exec(raw.trim());
  if (!m) return undefined;
  const n = Number(m[1]) * UNITS[m[2]!.toUpperCase()]!;
  return Number.isSafeInteger(n) ? n : undefined;
}

/** Bytes → the shortest exact size string ("256M", "1G", "1536K"). */
export function formatSize(n: number): string {
  for (const [u, m] of [['T', 2 ** 40], ['G', 1 << 30], ['M', MIB], ['K', 1024]] as const) {
    if (n >= m && n % m === 0) return `${n / m}${u}`;
  }
  return String(n);
}

export const isPow2 = (n: number): boolean => Number.isSafeInteger(n) && n > 0 && 2 ** Math.round(Math.log2(n)) === n;

export function sizeKind(o: { min: number; max: number; pow2?: boolean; example: string }): Kind<number> {
  const rule = o.pow2 ? `a power of two from ${formatSize(o.min)} to ${formatSize(o.max)}` : `a multiple of 1M from ${formatSize(o.min)} to ${formatSize(o.max)}`;
  return {
    form: `a size such as ${o.example} (${rule})`,
    parse(raw) {
      const n = sizeBytes(raw);
      if (n === undefined || n < o.min || n > o.max) return undefined;
      if (o.pow2 ? !isPow2(n) : n % MIB !== 0) return undefined;
      return n;
    },
  };
}

export function intKind(min: number, max: number, what = 'an integer'): Kind<number> {
  return {
    form: max === Number.MAX_SAFE_INTEGER ? `${what} (${min} or more)` : `${what} from ${min} to ${max}`,
    parse(raw) {
      const n = typeof raw === 'number' ? raw : typeof raw === 'string' && /^[+-]?\d+$/.test(raw.trim()) ? Number(raw) : NaN;
      return Number.isSafeInteger(n) && n >= min && n <= max ? n : undefined;
    },
  };
}

/** A number > min (exclusive) and ≤ max: scheduler weights. */
export function numberKind(minExclusive: number, max: number): Kind<number> {
  return {
    form: `a number greater than ${minExclusive} and at most ${max}`,
    parse(raw) {
      const n = typeof raw === 'number' ? raw : typeof raw === 'string' && /^\d+(\.\d+)?$/.test(raw.trim()) ? Number(raw) : NaN;
      return Number.isFinite(n) && n > minExclusive && n <= max ? n : undefined;
    },
  };
}

export function enumKind<T extends string>(values: readonly T[]): Kind<T> {
  return {
    form: values.length === 2 ? `${values[0]} or ${values[1]}` : `one of ${values.slice(0, -1).join(', ')} or ${values.at(-1)}`,
    parse: (raw) => (typeof raw === 'string' && (values as readonly string[]).includes(raw) ? (raw as T) : undefined),
  };
}

export const boolKind: Kind<boolean> = {
  form: 'true or false',
  parse: (raw) => (raw === true || raw === 'true' ? true : raw === false || raw === 'false' ? false : undefined),
};

export function stringKind(form = 'a non-empty string', re = /^[^\0\n]+$/): Kind<string> {
  return { form, parse: (raw) => (typeof raw === 'string' && re.test(raw) ? raw : undefined) };
}

export const pathKind: Kind<string> = stringKind('a file path', /^[^\0\n]+$/);

/** sun_path holds 108 bytes with the terminating NUL. */
export const socketKind: Kind<string> = {
  form: 'a UNIX socket path of at most 107 bytes',
  parse: (raw) => (typeof raw === 'string' && /^[^\0\n]+$/.test(raw) && Buffer.byteLength(raw) <= 107 ? raw : undefined),
};

/** VM names: they become metric labels, log fields and file names. */
export const nameKind: Kind<string> = stringKind('a name of 1–63 letters, digits, ., _ or - (starting with a letter or digit)', /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/);

// ---- option tables ----

export interface OptionDef {
  /** Flag name without the dashes; also the config file key (unless flagOnly). */
  key: string;
  kind: Kind<unknown> | 'vm';
  /** Repeatable flag / an array in the config file. */
  list?: boolean;
  /** Placeholder in usage lines (omit for boolean flags). */
  arg?: string;
  help: string;
  /** Not a config-file key (--config itself). */
  flagOnly?: boolean;
}

export interface ParsedArgs {
  /** Per key: raw values with where they came from (CLI first wins for scalars; lists add). */
  values: Map<string, { raw: Raw; where: string }[]>;
  positionals: string[];
}

/** Edit distance, for "did you mean". */
function distance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...new Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
  }
  return d[a.length]![b.length]!;
}

export function suggest(word: string, candidates: readonly string[]): string | undefined {
  // A known name inside the word (vram-size → vram) or the word inside a name.
  const affix = candidates.filter((c) => c.length >= 3 && (word.startsWith(c) || c.startsWith(word) || word.endsWith(c)));
  if (affix.length > 0) return affix.sort((a, b) => b.length - a.length)[0];
  let best: string | undefined;
  let bestD = Infinity;
  for (const c of candidates) {
    const dd = distance(word, c);
    if (dd < bestD) [best, bestD] = [c, dd];
  }
  return best !== undefined && bestD <= Math.max(2, Math.floor(word.length / 3)) ? best : undefined;
}

/**
 * Split argv by the table: `--key value`, `--key=value`, boolean `--flag` (or `--flag=false`),
 * `--` ends options. `positionals`: how many bare words the command takes (error beyond).
 */
export function parseArgv(cmd: string, defs: readonly OptionDef[], argv: readonly string[], positionals: { max: number; what: string } = { max: 0, what: '' }): ParsedArgs {
  const byKey = new Map(defs.map((d) => [d.key, d]));
  const values: ParsedArgs['values'] = new Map();
  const pos: string[] = [];
  const flags = defs.map((d) => `--${d.key}`);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--') {
      pos.push(...argv.slice(i + 1));
      break;
    }
    if (!a.startsWith('--') || a === '--') {
      if (a.startsWith('-') && a.length > 1) throw new UsageError(`vugpu ${cmd}: unknown option ${a} (options are long: ${flags.slice(0, 4).join(', ')}, …; see vugpu --help).`);
      pos.push(a);
      continue;
    }
    const eq = a.indexOf('=');
    const key = a.slice(2, eq < 0 ? undefined : eq);
    const def = byKey.get(key);
    if (!def) {
      const s = suggest(`--${key}`, flags);
      throw new UsageError(`vugpu ${cmd}: unknown option --${key} (${s ? `did you mean ${s}?` : `known options: ${flags.join(', ')}`}).`);
    }
    let raw: string;
    if (def.kind === boolKind) {
      raw = eq < 0 ? 'true' : a.slice(eq + 1);
    } else if (eq >= 0) {
      raw = a.slice(eq + 1);
    } else {
      const next = argv[i + 1];
      if (next === undefined || (next.startsWith('--') && next.length > 2)) {
        throw new UsageError(`vugpu ${cmd}: --${key} needs a value: ${formOf(def)}.`);
      }
      raw = next;
      i++;
    }
    const list = values.get(key) ?? [];
    if (!def.list && list.length > 0) throw new UsageError(`vugpu ${cmd}: --${key} is given twice (it takes one value: ${formOf(def)}).`);
    list.push({ raw, where: `--${key} ${raw}` });
    values.set(key, list);
  }
  if (pos.length > positionals.max) {
    const extra = pos[positionals.max]!;
    throw new UsageError(positionals.max === 0
      ? `vugpu ${cmd}: unexpected argument ${JSON.stringify(extra)} (${cmd} takes only --options; see vugpu --help).`
      : `vugpu ${cmd}: unexpected argument ${JSON.stringify(extra)} (expected ${positionals.what}).`);
  }
  return { values, positionals: pos };
}

function formOf(def: OptionDef): string {
  return def.kind === 'vm' ? VM_FORM : def.kind.form;
}

function show(raw: Raw): string {
  return typeof raw === 'string' ? raw : JSON.stringify(raw);
}

/** Add a config file's keys under the CLI's: CLI scalars win, lists are file first then CLI. */
export function mergeConfigFile(cmd: string, defs: readonly OptionDef[], args: ParsedArgs, file: string): void {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new UsageError(`vugpu ${cmd}: --config ${file}: cannot read it (${code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : code === 'EISDIR' ? 'it is a directory' : (err as Error).message}).`);
  }
  let doc;
  try {
    doc = parseToml(text);
  } catch (err) {
    if (err instanceof TomlError) throw new UsageError(`vugpu ${cmd}: ${file} line ${err.line}: ${err.message} (the file is TOML; see README, "Running vugpu as a service").`);
    throw err;
  }
  const byKey = new Map(defs.filter((d) => !d.flagOnly).map((d) => [d.key, d]));
  for (const [key, value] of Object.entries(doc.value)) {
    const line = doc.lines.get(key) ?? 0;
    const where = (k: string, v: Raw) => `${file} line ${doc.lines.get(k) ?? line}: ${k.replace(/\[\d+\]\./, '.')} = ${show(v)}`;
    const def = byKey.get(key);
    if (!def) {
      const s = suggest(key, [...byKey.keys()]);
      throw new UsageError(`vugpu ${cmd}: ${file} line ${line}: unknown key ${key} (${s ? `did you mean ${s}?` : `known keys: ${[...byKey.keys()].join(', ')}`}).`);
    }
    if (def.list) {
      const items = def.kind === 'vm' && !Array.isArray(value) ? [value] : value;
      if (!Array.isArray(items)) throw new UsageError(`vugpu ${cmd}: ${where(key, value)}: expected a list of ${formOf(def)}, such as [${key === 'socket' ? '"/run/vugpu/vm0.sock"' : '…'}].`);
      const fromFile = items.map((raw, i) => ({ raw, where: def.kind === 'vm' ? `${file} line ${doc.lines.get(`${key}[${i}]`) ?? line}: [[${key}]] #${i + 1}` : where(key, raw) }));
      args.values.set(key, [...fromFile, ...(args.values.get(key) ?? [])]);
    } else if (!args.values.has(key)) {
      args.values.set(key, [{ raw: value, where: where(key, value) }]);
    }
  }
}

/** The single value of a key converted by its kind, or the default; UsageError when malformed. */
export function get<T>(cmd: string, args: ParsedArgs, key: string, kind: Kind<T>, dflt: T): T;
export function get<T>(cmd: string, args: ParsedArgs, key: string, kind: Kind<T>): T | undefined;
export function get<T>(cmd: string, args: ParsedArgs, key: string, kind: Kind<T>, dflt?: T): T | undefined {
  const v = args.values.get(key)?.[0];
  if (!v) return dflt;
  return convert(cmd, v.raw, v.where, kind);
}

export function getList<T>(cmd: string, args: ParsedArgs, key: string, kind: Kind<T>): T[] {
  return (args.values.get(key) ?? []).map((v) => convert(cmd, v.raw, v.where, kind));
}

export function convert<T>(cmd: string, raw: Raw, where: string, kind: Kind<T>): T {
  const v = kind.parse(raw);
  if (v === undefined) throw new UsageError(`vugpu ${cmd}: ${where}: expected ${kind.form}.`);
  return v;
}

// ---- VMs (--vm name=a,socket=PATH,mode=fv,slice=256M,weight=1 or [[vm]] tables) ----

export const VM_FORM = 'name=NAME,socket=PATH,mode=MODE,slice=SIZE,weight=W (socket= is required)';

export interface VmSpec {
  name?: string;
  socket: string;
  mode?: string;
  slice?: number;
  weight?: number;
}

export interface VmKinds {
  mode: Kind<string>;
  slice: Kind<number>;
  weight: Kind<number>;
}

export const VM_KEYS = ['name', 'socket', 'mode', 'slice', 'weight'] as const;

/** A VM from `name=a,socket=…` (CLI) or a TOML table; every field checked. */
export function parseVmSpec(cmd: string, raw: Raw, where: string, kinds: VmKinds): VmSpec {
  let fields: [string, Raw][];
  if (typeof raw === 'string') {
    fields = [];
    for (const part of raw.split(',')) {
      if (part === '') continue;
      const eq = part.indexOf('=');
      if (eq <= 0) throw new UsageError(`vugpu ${cmd}: ${where}: ${JSON.stringify(part)} is not key=value (expected ${VM_FORM}).`);
      fields.push([part.slice(0, eq), part.slice(eq + 1)]);
    }
  } else if (typeof raw === 'object' && raw !== null && !Array.isArray(raw)) {
    fields = Object.entries(raw as TomlTable);
  } else {
    throw new UsageError(`vugpu ${cmd}: ${where}: expected a VM table with the keys ${VM_KEYS.join(', ')}.`);
  }
  const seen = new Set<string>();
  const spec: Partial<VmSpec> = {};
  for (const [k, v] of fields) {
    const at = typeof raw === 'string' ? `${where}: ${k}=${show(v)}` : `${where}: ${k} = ${show(v)}`;
    if (!(VM_KEYS as readonly string[]).includes(k)) {
      const s = suggest(k, VM_KEYS);
      throw new UsageError(`vugpu ${cmd}: ${where}: unknown VM key ${k} (${s ? `did you mean ${s}?` : `known: ${VM_KEYS.join(', ')}`}).`);
    }
    if (seen.has(k)) throw new UsageError(`vugpu ${cmd}: ${where}: ${k} is given twice.`);
    seen.add(k);
    if (k === 'name') spec.name = convert(cmd, v, at, nameKind);
    else if (k === 'socket') spec.socket = convert(cmd, v, at, socketKind);
    else if (k === 'mode') spec.mode = convert(cmd, v, at, kinds.mode);
    else if (k === 'slice') spec.slice = convert(cmd, v, at, kinds.slice);
    else spec.weight = convert(cmd, v, at, kinds.weight);
  }
  if (spec.socket === undefined) throw new UsageError(`vugpu ${cmd}: ${where}: socket is required (expected ${VM_FORM}).`);
  return spec as VmSpec;
}

/** A usage block from an option table (for --help). */
export function usageLines(defs: readonly OptionDef[], indent = '  '): string {
  const rows = defs.map((d) => [`--${d.key}${d.arg ? ` ${d.arg}` : ''}`, `${d.help}${d.list ? ' (repeatable)' : ''}`] as const);
  const w = Math.max(...rows.map((r) => r[0].length));
  return rows.map(([f, h]) => `${indent}${f.padEnd(w)}  ${h}`).join('\n');
}
