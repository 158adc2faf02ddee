// vulkanDirectRun, the benchmarks' reference path (bench/rewrite-cost.ts, bench/engine-vulkan.ts):
// a module the engine rewrote runs there with the rewrite's control block bound as in the engine
// (control: true), several modules run in turn on one layout and buffers (variants), and the
// control block is real — a rewritten loop that lavapipe cuts reports it there.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { native } from '../../src/native.ts';
import { VulkanBackend } from '../../src/gpu/vulkan.ts';
import { rig, type Rig } from './helpers.ts';
import { compileGlsl } from './spirv-helpers.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const DEVICE = process.env.VUGPU_TEST_VULKAN_DEVICE ?? 'llvmpipe';
const device = native.vulkanDevices().find((d) => d.name.includes(DEVICE));
// lavapipe comes with the project's dependencies (scripts/ensure-deps.sh): without it these tests
// fail (VulkanBackend.open throws). Only a device named by VUGPU_TEST_VULKAN_DEVICE may be absent.
const skipDevice = process.env.VUGPU_TEST_VULKAN_DEVICE !== undefined && !device;
/** lavapipe ends long loops (its loop limiter); a GPU runs them to the end. */
const cutsNoLoops = device !== undefined && device.driver !== 'llvmpipe';
/** A GPU times launches with timestamp queries; a CPU device by its own clock. */
const timestamps = device !== undefined && device.type !== 'cpu';
const skipped = (skip: boolean, why: string): string => (skip ? ` (skipped: ${why})` : '');

function spv(rel: string): Uint32Array {
  const b = fs.readFileSync(path.join(ROOT, 'build/spirv', rel));
  return new Uint32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
}
const u32s = (...v: number[]): Uint8Array => new Uint8Array(new Uint32Array(v).buffer);

