// HostChannel.launchProgram (hw-spec §6.3) on a bare engine: the method encoding of a program
// launch (grid, push block, module, spec block, buffers with READ_ONLY, LAUNCH|PROGRAM) and the
// BAD_PROGRAM reason in GpuError. Without a program device every launch is BAD_PROGRAM /
// UNSUPPORTED; with the Vulkan device (lavapipe here; VUGPU_TEST_VULKAN_DEVICE picks another)
// the sample vecadd, a specialization constant and refusals with their reasons.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { GpuError } from '../support/host-driver/driver.ts';
import { VulkanBackend } from '../../src/gpu/vulkan.ts';
import { ProgramCache } from '../../src/gpu/programs.ts';
import { CHAN_ERR, PROG_REASON } from '../../src/gpu/spec.ts';
import { glsl, rig, type Rig } from './helpers.ts';
import { BUILTIN_OWNER, builtinKey, builtinWords } from '../../src/gpu/builtin-programs.ts';
import { K } from '../../src/gpu/kernels.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

function spirv(rel: string): Uint8Array {
  return new Uint8Array(readFileSync(path.join(ROOT, 'build/spirv', rel)));
}

async function failure(p: Promise<void>): Promise<GpuError> {
  const e = await p.then(() => null, (err: unknown) => err);
  expect(e).toBeInstanceOf(GpuError);
  return e as GpuError;
}

beforeAll(() => {
  execFileSync('bash', [path.join(ROOT, 'scripts/build-spirv.sh')], { stdio: 'inherit' });
});

describe('launchProgram without a program device', () => {
  let r: Rig;
  beforeAll(() => {
    r = rig();
  });
  afterAll(() => r.close());

  it('is refused with BAD_PROGRAM / UNSUPPORTED, and the rebound channel still copies', async () => {
    const mod = r.drv.programBuffer(r.vm, spirv('guest/programs/vecadd.spv'));
    const c = r.vram(4096);
    const e = await failure(r.ch.launchProgram(mod, { buffers: [{ va: c.va, length: 4096 }], push: new Uint8Array(4) }));
    expect(e.code).toBe(CHAN_ERR.BAD_PROGRAM);
    expect(e.reason).toBe(PROG_REASON.UNSUPPORTED);
    expect(e.message).toContain('BAD_PROGRAM/UNSUPPORTED');
    r.ch.bind();
    const a = r.vram(4096);
    a.u32.fill(7);
    await r.ch.copy(c.va, a.va, 4096);
    expect(c.u32[1023]).toBe(7);
  });
});

// Runs once the addon has the Vulkan device (as test/gpu/builtins-spirv.test.ts).
const haveBackend = typeof (native as { vulkanOpen?: unknown }).vulkanOpen === 'function';

