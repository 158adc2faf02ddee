// Compute kernel library (native/kernels, layouts in docs/kernels.md): every kernel runs on
// inputs generated here and is compared with a reference computed here in TypeScript.
// Integer kernels must match exactly. Float kernels are compared with a double-precision
// reference computed from the same float32 inputs, within these tolerances:
//   - GEMM-like sums (FMMUL, LUD, BACKPROP_FORWARD sums): |got − ref| ≤ 1e-4 · Σ|terms| + 1e-6,
//     i.e. relative 1e-4 of the magnitude of what was summed (float32 summation error plus
//     BLAS/FMA reordering; cancellation makes a plain relative test meaningless);
//   - pointwise formulas (FMADD, HOTSPOT, SRAD, BACKPROP_ADJUST): relative 1e-5 (+1e-6 absolute)
//     — a few float32 ulps per operation.
import { afterAll, describe, expect, it } from 'vitest';
import { native, ECANCELED } from '../src/native.ts';
import type { JobCompletion } from '../src/native.ts';
import { params } from './kernel-params.ts';
import { randF32, randU32, rng } from './prng.ts';

const EINVAL = 22;
const ENOSYS = 38;

// Kernel ids (native/include/kernels.h).
const K = {
  NOP: 0, LOOP: 1, MADD: 2, FMADD: 3, MMUL: 4, FMMUL: 5, BP_FORWARD: 6, BP_ADJUST: 7, BFS: 8,
  HOTSPOT: 9, LUD_DIAGONAL: 10, LUD_PERIMETER: 11, LUD_INTERNAL: 12, SRAD1: 13, SRAD2: 14,
  MEMSET: 15,
} as const;


type Buf = ArrayBufferView;

/** runKernelSync on typed arrays; lengths default to each array's byte length. */
function run(kernel: number, bufs: Buf[], p: Uint8Array, lengths?: number[]): number {
  return native.runKernelSync({
    kernel,
    windows: bufs.map((b) => native.addressOf(b)),
    lengths: lengths ?? bufs.map((b) => b.byteLength),
    params: p,
  });
}

/** Assert |got − ref| ≤ rel·scale + abs elementwise, scale defaulting to |ref|. */
function expectClose(got: ArrayLike<number>, ref: ArrayLike<number>, rel: number, abs = 1e-6,
  scale?: ArrayLike<number>): void {
  expect(got.length).toBe(ref.length);
  let worst = -Infinity;
  let at = -1;
  for (let i = 0; i < ref.length; i++) {
    const tol = rel * Math.abs(scale ? scale[i] : ref[i]) + abs;
    const excess = Math.abs(got[i] - ref[i]) - tol;
    if (!(excess <= worst)) {  // also true for NaN, which is then the verdict
      worst = excess;
      at = i;
      if (Number.isNaN(excess)) break;
    }
  }
  // Report the worst element, so a failure says where and by how much.
  expect({ at, got: got[at], ref: ref[at], ok: worst <= 0 }).toMatchObject({ ok: true });
}

describe('dispatch', () => {
  it('runs NOP, rejects unknown ids with -ENOSYS and wrong buffer counts with -EINVAL', () => {
    expect(run(K.NOP, [], new Uint8Array(0))).toBe(0);
    expect(run(16, [], new Uint8Array(0))).toBe(-ENOSYS);
    expect(run(0xffffffff, [], new Uint8Array(0))).toBe(-ENOSYS);
    const a = new Uint32Array(4);
    expect(run(K.NOP, [a], new Uint8Array(0))).toBe(-EINVAL);
    expect(run(K.MADD, [a, a], params(['u32', 2]))).toBe(-EINVAL);
  });

  it('rejects a parameter block shorter than the kernel reads', () => {
    const a = new Uint32Array(4);
    expect(run(K.MADD, [a, a, a], new Uint8Array(3))).toBe(-EINVAL);
    expect(run(K.HOTSPOT, [a, a, a], new Uint8Array(28))).toBe(-EINVAL);
  });

  it('rejects a window that is not 4-byte aligned', () => {
    const raw = new Uint8Array(64);
    const odd = raw.subarray(1, 61);
    const ok = new Uint32Array(16);
    expect(run(K.MADD, [odd, ok, ok], params(['u32', 2]))).toBe(-EINVAL);
    expect(run(K.MADD, [raw.subarray(4, 20), ok, ok], params(['u32', 2]))).toBe(0);
  });
});

