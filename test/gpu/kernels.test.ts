// Every compute kernel through the engine: the host driver builds pushbuffers, the command
// processor resolves buffer VA ranges through the page tables (inputs in system memory behind
// the bus resolver, outputs in VRAM, some on large pages), the kernel runs on the native pool,
// and the result is compared with a reference computed here (layouts: docs/kernels.md).
// Tolerances: integer kernels exact; float sums (FMMUL, BACKPROP_FORWARD, LUD) within
// 1e-4·Σ|terms| + 1e-6; pointwise float formulas within relative 1e-5 (+1e-6), except SRAD's
// diffusion coefficient c (1e-4: it divides by q0sqr·(1+q0sqr), amplifying float rounding).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import { buf, params, rig, rng, type Rig } from './helpers.ts';

function expectClose(got: ArrayLike<number>, ref: ArrayLike<number>, rel: number, abs = 1e-6, scale?: ArrayLike<number>): void {
  let worst = -Infinity;
  let at = -1;
  for (let i = 0; i < ref.length; i++) {
    const tol = rel * Math.abs(scale ? scale[i]! : ref[i]!) + abs;
    const excess = Math.abs(got[i]! - ref[i]!) - tol;
    if (!(excess <= 0) && (excess > worst || Number.isNaN(excess))) {
      worst = excess;
      at = i;
    }
  }
  if (at >= 0) expect.fail(`element ${at}: got ${got[at]}, want ${ref[at]} (rel ${rel}, abs ${abs})`);
}