describe.skipIf(skipDevice)(`vulkanDirectRun with the rewrite${skipped(skipDevice, `no Vulkan device named ${DEVICE} here`)}`, () => {
  let backend: VulkanBackend;
  beforeAll(() => {
    execFileSync('bash', [path.join(ROOT, 'scripts/build-spirv.sh')], { stdio: 'inherit' });
    backend = VulkanBackend.open(DEVICE);
  });
  afterAll(() => backend?.close());

  it('runs the raw and the rewritten SGEMM in turn, with equal results', () => {
    const n = 48;
    const raw = spv('guest/programs/sgemm.spv');
    const pp = native.programPrepare(raw, 0, new Uint32Array(0), backend.limits);
    expect(pp.reason).toBe(0);
    const a = Float32Array.from({ length: n * n }, (_, i) => ((i * 7) % 13) - 6);
    const b = Float32Array.from({ length: n * n }, (_, i) => ((i * 5) % 11) - 5);
    const job = { push: u32s(n, n, n), grid: [3, 3, 1] as [number, number, number], writable: [false, false, true] };
    const alone = (words: Uint32Array, control: boolean) => {
      const c = new Float32Array(n * n).fill(NaN);
      const r = native.vulkanDirectRun({ ...job, words, buffers: [a, b, c], control, entry: control ? pp.entry!.name : 'main', reps: 1 });
      expect(r.status).toBe(0);
      return c;
    };
    const ref = alone(raw, false);
    let want = 0;
    for (let k = 0; k < n; k++) want += a[n + k]! * b[k * n + 5]!;
    expect(ref[n + 5]).toBe(want); // small integers: exact
    expect(alone(pp.words!, true)).toEqual(ref);

    const c = new Float32Array(n * n);
    const r = native.vulkanDirectRun({ ...job, words: raw, buffers: [a, b, c], control: true, reps: 3, variants: [{ words: pp.words!, entry: pp.entry!.name }] });
    expect(r.wallNs).toHaveLength(3);
    expect(r.variants).toHaveLength(1);
    expect(r.variants[0]!.wallNs).toHaveLength(3);
    expect(r.variants[0]!.wallNs.every((x) => x > 0)).toBe(true);
    expect(r.status).toBe(0);
    expect(c).toEqual(ref);
  });

  it.skipIf(cutsNoLoops)(`reads the control block: a loop the device cuts reports status 2 (lavapipe)${skipped(cutsNoLoops, 'this device cuts no loops')}`, () => {
    expect(backend.limits.loopLimit).toBeGreaterThan(0);
    const pp = native.programPrepare(spv('guest/programs/spin.spv'), 0, new Uint32Array(0), backend.limits);
    expect(pp.reason).toBe(0);
    const out = new Uint32Array(64);
    const run = (iterations: number) =>
      native.vulkanDirectRun({ words: pp.words!, entry: pp.entry!.name, control: true, buffers: [out], writable: [true], push: u32s(iterations, 7), grid: [1, 1, 1] });
    expect(run(1000).status).toBe(0);
    expect(run(200_000).status).toBe(2);
    // At the edge: below it the right answer, past it status 2, and in between (the probe's own
    // passes, docs/programs.md: up to 6 before the cap) either one — never a wrong answer.
    const lim = backend.limits.loopLimit;
    const lcg = (s: number, n: number) => { for (let i = 0; i < n; i++) s = (Math.imul(s, 1664525) + 1013904223) >>> 0; return s; };
    for (let n = lim - 8; n <= lim + 3; n++) {
      const r = run(n);
      if (n <= lim - 7) expect(r.status, `${n}`).toBe(0);
      if (n > lim) expect(r.status, `${n}`).toBe(2);
      if (r.status === 0) expect(out[0], `${n}`).toBe(lcg(7, n));
    }
  });

  it.skipIf(cutsNoLoops)(`a limiter spent by one loop cuts the next one after a single pass: reported, at the end or at an early return${skipped(cutsNoLoops, 'this device cuts no loops')}`, () => {
    expect(backend.limits.loopLimit).toBeGreaterThan(0);
    // Loop 1 takes n passes of lavapipe's 65,535; loop 2 then needs m more. Raw, the program
    // returns a wrong count once they do not fit; rewritten, it reports status 2 instead. With
    // early = 1 the invocation returns from inside loop 2 once it has counted m - 1 (the probe
    // sits before that return too).
    const src = `#version 450
layout(local_size_x = 8) in;
layout(set = 0, binding = 0) buffer B { uint v[]; };
layout(push_constant) uniform P { uint n, m, early; } p;
void main() {
  uint s = 7u;
  for (uint i = 0u; i < p.n; i++) s = s * 1664525u + 1013904223u;
  v[8u + gl_LocalInvocationID.x] = s;
  uint c = 0u;
  for (uint j = 0u; j < p.m; j++) {
    c++;
    if (p.early != 0u && c == p.m - 1u) { v[gl_LocalInvocationID.x] = c; return; }
  }
  v[gl_LocalInvocationID.x] = c;
}`;
    const raw = compileGlsl(src);
    const pp = native.programPrepare(raw, 0, new Uint32Array(0), backend.limits);
    expect(pp.reason).toBe(0);
    const run = (words: Uint32Array, control: boolean, n: number, m: number, early = 0) => {
      const out = new Uint32Array(16);
      const r = native.vulkanDirectRun({ words, entry: 'main', control, buffers: [out], writable: [true], push: u32s(n, m, early), grid: [1, 1, 1] });
      return { status: r.status, count: out[0]! };
    };
    expect(run(raw, false, 65_528, 12).count).toBeLessThan(12); // the cap, silently
    for (const early of [0, 1]) {
      const want = early ? 11 : 12;
      expect(run(pp.words!, true, 1000, 12, early)).toEqual({ status: 0, count: want });
      expect(run(pp.words!, true, 65_500, 12, early)).toEqual({ status: 0, count: want });
      expect(run(pp.words!, true, 65_528, 12, early).status).toBe(2);
      expect(run(pp.words!, true, 200_000, 12, early).status).toBe(2);
    }
  });

  it.skipIf(cutsNoLoops)(`a cut inside an unchecked small loop is reported by the probe at the return (lavapipe: status 2, never a wrong result)${skipped(cutsNoLoops, 'this device cuts no loops')}`, () => {
    expect(backend.limits.loopLimit).toBeGreaterThan(0);
    // Per outer iteration 14 end-of-passes: the inner loop's 12 iterations take 13 passes (the
    // last one only leaves it: a break is a mask in gallivm, the pass still ends) + the outer
    // one's. lavapipe's 65,535 runs out at the first end-of-pass of the inner loop in outer
    // iteration 4682, leaving that inner loop after 1 of its 12 iterations. The body is long
    // enough that NIR keeps it a loop (unrolled, 4,700 outer iterations stay under the cap).
    const terms = Array.from({ length: 20 }, (_, k) => `acc += float((i * j + ${k + 1}u) & 7u);`).join('\n        ');
    const src = `#version 450
layout(local_size_x = 8) in;
layout(set = 0, binding = 0) buffer B { float v[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
  float acc = 0.0;
  for (uint i = 0u; i < p.n; i++) {
    for (uint j = 0u; j < 12u; j++) {
        ${terms}
    }
  }
  v[gl_GlobalInvocationID.x] = acc;
}`;
    const pp = native.programPrepare(compileGlsl(src), 0, new Uint32Array(0), backend.limits);
    expect(pp.reason).toBe(0);
    expect(pp.uncheckedLoops).toHaveLength(1); // the inner loop: no check of its own
    const run = (n: number) => {
      const out = new Float32Array(8).fill(NaN);
      const r = native.vulkanDirectRun({ words: pp.words!, entry: pp.entry!.name, control: true, buffers: [out], writable: [true], push: u32s(n), grid: [1, 1, 1] });
      return { status: r.status, v: out[3]! };
    };
    const want = (n: number) => {
      let acc = 0;
      for (let i = 0; i < n; i++) for (let j = 0; j < 12; j++) for (let k = 1; k <= 20; k++) acc += ((i * j + k) >>> 0) & 7;
      return acc;
    };
    expect(run(100)).toEqual({ status: 0, v: want(100) });
    expect(run(4600)).toEqual({ status: 0, v: want(4600) }); // 64,400 end-of-passes: under the cap
    expect(run(4700).status).toBe(2);
    // negative control: without the detection (the rewrite for a device that cuts no loops) the
    // same launch reports success with a wrong sum
    const blind = native.programPrepare(compileGlsl(src), 0, new Uint32Array(0), { ...backend.limits, loopLimit: 0 });
    const out = new Float32Array(8);
    const r = native.vulkanDirectRun({ words: blind.words!, entry: blind.entry!.name, control: true, buffers: [out], writable: [true], push: u32s(4700), grid: [1, 1, 1] });
    expect(r.status).toBe(0);
    expect(out[3]).toBeLessThan(want(4700));
  });

  it('refuses malformed variants', () => {
    const words = spv('native/shaders/builtins/nop.spv');
    const buf = new Uint32Array(4);
    expect(() => native.vulkanDirectRun({ words, buffers: [buf], writable: [false], grid: [1, 1, 1], variants: [{ words: new Uint8Array(8) as unknown as Uint32Array }] }))
      .toThrow(/Uint32Array/);
    expect(() => native.vulkanDirectRun({ words, buffers: [buf], writable: [false], grid: [1, 1, 1], variants: {} as unknown as [] }))
      .toThrow(/variants/);
  });
});