describe('LOOP', () => {
  function lcg(seed: number, steps: number): number {
    let s = seed >>> 0;
    for (let i = 0; i < steps; i++) s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s;
  }
  function record(out: ArrayBuffer): { done: bigint; ns: bigint; state: number } {
    const dv = new DataView(out);
    return { done: dv.getBigUint64(0, true), ns: dv.getBigUint64(8, true), state: dv.getUint32(16, true) };
  }

  it('runs exactly the requested iterations and leaves the LCG state', () => {
    const out = new Uint8Array(24);
    for (const steps of [1, 65535, 65536, 200001]) {
      expect(run(K.LOOP, [out], params(['u64', BigInt(steps)], ['u64', 0n], ['u32', 12345]))).toBe(0);
      const r = record(out.buffer);
      expect(r.done).toBe(BigInt(steps));
      expect(r.state).toBe(lcg(12345, steps));
    }
  });

  it('stops on target_ns', () => {
    const out = new Uint8Array(24);
    const t0 = process.hrtime.bigint();
    expect(run(K.LOOP, [out], params(['u64', 0n], ['u64', 3_000_000n], ['u32', 7]))).toBe(0);
    const wall = process.hrtime.bigint() - t0;
    const r = record(out.buffer);
    expect(r.ns).toBeGreaterThanOrEqual(3_000_000n);
    expect(wall).toBeGreaterThanOrEqual(3_000_000n);
    expect(r.done).toBeGreaterThan(0n);
    expect(r.state).toBe(lcg(7, Number(r.done)));
  });

  it('rejects no limit at all and a too small record buffer', () => {
    expect(run(K.LOOP, [new Uint8Array(24)], params(['u64', 0n], ['u64', 0n], ['u32', 0]))).toBe(-EINVAL);
    expect(run(K.LOOP, [new Uint8Array(20)], params(['u64', 5n], ['u64', 0n], ['u32', 0]))).toBe(-EINVAL);
  });
});

describe('MEMSET', () => {
  it('fills count words and nothing after', () => {
    const dst = new Uint32Array(1000).fill(0xdeadbeef);
    expect(run(K.MEMSET, [dst], params(['u32', 0x01020304], ['u32', 0], ['u64', 999n]))).toBe(0);
    expect(dst.subarray(0, 999).every((v) => v === 0x01020304)).toBe(true);
    expect(dst[999]).toBe(0xdeadbeef);
  });

  it('rejects a count beyond the buffer, including one whose byte size overflows', () => {
    const dst = new Uint32Array(16);
    expect(run(K.MEMSET, [dst], params(['u32', 1], ['u32', 0], ['u64', 17n]))).toBe(-EINVAL);
    expect(run(K.MEMSET, [dst], params(['u32', 1], ['u32', 0], ['u64', 1n << 62n]))).toBe(-EINVAL);
    expect(dst.every((v) => v === 0)).toBe(true);
  });
});

describe('MADD / FMADD', () => {
  it('MADD adds u32 matrices with wrap-around, also in place', () => {
    const n = 67;
    const a = randU32(n * n, 1), b = randU32(n * n, 2), c = new Uint32Array(n * n);
    expect(run(K.MADD, [a, b, c], params(['u32', n]))).toBe(0);
    const ref = a.map((v, i) => (v + b[i]) >>> 0);
    expect(c).toEqual(ref);
    expect(run(K.MADD, [a, b, a], params(['u32', n]))).toBe(0);
    expect(a).toEqual(ref);
  });

  it('FMADD adds f32 matrices', () => {
    const n = 131;
    const a = randF32(n * n, 3), b = randF32(n * n, 4), c = new Float32Array(n * n);
    expect(run(K.FMADD, [a, b, c], params(['u32', n]))).toBe(0);
    expectClose(c, Array.from(a, (v, i) => v + b[i]), 1e-6, 0);
  });

  it('rejects buffers smaller than n² and absurd n', () => {
    const n = 32;
    const a = new Uint32Array(n * n), c = new Uint32Array(n * n - 1);
    expect(run(K.MADD, [a, a, c], params(['u32', n]))).toBe(-EINVAL);
    expect(run(K.FMADD, [a, a, a], params(['u32', n + 1]))).toBe(-EINVAL);
    expect(run(K.MADD, [a, a, a], params(['u32', 0xffffffff]))).toBe(-EINVAL);
    expect(run(K.MADD, [a, a, a], params(['u32', 0x80000000]))).toBe(-EINVAL);
    expect(run(K.MADD, [a, a, a], params(['u32', 0]))).toBe(0);
  });
});

