// The built-in kernels' GPU forms (native/shaders/builtins, plans in src/gpu/program/builtins.ts)
// against the native kernels: every kernel runs on the same inputs both ways — natively through
// runKernelSync, and as its plan's SPIR-V launches through the Vulkan backend (lavapipe here;
// VUGPU_TEST_VULKAN_DEVICE picks another device, '' the default choice) — and the results are
// compared: integers exactly, floats within twice the tolerances test/kernels.test.ts allows
// each against a double reference (both sides may be off by that much, in opposite directions).
// A separate part checks, without a device, that every plan makes exactly the native kernel's
// parameter checks and keeps every launch under the loop budget.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { K, KERNELS } from '../../src/gpu/kernels.ts';
import { VulkanBackend } from '../../src/gpu/vulkan.ts';
import {
  BUILTIN_PROGRAMS, LOOP_BUDGET, LOOP_CHUNK, builtinSpvPath, type BuiltinPlan,
} from '../../src/gpu/program/builtins.ts';
import { params } from '../kernel-params.ts';
import { randF32, randU32, rng } from '../prng.ts';

const EINVAL = 22;

// ---- inputs: test/prng.ts's generators, as test/kernels.test.ts draws them ----

/** Assert |got − want| ≤ rel·scale + abs elementwise (scale defaults to |want|); reports the worst. */
function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, rel: number, abs: number,
  scale?: ArrayLike<number>): void {
  expect(got.length).toBe(want.length);
  let worst = -Infinity;
  let at = -1;
  for (let i = 0; i < want.length; i++) {
    const excess = Math.abs(got[i] - want[i]) - (rel * Math.abs(scale ? scale[i] : want[i]) + abs);
    if (!(excess <= worst)) {
      worst = excess;
      at = i;
      if (Number.isNaN(excess)) break;
    }
  }
  expect({ at, got: got[at], want: want[at], ok: worst <= 0 }).toMatchObject({ ok: true });
}

type Buf = Float32Array | Uint32Array | Int32Array | Uint8Array;

/** A copy of every buffer, so the two runs start from the same state. */
function clone<T extends Buf[]>(bufs: T): T {
  return bufs.map((b) => b.slice()) as T;
}

function runNative(kernel: number, bufs: Buf[], p: Uint8Array): number {
  return native.runKernelSync({
    kernel, windows: bufs.map((b) => native.addressOf(b)), lengths: bufs.map((b) => b.byteLength), params: p,
  });
}

// ---- the GPU side: the plan's launches through the Vulkan backend ----

let backend: VulkanBackend | null = null;
let openError = '';
const compiled = new Map<number, Promise<number>>();
const SLOT_BASE = 7000;  // program slots are process-wide; this file is its own process
const WATCHDOG_MS = 20_000;

function compile(id: number): Promise<number> {
  let p = compiled.get(id);
  if (!p) {
    const bytes = readFileSync(builtinSpvPath(id));
    const words = new Uint32Array(bytes.byteLength / 4);
    new Uint8Array(words.buffer).set(bytes);
    p = new Promise((resolve) => {
      backend!.compile(SLOT_BASE + id, words, 0, new Uint32Array(0), (r) => resolve(r.status));
    });
    compiled.set(id, p);
  }
  return p;
}

function dispatch(id: number, bufs: Buf[], push: Uint8Array, grid: [number, number, number]): Promise<number> {
  return new Promise((resolve) => {
    backend!.dispatch({
      slot: SLOT_BASE + id, windows: bufs.map((b) => native.addressOf(b)), lengths: bufs.map((b) => b.byteLength),
      params: push, grid,
    }, WATCHDOG_MS, (r) => resolve(r.status));
  });
}

/** Launches of the last runGpu (repetitions counted). */
let lastLaunches = 0;

