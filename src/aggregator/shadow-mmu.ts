// Shadow GPU page tables of one VM (GPUvm's shadow_page_table.cc, hw-spec §7 and §10). The
// engine only ever walks host-owned tables in the host-reserved VRAM area, which no VM can
// address. A shadow is built from the guest's page directory and tables: every guest PTE is
// validated — VRAM targets must lie inside the VM's slice (and are shifted by the slice base),
// system-memory targets must lie in the VM's DMA map (and become bus addresses) — and anything
// else becomes non-present, so a bad access faults into the offender's own fault interrupt.
// Read-only is preserved (and added when the DMA map is read-only). Channels naming the same
// guest page directory share one shadow. PV spaces (§9 SET_PGD) are host-owned from the start
// and only change through validated MAP/UNMAP hypercalls.
import { Buffer } from 'node:buffer';
import type { Logger } from '../log.ts';
import type { Vram } from '../gpu/vram.ts';
import type { RangeAllocator } from './alloc.ts';
import type { VgpuCounters } from './counters.ts';
import { GuestRanges, busAddress, type GuestMemory } from './guest-memory.ts';
import {
  ENTRY_TARGET_SHIFT, LARGE_PAGE, LARGE_PT_ENTRIES, PD_ENTRIES, PD_SHIFT, PD_SIZE, PDE_LARGE,
  PDE_PRESENT, PDE_RESERVED, PTE_PRESENT, PTE_READ_ONLY, PTE_RESERVED, SMALL_PAGE,
  SMALL_PT_ENTRIES, TARGET_SYSMEM, TARGET_SYSMEM_NC, TARGET_VRAM, VA_LIMIT, EBUSY, EFAULT, EINVAL, ENOMEM,
} from '../gpu/spec.ts';

const TWO32 = 0x1_0000_0000;
const PDE_SPAN = 2 ** PD_SHIFT;
const SMALL_PT_SIZE = SMALL_PT_ENTRIES * 8;
const LARGE_PT_SIZE = LARGE_PT_ENTRIES * 8;
/**
 * Entries (one 4 KiB page of them) that the scans skip whole when guest and shadow are both all
 * zero, checked with a native memcmp. Nearly every entry is absent, and a per-entry loop over
 * 8192 PDEs and 32768 PTEs costs a fresh server's first context milliseconds before V8 has
 * compiled it — the first benchmark of every fv boot (docs/results.md, "Reading the modes
 * results").
 */
const SCAN_BLOCK = 512;
const ZERO_BLOCK = Buffer.alloc(SCAN_BLOCK * 8);

/** Entries [first, first + SCAN_BLOCK) of a table's bytes are all zero. */
function zeroBlock(bytes: Buffer, first: number): boolean {
  const off = first * 8;
  return bytes.compare(ZERO_BLOCK, 0, ZERO_BLOCK.length, off, off + ZERO_BLOCK.length) === 0;
}

const bytesOf = (v: Uint32Array): Buffer => Buffer.from(v.buffer, v.byteOffset, v.byteLength);

/** The VM's VRAM slice: guest VRAM address a is engine VRAM address base + a, for a < size. */
export interface Slice {
  base: number;
  size: number;
}

/** What the shadow MMU works with; owned by the vGPU. */
export interface ShadowEnv {
  vram: Vram;
  slice: Slice;
  /** The VM's system memory (DMA map table); null before a client connected. */
  guest: () => GuestMemory | null;
  busIndex: number;
  /** Host-reserved VRAM (shadow PDs and PTs come from here). */
  host: RangeAllocator;
  counters: VgpuCounters;
  log: Logger;
  /** After every rebuild: entries written and the guest PD address (tracing). */
  rebuilt?: (ptesWritten: number, pd: number) => void;
}

/** A block of guest entries as copied at the rescan that last built its shadow (ShadowMmu.seen). */
interface BlockCopy {
  bytes: Buffer;
  words: Uint32Array;
}
const BLOCK_BYTES = SCAN_BLOCK * 8;

