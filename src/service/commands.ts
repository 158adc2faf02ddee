// The other subcommands' command lines (demo, trace, setup), checked here by the same option
// tables as serve before their modules run, so that every bad flag or value of every vugpu
// subcommand is one sentence and exit status 2 (their modules keep their own parsing).
import fs from 'node:fs';
import { VM_MODES } from './serve-config.ts';
import { BENCHMARKS } from '../demo/records.ts';
import { EVENT_TYPES } from '../trace/schema.ts';
import { UsageError, boolKind, enumKind, get, intKind, parseArgv, pathKind, stringKind, type Kind, type OptionDef } from './config.ts';

const benchList: Kind<string> = {
  form: `a comma-separated list of benchmarks from ${BENCHMARKS.join(', ')}`,
  parse: (raw) => (typeof raw === 'string' && raw.split(',').map((s) => s.trim()).filter(Boolean).every((b) => (BENCHMARKS as readonly string[]).includes(b)) ? raw : undefined),
};

export const DEMO_OPTIONS: readonly OptionDef[] = [
  { key: 'mode', kind: enumKind(VM_MODES), arg: 'MODE', help: 'the guest VM mode (default pt)' },
  { key: 'pv', kind: enumKind(['0', '1', '2']), arg: 'N', help: 'guest driver page-table mode: 0, 1 or 2' },
  { key: 'only', kind: benchList, arg: 'LIST', help: 'run these benchmarks only' },
  { key: 'large', kind: boolKind, help: 'large data sizes' },
  { key: 'size', kind: intKind(1, 1 << 30, 'a problem size'), arg: 'N', help: 'problem size' },
  { key: 'repeat', kind: intKind(1, 1000, 'a repeat count'), arg: 'N', help: 'runs per benchmark (default 3)' },
  { key: 'checks', kind: boolKind, help: 'also run the robustness checks' },
  { key: 'no-native', kind: boolKind, help: 'skip the native twin' },
  { key: 'json', kind: pathKind, arg: 'PATH', help: 'write the report here' },
  { key: 'no-json', kind: boolKind, help: 'write no report' },
  { key: 'help', kind: boolKind, help: 'this text' },
];

const TRACE_SUMMARY: readonly OptionDef[] = [
  { key: 'top', kind: intKind(0, 1_000_000, 'a count'), arg: 'N', help: 'offsets shown (0: all)' },
  { key: 'json', kind: boolKind, help: 'JSON output' },
];
const TRACE_DUMP: readonly OptionDef[] = [
  { key: 'limit', kind: intKind(0, Number.MAX_SAFE_INTEGER, 'a count'), arg: 'N', help: 'records at most' },
  { key: 'type', kind: enumKind(EVENT_TYPES), arg: 'T', help: 'only records of this type' },
];

function check(cmd: string, defs: readonly OptionDef[], argv: readonly string[], positionals = { max: 0, what: '' }): string[] {
  const args = parseArgv(cmd, defs, argv, positionals);
  for (const d of defs) if (d.kind !== 'vm') get(cmd, args, d.key, d.kind);
  return args.positionals;
}

/** Throws UsageError for a bad demo/trace/setup command line; returns quietly otherwise. */
export function checkCommandLine(cmd: string, argv: readonly string[]): void {
  if (cmd === 'demo') {
    check('demo', DEMO_OPTIONS, argv);
    return;
  }
  if (cmd === 'setup') {
    if (argv.length > 0) throw new UsageError(`vugpu setup: unexpected argument ${JSON.stringify(argv[0])} (setup takes none; the environment variables VUGPU_CACHE, VUGPU_QEMU and VUGPU_MIRROR steer it).`);
    return;
  }
  if (cmd === 'trace') {
    const [sub, ...rest] = argv;
    const defs = sub === 'summary' ? TRACE_SUMMARY : sub === 'dump' ? TRACE_DUMP : null;
    if (defs === null) throw new UsageError(`vugpu trace: ${sub === undefined ? 'a subcommand is missing' : `unknown subcommand ${JSON.stringify(sub)}`} (expected summary FILE or dump FILE).`);
    const pos = check(`trace ${sub}`, defs, rest, { max: 1, what: 'one FILE' });
    const file = pos[0] === undefined ? undefined : stringKind().parse(pos[0]);
    if (file === undefined) throw new UsageError(`vugpu trace ${sub}: FILE is missing (expected the file a serve --trace FILE wrote).`);
    try {
      fs.accessSync(file, fs.constants.R_OK);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw new UsageError(`vugpu trace ${sub}: ${file}: ${code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : code} (expected the file a serve --trace FILE wrote).`);
    }
  }
}
