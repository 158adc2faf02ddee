// The MMU of hw-spec §7: a 2-level page-table walker that turns a VA range into host extents
// (VRAM memfd ranges and bus-resolver extents), plus the TLB-flush and fault registers (§3.6).
// Translation always completes before any data moves, so a fault has no side effects.
import type { RegisterInfo } from './regs.ts';
import type { Fault, FaultRecord, GpuCore } from './core.ts';
import { pushExtent, readExtents, writeExtents, type Extent } from './bus.ts';
import {
  ENTRY_TARGET_SHIFT, FAULT, LARGE_PAGE, LARGE_SHIFT, MMU_FAULT_ADDR_HI,
  MMU_FAULT_ADDR_LO, MMU_FAULT_CHID, MMU_FAULT_INFO, MMU_FAULT_STATUS, MMU_FAULT_STATUS_OVERFLOW,
  MMU_FAULT_STATUS_VALID, MMU_FLUSH_ALL_PDB, MMU_FLUSH_GO, MMU_FLUSH_PDB, MMU_FLUSH_STATUS,
  MMU_FLUSH_STATUS_VALUE, MMU_FLUSH_TRIGGER, PD_SHIFT, PDE_LARGE, PDE_PRESENT, PDE_RESERVED, PTE_PRESENT, PTE_RESERVED,
  PTE_READ_ONLY, SMALL_PAGE, SMALL_SHIFT, TARGET_SYSMEM, TARGET_SYSMEM_NC, TARGET_VRAM, VA_LIMIT,
} from './spec.ts';

export type { Fault, FaultRecord };

const TWO32 = 0x1_0000_0000;
const PDE_SPAN = 2 ** PD_SHIFT;

/** A channel's address space: where its page directory is and how far VAs go. */
export interface AddressSpace {
  pdTarget: number;
  pdAddr: number;
  /** Last valid VA (inclusive). */
  limit: number;
}

export function isSysmem(target: number): boolean {
  return target === TARGET_SYSMEM || target === TARGET_SYSMEM_NC;
}

const page4k = (va: number) => va - (va % SMALL_PAGE);

export class Mmu {
  private core: GpuCore;
  /** Flush requests seen (metrics). */
  flushes = 0;
  /** Called on a flush: PD address (or null = all address spaces). */
  onFlush: (pdAddr: number | null) => void = () => {};
  /** vramWords' cached view. */
  private words: Uint32Array | null = null;

  constructor(core: GpuCore) {
    this.core = core;
  }

  /** Extents of a physical range in VRAM or system memory, or null if it is not all there. */
  physExtents(target: number, addr: number, length: number, write: boolean): Extent[] | null {
    if (target === TARGET_VRAM) {
      return this.core.vram.contains(addr, length) ? [{ fd: this.core.vram.fd, offset: addr, length }] : null;
    }
    if (isSysmem(target)) return this.core.bus.resolve(addr, length, write);
    return null;
  }

  /** Read a physical range (VRAM or sysmem) into a fresh buffer, or null. */
  physRead(target: number, addr: number, length: number): Uint8Array | null {
    if (target === TARGET_VRAM) {
      return this.core.vram.contains(addr, length) ? this.core.vram.u8.subarray(addr, addr + length) : null;
    }
    const ext = this.physExtents(target, addr, length, false);
    if (!ext) return null;
    const buf = new Uint8Array(length);
    return readExtents(this.core.vram, ext, buf) ? buf : null;
  }

  /** Write bytes to a physical range (VRAM or sysmem); false if it is not all there. */
  physWrite(target: number, addr: number, bytes: Uint8Array): boolean {
    if (target === TARGET_VRAM) {
      if (!this.core.vram.contains(addr, bytes.length)) return false;
      this.core.vram.u8.set(bytes, addr);
      this.core.vram.written?.(addr, bytes.length);
      return true;
    }
    const ext = this.physExtents(target, addr, bytes.length, true);
    return ext !== null && writeExtents(this.core.vram, ext, bytes);
  }

