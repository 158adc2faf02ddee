// Resident VRAM (hw-spec §6.3 BUFFER_FLAGS.DEVICE_CACHED, native/src/vulkan/resident.cc) on the
// test device with the device-memory path forced (VUGPU_VK_MEMORY=device; lavapipe here, a GPU
// with VUGPU_TEST_VULKAN_DEVICE): a DEVICE_CACHED binding is uploaded once and then runs on the
// device's copy; every engine write to its VRAM (copy engine, an uncached launch, a scrub) makes
// the next launch upload it again; launches write through to VRAM; a CPU store through the VRAM
// mapping (BAR1) is not seen, as the spec says.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { VulkanBackend } from '../../src/gpu/vulkan.ts';
import { PPROG } from '../../src/gpu/spec.ts';
import { glsl, rig, type Rig } from './helpers.ts';
import type { ProgramModule } from '../support/host-driver/driver.ts';

const DEVICE = process.env.VUGPU_TEST_VULKAN_DEVICE ?? 'llvmpipe';
const N = 4096;            // words per buffer: 16 KiB, four pages
const BYTES = 4 * N;

/** o[i] = a[i] + add */
const ADD = `#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer A { uint a[]; };
layout(set = 0, binding = 1) buffer O { uint o[]; };
layout(push_constant) uniform P { uint add; } p;
void main() { uint i = gl_GlobalInvocationID.x; o[i] = a[i] + p.add; }`;

const u32 = (v: number) => new Uint8Array(new Uint32Array([v]).buffer);

