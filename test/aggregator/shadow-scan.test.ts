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
import {
  ENTRY_TARGET_SHIFT, PD_ENTRIES, PD_SIZE, PDE_PRESENT, PTE_PRESENT, SMALL_PAGE, SMALL_PT_ENTRIES, TARGET_VRAM,
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
