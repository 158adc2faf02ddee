// Guest console protocol: the guest prints `VUGPU-<KIND> <json>` lines on ttyS0 (guest/initramfs/init,
// guest programs). Everything else on the console is kept as plain text.

export interface GuestRecord {
  kind: string;                       // INIT, CHECK, BENCH, PHASE, EXIT, ERROR, PCI, ...
  data: Record<string, unknown>;
  line: number;                       // index in the console line list
}

export interface CheckResult {
  check: string;
  ok: boolean;
  [key: string]: unknown;
}

const RECORD = /VUGPU-([A-Z][A-Z0-9_]*) (\{.*\})\s*$/;
// Terminal control sequences (SeaBIOS clears the screen) and stray CRs.
// eslint-disable-next-line no-control-regex
const CONTROL = /\x1b(?:\[[0-9;?]*[A-Za-z]|[A-Za-z])|\r/g;

export function cleanLine(line: string): string {
  return line.replace(CONTROL, '');
}

/** Parses one console line; null when it is not a record. A record with broken JSON is
 * returned as kind PARSE_ERROR so that it cannot pass unnoticed. */
export function parseRecord(line: string, index: number): GuestRecord | null {
  const m = RECORD.exec(line);
  if (!m) return null;
  try {
    const data = JSON.parse(m[2]) as Record<string, unknown>;
    return { kind: m[1], data, line: index };
  } catch (err) {
    return { kind: 'PARSE_ERROR', data: { kind: m[1], text: m[2], error: (err as Error).message }, line: index };
  }
}

/** Splits a byte stream into lines, calling onLine for each complete one. */
export class LineSplitter {
  private partial = '';
  private readonly onLine: (line: string) => void;

  constructor(onLine: (line: string) => void) {
    this.onLine = onLine;
  }

  push(chunk: string): void {
    const text = this.partial + chunk;
    const parts = text.split('\n');
    this.partial = parts.pop() ?? '';
    for (const p of parts) this.onLine(cleanLine(p));
  }

  flush(): void {
    if (this.partial.length > 0) this.onLine(cleanLine(this.partial));
    this.partial = '';
  }
}

/** QEMU stderr lines that are known to be harmless with a working vfio-user server. */
export const HARMLESS_QEMU_STDERR: RegExp[] = [
  // The device reports no ERR irq; QEMU only warns (feasibility.md §1).
  /warning: vfio \S+: Could not enable error recovery for the device\s*$/,
];

/** vfio/vfio-user lines in QEMU's stderr that are not on the whitelist. */
export function vfioErrorLines(stderr: string[], harmless: RegExp[] = HARMLESS_QEMU_STDERR): string[] {
  return stderr.filter((l) => /vfio/i.test(l) && !harmless.some((h) => h.test(l)));
}
