// The Vulkan backend's GPU paths, run on lavapipe (VUGPU_TEST_VULKAN_DEVICE picks another):
//   - the device-memory path (native/src/vulkan: per-launch device-local copies, write-back of
//     writable bindings only, streamed panels of a GEMM, the import cache), forced on with
//     VUGPU_VK_MEMORY=device and tiny panel thresholds, through the engine with operands in VRAM
//     and system memory, against the native kernels;
//   - FMMUL's GPU form (fmmul_gpu.comp, VUGPU_VK_GEMM=gpu) against the native kernel, zero-copy;
//   - device loss (VUGPU_TEST_HOOKS=1: the addon acts as if VK_ERROR_DEVICE_LOST came back):
//     the launch in flight fails its channel with ENGINE_LOST, another channel's finished
//     results stay, the device is rebuilt and later launches run on it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { native } from '../../src/native.ts';
import { K } from '../../src/gpu/kernels.ts';
import { GpuError } from '../support/host-driver/driver.ts';
import { VulkanBackend } from '../../src/gpu/vulkan.ts';
import { CHAN_ERR, progReasonName } from '../../src/gpu/spec.ts';
import { builtinPlan, FMMUL_GPU64_SPV, FMMUL_GPU_SPV, gpuVariantsOn, setGemmGpuTile, setGemmKSliceForTests } from '../../src/gpu/program/builtins.ts';
import { buf, params, rig, rng, type GpuBuf, type Rig } from './helpers.ts';
import { lossRig, lossRound, refVsCpu } from './device-loss-scenario.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const DEVICE = process.env.VUGPU_TEST_VULKAN_DEVICE ?? 'llvmpipe';
process.env.VUGPU_TEST_HOOKS = '1';

function randF32(out: Float32Array, seed: number): void {
  const r = rng(seed);
  for (let i = 0; i < out.length; i++) out[i] = r() * 2 - 1;
}

/** FMMUL natively on copies of a and b: the reference C. */
function nativeFmmul(n: number, a: Float32Array, b: Float32Array): Float32Array {
  const A = a.slice(), B = b.slice(), C = new Float32Array(n * n);
  const st = native.runKernelSync({
    kernel: K.FMMUL, windows: [A, B, C].map((x) => native.addressOf(x)), lengths: [A, B, C].map((x) => x.byteLength),
    params: params(['u32', n]),
  });
  expect(st).toBe(0);
  return C;
}

/** |got − want| ≤ 2e-4·Σ|a·b| + 2e-6 (test/gpu/builtins-spirv.test.ts's FMMUL tolerance). */
function expectGemmClose(n: number, a: Float32Array, b: Float32Array, got: Float32Array, want: Float32Array): void {
  let bad = -1;
  for (let i = 0; i < n && bad < 0; i++)
    for (let j = 0; j < n; j++) {
      let mag = 0;
      for (let k = 0; k < n; k++) mag += Math.abs(a[i * n + k]! * b[k * n + j]!);
      if (!(Math.abs(got[i * n + j]! - want[i * n + j]!) <= 2e-4 * mag + 2e-6)) {
        bad = i * n + j;
        break;
      }
    }
  expect({ n, bad, got: got[bad], want: want[bad] }).toMatchObject({ bad: -1 });
}

async function engineFmmul(r: Rig, n: number, where: 'vram' | 'sysmem', seed: number): Promise<Uint32Array> {
  const bytes = 4 * n * n;
  const alloc = (x: number): GpuBuf => (where === 'vram' ? r.vram(x) : r.sys(x));
  const a = alloc(bytes), b = alloc(bytes), c = alloc(bytes);
  randF32(a.f32.subarray(0, n * n), seed);
  randF32(b.f32.subarray(0, n * n), seed + 1);
  c.f32.fill(NaN);
  await r.ch.launch(K.FMMUL, [a, b, c].map((x) => ({ va: x.va, length: bytes })), params(['u32', n]));
  const A = a.f32.slice(0, n * n), B = b.f32.slice(0, n * n);
  const C = c.f32.slice(0, n * n);
  expectGemmClose(n, A, B, C, nativeFmmul(n, A, B));
  return new Uint32Array(C.buffer);
}

beforeAll(() => {
  execFileSync('bash', [path.join(ROOT, 'scripts/build-spirv.sh')], { stdio: 'inherit' });
});

/** Writes word 0 of its one binding and nothing else. */
const PARTIAL_WRITER = `#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer O { uint o[]; };
void main() { o[0] = 1u; }`;

