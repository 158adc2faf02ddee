// The shadow MMU's block-skipping scan (shadow-mmu.ts SCAN_BLOCK): blocks of entries absent in
// both guest and shadow are skipped with a memcmp, so entries at block edges, a stale shadow
// behind an all-zero guest block, and non-present but non-zero guest entries must come out as
// the entry-by-entry scan made them.
import { afterAll, describe, expect, test } from 'vitest';
import { Vram } from '../../src/gpu/vram.ts';
import { RangeAllocator } from '../../src/aggregator/alloc.ts';
import { newCounters } from '../../src/aggregator/counters.ts';
import { logger } from '../../src/log.ts';
import { ShadowMmu } from '../../src/aggregator/shadow-mmu.ts';
import { busAddress } from '../../src/aggregator/guest-memory.ts';
import { DmaTable } from '../../src/device-model/dma.ts';
import { native } from '../../src/native.ts';
import {
  ENTRY_TARGET_SHIFT, PD_ENTRIES, PD_SIZE, PDE_PRESENT, PTE_PRESENT, PTE_READ_ONLY, SMALL_PAGE, SMALL_PT_ENTRIES, TARGET_SYSMEM, TARGET_VRAM,
} from '../../src/gpu/spec.ts';

const MiB = 1 << 20;
const vram = new Vram(64 * MiB, 'shadow-scan-test');
afterAll(() => vram.close());
const slice = { base: 32 * MiB, size: 16 * MiB };
const host = new RangeAllocator(0, 32 * MiB, SMALL_PAGE);
const counters = newCounters();
const mmu = new ShadowMmu({ vram, slice, guest: () => null, busIndex: 0, host, counters, log: logger });
const dv = new DataView(vram.u8.buffer, vram.u8.byteOffset, vram.size);
const VRAM_T = TARGET_VRAM << ENTRY_TARGET_SHIFT;
// Guest layout (slice-relative): PD at 0, page tables at 64 KiB + k × 256 KiB, pages from 8 MiB.
const GPD = 0;
const gpt = (k: number) => 64 * 1024 + k * SMALL_PT_ENTRIES * 8;
const put = (gaddr: number, lo: number) => { dv.setUint32(slice.base + gaddr, lo, true); dv.setUint32(slice.base + gaddr + 4, 0, true); };
const entry = (addr: number, i: number): [number, number] => [dv.getUint32(addr + 8 * i, true), dv.getUint32(addr + 8 * i + 4, true)];

