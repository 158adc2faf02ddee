// The PV hypercall page (hw-spec §9): registration, every op's validation (entries checked like
// shadow PTEs, stop at the first bad one), host-owned tables that flushes never rescan, the
// VRAM allocator and its accounting, and the call counts of pv versus pv-batch.
import { describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import * as S from '../../src/gpu/spec.ts';
import { pte } from '../support/host-driver/pte.ts';
import { GpuError } from '../support/host-driver/driver.ts';
import { buf, closedAfterEach, PV_AREA_GPA, PvClient, type Guest, type Host } from './harness.ts';
import { params, rng } from '../gpu/helpers.ts';

const EINVAL = -22, EFAULT = -14, ENOMEM = -12, ENOSYS = -38, EBUSY = -16;
const { host, guest } = closedAfterEach();
let h: Host | null = null;

function attach(mode: 'pv' | 'pv-batch', name = 'p'): Guest {
  return guest(h!.agg, { name, mode, slice: 32 << 20 });
}

describe('PV hypercall page', () => {
  it('is absent in full virtualization', () => {
    h = host();
    const g = guest(h.agg, { name: 'f', mode: 'fv', slice: 32 << 20 });
    expect(g.rd(S.PV_MAGIC)).toBe(0);
    g.wr(S.PV_AREA_SLOTS, 1);
    expect(g.rd(S.PV_STATUS)).toBe(0);
    expect(g.vm.view.accessOf(S.PV_CALL)).toBeNull();
  });

  it('registration checks count, alignment and the DMA map', () => {
    h = host();
    const g = attach('pv-batch');
    expect(g.rd(S.PV_MAGIC)).toBe(S.PV_MAGIC_VALUE);
    expect(g.rd(S.PV_VERSION)).toBe(4);
    const reg = (lo: number, hi: number, slots: number) => {
      g.wr(S.PV_AREA_LO, lo);
      g.wr(S.PV_AREA_HI, hi);
      g.wr(S.PV_AREA_SLOTS, slots);
      return g.rd(S.PV_STATUS);
    };
    expect(reg(PV_AREA_GPA, 0, 0)).toBe(22);
    expect(reg(PV_AREA_GPA, 0, 65)).toBe(22);
    expect(reg(PV_AREA_GPA + 8, 0, 1)).toBe(22);
    expect(reg(0x4000_0000, 0, 1)).toBe(14); // not guest RAM
    expect(reg(PV_AREA_GPA, 0, 3)).toBe(14); // runs past the 2 mapped slots
    // With no registered area a call is not answered.
    const area = new DataView(g.ram(0xa000_0000, 4096).buffer);
    area.setInt32(S.PV_SLOT.result, 12345, true);
    g.wr(S.PV_CALL, 0);
    expect(area.getInt32(S.PV_SLOT.result, true)).toBe(12345);
    expect(reg(0xa000_0000, 0, 1)).toBe(0);
    // A slot index beyond the area is not answered either; a valid one is.
    area.setUint32(S.PV_SLOT.op, 99, true);
    g.wr(S.PV_CALL, 1);
    expect(area.getInt32(S.PV_SLOT.result, true)).toBe(12345);
    g.wr(S.PV_CALL, 0);
    expect(area.getInt32(S.PV_SLOT.result, true)).toBe(ENOSYS);
  });

  it('validates every entry like a shadow PTE and stops at the first bad one', async () => {
    h = host();
    const g = attach('pv-batch');
    const pv = g.pv!;
    const pd = g.gvm.pd;
    const page = g.vram(4 * 4096);
    const va0 = 0x40_0000_0000; // a fresh 128 MiB region
    // SET_PGD: 4 KiB aligned and inside the slice.
    expect(pv.call(S.PV_OP.SET_PGD, { arg0: pd + 8 }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.SET_PGD, { arg0: g.vm.slice.size }).result).toBe(EINVAL);
    // Only PV-managed PDs accept MAP/UNMAP/FLUSH.
    expect(pv.call(S.PV_OP.MAP_BATCH, { arg0: pd + 4096, entries: [[va0, pte(page.addr)]] }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.FLUSH, { arg0: pd + 4096 }).result).toBe(EINVAL);
    // Batch size limit.
    expect(pv.call(S.PV_OP.MAP_BATCH, { arg0: pd, count: 129 })).toMatchObject({ result: EINVAL, count: 0 });
    // Stop at the first invalid entry: two applied, then a page outside the slice.
    const bad = pv.call(S.PV_OP.MAP_BATCH, {
      arg0: pd,
      entries: [
        [va0, pte(page.addr)], [va0 + 4096, pte(page.addr + 4096)],
        [va0 + 8192, pte(g.vm.slice.size)], [va0 + 12288, pte(page.addr + 12288)],
      ],
    });
    expect(bad).toMatchObject({ result: EFAULT, count: 2 });
    const one = (va: number, e: [number, number]) => pv.call(S.PV_OP.MAP_BATCH, { arg0: pd, entries: [[va, e]] });
    expect(one(va0 + 100, pte(page.addr))).toMatchObject({ result: EINVAL, count: 0 }); // misaligned VA
    expect(one(2 ** 40, pte(page.addr)).result).toBe(EINVAL); // VA out of range
    expect(one(va0, [0, 0]).result).toBe(EINVAL); // not present
    expect(one(va0, [(page.addr | 1 | (1 << 4)) >>> 0, 0]).result).toBe(EINVAL); // reserved target
    expect(one(va0, [(page.addr | 1 | 8) >>> 0, 0]).result).toBe(EINVAL); // reserved bit
    expect(one(va0, pte(0x7_0000_0000, { target: S.TARGET_SYSMEM })).result).toBe(EFAULT); // not guest RAM
    expect(one(va0, pte(g.vm.slice.size - 4096)).result).toBe(0); // last page of the slice
    expect(pv.call(S.PV_OP.FLUSH, { arg0: pd }).result).toBe(0);
    // The two applied entries work; the refused one is not mapped.
    page.u32.fill(0x0badf00d, 1024, 2048);
    const dst = g.vram(4096);
    await g.ch.copy(dst.va, va0 + 4096, 4096);
    expect(dst.u32.every((v) => v === 0x0badf00d)).toBe(true);
    const err = await g.ch.copy(dst.va, va0 + 8192, 16).then(() => null, (e: unknown) => e);
    expect((err as GpuError).fault?.reason).toBe(S.FAULT.PTE_NOT_PRESENT);
    g.ch.bind();
    // UNMAP makes a page non-present.
    expect(pv.call(S.PV_OP.UNMAP_BATCH, { arg0: pd, entries: [[va0, [0, 0]]] })).toMatchObject({ result: 0, count: 1 });
    const err2 = await g.ch.copy(dst.va, va0, 16).then(() => null, (e: unknown) => e);
    expect((err2 as GpuError).fault?.reason).toBe(S.FAULT.PTE_NOT_PRESENT);
    // MMIO flushes of a PV-managed PD never rescan it.
    g.drv.flushTlb(pd);
    expect(g.vm.counters.shadowRebuilds).toBe(0);
    expect(pv.call(77).result).toBe(ENOSYS);
  });

  it('PV 2 range ops: one PTE for a contiguous range, PTE arrays across slots, each page validated', async () => {
    h = host();
    const g = attach('pv-batch');
    const pv = g.pv!;
    const pd = g.gvm.pd;
    const c = g.vm.counters;
    const page = g.vram(4 * 4096);
    for (let i = 0; i < 4; i++) page.u32.fill(0x1000 + i, 1024 * i, 1024 * (i + 1));
    const dst = g.vram(4096);
    const va0 = 0x41_0000_0000; // fresh 128 MiB regions
    const va1 = 0x42_0000_0000;
    const R = S.PV_RANGE;
    const flushes = c.tlbFlushes;
    // CONTIGUOUS: one PTE maps all four pages; FLUSH counts as a flush.
    const m = pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va0, count: 4, flags: R.CONTIGUOUS | R.FLUSH, ptes: [pte(page.addr)] });
    expect(m).toMatchObject({ result: 0, count: 4 });
    expect(c.tlbFlushes).toBe(flushes + 1);
    await g.ch.copy(dst.va, va0 + 3 * 4096, 4096);
    expect(dst.u32.every((v) => v === 0x1003)).toBe(true);
    // A PTE array of 600 entries runs from slot 0 into slot 1 of the 2-slot area.
    const ptes = Array.from({ length: 600 }, (_, i) => pte(page.addr + (i % 4) * 4096));
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va1, count: 600, ptes })).toMatchObject({ result: 0, count: 600 });
    await g.ch.copy(dst.va, va1 + 598 * 4096, 4096); // 598 % 4 = 2
    expect(dst.u32.every((v) => v === 0x1002)).toBe(true);
    // An array that would run past the area, too many pages, unknown flags, the end of the VA
    // space, a PD that is not PV-managed: refused whole.
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va1, count: 1100 })).toMatchObject({ result: EINVAL, count: 0 });
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va1, count: 2 ** 20 + 1, flags: R.CONTIGUOUS, ptes: [pte(page.addr)] }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va1, count: 1, flags: 0x80, ptes: [pte(page.addr)] }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: 2 ** 40 - 4096, count: 2, flags: R.CONTIGUOUS, ptes: [pte(page.addr)] }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va1 + 100, count: 1, flags: R.CONTIGUOUS, ptes: [pte(page.addr)] }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd + 4096, arg1: va1, count: 1, flags: R.CONTIGUOUS, ptes: [pte(page.addr)] }).result).toBe(EINVAL);
    // Every page is validated: a contiguous range running off the slice stops at its end.
    const last = g.vm.slice.size - 4096;
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va0 + 0x10_0000, count: 3, flags: R.CONTIGUOUS, ptes: [pte(last)] }))
      .toMatchObject({ result: EFAULT, count: 1 });
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va0 + 0x10_0000, count: 2, ptes: [pte(page.addr), pte(0x7_0000_0000, { target: S.TARGET_SYSMEM })] }))
      .toMatchObject({ result: EFAULT, count: 1 });
    // UNMAP_RANGE: all 600 pages at once (with its flush); they fault afterwards.
    expect(pv.call(S.PV_OP.UNMAP_RANGE, { arg0: pd, arg1: va1, count: 600, flags: R.FLUSH })).toMatchObject({ result: 0, count: 600 });
    const err = await g.ch.copy(dst.va, va1 + 598 * 4096, 16).then(() => null, (e: unknown) => e);
    expect((err as GpuError).fault?.reason).toBe(S.FAULT.PTE_NOT_PRESENT);
    g.ch.bind();
    await g.ch.copy(dst.va, va0, 4096); // the other range is untouched
    expect(dst.u32.every((v) => v === 0x1000)).toBe(true);
    expect(pv.call(S.PV_OP.UNMAP_RANGE, { arg0: pd, arg1: 2 ** 40 - 4096, count: 2 }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.UNMAP_RANGE, { arg0: pd, arg1: 0, count: 2 ** 32 - 1 }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.UNMAP_RANGE, { arg0: pd, arg1: va1, count: 1, flags: R.CONTIGUOUS }).result).toBe(EINVAL);
    // The largest range over regions without tables is skipped per 128 MiB region: fast.
    const t0 = performance.now();
    expect(pv.call(S.PV_OP.UNMAP_RANGE, { arg0: pd, arg1: 0x80_0000_0000, count: 2 ** 20 }).result).toBe(0);
    expect(performance.now() - t0).toBeLessThan(200);
    expect(c.shadowRebuilds).toBe(0);
  });

  // Found by the restart test: a server killed in the middle of a MAP_RANGE had already written
  // the slot's count (0) into guest memory, the next server ran the call again from its
  // checkpoint on that count, and a PTE-array call with count 0 read past its slot (a handler
  // exception, an I/O error in QEMU).
  it('range calls leave the slot as the guest wrote it until they finish; a count of 0 maps nothing', () => {
    h = host();
    const g = attach('pv-batch');
    const pv = g.pv!;
    const pd = g.gvm.pd;
    const page = g.vram(8 * 4096);
    const R = S.PV_RANGE;
    const mmu = g.vm.mmu;
    const seen: number[] = [];
    const slotCount = () => pv.dv.getUint32(S.PV_SLOT.count, true);
    const mapVram = mmu.pvMapVramRange.bind(mmu);
    const mapOne = mmu.pvMap.bind(mmu);
    const unmap = mmu.pvUnmapRange.bind(mmu);
    mmu.pvMapVramRange = (...a) => (seen.push(slotCount()), mapVram(...a));
    mmu.pvMap = (...a) => (seen.push(slotCount()), mapOne(...a));
    mmu.pvUnmapRange = (...a) => (seen.push(slotCount()), unmap(...a));
    const va = 0x43_0000_0000;
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va, count: 8, flags: R.CONTIGUOUS, ptes: [pte(page.addr)] })).toMatchObject({ result: 0, count: 8 });
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va + 0x10_0000, count: 3, ptes: [pte(page.addr), pte(page.addr + 4096), pte(page.addr)] })).toMatchObject({ result: 0, count: 3 });
    expect(pv.call(S.PV_OP.UNMAP_RANGE, { arg0: pd, arg1: va, count: 8 })).toMatchObject({ result: 0, count: 8 });
    expect(seen).toEqual([8, 3, 3, 3, 8]); // the input count, while the work was being done
    // count 0: answered (result 0, nothing applied), with or without a PTE array
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va, count: 0 })).toMatchObject({ result: 0, count: 0 });
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va, count: 0, flags: R.CONTIGUOUS, ptes: [pte(page.addr)] })).toMatchObject({ result: 0, count: 0 });
    expect(pv.call(S.PV_OP.UNMAP_RANGE, { arg0: pd, arg1: va, count: 0 })).toMatchObject({ result: 0, count: 0 });
  });

  it('PV 3 ALLOC/FREE flags: a VRAM buffer allocated and mapped in one call, unmapped and freed in one; all or nothing', async () => {
    h = host();
    const g = attach('pv-batch');
    const pv = g.pv!;
    const pd = g.gvm.pd;
    const c = g.vm.counters;
    const R = S.PV_RANGE;
    const va = 0x43_0000_0000;
    const dst = g.vram(4096);
    // This test's driver places its own VRAM from the slice's start without MEM_ALLOC: keep the
    // host allocator off it.
    expect(pv.call(S.PV_OP.MEM_ALLOC, { arg0: 16 << 20, arg1: 4096 })).toMatchObject({ result: 0, ret0: 0 });
    const inUse = c.vramInUseBytes;
    // Allocated at the alignment asked, mapped with the PTE's flags, accounted.
    const a = pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va, arg2: 1 << 16, count: 4, flags: R.CONTIGUOUS | R.ALLOC | R.FLUSH, ptes: [pte(0)] });
    expect(a).toMatchObject({ result: 0, count: 4 });
    expect(a.ret0 % (1 << 16)).toBe(0);
    expect(a.ret0 + 4 * 4096).toBeLessThanOrEqual(g.vm.slice.size);
    expect(c.vramInUseBytes).toBe(inUse + 4 * 4096);
    // The guest sees it through BAR1 at the address it was given, and the GPU through the VA.
    g.bar1.fill(0x5a, a.ret0 + 2 * 4096, a.ret0 + 3 * 4096);
    await g.ch.copy(dst.va, va + 2 * 4096, 4096);
    expect(dst.u32.every((v) => v === 0x5a5a5a5a)).toBe(true);
    // Refused before anything is allocated: without CONTIGUOUS, an address in the PTE, a
    // sysmem target, a bad alignment, no pages, more than the slice.
    const bad = [
      { flags: R.ALLOC, arg2: 4096, ptes: [pte(0)], count: 1 },
      { flags: R.CONTIGUOUS | R.ALLOC, arg2: 4096, ptes: [pte(a.ret0)], count: 1 },
      { flags: R.CONTIGUOUS | R.ALLOC, arg2: 4096, ptes: [pte(0, { target: S.TARGET_SYSMEM })], count: 1 },
      { flags: R.CONTIGUOUS | R.ALLOC, arg2: 3000, ptes: [pte(0)], count: 1 },
      { flags: R.CONTIGUOUS | R.ALLOC, arg2: 0, ptes: [pte(0)], count: 1 },
      { flags: R.CONTIGUOUS | R.ALLOC, arg2: 4096, ptes: [pte(0)], count: 0 },
    ];
    for (const b of bad) expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va + 0x10_0000, ...b }), JSON.stringify(b)).toMatchObject({ result: EINVAL, count: 0 });
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va + 0x10_0000, arg2: 4096, count: (64 << 20) / 4096, flags: R.CONTIGUOUS | R.ALLOC, ptes: [pte(0)] }))
      .toMatchObject({ result: ENOMEM, count: 0 });
    expect(c.vramInUseBytes).toBe(inUse + 4 * 4096);
    // A range whose mapping fails part-way leaves nothing mapped and nothing allocated: fill the
    // host's table area with one page per 128 MiB region until a region gets no table, then
    // allocate a range from the last page of the region before it into that one.
    const REGION = 2 ** 27, at = (k: number) => 0x50_0000_0000 + k * REGION;
    let k = 0;
    for (; k < 1000; k++) {
      const r = pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: at(k), count: 1, flags: R.CONTIGUOUS, ptes: [pte(dst.addr)] });
      if (r.result === ENOMEM) break;
      expect(r.result).toBe(0);
    }
    expect(k).toBeGreaterThan(0);
    expect(k).toBeLessThan(1000);
    const edge = at(k) - 4096; // the last page of region k-1, which has a table
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: edge, arg2: 4096, count: 2, flags: R.CONTIGUOUS | R.ALLOC, ptes: [pte(0)] }))
      .toMatchObject({ result: ENOMEM, count: 0 });
    expect(c.vramInUseBytes).toBe(inUse + 4 * 4096);
    const gone = await g.ch.copy(dst.va, edge, 16).then(() => null, (e: unknown) => e);
    expect((gone as GpuError).fault?.reason).toBe(S.FAULT.PTE_NOT_PRESENT);
    g.ch.bind();
    // FREE with an address that is not an allocation: refused, nothing unmapped.
    expect(pv.call(S.PV_OP.UNMAP_RANGE, { arg0: pd, arg1: va, arg2: a.ret0 + 4096, count: 4, flags: R.FREE | R.FLUSH })).toMatchObject({ result: EINVAL, count: 0 });
    await g.ch.copy(dst.va, va, 4096);
    // FREE: unmapped, flushed and freed in one call; the VA faults afterwards.
    const flushes = c.tlbFlushes;
    expect(pv.call(S.PV_OP.UNMAP_RANGE, { arg0: pd, arg1: va, arg2: a.ret0, count: 4, flags: R.FREE | R.FLUSH })).toMatchObject({ result: 0, count: 4 });
    expect(c.tlbFlushes).toBe(flushes + 1);
    expect(c.vramInUseBytes).toBe(inUse);
    expect(pv.call(S.PV_OP.MEM_FREE, { arg0: a.ret0 }).result).toBe(EINVAL);
    const err = await g.ch.copy(dst.va, va, 16).then(() => null, (e: unknown) => e);
    expect((err as GpuError).fault?.reason).toBe(S.FAULT.PTE_NOT_PRESENT);
  });

  it('PV 4: an address space made in one call and freed in one with its buffers; freeing a PD ends its space', async () => {
    h = host();
    const g = attach('pv-batch');
    const pv = g.pv!;
    const c = g.vm.counters;
    const mmu = g.vm.mmu;
    const R = S.PV_RANGE;
    expect(g.rd(S.PV_VERSION)).toBe(4);
    // Keep the host allocator off the harness driver's own VRAM (placed from the slice's start).
    const low = pv.call(S.PV_OP.MEM_ALLOC, { arg0: 16 << 20, arg1: 4096 });
    expect(low).toMatchObject({ result: 0, ret0: 0 });
    const inUse0 = c.vramInUseBytes, shadow0 = mmu.shadowBytes, spaces0 = mmu.spaces.size;
    // SPACE_NEW: refused below a PD's size or with a bad alignment; else one call allocates the
    // PD (and what follows it) and declares it.
    expect(pv.call(S.PV_OP.SPACE_NEW, { arg0: S.PD_SIZE - 4096, arg1: 4096 }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.SPACE_NEW, { arg0: S.PD_SIZE, arg1: 3000 }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.SPACE_NEW, { arg0: 64 << 20, arg1: 4096 }).result).toBe(ENOMEM);
    expect(c.vramInUseBytes).toBe(inUse0);
    const sn = pv.call(S.PV_OP.SPACE_NEW, { arg0: S.PD_SIZE + 4096, arg1: 4096 });
    expect(sn.result).toBe(0);
    const pd = sn.ret0;
    expect(pd).toBeGreaterThanOrEqual(16 << 20);
    expect(c.vramInUseBytes).toBe(inUse0 + S.PD_SIZE + 4096);
    expect(mmu.pvSpace(pd)).not.toBeNull();
    // Two buffers allocated and mapped in it (PV 3), one mapped from plain MEM_ALLOC memory.
    const va = 0x44_0000_0000;
    const b1 = pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va, arg2: 4096, count: 4, flags: R.CONTIGUOUS | R.ALLOC | R.FLUSH, ptes: [pte(0)] });
    const b2 = pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va + 0x10_0000, arg2: 4096, count: 2, flags: R.CONTIGUOUS | R.ALLOC, ptes: [pte(0)] });
    expect([b1.result, b2.result]).toEqual([0, 0]);
    const plainAlloc = pv.call(S.PV_OP.MEM_ALLOC, { arg0: 4096, arg1: 4096 });
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd, arg1: va + 0x20_0000, count: 1, flags: R.CONTIGUOUS, ptes: [pte(plainAlloc.ret0)] }).result).toBe(0);
    // One of them freed the PV 3 way drops off the space's list: SPACE_FREE must not free it
    // again (by then it may be somebody else's allocation).
    expect(pv.call(S.PV_OP.UNMAP_RANGE, { arg0: pd, arg1: va + 0x10_0000, arg2: b2.ret0, count: 2, flags: R.FREE }).result).toBe(0);
    const again = pv.call(S.PV_OP.MEM_ALLOC, { arg0: 2 * 4096, arg1: 4096 });
    expect(again.ret0).toBe(b2.ret0); // the allocator hands the same range out again
    expect(mmu.shadowBytes).toBeGreaterThan(shadow0);
    // SPACE_FREE: not a PV space → EINVAL; then one call frees the space, its PD allocation and
    // the buffer MAP_RANGE ALLOC made in it — not the MEM_ALLOC'd ones.
    expect(pv.call(S.PV_OP.SPACE_FREE, { arg0: pd + 4096 }).result).toBe(EINVAL);
    const sf = pv.call(S.PV_OP.SPACE_FREE, { arg0: pd });
    expect(sf).toMatchObject({ result: 0, ret0: 1 });
    expect(mmu.pvSpace(pd)).toBeNull();
    expect(mmu.spaces.size).toBe(spaces0);
    expect(mmu.shadowBytes).toBe(shadow0);
    expect(c.vramInUseBytes).toBe(inUse0 + 4096 + 2 * 4096);
    expect(pv.call(S.PV_OP.MEM_FREE, { arg0: b1.ret0 }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.MEM_FREE, { arg0: pd }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.MEM_FREE, { arg0: again.ret0 }).result).toBe(0);
    expect(pv.call(S.PV_OP.MEM_FREE, { arg0: plainAlloc.ret0 }).result).toBe(0);
    expect(c.vramInUseBytes).toBe(inUse0);
    expect(pv.call(S.PV_OP.SPACE_FREE, { arg0: pd }).result).toBe(EINVAL);

    // Freeing a PD's memory the PV 1–3 way (MEM_FREE) ends its space too: its host tables
    // used to stay until the VM reset, one PD's worth per context.
    const p2 = pv.call(S.PV_OP.MEM_ALLOC, { arg0: S.PD_SIZE, arg1: 4096 }).ret0;
    expect(pv.call(S.PV_OP.SET_PGD, { arg0: p2 }).result).toBe(0);
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: p2, arg1: va, count: 1, flags: R.CONTIGUOUS, ptes: [pte(plainAlloc.ret0)] }).result).toBe(0);
    expect(mmu.shadowBytes).toBeGreaterThan(shadow0);
    expect(pv.call(S.PV_OP.MEM_FREE, { arg0: p2 }).result).toBe(0);
    expect(mmu.shadowBytes).toBe(shadow0);
    expect(mmu.pvSpace(p2)).toBeNull();

    // A space a bound channel runs on: SPACE_FREE is refused (EBUSY), nothing changes.
    const pd0 = g.gvm.pd;
    const page = g.vram(4096);
    page.u32.fill(0x600df00d);
    const dst = g.vram(4096);
    expect(pv.call(S.PV_OP.SPACE_FREE, { arg0: pd0 }).result).toBe(EBUSY);
    await g.ch.copy(dst.va, page.va, 4096);
    expect(dst.u32.every((v) => v === 0x600df00d)).toBe(true);
    // Its PD's memory freed under it (the harness driver's VRAM lies in `low`): the channel
    // keeps its tables, no PV op reaches the space, and a new SET_PGD there waits for the
    // channel to go; when it unbinds the tables are freed.
    const shadowBound = mmu.shadowBytes;
    expect(pv.call(S.PV_OP.MEM_FREE, { arg0: low.ret0 }).result).toBe(0);
    expect(pv.call(S.PV_OP.MAP_RANGE, { arg0: pd0, arg1: va, count: 1, flags: R.CONTIGUOUS, ptes: [pte(page.addr)] }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.SET_PGD, { arg0: pd0 }).result).toBe(EBUSY);
    dst.u32.fill(0);
    await g.ch.copy(dst.va, page.va, 4096);
    expect(dst.u32.every((v) => v === 0x600df00d)).toBe(true);
    expect(mmu.shadowBytes).toBe(shadowBound);
    // (the driver's own unmaps after the unbind now find no space: refused, as any PV op is)
    expect(() => g.drv.destroyChannel(g.ch)).toThrow(/PV op 3 failed: -22/);
    expect(mmu.shadowBytes).toBeLessThan(shadowBound);
    expect(mmu.spaces.has(`vram:${pd0}`)).toBe(false);
    expect(pv.call(S.PV_OP.SET_PGD, { arg0: pd0 }).result).toBe(0);
  });

  it('a contiguous VRAM range is written region by region with exactly the outcome of one pvMap per page', () => {
    h = host();
    const g = attach('pv-batch');
    const mmu = g.vm.mmu;
    const sp = mmu.pvSpace(g.gvm.pd)!;
    const u32 = new Uint32Array(h.engine.vram.u8.buffer, h.engine.vram.u8.byteOffset, h.engine.vram.u8.byteLength / 4);
    const REGION = 2 ** 27;
    /** The shadow entry for va as [lo, hi] ([0, 0] where the space has no table). */
    const entry = (va: number): [number, number] => {
      const t = sp.tables[Math.floor(va / REGION)];
      if (!t) return [0, 0];
      const k = (t.addr + 8 * ((va % REGION) / 4096)) / 4;
      return [u32[k]!, u32[k + 1]!];
    };
    const size = g.vm.slice.size;
    const r = rng(11);
    // [guest address, pages, offset of the first page in its region, read-only]; the last
    // cases run off the slice's end (EFAULT after the pages that fit) or start past it.
    const cases: [number, number, number, boolean][] = [
      [0, 1, 0, false], [4096, 40000, REGION - 8 * 4096, false], [size - 3 * 4096, 5, 4096, true],
      [size - 4096, 1, REGION - 4096, false], [size, 2, 0, false], [size + 4096 * 9, 1, 0, false],
    ];
    for (let i = 0; i < 12; i++) cases.push([Math.floor(r() * (size / 4096)) * 4096, 1 + Math.floor(r() * 3000), Math.floor(r() * 32768) * 4096, r() < 0.5]);
    cases.forEach(([addr, n, off, ro], i) => {
      const fastVa = 0x10_0000_0000 + 2 * i * 2 * REGION + off;
      const slowVa = fastVa + 2 * REGION;
      const [lo, hi] = pte(addr, { readOnly: ro });
      const fastErr = mmu.pvMapVramRange(sp, fastVa, n, lo, hi);
      const fastApplied = mmu.pvApplied;
      let slowErr = 0, slowApplied = 0;
      const ranges = mmu.ranges();
      for (; slowApplied < n; slowApplied++) {
        const a = addr + slowApplied * 4096;
        slowErr = mmu.pvMap(sp, slowVa + slowApplied * 4096, (lo % 4096) + (a % 2 ** 32), hi + Math.floor(a / 2 ** 32), ranges);
        if (slowErr !== 0) break;
      }
      expect([fastErr, fastApplied], `case ${i}`).toEqual([slowErr, slowApplied]);
      for (let p = 0; p <= n; p++) expect(entry(fastVa + p * 4096), `case ${i} page ${p}`).toEqual(entry(slowVa + p * 4096));
    });
  });

  it('MEM_ALLOC/MEM_FREE allocate inside the slice and account VRAM exactly', () => {
    h = host();
    const g = attach('pv');
    const pv = g.pv!;
    const c = g.vm.counters;
    expect(c.vramInUseBytes).toBe(0);
    const a = pv.call(S.PV_OP.MEM_ALLOC, { arg0: 1 << 20, arg1: 1 << 16 });
    expect(a.result).toBe(0);
    expect(a.ret0 % (1 << 16)).toBe(0);
    expect(a.ret0 + (1 << 20)).toBeLessThanOrEqual(g.vm.slice.size);
    expect(c.vramInUseBytes).toBe(1 << 20);
    const b = pv.call(S.PV_OP.MEM_ALLOC, { arg0: 5000, arg1: 4096 });
    expect(b.result).toBe(0);
    expect(c.vramInUseBytes).toBe((1 << 20) + 8192);
    expect(b.ret0 >= a.ret0 + (1 << 20) || b.ret0 + 8192 <= a.ret0).toBe(true);
    expect(pv.call(S.PV_OP.MEM_ALLOC, { arg0: 64 << 20, arg1: 4096 }).result).toBe(ENOMEM);
    expect(pv.call(S.PV_OP.MEM_ALLOC, { arg0: 4096, arg1: 3000 }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.MEM_ALLOC, { arg0: 0, arg1: 4096 }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.MEM_FREE, { arg0: a.ret0 + 4096 }).result).toBe(EINVAL);
    expect(pv.call(S.PV_OP.MEM_FREE, { arg0: a.ret0 }).result).toBe(0);
    expect(pv.call(S.PV_OP.MEM_FREE, { arg0: a.ret0 }).result).toBe(EINVAL);
    expect(c.vramInUseBytes).toBe(8192);
  });

  it('pv makes one call per PTE, pv-batch one per 128; both compute the same result', async () => {
    h = host();
    const counts: Record<string, { hypercalls: number; entries: number; mmio: number }> = {};
    for (const mode of ['pv', 'pv-batch'] as const) {
      const g = attach(mode, mode);
      const c = g.vm.counters;
      const before = { hypercalls: c.hypercalls, entries: c.hypercallEntries, mmio: c.mmioWrites };
      const n = 64;
      const r = rng(3);
      const x = g.vram(4 * n * n), y = g.sys(4 * n * n), z = g.vram(4 * n * n);
      x.u32.forEach((_, i) => (x.u32[i] = (r() * 2 ** 32) >>> 0));
      y.u32.forEach((_, i) => (y.u32[i] = (r() * 2 ** 32) >>> 0));
      await g.ch.launch(K.MADD, [buf(x), buf(y), buf(z)], params(['u32', n]));
      for (let i = 0; i < n * n; i++) if (z.u32[i] !== ((x.u32[i]! + y.u32[i]!) >>> 0)) expect.fail(`${mode} element ${i}`);
      counts[mode] = { hypercalls: c.hypercalls - before.hypercalls, entries: c.hypercallEntries - before.entries, mmio: c.mmioWrites - before.mmio };
      expect(c.shadowRebuilds).toBe(0);
    }
    // 3 buffers × 4 pages: pv = 12 MAP calls + 3 FLUSH; pv-batch = 3 MAP + 3 FLUSH.
    expect(counts.pv).toMatchObject({ hypercalls: 15, entries: 12 });
    expect(counts['pv-batch']).toMatchObject({ hypercalls: 6, entries: 12 });
  });

  it('a second client area can be registered and used', () => {
    h = host();
    const g = attach('pv-batch');
    const gpa = 0xb000_0000;
    const other = new PvClient(g.ram(gpa, 4 * 4096), gpa, 4, g.rd, g.wr);
    expect(other.call(S.PV_OP.MEM_ALLOC, { arg0: 4096, arg1: 4096 }, 3).result).toBe(0);
  });
});