  /**
   * Translate [va, va + length) for a read or write. Appends extents (merged when contiguous)
   * to `out` and returns null, or returns the fault (out may then hold a partial list).
   */
  translate(as: AddressSpace, va: number, length: number, write: boolean, out: Extent[]): Fault | null {
    if (length === 0) return null;
    const end = va + length - 1; // inclusive
    const top = Math.min(VA_LIMIT - 1, as.limit);
    if (!Number.isSafeInteger(va) || va < 0 || length < 0 || end > top) {
      const bad = Number.isSafeInteger(va) && va >= 0 && va <= top ? top + 1 : Math.max(0, Number.isSafeInteger(va) ? va : 0);
      return { reason: FAULT.VA_OUT_OF_RANGE, va: page4k(bad), write };
    }
    // Read once: callers may pass a live channel (cp.ts), so the walk sees one snapshot.
    const pdTarget = as.pdTarget;
    const pdAddr = as.pdAddr;
    const vram = this.core.vram;
    // Pending run of physically contiguous sysmem pages, resolved in one call (flushRun).
    // No closures: this runs per binding per launch.
    let runBus = 0;
    let runLen = 0;
    let runVa = 0;

    let cur = va;
    while (cur <= end) {
      const pdi = Math.floor(cur / PDE_SPAN);
      const pdeAddr = pdAddr + pdi * 8;
      let pdeLo: number;
      let pdeHi: number;
      if (pdTarget === TARGET_VRAM) {
        if (!vram.contains(pdeAddr, 8) || (pdeAddr & 7) !== 0) {
          return this.fail(FAULT.BAD_PAGE_TABLE, page4k(cur), write, out, runBus, runLen, runVa);
        }
        const w = this.vramWords();
        pdeLo = w[pdeAddr / 4]!;
        pdeHi = w[pdeAddr / 4 + 1]!;
      } else {
        const pde = this.readSysEntries(pdTarget, pdeAddr, 1);
        if (!pde) return this.fail(FAULT.BAD_PAGE_TABLE, page4k(cur), write, out, runBus, runLen, runVa);
        pdeLo = pde[0]!;
        pdeHi = pde[1]!;
      }
      if ((pdeLo & PDE_PRESENT) === 0) return this.fail(FAULT.PDE_NOT_PRESENT, page4k(cur), write, out, runBus, runLen, runVa);
      const ptTarget = (pdeLo >>> ENTRY_TARGET_SHIFT) & 3;
      if ((pdeLo & PDE_RESERVED) !== 0 || ptTarget === 1) {
        return this.fail(FAULT.BAD_PAGE_TABLE, page4k(cur), write, out, runBus, runLen, runVa);
      }
      const large = (pdeLo & PDE_LARGE) !== 0;
      const shift = large ? LARGE_SHIFT : SMALL_SHIFT;
      const pageSize = large ? LARGE_PAGE : SMALL_PAGE;
      const ptAddr = ((pdeLo & 0xfffff000) >>> 0) + pdeHi * TWO32;
      const pdeBase = pdi * PDE_SPAN;
      const regionEnd = Math.min(end, pdeBase + PDE_SPAN - 1);
      const first = Math.floor((cur - pdeBase) / pageSize);
      const last = Math.floor((regionEnd - pdeBase) / pageSize);
      // PTE k of [first, last] is ptes[p0 + 2k] (lo), ptes[p0 + 2k + 1] (hi). VRAM tables are read
      // in place through one cached view; p0 stays an int32 (V8 indexes typed arrays faster with
      // one than with a double), so tables above 8 GiB get a view of their own. Sysmem tables are copied.
      const pteAddr = ptAddr + first * 8;
      let ptes: Uint32Array;
      let p0: number;
      if (ptTarget === TARGET_VRAM) {
        if (!vram.contains(pteAddr, (last - first + 1) * 8) || (pteAddr & 7) !== 0) {
          return this.fail(FAULT.BAD_PAGE_TABLE, page4k(cur), write, out, runBus, runLen, runVa);
        }
        if (pteAddr < 2 ** 33) {
          ptes = this.vramWords();
          p0 = (pteAddr / 4) | 0;
        } else {
          ptes = new Uint32Array(vram.u8.buffer, vram.u8.byteOffset + pteAddr, (last - first + 1) * 2);
          p0 = 0;
        }
      } else {
        const t = this.readSysEntries(ptTarget, pteAddr, last - first + 1);
        if (!t) return this.fail(FAULT.BAD_PAGE_TABLE, page4k(cur), write, out, runBus, runLen, runVa);
        ptes = t;
        p0 = 0;
      }

      for (let i = 0; i <= last - first; i++) {
        const pageVa = pdeBase + (first + i) * pageSize;
        const lo = ptes[p0 + 2 * i]!;
        const hi = ptes[p0 + 2 * i + 1]!;
        const from = Math.max(cur, pageVa);
        const failVa = page4k(from);
        if ((lo & PTE_PRESENT) === 0) return this.fail(FAULT.PTE_NOT_PRESENT, failVa, write, out, runBus, runLen, runVa);
        const target = (lo >>> ENTRY_TARGET_SHIFT) & 3;
        const addrLo = (lo & 0xfffff000) >>> 0;
        if ((lo & PTE_RESERVED) !== 0 || target === 1 || (large && (addrLo & (LARGE_PAGE - 1)) !== 0)) {
          return this.fail(FAULT.BAD_PTE, failVa, write, out, runBus, runLen, runVa);
        }
        if (write && (lo & PTE_READ_ONLY) !== 0) return this.fail(FAULT.WRITE_TO_READ_ONLY, failVa, write, out, runBus, runLen, runVa);
        // Following PTEs that continue this one (same flags and high word, next frame: a low
        // word equal to lo + k·pageSize, which no carry out of bit 31 can match) passed the
        // same checks: the run is one extent, bounds-checked once. A 1024³ GEMM's 12 MiB are
        // 3072 PTEs per launch; walked one by one in JS they were most of the launch's translation
        // (docs/results.md, "Reading the modes results").
        const stop = p0 + 2 * (last - first); // index of the region's last PTE
        let k = p0 + 2 * i + 2;
        let want = lo + pageSize;
        while (k <= stop && ptes[k] === want && ptes[k + 1] === hi) {
          k += 2;
          want += pageSize;
        }
        let more = (k - (p0 + 2 * i + 2)) / 2;
        const to = Math.min(regionEnd, pageVa + (more + 1) * pageSize - 1);
        let n = to - from + 1;
        const phys = addrLo + hi * TWO32 + (from - pageVa);
        if (more > 0 && target === TARGET_VRAM && !vram.contains(phys, n)) {
          // The run leaves VRAM: stop it at its last whole page inside; the walk faults on the
          // next page at its own VA.
          const inside = Math.floor((vram.size - addrLo - hi * TWO32) / pageSize);
          more = Math.max(0, Math.min(more, inside - 1));
          n = Math.min(regionEnd, pageVa + (more + 1) * pageSize - 1) - from + 1;
        }
        i += more;
        if (target === TARGET_VRAM) {
          if (!vram.contains(phys, n)) return this.fail(FAULT.VRAM_OUT_OF_RANGE, failVa, write, out, runBus, runLen, runVa);
          if (runLen > 0) {
            const f = this.flushRun(runBus, runLen, runVa, write, out);
            if (f) return f;
            runLen = 0;
          }
          pushExtent(out, vram.fd, phys, n);
        } else {
          if (!Number.isSafeInteger(phys + n)) return this.fail(FAULT.SYSMEM_UNMAPPED, failVa, write, out, runBus, runLen, runVa);
          if (runLen > 0 && runBus + runLen === phys) {
            runLen += n;
          } else {
            if (runLen > 0) {
              const f = this.flushRun(runBus, runLen, runVa, write, out);
              if (f) return f;
            }
            runBus = phys;
            runLen = n;
            runVa = from;
          }
        }
      }
      cur = regionEnd + 1;
    }
    return runLen > 0 ? this.flushRun(runBus, runLen, runVa, write, out) : null;
  }

