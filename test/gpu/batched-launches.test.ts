// Batched launches (hw-spec §6.3 "Batched launches", src/gpu/cp.ts, native DispatchBatch): a
// channel's program launches between two synchronization points run as one job, each launch
// submitted behind the one before without waiting for it. On the test device (lavapipe here, a
// GPU with VUGPU_TEST_VULKAN_DEVICE) in both memory paths: zero-copy, and device memory with
// resident VRAM. Every launch here depends on the one before (it rewrites the same buffer), so a
// batch that ran them out of order, or with one launch's parameters for another, gives other
// numbers than the serial reference.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { VulkanBackend } from '../../src/gpu/vulkan.ts';
import { CHAN_ERR } from '../../src/gpu/spec.ts';
import { glsl, rig, type Rig } from './helpers.ts';
import type { ProgramModule } from '../support/host-driver/driver.ts';

const DEVICE = process.env.VUGPU_TEST_VULKAN_DEVICE ?? 'llvmpipe';
const N = 4096;
const BYTES = 4 * N;

/** b[i] = b[i] * 3 + add + i (one step of a chain: the order of steps changes the result) */
const STEP = `#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer B { uint b[]; };
layout(push_constant) uniform P { uint add; } p;
void main() { uint i = gl_GlobalInvocationID.x; b[i] = b[i] * 3u + p.add + i; }`;

/** o[i] = a[i] (reads what the step before wrote, into another buffer) */
const COPY = `#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer A { uint a[]; };
layout(set = 0, binding = 1) buffer O { uint o[]; };
void main() { uint i = gl_GlobalInvocationID.x; o[i] = a[i]; }`;

/** Never ends with n = 0 (the watchdog stops it); ends after n turns otherwise. */
const ENDLESS = `#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer B { uint b[]; };
layout(push_constant) uniform P { uint n; } p;
void main() { uint i = 0u; while (p.n == 0u || i < p.n) { i++; b[1] = i; } }`;

const u32 = (v: number) => new Uint8Array(new Uint32Array([v]).buffer);

/** The serial reference of `steps` STEP launches with add = base + k, then a copy. */
function reference(start: (i: number) => number, steps: number, base: number): Uint32Array {
  const out = new Uint32Array(N);
  for (let i = 0; i < N; i++) {
    let v = start(i) >>> 0;
    for (let k = 0; k < steps; k++) v = (Math.imul(v, 3) + base + k + i) >>> 0;
    out[i] = v;
  }
  return out;
}

