// The guest's copy of the built-in kernels' program plans (guest/bench/plan.c, used by
// `vugpu-bench --programs`) against the engine's (src/gpu/program/builtins.ts): for the same
// kernel, parameter block and buffer lengths both must give the same answer — refused
// (-EINVAL / unknown kernel), or the same launches with the same grids, push constants and
// repetitions, LOOP's time limit and record, BFS's error word. The C side is compiled here with
// the host's gcc (guest/bench/plan_dump.c prints its plans).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILTIN_PROGRAMS, builtinPlan } from '../../src/gpu/program/builtins.ts';
import { rng } from '../prng.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const EINVAL = -22, ENOSYS = -38, E2BIG = -7;
const PLAN_MAX_DISPATCHES = 64;

interface Case { kernel: number; params: Uint8Array; lengths: number[] }
interface CPlan {
  ret: number;
  dispatches?: { grid: number[]; push: string; repeat: number | 'inf' }[];
  time?: string;
  elapsed?: [number, number];
  error?: [number, number, number];
}

let dir: string;
let tool: string;

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'vugpu-plan-'));
  tool = path.join(dir, 'plan-dump');
  execFileSync('gcc', ['-O1', '-Wall', '-Wextra', '-Werror', '-I', path.join(ROOT, 'guest/bench'), '-I', path.join(ROOT, 'guest/common'),
    '-o', tool, path.join(ROOT, 'guest/bench/plan_dump.c'), path.join(ROOT, 'guest/bench/plan.c')]);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function params(...fields: (number | bigint | ['f32', number])[]): Uint8Array {
  const out: number[] = [];
  for (const f of fields) {
    const b = new DataView(new ArrayBuffer(8));
    if (typeof f === 'bigint') {
      b.setBigUint64(0, f, true);
      for (let i = 0; i < 8; i++) out.push(b.getUint8(i));
    } else if (Array.isArray(f)) {
      b.setFloat32(0, f[1], true);
      for (let i = 0; i < 4; i++) out.push(b.getUint8(i));
    } else {
      b.setUint32(0, f >>> 0, true);
      for (let i = 0; i < 4; i++) out.push(b.getUint8(i));
    }
  }
  return Uint8Array.from(out);
}

const hex = (u: Uint8Array) => Buffer.from(u).toString('hex');

/** Hand-picked cases around every limit of every plan. */
function edgeCases(): Case[] {
  const cs: Case[] = [];
  const add = (kernel: number, p: Uint8Array, lengths: number[]) => cs.push({ kernel, params: p, lengths });
  add(0, params(), []);
  add(0, params(), [16]); // buffer count mismatch
  add(16, params(), []);  // no such kernel
  add(99, params(1), [4]);
  for (const it of [0n, 1n, 959_999n, 960_000n, 960_001n, 10_000_000n, 100_000_000n]) {
    for (const target of [0n, 5_000_000n]) {
      add(1, params(it, target, 7), [24]);
      add(1, params(it, target, 7), [16]);
    }
  }
  add(1, params(5n, 0n), [24]); // params shorter than 20 bytes
  for (const k of [2, 3, 4, 5]) {
    for (const n of [0, 1, 15, 64, 65, 256, 1024, 46_341, 2 ** 30 + 1]) {
      const need = 4 * n * n;
      add(k, params(n), [need, need, need].map((x) => Math.min(x, 2 ** 40)));
      add(k, params(n), [need, need, Math.max(0, need - 4)]);
    }
  }
  for (const [nIn, nOut] of [[0, 0], [0, 16], [16, 1], [16_384, 16], [960_000, 1], [960_001, 2], [2 ** 30, 1]]) {
    add(6, params(nIn, nOut), [4 * nIn, 4 * (nIn + 1) * nOut, 4 * nOut]);
    add(6, params(nIn, nOut), [4 * nIn, Math.max(0, 4 * (nIn + 1) * nOut - 4), 4 * nOut]);
    const w = 4 * (nIn + 1) * nOut;
    add(7, params(nIn, nOut, ['f32', 0.3], ['f32', 0.3]), [4 * nOut, 4 * nIn, w, w]);
    add(7, params(nIn, nOut, ['f32', 0.3], ['f32', 0.3]), [4 * nOut, 4 * nIn, w, Math.max(0, w - 4)]);
  }
  for (const [n, m] of [[0, 0], [1, 0], [16_384, 60_000], [1 << 20, 6_000_000], [100, 15_000_000], [100, 30_000_000]]) {
    add(8, params(n, m), [4 * (n + 1), 4 * m, n, n, n, 4 * n, 4]);
    add(8, params(n, m), [4 * (n + 1), 4 * m, n, n, n, 4 * n, 0]);
  }
  for (const [rows, cols] of [[0, 5], [256, 256], [1024, 1024], [70_000, 300]]) {
    const b = 4 * rows * cols;
    add(9, params(rows, cols, ['f32', 1], ['f32', 1], ['f32', 1], ['f32', 1], ['f32', 1], ['f32', 80]), [b, b, b]);
    add(13, params(rows, cols, ['f32', 0.5]), [b, b, b, b, b, b]);
    add(14, params(rows, cols, ['f32', 0.5]), [b, b, b, b, b, Math.max(0, b - 1)]);
  }
  for (const [n, bs] of [[1, 1], [16, 16], [256, 16], [1000, 64], [1024, 300], [1024, 1024], [3000, 3000], [6000, 6000]]) {
    const steps = Math.ceil(n / bs);
    for (const step of [0, 1, steps - 1, steps]) {
      for (const k of [10, 11, 12]) add(k, params(n, bs, step), [4 * n * n]);
    }
  }
  add(10, params(16, 0, 0), [1024]);
  for (const count of [0n, 1n, 1000n, 2n ** 31n]) {
    add(15, params(0xdeadbeef, 0, count), [4000]);
    add(15, params(0xdeadbeef, 0, count), [Number(count) * 4]);
  }
  return cs;
}