export interface ShadowTable {
  large: boolean;
  /** Engine VRAM address of the shadow table. */
  addr: number;
}

/** One shadowed guest address space. Plain data. */
export interface ShadowSpace {
  key: string;
  /** The guest's page directory (guest view). */
  target: number;
  addr: number;
  /** Engine VRAM address of the shadow PD (host-reserved area). */
  pd: number;
  /** Shadow page tables by PDE index. */
  tables: Record<number, ShadowTable>;
  /** A flush was trapped and the shadow not yet rebuilt (lazy shadowing). */
  dirty: boolean;
  /** Host-owned (PV SET_PGD): never rebuilt from guest memory. */
  pv: boolean;
  /** Bound channels using it. */
  refs: number;
  /** PV: VRAM allocations (guest view) that MAP_RANGE ALLOC made in this space and that are still
   * allocated; SPACE_FREE frees them with the space. */
  allocs?: number[];
  /** PV: the memory of its PD was freed while channels still used it: no PV op reaches it any
   * more, and it goes when the last of them unbinds. */
  freed?: boolean;
}

export function spaceKey(target: number, addr: number): string {
  return `${target === TARGET_VRAM ? 'vram' : 'sys'}:${addr}`;
}

const isSysmem = (t: number): boolean => t === TARGET_SYSMEM || t === TARGET_SYSMEM_NC;
const NO_RANGES = new GuestRanges([]);

export class ShadowMmu {
  private readonly env: ShadowEnv;
  /** Guest key → space. */
  readonly spaces = new Map<string, ShadowSpace>();
  /** Host bytes held by this VM's shadows. */
  shadowBytes = 0;
  private pdScratch: Uint8Array | null = null;
  /**
   * Non-zero entries per SCAN_BLOCK of each shadow PD and table, by engine address: a rebuild
   * skips a block absent in the guest without reading the shadow's (half of what a rescan
   * read, from memory gone cold since the last flush). Derived state: zeros with a freshly
   * zeroed table, counted from the table when missing (after a restore). Kept for the scans of
   * non-PV spaces only: PV writes do not maintain it, and PV spaces are never rescanned.
   */
  private readonly live = new Map<number, Uint16Array>();
  /**
   * What each shadow table (by engine address) was last built from: per SCAN_BLOCK holding
   * entries, a copy of the guest's block. A shadow entry is a function of its guest entry, the
   * VM's DMA ranges and its slice only, so a block whose guest bytes still equal the copy is up
   * to date and a rescan skips it with a memcmp (a 12 MiB pinned buffer is 3072 entries that
   * every later flush rescanned). The shadow is made from the copy, never from the guest's live
   * bytes, so a guest writing its table during the scan cannot leave shadow and copy apart.
   * Blocks absent in guest and shadow need no copy (the zero-block test skips them), so the
   * copies never exceed the shadow tables they belong to (host-reserved VRAM bounds both). Derived
   * state like `live`: dropped with its table, at a restore, and all of it when the ranges or
   * the slice change (seenKey).
   */
  private readonly seen = new Map<number, (BlockCopy | undefined)[]>();
  private seenKey = '';
  private ptScratch: Uint8Array | null = null;
  private warnedNoMem = false;

  constructor(env: ShadowEnv) {
    this.env = env;
  }

  /**
   * The shadow for a guest page directory a channel is being bound to, created on first use
   * (dirty: empty until built). Built, like every dirty shadow, when the device is about to
   * translate through it (vgpu.ts syncChannel): a context that binds, maps its buffers, flushes
   * and launches is scanned once. Returns null when host memory for the shadow PD is exhausted.
   */
  acquire(target: number, addr: number): ShadowSpace | null {
    const key = spaceKey(target, addr);
    let sp = this.spaces.get(key);
    if (!sp) {
      const pd = this.allocHost(PD_SIZE);
      if (pd < 0) return null;
      sp = { key, target, addr, pd, tables: {}, dirty: true, pv: false, refs: 0 };
      this.spaces.set(key, sp);
    }
    sp.refs++;
    return sp;
  }