describe.skipIf(skipDevice || timestamps)(`device time of programs on a CPU device (no timestamp queries)${skipDevice
  ? skipped(true, `no Vulkan device named ${DEVICE} here`) : skipped(timestamps, 'a GPU times launches with timestamp queries')}`, () => {
  let r: Rig;
  let backend: VulkanBackend;
  beforeAll(() => {
    execFileSync('bash', [path.join(ROOT, 'scripts/build-spirv.sh')], { stdio: 'inherit' });
    backend = VulkanBackend.open(DEVICE);
    r = rig({ programs: backend });
  });
  afterAll(() => {
    r?.close();
    backend?.close();
  });

  it('charges each launch its own run: two at once on the in-order queue are not both charged the first', async () => {
    expect(backend.deviceInfo.type).toBe('cpu');
    const ch2 = r.drv.createChannel(r.vm);
    const mod = r.drv.programBuffer(r.vm, spv('guest/programs/spin.spv'));
    const o1 = r.vram(4096), o2 = r.vram(4096);
    // ~64 invocations × 60,000 dependent steps: tens of ms on lavapipe, under its loop cap
    const launch = (ch: typeof r.ch, o: typeof o1) =>
      ch.launchProgram(mod, { grid: [1, 1, 1], push: u32s(60_000, 3), buffers: [{ va: o.va, length: 4096 }] });
    await launch(r.ch, o1);
    await launch(ch2, o2); // compiled, warm
    const ns = () => r.engine.channel(r.ch.chid)!.deviceNs + r.engine.channel(ch2.chid)!.deviceNs;
    const before = ns();
    const t0 = process.hrtime.bigint();
    await Promise.all([launch(r.ch, o1), launch(ch2, o2)]);
    const wall = Number(process.hrtime.bigint() - t0);
    const charged = ns() - before;
    expect(charged).toBeGreaterThan(0);
    // Both ran one after the other inside `wall`; charging the second its wait for the first
    // too would make the sum about 1.5× wall (measured 1.42×).
    expect(charged).toBeLessThanOrEqual(wall * 1.2);
    expect(o1.u32[5]).toBe(o2.u32[5]);
  });
});
