// The PV hypercall page of hw-spec §9 (GPUvm's BAR4, CPFL/gxen tools/a3/context_bar4.cc): the
// guest registers a shared area of 4 KiB slots in its RAM, writes a call into a slot and the
// slot index into PV_CALL; the call is complete when the write returns. MAP/UNMAP batches (the
// multicall) go straight into host-owned shadow tables, each entry validated like a shadow PTE,
// so nothing needs rescanning at flush time. PV 2 (hw-spec 1.2) adds whole ranges per call:
// MAP_RANGE (one PTE for a contiguous range, or a PTE array running on through the following
// slots) and UNMAP_RANGE, either with an optional flush. PV 4 (hw-spec 1.4) makes an address
// space one call each way: SPACE_NEW allocates and declares a PD, SPACE_FREE frees it with every
// buffer MAP_RANGE ALLOC made in it. Freeing a PD's memory ends its space (its host tables).
import type { Logger } from '../log.ts';
import { isPow2, type RangeAllocator } from './alloc.ts';
import type { VgpuCounters } from './counters.ts';
import type { GuestMemory } from './guest-memory.ts';
import type { ShadowMmu } from './shadow-mmu.ts';
import type { ViewRow } from './regview.ts';
import {
  ENTRY_TARGET_SHIFT, PD_SIZE, PV_AREA_HI, PV_AREA_LO, PV_AREA_SLOTS, PV_BATCH_MAX, PV_CALL, PV_MAGIC, PV_MAGIC_VALUE,
  PV_MAX_SLOTS, PV_OP, PV_RANGE, PV_RANGE_MAX, PV_SLOT, PV_SLOT_SIZE, PV_STATUS, PV_VERSION,
  PV_VERSION_VALUE, TARGET_VRAM, EBUSY, EFAULT, EINVAL, ENOMEM, ENOSYS,
} from '../gpu/spec.ts';

const RO = 0xffffffff;
const TWO32 = 0x1_0000_0000;

export interface PvEnv {
  mmu: ShadowMmu;
  guest: () => GuestMemory | null;
  /** The VM's VRAM allocator (guest-view addresses) for MEM_ALLOC/MEM_FREE. */
  vramAlloc: RangeAllocator;
  counters: VgpuCounters;
  log: Logger;
  /** Register accessors of the vGPU's view (stored values). */
  reg(addr: number): number;
  setReg(addr: number, value: number): void;
  /** After every answered call (tracing). */
  called?: (op: number, count: number, result: number) => void;
}

/** Registered shared area (plain state). */
export interface PvState {
  area: number;
  slots: number;
}

interface Call {
  dv: DataView;
  count: number;
  flags: number;
  arg0: number;
  arg1: number;
  /** The area from this slot on, `bytes` long (PV 2 PTE arrays), or null past its end. */
  span: (bytes: number) => DataView | null;
  /** Entries applied, written into the slot's count once the handler is done (batch and range
   * ops): a handler leaves its input as the guest wrote it until then, so that a call the server
   * was killed in the middle of runs again on the same input (docs/checkpoint.md). */
  applied: number | null;
}

type OpHandler = (c: Call) => number;

export class PvPage {
  readonly s: PvState = { area: 0, slots: 0 };
  private readonly env: PvEnv;
  private readonly ops: Record<number, OpHandler>;
  private warnedBadSlot = false;