function matmulU32(a: Uint32Array, b: Uint32Array, n: number): Uint32Array {
  const c = new Uint32Array(n * n);
  for (let i = 0; i < n; i++)
    for (let k = 0; k < n; k++) {
      const aik = a[i * n + k];
      for (let j = 0; j < n; j++) c[i * n + j] = (c[i * n + j] + Math.imul(aik, b[k * n + j])) >>> 0;
    }
  return c;
}

/** Double-precision A·B and Σ|A||B| per element (the tolerance scale). */
function matmulF64(a: Float32Array, b: Float32Array, m: number, n: number, k: number): { ref: Float64Array; mag: Float64Array } {
  const ref = new Float64Array(m * n), mag = new Float64Array(m * n);
  for (let i = 0; i < m; i++)
    for (let p = 0; p < k; p++) {
      const aip = a[i * k + p];
      for (let j = 0; j < n; j++) {
        ref[i * n + j] += aip * b[p * n + j];
        mag[i * n + j] += Math.abs(aip * b[p * n + j]);
      }
    }
  return { ref, mag };
}

describe('MMUL / FMMUL', () => {
  it('MMUL multiplies u32 matrices exactly mod 2^32 (sizes across the 6×16 tile, 120-row and 256-deep block edges; this is the packed loop that is also the f32 fallback GEMM)', () => {
    for (const n of [1, 7, 129, 300]) {
      const a = randU32(n * n, 10 + n), b = randU32(n * n, 20 + n), c = new Uint32Array(n * n).fill(1);
      expect(run(K.MMUL, [a, b, c], params(['u32', n]))).toBe(0);
      expect(c).toEqual(matmulU32(a, b, n));
    }
  });

  it(`FMMUL matches a double reference within 1e-4·Σ|a·b| (OpenBLAS: ${native.haveOpenBlas()})`, () => {
    for (const n of [1, 5, 97, 256]) {
      const a = randF32(n * n, 30 + n), b = randF32(n * n, 40 + n), c = new Float32Array(n * n).fill(NaN);
      expect(run(K.FMMUL, [a, b, c], params(['u32', n]))).toBe(0);
      const { ref, mag } = matmulF64(a, b, n, n, n);
      expectClose(c, ref, 1e-4, 1e-6, mag);
    }
  });

  it('sgemmDirect (rectangular) matches the same reference', () => {
    const m = 37, n = 53, k = 71;
    const a = randF32(m * k, 50), b = randF32(k * n, 51), c = new Float32Array(m * n);
    native.sgemmDirect(m, n, k, a, b, c);
    const { ref, mag } = matmulF64(a, b, m, n, k);
    expectClose(c, ref, 1e-4, 1e-6, mag);
  });

  it('rejects short buffers, absurd n and an output overlapping an input', () => {
    const n = 16;
    const a = new Float32Array(n * n), c = new Float32Array(n * n);
    expect(run(K.FMMUL, [a, a, c], params(['u32', n]), [n * n * 4, n * n * 4, n * n * 4 - 4])).toBe(-EINVAL);
    expect(run(K.MMUL, [a, a, c], params(['u32', 0xffffffff]))).toBe(-EINVAL);
    expect(run(K.FMMUL, [a, a, c], params(['u32', 65536]))).toBe(-EINVAL);  // 16 GiB per matrix
    expect(run(K.MMUL, [a, c, a], params(['u32', n]))).toBe(-EINVAL);
    const big = new Float32Array(2 * n * n);
    expect(run(K.FMMUL, [big.subarray(n * n), a, big.subarray(n * n / 2, n * n * 3 / 2)], params(['u32', n]))).toBe(-EINVAL);
  });
});