describe('shadow MMU scan', () => {
  // PDEs at block edges (0, 511, 512, 8191) and one non-present but non-zero PDE (1000).
  const pdes = [0, 511, 512, PD_ENTRIES - 1];
  const ptes = [0, 511, 512, 4000, SMALL_PT_ENTRIES - 1];
  pdes.forEach((pdi, k) => {
    put(GPD + 8 * pdi, gpt(k) | VRAM_T | PDE_PRESENT);
    ptes.forEach((i, j) => put(gpt(k) + 8 * i, (8 * MiB + (k * 8 + j) * SMALL_PAGE) | VRAM_T | PTE_PRESENT));
    put(gpt(k) + 8 * 7000, (8 * MiB) | VRAM_T); // not present: stays absent
  });
  put(GPD + 8 * 1000, gpt(9) | VRAM_T); // not present

  test('every present entry at a block edge is shadowed, nothing else', () => {
    const sp = mmu.acquire(TARGET_VRAM, GPD)!;
    expect(sp).not.toBeNull();
    expect(sp.dirty).toBe(true); // built when the device first translates through it
    mmu.sync(sp);
    const shadowPdes: number[] = [];
    for (let i = 0; i < PD_ENTRIES; i++) if (entry(sp.pd, i)[0] !== 0) shadowPdes.push(i);
    expect(shadowPdes).toEqual(pdes);
    pdes.forEach((pdi, k) => {
      const t = sp.tables[pdi]!;
      const shadowPtes: number[] = [];
      for (let i = 0; i < SMALL_PT_ENTRIES; i++) if (entry(t.addr, i)[0] !== 0) shadowPtes.push(i);
      expect(shadowPtes).toEqual(ptes);
      ptes.forEach((i, j) => expect(entry(t.addr, i)[0]).toBe((slice.base + 8 * MiB + (k * 8 + j) * SMALL_PAGE) | VRAM_T | PTE_PRESENT));
    });
  });

  test('entries the guest cleared, in blocks now all zero, are cleared in the shadow', () => {
    const sp = mmu.acquire(TARGET_VRAM, GPD)!;
    const t0 = sp.tables[0]!;
    put(gpt(0) + 8 * (SMALL_PT_ENTRIES - 1), 0); // last block of table 0 now all zero in the guest
    put(GPD + 8 * 511, 0); // PDE block 0 keeps PDE 0; PDE 511 goes
    put(GPD + 8 * (PD_ENTRIES - 1), 0); // last PD block all zero in the guest
    mmu.flush(null, true);
    expect(entry(t0.addr, SMALL_PT_ENTRIES - 1)).toEqual([0, 0]);
    expect(entry(t0.addr, 4000)[0]).not.toBe(0);
    expect(entry(sp.pd, 511)).toEqual([0, 0]);
    expect(entry(sp.pd, PD_ENTRIES - 1)).toEqual([0, 0]);
    expect(Object.keys(sp.tables).map(Number).sort((a, b) => a - b)).toEqual([0, 512]);
    expect(vram.u8.subarray(sp.pd, sp.pd + PD_SIZE).some((b, i) => b !== 0 && i >= 8 * 513)).toBe(false);
  });

  // The scan knows which shadow blocks hold entries without reading them (shadow-mmu.ts `live`);
  // after a restart those counts are gone and must come from the shadow tables themselves.
  test('after a restore, entries the guest cleared are still cleared in the shadow', () => {
    const sp = mmu.acquire(TARGET_VRAM, GPD)!;
    const t0 = sp.tables[0]!;
    expect(entry(t0.addr, 4000)[0]).not.toBe(0);
    mmu.restore([...mmu.spaces.values()], mmu.shadowBytes); // the same shadows, nothing derived kept
    put(gpt(0) + 8 * 4000, 0); // the only entry of its block
    put(GPD + 8 * 512, 0); // PDE 512, alone in its PD block
    mmu.flush(null, true);
    expect(entry(t0.addr, 4000)).toEqual([0, 0]);
    expect(entry(sp.pd, 512)).toEqual([0, 0]);
    expect(Object.keys(sp.tables).map(Number)).toEqual([0]);
  });
});