  /** A channel stopped using sp. Non-PV shadows without users are freed, and PV ones whose PD
   * the guest has freed. */
  release(sp: ShadowSpace): void {
    sp.refs = Math.max(0, sp.refs - 1);
    if (sp.refs === 0 && (!sp.pv || sp.freed)) this.drop(sp);
  }

  /**
   * A trapped TLB flush (MMU_FLUSH_TRIGGER) of the guest PD at pdAddr, or of every PD (null).
   * Eager shadowing rebuilds now; lazy shadowing marks the shadow dirty.
   */
  flush(pdAddr: number | null, eager: boolean): void {
    for (const sp of this.spaces.values()) {
      if (sp.pv || (pdAddr !== null && sp.addr !== pdAddr)) continue;
      if (eager) this.rebuild(sp);
      else sp.dirty = true;
    }
  }

  /** Rebuild sp if a flush left it dirty (lazy shadowing: when the device is about to translate
   * through it, the engine's `translating` event). */
  sync(sp: ShadowSpace): void {
    if (sp.dirty && !sp.pv) this.rebuild(sp);
  }

  /** Take the shadows of a checkpoint (persist.ts); what was derived from the old ones goes. */
  restore(spaces: ShadowSpace[], shadowBytes: number): void {
    this.spaces.clear();
    for (const sp of spaces) this.spaces.set(sp.key, sp);
    this.shadowBytes = shadowBytes;
    this.live.clear();
    this.seen.clear();
  }

  /** Forget every shadow (VM reset or exit). */
  reset(): void {
    for (const sp of [...this.spaces.values()]) this.drop(sp);
  }

  // ---- rebuild from guest memory ----

  /** Rescan the guest PD and its tables and bring the shadow up to date. */
  rebuild(sp: ShadowSpace): void {
    const env = this.env;
    env.counters.shadowRebuilds++;
    const written = env.counters.shadowPtesWritten;
    sp.dirty = false;
    const ranges = this.ranges();
    const key = `${env.slice.base}+${env.slice.size}:${ranges.signature}`;
    if (key !== this.seenKey) {
      this.seen.clear();
      this.seenKey = key;
    }
    this.pdScratch ??= new Uint8Array(PD_SIZE);
    const gpd = this.readGuest(sp.target, sp.addr, PD_SIZE, ranges, this.pdScratch);
    const spd = this.entries(sp.pd, PD_ENTRIES);
    const pdLive = this.liveCounts(sp.pd, PD_ENTRIES);
    const gBytes = gpd ? bytesOf(gpd) : null;
    for (let block = 0; block < PD_ENTRIES; block += SCAN_BLOCK) {
      if ((gBytes === null || zeroBlock(gBytes, block)) && pdLive[block / SCAN_BLOCK] === 0) continue;
      for (let pdi = block; pdi < block + SCAN_BLOCK; pdi++) this.rebuildPde(sp, pdi, gpd, spd, pdLive, ranges);
    }
    env.rebuilt?.(env.counters.shadowPtesWritten - written, sp.addr);
  }