describe('BACKPROP', () => {
  const sigmoid = (x: number): number => 1 / (1 + Math.exp(-x));

  it('FORWARD computes sigmoid(bias + Σ x·w) per output', () => {
    const nIn = 300, nOut = 17;
    // Small weights, as BP initialises them, keep the sums off the flat tails of the sigmoid.
    const x = randF32(nIn, 60, 0, 1), w = randF32((nIn + 1) * nOut, 61, -0.1, 0.1), y = new Float32Array(nOut);
    expect(run(K.BP_FORWARD, [x, w, y], params(['u32', nIn], ['u32', nOut]))).toBe(0);
    const ref: number[] = [], scale: number[] = [];
    for (let j = 0; j < nOut; j++) {
      let s = w[j], m = Math.abs(w[j]);
      for (let i = 0; i < nIn; i++) {
        s += x[i] * w[(i + 1) * nOut + j];
        m += Math.abs(x[i] * w[(i + 1) * nOut + j]);
      }
      const yj = sigmoid(s);
      ref.push(yj);
      scale.push(m * yj * (1 - yj));  // the sum's error, carried through sigmoid' = y(1 − y)
    }
    expectClose(y, ref, 1e-4, 1e-6, scale);
  });

  it('ADJUST applies w += eta·delta·x + momentum·oldw and stores the change', () => {
    const nIn = 200, nOut = 9, eta = 0.3, momentum = 0.3;
    const delta = randF32(nOut, 70), x = randF32(nIn, 71, 0, 1);
    const w = randF32((nIn + 1) * nOut, 72), oldw = randF32((nIn + 1) * nOut, 73, -0.1, 0.1);
    const refW: number[] = [], refOld: number[] = [];
    const etaF = Math.fround(eta), momF = Math.fround(momentum);
    for (let r = 0; r <= nIn; r++) {
      const xr = r === 0 ? 1 : x[r - 1];
      for (let j = 0; j < nOut; j++) {
        const d = etaF * delta[j] * xr + momF * oldw[r * nOut + j];
        refW.push(w[r * nOut + j] + d);
        refOld.push(d);
      }
    }
    expect(run(K.BP_ADJUST, [delta, x, w, oldw],
      params(['u32', nIn], ['u32', nOut], ['f32', eta], ['f32', momentum]))).toBe(0);
    expectClose(w, refW, 1e-5);
    expectClose(oldw, refOld, 1e-5);
  });

  it('rejects short weight buffers and overlapping outputs', () => {
    const x = new Float32Array(10), w = new Float32Array(11 * 4 - 1), y = new Float32Array(4);
    expect(run(K.BP_FORWARD, [x, w, y], params(['u32', 10], ['u32', 4]))).toBe(-EINVAL);
    const w2 = new Float32Array(11 * 4);
    expect(run(K.BP_FORWARD, [x, w2, w2.subarray(0, 4)], params(['u32', 10], ['u32', 4]))).toBe(-EINVAL);
    expect(run(K.BP_ADJUST, [y, x, w2, w2], params(['u32', 10], ['u32', 4], ['f32', 0.3], ['f32', 0.3]))).toBe(-EINVAL);
    expect(run(K.BP_FORWARD, [x, w2, y], params(['u32', 0xffffffff], ['u32', 4]))).toBe(-EINVAL);
  });
});