  /** Resolve a pending sysmem run (len > 0) into out, or its fault at the first unmapped page. */
  private flushRun(bus: number, len: number, va: number, write: boolean, out: Extent[]): Fault | null {
    const ext = this.core.bus.resolve(bus, len, write);
    if (!ext) return { reason: FAULT.SYSMEM_UNMAPPED, va: this.firstUnmapped(bus, len, va, write), write };
    for (const e of ext) pushExtent(out, e.fd, e.offset, e.length, e.mem, e.memOffset);
    return null;
  }

  /** Pages fault in VA order (hw-spec §7): a pending sysmem run lies below the failing page. */
  private fail(reason: Fault['reason'], at: number, write: boolean, out: Extent[], bus: number, len: number, va: number): Fault {
    return (len > 0 ? this.flushRun(bus, len, va, write, out) : null) ?? { reason, va: at, write };
  }

  /** Error path only: the VA of the first page of a sysmem run that does not resolve. */
  private firstUnmapped(bus: number, len: number, va: number, write: boolean): number {
    let off = 0;
    while (off < len) {
      const n = Math.min(len - off, SMALL_PAGE - ((va + off) % SMALL_PAGE));
      if (!this.core.bus.resolve(bus + off, n, write)) return page4k(va + off);
      off += n;
    }
    return page4k(va);
  }