  /** One PDE of a rebuild: its shadow table filled from the guest's, or the PDE cleared. */
  private rebuildPde(sp: ShadowSpace, pdi: number, gpd: Uint32Array | null, spd: Uint32Array, pdLive: Uint16Array, ranges: GuestRanges): void {
    const lo = gpd ? gpd[2 * pdi]! : 0;
    // Fast path: absent in both (a shadow table exists only behind a present shadow PDE), as
    // nearly all of the 8192 PDEs are.
    if ((lo & PDE_PRESENT) === 0 && spd[2 * pdi] === 0 && spd[2 * pdi + 1] === 0) return;
    const hi = gpd ? gpd[2 * pdi + 1]! : 0;
    let pde = 0;
    const target = (lo >>> ENTRY_TARGET_SHIFT) & 3;
    if ((lo & PDE_PRESENT) !== 0 && (lo & PDE_RESERVED) === 0 && target !== 1) {
      const large = (lo & PDE_LARGE) !== 0;
      const n = large ? LARGE_PT_ENTRIES : SMALL_PT_ENTRIES;
      const ptAddr = ((lo & 0xfffff000) >>> 0) + hi * TWO32;
      this.ptScratch ??= new Uint8Array(SMALL_PT_SIZE);
      const gpt = this.readGuest(target, ptAddr, n * 8, ranges, this.ptScratch);
      if (gpt) {
        const t = this.table(sp, pdi, large);
        if (t) {
          this.fillTable(t, gpt, ranges);
          pde = t.addr + PDE_PRESENT + (large ? PDE_LARGE : 0);
        }
      }
    }
    if (pde === 0 && sp.tables[pdi]) this.dropTable(sp, pdi);
    this.put(spd, pdi, pde, pdLive);
  }

  /** Shadow every entry of one guest table into t. */
  private fillTable(t: ShadowTable, gpt: Uint32Array, ranges: GuestRanges): void {
    const n = t.large ? LARGE_PT_ENTRIES : SMALL_PT_ENTRIES;
    const spt = this.entries(t.addr, n);
    const live = this.liveCounts(t.addr, n);
    let seen = this.seen.get(t.addr);
    if (!seen) this.seen.set(t.addr, (seen = []));
    const gBytes = bytesOf(gpt);
    const page = t.large ? LARGE_PAGE : SMALL_PAGE;
    for (let block = 0, b = 0; block < n; block += SCAN_BLOCK, b++) {
      const off = block * 8;
      if (live[b] === 0 && zeroBlock(gBytes, block)) {
        seen[b] = undefined; // absent in both: no copy needed (a kept one would still be right)
        continue;
      }
      let copy = seen[b];
      if (copy && gBytes.compare(copy.bytes, 0, BLOCK_BYTES, off, off + BLOCK_BYTES) === 0) continue;
      if (!copy) {
        const bytes = Buffer.allocUnsafeSlow(BLOCK_BYTES);
        seen[b] = copy = { bytes, words: new Uint32Array(bytes.buffer, bytes.byteOffset, SCAN_BLOCK * 2) };
      }
      gBytes.copy(copy.bytes, 0, off, off + BLOCK_BYTES);
      const w = copy.words;
      for (let j = 0; j < SCAN_BLOCK; j++) {
        const i = block + j;
        const lo = w[2 * j]!;
        if ((lo & PTE_PRESENT) === 0) {
          if (spt[2 * i] !== 0 || spt[2 * i + 1] !== 0) this.put(spt, i, 0, live); // gone from the guest
          continue;
        }
        // A run: the entries that continue this one (same high word and flags, next frame: a
        // low word of lo + k·page, which no carry out of bit 31 can match) are validated as one
        // range where the whole of it is the VM's, writable where it is sysmem.
        const hi = w[2 * j + 1]!;
        let more = 0;
        while (j + more + 1 < SCAN_BLOCK && w[2 * (j + more + 1)] === lo + (more + 1) * page && w[2 * (j + more + 1) + 1] === hi) more++;
        const v = this.shadowPte(lo, hi, t.large, ranges);
        if (more > 0 && v !== 0 && this.runValid(lo, hi, (more + 1) * page, ranges)) {
          this.putRun(spt, i, more + 1, v, page, live);
          j += more;
        } else {
          this.put(spt, i, v, live);
        }
      }
    }
  }