describe('kernels through the engine', () => {
  let r: Rig;
  const rand = rng(1234);
  const fill = (a: Float32Array, lo = -1, hi = 1) => a.forEach((_, i) => (a[i] = lo + (hi - lo) * rand()));

  beforeAll(() => {
    r = rig({ vramSize: 256 << 20 });
  });
  afterAll(() => r.close());

  it('NOP completes and advances GP_GET', async () => {
    const before = r.ch.gpGet;
    await r.ch.launch(K.NOP, []);
    expect(r.ch.gpGet).toBe((before + 1) % r.ch.entries);
  });

  it('LOOP runs exactly `iterations` LCG steps', async () => {
    const out = r.vram(64);
    const seed = 0xdecaf;
    await r.ch.launch(K.LOOP, [buf(out)], params(['u64', 100_000n], ['u64', 0n], ['u32', seed]));
    const dv = new DataView(out.u8.buffer, out.u8.byteOffset, 24);
    expect(dv.getBigUint64(0, true)).toBe(100_000n);
    let s = seed;
    for (let i = 0; i < 100_000; i++) s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    expect(dv.getUint32(16, true)).toBe(s);
  });

  it('MADD (u32, wrapping) and FMADD (f32), inputs in system memory', async () => {
    const n = 67;
    const a = r.sys(4 * n * n), b = r.sys(4 * n * n), c = r.vram(4 * n * n);
    a.u32.forEach((_, i) => (a.u32[i] = (rand() * 2 ** 32) >>> 0));
    b.u32.forEach((_, i) => (b.u32[i] = (rand() * 2 ** 32) >>> 0));
    await r.ch.launch(K.MADD, [buf(a), buf(b), buf(c)], params(['u32', n]));
    for (let i = 0; i < n * n; i++) if (c.u32[i] !== ((a.u32[i]! + b.u32[i]!) >>> 0)) expect.fail(`MADD element ${i}`);
    fill(a.f32);
    fill(b.f32);
    await r.ch.launch(K.FMADD, [buf(a), buf(b), buf(c)], params(['u32', n]));
    expectClose(c.f32, Array.from(a.f32, (v, i) => Math.fround(v + b.f32[i]!)), 0, 0);
  });

  it('MMUL (u32, wrapping, exact)', async () => {
    const n = 48;
    const a = r.sys(4 * n * n), b = r.vram(4 * n * n), c = r.vram(4 * n * n);
    a.u32.forEach((_, i) => (a.u32[i] = (rand() * 2 ** 32) >>> 0));
    b.u32.forEach((_, i) => (b.u32[i] = (rand() * 2 ** 32) >>> 0));
    await r.ch.launch(K.MMUL, [buf(a), buf(b), buf(c)], params(['u32', n]));
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < n; j++) {
        let s = 0;
        for (let k = 0; k < n; k++) s = (s + Math.imul(a.u32[i * n + k]!, b.u32[k * n + j]!)) >>> 0;
        if (c.u32[i * n + j] !== s) expect.fail(`MMUL (${i},${j}): got ${c.u32[i * n + j]}, want ${s}`);
      }
    }
  });

  it('FMMUL on large pages matches a double reference within 1e-4·Σ|a·b|', async () => {
    const n = 160;
    const a = r.vram(4 * n * n, { large: true }), b = r.sys(4 * n * n), c = r.vram(4 * n * n, { large: true });
    fill(a.f32);
    fill(b.f32);
    await r.ch.launch(K.FMMUL, [buf(a), buf(b), buf(c)], params(['u32', n]));
    const ref = new Float64Array(n * n), mag = new Float64Array(n * n);
    for (let i = 0; i < n; i++) {
      for (let k = 0; k < n; k++) {
        const x = a.f32[i * n + k]!;
        for (let j = 0; j < n; j++) {
          ref[i * n + j] += x * b.f32[k * n + j]!;
          mag[i * n + j] += Math.abs(x * b.f32[k * n + j]!);
        }
      }
    }
    expectClose(c.f32, ref, 1e-4, 1e-6, mag);
  });

  it('BACKPROP_FORWARD and BACKPROP_ADJUST', async () => {
    const nIn = 100, nOut = 17;
    const x = r.sys(4 * nIn), w = r.vram(4 * (nIn + 1) * nOut), y = r.vram(4 * nOut);
    fill(x.f32, 0, 1);
    fill(w.f32, -0.5, 0.5);
    await r.ch.launch(K.BACKPROP_FORWARD, [buf(x), buf(w), buf(y)], params(['u32', nIn], ['u32', nOut]));
    const ref: number[] = [], scale: number[] = [];
    for (let j = 0; j < nOut; j++) {
      let s = w.f32[j]!, m = Math.abs(w.f32[j]!);
      for (let i = 0; i < nIn; i++) {
        s += x.f32[i]! * w.f32[(i + 1) * nOut + j]!;
        m += Math.abs(x.f32[i]! * w.f32[(i + 1) * nOut + j]!);
      }
      ref.push(1 / (1 + Math.exp(-s)));
      scale.push(0.25 * m); // the logistic's slope is at most 1/4
    }
    expectClose(y.f32, ref, 1e-4, 1e-6, scale);

    const delta = r.sys(4 * nOut), oldw = r.vram(4 * (nIn + 1) * nOut);
    fill(delta.f32);
    fill(oldw.f32, -0.1, 0.1);
    const w0 = Float32Array.from(w.f32), o0 = Float32Array.from(oldw.f32);
    const eta = Math.fround(0.3), mom = Math.fround(0.3);
    await r.ch.launch(K.BACKPROP_ADJUST, [buf(delta), buf(x), buf(w), buf(oldw)],
      params(['u32', nIn], ['u32', nOut], ['f32', eta], ['f32', mom]));
    const refW: number[] = [], refO: number[] = [];
    for (let rr = 0; rr <= nIn; rr++) {
      for (let j = 0; j < nOut; j++) {
        const xr = rr === 0 ? 1 : x.f32[rr - 1]!;
        const d = eta * delta.f32[j]! * xr + mom * o0[rr * nOut + j]!;
        refW.push(w0[rr * nOut + j]! + d);
        refO.push(d);
      }
    }
    expectClose(w.f32, refW, 1e-5);
    expectClose(oldw.f32, refO, 1e-5);
  });

  it('BFS levels until no change give the breadth-first costs', async () => {
    const n = 600, deg = 3;
    const adj: number[][] = Array.from({ length: n }, () => []);
    for (let v = 0; v < n; v++) for (let d = 0; d < deg; d++) adj[v]!.push(Math.floor(rand() * n));
    const m = n * deg;
    const offsets = r.sys(4 * (n + 1)), edges = r.sys(4 * m);
    const mask = r.vram(n), updating = r.vram(n), visited = r.vram(n), cost = r.vram(4 * n), changed = r.vram(4);
    let e = 0;
    for (let v = 0; v < n; v++) {
      offsets.u32[v] = e;
      for (const u of adj[v]!) edges.u32[e++] = u;
    }
    offsets.u32[n] = e;
    const costI = new Int32Array(cost.u8.buffer, cost.u8.byteOffset, n);
    costI.fill(-1);
    mask.u8[0] = 1;
    visited.u8[0] = 1;
    costI[0] = 0;
    let levels = 0;
    do {
      await r.ch.launch(K.BFS, [offsets, edges, mask, updating, visited, cost, changed].map(buf), params(['u32', n], ['u32', m]));
      levels++;
    } while (changed.u32[0] === 1 && levels < n);
    const ref = new Array<number>(n).fill(-1);
    ref[0] = 0;
    const q = [0];
    while (q.length) {
      const v = q.shift()!;
      for (const u of adj[v]!) if (ref[u] === -1) { ref[u] = ref[v]! + 1; q.push(u); }
    }
    expect(Array.from(costI)).toEqual(ref);
    expect(levels).toBeGreaterThan(2);
  });

  it('HOTSPOT one step', async () => {
    const rows = 64, cols = 48;
    const tIn = r.sys(4 * rows * cols), p = r.sys(4 * rows * cols), tOut = r.vram(4 * rows * cols);
    fill(tIn.f32, 320, 340);
    fill(p.f32, 0, 0.001);
    const tChip = 0.0005, kSi = 100, spec = 1.75e6, fChip = 0.5, maxPd = 3e6, prec = 0.001;
    const gh = 0.016 / rows, gw = 0.016 / cols;
    const cap = Math.fround(fChip * spec * tChip * gw * gh);
    const rx = Math.fround(gw / (2 * kSi * tChip * gh));
    const ry = Math.fround(gh / (2 * kSi * tChip * gw));
    const rz = Math.fround(tChip / (kSi * gh * gw));
    const step = Math.fround(prec / (maxPd / (fChip * tChip * spec)));
    const amb = 80;
    await r.ch.launch(K.HOTSPOT, [buf(tIn), buf(p), buf(tOut)],
      params(['u32', rows], ['u32', cols], ['f32', cap], ['f32', rx], ['f32', ry], ['f32', rz], ['f32', step], ['f32', amb]));
    const T = (i: number, j: number) => tIn.f32[Math.min(Math.max(i, 0), rows - 1) * cols + Math.min(Math.max(j, 0), cols - 1)]!;
    const got: number[] = [], want: number[] = [];
    for (let i = 0; i < rows; i++) {
      for (let j = 0; j < cols; j++) {
        const t = T(i, j);
        const d = (step / cap) * (p.f32[i * cols + j]! + (T(i - 1, j) + T(i + 1, j) - 2 * t) / ry + (T(i, j + 1) + T(i, j - 1) - 2 * t) / rx + (amb - t) / rz);
        // Compare the change (small next to T) with 1e-4 relative plus 2 ulps of T.
        got.push(tOut.f32[i * cols + j]! - t);
        want.push(d);
      }
    }
    expectClose(got, want, 1e-4, 2 * 2 ** -23 * 512);
  });

  it('LUD (diagonal/perimeter/internal) gives L·U = A', async () => {
    const n = 96, bs = 32, S = Math.ceil(n / bs);
    const a = r.vram(4 * n * n);
    for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) a.f32[i * n + j] = i === j ? n + rand() : rand() - 0.5;
    const a0 = Float32Array.from(a.f32);
    const p = (s: number) => params(['u32', n], ['u32', bs], ['u32', s]);
    for (let s = 0; s < S - 1; s++) {
      await r.ch.launch(K.LUD_DIAGONAL, [buf(a)], p(s));
      await r.ch.launch(K.LUD_PERIMETER, [buf(a)], p(s));
      await r.ch.launch(K.LUD_INTERNAL, [buf(a)], p(s));
    }
    await r.ch.launch(K.LUD_DIAGONAL, [buf(a)], p(S - 1));
    const prod = new Float64Array(n * n), mag = new Float64Array(n * n);
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < n; j++) {
        for (let k = 0; k <= Math.min(i, j); k++) {
          const l = k === i ? 1 : a.f32[i * n + k]!;
          const u = a.f32[k * n + j]!;
          prod[i * n + j] += l * u;
          mag[i * n + j] += Math.abs(l * u);
        }
      }
    }
    expectClose(prod, a0, 1e-4, 1e-6, mag);
  });

  it('SRAD1 then SRAD2 (one iteration)', async () => {
    const rows = 40, cols = 36, N = rows * cols;
    const J = r.vram(4 * N), dN = r.vram(4 * N), dS = r.vram(4 * N), dW = r.vram(4 * N), dE = r.vram(4 * N), c = r.vram(4 * N);
    fill(J.f32, 1, 2);
    const J0 = Float64Array.from(J.f32);
    let sum = 0, sum2 = 0;
    for (const v of J0) { sum += v; sum2 += v * v; }
    const mean = sum / N, q0sqr = Math.fround((sum2 / N - mean * mean) / (mean * mean));
    const lambda = Math.fround(0.5);
    const bufs = [J, dN, dS, dW, dE, c].map(buf);
    await r.ch.launch(K.SRAD1, bufs, params(['u32', rows], ['u32', cols], ['f32', q0sqr]));
    const at = (a: ArrayLike<number>, i: number, j: number) => a[Math.min(Math.max(i, 0), rows - 1) * cols + Math.min(Math.max(j, 0), cols - 1)]!;
    const rN: number[] = [], rS: number[] = [], rW: number[] = [], rE: number[] = [], rC: number[] = [];
    for (let i = 0; i < rows; i++) {
      for (let j = 0; j < cols; j++) {
        const v = at(J0, i, j);
        const n_ = at(J0, i - 1, j) - v, s_ = at(J0, i + 1, j) - v, w_ = at(J0, i, j - 1) - v, e_ = at(J0, i, j + 1) - v;
        const g2 = (n_ * n_ + s_ * s_ + w_ * w_ + e_ * e_) / (v * v);
        const l = (n_ + s_ + w_ + e_) / v;
        const q2 = (0.5 * g2 - (l * l) / 16) / ((1 + 0.25 * l) ** 2);
        const cc = 1 / (1 + (q2 - q0sqr) / (q0sqr * (1 + q0sqr)));
        rN.push(n_); rS.push(s_); rW.push(w_); rE.push(e_); rC.push(Math.min(1, Math.max(0, cc)));
      }
    }
    expectClose(dN.f32, rN, 1e-6, 1e-6);
    expectClose(dS.f32, rS, 1e-6, 1e-6);
    expectClose(dW.f32, rW, 1e-6, 1e-6);
    expectClose(dE.f32, rE, 1e-6, 1e-6);
    expectClose(c.f32, rC, 1e-4, 1e-6);
    const c1 = Float64Array.from(c.f32), n1 = Float64Array.from(dN.f32), s1 = Float64Array.from(dS.f32), w1 = Float64Array.from(dW.f32), e1 = Float64Array.from(dE.f32);
    await r.ch.launch(K.SRAD2, bufs, params(['u32', rows], ['u32', cols], ['f32', lambda]));
    const ref2: number[] = [];
    for (let i = 0; i < rows; i++) {
      for (let j = 0; j < cols; j++) {
        const k = i * cols + j;
        const cS = at(c1, i + 1, j), cE = at(c1, i, j + 1);
        ref2.push(J0[k]! + 0.25 * lambda * (c1[k]! * n1[k]! + cS * s1[k]! + c1[k]! * w1[k]! + cE * e1[k]!));
      }
    }
    expectClose(J.f32, ref2, 1e-5);
  });

  it('MEMSET fills exactly `count` words (unaligned VA inside a page)', async () => {
    const b = r.vram(4 * 3000);
    b.u32.fill(7);
    const sub = { va: b.va + 4 * 5, length: 4 * 2000 };
    await r.ch.launch(K.MEMSET, [sub], params(['u32', 0xabcd1234], ['u32', 0], ['u64', 1990n]));
    expect(b.u32.slice(0, 5).every((v) => v === 7)).toBe(true);
    expect(b.u32.slice(5, 1995).every((v) => v === 0xabcd1234)).toBe(true);
    expect(b.u32.slice(1995).every((v) => v === 7)).toBe(true);
  });

  it('a kernel that rejects its params stops the channel with KERNEL_ERROR', async () => {
    const c2 = r.drv.createChannel(r.vm);
    const small = r.vram(16);
    // MEMSET of 100 words into a 16-byte buffer: the kernel must refuse (-EINVAL).
    await expect(c2.launch(K.MEMSET, [buf(small)], params(['u32', 1], ['u32', 0], ['u64', 100n]))).rejects.toThrow(/KERNEL_ERROR/);
    await expect(c2.launch(99, [])).rejects.toThrow(/KERNEL_ERROR/); // already stopped: same error
    c2.bind();
    await expect(c2.launch(99, [])).rejects.toThrow(/BAD_LAUNCH/); // unknown id after rebind
    c2.bind();
    await expect(c2.launch(K.MADD, [buf(small)], params(['u32', 1]))).rejects.toThrow(/BAD_LAUNCH/); // buffer count
    r.drv.destroyChannel(c2);
  });
});