describe('BFS', () => {
  interface Graph { n: number; offsets: Uint32Array; edges: Uint32Array }

  function randomGraph(n: number, avgDegree: number, seed: number): Graph {
    const r = rng(seed);
    const adj: number[][] = Array.from({ length: n }, () => []);
    for (let v = 0; v < n; v++) {
      const deg = Math.floor(r() * 2 * avgDegree);
      for (let e = 0; e < deg; e++) adj[v].push(Math.floor(r() * n));
    }
    const offsets = new Uint32Array(n + 1);
    for (let v = 0; v < n; v++) offsets[v + 1] = offsets[v] + adj[v].length;
    return { n, offsets, edges: Uint32Array.from(adj.flat()) };
  }

  function state(n: number, src: number): { mask: Uint8Array; updating: Uint8Array; visited: Uint8Array; cost: Int32Array; changed: Uint32Array } {
    const s = { mask: new Uint8Array(n), updating: new Uint8Array(n), visited: new Uint8Array(n),
      cost: new Int32Array(n).fill(-1), changed: new Uint32Array(1) };
    s.mask[src] = 1;
    s.visited[src] = 1;
    s.cost[src] = 0;
    return s;
  }

  it('computes BFS levels one frontier per launch until changed = 0', () => {
    const g = randomGraph(3000, 3, 80);
    const s = state(g.n, 0);
    const p = params(['u32', g.n], ['u32', g.edges.length]);
    let launches = 0;
    do {
      expect(run(K.BFS, [g.offsets, g.edges, s.mask, s.updating, s.visited, s.cost, s.changed], p)).toBe(0);
      launches++;
    } while (s.changed[0] === 1 && launches < g.n + 2);

    // Reference: queue BFS.
    const ref = new Int32Array(g.n).fill(-1);
    ref[0] = 0;
    const queue = [0];
    for (let h = 0; h < queue.length; h++) {
      const v = queue[h];
      for (let e = g.offsets[v]; e < g.offsets[v + 1]; e++) {
        const u = g.edges[e];
        if (ref[u] < 0) {
          ref[u] = ref[v] + 1;
          queue.push(u);
        }
      }
    }
    expect(s.cost).toEqual(ref);
    const depth = Math.max(...ref);
    expect(depth).toBeGreaterThan(3);
    expect(launches).toBe(depth + 1);  // the last launch finds no new frontier
    expect(s.mask.every((f) => f === 0)).toBe(true);
    expect(Array.from(s.visited, (f, i) => (f === 1) === (ref[i] >= 0)).every(Boolean)).toBe(true);
  });

  it('returns -EINVAL on an edge id or offset out of range, and on short buffers', () => {
    const n = 4;
    const offsets = Uint32Array.from([0, 2, 3, 3, 3]);
    const bad = Uint32Array.from([1, 9, 2]);  // node 0 → 9 does not exist
    let s = state(n, 0);
    expect(run(K.BFS, [offsets, bad, s.mask, s.updating, s.visited, s.cost, s.changed],
      params(['u32', n], ['u32', 3]))).toBe(-EINVAL);
    s = state(n, 0);
    const past = Uint32Array.from([0, 5, 5, 5, 5]);  // node 0's edges run past m
    expect(run(K.BFS, [past, Uint32Array.from([1, 2, 3]), s.mask, s.updating, s.visited, s.cost, s.changed],
      params(['u32', n], ['u32', 3]))).toBe(-EINVAL);
    s = state(n, 0);
    expect(run(K.BFS, [offsets.subarray(0, 4), bad, s.mask, s.updating, s.visited, s.cost, s.changed],
      params(['u32', n], ['u32', 3]))).toBe(-EINVAL);
    expect(run(K.BFS, [offsets, bad, s.mask, s.updating, s.visited, s.cost, s.changed],
      params(['u32', n], ['u32', 4]))).toBe(-EINVAL);
  });
});

describe('HOTSPOT', () => {
  // HotSpot's chip constants (docs/kernels.md).
  function constants(rows: number, cols: number): { cap: number; rx: number; ry: number; rz: number; step: number; amb: number } {
    const tChip = 0.0005, chipH = 0.016, chipW = 0.016, kSi = 100, specHeat = 1.75e6, factor = 0.5;
    const maxPd = 3.0e6, precision = 0.001;
    const gh = chipH / rows, gw = chipW / cols;
    return {
      cap: factor * specHeat * tChip * gw * gh,
      rx: gw / (2 * kSi * tChip * gh),
      ry: gh / (2 * kSi * tChip * gw),
      rz: tChip / (kSi * gh * gw),
      step: precision / (maxPd / (factor * tChip * specHeat)),
      amb: 80,
    };
  }

  function reference(t: Float32Array, p: Float32Array, rows: number, cols: number, k: ReturnType<typeof constants>): number[] {
    const [cap, rx, ry, rz, step, amb] = [k.cap, k.rx, k.ry, k.rz, k.step, k.amb].map(Math.fround);
    const out: number[] = [];
    const at = (r: number, c: number): number =>
      t[Math.min(Math.max(r, 0), rows - 1) * cols + Math.min(Math.max(c, 0), cols - 1)];
    for (let r = 0; r < rows; r++)
      for (let c = 0; c < cols; c++) {
        const tc = at(r, c);
        out.push(tc + (step / cap) * (p[r * cols + c] + (at(r - 1, c) + at(r + 1, c) - 2 * tc) / ry +
          (at(r, c + 1) + at(r, c - 1) - 2 * tc) / rx + (amb - tc) / rz));
      }
    return out;
  }

  it('matches the RC stencil for several ping-pong steps, including 1-wide grids', () => {
    for (const [rows, cols] of [[37, 53], [1, 9], [8, 1], [1, 1]]) {
      const k = constants(rows, cols);
      let tin: Float32Array = randF32(rows * cols, 90 + rows, 320, 340);
      const power = randF32(rows * cols, 91 + cols, 0, 0.01);
      let tout: Float32Array = new Float32Array(rows * cols);
      const p = params(['u32', rows], ['u32', cols], ['f32', k.cap], ['f32', k.rx], ['f32', k.ry],
        ['f32', k.rz], ['f32', k.step], ['f32', k.amb]);
      for (let step = 0; step < 3; step++) {
        expect(run(K.HOTSPOT, [tin, power, tout], p)).toBe(0);
        // Compare the change T' − T, which is ~1e-4 of T: comparing T' itself would hide a wrong
        // update term under T's own rounding. Tolerance: 1e-4 of the change plus 2 ulps of T.
        const ref = reference(tin, power, rows, cols, k);
        const got = Array.from(tout, (v, i) => v - tin[i]);
        const want = ref.map((v, i) => v - tin[i]);
        expectClose(got, want, 1e-4, 2 * 2 ** -23 * 512);
        [tin, tout] = [tout, tin];
      }
    }
  });

  it('rejects a short grid and an output aliasing the input', () => {
    const t = new Float32Array(100), o = new Float32Array(99);
    const p = params(['u32', 10], ['u32', 10], ['f32', 1], ['f32', 1], ['f32', 1], ['f32', 1], ['f32', 1], ['f32', 80]);
    expect(run(K.HOTSPOT, [t, t.slice(), o], p)).toBe(-EINVAL);
    expect(run(K.HOTSPOT, [t, t.slice(), t], p)).toBe(-EINVAL);
  });
});