  /** Entries i … i + n − 1 = v, v + step, … (put, for a run). */
  private putRun(view: Uint32Array, i: number, n: number, v: number, step: number, live: Uint16Array): void {
    let lo = v % TWO32;
    let hi = (v - lo) / TWO32;
    let written = 0;
    for (let k = 0; k < n; k++, lo += step) {
      if (lo >= TWO32) {
        lo -= TWO32;
        hi++;
      }
      const e = 2 * (i + k);
      if (view[e] === lo && view[e + 1] === hi) continue;
      if (view[e] === 0 && view[e + 1] === 0) live[((i + k) / SCAN_BLOCK) | 0]!++;
      view[e] = lo;
      view[e + 1] = hi;
      written++;
    }
    this.env.counters.shadowPtesWritten += written;
  }

  /** Every page of [addr(lo, hi), + bytes) shadows as the first one does, shifted: inside the
   * slice (VRAM), or in one writable stretch of the VM's DMA ranges (sysmem). */
  private runValid(lo: number, hi: number, bytes: number, ranges: GuestRanges): boolean {
    const target = (lo >>> ENTRY_TARGET_SHIFT) & 3;
    const addr = ((lo & 0xfffff000) >>> 0) + hi * TWO32;
    if (target === TARGET_VRAM) return addr + bytes <= this.env.slice.size;
    return ranges.access(addr, bytes) === 2;
  }

  /**
   * The shadow value (as a number < 2^53) of a guest PTE, or 0 (non-present) when the guest
   * entry is absent, malformed, or names memory the VM does not own.
   */
  shadowPte(lo: number, hi: number, large: boolean, ranges: GuestRanges): number {
    if ((lo & PTE_PRESENT) === 0) return 0;
    const target = (lo >>> ENTRY_TARGET_SHIFT) & 3;
    if ((lo & PTE_RESERVED) !== 0 || target === 1) return 0;
    const page = large ? LARGE_PAGE : SMALL_PAGE;
    const addr = ((lo & 0xfffff000) >>> 0) + hi * TWO32;
    if (large && addr % LARGE_PAGE !== 0) return 0;
    let flags = PTE_PRESENT | (lo & PTE_READ_ONLY) | (target << ENTRY_TARGET_SHIFT);
    if (target === TARGET_VRAM) {
      const slice = this.env.slice;
      if (!(addr + page <= slice.size)) return 0;
      return slice.base + addr + flags;
    }
    const a = ranges.access(addr, page);
    if (a === 0) return 0;
    if (a === 1) flags |= PTE_READ_ONLY;
    return busAddress(this.env.busIndex, addr) + flags;
  }

  // ---- PV (hw-spec §9): host-owned spaces ----

  /** SET_PGD: declare the guest PD at addr (VRAM, guest view) PV-managed. Returns 0 or an errno. */
  pvSetPgd(addr: number): number {
    if (!Number.isSafeInteger(addr) || addr < 0 || addr % SMALL_PAGE !== 0 || addr + PD_SIZE > this.env.slice.size) return EINVAL;
    const key = spaceKey(TARGET_VRAM, addr);
    const sp = this.spaces.get(key);
    if (sp) {
      // The PD of a space the guest freed while a channel still runs on it: that channel must
      // unbind first (its shadow cannot change under it).
      if (sp.freed) return EBUSY;
      if (sp.pv) return 0;
      // Take over an existing shadow: start from an empty host-owned table set.
      for (const k of Object.keys(sp.tables)) this.dropTable(sp, Number(k));
      this.env.vram.u8.fill(0, sp.pd, sp.pd + PD_SIZE);
      this.live.delete(sp.pd);
      sp.pv = true;
      sp.dirty = false;
      return 0;
    }
    const pd = this.allocHost(PD_SIZE);
    if (pd < 0) return ENOMEM;
    this.spaces.set(key, { key, target: TARGET_VRAM, addr, pd, tables: {}, dirty: false, pv: true, refs: 0 });
    return 0;
  }

  /** The PV space for a PD address, or null. */
  pvSpace(addr: number): ShadowSpace | null {
    const sp = this.spaces.get(spaceKey(TARGET_VRAM, addr));
    return sp && sp.pv && !sp.freed ? sp : null;
  }

