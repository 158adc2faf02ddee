// The engine's view of system memory: a pluggable bus resolver (docs/architecture.md) that
// turns a bus address range into host extents, plus helpers that read and write through
// extents. The engine never dereferences a bus address any other way.
import { native, type Extent } from '../native.ts';

export type { Extent };

export interface BusResolver {
  /** Host extents covering [busAddr, busAddr + length), or null if any byte is unmapped (or
   * not writable when write is true). Extents are in address order and sum to length. */
  resolve(busAddr: number, length: number, write: boolean): Extent[] | null;
}

/** A resolver that maps nothing: every system-memory access faults. */
export const NO_BUS: BusResolver = { resolve: () => null };

export interface BusRegion {
  bus: number;      // first bus address
  length: number;   // bytes
  fd: number;       // backing fd
  offset: number;   // fd offset of `bus`
  writable: boolean;
}

/**
 * A static table of bus regions (fd-backed), as a DMA map table is. Used by the host driver,
 * the tests and the bench for "system memory"; the device model supplies its own resolver.
 */
export class RegionBus implements BusResolver {
  private regions: BusRegion[] = [];

  add(r: BusRegion): void {
    this.regions.push(r);
    this.regions.sort((a, b) => a.bus - b.bus);
  }

  remove(bus: number): void {
    this.regions = this.regions.filter((r) => r.bus !== bus);
  }

  resolve(busAddr: number, length: number, write: boolean): Extent[] | null {
    if (!(length > 0) || !Number.isSafeInteger(busAddr) || busAddr < 0) return null;
    const out: Extent[] = [];
    let addr = busAddr;
    let left = length;
    for (const r of this.regions) {
      if (left === 0) break;
      if (addr < r.bus || addr >= r.bus + r.length) continue;
      if (write && !r.writable) return null;
      const n = Math.min(left, r.bus + r.length - addr);
      out.push({ fd: r.fd, offset: r.offset + (addr - r.bus), length: n });
      addr += n;
      left -= n;
    }
    return left === 0 ? out : null;
  }
}

/** Fast paths for extents that point into VRAM (no syscall). */
export interface VramView {
  fd: number;
  u8: Uint8Array;
  /** Vram.written: resident copies of VRAM to drop when the engine writes it. */
  written?: ((offset: number, length: number) => void) | null;
}

/** Read the bytes of `extents` into dst (whose length is their sum). Returns false on an I/O error. */
export function readExtents(vram: VramView, extents: Extent[], dst: Uint8Array): boolean {
  let at = 0;
  for (const e of extents) {
    if (e.fd === vram.fd) {
      dst.set(vram.u8.subarray(e.offset, e.offset + e.length), at);
    } else if (e.mem !== undefined && e.memOffset! + e.length <= e.mem.byteLength) {
      // a DMA map the server holds mapped (an unmapped one has no bytes left): a launch reads its
      // parameters without a pread
      dst.set(new Uint8Array(e.mem, e.memOffset, e.length), at);
    } else if (native.pread(e.fd, dst.subarray(at, at + e.length), e.offset) !== e.length) {
      return false;
    }
    at += e.length;
  }
  return true;
}

/** Write src through `extents`. Returns false on an I/O error. */
export function writeExtents(vram: VramView, extents: Extent[], src: Uint8Array): boolean {
  let at = 0;
  for (const e of extents) {
    if (e.fd === vram.fd) {
      vram.u8.set(src.subarray(at, at + e.length), e.offset);
      vram.written?.(e.offset, e.length);
    } else if (native.pwrite(e.fd, src.subarray(at, at + e.length), e.offset) !== e.length) {
      return false;
    }
    at += e.length;
  }
  return true;
}

/** Append an extent to list, merging with the previous one when contiguous in the same fd (its
 * mapping survives a merge only where both lie in one mapping, one after the other). */
export function pushExtent(list: Extent[], fd: number, offset: number, length: number, mem?: ArrayBuffer, memOffset?: number): void {
  const last = list[list.length - 1];
  if (last && last.fd === fd && last.offset + last.length === offset) {
    if (last.mem !== undefined && (last.mem !== mem || last.memOffset! + last.length !== memOffset)) {
      last.mem = undefined;
      last.memOffset = undefined;
    }
    last.length += length;
  } else {
    list.push({ fd, offset, length, mem, memOffset: mem === undefined ? undefined : memOffset });
  }
}