  /** All of VRAM as 32-bit words, indexed by byte address / 4 (entries are 8-byte aligned). */
  private vramWords(): Uint32Array {
    const u8 = this.core.vram.u8;
    let w = this.words;
    // Remade for another mapping; a detached one (VRAM closed) makes the constructor throw, as
    // the per-read views did.
    if (w === null || w.buffer !== u8.buffer || w.length === 0) {
      w = this.words = new Uint32Array(u8.buffer, u8.byteOffset, Math.floor(u8.byteLength / 4));
    }
    return w;
  }

  /** `count` 64-bit entries at a system-memory address, copied, as [lo, hi, lo, hi, …], or null. */
  private readSysEntries(target: number, addr: number, count: number): Uint32Array | null {
    if (!isSysmem(target) || (addr & 7) !== 0) return null;
    const buf = this.physRead(target, addr, count * 8);
    return buf ? new Uint32Array(buf.buffer, buf.byteOffset, count * 2) : null;
  }
}

/** The fault-reporting state (first fault wins until software clears VALID). */
export function recordFault(core: GpuCore, f: FaultRecord): void {
  const regs = core.regs;
  const status = regs.get(MMU_FAULT_STATUS);
  if (status & MMU_FAULT_STATUS_VALID) {
    regs.set(MMU_FAULT_STATUS, status | MMU_FAULT_STATUS_OVERFLOW);
    return;
  }
  regs.set(MMU_FAULT_ADDR_LO, f.va % TWO32);
  regs.set(MMU_FAULT_ADDR_HI, Math.floor(f.va / TWO32));
  regs.set(MMU_FAULT_CHID, f.chid);
  regs.set(MMU_FAULT_INFO, (f.reason & 0xff) | (f.write ? 1 << 8 : 0) | ((f.unit & 7) << 12));
  regs.set(MMU_FAULT_STATUS, status | MMU_FAULT_STATUS_VALID);
}

export function mmuRegisters(core: GpuCore, mmu: Mmu): RegisterInfo[] {
  const RO = 0xffffffff;
  return [
    { addr: MMU_FLUSH_STATUS, name: 'MMU_FLUSH_STATUS', reset: MMU_FLUSH_STATUS_VALUE, ro: RO },
    { addr: MMU_FLUSH_PDB, name: 'MMU_FLUSH_PDB', reset: 0 },
    {
      addr: MMU_FLUSH_TRIGGER, name: 'MMU_FLUSH_TRIGGER', reset: 0, ro: RO,
      postWrite: (_s, w) => {
        if ((w & MMU_FLUSH_GO) === 0) return;
        mmu.flushes++;
        mmu.onFlush(w & MMU_FLUSH_ALL_PDB ? null : core.regs.get(MMU_FLUSH_PDB) * 256);
      },
    },
    { addr: MMU_FAULT_ADDR_LO, name: 'MMU_FAULT_ADDR_LO', reset: 0, ro: RO },
    { addr: MMU_FAULT_ADDR_HI, name: 'MMU_FAULT_ADDR_HI', reset: 0, ro: RO },
    { addr: MMU_FAULT_CHID, name: 'MMU_FAULT_CHID', reset: 0, ro: RO },
    { addr: MMU_FAULT_INFO, name: 'MMU_FAULT_INFO', reset: 0, ro: RO },
    { addr: MMU_FAULT_STATUS, name: 'MMU_FAULT_STATUS', reset: 0, ro: ~3, w1c: 3 },
  ];
}