  /**
   * The guest freed VRAM [addr, addr + size): every PV space whose PD lies there ends (the PD is
   * the space's identity; without this a context's host tables outlived it until the VM reset).
   * A space still in use by a bound channel is kept, unreachable by PV ops, until it unbinds.
   */
  pvFreed(addr: number, size: number): void {
    for (const sp of [...this.spaces.values()]) {
      if (!sp.pv || sp.freed || sp.target !== TARGET_VRAM || sp.addr < addr || sp.addr >= addr + size) continue;
      if (sp.refs === 0) this.drop(sp);
      else sp.freed = true;
    }
  }


  /**
   * MAP one 4 KiB page in a PV space, validated like a shadow PTE. Returns 0 or an errno:
   * EINVAL for a malformed VA or PTE, EFAULT for memory the VM does not own, ENOMEM when no
   * host memory is left for the page table.
   */
  pvMap(sp: ShadowSpace, va: number, lo: number, hi: number, ranges: GuestRanges): number {
    if (!Number.isSafeInteger(va) || va < 0 || va >= VA_LIMIT || va % SMALL_PAGE !== 0) return EINVAL;
    const target = (lo >>> ENTRY_TARGET_SHIFT) & 3;
    if ((lo & PTE_PRESENT) === 0 || (lo & PTE_RESERVED) !== 0 || target === 1) return EINVAL;
    const v = this.shadowPte(lo, hi, false, ranges);
    if (v === 0) return EFAULT;
    const t = this.pvTable(sp, Math.floor(va / PDE_SPAN));
    if (typeof t === 'number') return t;
    this.put(this.entries(t.addr, SMALL_PT_ENTRIES), (va % PDE_SPAN) / SMALL_PAGE, v);
    return 0;
  }

  /** The small-page table of region pdi of a PV space, made (with its PDE) if missing; or an
   * errno: EINVAL over a large-page region, ENOMEM when the host area is full. */
  private pvTable(sp: ShadowSpace, pdi: number): ShadowTable | number {
    const existing = sp.tables[pdi];
    if (existing && existing.large) return EINVAL;
    const t = existing ?? this.table(sp, pdi, false);
    if (!t) return ENOMEM;
    if (!existing) this.put(this.entries(sp.pd, PD_ENTRIES), pdi, t.addr + PDE_PRESENT);
    return t;
  }

  /**
   * MAP `n` pages of a PV space from `va` on to VRAM from the guest PTE (lo, hi) on, page i at
   * its address + i × 4 KiB (MAP_RANGE CONTIGUOUS, VRAM target): the slice is checked once for
   * the whole range and each 128 MiB region's table looked up once, instead of per page (a
   * 24 MiB buffer is 6144 pages). Same outcome as n pvMap calls that stop at the first bad page:
   * returns the errno (0 if all went in) and leaves the pages applied in `pvApplied`.
   */
  pvMapVramRange(sp: ShadowSpace, va: number, n: number, lo: number, hi: number): number {
    this.pvApplied = 0;
    if (!Number.isSafeInteger(va) || va < 0 || va % SMALL_PAGE !== 0 || va + n * SMALL_PAGE > VA_LIMIT) return EINVAL;
    if ((lo & PTE_PRESENT) === 0 || (lo & PTE_RESERVED) !== 0 || ((lo >>> ENTRY_TARGET_SHIFT) & 3) !== TARGET_VRAM) return EINVAL;
    const addr = ((lo & 0xfffff000) >>> 0) + hi * TWO32;
    const slice = this.env.slice;
    // pages whose address + 4 KiB stays inside the slice; the first one past it is EFAULT
    const fit = addr + SMALL_PAGE <= slice.size ? Math.min(n, Math.floor((slice.size - addr) / SMALL_PAGE)) : 0;
    const flags = PTE_PRESENT | (lo & PTE_READ_ONLY) | (TARGET_VRAM << ENTRY_TARGET_SHIFT);
    const first = slice.base + addr + flags;
    let done = 0;
    while (done < fit) {
      const at = va + done * SMALL_PAGE;
      const t = this.pvTable(sp, Math.floor(at / PDE_SPAN));
      if (typeof t === 'number') return t;
      const view = this.entries(t.addr, SMALL_PT_ENTRIES);
      const i0 = (at % PDE_SPAN) / SMALL_PAGE;
      const count = Math.min(fit - done, SMALL_PT_ENTRIES - i0);
      let written = 0;
      for (let i = 0; i < count; i++) {
        const v = first + (done + i) * SMALL_PAGE;
        const vlo = v % TWO32;
        const vhi = (v - vlo) / TWO32;
        const k = 2 * (i0 + i);
        if (view[k] === vlo && view[k + 1] === vhi) continue;
        view[k] = vlo;
        view[k + 1] = vhi;
        written++;
      }
      this.env.counters.shadowPtesWritten += written;
      done += count;
      this.pvApplied = done;
    }
    return fit < n ? EFAULT : 0;
  }