/** Run kernel `id`'s plan as an engine would: the launches in order, then the plan's epilogue. */
async function runGpu(id: number, bufs: Buf[], p: Uint8Array): Promise<number> {
  const plan: BuiltinPlan | null = BUILTIN_PROGRAMS[id].plan(p, bufs.map((b) => b.byteLength));
  lastLaunches = 0;
  if (!plan) return -EINVAL;
  const st = await compile(id);
  if (st !== 0) throw new Error(`compile of ${KERNELS[id].name}: ${st} ${JSON.stringify(backend!.info(SLOT_BASE + id))}`);
  const t0 = process.hrtime.bigint();
  let status = 0;
  run: for (const d of plan.dispatches) {
    for (let r = 0; r < (d.repeat ?? 1); r++) {
      status = await dispatch(id, bufs, d.push, d.grid);
      lastLaunches++;
      if (status !== 0) break run;
      if (plan.timeLimitNs !== undefined && process.hrtime.bigint() - t0 >= plan.timeLimitNs) break run;
    }
  }
  if (plan.elapsedAt) {
    const b = bufs[plan.elapsedAt.binding];
    new DataView(b.buffer, b.byteOffset, b.byteLength).setBigUint64(plan.elapsedAt.offset, process.hrtime.bigint() - t0, true);
  }
  if (status === 0 && plan.errorWord) {
    const b = bufs[plan.errorWord.binding];
    const w = new DataView(b.buffer, b.byteOffset, b.byteLength).getUint32(plan.errorWord.offset, true);
    if ((w & plan.errorWord.mask) !== 0) return -EINVAL;
  }
  return status;
}

/** Same inputs both ways; returns [native buffers, GPU buffers] after asserting equal statuses. */
async function both<T extends Buf[]>(id: number, bufs: T, p: Uint8Array, status = 0): Promise<[T, T]> {
  const nat = clone(bufs), gpu = clone(bufs);
  expect(runNative(id, nat, p)).toBe(status);
  expect(await runGpu(id, gpu, p)).toBe(status);
  return [nat, gpu];
}

beforeAll(() => {
  // The modules are build outputs (npm test builds them first; a direct vitest run may not have).
  execFileSync('bash', [new URL('../../scripts/build-spirv.sh', import.meta.url).pathname], { stdio: 'inherit' });
  try {
    backend = VulkanBackend.open(process.env.VUGPU_TEST_VULKAN_DEVICE ?? 'llvmpipe');
  } catch (err) {
    openError = (err as Error).message;
  }
});
afterAll(() => backend?.close());

