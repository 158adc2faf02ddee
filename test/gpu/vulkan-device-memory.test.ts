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
import path from 'node:path';
import { native } from '../../src/native.ts';
import { K } from '../../src/gpu/kernels.ts';
import { GpuError } from '../../src/gpu/host-driver/driver.ts';
import { VulkanBackend } from '../../src/gpu/vulkan.ts';
import { CHAN_ERR } from '../../src/gpu/spec.ts';
import { builtinPlan, FMMUL_GPU_SPV, gpuVariantsOn } from '../../src/gpu/program/builtins.ts';
import { buf, params, rig, rng, type GpuBuf, type Rig } from './helpers.ts';

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

async function engineFmmul(r: Rig, n: number, where: 'vram' | 'sysmem', seed: number): Promise<void> {
  const bytes = 4 * n * n;
  const alloc = (x: number): GpuBuf => (where === 'vram' ? r.vram(x) : r.sys(x));
  const a = alloc(bytes), b = alloc(bytes), c = alloc(bytes);
  randF32(a.f32.subarray(0, n * n), seed);
  randF32(b.f32.subarray(0, n * n), seed + 1);
  c.f32.fill(NaN);
  await r.ch.launch(K.FMMUL, [a, b, c].map((x) => ({ va: x.va, length: bytes })), params(['u32', n]));
  const A = a.f32.slice(0, n * n), B = b.f32.slice(0, n * n);
  expectGemmClose(n, A, B, c.f32.slice(0, n * n), nativeFmmul(n, A, B));
}

beforeAll(() => {
  execFileSync('bash', [path.join(ROOT, 'scripts/build-spirv.sh')], { stdio: 'inherit' });
});

describe('device-memory path (forced on the test device)', () => {
  let r: Rig;
  let backend: VulkanBackend;
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
    // A and B up, C up and down (C is uploaded too: a kernel may leave parts of it unwritten).
    const want = [512, 260, 102].reduce((s, n) => s + 2 * 4 * 4 * n * n, 0);
    expect(s1.uploadBytes - s0.uploadBytes).toBe(want * 3 / 4);
    expect(s1.downloadBytes - s0.downloadBytes).toBe(want / 4);
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

  it('is the plan for n % 4 == 0 only', () => {
    const lengths = (n: number) => [4 * n * n, 4 * n * n, 4 * n * n];
    expect(builtinPlan(K.FMMUL, params(['u32', 96]), lengths(96))!.spv).toBe(FMMUL_GPU_SPV);
    expect(builtinPlan(K.FMMUL, params(['u32', 97]), lengths(97))!.spv).toBeUndefined();
    expect(builtinPlan(K.FMMUL, params(['u32', 256]), lengths(256))!.dispatches[0]!.grid).toEqual([2, 2, 1]);
  });

  it('equals the native kernel within FMMUL tolerance across tile edges', async () => {
    for (const n of [4, 8, 96, 128, 132, 256, 97]) await engineFmmul(r, n, 'vram', 100 + n);
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