describe.skipIf(!haveBackend)('launchProgram on the Vulkan device', () => {
  let r: Rig;
  beforeAll(() => {
    r = rig({ programs: VulkanBackend.open(process.env.VUGPU_TEST_VULKAN_DEVICE || undefined) });
  });
  afterAll(() => r?.close());

  it('runs vecadd with read-only inputs and push constants', async () => {
    const n = 1000;
    const mod = r.drv.programBuffer(r.vm, spirv('guest/programs/vecadd.spv'));
    const a = r.vram(4 * n), b = r.vram(4 * n), c = r.vram(4 * n);
    for (let i = 0; i < n; i++) {
      a.f32[i] = i * 0.5;
      b.f32[i] = 1000 - i;
    }
    const push = new Uint8Array(new Uint32Array([n]).buffer);
    await r.ch.launchProgram(mod, {
      grid: [Math.ceil(n / 256), 1, 1], push,
      buffers: [{ va: a.va, length: 4 * n, readOnly: true }, { va: b.va, length: 4 * n, readOnly: true }, { va: c.va, length: 4 * n }],
    });
    for (let i = 0; i < n; i++) expect(c.f32[i]).toBe(Math.fround(i * 0.5 + (1000 - i)));
  });

  it('passes specialization constants and push constants together', async () => {
    const mod = r.drv.programBuffer(r.vm, glsl(`#version 450
      layout(local_size_x = 64) in;
      layout(constant_id = 7) const uint K = 1u;
      layout(set = 0, binding = 0) writeonly buffer O { uint o[]; };
      layout(push_constant) uniform P { uint add; } p;
      void main() { o[gl_GlobalInvocationID.x] = K * 1000u + p.add + gl_GlobalInvocationID.x; }`));
    const o = r.vram(4 * 128);
    await r.ch.launchProgram(mod, {
      grid: [2, 1, 1], push: new Uint8Array(new Uint32Array([5]).buffer), spec: [{ id: 7, value: 42 }],
      buffers: [{ va: o.va, length: 4 * 128 }],
    });
    for (let i = 0; i < 128; i++) expect(o.u32[i]).toBe(42_000 + 5 + i);
  });

  it('an identical relaunch submits the recorded command buffer again; any change records anew', async () => {
    // out[i] = in[i] * p.mul + p.add over grid × 64 invocations; each launch checks every word,
    // so a replayed command buffer with stale parameters, windows or grid shows as wrong data.
    const mod = r.drv.programBuffer(r.vm, glsl(`#version 450
      layout(local_size_x = 64) in;
      layout(set = 0, binding = 0) readonly buffer I { uint i_[]; };
      layout(set = 0, binding = 1) writeonly buffer O { uint o[]; };
      layout(push_constant) uniform P { uint mul; uint add; } p;
      void main() { uint x = gl_GlobalInvocationID.x; o[x] = i_[x] * p.mul + p.add; }`));
    const other = r.drv.programBuffer(r.vm, glsl(`#version 450
      layout(local_size_x = 64) in;
      layout(set = 0, binding = 0) readonly buffer I { uint i_[]; };
      layout(set = 0, binding = 1) writeonly buffer O { uint o[]; };
      layout(push_constant) uniform P { uint mul; uint add; } p;
      void main() { uint x = gl_GlobalInvocationID.x; o[x] = i_[x] + p.mul * p.add + 7u; }`));
    const n = 256;
    const inp = r.vram(4 * n), out1 = r.vram(4 * n), out2 = r.vram(4 * n);
    const replays = () => native.vulkanStats().replays;
    const run = async (prog: typeof mod, out: typeof out1, mul: number, add: number, groups: number, seed: number) => {
      for (let i = 0; i < n; i++) inp.u32[i] = (i * 2654435761 + seed) >>> 0;
      out.u32.fill(0xdeadbeef);
      await r.ch.launchProgram(prog, {
        grid: [groups, 1, 1], push: new Uint8Array(new Uint32Array([mul, add]).buffer),
        buffers: [{ va: inp.va, length: 4 * n, readOnly: true }, { va: out.va, length: 4 * n }],
      });
      for (let i = 0; i < n; i++) {
        const want = i < groups * 64 ? (prog === mod ? (Math.imul(inp.u32[i]!, mul) + add) >>> 0 : (inp.u32[i]! + mul * add + 7) >>> 0) : 0xdeadbeef;
        if (out.u32[i] !== want) expect({ i, got: out.u32[i], want }).toBeNull();
      }
    };
    await run(mod, out1, 3, 1, 4, 0);
    let r0 = replays();
    await run(mod, out1, 3, 1, 4, 11); // identical launch, new input data
    await run(mod, out1, 3, 1, 4, 12);
    expect(replays() - r0).toBe(2);
    r0 = replays();
    await run(mod, out1, 5, 1, 4, 13); // parameters
    await run(mod, out1, 5, 1, 2, 14); // grid
    await run(mod, out2, 5, 1, 2, 15); // another output window
    await run(other, out2, 5, 1, 2, 16); // another program
    expect(replays() - r0).toBe(0);
    await run(other, out2, 5, 1, 2, 17);
    expect(replays() - r0).toBe(1);
  });

  it('reports the BAD_PROGRAM reason: entry point, writable READ_ONLY binding, grid; the rebound channel works', async () => {
    const mod = r.drv.programBuffer(r.vm, spirv('guest/programs/vecadd.spv'));
    const bufs = [r.vram(4096), r.vram(4096), r.vram(4096)];
    const buffers = bufs.map((x, i) => ({ va: x.va, length: 4096, readOnly: i < 2 }));
    const push = new Uint8Array(new Uint32Array([16]).buffer);
    const cases: [Parameters<typeof r.ch.launchProgram>[1], number][] = [
      [{ entry: 1, buffers, push }, PROG_REASON.ENTRY_POINT],
      [{ buffers: buffers.map((x) => ({ ...x, readOnly: true })), push }, PROG_REASON.BINDING_WRITABLE],
      [{ grid: [65536, 1, 1], buffers, push }, PROG_REASON.GRID],
      [{ buffers: buffers.slice(0, 2), push }, PROG_REASON.BINDING],
    ];
    for (const [l, reason] of cases) {
      const e = await failure(r.ch.launchProgram(mod, l));
      expect([e.code, e.reason]).toEqual([CHAN_ERR.BAD_PROGRAM, reason]);
      r.ch.bind();
    }
    await r.ch.launchProgram(mod, { buffers, push });
  });
});