describe('GPU forms against the native kernels', () => {
  it('the Vulkan device opens and every built-in module compiles', async () => {
    expect({ openError }).toEqual({ openError: '' });
    for (const b of BUILTIN_PROGRAMS) {
      expect({ kernel: b.name, status: await compile(b.id) }).toEqual({ kernel: b.name, status: 0 });
      const info = backend!.info(SLOT_BASE + b.id);
      // The module's interface is the kernel's: its bindings, NonWritable exactly on R buffers.
      for (const bind of info.entry!.bindings) expect(bind.writable).toBe(!b.readOnly[bind.binding]);
      expect(info.entry!.pushBytes).toBeLessThanOrEqual(128);
    }
  });

  it('NOP', async () => {
    await both(K.NOP, [], new Uint8Array(0));
    expect(lastLaunches).toBe(1);
  });

  describe('LOOP', () => {
    function record(b: Uint8Array): { done: bigint; ns: bigint; state: number } {
      const dv = new DataView(b.buffer, b.byteOffset, 24);
      return { done: dv.getBigUint64(0, true), ns: dv.getBigUint64(8, true), state: dv.getUint32(16, true) };
    }
    function lcg(seed: number, steps: number): number {
      let s = seed >>> 0;
      for (let i = 0; i < steps; i++) s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      return s;
    }

    it('takes exactly the requested steps, across launch boundaries', async () => {
      for (const steps of [1, 65535, 65536, 200_001, LOOP_CHUNK, LOOP_CHUNK + 1, 2 * LOOP_CHUNK + 17]) {
        const [nat, gpu] = await both(K.LOOP, [new Uint8Array(24)],
          params(['u64', BigInt(steps)], ['u64', 0n], ['u32', 12345]));
        const n = record(nat[0]), g = record(gpu[0]);
        expect({ steps, done: g.done, state: g.state }).toEqual({ steps, done: n.done, state: n.state });
        expect(lastLaunches).toBe(Math.ceil(steps / LOOP_CHUNK));
      }
      expect(record((await both(K.LOOP, [new Uint8Array(24)], params(['u64', 3n], ['u64', 0n], ['u32', 7])))[1][0]).state)
        .toBe(lcg(7, 3));
    });

    it('stops on target_ns with a consistent record', async () => {
      const out = new Uint8Array(24);
      expect(await runGpu(K.LOOP, [out], params(['u64', 0n], ['u64', 30_000_000n], ['u32', 9]))).toBe(0);
      const r = record(out);
      expect(r.ns).toBeGreaterThanOrEqual(30_000_000n);
      expect(r.done).toBe(BigInt(lastLaunches) * BigInt(LOOP_CHUNK));
      expect(r.state).toBe(lcg(9, Number(r.done)));
    });

    it('rejects no limit at all and a short record like the native kernel', async () => {
      await both(K.LOOP, [new Uint8Array(24)], params(['u64', 0n], ['u64', 0n], ['u32', 0]), -EINVAL);
      await both(K.LOOP, [new Uint8Array(20)], params(['u64', 5n], ['u64', 0n], ['u32', 0]), -EINVAL);
    });
  });

  it('MEMSET fills count words and nothing after', async () => {
    const dst = new Uint32Array(1000).fill(0xdeadbeef);
    for (const count of [999n, 1n, 0n]) {
      const [nat, gpu] = await both(K.MEMSET, [dst], params(['u32', 0x01020304], ['u32', 0], ['u64', count]));
      expect(gpu[0]).toEqual(nat[0]);
    }
    await both(K.MEMSET, [new Uint32Array(16)], params(['u32', 1], ['u32', 0], ['u64', 17n]), -EINVAL);
  });

  it('MADD (exact, also in place) and FMADD', async () => {
    for (const n of [1, 67, 300]) {
      const a = randU32(n * n, 1), b = randU32(n * n, 2);
      const [nat, gpu] = await both(K.MADD, [a, b, new Uint32Array(n * n)], params(['u32', n]));
      expect(gpu[2]).toEqual(nat[2]);
      // C is exactly A: the same window bound twice
      const ga = a.slice(), na = a.slice();
      expect(runNative(K.MADD, [na, b, na], params(['u32', n]))).toBe(0);
      expect(await runGpu(K.MADD, [ga, b, ga], params(['u32', n]))).toBe(0);
      expect(ga).toEqual(na);
    }
    const n = 131;
    const [nat, gpu] = await both(K.FMADD, [randF32(n * n, 3), randF32(n * n, 4), new Float32Array(n * n)], params(['u32', n]));
    expect(gpu[2]).toEqual(nat[2]);  // one IEEE addition: bit-exact
  });

  it('MMUL is exact mod 2^32 across tile edges', async () => {
    for (const n of [1, 7, 63, 64, 65, 129, 300]) {
      const [nat, gpu] = await both(K.MMUL, [randU32(n * n, 10 + n), randU32(n * n, 20 + n), new Uint32Array(n * n).fill(1)],
        params(['u32', n]));
      expect({ n, same: Buffer.compare(Buffer.from(gpu[2].buffer), Buffer.from(nat[2].buffer)) === 0 }).toEqual({ n, same: true });
    }
  });

  it('FMMUL agrees within 2e-4·Σ|a·b|', async () => {
    for (const n of [1, 5, 97, 256]) {
      const a = randF32(n * n, 30 + n), b = randF32(n * n, 40 + n);
      const [nat, gpu] = await both(K.FMMUL, [a, b, new Float32Array(n * n).fill(NaN)], params(['u32', n]));
      const mag = new Float64Array(n * n);
      for (let i = 0; i < n; i++)
        for (let k = 0; k < n; k++)
          for (let j = 0; j < n; j++) mag[i * n + j] += Math.abs(a[i * n + k] * b[k * n + j]);
      expectClose(gpu[2], nat[2], 2e-4, 2e-6, mag);
    }
  });

  describe('BACKPROP', () => {
    it('FORWARD, one launch and a sum split across launches', async () => {
      for (const [nIn, nOut] of [[300, 17], [0, 5], [5000, 40], [16 * LOOP_BUDGET + 4321, 3]]) {
        const x = randF32(nIn, 60 + nOut, 0, 1), w = randF32((nIn + 1) * nOut, 61, -0.1, 0.1);
        const [nat, gpu] = await both(K.BACKPROP_FORWARD, [x, w, new Float32Array(nOut)], params(['u32', nIn], ['u32', nOut]));
        expect(lastLaunches).toBe(Math.max(1, Math.ceil(nIn / (16 * LOOP_BUDGET))));
        // The sum's error scale Σ|x·w|, carried through sigmoid' = y(1 − y).
        const scale = Array.from(nat[2], (y, j) => {
          let m = Math.abs(w[j]);
          for (let i = 0; i < nIn; i++) m += Math.abs(x[i] * w[(i + 1) * nOut + j]);
          return m * y * (1 - y);
        });
        expectClose(gpu[2], nat[2], 2e-4, 2e-6, scale);
      }
    });

    it('ADJUST', async () => {
      const nIn = 200, nOut = 9;
      const [nat, gpu] = await both(K.BACKPROP_ADJUST, [randF32(nOut, 70), randF32(nIn, 71, 0, 1),
        randF32((nIn + 1) * nOut, 72), randF32((nIn + 1) * nOut, 73, -0.1, 0.1)],
      params(['u32', nIn], ['u32', nOut], ['f32', 0.3], ['f32', 0.3]));
      expectClose(gpu[2], nat[2], 2e-5, 2e-6);
      expectClose(gpu[3], nat[3], 2e-5, 2e-6);
    });

    it('rejects what the native kernel rejects', async () => {
      const x = new Float32Array(10), w = new Float32Array(11 * 4 - 1), y = new Float32Array(4);
      await both(K.BACKPROP_FORWARD, [x, w, y], params(['u32', 10], ['u32', 4]), -EINVAL);
      await both(K.BACKPROP_FORWARD, [x, new Float32Array(44), y], params(['u32', 0xffffffff], ['u32', 4]), -EINVAL);
    });
  });

  describe('BFS', () => {
    interface Graph { n: number; offsets: Uint32Array; edges: Uint32Array }
    function graph(n: number, degree: (v: number, r: () => number) => number, seed: number): Graph {
      const r = rng(seed);
      const adj: number[][] = Array.from({ length: n }, () => []);
      for (let v = 0; v < n; v++) {
        const deg = degree(v, r);
        for (let e = 0; e < deg; e++) adj[v].push(Math.floor(r() * n));
      }
      const offsets = new Uint32Array(n + 1);
      for (let v = 0; v < n; v++) offsets[v + 1] = offsets[v] + adj[v].length;
      return { n, offsets, edges: Uint32Array.from(adj.flat()) };
    }
    function seeded(g: Graph, src: number): Buf[] {
      const mask = new Uint8Array(g.n), updating = new Uint8Array(g.n), visited = new Uint8Array(g.n);
      const cost = new Int32Array(g.n).fill(-1);
      mask[src] = visited[src] = 1;
      cost[src] = 0;
      return [g.offsets, g.edges, mask, updating, visited, cost, new Uint32Array([7])];
    }

    /** Both sides level by level from the same state; every buffer equal after every level. */
    async function lockstep(g: Graph): Promise<number> {
      const nat = seeded(g, 0), gpu = seeded(g, 0);
      const p = params(['u32', g.n], ['u32', g.edges.length]);
      let levels = 0;
      for (;;) {
        expect(runNative(K.BFS, nat, p)).toBe(0);
        expect(await runGpu(K.BFS, gpu, p)).toBe(0);
        levels++;
        for (let i = 2; i < 7; i++) expect({ level: levels, buffer: i, same: Buffer.compare(Buffer.from(gpu[i].buffer), Buffer.from(nat[i].buffer)) === 0 })
          .toEqual({ level: levels, buffer: i, same: true });
        if ((nat[6] as Uint32Array)[0] === 0 || levels > g.n + 1) break;
      }
      return levels;
    }

    it('levels equal the native kernel\'s, a random sparse graph', async () => {
      expect(await lockstep(graph(3000, (_v, r) => Math.floor(r() * 6), 80))).toBeGreaterThan(4);
    });

    it('levels equal the native kernel\'s with hubs walked by whole workgroups (degrees 32 … 5000)', async () => {
      // Node 0 reaches 1 … 5000; some of those are hubs whose targets nothing else reaches, so an
      // edge a hub's walk skips leaves its target unreached; the rest point into a random tail.
      const n = 8000, hubs = new Map([[1, 300], [2, 33], [3, 32], [300, 257], [4000, 1200]]);
      const r = rng(81);
      const adj: number[][] = Array.from({ length: n }, () => []);
      for (let u = 1; u <= 5000; u++) adj[0].push(u);
      let tail = 5001;
      for (const [v, deg] of hubs) for (let e = 0; e < deg; e++) adj[v].push(tail++);
      for (let v = 4; v <= 5000; v++)
        if (!hubs.has(v)) for (let e = Math.floor(r() * 3); e > 0; e--) adj[v].push(tail + Math.floor(r() * (n - tail)));
      for (let v = 5001; v < n; v++) for (let e = Math.floor(r() * 3); e > 0; e--) adj[v].push(Math.floor(r() * n));
      const offsets = new Uint32Array(n + 1);
      for (let v = 0; v < n; v++) offsets[v + 1] = offsets[v] + adj[v].length;
      expect(await lockstep({ n, offsets, edges: Uint32Array.from(adj.flat()) })).toBeGreaterThan(3);
    });

    it('a malformed graph is -EINVAL', async () => {
      const n = 4, offsets = Uint32Array.from([0, 2, 3, 3, 3]);
      const g = { n, offsets, edges: Uint32Array.from([1, 9, 2]) };  // 0 → 9 does not exist
      await both(K.BFS, seeded(g, 0), params(['u32', n], ['u32', 3]), -EINVAL);
      const past = { n, offsets: Uint32Array.from([0, 5, 5, 5, 5]), edges: Uint32Array.from([1, 2, 3]) };
      await both(K.BFS, seeded(past, 0), params(['u32', n], ['u32', 3]), -EINVAL);
    });
  });

  it('HOTSPOT, three ping-pong steps, 1-wide grids included', async () => {
    for (const [rows, cols] of [[37, 53], [1, 9], [8, 1], [1, 1], [300, 257]]) {
      const gh = 0.016 / rows, gw = 0.016 / cols, t = 0.0005;
      const p = params(['u32', rows], ['u32', cols], ['f32', 0.5 * 1.75e6 * t * gw * gh], ['f32', gw / (2 * 100 * t * gh)],
        ['f32', gh / (2 * 100 * t * gw)], ['f32', t / (100 * gh * gw)], ['f32', 0.001 / (3e6 / (0.5 * t * 1.75e6))], ['f32', 80]);
      const power = randF32(rows * cols, 91 + cols, 0, 0.01);
      let tin = randF32(rows * cols, 90 + rows, 320, 340);
      for (let step = 0; step < 3; step++) {
        const [nat, gpu] = await both(K.HOTSPOT, [tin, power, new Float32Array(rows * cols)], p);
        // The change T' − T (~1e-4 of T), as test/kernels.test.ts compares it.
        expectClose(Array.from(gpu[2], (v, i) => v - tin[i]), Array.from(nat[2], (v, i) => v - tin[i]), 2e-4, 4 * 2 ** -23 * 512);
        tin = nat[2];
      }
    }
  });

  describe('LUD', () => {
    function diagDominant(n: number, seed: number): Float32Array {
      const a = randF32(n * n, seed);
      for (let i = 0; i < n; i++) a[i * n + i] += n;
      return a;
    }

    /** The host's blocked LU loop, with one of the two runners. */
    async function blocked(a: Float32Array, n: number, bs: number, run: (id: number, b: Buf[], p: Uint8Array) => Promise<number>): Promise<number> {
      const steps = Math.ceil(n / bs);
      let launches = 0;
      for (let s = 0; s < steps; s++) {
        const p = params(['u32', n], ['u32', bs], ['u32', s]);
        for (const id of s === steps - 1 ? [K.LUD_DIAGONAL] : [K.LUD_DIAGONAL, K.LUD_PERIMETER, K.LUD_INTERNAL]) {
          expect(await run(id, [a], p)).toBe(0);
          launches += lastLaunches;
        }
      }
      return launches;
    }

    it('the blocked factorisation equals the native one (blocks dividing n and not, multi-launch diagonal and perimeter)', async () => {
      for (const [n, bs] of [[64, 16], [100, 16], [70, 32], [33, 64], [5, 1], [600, 300], [400, 400]]) {
        const a0 = diagDominant(n, 100 + n + bs);
        const nat = a0.slice(), gpu = a0.slice();
        await blocked(nat, n, bs, async (id, b, p) => runNative(id, b, p));
        const launches = await blocked(gpu, n, bs, runGpu);
        expect(launches).toBeGreaterThanOrEqual(3 * Math.ceil(n / bs) - 2);
        expectClose(gpu, nat, 2e-4, 2e-5);
      }
    });

    it('rejects what the native kernel rejects', async () => {
      const a = new Float32Array(64);
      for (const [id, n, bs, s] of [[K.LUD_DIAGONAL, 8, 0, 0], [K.LUD_PERIMETER, 8, 4, 2], [K.LUD_INTERNAL, 0, 4, 0],
        [K.LUD_INTERNAL, 9, 4, 0], [K.LUD_DIAGONAL, 0x10000, 4, 0]])
        await both(id, [a], params(['u32', n], ['u32', bs], ['u32', s]), -EINVAL);
    });
  });

  it('SRAD1 then SRAD2', async () => {
    for (const [rows, cols] of [[40, 31], [1, 17], [9, 1], [128, 200]]) {
      const img = Float32Array.from(randF32(rows * cols, 110 + rows), (v) => Math.exp(v * 0.5));
      let sum = 0, sum2 = 0;
      for (const v of img) { sum += v; sum2 += v * v; }
      const mean = sum / img.length;
      const q0 = (sum2 / img.length - mean * mean) / (mean * mean);
      const bufs = [img, ...Array.from({ length: 5 }, () => new Float32Array(rows * cols))];
      const [nat, gpu] = await both(K.SRAD1, bufs, params(['u32', rows], ['u32', cols], ['f32', q0]));
      for (let b = 1; b < 5; b++) expect(gpu[b]).toEqual(nat[b]);  // differences: exact
      expectClose(gpu[5], nat[5], 0, 4e-5);
      // SRAD2 from the native SRAD1 output on both sides.
      const [nat2, gpu2] = await both(K.SRAD2, nat, params(['u32', rows], ['u32', cols], ['f32', 0.5]));
      expectClose(gpu2[0], nat2[0], 2e-5, 2e-6);
    }
  });
});