describe('LUD', () => {
  function diagDominant(n: number, seed: number): Float32Array {
    const a = randF32(n * n, seed);
    for (let i = 0; i < n; i++) a[i * n + i] += n;
    return a;
  }

  function blockedLud(a: Float32Array, n: number, bs: number): void {
    const steps = Math.ceil(n / bs);
    for (let s = 0; s < steps; s++) {
      const p = params(['u32', n], ['u32', bs], ['u32', s]);
      expect(run(K.LUD_DIAGONAL, [a], p)).toBe(0);
      if (s === steps - 1) break;
      expect(run(K.LUD_PERIMETER, [a], p)).toBe(0);
      expect(run(K.LUD_INTERNAL, [a], p)).toBe(0);
    }
  }

  it('factorises A = L·U in place (blocks dividing n and not)', () => {
    for (const [n, bs] of [[64, 16], [100, 16], [70, 32], [33, 64], [5, 1]]) {
      const a0 = diagDominant(n, 100 + n + bs);
      const a = a0.slice();
      blockedLud(a, n, bs);
      // L·U from the packed result must give back A (tolerance relative to Σ|L||U|).
      const prod: number[] = [], mag: number[] = [];
      for (let i = 0; i < n; i++)
        for (let j = 0; j < n; j++) {
          let s = 0, m = 0;
          for (let k = 0; k <= Math.min(i, j); k++) {
            const l = k === i ? 1 : a[i * n + k];
            s += l * a[k * n + j];
            m += Math.abs(l * a[k * n + j]);
          }
          prod.push(s);
          mag.push(m);
        }
      expectClose(prod, a0, 1e-4, 1e-6, mag);
    }
  });

  it('matches an unblocked double-precision Doolittle LU', () => {
    const n = 48;
    const a0 = diagDominant(n, 7);
    const a = a0.slice();
    blockedLud(a, n, 16);
    const ref = Float64Array.from(a0);
    for (let k = 0; k < n; k++)
      for (let i = k + 1; i < n; i++) {
        ref[i * n + k] /= ref[k * n + k];
        for (let j = k + 1; j < n; j++) ref[i * n + j] -= ref[i * n + k] * ref[k * n + j];
      }
    expectClose(a, ref, 1e-4, 1e-5);
  });

  it('rejects bs = 0, a step past the last block, n = 0 and a short matrix', () => {
    const a = new Float32Array(64);
    expect(run(K.LUD_DIAGONAL, [a], params(['u32', 8], ['u32', 0], ['u32', 0]))).toBe(-EINVAL);
    expect(run(K.LUD_PERIMETER, [a], params(['u32', 8], ['u32', 4], ['u32', 2]))).toBe(-EINVAL);
    expect(run(K.LUD_INTERNAL, [a], params(['u32', 0], ['u32', 4], ['u32', 0]))).toBe(-EINVAL);
    expect(run(K.LUD_INTERNAL, [a], params(['u32', 9], ['u32', 4], ['u32', 0]))).toBe(-EINVAL);
    expect(run(K.LUD_DIAGONAL, [a], params(['u32', 0x10000], ['u32', 4], ['u32', 0]))).toBe(-EINVAL);
  });
});