  constructor(env: PvEnv) {
    this.env = env;
    this.ops = {
      [PV_OP.SET_PGD]: (c) => -env.mmu.pvSetPgd(c.arg0),
      [PV_OP.MAP_BATCH]: (c) => this.batch(c, true),
      [PV_OP.UNMAP_BATCH]: (c) => this.batch(c, false),
      [PV_OP.FLUSH]: (c) => {
        if (!env.mmu.pvSpace(c.arg0)) return -EINVAL;
        // Entries are written straight into the shadow the engine walks (it caches nothing
        // between jobs), so the flush only has to be counted.
        env.counters.tlbFlushes++;
        return 0;
      },
      [PV_OP.MEM_ALLOC]: (c) => {
        const align = c.arg1;
        if (!(c.arg0 > 0) || !(align >= 4096) || !isPow2(align)) return -EINVAL;
        const a = env.vramAlloc.alloc(c.arg0, align);
        if (a === null) return -ENOMEM;
        setU64(c.dv, PV_SLOT.ret0, a);
        env.counters.vramInUseBytes = env.vramAlloc.inUse;
        return 0;
      },
      [PV_OP.MEM_FREE]: (c) => (this.freeVram(c.arg0) ? 0 : -EINVAL),
      [PV_OP.MAP_RANGE]: (c) => this.mapRange(c),
      [PV_OP.UNMAP_RANGE]: (c) => {
        const sp = env.mmu.pvSpace(c.arg0);
        const n = c.count;
        c.applied = 0;
        if (!sp || n > PV_RANGE_MAX || (c.flags & ~(PV_RANGE.FLUSH | PV_RANGE.FREE)) !== 0) return -EINVAL;
        // FREE (PV 3): checked before anything changes, so a bad address unmaps nothing
        const free = (c.flags & PV_RANGE.FREE) !== 0 ? getU64(c.dv, PV_SLOT.arg2) : -1;
        if (free >= 0 && env.vramAlloc.sizeOf(free) === 0) return -EINVAL;
        const err = env.mmu.pvUnmapRange(sp, c.arg1, n);
        if (err !== 0) return -err;
        env.counters.hypercallEntries += n;
        c.applied = n;
        if (c.flags & PV_RANGE.FLUSH) env.counters.tlbFlushes++;
        if (free >= 0) this.freeVram(free);
        return 0;
      },
      [PV_OP.SPACE_NEW]: (c) => {
        // PV 4: MEM_ALLOC and SET_PGD of the PD at the allocation's start, all or nothing
        const align = c.arg1;
        if (!(c.arg0 >= PD_SIZE) || !(align >= 4096) || !isPow2(align)) return -EINVAL;
        const a = env.vramAlloc.alloc(c.arg0, align);
        if (a === null) return -ENOMEM;
        const err = env.mmu.pvSetPgd(a);
        if (err !== 0) {
          env.vramAlloc.free(a);
          return -err;
        }
        env.counters.vramInUseBytes = env.vramAlloc.inUse;
        setU64(c.dv, PV_SLOT.ret0, a);
        return 0;
      },
      [PV_OP.SPACE_FREE]: (c) => {
        // PV 4: the space's ALLOC'd buffers, the space, and the PD's allocation when arg0 is one
        const sp = env.mmu.pvSpace(c.arg0);
        if (!sp) return -EINVAL;
        if (sp.refs > 0) return -EBUSY; // a channel still runs on it: unbind first
        const allocs = sp.allocs ?? [];
        sp.allocs = [];
        for (const a of allocs) this.freeVram(a);
        // freeing the PD's allocation ends the space with it; a PD placed otherwise ends alone
        if (!this.freeVram(c.arg0)) env.mmu.pvFreed(c.arg0, 1);
        setU64(c.dv, PV_SLOT.ret0, allocs.length);
        return 0;
      },
    };
  }

  /**
   * Free a VRAM allocation (MEM_FREE, UNMAP_RANGE FREE, SPACE_FREE): the PV spaces whose PD lay
   * in it end, and no space keeps it on its list of ALLOC'd buffers. False if addr is not an
   * allocation.
   */
  private freeVram(addr: number): boolean {
    const env = this.env;
    const size = env.vramAlloc.sizeOf(addr);
    if (size === 0) return false;
    env.mmu.pvFreed(addr, size);
    for (const sp of env.mmu.spaces.values()) {
      const i = sp.allocs ? sp.allocs.indexOf(addr) : -1;
      if (i >= 0) sp.allocs!.splice(i, 1);
    }
    env.vramAlloc.free(addr);
    env.counters.vramInUseBytes = env.vramAlloc.inUse;
    return true;
  }

  /** The rows of BAR0 0xFE0000–0xFE001F. */
  rows(): ViewRow[] {
    return [
      { addr: PV_MAGIC, name: 'PV_MAGIC', access: 'emulate', reset: PV_MAGIC_VALUE, ro: RO },
      { addr: PV_VERSION, name: 'PV_VERSION', access: 'emulate', reset: PV_VERSION_VALUE, ro: RO },
      { addr: PV_AREA_LO, name: 'PV_AREA_LO', access: 'emulate', reset: 0 },
      { addr: PV_AREA_HI, name: 'PV_AREA_HI', access: 'emulate', reset: 0 },
      { addr: PV_AREA_SLOTS, name: 'PV_AREA_SLOTS', access: 'trap', reset: 0, postWrite: (v) => this.register(v) },
      { addr: PV_CALL, name: 'PV_CALL', access: 'trap', reset: 0, ro: RO, postWrite: (_s, w) => this.call(w) },
      { addr: PV_STATUS, name: 'PV_STATUS', access: 'emulate', reset: 0, ro: RO },
    ];
  }

