// A vGPU's BAR0 register view as a table. Each row says how the aggregator serves one register:
//   pass     — forwarded to the engine as is (harmless, global, read-only facts);
//   emulate  — per-VM virtual state with the hardware's access rules (RW/RO/W1C), no engine access;
//   trap     — per-VM state plus a handler that translates the access (chids, VRAM and bus
//              addresses, doorbells, flushes) and acts on the engine.
// Ranges (the PRAMIN window) are trap handlers over an offset span. The rows compile into the
// engine's RegisterFile (QEMU Register API style), so reset, masks and snapshots come from the
// table; the BAR0 access rules of hw-spec §3 (8-byte split, narrow merge) live in mmioRead/Write.
import { RegisterFile, readSized, writeSized, type RegisterInfo, type RegisterSnapshot } from '../gpu/regs.ts';

export type Access = 'pass' | 'emulate' | 'trap';

export interface ViewRow extends RegisterInfo {
  access: Access;
}

export interface ViewRange {
  start: number;
  /** Exclusive. */
  end: number;
  name: string;
  access: 'trap';
  read(offset: number, size: number): number | bigint;
  write(offset: number, size: number, value: number | bigint): void;
}

/** How the engine is reached by pass rows. */
export interface PassTarget {
  mmioRead(offset: number, size: 4): number;
  mmioWrite(offset: number, size: number, value: number): void;
}

/** One line of the table as documentation/tests see it. */
export interface ViewEntry {
  start: number;
  end: number;
  name: string;
  access: Access;
}

export class RegisterView {
  readonly regs: RegisterFile;
  private readonly rows: ViewRow[];
  private readonly ranges: ViewRange[];

  constructor(rows: ViewRow[], ranges: ViewRange[], engine: PassTarget) {
    for (const r of rows) {
      if (r.access !== 'pass') continue;
      const addr = r.addr;
      r.postRead = () => engine.mmioRead(addr, 4);
      r.postWrite = (_s, w) => engine.mmioWrite(addr, 4, w);
    }
    this.rows = rows;
    this.ranges = ranges;
    this.regs = new RegisterFile(rows);
  }

  /** The table: every row and range with its access class, ascending by offset. */
  describe(): ViewEntry[] {
    const out: ViewEntry[] = this.rows.map((r) => ({ start: r.addr, end: r.addr + 4, name: r.name, access: r.access }));
    for (const g of this.ranges) out.push({ start: g.start, end: g.end, name: g.name, access: g.access });
    return out.sort((a, b) => a.start - b.start);
  }

  accessOf(offset: number): Access | null {
    const g = this.range(offset);
    if (g) return g.access;
    const i = this.rows.find((r) => r.addr === (offset & ~3));
    return i ? i.access : null;
  }

  reset(): void {
    this.regs.reset();
  }

  snapshot(): RegisterSnapshot {
    return this.regs.snapshot();
  }

  read(offset: number, size: number): number | bigint {
    const g = this.range(offset);
    if (g) return g.read(offset - g.start, size);
    return readSized(this.read32Fn, offset, size);
  }

  write(offset: number, size: number, value: number | bigint): void {
    const g = this.range(offset);
    if (g) {
      g.write(offset - g.start, size, value);
      return;
    }
    writeSized(this.currentFn, this.write32Fn, offset, size, value);
  }

  // Bound once so the sized-access helpers allocate nothing per access. Narrow writes to an
  // unlisted offset merge into 0 and are then ignored by the register file.
  private readonly read32Fn = (offset: number): number => this.read32(offset);
  private readonly write32Fn = (offset: number, value: number): void => {
    this.regs.write(offset, value);
  };
  private readonly currentFn = (base: number): number => (this.regs.has(base) ? this.regs.get(base) : 0);

  /** Unlisted offsets read 0. */
  private read32(offset: number): number {
    return this.regs.read(offset) ?? 0;
  }

  private range(offset: number): ViewRange | null {
    const rs = this.ranges;
    for (let i = 0; i < rs.length; i++) {
      const g = rs[i]!;
      if (offset >= g.start && offset < g.end) return g;
    }
    return null;
  }
}
