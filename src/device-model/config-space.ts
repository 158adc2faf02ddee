// PCI configuration space state (region 7). Reads return the stored bytes; writes go through
// per-byte masks compiled from the layout's field table: bits outside `writable` keep their
// value, bits in `rw1c` are cleared by writing 1. QEMU forwards every guest config write
// (BARs, ROM, MSI-X included), so writes never fail: unwritable bits are simply ignored.

import { PciReg, type ConfigLayout } from './config-layout.ts';

/** Called after a write touched [offset, offset+size); may return a corrected value. */
export type ConfigWriteHook = (oldValue: number, newValue: number) => number | void;

interface HookEntry {
  offset: number;
  size: 1 | 2 | 4;
  fn: ConfigWriteHook;
  old: number; // scratch: value before the current write
}

/** Plain, serializable config-space state. */
export interface ConfigState {
  bytes: number[];
}

export class ConfigSpace {
  readonly layout: ConfigLayout;
  readonly size: number;
  readonly bytes: Uint8Array;
  private readonly dv: DataView;
  private readonly resetImage: Uint8Array;
  private readonly wmask: Uint8Array;
  private readonly w1cmask: Uint8Array;
  private readonly hooks: HookEntry[] = [];

  constructor(layout: ConfigLayout) {
    this.layout = layout;
    this.size = layout.size;
    this.bytes = new Uint8Array(layout.size);
    this.dv = new DataView(this.bytes.buffer);
    this.resetImage = new Uint8Array(layout.size);
    this.wmask = new Uint8Array(layout.size);
    this.w1cmask = new Uint8Array(layout.size);
    for (const fld of layout.fields) {
      for (let i = 0; i < fld.size; i++) {
        const shift = 8 * i;
        this.resetImage[fld.offset + i] = (fld.reset >>> shift) & 0xff;
        this.wmask[fld.offset + i] = ((fld.writable ?? 0) >>> shift) & 0xff;
        this.w1cmask[fld.offset + i] = ((fld.rw1c ?? 0) >>> shift) & 0xff;
      }
    }
    this.bytes.set(this.resetImage);
  }

  /** Run `fn` after any write that touches the register at [offset, offset+size). */
  onWrite(offset: number, size: 1 | 2 | 4, fn: ConfigWriteHook): void {
    this.hooks.push({ offset, size, fn, old: 0 });
  }

  reset(): void {
    this.bytes.set(this.resetImage);
  }

  /** Copy `count` bytes at `offset` into dst[dstOff..]. Bounds are the caller's job. */
  read(offset: number, dst: Uint8Array, dstOff: number, count: number): void {
    dst.set(this.bytes.subarray(offset, offset + count), dstOff);
  }

  readValue(offset: number, size: 1 | 2 | 4): number {
    if (size === 1) return this.dv.getUint8(offset);
    if (size === 2) return this.dv.getUint16(offset, true);
    return this.dv.getUint32(offset, true);
  }

  /** Apply a client write of `count` bytes from src[srcOff..] at `offset`. */
  write(offset: number, src: Uint8Array, srcOff: number, count: number): void {
    const end = offset + count;
    const hooks = this.hooks;
    for (let h = 0; h < hooks.length; h++) {
      const e = hooks[h]!;
      if (e.offset < end && e.offset + e.size > offset) e.old = this.readValue(e.offset, e.size);
    }
    const b = this.bytes;
    const wm = this.wmask;
    const w1c = this.w1cmask;
    for (let i = offset, j = srcOff; i < end; i++, j++) {
      const v = src[j]!;
      b[i] = ((b[i]! & ~wm[i]!) | (v & wm[i]!)) & ~(v & w1c[i]!);
    }
    for (let h = 0; h < hooks.length; h++) {
      const e = hooks[h]!;
      if (e.offset < end && e.offset + e.size > offset) {
        const now = this.readValue(e.offset, e.size);
        const fixed = e.fn(e.old, now);
        if (typeof fixed === 'number' && fixed !== now) this.setRaw(e.offset, e.size, fixed);
      }
    }
  }

  /** Convenience for tests and devices: a masked write of a 1/2/4-byte value. */
  writeValue(offset: number, size: 1 | 2 | 4, value: number): void {
    const tmp = new Uint8Array(4);
    new DataView(tmp.buffer).setUint32(0, value >>> 0, true);
    this.write(offset, tmp, 0, size);
  }

  /** Set a register bypassing the masks (device-side state such as status bits). */
  setRaw(offset: number, size: 1 | 2 | 4, value: number): void {
    if (size === 1) this.dv.setUint8(offset, value);
    else if (size === 2) this.dv.setUint16(offset, value, true);
    else this.dv.setUint32(offset, value >>> 0, true);
  }

  /** Offsets of the capabilities in chain order, walking the bytes as a driver would. */
  capabilityChain(): { id: number; offset: number }[] {
    const out: { id: number; offset: number }[] = [];
    let p = this.bytes[PciReg.CAPABILITY_LIST]! & 0xfc;
    const seen = new Set<number>();
    while (p >= 0x40 && p < 0x100 && !seen.has(p)) {
      seen.add(p);
      out.push({ id: this.bytes[p]!, offset: p });
      p = this.bytes[p + 1]! & 0xfc;
    }
    return out;
  }

  findCapability(id: number): number {
    return this.capabilityChain().find((c) => c.id === id)?.offset ?? -1;
  }

  state(): ConfigState {
    return { bytes: Array.from(this.bytes) };
  }

  restore(s: ConfigState): void {
    if (s.bytes.length !== this.size) throw new RangeError(`config state is ${s.bytes.length} bytes, expected ${this.size}`);
    this.bytes.set(s.bytes);
  }
}