describe.skipIf(!haveBackend)('a device reset and the program cache', () => {
  let r: Rig;
  beforeAll(() => {
    r = rig({ programs: VulkanBackend.open(process.env.VUGPU_TEST_VULKAN_DEVICE || undefined) });
  });
  afterAll(() => r?.close());

  // A reset (a pt client gone) forgets the guest's programs — the next tenant must compile its
  // own — but keeps the host's built-ins compiled: recompiling them per client cost each first
  // launch of a built-in ~0.1–0.2 s on the H100.
  it('alternating modules are recognised without a compile; a module rewritten in place compiles anew', async () => {
    const adder = (k: number) => glsl(`#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer O { uint o[]; };
void main() { o[gl_GlobalInvocationID.x] += ${k}u; }`);
    const one = adder(5), two = adder(6), three = adder(7);
    expect([two.length, three.length]).toEqual([one.length, one.length]);  // rewritten in place below
    const m1 = r.drv.programBuffer(r.vm, one), m2 = r.drv.programBuffer(r.vm, two);
    const o = r.vram(256);
    const run = (m: typeof m1) => r.ch.launchProgram(m, { grid: [1, 1, 1], buffers: [{ va: o.va, length: 256 }] });
    const cache = r.engine.cp.programs!;
    await run(m1);
    await run(m2);
    const c0 = cache.stats.compiles, h0 = cache.stats.hits, k0 = ProgramCache.hashes;
    for (let i = 0; i < 4; i++) {
      await run(m1);
      await run(m2);
    }
    expect(cache.stats.compiles - c0).toBe(0);
    expect(cache.stats.hits - h0).toBe(8);
    expect(ProgramCache.hashes - k0).toBe(0);  // found by where they are, their bytes compared
    expect(o.u32[5]).toBe(55);  // 5 + 6, five times
    m1.buffer.u8.set(three);    // the guest rewrites the first module's bytes
    await run(m1);
    expect(ProgramCache.hashes - k0).toBe(1);
    expect(cache.stats.compiles - c0).toBe(1);
    expect(o.u32[5]).toBe(62);
    r.engine.dropOwner(0);  // the next test counts the cache from none of this owner's programs
  });

  it("drops the guest's programs and keeps the built-ins", async () => {
    const cache = r.engine.cp.programs!;
    const compiled = (owner: number, key: string, words: () => Uint32Array): Promise<void> =>
      new Promise((resolve) => {
        const p = cache.lookup(owner, key, words, 0, new Uint32Array(0), () => resolve());
        if (cache.ready(p)) resolve();
      });
    const vecadd = new Uint32Array(spirv('guest/programs/vecadd.spv').slice().buffer);
    await compiled(BUILTIN_OWNER, builtinKey(K.NOP), () => builtinWords(K.NOP));
    await compiled(1, 'guest-vecadd', () => vecadd);
    expect(cache.stats.cached).toBe(2);
    r.engine.reset();
    expect(cache.stats.cached).toBe(1);
    const c0 = cache.stats.compiles, h0 = cache.stats.hits;
    await compiled(BUILTIN_OWNER, builtinKey(K.NOP), () => builtinWords(K.NOP));
    expect([cache.stats.compiles - c0, cache.stats.hits - h0]).toEqual([0, 1]);
    await compiled(1, 'guest-vecadd', () => vecadd);
    expect(cache.stats.compiles - c0).toBe(1);
  });
});
