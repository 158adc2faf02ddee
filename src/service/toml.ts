// A strict parser for the subset of TOML 1.0 that vugpu's config files use (docs in README,
// "Running vugpu as a service"). Everything outside the subset is an error that names its line,
// never a silent misreading:
//   - comments (#), blank lines;
//   - `key = value` with bare keys (A-Z a-z 0-9 _ -) or "quoted" keys; no dotted keys;
//   - `[table]` and `[[array-of-tables]]` headers (one level: no dotted names);
//   - values: "basic strings" (escapes \b \t \n \f \r \" \\ \uXXXX \UXXXXXXXX), 'literal strings',
//     integers (decimal, optional sign, _ between digits), floats (decimal, exponent), true/false,
//     arrays (may span lines, trailing comma allowed) and single-line { inline = "tables" }.
// Not supported (an error says so): multi-line strings, dates and times, hex/octal/binary
// integers, inf/nan, dotted keys. No npm TOML package: the subset is ~200 lines and keeps the
// service free of a parser dependency whose errors we could not word.

export type TomlValue = string | number | boolean | TomlValue[] | TomlTable;
export interface TomlTable {
  [key: string]: TomlValue;
}

/** A syntax error at a line (1-based) of the file. */
export class TomlError extends Error {
  readonly line: number;
  constructor(line: number, message: string) {
    super(message);
    this.name = 'TomlError';
    this.line = line;
  }
}

export interface TomlDocument {
  value: TomlTable;
  /** Line of each key, by path: `vram`, `vm[1]`, `vm[1].slice` (for error messages). */
  lines: Map<string, number>;
}

const BARE = /^[A-Za-z0-9_-]+$/;

export function parseToml(text: string): TomlDocument {
  const p = new Parser(text);
  return p.document();
}

class Parser {
  private readonly s: string;
  private i = 0;
  private line = 1;
  private readonly root: TomlTable = {};
  private readonly lines = new Map<string, number>();
  /** Tables defined by a [header] (a second [same] is an error). */
  private readonly headers = new Set<string>();

  constructor(text: string) {
    this.s = text.replace(/^\uFEFF/, '');
  }

  document(): TomlDocument {
    let table = this.root;
    let prefix = '';
    for (;;) {
      this.skipBlank();
      if (this.i >= this.s.length) break;
      const c = this.s[this.i]!;
      if (c === '[') {
        [table, prefix] = this.header();
      } else {
        this.keyValue(table, prefix);
      }
      this.endOfLine();
    }
    return { value: this.root, lines: this.lines };
  }

  private fail(msg: string): never {
    throw new TomlError(this.line, msg);
  }

  /** Spaces, tabs, comments and newlines. */
  private skipBlank(): void {
    while (this.i < this.s.length) {
      const c = this.s[this.i]!;
      if (c === ' ' || c === '\t' || c === '\r') this.i++;
      else if (c === '\n') {
        this.i++;
        this.line++;
      } else if (c === '#') this.skipComment();
      else break;
    }
  }

  private skipSpaces(): void {
    while (this.i < this.s.length && (this.s[this.i] === ' ' || this.s[this.i] === '\t')) this.i++;
  }

  private skipComment(): void {
    while (this.i < this.s.length && this.s[this.i] !== '\n') this.i++;
  }

  /** After a statement only a comment may follow on the same line. */
  private endOfLine(): void {
    this.skipSpaces();
    if (this.s[this.i] === '#') this.skipComment();
    if (this.s[this.i] === '\r') this.i++;
    if (this.i < this.s.length && this.s[this.i] !== '\n') {
      this.fail(`unexpected ${JSON.stringify(this.s.slice(this.i, this.i + 12))} after the value (one key = value per line)`);
    }
  }

  private header(): [TomlTable, string] {
    const array = this.s.startsWith('[[', this.i);
    this.i += array ? 2 : 1;
    this.skipSpaces();
    const name = this.key();
    this.skipSpaces();
    if (this.s[this.i] === '.') this.fail('dotted table names are not supported: use [name] or [[name]]');
    if (!this.s.startsWith(array ? ']]' : ']', this.i)) this.fail(`expected ${array ? ']]' : ']'} after the table name`);
    this.i += array ? 2 : 1;
    const existing = this.root[name];
    if (array) {
      if (existing !== undefined && !isTableArray(existing)) this.fail(`[[${name}]]: ${name} is already defined as something else`);
      const list = (existing as TomlTable[] | undefined) ?? [];
      const t: TomlTable = {};
      list.push(t);
      this.root[name] = list;
      const path = `${name}[${list.length - 1}]`;
      this.lines.set(path, this.line);
      if (!this.lines.has(name)) this.lines.set(name, this.line);
      return [t, `${path}.`];
    }
    if (existing !== undefined || this.headers.has(name)) this.fail(`[${name}] is defined twice`);
    this.headers.add(name);
    const t: TomlTable = {};
    this.root[name] = t;
    this.lines.set(name, this.line);
    return [t, `${name}.`];
  }

  private key(): string {
    const c = this.s[this.i];
    if (c === '"' || c === "'") {
      const k = c === '"' ? this.basicString() : this.literalString();
      if (k.length === 0) this.fail('empty keys are not allowed');
      return k;
    }
    const start = this.i;
    while (this.i < this.s.length && /[A-Za-z0-9_-]/.test(this.s[this.i]!)) this.i++;
    const k = this.s.slice(start, this.i);
    if (!BARE.test(k)) this.fail(`expected a key (letters, digits, _ or -), found ${JSON.stringify(this.s.slice(start, start + 12))}`);
    return k;
  }

