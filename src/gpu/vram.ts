// VRAM: one memfd (shared with BAR1 sparse mmaps and native jobs) plus a CPU mapping for the
// engine's own small accesses (instance blocks, page tables, semaphores, PRAMIN, PDIAG).
import { fstatSync } from 'node:fs';
import { native } from '../native.ts';
import { ENXIO } from './spec.ts';

const GRANULE = 64 << 10;

export class Vram {
  readonly fd: number;
  readonly size: number;
  readonly u8: Uint8Array;
  readonly dv: DataView;
  private buf: ArrayBuffer | null;
  /** Told of every engine write to VRAM that is not a launch's own resident copy (copies, fills,
   * built-ins, semaphores, scrubs): a program device that keeps VRAM on the GPU drops its copy
   * of those bytes (native/src/vulkan/resident.cc). Unset: nothing keeps VRAM. */
  written: ((offset: number, length: number) => void) | null = null;
  /** 64 KiB granules a DEVICE_CACHED binding has covered: only writes there can be resident
   * (a semaphore release, most copies, are not), and only those reach the device (written). */
  private resident: Uint8Array | null = null;

  /** Keep resident copies with `drop` told of engine writes to granules marked by markResident;
   * null: nothing is kept. */
  keepResident(drop: ((offset: number, length: number) => void) | null): void {
    if (!drop) {
      this.resident = null;
      this.written = null;
      return;
    }
    const g = new Uint8Array(Math.ceil(this.size / GRANULE));
    this.resident = g;
    this.written = (offset, length) => {
      const last = Math.min(g.length - 1, Math.floor((offset + length - 1) / GRANULE));
      for (let i = Math.floor(offset / GRANULE); i <= last; i++) {
        if (g[i]) {
          drop(offset, length);
          return;
        }
      }
    };
  }

  /** A DEVICE_CACHED binding covers [offset, offset + length): its granules may be resident. */
  markResident(offset: number, length: number): void {
    const g = this.resident;
    if (!g || length <= 0) return;
    const last = Math.min(g.length - 1, Math.floor((offset + length - 1) / GRANULE));
    for (let i = Math.floor(offset / GRANULE); i <= last; i++) g[i] = 1;
  }

  /** adoptFd: an existing VRAM memfd (a restart adopts it from the fd keeper; its contents,
   * shadow tables included, are the VRAM); the Vram owns it from then on. */
  constructor(size: number, name = 'vugpu-vram', adoptFd?: number) {
    if (!Number.isSafeInteger(size) || size <= 0 || size % (1 << 20) !== 0) {
      throw new RangeError(`VRAM size must be a positive multiple of 1 MiB, got ${size}`);
    }
    let fd: number;
    if (adoptFd !== undefined) {
      const have = fstatSync(adoptFd).size;
      if (have < size) throw new RangeError(`adopted VRAM fd ${adoptFd} holds ${have} bytes, need ${size}`);
      fd = adoptFd;
    } else {
      fd = native.memfdCreate(name, size);
      if (fd < 0) throw new Error(`memfd_create(${name}) failed: errno ${-fd}`);
    }
    this.fd = fd;
    this.size = size;
    this.buf = native.mmap(fd, size, 0);
    this.u8 = new Uint8Array(this.buf);
    this.dv = new DataView(this.buf);
  }

  /**
   * Zero [addr, addr + length), skipping the memfd's holes: pages never written read as zero,
   * and filling them would only allocate them (a scrub of a lightly used slice faulted in all of
   * it: docs/architecture.md, "Threads").
   */
  zero(addr: number, length: number): void {
    this.written?.(addr, length);
    const end = addr + length;
    for (let at = addr; at < end;) {
      const data = native.seekData(this.fd, at, 0);
      if (data === -ENXIO || data >= end) return; // no data left in the range
      if (data < 0) { // a file system without SEEK_DATA: fill it all
        this.u8.fill(0, at, end);
        return;
      }
      const hole = native.seekData(this.fd, data, 1);
      const stop = hole < 0 ? end : Math.min(end, hole);
      this.u8.fill(0, Math.max(at, data), stop);
      at = stop;
    }
  }

  /** Tell the resident copies (written) that the engine wrote these extents' VRAM. */
  wroteExtents(extents: readonly { fd: number; offset: number; length: number }[]): void {
    const w = this.written;
    if (!w) return;
    for (const e of extents) if (e.fd === this.fd) w(e.offset, e.length);
  }

  /** [addr, addr + length) lies inside VRAM. */
  contains(addr: number, length: number): boolean {
    return Number.isSafeInteger(addr) && addr >= 0 && length >= 0 && addr + length <= this.size;
  }

  read32(addr: number): number {
    return this.dv.getUint32(addr, true);
  }

  write32(addr: number, value: number): void {
    this.dv.setUint32(addr, value >>> 0, true);
  }

  /** A 64-bit little-endian entry as a number (exact below 2^53; callers range-check). */
  read64(addr: number): number {
    return this.dv.getUint32(addr, true) + this.dv.getUint32(addr + 4, true) * 0x1_0000_0000;
  }

  write64(addr: number, value: number): void {
    this.dv.setUint32(addr, value % 0x1_0000_0000, true);
    this.dv.setUint32(addr + 4, Math.floor(value / 0x1_0000_0000), true);
  }

  close(): void {
    if (this.buf) {
      native.munmap(this.buf);
      this.buf = null;
      native.close(this.fd);
    }
  }
}