describe('SRAD', () => {
  function srad1Ref(j: Float32Array, rows: number, cols: number, q0: number): number[][] {
    const out: number[][] = [[], [], [], [], []];
    const at = (r: number, c: number): number =>
      j[Math.min(Math.max(r, 0), rows - 1) * cols + Math.min(Math.max(c, 0), cols - 1)];
    for (let r = 0; r < rows; r++)
      for (let c = 0; c < cols; c++) {
        const jc = at(r, c);
        const dn = at(r - 1, c) - jc, ds = at(r + 1, c) - jc, dw = at(r, c - 1) - jc, de = at(r, c + 1) - jc;
        const g2 = (dn * dn + ds * ds + dw * dw + de * de) / (jc * jc);
        const l = (dn + ds + dw + de) / jc;
        const num = 0.5 * g2 - (l * l) / 16;
        const den = 1 + 0.25 * l;
        const qsqr = num / (den * den);
        const cv = 1 / (1 + (qsqr - q0) / (q0 * (1 + q0)));
        out[0].push(dn); out[1].push(ds); out[2].push(dw); out[3].push(de);
        out[4].push(Math.min(Math.max(cv, 0), 1));
      }
    return out;
  }

  it('SRAD1 derivatives and coefficient, then SRAD2 update, match the formulas', () => {
    for (const [rows, cols] of [[40, 31], [1, 17], [9, 1]]) {
      // SRAD works on exp(image): positive values with speckle.
      const img = Float32Array.from(randF32(rows * cols, 110 + rows), (v) => Math.exp(v * 0.5));
      let sum = 0, sum2 = 0;
      for (const v of img) { sum += v; sum2 += v * v; }
      const mean = sum / img.length;
      const q0 = Math.fround((sum2 / img.length - mean * mean) / (mean * mean));
      const bufs = [img, ...Array.from({ length: 5 }, () => new Float32Array(rows * cols))];
      expect(run(K.SRAD1, bufs, params(['u32', rows], ['u32', cols], ['f32', q0]))).toBe(0);
      const ref = srad1Ref(img, rows, cols, q0);
      for (let b = 0; b < 4; b++) expectClose(bufs[b + 1], ref[b], 1e-6, 1e-6);
      // c goes through several divisions near cancellation; compare absolutely on its [0, 1] range.
      expectClose(bufs[5], ref[4], 0, 2e-5);

      const lambda = 0.5;
      const [, dn, ds, dw, de, cc] = bufs as Float32Array[];
      const ref2: number[] = [];
      for (let r = 0; r < rows; r++)
        for (let c = 0; c < cols; c++) {
          const i = r * cols + c;
          const cs = cc[Math.min(r + 1, rows - 1) * cols + c], ce = cc[r * cols + Math.min(c + 1, cols - 1)];
          ref2.push(img[i] + 0.25 * lambda * (cc[i] * dn[i] + cs * ds[i] + cc[i] * dw[i] + ce * de[i]));
        }
      expect(run(K.SRAD2, bufs, params(['u32', rows], ['u32', cols], ['f32', lambda]))).toBe(0);
      expectClose(img, ref2, 1e-5);
    }
  });

  it('rejects short and overlapping buffers', () => {
    const n = 16;
    const bufs = Array.from({ length: 6 }, () => new Float32Array(n * n));
    const p = params(['u32', n], ['u32', n], ['f32', 0.1]);
    expect(run(K.SRAD1, bufs, p)).toBe(0);
    expect(run(K.SRAD1, [...bufs.slice(0, 5), new Float32Array(n * n - 1)], p)).toBe(-EINVAL);
    expect(run(K.SRAD2, [bufs[0], bufs[1], bufs[1], bufs[3], bufs[4], bufs[5]], p)).toBe(-EINVAL);
    expect(run(K.SRAD2, bufs, params(['u32', 0x7fffffff], ['u32', 2], ['f32', 0.1]))).toBe(-EINVAL);
  });
});