function glslWords(src: string): Uint32Array {
  const dir = mkdtempSync(path.join(tmpdir(), 'vugpu-glsl-'));
  try {
    writeFileSync(path.join(dir, 's.comp'), src);
    execFileSync('glslangValidator', ['-V', '--target-env', 'vulkan1.1', '-o', path.join(dir, 's.spv'), path.join(dir, 's.comp')]);
    const b = readFileSync(path.join(dir, 's.spv'));
    return new Uint32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

let nextSlot = 97_000;  // program slots are process-wide; the engine's cache takes its own

describe('device-memory path (forced on the test device)', () => {
  let r: Rig;
  let backend: VulkanBackend;
  /** Compile raw words into a fresh slot through the backend (0 = ready). */
  const compileSlot = (words: Uint32Array) => new Promise<number>((resolve, reject) => {
    const slot = nextSlot++;
    backend.compile(slot, words, 0, new Uint32Array(0), (res) => (res.status === 0 ? resolve(slot) : reject(new Error(`compile ${res.status}`))));
  });
  beforeAll(() => {
    process.env.VUGPU_VK_MEMORY = 'device';
    process.env.VUGPU_VK_GEMM = 'gpu';
    process.env.VUGPU_VK_PANEL_BYTES = '4096';
    process.env.VUGPU_VK_PANEL_WORKGROUPS = '1';
    backend = VulkanBackend.open(DEVICE);
    r = rig({ programs: backend, builtinsOnPrograms: true, vramSize: 64 << 20 });
  });
  afterAll(() => {
    r?.close();
    backend?.close();
    for (const k of ['VUGPU_VK_MEMORY', 'VUGPU_VK_GEMM', 'VUGPU_VK_PANEL_BYTES', 'VUGPU_VK_PANEL_WORKGROUPS']) delete process.env[k];
    native.vulkanReadTuning();  // launches read the VUGPU_VK_* knobs parsed at open, or parsed again here
  });

  it('is on, with the GPU GEMM', () => {
    expect(backend.deviceInfo.memory).toBe('device');
    expect(gpuVariantsOn()).toBe(true);
  });

  it('FMMUL streamed in panels, operands in VRAM and in system memory, equals the native kernel', async () => {
    const s0 = native.vulkanStats();
    // 512: the GPU form, 4 rows of 128-row tiles → 4 panels; 260: its edge tiles; 102: n % 4 ≠ 0,
    // the portable form (64-row tiles, 2 panels).
    for (const n of [512, 260, 102]) {
      await engineFmmul(r, n, 'vram', n);
      await engineFmmul(r, n, 'sysmem', n + 7);
    }
    const s1 = native.vulkanStats();
    expect(s1.panels - s0.panels).toBeGreaterThanOrEqual(2 * (4 + 3 + 2));
    // A and B up, C down; C is not uploaded (the plan declares it overwritten: zero-filled on
    // the device instead).
    const want = [512, 260, 102].reduce((s, n) => s + 2 * 4 * 4 * n * n, 0);
    expect(s1.uploadBytes - s0.uploadBytes).toBe(want / 2);
    expect(s1.zeroedBytes - s0.zeroedBytes).toBe(want / 4);
    expect(s1.downloadBytes - s0.downloadBytes).toBe(want / 4);
  });

  it('FMMUL with B streamed by rows of k: the first panel runs as k slices, same bytes moved, equals the native kernel', async () => {
    // Slabs of 64 KiB: B (n = 512: 1 MiB) in 8 slices of 64 k; 260: 4 slices of 80, 80, 80, 20
    // (B 270 KiB); 102 is the portable form, which declares no k stream.
    process.env.VUGPU_VK_K_SLAB_BYTES = '65536';
    native.vulkanReadTuning();
    try {
      for (const [n, slices] of [[512, 8], [260, 4], [102, 0]] as const) {
        for (const where of ['vram', 'sysmem'] as const) {
          const s0 = native.vulkanStats();
          await engineFmmul(r, n, where, 3 * n + 1);
          const s1 = native.vulkanStats();
          expect({ n, where, kSlices: s1.kSlices - s0.kSlices }).toEqual({ n, where, kSlices: slices });
          // Exactly what the unsliced path moves: A and B up once, C zero-filled and down.
          expect(s1.uploadBytes - s0.uploadBytes).toBe(2 * 4 * n * n);
          expect(s1.zeroedBytes - s0.zeroedBytes).toBe(4 * n * n);
          expect(s1.downloadBytes - s0.downloadBytes).toBe(4 * n * n);
        }
      }
      // One panel (a GEMM too small for row panels): B still streams, in slabs, on the copy
      // queues' chain (forced onto lavapipe's one queue); n = 512: 1 MiB of B in 4 slices.
      process.env.VUGPU_VK_MAX_PANELS = '1';
      process.env.VUGPU_VK_CHAIN_ONE_QUEUE = '1';
      process.env.VUGPU_VK_K_SLAB_BYTES = String(256 << 10);
      native.vulkanReadTuning();
      for (const where of ['vram', 'sysmem'] as const) {
        const s0 = native.vulkanStats();
        await engineFmmul(r, 512, where, 99);
        const s1 = native.vulkanStats();
        expect({ where, panels: s1.panels - s0.panels, kSlices: s1.kSlices - s0.kSlices }).toEqual({ where, panels: 0, kSlices: 4 });
        expect(s1.uploadBytes - s0.uploadBytes).toBe(2 * 4 * 512 * 512);
        expect(s1.downloadBytes - s0.downloadBytes).toBe(4 * 512 * 512);
      }
      delete process.env.VUGPU_VK_MAX_PANELS;
      delete process.env.VUGPU_VK_CHAIN_ONE_QUEUE;
      process.env.VUGPU_VK_K_SLAB_BYTES = '65536';
      native.vulkanReadTuning();
      // Turned off: no slices, same results within the tolerance — once the knobs are parsed
      // again: a launch never reads the environment itself.
      process.env.VUGPU_VK_K_SLICES = '1';
      const sEnv = native.vulkanStats();
      await engineFmmul(r, 512, 'vram', 76);
      expect(native.vulkanStats().kSlices - sEnv.kSlices).toBe(8);
      expect(native.vulkanReadTuning().K_SLICES).toBe(1);
      const s0 = native.vulkanStats();
      await engineFmmul(r, 512, 'vram', 77);
      expect(native.vulkanStats().kSlices - s0.kSlices).toBe(0);
    } finally {
      delete process.env.VUGPU_VK_K_SLAB_BYTES;
      delete process.env.VUGPU_VK_K_SLICES;
      delete process.env.VUGPU_VK_MAX_PANELS;
      delete process.env.VUGPU_VK_CHAIN_ONE_QUEUE;
      native.vulkanReadTuning();
    }
  });

  it('a GEMM too small for panels but not for two of half their size runs as two, the first in two k slices', async () => {
    // n = 512: 64×64 tiles, 8×8 workgroups; A and C 2 MiB together. Panels of ≥ 2 MiB and ≥ 64
    // workgroups: one would fit, so two of half that size (as 1024³ with the defaults).
    process.env.VUGPU_VK_PANEL_BYTES = String(2 << 20);
    process.env.VUGPU_VK_PANEL_WORKGROUPS = '64';
    native.vulkanReadTuning();
    const run = async (where: 'vram' | 'sysmem', seed: number) => {
      const s0 = native.vulkanStats();
      const c = await engineFmmul(r, 512, where, seed);
      const s1 = native.vulkanStats();
      expect(s1.uploadBytes - s0.uploadBytes).toBe(2 * 4 * 512 * 512);
      expect(s1.downloadBytes - s0.downloadBytes).toBe(4 * 512 * 512);
      return { c, panels: s1.panels - s0.panels, kSlices: s1.kSlices - s0.kSlices };
    };
    try {
      for (const where of ['vram', 'sysmem'] as const) {
        const a = await run(where, 41);
        expect({ where, panels: a.panels, kSlices: a.kSlices }).toEqual({ where, panels: 2, kSlices: 2 });
        expect((await run(where, 41)).c).toEqual(a.c);  // the same bits again
      }
      // Slabs named by the environment win over the pair's two slices (1 MiB of B in 4).
      process.env.VUGPU_VK_K_SLAB_BYTES = String(256 << 10);
      native.vulkanReadTuning();
      expect(await run('vram', 42)).toMatchObject({ panels: 2, kSlices: 4 });
      delete process.env.VUGPU_VK_K_SLAB_BYTES;
      native.vulkanReadTuning();
      // Off: one panel (B in one slab: smaller than the one-panel slab size).
      process.env.VUGPU_VK_PANEL_PAIR = '0';
      native.vulkanReadTuning();
      expect(await run('vram', 43)).toMatchObject({ panels: 0, kSlices: 0 });
      process.env.VUGPU_VK_PANEL_PAIR = '1';
      native.vulkanReadTuning();
      // A plan without a k stream (the portable form, n % 4 ≠ 0) stays one panel.
      process.env.VUGPU_VK_PANEL_BYTES = String(1 << 20);
      native.vulkanReadTuning();
      const s0 = native.vulkanStats();
      await engineFmmul(r, 510, 'vram', 44);
      expect(native.vulkanStats().panels - s0.panels).toBe(0);
    } finally {
      process.env.VUGPU_VK_PANEL_BYTES = '4096';
      process.env.VUGPU_VK_PANEL_WORKGROUPS = '1';
      delete process.env.VUGPU_VK_K_SLAB_BYTES;
      delete process.env.VUGPU_VK_PANEL_PAIR;
      native.vulkanReadTuning();
    }
  });

  it('operands in guest system memory (windows of one launch) go through pinned bounce buffers, VRAM ones are imported', async () => {
    // A sysmem window is mapped per launch: importing it would pin its pages every time.
    const n = 64, bytes = 4 * n * n;
    const s0 = native.vulkanStats();
    await engineFmmul(r, n, 'sysmem', 5);
    const s1 = native.vulkanStats();
    // A and B copied into their bounce buffers; C, which the plan zero-fills on the device, not
    // (it comes back through its bounce buffer).
    expect({ bounced: s1.bounceBytes - s0.bounceBytes, imports: s1.imports - s0.imports, hits: s1.importHits - s0.importHits })
      .toEqual({ bounced: 2 * bytes, imports: 0, hits: 0 });
    await engineFmmul(r, n, 'vram', 6);
    const s2 = native.vulkanStats();
    expect(s2.bounceBytes - s1.bounceBytes).toBe(0);
    expect(s2.imports - s1.imports + s2.importHits - s1.importHits).toBeGreaterThan(0);
    // A guest program's writable binding in system memory goes up through its bounce buffer
    // too: the words the program leaves alone come back unchanged.
    const mod = r.drv.programBuffer(r.vm, new Uint8Array(glslWords(PARTIAL_WRITER).buffer));
    const o = r.sys(4096);
    for (let i = 0; i < 1024; i++) o.u32[i] = 0xa5a50000 + i;
    const sb = native.vulkanStats().bounceBytes;
    await r.ch.launchProgram(mod, { buffers: [{ va: o.va, length: 4096 }] });
    expect(native.vulkanStats().bounceBytes - sb).toBe(4096);
    expect(o.u32[0]).toBe(1);
    for (let i = 1; i < 1024; i++) if (o.u32[i] !== 0xa5a50000 + i) expect({ i, got: o.u32[i] }).toBeNull();
    const s2b = native.vulkanStats();
    // Imported anyway on request (measurement): same results, no bounce.
    process.env.VUGPU_VK_IMPORT_TRANSIENT = '1';
    native.vulkanReadTuning();
    try {
      await engineFmmul(r, n, 'sysmem', 7);
      const s3 = native.vulkanStats();
      expect(s3.bounceBytes - s2b.bounceBytes).toBe(0);
      expect(s3.imports - s2b.imports).toBeGreaterThan(0);
    } finally {
      delete process.env.VUGPU_VK_IMPORT_TRANSIENT;
      native.vulkanReadTuning();
    }
  });

  it('relaunching over the same VRAM windows reuses their imports', async () => {
    const n = 64, bytes = 4 * n * n;
    const a = r.vram(bytes), b = r.vram(bytes), c = r.vram(bytes);
    a.f32.fill(1);
    b.f32.fill(2);
    const bufs = [a, b, c].map(buf);
    await r.ch.launch(K.FMMUL, bufs, params(['u32', n]));
    const s0 = native.vulkanStats();
    for (let i = 0; i < 3; i++) await r.ch.launch(K.FMMUL, bufs, params(['u32', n]));
    const s1 = native.vulkanStats();
    expect(s1.imports - s0.imports).toBe(0);
    expect(s1.importHits - s0.importHits).toBe(9);
    expect(c.f32[n * n - 1]).toBe(2 * n);
  });

  it('a staged relaunch submits its recorded command buffers again: new inputs go up, results right; other windows or parameters record anew', async () => {
    const replays = () => native.vulkanStats().replays;
    const n = 128, bytes = 4 * n * n; // two rows of 64×64 tiles: two panels
    const a = r.vram(bytes), b = r.vram(bytes), c = r.vram(bytes), c2 = r.vram(bytes);
    randF32(a.f32, 11);
    randF32(b.f32, 12);
    const gemm = async (out: GpuBuf, m = n) => {
      out.f32.fill(NaN);
      await r.ch.launch(K.FMMUL, [a, b, out].map(buf), params(['u32', m]));
      const A = a.f32.slice(0, m * m), B = b.f32.slice(0, m * m);
      expectGemmClose(m, A, B, out.f32.slice(0, m * m), nativeFmmul(m, A, B));
    };
    await gemm(c); // recorded (panels: the three-queue chain)
    let r0 = replays();
    const s0 = native.vulkanStats();
    randF32(a.f32, 13); // new inputs under the same windows
    await gemm(c);
    expect(replays() - r0).toBe(1);
    const s1 = native.vulkanStats();
    expect(s1.panels - s0.panels).toBeGreaterThanOrEqual(2);
    expect([s1.uploadBytes - s0.uploadBytes, s1.downloadBytes - s0.downloadBytes, s1.zeroedBytes - s0.zeroedBytes]).toEqual([2 * bytes, bytes, bytes]);
    r0 = replays();
    await gemm(c2); // another output window
    await gemm(c, 64); // other parameters
    expect(replays() - r0).toBe(0);
    expect(c2.f32[0]).not.toBe(c.f32[0]); // the first launch's C went to c2, not to the recorded c
    // One command buffer (a launch below one panel): the same, on the compute queue alone.
    const m = 16, sb = 4 * m * m;
    const x = r.vram(sb), y = r.vram(sb), z = r.vram(sb);
    x.f32.fill(1);
    y.f32.fill(2);
    await r.ch.launch(K.FMADD, [x, y, z].map(buf), params(['u32', m]));
    r0 = replays();
    x.f32.fill(5);
    await r.ch.launch(K.FMADD, [x, y, z].map(buf), params(['u32', m]));
    expect(replays() - r0).toBe(1);
    expect([...new Set(z.f32)]).toEqual([7]);
  });

  it('writes back exactly the writable bindings: bytes beside them and aliased inputs stay right', async () => {
    // FMADD C = A + B with C = A (in place, one group) inside a page whose other bytes are
    // sentinels: a write-back of whole pages (or of the stale pool buffer) would change them.
    const n = 16, bytes = 4 * n * n;
    const page = r.vram(3 * 4096), b = r.vram(bytes);
    page.u32.fill(0xdeadbeef);
    const at = 1024;  // A = C = [1024, 2048)
    const a = new Float32Array(page.u8.buffer, page.u8.byteOffset + at, n * n);
    for (let i = 0; i < n * n; i++) a[i] = i;
    b.f32.fill(0.5);
    const ab = { va: page.va + at, length: bytes };
    await r.ch.launch(K.FMADD, [ab, buf(b), ab], params(['u32', n]));
    for (let i = 0; i < n * n; i++) expect(a[i]).toBe(i + 0.5);
    expect(page.u32.subarray(0, at / 4).every((x) => x === 0xdeadbeef)).toBe(true);
    expect(page.u32.subarray((at + bytes) / 4).every((x) => x === 0xdeadbeef)).toBe(true);
  });

  /** One engine launch of `kernel` on bindings `bufs` (C = bufs[2] filled with `garbage` first),
   * with the overwrite skip on or off (VUGPU_VK_UPLOAD_ALL): C's bits and the copy counters. */
  async function launchCounted(kernel: number, bufs: { va: number; length: number }[], c: Uint32Array, n: number,
                               garbage: number, uploadAll: boolean) {
    c.fill(garbage);
    if (uploadAll) process.env.VUGPU_VK_UPLOAD_ALL = '1';
    native.vulkanReadTuning();
    try {
      const s0 = native.vulkanStats();
      await r.ch.launch(kernel, bufs, params(['u32', n]));
      const s1 = native.vulkanStats();
      return {
        c: c.slice(),
        up: s1.uploadBytes - s0.uploadBytes, zeroed: s1.zeroedBytes - s0.zeroedBytes, down: s1.downloadBytes - s0.downloadBytes,
      };
    } finally {
      delete process.env.VUGPU_VK_UPLOAD_ALL;
      native.vulkanReadTuning();
    }
  }

  it('FMMUL/MMUL: C is not uploaded, only zero-filled on the device; results bit-identical to uploading it', async () => {
    // 512/260: GPU form in panels (edge tiles at 260); 102: portable form in panels; 40: one
    // panel, one command buffer; MMUL: the portable uint form.
    const cases: [number, number, 'vram' | 'sysmem'][] = [
      [K.FMMUL, 512, 'vram'], [K.FMMUL, 260, 'sysmem'], [K.FMMUL, 102, 'vram'], [K.FMMUL, 40, 'vram'], [K.MMUL, 72, 'vram'],
    ];
    for (const [kernel, n, where] of cases) {
      const bytes = 4 * n * n;
      const alloc = (x: number): GpuBuf => (where === 'vram' ? r.vram(x) : r.sys(x));
      const a = alloc(bytes), b = alloc(bytes), c = alloc(bytes);
      randF32(a.f32.subarray(0, n * n), n);
      randF32(b.f32.subarray(0, n * n), n + 1);
      const bufs = [a, b, c].map((x) => ({ va: x.va, length: bytes }));
      const cv = c.u32.subarray(0, n * n);
      const skip = await launchCounted(kernel, bufs, cv, n, 0x7fc0dead, false);
      const all = await launchCounted(kernel, bufs, cv, n, 0xffffffff, true);
      expect({ kernel, n, up: skip.up, zeroed: skip.zeroed, down: skip.down }).toEqual({ kernel, n, up: 2 * bytes, zeroed: bytes, down: bytes });
      expect({ kernel, n, up: all.up, zeroed: all.zeroed, down: all.down }).toEqual({ kernel, n, up: 3 * bytes, zeroed: 0, down: bytes });
      expect(Buffer.from(skip.c.buffer).equals(Buffer.from(all.c.buffer))).toBe(true);
      if (kernel === K.FMMUL) {
        const A = a.f32.slice(0, n * n), B = b.f32.slice(0, n * n);
        expectGemmClose(n, A, B, new Float32Array(skip.c.buffer), nativeFmmul(n, A, B));
      }
    }
  });

  it('A, C, B in one import group: the upload leaves out exactly C, the bytes around it stay', async () => {
    const n = 20, bytes = 4 * n * n;  // 1600: A at 64, C at 1664, B at 3264 of one page
    const page = r.vram(2 * 4096);
    page.u32.fill(0xdeadbeef);
    const A = new Float32Array(page.u8.buffer, page.u8.byteOffset + 64, n * n);
    const B = new Float32Array(page.u8.buffer, page.u8.byteOffset + 64 + 2 * bytes, n * n);
    randF32(A, 5);
    randF32(B, 6);
    const bufs = [64, 64 + 2 * bytes, 64 + bytes].map((o) => ({ va: page.va + o, length: bytes }));
    const cv = new Uint32Array(page.u8.buffer, page.u8.byteOffset + 64 + bytes, n * n);
    const skip = await launchCounted(K.FMMUL, bufs, cv, n, 0x7fc0dead, false);
    const all = await launchCounted(K.FMMUL, bufs, cv, n, 0xffffffff, true);
    expect([skip.up, skip.zeroed, all.up, all.zeroed]).toEqual([2 * bytes, bytes, 3 * bytes, 0]);
    expect(Buffer.from(skip.c.buffer).equals(Buffer.from(all.c.buffer))).toBe(true);
    expectGemmClose(n, A.slice(), B.slice(), new Float32Array(skip.c.buffer), nativeFmmul(n, A.slice(), B.slice()));
    expect(page.u32.subarray(0, 16).every((x) => x === 0xdeadbeef)).toBe(true);
    expect(page.u32.subarray((64 + 3 * bytes) / 4).every((x) => x === 0xdeadbeef)).toBe(true);
  });

  it('k sliced: only the first launch (accumulate = 0) skips C; the accumulating ones upload it', async () => {
    setGemmKSliceForTests(32);
    try {
      // 96: GPU form, 3 slices; 102: portable form, 4 slices.
      for (const [n, slices] of [[96, 3], [102, 4]] as const) {
        const bytes = 4 * n * n;
        const plan = builtinPlan(K.FMMUL, params(['u32', n]), [bytes, bytes, bytes])!;
        expect(plan.dispatches.map((d) => d.overwrites)).toEqual([[2], ...Array(slices - 1).fill(undefined)]);
        const a = r.vram(bytes), b = r.vram(bytes), c = r.vram(bytes);
        randF32(a.f32, n + 2);
        randF32(b.f32, n + 3);
        const bufs = [a, b, c].map(buf);
        const skip = await launchCounted(K.FMMUL, bufs, c.u32, n, 0x7fc0dead, false);
        const all = await launchCounted(K.FMMUL, bufs, c.u32, n, 0xffffffff, true);
        expect({ n, up: skip.up, zeroed: skip.zeroed, down: skip.down })
          .toEqual({ n, up: slices * 2 * bytes + (slices - 1) * bytes, zeroed: bytes, down: slices * bytes });
        expect(all.up).toBe(slices * 3 * bytes);
        expect(Buffer.from(skip.c.buffer).equals(Buffer.from(all.c.buffer))).toBe(true);
        expectGemmClose(n, a.f32.slice(), b.f32.slice(), new Float32Array(skip.c.buffer), nativeFmmul(n, a.f32.slice(), b.f32.slice()));
      }
    } finally {
      setGemmKSliceForTests();
    }
  });

  it('C longer than n·n: not declared, uploaded, its tail kept', async () => {
    const n = 64, bytes = 4 * n * n;
    expect(builtinPlan(K.FMMUL, params(['u32', n]), [bytes, bytes, bytes + 64])!.dispatches[0]!.overwrites).toBeUndefined();
    expect(builtinPlan(K.MMUL, params(['u32', n]), [bytes, bytes, bytes])!.dispatches[0]!.overwrites).toEqual([2]);
    const a = r.vram(bytes), b = r.vram(bytes), c = r.vram(bytes + 64);
    a.f32.fill(1);
    b.f32.fill(2);
    const s0 = native.vulkanStats();
    c.u32.fill(0xabcdabcd);
    await r.ch.launch(K.FMMUL, [buf(a), buf(b), buf(c)], params(['u32', n]));
    const s1 = native.vulkanStats();
    expect([s1.uploadBytes - s0.uploadBytes, s1.zeroedBytes - s0.zeroedBytes]).toEqual([3 * bytes + 64, 0]);
    expect(c.f32[n * n - 1]).toBe(2 * n);
    expect(c.u32.subarray(n * n).every((x) => x === 0xabcdabcd)).toBe(true);
  });

  it('a guest program\'s writable binding is uploaded; a job that is not a built-in cannot declare overwrites', async () => {
    const n = 1000;
    const mod = r.drv.programBuffer(r.vm, new Uint8Array(readFileSync(path.join(ROOT, 'build/spirv/guest/programs/vecadd.spv'))));
    const a = r.vram(4 * n), b = r.vram(4 * n), c = r.vram(4 * n);
    a.f32.fill(1);
    b.f32.fill(2);
    const launch = () => r.ch.launchProgram(mod, {
      grid: [Math.ceil(n / 256), 1, 1], push: new Uint8Array(new Uint32Array([n]).buffer),
      buffers: [{ va: a.va, length: 4 * n, readOnly: true }, { va: b.va, length: 4 * n, readOnly: true }, { va: c.va, length: 4 * n }],
    });
    await launch();  // compiled
    const s0 = native.vulkanStats();
    await launch();
    const s1 = native.vulkanStats();
    expect([s1.uploadBytes - s0.uploadBytes, s1.zeroedBytes - s0.zeroedBytes]).toEqual([3 * 4 * n, 0]);
    expect(c.f32[n - 1]).toBe(3);
    // The native side refuses the declaration on a job that is not a built-in.
    const words = glslWords(PARTIAL_WRITER);
    const slot = await compileSlot(words);
    const x = r.vram(4096);
    const job = { slot, windows: [native.addressOf(x.u8)], lengths: [4096], params: new Uint8Array(0), grid: [1, 1, 1] as [number, number, number], overwrites: [0] };
    expect(() => native.submitDispatch(job)).toThrow(TypeError);
    expect(() => native.submitDispatch({ ...job, builtin: false })).toThrow(TypeError);
    // Nor a k stream (the engine would patch its push constants).
    const { overwrites: _o, ...plain } = job;
    const kStream = { binding: 0, rowBytes: 16, k0Offset: 0, k1Offset: 4, accumulateOffset: 8 };
    expect(() => native.submitDispatch({ ...plain, kStream })).toThrow(TypeError);
    expect(() => native.submitDispatch({ ...plain, builtin: true, kStream: { ...kStream, binding: 1 } })).toThrow(RangeError);
    // Through the backend: refused as EINVAL.
    expect(await new Promise((resolve) => backend.dispatch(job, 0, (res) => resolve(res.status)))).toBe(-22);
    native.programRelease(slot);
  });

  it('a declared binding the kernel leaves partly unwritten comes back as zeros, never a pooled buffer\'s stale bytes', async () => {
    // The staging pool hands the second launch the buffer the first one filled with 0xabababab
    // (the smallest idle one that fits: a size no other test uses). The kernel writes word 0 only.
    // One command buffer, then two streamed panels (every fill before the first panel's dispatch).
    const bytes = (3 << 20) + 4096;
    const slot = await compileSlot(glslWords(PARTIAL_WRITER));
    for (const panels of [1, 2]) {
      const shape = panels === 1 ? { grid: [1, 1, 1] as [number, number, number] } : { grid: [1, 2, 1] as [number, number, number], panelRowBytes: [bytes / 2] };
      const run = (x: GpuBuf, overwrites?: number[]) => new Promise<number>((resolve) => {
        backend.dispatch({ slot, windows: [native.addressOf(x.u8)], lengths: [bytes], params: new Uint8Array(0), ...shape, builtin: true, overwrites },
          0, (res) => resolve(res.status));
      });
      const first = r.vram(bytes), second = r.vram(bytes);
      first.u32.fill(0xabababab);
      expect(await run(first)).toBe(0);
      expect([first.u32[0], first.u32[1]]).toEqual([1, 0xabababab]);
      second.u32.fill(0xcdcdcdcd);
      const s0 = native.vulkanStats();
      expect(await run(second, [0])).toBe(0);
      const s1 = native.vulkanStats();
      expect({ panels, zeroed: s1.zeroedBytes - s0.zeroedBytes, up: s1.uploadBytes - s0.uploadBytes, streamed: s1.panels - s0.panels })
        .toEqual({ panels, zeroed: bytes, up: 0, streamed: panels === 1 ? 0 : 2 });
      expect(second.u32[0]).toBe(1);
      expect(second.u32.subarray(1).every((v) => v === 0)).toBe(true);
    }
    native.programRelease(slot);
  });

  it('device loss: the launch in flight fails ENGINE_LOST, finished results stay, the rebuilt device runs later launches', async () => {
    const s0 = native.vulkanStats();
    // Channel A finishes a GEMM first.
    const n = 128, bytes = 4 * n * n;
    const a = r.vram(bytes), b = r.vram(bytes), c = r.vram(bytes);
    a.f32.fill(1);
    b.f32.fill(3);
    await r.ch.launch(K.FMMUL, [a, b, c].map(buf), params(['u32', n]));
    expect(c.f32[5]).toBe(3 * n);
    // Channel B runs LOOP for up to 5 s (launch after launch); the device is lost under it.
    const chB = r.drv.createChannel(r.vm);
    const rec = r.vram(4096);
    // LOOP compiled first: on a busy host its compile can outlast the 300 ms below, and a loss
    // before the first dispatch is survived by design (the plan then runs on the rebuilt device).
    await chB.launch(K.LOOP, [{ va: rec.va, length: 24 }], params(['u64', 1000n], ['u64', 0n], ['u32', 1]));
    const loop = chB.launch(K.LOOP, [{ va: rec.va, length: 24 }], params(['u64', 0n], ['u64', 5_000_000_000n], ['u32', 1]));
    const outcome = loop.then(() => null, (e: unknown) => e);
    await new Promise((res) => setTimeout(res, 300));
    const t0 = Date.now();
    expect(native.vulkanSimulateLoss()).toBe(true);
    const e = await outcome;
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(e).toBeInstanceOf(GpuError);
    expect((e as GpuError).code).toBe(CHAN_ERR.ENGINE_LOST);
    // A's result is untouched; A runs again, on the rebuilt device (the built-in recompiles).
    expect(c.f32[5]).toBe(3 * n);
    b.f32.fill(4);
    await r.ch.launch(K.FMMUL, [a, b, c].map(buf), params(['u32', n]));
    expect(c.f32[n * n - 1]).toBe(4 * n);
    const s1 = native.vulkanStats();
    expect({ losses: s1.losses - s0.losses, rebuilds: s1.rebuilds - s0.rebuilds, gen: s1.generation > s0.generation })
      .toEqual({ losses: 1, rebuilds: 1, gen: true });
    // B is rebound and runs on the new device too.
    chB.bind();
    await chB.launch(K.LOOP, [{ va: rec.va, length: 24 }], params(['u64', 1000n], ['u64', 0n], ['u32', 1]));
  }, 30_000);

  it('device loss under three channels\' work (the round bench/device-lost.ts runs on a GPU with a real fault): nothing wrong, all run again', async () => {
    const L = await lossRig(r, 96);
    const A = L.x.f32.slice(0, 96 * 96), B = L.y.f32.slice(0, 96 * 96);
    expectGemmClose(96, A, B, new Float32Array(L.ref.buffer), nativeFmmul(96, A, B));
    expect(refVsCpu(L)).toBe(-1);  // the same check, as bench/device-lost.ts makes it
    for (let round = 0; round < 2; round++) {
      const res = await lossRound(L, () => String(native.vulkanSimulateLoss()), 8);
      expect(res).toMatchObject({ lose: 'true', pass: true, problems: [], bCode: CHAN_ERR.ENGINE_LOST, aKept: true,
        c: { wrong: 0, otherErrors: [] }, stats: { losses: 1, rebuilds: 1, generationUp: true }, after: { a: true, b: true, c: true } });
      expect(res.c.ok + res.c.engineLost).toBe(8);
      expect(res.lastLoss).toBe('simulated by a test hook');
    }
  }, 60_000);

  it('the real-fault hook refuses a CPU device, and a guest cannot load its module', async () => {
    const file = readFileSync(path.join(ROOT, 'build/spirv/native/shaders/test/fault.spv'));
    const words = new Uint32Array(file.buffer.slice(file.byteOffset, file.byteOffset + file.byteLength));
    if (backend.deviceInfo.type === 'cpu') {
      expect(backend.deviceInfo.faultInjection).toBe(false);
      expect(() => native.vulkanInjectFault(words, 0x1000n)).toThrow(/CPU device/);
    }
    expect(() => native.vulkanInjectFault(new Uint8Array(4) as unknown as Uint32Array, 0x1000n)).toThrow(TypeError);
    expect(() => native.vulkanInjectFault(new Uint32Array([1, 2, 3]), 0x1000n)).toThrow(/not valid SPIR-V/);
    // As a guest program: refused by the validator (buffer device address), never compiled.
    const mod = r.drv.programBuffer(r.vm, new Uint8Array(words.buffer));
    const out = r.vram(4096);
    const e = await r.ch.launchProgram(mod, { grid: [1, 1, 1], push: new Uint8Array(8), buffers: [{ va: out.va, length: 4096 }] })
      .then(() => null, (x: unknown) => x);
    expect(e).toBeInstanceOf(GpuError);
    expect((e as GpuError).code).toBe(CHAN_ERR.BAD_PROGRAM);
    expect(progReasonName((e as GpuError).reason)).toMatch(/CAPABILITY|EXTENSION/);
    r.ch.bind();
  });
});

describe('FMMUL GPU form, zero-copy', () => {
  let r: Rig;
  let backend: VulkanBackend;
  beforeAll(() => {
    process.env.VUGPU_VK_GEMM = 'gpu';
    backend = VulkanBackend.open(DEVICE);
    r = rig({ programs: backend, builtinsOnPrograms: true, vramSize: 64 << 20 });
  });
  afterAll(() => {
    r?.close();
    backend?.close();
    delete process.env.VUGPU_VK_GEMM;
  });

  it('runs zero-copy on a CPU device', () => {
    if (backend.deviceInfo.type === 'cpu') expect(backend.deviceInfo.memory).toBe('import');
  });

  it('is the plan for n % 4 == 0 only; 64×64 tiles while 128×128 ones would be fewer than 128 workgroups', () => {
    const lengths = (n: number) => [4 * n * n, 4 * n * n, 4 * n * n];
    const plan = (n: number) => builtinPlan(K.FMMUL, params(['u32', n]), lengths(n))!;
    expect(plan(96).spv).toBe(FMMUL_GPU64_SPV);
    expect(plan(97).spv).toBeUndefined();
    expect(plan(256).dispatches[0]!.grid).toEqual([4, 4, 1]);
    expect([plan(1024).spv, plan(1024).dispatches[0]!.grid]).toEqual([FMMUL_GPU64_SPV, [16, 16, 1]]);
    expect([plan(1408).spv, plan(1536).spv]).toEqual([FMMUL_GPU64_SPV, FMMUL_GPU_SPV]);  // 121, 144
    expect(plan(2048).dispatches[0]!.grid).toEqual([16, 16, 1]);
    setGemmGpuTile(128);
    expect([plan(256).spv, plan(256).dispatches[0]!.grid]).toEqual([FMMUL_GPU_SPV, [2, 2, 1]]);
    setGemmGpuTile();
  });

  it('equals the native kernel within FMMUL tolerance across tile edges, both tile sizes, and they agree bit for bit', async () => {
    const bits = new Map<number, Uint32Array>();
    for (const tile of [64, 128] as const) {
      setGemmGpuTile(tile);
      try {
        for (const n of [4, 8, 96, 128, 132, 256, 97]) await engineFmmul(r, n, 'vram', 100 + n);
        // k in two slices (accumulate) at a size with a partial tile
        setGemmKSliceForTests(64);
        const c = await engineFmmul(r, 132, 'vram', 7);
        setGemmKSliceForTests();
        if (bits.has(132)) expect(c).toEqual(bits.get(132));
        else bits.set(132, c);
      } finally {
        setGemmGpuTile();
        setGemmKSliceForTests();
      }
    }
  });
});

// The SPIR-V LOOP runs as a chain of dispatches (each under lavapipe's loop cap): the watchdog
// must bound the launch, not each dispatch — an endless LOOP used to run on for ever (found by
// the hostile guest's endless-kernel attack on `serve --engine vulkan`).
describe('built-ins on the Vulkan device: the watchdog', () => {
  let r: Rig;
  let backend: VulkanBackend;
  beforeAll(() => {
    backend = VulkanBackend.open(DEVICE);
    r = rig({ programs: backend, builtinsOnPrograms: true, vramSize: 16 << 20 });
  });
  afterAll(() => {
    r?.close();
    backend?.close();
  });

  it('ends an endless LOOP launch with WATCHDOG in about the watchdog time; the channel is in error', async () => {
    const out = r.vram(64);
    await r.ch.launch(K.LOOP, [buf(out)], params(['u64', 1000n], ['u64', 0n], ['u32', 1])); // compiled first
    r.engine.watchdogMs = 400;
    const t0 = performance.now();
    const e = await r.ch.launch(K.LOOP, [buf(out)], params(['u64', 1n << 62n], ['u64', 0n], ['u32', 1])).then(() => null, (err: unknown) => err);
    const ms = performance.now() - t0;
    expect(e).toBeInstanceOf(GpuError);
    expect((e as GpuError).code).toBe(CHAN_ERR.WATCHDOG);
    expect(ms).toBeGreaterThan(390);
    expect(ms).toBeLessThan(5000);
  });
});
