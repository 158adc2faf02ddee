// A small register file in the style of QEMU's Register API (include/hw/register.h): each
// register is a row of data — offset, name, reset value, read-only and write-1-to-clear masks,
// and optional hooks — so reset and access rules come from the table, not from switch
// statements. Values live in one Uint32Array; a snapshot is a plain {name: value} object.

export interface RegisterInfo {
  /** BAR0 byte offset (4-aligned). */
  addr: number;
  name: string;
  reset: number;
  /** Bits a write cannot change (0xffffffff = read-only register). */
  ro?: number;
  /** Bits cleared by writing 1 (writing 0 leaves them). */
  w1c?: number;
  /** Sees the raw written value and the current one; returns the value to apply. */
  preWrite?: (value: number, old: number) => number;
  /** Called with the stored value after a write (triggers live here). */
  postWrite?: (stored: number, written: number, old: number) => void;
  /** Maps the stored value to what a read returns (live counters, status bits). */
  postRead?: (stored: number) => number;
}

export type RegisterSnapshot = Record<string, number>;

export class RegisterFile {
  readonly infos: RegisterInfo[];
  private readonly values: Uint32Array;
  private readonly index = new Map<number, number>();

  constructor(infos: RegisterInfo[]) {
    this.infos = infos;
    this.values = new Uint32Array(infos.length);
    infos.forEach((r, i) => {
      if ((r.addr & 3) !== 0) throw new Error(`register ${r.name}: offset 0x${r.addr.toString(16)} not 4-aligned`);
      if (this.index.has(r.addr)) throw new Error(`register ${r.name}: offset 0x${r.addr.toString(16)} defined twice`);
      this.index.set(r.addr, i);
    });
    this.reset();
  }

  has(addr: number): boolean {
    return this.index.has(addr);
  }

  reset(): void {
    for (let i = 0; i < this.infos.length; i++) this.values[i] = this.infos[i]!.reset >>> 0;
  }

  /** A read as the bus sees it (postRead applied); undefined for an unknown offset. */
  read(addr: number): number | undefined {
    const i = this.index.get(addr);
    if (i === undefined) return undefined;
    const r = this.infos[i]!;
    const v = this.values[i]!;
    return r.postRead ? r.postRead(v) >>> 0 : v;
  }

  /** A write as the bus sees it; false for an unknown offset. */
  write(addr: number, value: number): boolean {
    const i = this.index.get(addr);
    if (i === undefined) return false;
    const r = this.infos[i]!;
    const old = this.values[i]!;
    let v = value >>> 0;
    if (r.preWrite) v = r.preWrite(v, old) >>> 0;
    const ro = r.ro ?? 0;
    const w1c = r.w1c ?? 0;
    // Read-only bits keep their old value; W1C bits clear where 1 is written; the rest take v.
    const rw = ~ro & ~w1c;
    const stored = ((old & ro) | (v & rw) | (old & w1c & ~v)) >>> 0;
    this.values[i] = stored;
    if (r.postWrite) r.postWrite(stored, value >>> 0, old);
    return true;
  }

  /** Stored value without hooks (for the device's own logic). */
  get(addr: number): number {
    const i = this.index.get(addr);
    if (i === undefined) throw new Error(`no register at 0x${addr.toString(16)}`);
    return this.values[i]!;
  }

  /** Set the stored value without hooks or masks (the device updating its own state). */
  set(addr: number, value: number): void {
    const i = this.index.get(addr);
    if (i === undefined) throw new Error(`no register at 0x${addr.toString(16)}`);
    this.values[i] = value >>> 0;
  }

  /** OR bits into the stored value (the device raising status bits). */
  setBits(addr: number, bits: number): void {
    this.set(addr, this.get(addr) | bits);
  }

  clearBits(addr: number, bits: number): void {
    this.set(addr, this.get(addr) & ~bits);
  }

  snapshot(): RegisterSnapshot {
    const s: RegisterSnapshot = {};
    this.infos.forEach((r, i) => (s[r.name] = this.values[i]!));
    return s;
  }

  restore(s: RegisterSnapshot): void {
    this.infos.forEach((r, i) => {
      const v = s[r.name];
      if (v !== undefined) this.values[i] = v >>> 0;
    });
  }
}

/** Reads a 32-bit register, or answers 0 for an unlisted offset. */
export type Read32 = (offset: number) => number;
export type Write32 = (offset: number, value: number) => void;

/**
 * hw-spec §3 access sizes over 32-bit registers: an 8-byte read is two 32-bit reads, low word
 * first; 1- and 2-byte reads return the byte lanes of the 32-bit register.
 */
export function readSized(read32: Read32, offset: number, size: number): number | bigint {
  if (size === 8) {
    const lo = read32(offset);
    const hi = read32(offset + 4);
    return (BigInt(hi) << 32n) | BigInt(lo);
  }
  const v = read32(offset & ~3);
  if (size === 4) return v;
  const shift = (offset & 3) * 8;
  return (v >>> shift) & (size === 1 ? 0xff : 0xffff);
}

/**
 * hw-spec §3 write sizes: an 8-byte write is two 32-bit writes, low word first; a 1- or 2-byte
 * write is merged into the register's current value (`current`, 0 for unlisted offsets) and
 * goes through the normal 32-bit path, so a narrow write to a trigger register triggers.
 */
export function writeSized(current: Read32, write32: Write32, offset: number, size: number, value: number | bigint): void {
  if (size === 8) {
    const v = BigInt.asUintN(64, BigInt(value));
    write32(offset, Number(v & 0xffffffffn));
    write32(offset + 4, Number(v >> 32n));
    return;
  }
  const v = Number(value) >>> 0;
  if (size === 4) {
    write32(offset, v);
    return;
  }
  const base = offset & ~3;
  const shift = (offset & 3) * 8;
  const mask = (size === 1 ? 0xff : 0xffff) << shift;
  write32(base, ((current(base) & ~mask) | ((v << shift) & mask)) >>> 0);
}
