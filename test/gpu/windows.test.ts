// Compute windows over VRAM are cached across launches (keyed by the translated extents);
// a page-table change must never reach stale memory, and sysmem windows are never cached.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import { pte } from '../support/host-driver/pte.ts';
import { buf, params, rig, type Rig } from './helpers.ts';
import { native } from '../../src/native.ts';
import { WindowCache } from '../../src/gpu/windows.ts';
import { VulkanBackend } from '../../src/gpu/vulkan.ts';

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

// A GPU pins the pages of an imported host range. Over a private (copy-on-write) read-only
// window those are private copies, so a cached window would keep its first contents from the
// device's point of view (the H100 read a previous benchmark's inputs). The program backend
// says how READ_ONLY windows must be mapped; here the mapping itself is checked: a write through
// the window reaches the fd only when it is shared.
describe('read-only windows per program device', () => {
  let r: Rig;
  beforeAll(() => {
    r = rig({ vramSize: 16 << 20 });
  });
  afterAll(() => r.close());

  const vram32 = () => new Uint32Array(r.engine.vram.u8.buffer, r.engine.vram.u8.byteOffset, r.engine.vram.u8.byteLength >>> 2);
  const probe = (readOnly: 'private' | 'shared' | 'fresh') => {
    const w = new WindowCache(r.engine.vram.fd);
    w.readOnly = readOnly;
    const off = 4 << 20;
    vram32()[off / 4] = 0x11111111;
    const a = w.acquire([{ fd: r.engine.vram.fd, offset: off, length: 4096 }], true);
    const b = w.acquire([{ fd: r.engine.vram.fd, offset: off, length: 4096 }], true);
    const cached = a.address === b.address;
    // Write through the window's pages (what a pinning device's stray write would do).
    const view = new Uint32Array(native.windowBuffer(a.id));
    const before = view[0];
    view[0] = 0x22222222;
    const reachedFd = vram32()[off / 4] === 0x22222222;
    vram32()[off / 4] = 0x33333333;
    const seesFd = view[0] === 0x33333333;
    a.release();
    b.release();
    w.clear();
    return { cached, before, reachedFd, seesFd };
  };

  it("'private': cached, copy-on-write (writes stay local, and the written page stops following the fd)", () => {
    expect(probe('private')).toEqual({ cached: true, before: 0x11111111, reachedFd: false, seesFd: false });
  });
  it("'shared': cached and always the fd's current contents", () => {
    expect(probe('shared')).toEqual({ cached: true, before: 0x11111111, reachedFd: true, seesFd: true });
  });
  it("'fresh': a new private window per launch", () => {
    expect(probe('fresh')).toEqual({ cached: false, before: 0x11111111, reachedFd: false, seesFd: false });
  });
  it('the Vulkan backend on a CPU device (lavapipe reads through the mapping) keeps them private', () => {
    const be = VulkanBackend.open(process.env.VUGPU_TEST_VULKAN_DEVICE ?? 'llvmpipe');
    try {
      expect(be.deviceInfo.type).toBe('cpu');
      expect(be.readOnlyWindows).toBe('private');
    } finally {
      be.close();
    }
  });
});