describe('resident VRAM (DEVICE_CACHED bindings, device-memory path forced)', () => {
  let r: Rig;
  let backend: VulkanBackend;
  let add: ProgramModule;
  interface Buf { va: number; addr: number; u32: Uint32Array }
  const vbuf = (): Buf => {
    const b = r.drv.vramBuffer(r.vm, BYTES);
    return { va: b.va, addr: b.addr, u32: new Uint32Array(b.u8.buffer, b.u8.byteOffset, N) };
  };
  let A: Buf, O: Buf;
  /** o = a + k, both cached unless told; resolves when done. */
  const run = (a: Buf, o: Buf, k: number, opts: { cachedA?: boolean; cachedO?: boolean } = {}) =>
    r.ch.launchProgram(add, {
      grid: [N / 64, 1, 1], push: u32(k),
      buffers: [
        { va: a.va, length: BYTES, readOnly: true, cached: opts.cachedA ?? true },
        { va: o.va, length: BYTES, cached: opts.cachedO ?? true },
      ],
    });
  const stats = () => native.vulkanStats();
  const expectAll = (b: Buf, f: (i: number) => number) => {
    let bad = -1;
    for (let i = 0; i < N && bad < 0; i++) if (b.u32[i] !== f(i) >>> 0) bad = i;
    expect({ bad, got: bad < 0 ? 0 : b.u32[bad], want: bad < 0 ? 0 : f(bad) >>> 0 }).toEqual({ bad: -1, got: 0, want: 0 });
  };

  beforeAll(() => {
    process.env.VUGPU_VK_MEMORY = 'device';
    // Mirrors of 64 KiB: bindings that straddle two are staged (the last test).
    process.env.VUGPU_VK_RESIDENT_SPAN = String(64 << 10);
    backend = VulkanBackend.open(DEVICE);
    r = rig({ programs: backend, vramSize: 64 << 20 });
    add = r.drv.programBuffer(r.vm, glsl(ADD));
    A = vbuf();
    O = vbuf();
    for (let i = 0; i < N; i++) A.u32[i] = i;
  });
  afterAll(() => {
    r?.close();
    backend?.close();
    delete process.env.VUGPU_VK_MEMORY;
    delete process.env.VUGPU_VK_RESIDENT_SPAN;
    native.vulkanReadTuning();
  });

  it('is on: the device keeps VRAM and says programs v1.1', () => {
    expect(backend.deviceInfo.memory).toBe('device');
    expect(r.engine.vram.written).not.toBeNull();
    expect(r.engine.mmioRead(PPROG.VERSION, 4)).toBe(0x00010001);
  });

  it('uploads a cached binding once, then runs on the device copy; results are written through to VRAM', async () => {
    const s0 = stats();
    await run(A, O, 1);
    expectAll(O, (i) => i + 1);
    const s1 = stats();
    expect(s1.residentUploadBytes - s0.residentUploadBytes).toBe(2 * BYTES);
    await run(A, O, 2);
    expectAll(O, (i) => i + 2);   // the device's write reached VRAM (the CPU view)
    const s2 = stats();
    expect(s2.residentUploadBytes - s1.residentUploadBytes).toBe(0);
    expect(s2.uploadBytes - s1.uploadBytes).toBe(0);
    expect(s2.residentBytes - s1.residentBytes).toBe(2 * BYTES);
    expect(s2.mirrorBytes).toBeGreaterThan(0);
  });

  it('a binding without DEVICE_CACHED is staged per launch as before', async () => {
    const s0 = stats();
    await run(A, O, 3, { cachedA: false, cachedO: false });
    expectAll(O, (i) => i + 3);
    const s1 = stats();
    expect(s1.residentBytes - s0.residentBytes).toBe(0);
    expect(s1.uploadBytes - s0.uploadBytes).toBe(2 * BYTES);
  });

  it('a CPU store through the VRAM mapping (BAR1) is not seen by a cached binding (hw-spec §6.3)', async () => {
    await run(A, O, 0);           // A resident
    A.u32[7] = 0xdead;            // behind the device's back
    await run(A, O, 1);
    expect(O.u32[7]).toBe(8);     // the device's copy: 7 + 1
    A.u32[7] = 7;
  });

  it('the copy engine writing the VRAM makes the next launch upload it again', async () => {
    await run(A, O, 0);
    const src = r.drv.sysmemBuffer(r.vm, BYTES);
    const s32 = new Uint32Array(src.u8.buffer, src.u8.byteOffset, N);
    for (let i = 0; i < N; i++) s32[i] = 1000 + i;
    const s0 = stats();
    await r.ch.copy(A.va, src.va, BYTES);
    await run(A, O, 1);
    expectAll(O, (i) => 1001 + i);
    const s1 = stats();
    expect(s1.residentDroppedPages - s0.residentDroppedPages).toBeGreaterThanOrEqual(BYTES / 4096);
    expect(s1.residentUploadBytes - s0.residentUploadBytes).toBe(BYTES);
  });

  it('a launch writing the VRAM without DEVICE_CACHED makes cached readers upload it again', async () => {
    const B = vbuf();
    for (let i = 0; i < N; i++) B.u32[i] = 5 * i;
    await run(A, O, 0);                               // A resident (1000 + i)
    await run(B, A, 1, { cachedO: false });           // A = 5i + 1, written uncached
    await run(A, O, 0);
    expectAll(O, (i) => 5 * i + 1);
  });

  it('a cached launch reads what an earlier cached launch wrote', async () => {
    const P = vbuf();
    await run(A, O, 10);                              // O = 5i + 11 on the device and in VRAM
    const s0 = stats();
    await run(O, P, 1);                               // P = O + 1, O from the device copy
    expectAll(P, (i) => 5 * i + 12);
    expect(stats().residentUploadBytes - s0.residentUploadBytes).toBe(BYTES); // only P's pages
  });

  it('a DEVICE_CACHED binding that straddles two mirrors is staged, and what it writes is not stale on the mirror', async () => {
    // s: 16 KiB of a 128 KiB buffer across a 64 KiB boundary of VRAM; t: the 16 KiB before the
    // boundary, inside one mirror, its second half s's first half.
    const big = r.drv.vramBuffer(r.vm, 128 << 10);
    const off = Math.ceil((big.addr + 16384) / 65536) * 65536 - 8192 - big.addr;
    const sub = (o: number): Buf => ({ va: big.va + o, addr: big.addr + o, u32: new Uint32Array(big.u8.buffer, big.u8.byteOffset + o, N) });
    const s = sub(off), t = sub(off - 8192);
    expect(Math.floor(s.addr / 65536)).not.toBe(Math.floor((s.addr + BYTES - 1) / 65536));
    expect(Math.floor(t.addr / 65536)).toBe(Math.floor((t.addr + BYTES - 1) / 65536));
    big.u8.fill(0);
    await run(t, O, 0);                               // t resident: zeros
    await run(A, s, 7);                               // s = A + 7, staged (it straddles)
    await run(t, O, 0);                               // t from the mirror: must not be stale
    expectAll(O, (i) => (i < N / 2 ? 0 : A.u32[i - N / 2]! + 7));
  });

  it('a scrub of the VRAM (a slice freed for another VM) drops the device copy: the next tenant sees zeros', async () => {
    await run(A, O, 0);
    r.engine.vram.zero(A.addr, BYTES);                // what detach does to a VM's slice
    await run(A, O, 1);
    expectAll(O, () => 1);
  });
});