for (const memory of ['import', 'device'] as const) {
  describe(`batched launches (${memory === 'device' ? 'device memory, resident VRAM' : 'zero-copy'})`, () => {
    let r: Rig;
    let backend: VulkanBackend;
    let step: ProgramModule, copy: ProgramModule, endless: ProgramModule;
    interface Buf { va: number; u32: Uint32Array }
    const vbuf = (): Buf => {
      const b = r.drv.vramBuffer(r.vm, BYTES);
      return { va: b.va, u32: new Uint32Array(b.u8.buffer, b.u8.byteOffset, N) };
    };
    let B: Buf, O: Buf;
    const chain = (steps: number, base: number, cached: boolean) => [
      ...Array.from({ length: steps }, (_, k) => ({
        module: step,
        l: { grid: [N / 64, 1, 1] as [number, number, number], push: u32(base + k), buffers: [{ va: B.va, length: BYTES, cached }] },
      })),
      { module: copy, l: { grid: [N / 64, 1, 1] as [number, number, number], buffers: [
        { va: B.va, length: BYTES, readOnly: true, cached }, { va: O.va, length: BYTES, cached }] } },
    ];
    // B's starting bytes through the copy engine: a CPU store to VRAM is not seen by a
    // DEVICE_CACHED binding (hw-spec §6.3), and the engine's own writes drop resident copies.
    const init = async (f: (i: number) => number): Promise<Uint32Array> => {
      const src = r.drv.sysmemBuffer(r.vm, BYTES);
      const s32 = new Uint32Array(src.u8.buffer, src.u8.byteOffset, N);
      for (let i = 0; i < N; i++) s32[i] = f(i) >>> 0;
      await r.ch.copy(B.va, src.va, BYTES);
      return Uint32Array.from(s32);
    };
    const firstBad = (got: Uint32Array, want: Uint32Array) => {
      for (let i = 0; i < N; i++) if (got[i] !== want[i]) return { i, got: got[i], want: want[i] };
      return null;
    };

    beforeAll(() => {
      process.env.VUGPU_VK_MEMORY = memory;
      backend = VulkanBackend.open(DEVICE);
      r = rig({ programs: backend, vramSize: 64 << 20, watchdogMs: 10_000 });
      step = r.drv.programBuffer(r.vm, glsl(STEP));
      copy = r.drv.programBuffer(r.vm, glsl(COPY));
      endless = r.drv.programBuffer(r.vm, glsl(ENDLESS));
      B = vbuf();
      O = vbuf();
    });
    afterAll(() => {
      r?.close();
      backend?.close();
      delete process.env.VUGPU_VK_MEMORY;
      native.vulkanReadTuning();
    });

    it('runs on the memory path asked for', () => {
      expect(backend.deviceInfo.memory).toBe(memory === 'device' ? 'device' : 'import');
    });

    for (const cached of [false, true]) {
      it(`runs a submission's ${cached ? 'DEVICE_CACHED ' : ''}launches as one batch, in order, each with its own parameters`, async () => {
        await init((i) => i);
        // Compiled first: a launch that waits for its compile ends the batch before it.
        await r.ch.launchProgram(step, { grid: [N / 64, 1, 1], push: u32(0), buffers: [{ va: B.va, length: BYTES, cached }] });
        await r.ch.launchProgram(copy, { grid: [N / 64, 1, 1], buffers: [{ va: B.va, length: BYTES, readOnly: true }, { va: O.va, length: BYTES }] });
        const start = await init((i) => i * 5);
        const s0 = { ...r.engine.cp.batchStats };
        const d0 = native.vulkanStats().dispatchPhases.dispatches;
        await r.ch.launchPrograms(chain(24, 100, cached));
        const s1 = r.engine.cp.batchStats;
        expect(s1.batches - s0.batches).toBe(1);
        expect(s1.launches - s0.launches).toBe(25);
        expect(native.vulkanStats().dispatchPhases.dispatches - d0).toBe(25);
        const want = reference((i) => start[i]!, 24, 100);
        expect(firstBad(B.u32, want)).toBeNull();
        expect(firstBad(O.u32, want)).toBeNull();   // the last launch saw the 24th step's bytes
      });
    }

    it('with batching off (batchLaunches = 1) every launch is its own job and the bytes are the same', async () => {
      const start = await init((i) => 7 * i);
      const s0 = { ...r.engine.cp.batchStats };
      r.engine.cp.batchLaunches = 1;
      try {
        await r.ch.launchPrograms(chain(8, 5, true));
      } finally {
        r.engine.cp.batchLaunches = 64;
      }
      expect(r.engine.cp.batchStats.batches - s0.batches).toBe(0);
      const want = reference((i) => start[i]!, 8, 5);
      expect(firstBad(O.u32, want)).toBeNull();
    });

    it('a batch longer than batchLaunches is cut into batches of that many', async () => {
      const start = await init((i) => i ^ 0x55);
      const s0 = { ...r.engine.cp.batchStats };
      r.engine.cp.batchLaunches = 4;
      try {
        await r.ch.launchPrograms(chain(10, 1, true));
      } finally {
        r.engine.cp.batchLaunches = 64;
      }
      const s1 = r.engine.cp.batchStats;
      expect(s1.batches - s0.batches).toBe(3);     // 4 + 4 + 3
      expect(s1.launches - s0.launches).toBe(11);
      expect(firstBad(O.u32, reference((i) => start[i]!, 10, 1))).toBeNull();
    });

    it('a malformed packed batch is refused with a clear error, never run', () => {
      const bad = (meta: number[], params = new Uint8Array(0)) => () => native.submitDispatchBatch(new Float64Array(meta), params, 0);
      expect(bad([])).toThrow(/no launches/);
      expect(bad([1, 0, 1, 1, 1, -1, 0])).toThrow(/launch 0 is malformed/);           // truncated
      expect(bad([1, 99, 1, 1, 1, -1, 0, 0])).toThrow(/malformed/);                  // too many windows
      expect(bad([1, 0, 1.5, 1, 1, -1, 0, 0])).toThrow(/malformed/);                 // not an integer
      expect(bad([1, 0, 1, 1, 1, -1, 0, 8], new Uint8Array(4))).toThrow(/malformed/); // params beyond the block
      expect(bad([1, 1, 1, 1, 1, -1, 0, 0, 0, 16, -1])).toThrow(/malformed/);        // a null window with bytes
      expect(bad([0x7ffffff0, 0, 1, 1, 1, -1, 0, 0])).toThrow(/slot .* is empty/);
      expect(() => native.submitDispatchBatch([1] as unknown as Float64Array, new Uint8Array(0), 0)).toThrow(TypeError);
    });

    it('a launch that never ends stops its channel; the launches before it in the batch completed', async () => {
      const ch3 = r.drv.createChannel();
      const Y = r.drv.vramBuffer(ch3.vm, BYTES);
      const y32 = new Uint32Array(Y.u8.buffer, Y.u8.byteOffset, N);
      y32.fill(0);
      const Z = r.drv.vramBuffer(ch3.vm, BYTES);
      const grid = [N / 64, 1, 1] as [number, number, number];
      const s3 = r.drv.programBuffer(ch3.vm, glsl(STEP));
      const e3 = r.drv.programBuffer(ch3.vm, glsl(ENDLESS));
      // Both compiled first (a launch waiting for its compile ends the batch before it); the
      // endless one ends at once when told to.
      await ch3.launchProgram(s3, { grid, push: u32(0), buffers: [{ va: Y.va, length: BYTES }] });
      await ch3.launchProgram(e3, { grid: [1, 1, 1], push: u32(1), buffers: [{ va: Z.va, length: 16 }] });
      y32.fill(0);
      r.engine.watchdogMs = 300;
      const gp0 = ch3.gpGet;
      try {
        // One entry of launches and nothing after them: the entry's end ends the batch.
        await ch3.launchPrograms([
          { module: s3, l: { grid, push: u32(2), buffers: [{ va: Y.va, length: BYTES }] } },
          { module: e3, l: { grid: [1, 1, 1], push: u32(0), buffers: [{ va: Z.va, length: 16 }] } },
          { module: s3, l: { grid, push: u32(9), buffers: [{ va: Y.va, length: BYTES }] } },
        ], { fence: false });
        // GP_GET passes the entry only once its work is done (hw-spec §4), batch or not: guests
        // use it as a fence.
        await new Promise((res) => setTimeout(res, 50));
        expect(ch3.gpGet).toBe(gp0);
        const err = await ch3.fence().then(() => null, (e: unknown) => e as { code: number });
        // A GPU runs it until the watchdog; lavapipe's own loop cap may end it first.
        expect([CHAN_ERR.WATCHDOG, CHAN_ERR.PROGRAM_LOOP_LIMIT]).toContain(err?.code);
      } finally {
        r.engine.watchdogMs = 10_000;
      }
      // The first launch completed before the endless one (y = 0 * 3 + 2 + i); the one after it
      // was stopped through its cancel word or ran to its end (it has no loop): y = 7 * 3 + 9 + i.
      expect([7, 35]).toContain(y32[5]);
      // Another channel carries on.
      await init((i) => i);
      await r.ch.launchPrograms(chain(2, 0, false));
      expect(firstBad(O.u32, reference((i) => i, 2, 0))).toBeNull();
    }, 30_000);
  });
}