  /** Pages the last pvMapVramRange applied. */
  pvApplied = 0;

  /** UNMAP one page of a PV space. Returns 0 or EINVAL. */
  pvUnmap(sp: ShadowSpace, va: number): number {
    if (!Number.isSafeInteger(va) || va < 0 || va >= VA_LIMIT || va % SMALL_PAGE !== 0) return EINVAL;
    const t = sp.tables[Math.floor(va / PDE_SPAN)];
    if (!t) return 0;
    const idx = (va % PDE_SPAN) / (t.large ? LARGE_PAGE : SMALL_PAGE);
    this.put(this.entries(t.addr, t.large ? LARGE_PT_ENTRIES : SMALL_PT_ENTRIES), Math.floor(idx), 0);
    return 0;
  }

  /**
   * UNMAP pages [va, va + pages × 4 KiB) of a PV space (PV 2 UNMAP_RANGE): 128 MiB regions
   * without a table are skipped whole, so the cost is bounded by the tables the VM owns.
   * Returns 0 or EINVAL (range not 4 KiB aligned or beyond the VA space).
   */
  pvUnmapRange(sp: ShadowSpace, va: number, pages: number): number {
    const end = va + pages * SMALL_PAGE;
    if (!Number.isSafeInteger(va) || va < 0 || va % SMALL_PAGE !== 0 || end > VA_LIMIT) return EINVAL;
    for (let a = va; a < end;) {
      const pdi = Math.floor(a / PDE_SPAN);
      const next = Math.min(end, (pdi + 1) * PDE_SPAN);
      const t = sp.tables[pdi];
      if (t) {
        const size = t.large ? LARGE_PAGE : SMALL_PAGE;
        const view = this.entries(t.addr, t.large ? LARGE_PT_ENTRIES : SMALL_PT_ENTRIES);
        for (let x = a; x < next; x += SMALL_PAGE) this.put(view, Math.floor((x % PDE_SPAN) / size), 0);
      }
      a = next;
    }
    return 0;
  }

  /** A snapshot of the VM's DMA map for validating a batch of entries. */
  ranges(): GuestRanges {
    const mem = this.env.guest();
    return mem ? new GuestRanges(mem.describe()) : NO_RANGES;
  }

  // ---- host memory and entry helpers ----

  /** The shadow table of PDE pdi with the given page size, allocating (zeroed) if needed. */
  private table(sp: ShadowSpace, pdi: number, large: boolean): ShadowTable | null {
    const t = sp.tables[pdi];
    if (t && t.large === large) return t;
    if (t) this.dropTable(sp, pdi);
    const addr = this.allocHost(large ? LARGE_PT_SIZE : SMALL_PT_SIZE);
    if (addr < 0) return null;
    const nt: ShadowTable = { large, addr };
    sp.tables[pdi] = nt;
    return nt;
  }