  reset(): void {
    this.s.area = 0;
    this.s.slots = 0;
  }

  /** PV_AREA_SLOTS written: register the shared area. */
  private register(slots: number): void {
    const env = this.env;
    const lo = env.reg(PV_AREA_LO);
    const area = lo + env.reg(PV_AREA_HI) * TWO32;
    this.s.area = 0;
    this.s.slots = 0;
    let status = 0;
    if (!(slots >= 1 && slots <= PV_MAX_SLOTS) || (lo & 0xfff) !== 0) {
      status = EINVAL;
    } else {
      const mem = env.guest();
      const r = mem?.translate(area, slots * PV_SLOT_SIZE, true);
      if (!r || !r.ok) status = EFAULT;
    }
    if (status === 0) {
      this.s.area = area;
      this.s.slots = slots;
    }
    env.setReg(PV_STATUS, status);
    env.log.info({ area: `0x${area.toString(16)}`, slots, status }, 'pv area registered');
  }

  /** PV_CALL written: perform the call in slot `index`. */
  private call(index: number): void {
    const env = this.env;
    const mem = env.guest();
    if (this.s.slots === 0 || index >= this.s.slots || !mem) {
      if (!this.warnedBadSlot) {
        this.warnedBadSlot = true;
        env.log.warn({ index, slots: this.s.slots }, 'pv call with a bad slot index (not answered)');
      }
      return;
    }
    const v = mem.view(this.s.area + index * PV_SLOT_SIZE, PV_SLOT_SIZE, true);
    if (!v.ok) {
      env.log.warn({ index, fault: v.fault.message }, 'pv slot no longer mapped (not answered)');
      return;
    }
    env.counters.hypercalls++;
    const dv = new DataView(v.bytes.buffer, v.bytes.byteOffset, PV_SLOT_SIZE);
    const op = dv.getUint32(PV_SLOT.op, true);
    const start = this.s.area + index * PV_SLOT_SIZE;
    const room = (this.s.slots - index) * PV_SLOT_SIZE;
    const span = (bytes: number): DataView | null => {
      if (!(bytes <= room)) return null;
      const w = mem.view(start, bytes, false);
      return w.ok ? new DataView(w.bytes.buffer, w.bytes.byteOffset, bytes) : null;
    };
    const c: Call = {
      dv, count: dv.getUint32(PV_SLOT.count, true), flags: dv.getUint32(PV_SLOT.flags, true),
      arg0: getU64(dv, PV_SLOT.arg0), arg1: getU64(dv, PV_SLOT.arg1), span, applied: null,
    };
    const handler = this.ops[op];
    const result = handler ? handler(c) : -ENOSYS;
    if (c.applied !== null) dv.setUint32(PV_SLOT.count, c.applied, true);
    dv.setInt32(PV_SLOT.result, result, true);
    env.called?.(op, dv.getUint32(PV_SLOT.count, true), result);
  }

  /** MAP_BATCH / UNMAP_BATCH: stop at the first invalid entry; count = entries applied. */
  private batch(c: Call, map: boolean): number {
    const env = this.env;
    const sp = env.mmu.pvSpace(c.arg0);
    let applied = 0;
    let result = 0;
    if (!sp || c.count > PV_BATCH_MAX) {
      result = -EINVAL;
    } else {
      const ranges = map ? env.mmu.ranges() : null;
      for (let i = 0; i < c.count; i++) {
        const at = PV_SLOT.entries + 16 * i;
        const va = getU64(c.dv, at);
        const err = map
          ? env.mmu.pvMap(sp, va, c.dv.getUint32(at + 8, true), c.dv.getUint32(at + 12, true), ranges!)
          : env.mmu.pvUnmap(sp, va);
        if (err !== 0) {
          result = -err;
          break;
        }
        applied++;
      }
    }
    env.counters.hypercallEntries += applied;
    c.applied = applied;
    return result;
  }

