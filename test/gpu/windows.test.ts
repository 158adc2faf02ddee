// Compute windows over VRAM are cached across launches (keyed by the translated extents);
// a page-table change must never reach stale memory, and sysmem windows are never cached.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import { pte } from '../../src/gpu/host-driver/pte.ts';
import { buf, params, rig, type Rig } from './helpers.ts';

describe('compute window cache', () => {
  let r: Rig;
  beforeAll(() => {
    r = rig({ vramSize: 64 << 20 });
  });
  afterAll(() => r.close());

  const memset = (b: { va: number; length: number }, pattern: number, words: number) =>
    r.ch.launch(K.MEMSET, [b], params(['u32', pattern], ['u32', 0], ['u64', BigInt(words)]));

  it('reuses a VRAM window and follows a remapped page', async () => {
    const w = r.engine.cp.windows;
    const a = r.vram(8192), other = r.vram(4096);
    other.u32.fill(0);
    const h0 = w.hits, m0 = w.misses;
    await memset(buf(a), 1, 2048);
    await memset(buf(a), 2, 2048);
    expect(w.misses - m0).toBe(1);
    expect(w.hits - h0).toBe(1);
    expect(a.u32.every((v) => v === 2)).toBe(true);
    // Point the second page of `a` at `other`'s VRAM page: the next launch must write there.
    const otherAddr = other.u8.byteOffset - r.engine.vram.u8.byteOffset;
    r.vm.setPte(a.va + 4096, pte(otherAddr));
    r.drv.flushTlb(r.vm.pd);
    await memset(buf(a), 3, 2048);
    expect(a.u32.subarray(0, 1024).every((v) => v === 3)).toBe(true);
    expect(a.u32.subarray(1024).every((v) => v === 2)).toBe(true); // old page untouched
    expect(other.u32.every((v) => v === 3)).toBe(true);
  });

  it('does not cache windows over system memory', async () => {
    const w = r.engine.cp.windows;
    const s = r.sys(4096);
    const h0 = w.hits, m0 = w.misses;
    await memset(buf(s), 7, 1024);
    await memset(buf(s), 8, 1024);
    expect(w.hits - h0).toBe(0);
    expect(w.misses - m0).toBe(0);
    expect(s.u32.every((v) => v === 8)).toBe(true);
  });
});