/** Seeded random parameter blocks and lengths (mulberry32). */
function randomCases(seed: number, count: number): Case[] {
  const r = rng(seed);
  // small dimensions most of the time, so that plans are accepted often
  const dim = () => (r() < 0.8 ? Math.floor(r() * 3000) : Math.floor(r() * 4294967296));
  const cs: Case[] = [];
  for (let i = 0; i < count; i++) {
    const kernel = Math.floor(r() * 16);
    const prog = BUILTIN_PROGRAMS[kernel];
    const words = Array.from({ length: 8 }, dim);
    if (kernel === 1) words[1] = words[3] = 0; // LOOP: u64 iterations and target of sane size
    if (kernel === 15) words[3] = 0;
    const p = params(...words).subarray(0, Math.max(0, prog.minParams + (r() < 0.1 ? -4 : 0)));
    const n = words[0], m = words[1];
    const big = Math.min(4 * n * Math.max(1, m), 2 ** 40);
    const lengths = Array.from({ length: prog.buffers }, () => (r() < 0.5 ? big : Math.floor(r() * big)));
    cs.push({ kernel, params: p, lengths });
  }
  return cs;
}

function cPlans(cases: Case[]): CPlan[] {
  const input = cases.map((c) => `${c.kernel} ${c.params.length ? hex(c.params) : '-'} ${c.lengths.join(' ')}`.trimEnd()).join('\n') + '\n';
  const out = execFileSync(tool, { input, maxBuffer: 1 << 28 }).toString().trim().split('\n');
  return out.map((l) => JSON.parse(l) as CPlan);
}

function compare(cases: Case[]): void {
  const got = cPlans(cases);
  expect(got.length).toBe(cases.length);
  cases.forEach((c, i) => {
    const what = `kernel ${c.kernel}, params ${hex(c.params)}, lengths ${c.lengths.join(',')}`;
    const want = builtinPlan(c.kernel, c.params, c.lengths);
    const g = got[i];
    if (want === undefined) return expect(g.ret, what).toBe(ENOSYS);
    if (want === null) return expect(g.ret, what).toBe(EINVAL);
    if (want.dispatches.length > PLAN_MAX_DISPATCHES) return expect(g.ret, what).toBe(E2BIG);
    expect(g.ret, what).toBe(0);
    expect(g.dispatches, what).toEqual(want.dispatches.map((d) => ({
      grid: d.grid, push: hex(d.push), repeat: d.repeat === undefined ? 1 : d.repeat === Infinity ? 'inf' : d.repeat,
    })));
    expect(g.time, what).toBe(String(want.timeLimitNs ?? 0n));
    expect(g.elapsed, what).toEqual(want.elapsedAt ? [want.elapsedAt.binding, want.elapsedAt.offset] : [-1, 0]);
    expect(g.error, what).toEqual(want.errorWord ? [want.errorWord.binding, want.errorWord.offset, want.errorWord.mask] : [-1, 0, 0]);
  });
}

describe('guest/bench/plan.c mirrors src/gpu/program/builtins.ts', () => {
  it('agrees on the hand-picked cases around every plan limit', () => {
    const cases = edgeCases();
    compare(cases);
    // the cases reach both answers
    const answers = cPlans(cases).map((p) => p.ret);
    expect(answers.filter((x) => x === 0).length).toBeGreaterThan(50);
    expect(answers.filter((x) => x === EINVAL).length).toBeGreaterThan(30);
  });

  it('agrees on 3000 seeded random parameter blocks', () => {
    compare(randomCases(0x5eed, 3000));
  });
});