// A rescan skips a block of guest entries equal to the copy its shadow was made from
// (shadow-mmu.ts `seen`). What must still come through: an entry changed in such a block, a
// DMA map that went away or came back (the guest's bytes unchanged, the shadow not), a table
// the guest swapped for another with the same contents, and a restore.
describe('shadow MMU rescan of unchanged blocks', () => {
  const vram2 = new Vram(64 * MiB, 'shadow-seen-test');
  afterAll(() => vram2.close());
  const dma = new DmaTable();
  const RAM = 0x4000_0000; // guest-physical
  // The table owns a mapped fd (closed at the unmap): a fresh one per map.
  const mapRam = (writable: boolean) =>
    expect(dma.map({ addr: RAM, size: 1 * MiB, offset: 0, readable: true, writable, fd: native.memfdCreate('seen-ram', 1 * MiB) })).toBe(0);
  mapRam(true);
  const counters2 = newCounters();
  const mmu2 = new ShadowMmu({
    vram: vram2, slice, guest: () => dma, busIndex: 3, host: new RangeAllocator(0, 32 * MiB, SMALL_PAGE), counters: counters2, log: logger,
  });
  const dv2 = new DataView(vram2.u8.buffer, vram2.u8.byteOffset, vram2.size);
  const put2 = (gaddr: number, lo: number, hi = 0) => { dv2.setUint32(slice.base + gaddr, lo, true); dv2.setUint32(slice.base + gaddr + 4, hi, true); };
  const entry2 = (addr: number, i: number): [number, number] => [dv2.getUint32(addr + 8 * i, true), dv2.getUint32(addr + 8 * i + 4, true)];
  const SYS_T = TARGET_SYSMEM << ENTRY_TARGET_SHIFT;
  // PDE 0 → table A; VRAM pages at entries 0..99, sysmem pages at 600..615 (another block).
  const A = gpt(0), B = gpt(1);
  put2(GPD, A | VRAM_T | PDE_PRESENT);
  for (let i = 0; i < 100; i++) put2(A + 8 * i, (8 * MiB + i * SMALL_PAGE) | VRAM_T | PTE_PRESENT);
  for (let i = 0; i < 16; i++) put2(A + 8 * (600 + i), (RAM + i * SMALL_PAGE) | SYS_T | PTE_PRESENT);
  const sysShadow = (t: number, i: number) => busAddress(3, RAM + i * SMALL_PAGE) + (SYS_T | PTE_PRESENT);
  const asNumber = (e: [number, number]) => e[0] + e[1] * 2 ** 32;

  test('an unchanged table is skipped; a changed entry is not', () => {
    const sp = mmu2.acquire(TARGET_VRAM, GPD)!;
    mmu2.sync(sp);
    const t = sp.tables[0]!;
    expect(asNumber(entry2(t.addr, 605))).toBe(sysShadow(t.addr, 5));
    const w0 = counters2.shadowPtesWritten;
    mmu2.flush(null, true); // nothing changed
    expect(counters2.shadowPtesWritten).toBe(w0);
    put2(A + 8 * 50, (9 * MiB) | VRAM_T | PTE_PRESENT); // one entry of a known block
    put2(A + 8 * 99, 0);
    mmu2.flush(null, true);
    expect(counters2.shadowPtesWritten).toBe(w0 + 2);
    expect(entry2(t.addr, 50)[0]).toBe((slice.base + 9 * MiB) | VRAM_T | PTE_PRESENT);
    expect(entry2(t.addr, 99)).toEqual([0, 0]);
    expect(entry2(t.addr, 49)[0]).toBe((slice.base + 8 * MiB + 49 * SMALL_PAGE) | VRAM_T | PTE_PRESENT);
  });

  test('a DMA map gone, read-only, or back: the sysmem entries follow though the guest wrote nothing', () => {
    const sp = mmu2.acquire(TARGET_VRAM, GPD)!;
    const t = sp.tables[0]!;
    expect(dma.unmap(RAM, 1 * MiB)).toBe(0);
    mmu2.flush(null, true);
    for (let i = 0; i < 16; i++) expect(entry2(t.addr, 600 + i)).toEqual([0, 0]);
    expect(entry2(t.addr, 0)[0]).not.toBe(0); // VRAM entries stay
    mapRam(false);
    mmu2.flush(null, true);
    expect(asNumber(entry2(t.addr, 603))).toBe(sysShadow(t.addr, 3) + PTE_READ_ONLY);
    expect(dma.unmap(RAM, 1 * MiB)).toBe(0);
    mapRam(true);
    mmu2.flush(null, true);
    expect(asNumber(entry2(t.addr, 603))).toBe(sysShadow(t.addr, 3));
  });

  test('a PDE moved to another table with the same contents, then a different one', () => {
    const sp = mmu2.acquire(TARGET_VRAM, GPD)!;
    const t = sp.tables[0]!;
    vram2.u8.copyWithin(slice.base + B, slice.base + A, slice.base + A + SMALL_PT_ENTRIES * 8);
    put2(GPD, B | VRAM_T | PDE_PRESENT);
    mmu2.flush(null, true);
    expect(sp.tables[0]).toBe(t);
    expect(entry2(t.addr, 50)[0]).toBe((slice.base + 9 * MiB) | VRAM_T | PTE_PRESENT);
    put2(B + 8 * 50, 0);
    mmu2.flush(null, true);
    expect(entry2(t.addr, 50)).toEqual([0, 0]);
    put2(GPD, A | VRAM_T | PDE_PRESENT); // back to A, which still maps entry 50
    mmu2.flush(null, true);
    expect(entry2(t.addr, 50)[0]).toBe((slice.base + 9 * MiB) | VRAM_T | PTE_PRESENT);
  });

  test('a block cleared and then written back as it was comes back', () => {
    const sp = mmu2.acquire(TARGET_VRAM, GPD)!;
    const t = sp.tables[0]!;
    const saved = vram2.u8.slice(slice.base + A, slice.base + A + 8 * 512);
    vram2.u8.fill(0, slice.base + A, slice.base + A + 8 * 512); // block 0 all zero
    mmu2.flush(null, true);
    expect(entry2(t.addr, 0)).toEqual([0, 0]);
    vram2.u8.set(saved, slice.base + A);
    mmu2.flush(null, true);
    expect(entry2(t.addr, 0)[0]).toBe((slice.base + 8 * MiB) | VRAM_T | PTE_PRESENT);
  });

  // Runs of continuing entries are validated as one range: where part of a run is not the VM's
  // (beyond the slice, outside the DMA map) or read-only, each page must come out on its own.
  test('runs that leave the slice or the DMA map, or are partly read-only', () => {
    const sp = mmu2.acquire(TARGET_VRAM, GPD)!;
    const t = sp.tables[0]!;
    const C = 2048; // a block of its own
    const lastVram = slice.size - 2 * SMALL_PAGE; // two pages inside, then two beyond the slice
    for (let k = 0; k < 4; k++) put2(A + 8 * (C + k), (lastVram + k * SMALL_PAGE) | VRAM_T | PTE_PRESENT);
    const lastRam = RAM + 1 * MiB - 2 * SMALL_PAGE; // two pages mapped, two beyond the DMA map
    for (let k = 0; k < 4; k++) put2(A + 8 * (C + 8 + k), (lastRam + k * SMALL_PAGE) | SYS_T | PTE_PRESENT);
    mmu2.flush(null, true);
    expect(entry2(t.addr, C)[0]).toBe((slice.base + lastVram) | VRAM_T | PTE_PRESENT);
    expect(entry2(t.addr, C + 1)[0]).toBe((slice.base + lastVram + SMALL_PAGE) | VRAM_T | PTE_PRESENT);
    expect(entry2(t.addr, C + 2)).toEqual([0, 0]);
    expect(entry2(t.addr, C + 3)).toEqual([0, 0]);
    expect(asNumber(entry2(t.addr, C + 9))).toBe(busAddress(3, lastRam + SMALL_PAGE) + (SYS_T | PTE_PRESENT));
    expect(entry2(t.addr, C + 10)).toEqual([0, 0]);
    expect(entry2(t.addr, C + 11)).toEqual([0, 0]);
    // The first half of the map read-only, the second writable: a run across the boundary.
    expect(dma.unmap(RAM, 1 * MiB)).toBe(0);
    expect(dma.map({ addr: RAM, size: MiB / 2, offset: 0, readable: true, writable: false, fd: native.memfdCreate('seen-ro', MiB / 2) })).toBe(0);
    expect(dma.map({ addr: RAM + MiB / 2, size: MiB / 2, offset: 0, readable: true, writable: true, fd: native.memfdCreate('seen-rw', MiB / 2) })).toBe(0);
    const mid = RAM + MiB / 2 - 2 * SMALL_PAGE;
    for (let k = 0; k < 4; k++) put2(A + 8 * (C + 16 + k), (mid + k * SMALL_PAGE) | SYS_T | PTE_PRESENT);
    mmu2.flush(null, true);
    for (let k = 0; k < 4; k++) {
      expect(asNumber(entry2(t.addr, C + 16 + k))).toBe(busAddress(3, mid + k * SMALL_PAGE) + (SYS_T | PTE_PRESENT) + (k < 2 ? PTE_READ_ONLY : 0));
    }
    expect(dma.unmap(RAM, MiB / 2)).toBe(0);
    expect(dma.unmap(RAM + MiB / 2, MiB / 2)).toBe(0);
    mapRam(true);
  });

  test('after a restore the first rescan reads every block again', () => {
    const sp = mmu2.acquire(TARGET_VRAM, GPD)!;
    const t = sp.tables[0]!;
    mmu2.flush(null, true); // settled: the copies are those of the ranges now
    dv2.setUint32(t.addr + 8 * 10, 0, true); // a shadow entry the copy would not know of
    dv2.setUint32(t.addr + 8 * 10 + 4, 0, true);
    mmu2.restore([...mmu2.spaces.values()], mmu2.shadowBytes);
    mmu2.flush(null, true);
    expect(entry2(t.addr, 10)[0]).toBe((slice.base + 8 * MiB + 10 * SMALL_PAGE) | VRAM_T | PTE_PRESENT);
  });
});