describe('cancel through the job pool', () => {
  const completions: JobCompletion[] = [];
  let started = false;
  afterAll(() => {
    if (started) native.poolStop();
  });

  function waitFor(pred: () => boolean, ms: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const t0 = Date.now();
      const tick = (): void => {
        if (pred()) return resolve();
        if (Date.now() - t0 > ms) return reject(new Error('timed out'));
        setTimeout(tick, 1);
      };
      tick();
    });
  }

  it('a LOOP of 10 s stops soon after cancelJob, with its progress record written', async () => {
    native.poolStart(1, (batch) => completions.push(...batch));
    started = true;
    const out = new Uint8Array(24);
    const job = native.submitKernel({
      kernel: K.LOOP, windows: [native.addressOf(out)], lengths: [24],
      params: params(['u64', 0n], ['u64', 10_000_000_000n], ['u32', 1]),
    });
    await new Promise((r) => setTimeout(r, 30));
    const tCancel = process.hrtime.bigint();
    native.cancelJob(job);
    await waitFor(() => completions.some((c) => c.job === job), 2000);
    const latencyMs = Number(process.hrtime.bigint() - tCancel) / 1e6;
    const done = completions.find((c) => c.job === job)!;
    expect(done.status).toBe(-ECANCELED);
    expect(done.deviceNs).toBeLessThan(1e9);
    const dv = new DataView(out.buffer);
    expect(dv.getBigUint64(0, true)).toBeGreaterThan(0n);
    // The kernel polls every ~0.1 ms; the rest is thread wake-up and completion delivery on a
    // shared 2-core machine, so the bound is loose.
    expect(latencyMs).toBeLessThan(100);
  });

  // A completion with status −ECANCELED and deviceNs > 0 was cancelled while running (the
  // pool reports deviceNs = 0 for a job cancelled in the queue), so the kernel itself polled.
  async function cancelWhileRunning(kernel: number, bufs: Buf[], p: Uint8Array): Promise<JobCompletion> {
    const job = native.submitKernel({
      kernel, windows: bufs.map((x) => native.addressOf(x)), lengths: bufs.map((x) => x.byteLength), params: p,
    });
    await new Promise((r) => setTimeout(r, 15));
    native.cancelJob(job);
    await waitFor(() => completions.some((x) => x.job === job), 5000);
    return completions.find((x) => x.job === job)!;
  }

  it('FMMUL 2048 and MMUL 1536 (~0.2 s and ~0.3 s) stop mid-run when cancelled', async () => {
    for (const [kernel, n] of [[K.FMMUL, 2048], [K.MMUL, 1536]]) {
      const a = new Float32Array(n * n).fill(0.5), b = new Float32Array(n * n).fill(0.25);
      const c = new Float32Array(n * n);
      const done = await cancelWhileRunning(kernel, [a, b, c], params(['u32', n]));
      expect(done.status).toBe(-ECANCELED);
      expect(done.deviceNs).toBeGreaterThan(0);
    }
  });

  it('a kernel cancelled while queued completes with -ECANCELED without running', async () => {
    // A long LOOP holds the single pool thread, so the FMMUL behind it is still queued.
    const out = new Uint8Array(24);
    const loop = native.submitKernel({
      kernel: K.LOOP, windows: [native.addressOf(out)], lengths: [24],
      params: params(['u64', 0n], ['u64', 10_000_000_000n], ['u32', 1]),
    });
    const n = 256;
    const a = new Float32Array(n * n), c = new Float32Array(n * n);
    const job = native.submitKernel({
      kernel: K.FMMUL, windows: [a, a, c].map((x) => native.addressOf(x)),
      lengths: [a, a, c].map((x) => x.byteLength), params: params(['u32', n]),
    });
    native.cancelJob(job);
    native.cancelJob(loop);
    await waitFor(() => completions.some((x) => x.job === job), 5000);
    const done = completions.find((x) => x.job === job)!;
    expect(done.status).toBe(-ECANCELED);
    expect(done.deviceNs).toBe(0);
    expect(completions.find((x) => x.job === loop)!.status).toBe(-ECANCELED);
  });
});