  private dropTable(sp: ShadowSpace, pdi: number): void {
    const t = sp.tables[pdi];
    if (!t) return;
    delete sp.tables[pdi];
    this.freeHost(t.addr);
  }

  private drop(sp: ShadowSpace): void {
    for (const k of Object.keys(sp.tables)) this.dropTable(sp, Number(k));
    this.freeHost(sp.pd);
    this.spaces.delete(sp.key);
  }

  /** Zeroed host VRAM, or −1 (logged once) when the host area is full. */
  private allocHost(size: number): number {
    const a = this.env.host.alloc(size, SMALL_PAGE);
    if (a === null) {
      if (!this.warnedNoMem) {
        this.warnedNoMem = true;
        this.env.log.warn({ size, inUse: this.env.host.inUse }, 'host-reserved VRAM exhausted: shadow entries left non-present');
      }
      return -1;
    }
    this.env.vram.u8.fill(0, a, a + size);
    this.live.set(a, new Uint16Array(size / 8 / SCAN_BLOCK));
    this.shadowBytes += size;
    return a;
  }

  private freeHost(addr: number): void {
    this.shadowBytes -= this.env.host.sizeOf(addr);
    this.env.host.free(addr);
    this.live.delete(addr);
    this.seen.delete(addr);
  }

  /** The live-entry counts of the table (or PD) at addr, counted from it when missing. */
  private liveCounts(addr: number, entries: number): Uint16Array {
    let c = this.live.get(addr);
    if (!c) {
      c = new Uint16Array(entries / SCAN_BLOCK);
      const view = this.entries(addr, entries);
      for (let i = 0; i < entries; i++) if (view[2 * i] !== 0 || view[2 * i + 1] !== 0) c[(i / SCAN_BLOCK) | 0]!++;
      this.live.set(addr, c);
    }
    return c;
  }

  /** 64-bit entries at an engine VRAM address as [lo, hi, lo, hi, …] (a live view). */
  private entries(addr: number, count: number): Uint32Array {
    const u8 = this.env.vram.u8;
    return new Uint32Array(u8.buffer, u8.byteOffset + addr, count * 2);
  }

  /** Write entry i = v (a number < 2^53) if it changed; counts the write (and, given the
   * table's live counts, an entry that became zero or non-zero). */
  private put(view: Uint32Array, i: number, v: number, live?: Uint16Array): void {
    const lo = v % TWO32;
    const hi = (v - lo) / TWO32;
    if (view[2 * i] === lo && view[2 * i + 1] === hi) return;
    if (live) {
      const was = view[2 * i] !== 0 || view[2 * i + 1] !== 0;
      if (was !== (v !== 0)) live[(i / SCAN_BLOCK) | 0]! += v !== 0 ? 1 : -1;
    }
    view[2 * i] = lo;
    view[2 * i + 1] = hi;
    this.env.counters.shadowPtesWritten++;
  }

  /**
   * Guest table bytes as 32-bit words: a live view of the slice for VRAM, a copy (into
   * scratch) for system memory. null if the table is not entirely inside memory the VM owns.
   */
  private readGuest(target: number, addr: number, len: number, ranges: GuestRanges, scratch: Uint8Array): Uint32Array | null {
    if (!Number.isSafeInteger(addr) || addr < 0 || addr % 8 !== 0) return null;
    if (target === TARGET_VRAM) {
      const slice = this.env.slice;
      if (addr + len > slice.size) return null;
      const u8 = this.env.vram.u8;
      return new Uint32Array(u8.buffer, u8.byteOffset + slice.base + addr, len / 4);
    }
    if (!isSysmem(target) || ranges.access(addr, len) === 0) return null;
    const mem = this.env.guest();
    if (!mem) return null;
    const buf = scratch.subarray(0, len);
    if (mem.read(addr, buf) !== null) return null;
    return new Uint32Array(buf.buffer, buf.byteOffset, len / 4);
  }
}