  private keyValue(table: TomlTable, prefix: string): void {
    const line = this.line;
    const k = this.key();
    this.skipSpaces();
    if (this.s[this.i] === '.') this.fail(`dotted keys are not supported (${k}.…): use a [${k}] table`);
    if (this.s[this.i] !== '=') this.fail(`expected = after the key ${k}`);
    this.i++;
    this.skipSpaces();
    if (Object.hasOwn(table, k)) this.fail(`key ${k} is defined twice`);
    table[k] = this.value(`${prefix}${k}`);
    this.lines.set(`${prefix}${k}`, line);
  }

  private value(path: string): TomlValue {
    const c = this.s[this.i];
    if (c === undefined || c === '\n' || c === '#') this.fail('a value is missing after =');
    if (c === '"') {
      if (this.s.startsWith('"""', this.i)) this.fail('multi-line strings are not supported');
      return this.basicString();
    }
    if (c === "'") {
      if (this.s.startsWith("'''", this.i)) this.fail('multi-line strings are not supported');
      return this.literalString();
    }
    if (c === '[') return this.array(path);
    if (c === '{') return this.inlineTable(path);
    const start = this.i;
    while (this.i < this.s.length && !/[\s,\]}#]/.test(this.s[this.i]!)) this.i++;
    const word = this.s.slice(start, this.i);
    if (word === 'true') return true;
    if (word === 'false') return false;
    if (/^[+-]?(0|[1-9](_?\d)*)$/.test(word)) {
      const n = Number(word.replace(/_/g, ''));
      if (!Number.isSafeInteger(n)) this.fail(`integer ${word} is too large`);
      return n;
    }
    if (/^[+-]?(0|[1-9](_?\d)*)(\.\d(_?\d)*)?([eE][+-]?\d(_?\d)*)?$/.test(word)) return Number(word.replace(/_/g, ''));
    if (/^\d{4}-\d{2}-\d{2}/.test(word) || /^\d{2}:\d{2}/.test(word)) this.fail('dates and times are not supported');
    if (/^[+-]?(0x|0o|0b|inf|nan)/.test(word)) this.fail(`${word}: only decimal numbers are supported`);
    this.fail(`${JSON.stringify(word)} is not a TOML value (strings need quotes: "${word}")`);
  }

  private basicString(): string {
    this.i++; // opening quote
    let out = '';
    for (;;) {
      const c = this.s[this.i];
      if (c === undefined || c === '\n') this.fail('unterminated string (a closing " is missing on this line)');
      this.i++;
      if (c === '"') return out;
      if (c !== '\\') {
        out += c;
        continue;
      }
      const e = this.s[this.i++];
      const simple: Record<string, string> = { b: '\b', t: '\t', n: '\n', f: '\f', r: '\r', '"': '"', '\\': '\\' };
      if (e !== undefined && Object.hasOwn(simple, e)) out += simple[e];
      else if (e === 'u' || e === 'U') {
        const len = e === 'u' ? 4 : 8;
        const hex = this.s.slice(this.i, this.i + len);
        if (!new RegExp(`^[0-9A-Fa-f]{${len}}$`).test(hex)) this.fail(`bad \\${e} escape: ${len} hex digits expected`);
        const cp = parseInt(hex, 16);
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) this.fail(`\\${e}${hex} is not a Unicode scalar value`);
        out += String.fromCodePoint(cp);
        this.i += len;
      } else this.fail(`unknown escape \\${e ?? ''} in a string`);
    }
  }

  private literalString(): string {
    this.i++;
    const end = this.s.indexOf("'", this.i);
    const nl = this.s.indexOf('\n', this.i);
    if (end < 0 || (nl >= 0 && nl < end)) this.fail("unterminated string (a closing ' is missing on this line)");
    const out = this.s.slice(this.i, end);
    this.i = end + 1;
    return out;
  }

  private array(path: string): TomlValue[] {
    this.i++;
    const out: TomlValue[] = [];
    for (;;) {
      this.skipBlank();
      if (this.s[this.i] === ']') {
        this.i++;
        return out;
      }
      if (this.i >= this.s.length) this.fail('unterminated array (a closing ] is missing)');
      out.push(this.value(`${path}[${out.length}]`));
      this.skipBlank();
      if (this.i >= this.s.length) this.fail('unterminated array (a closing ] is missing)');
      if (this.s[this.i] === ',') this.i++;
      else if (this.s[this.i] !== ']') this.fail('expected , or ] in an array');
    }
  }

  private inlineTable(path: string): TomlTable {
    this.i++;
    const t: TomlTable = {};
    this.lines.set(path, this.line);
    this.skipSpaces();
    if (this.s[this.i] === '}') {
      this.i++;
      return t;
    }
    for (;;) {
      this.skipSpaces();
      if (this.s[this.i] === '\n' || this.i >= this.s.length) this.fail('an inline table must be on one line (a closing } is missing)');
      this.keyValue(t, `${path}.`);
      this.skipSpaces();
      if (this.s[this.i] === ',') {
        this.i++;
        continue;
      }
      if (this.s[this.i] === '}') {
        this.i++;
        return t;
      }
      if (this.i >= this.s.length || this.s[this.i] === '\n' || this.s[this.i] === '\r') this.fail('an inline table must be on one line (a closing } is missing)');
      this.fail('expected , or } in an inline table');
    }
  }
}

function isTableArray(v: TomlValue): v is TomlTable[] {
  return Array.isArray(v) && v.every((x) => typeof x === 'object' && x !== null && !Array.isArray(x));
}