// ---- plans alone (no device) ----

describe('plans', () => {
  // Parameter blocks and buffer lengths around every check of every kernel: the plan must be
  // null exactly where the native kernel returns -EINVAL (buffers are allocated as long as the
  // lengths say, so overlap never comes into it).
  function cases(): { id: number; p: Uint8Array; lengths: number[] }[] {
    const r = rng(5);
    const dims = [0, 1, 3, 16, 17, 64, 65, 1 << 30, (1 << 30) + 1, 0xffffffff];
    const pick = (): number => (r() < 0.7 ? Math.floor(r() * 40) : dims[Math.floor(r() * dims.length)]);
    const out: { id: number; p: Uint8Array; lengths: number[] }[] = [];
    for (let i = 0; i < 3000; i++) {
      const id = Math.floor(r() * 16);
      const b = BUILTIN_PROGRAMS[id];
      const words = Array.from({ length: 8 }, pick);
      if (id === K.MEMSET) words[3] = r() < 0.9 ? 0 : 1;  // count's high word
      if (id === K.LOOP) {  // a short run when accepted: ≤ 1000 steps or 1 µs
        words[0] %= 1000;
        words[1] = 0;
        words[2] = r() < 0.5 ? 0 : 1000;
        words[3] = 0;
      }
      const lud = id >= K.LUD_DIAGONAL && id <= K.LUD_INTERNAL;
      if (lud && r() < 0.8) words[2] = Math.floor(r() * 4);  // a step that often exists
      const p = new Uint8Array(r() < 0.05 ? Math.floor(r() * b.minParams) : 32);
      const dv = new DataView(p.buffer);
      for (let w = 0; 4 * w + 4 <= p.length; w++) dv.setUint32(4 * w, words[w] >>> 0, true);
      // Lengths: what the parameters need (as a small n would), give or take a word.
      const need = Math.max(4, (words[0] % 41) * (lud ? words[0] % 41 : (words[1] % 41) + 1) * 4);
      const nb = r() < 0.03 ? b.buffers + 1 : b.buffers;
      const lengths = Array.from({ length: nb }, () => Math.max(0, need + 4 * (Math.floor(r() * 3) - 1)) * (r() < 0.9 ? 1 : 4));
      out.push({ id, p, lengths });
    }
    return out;
  }

  it('reject exactly what the native kernels reject (3000 parameter/length cases)', () => {
    let rejected = 0;
    for (const { id, p, lengths } of cases()) {
      const bufs = lengths.map((l) => new Uint8Array(l + 16).subarray(0, l));  // distinct, non-overlapping
      const st = native.runKernelSync({ kernel: id, windows: bufs.map((b) => native.addressOf(b)), lengths, params: p });
      const plan = BUILTIN_PROGRAMS[id].plan(p, lengths);
      expect({ kernel: KERNELS[id].name, lengths, p: Array.from(p), native: st, plan: plan === null ? -EINVAL : 0 })
        .toMatchObject({ plan: st === -EINVAL ? -EINVAL : 0 });
      if (plan === null) rejected++;
    }
    expect(rejected).toBeGreaterThan(300);
  });

  it('every launch covers its elements with grids within 65535 and stays within the loop budget', () => {
    // MEMSET of 2^24 + 5 words: a 2-D grid covering every word.
    const big = 2 ** 24 + 5;
    const m = BUILTIN_PROGRAMS[K.MEMSET].plan(params(['u32', 1], ['u32', 0], ['u64', BigInt(big)]), [4 * big])!;
    const [gx, gy] = m.dispatches[0].grid;
    expect(gx).toBeLessThanOrEqual(65535);
    expect(gx * gy * 256).toBeGreaterThanOrEqual(big);
    expect((gx * (gy - 1)) * 256).toBeLessThan(big);

    // LUD_DIAGONAL on blocks past one launch per pivot: the launches walk the pivots in order
    // and, within a pivot cut by rows, its rows below the pivot in order, each exactly once;
    // each launch ≤ LOOP_BUDGET back-edges (lud_diagonal.comp's loops, a subgroup's worst case).
    for (const [n, bs] of [[1024, 1024], [4100, 4100], [9000, 6000]]) {
      const plan = BUILTIN_PROGRAMS[K.LUD_DIAGONAL].plan(params(['u32', n], ['u32', bs], ['u32', 0]), [4 * n * n])!;
      const b = Math.min(bs, n);
      let k = 0, row = 1;  // next pivot, and the next of its rows
      let cut = false;
      for (const d of plan.dispatches) {
        const dv = new DataView(d.push.buffer);
        const [k0, k1, r0, r1] = [12, 16, 20, 24].map((o) => dv.getUint32(o, true));
        let cost = 0;
        for (let kk = k0; kk < k1; kk++) {
          const lo = Math.max(kk + 1, r0), hi = Math.min(b, r1), rows = Math.max(0, hi - lo);
          expect([kk, lo]).toEqual([k, row]);
          row = hi;
          if (row >= b) { k++; row = k + 1; } else cut = true;
          const rr = Math.ceil(rows / 16), cc = Math.ceil((b - kk - 1) / 16);
          cost += 1 + Math.ceil(rows / 256) + rr + rr * cc;
        }
        expect(cost).toBeLessThanOrEqual(LOOP_BUDGET);
      }
      expect(k).toBe(b);
      expect(cut).toBe(b > 4000);
    }

    // BFS past one edge window: expand launches tile [0, m) without gaps.
    const nodes = 1000, edges = 40_000_000;
    const bfs = BUILTIN_PROGRAMS[K.BFS].plan(params(['u32', nodes], ['u32', edges]),
      [4 * (nodes + 1), 4 * edges, nodes, nodes, nodes, 4 * nodes, 4])!;
    const phases = bfs.dispatches.map((d) => Array.from(new Uint32Array(d.push.buffer.slice(8, 20))));
    expect(phases[0][0]).toBe(0);
    expect(phases.at(-1)![0]).toBe(2);
    const windows = phases.slice(1, -1);
    expect(windows.length).toBe(3);
    windows.forEach(([ph, lo, hi], i) => {
      expect(ph).toBe(1);
      expect(lo).toBe(i === 0 ? 0 : windows[i - 1][2]);
      expect(32 + 512 + (hi - lo) / 256).toBeLessThanOrEqual(LOOP_BUDGET);
    });
    expect(windows.at(-1)![2]).toBe(edges);

    // BACKPROP_FORWARD: input slices tile [0, n_in), bias first, sigmoid last.
    const sl = 16 * LOOP_BUDGET, nIn = 3 * sl + 1;
    const bp = BUILTIN_PROGRAMS[K.BACKPROP_FORWARD].plan(params(['u32', nIn], ['u32', 2]), [4 * nIn, 4 * (nIn + 1) * 2, 8])!;
    expect(bp.dispatches.map((d) => Array.from(new Uint32Array(d.push.buffer.slice(8, 24))))).toEqual([
      [0, sl, 1, 0], [sl, 2 * sl, 0, 0], [2 * sl, 3 * sl, 0, 0], [3 * sl, nIn, 0, 1]]);

    // LOOP: 2^40 steps is first + (launches − 1) identical repeats; time-only repeats forever.
    const loop = BUILTIN_PROGRAMS[K.LOOP].plan(params(['u64', 1n << 40n], ['u64', 0n], ['u32', 1]), [24])!;
    expect(loop.dispatches.map((d) => d.repeat ?? 1)).toEqual([1, Math.ceil(2 ** 40 / LOOP_CHUNK) - 1]);
    const timed = BUILTIN_PROGRAMS[K.LOOP].plan(params(['u64', 0n], ['u64', 5n], ['u32', 1]), [24])!;
    expect([timed.dispatches[1].repeat, timed.timeLimitNs]).toEqual([Infinity, 5n]);
  });
});