// On a device that cannot switch a running program out, the engine switches between VMs itself
// (ctxsw.ts). A batch must not hold the device for all its launches while another VM waits: it
// yields at a launch boundary and runs the rest after the neighbour's work (hw-spec §6.3.1).
describe('batched launches beside another VM (the engine\'s context switch)', () => {
  /** b[i] = spin(b[i]): n rounds of an LCG from the buffer's value (each launch depends on the last). */
  const SPIN = `#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer B { uint b[]; };
layout(push_constant) uniform P { uint n; } p;
void main() { uint i = gl_GlobalInvocationID.x; uint v = b[i]; for (uint k = 0u; k < p.n; k++) v = v * 1664525u + 1013904223u; b[i] = v; }`;
  const WORDS = 4096;
  const spinRef = (v: number, n: number, times: number) => {
    for (let t = 0; t < times; t++) for (let k = 0; k < n; k++) v = (Math.imul(v, 1664525) + 1013904223) >>> 0;
    return v;
  };
  let r: Rig;
  let backend: VulkanBackend;

  beforeAll(() => {
    backend = VulkanBackend.open(DEVICE);
    // A timeslice far above one launch: nothing here is cut, a yield is what lets the neighbour in.
    r = rig({ programs: backend, vramSize: 64 << 20, watchdogMs: 20_000, timesliceAlways: true, timesliceMs: 2_000 });
  });
  afterAll(() => {
    r?.close();
    backend?.close();
  });

  it('a long batch yields to a waiting VM at a launch boundary and finishes afterwards, in order', async () => {
    expect(r.engine.cp.ctxsw).not.toBeNull();
    const a = r.drv.createChannel();
    const b = r.drv.createChannel();
    r.engine.setChannelOwner(a.chid, 1);
    r.engine.setChannelOwner(b.chid, 2);
    const A = r.drv.vramBuffer(a.vm, 4 * WORDS);
    const Bb = r.drv.vramBuffer(b.vm, 4 * WORDS);
    const a32 = new Uint32Array(A.u8.buffer, A.u8.byteOffset, WORDS);
    const b32 = new Uint32Array(Bb.u8.buffer, Bb.u8.byteOffset, WORDS);
    const spinA = r.drv.programBuffer(a.vm, glsl(SPIN));
    const spinB = r.drv.programBuffer(b.vm, glsl(SPIN));
    const launch = (n: number) => ({ grid: [WORDS / 64, 1, 1] as [number, number, number], push: u32(n), buffers: [{ va: A.va, length: 4 * WORDS }] });
    // Compiled first, and a launch's length measured: the batch's launches are a few ms each.
    await b.launchProgram(spinB, { grid: [1, 1, 1], push: u32(1), buffers: [{ va: Bb.va, length: 4 * WORDS }] });
    await a.launchProgram(spinA, launch(1));
    let n = 2000;
    for (;;) {
      const t0 = performance.now();
      await a.launchProgram(spinA, launch(n));
      const ms = performance.now() - t0;
      if (ms >= 3 || n >= 1 << 22) break;
      n *= 2;
    }
    a32.fill(0);
    b32.fill(0);
    const y0 = r.engine.cp.batchStats.yields;
    const COUNT = 40;
    const order: string[] = [];
    const pa = a.launchPrograms(Array.from({ length: COUNT }, () => ({ module: spinA, l: launch(n) }))).then(() => order.push('a'));
    // The neighbour's one short launch, once the batch is on the device.
    await new Promise((res) => setTimeout(res, 10));
    const pb = b.launchProgram(spinB, { grid: [WORDS / 64, 1, 1], push: u32(3), buffers: [{ va: Bb.va, length: 4 * WORDS }] }).then(() => order.push('b'));
    await Promise.all([pa, pb]);
    expect(order).toEqual(['b', 'a']);                      // the neighbour did not wait for the whole batch
    expect(r.engine.cp.batchStats.yields - y0).toBeGreaterThan(0);
    expect(a32[0]).toBe(spinRef(0, n, COUNT));              // every launch of the batch ran, in order
    expect(a32[777]).toBe(spinRef(0, n, COUNT));
    expect(b32[5]).toBe(spinRef(0, 3, 1));
  }, 120_000);
});