  /**
   * MAP_RANGE (PV 2): `count` pages from VA arg1 — one PTE for all (CONTIGUOUS: page i at its
   * address + i × 4 KiB) or `count` u64 PTEs from the slot's entries on, through the following
   * slots. Each page is validated like a MAP_BATCH entry; stops at the first bad one
   * (count = pages applied). ALLOC (PV 3, CONTIGUOUS only): the range's VRAM is allocated here
   * first (MEM_ALLOC, alignment arg2, address in ret0), and all or nothing is done.
   */
  private mapRange(c: Call): number {
    const env = this.env;
    const sp = env.mmu.pvSpace(c.arg0);
    const n = c.count;
    const contiguous = (c.flags & PV_RANGE.CONTIGUOUS) !== 0;
    const alloc = (c.flags & PV_RANGE.ALLOC) !== 0;
    c.applied = 0;
    if (!sp || n > PV_RANGE_MAX || (c.flags & ~(PV_RANGE.CONTIGUOUS | PV_RANGE.FLUSH | PV_RANGE.ALLOC)) !== 0) return -EINVAL;
    if (alloc && !contiguous) return -EINVAL;
    const va = c.arg1;
    if (!Number.isSafeInteger(va) || va % 4096 !== 0 || va + n * 4096 > 2 ** 40) return -EINVAL;
    if (n === 0 && !alloc) { // nothing to map (and no PTE to read)
      if (c.flags & PV_RANGE.FLUSH) env.counters.tlbFlushes++;
      return 0;
    }
    const ptes = contiguous ? c.dv : c.span(PV_SLOT.entries + 8 * n);
    if (!ptes) return -EINVAL;
    const lo0 = ptes.getUint32(PV_SLOT.entries, true);
    const flags = lo0 & 0xfff;
    let base = (lo0 - flags) + ptes.getUint32(PV_SLOT.entries + 4, true) * TWO32;
    if (alloc) {
      // The PTE gives the flags only: VRAM target, address 0 (the host picks it).
      const align = getU64(c.dv, PV_SLOT.arg2);
      if (n === 0 || base !== 0 || ((flags >>> ENTRY_TARGET_SHIFT) & 3) !== TARGET_VRAM || !isPow2(align) || align < 4096) return -EINVAL;
      const a = env.vramAlloc.alloc(n * 4096, align);
      if (a === null) return -ENOMEM;
      base = a;
    }
    let applied = 0;
    let result = 0;
    const vramRange = contiguous && n > 0 && ((flags >>> ENTRY_TARGET_SHIFT) & 3) === TARGET_VRAM;
    if (vramRange) {
      // a VRAM buffer: the slice checked once, each region's table written in one pass
      result = -env.mmu.pvMapVramRange(sp, va, n, (base % TWO32) + flags, Math.floor(base / TWO32));
      applied = env.mmu.pvApplied;
    }
    const ranges = vramRange ? null : env.mmu.ranges();
    for (let i = 0; ranges && i < n; i++) {
      let lo: number;
      let hi: number;
      if (contiguous) {
        const a = base + i * 4096;
        lo = (a % TWO32) + flags;
        hi = Math.floor(a / TWO32);
      } else {
        lo = ptes.getUint32(PV_SLOT.entries + 8 * i, true);
        hi = ptes.getUint32(PV_SLOT.entries + 8 * i + 4, true);
      }
      const err = env.mmu.pvMap(sp, va + i * 4096, lo >>> 0, hi, ranges);
      if (err !== 0) {
        result = -err;
        break;
      }
      applied++;
    }
    if (alloc) {
      if (result !== 0) {
        // all or nothing: the pages mapped so far go, and so does the memory
        if (applied > 0) env.mmu.pvUnmapRange(sp, va, applied);
        env.vramAlloc.free(base);
        applied = 0;
      } else {
        setU64(c.dv, PV_SLOT.ret0, base);
        (sp.allocs ??= []).push(base);
        env.counters.vramInUseBytes = env.vramAlloc.inUse;
      }
    }
    env.counters.hypercallEntries += applied;
    c.applied = applied;
    if (result === 0 && (c.flags & PV_RANGE.FLUSH)) env.counters.tlbFlushes++;
    return result;
  }
}

/** A u64 field as a number (exact below 2^53; larger values fail validation anyway). */
function getU64(dv: DataView, at: number): number {
  return dv.getUint32(at, true) + dv.getUint32(at + 4, true) * TWO32;
}

function setU64(dv: DataView, at: number, v: number): void {
  dv.setUint32(at, v % TWO32, true);
  dv.setUint32(at + 4, Math.floor(v / TWO32), true);
}
