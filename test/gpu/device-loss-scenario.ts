// One round of a device loss under running guests' work, on the Vulkan backend, checked without
// a test framework so the same round runs in vitest (lavapipe: the loss simulated by the test
// hook) and on a GPU host (bench/device-lost.ts: a real GPU page fault loses the device).
//   - channel A finished a GEMM before the loss: its result must stay;
//   - channel B runs an endless LOOP when the device goes: it must fail with ENGINE_LOST, soon;
//   - channel C has a burst of GEMMs queued at that moment: each must either finish with the
//     right bits or fail clearly (a channel error), never return a wrong result;
//   - the loss is counted and logged once, the device rebuilt once, and all three channels run
//     again on the rebuilt device with the same bits as before it.
import { native } from '../../src/native.ts';
import { K } from '../../src/gpu/kernels.ts';
import { GpuError } from '../support/host-driver/driver.ts';
import { CHAN_ERR } from '../../src/gpu/spec.ts';
import { buf, params, rng, type GpuBuf, type Rig } from './helpers.ts';

export interface LossRound {
  /** What the loss call returned (the fault hook: the VkResult its own fence saw). */
  lose: string;
  /** Loss call returned → B's launch failed, ms. */
  bFailedMs: number;
  bCode: number | null;
  /** Loss call returned → A's next GEMM finished on the rebuilt device, ms. */
  recoveredMs: number;
  aKept: boolean;
  /** C's burst: finished with the right bits, failed with ENGINE_LOST, failed otherwise
   * (codes), finished with wrong bits. */
  c: { ok: number; engineLost: number; otherErrors: number[]; wrong: number };
  stats: { losses: number; rebuilds: number; generationUp: boolean };
  lastLoss: string;
  after: { a: boolean; b: boolean; c: boolean };
  pass: boolean;
  /** Why not, when pass is false. */
  problems: string[];
}

export interface LossRig {
  r: Rig;
  n: number;
  x: GpuBuf;
  y: GpuBuf;
  /** The GEMM's bits on this device (checked against the CPU by the caller once). */
  ref: Uint32Array;
  /** B and C, kept across rounds (a rig has few channels). */
  chB: Rig['ch'];
  chC: Rig['ch'];
}

const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));

/** Inputs in VRAM and the device's result for them (bits), computed once. */
export async function lossRig(r: Rig, n = 256, seed = 11): Promise<LossRig> {
  const bytes = 4 * n * n;
  const x = r.vram(bytes), y = r.vram(bytes), c = r.vram(bytes);
  const g = rng(seed);
  for (let i = 0; i < n * n; i++) x.f32[i] = g() * 2 - 1, y.f32[i] = g() * 2 - 1;
  await r.ch.launch(K.FMMUL, [x, y, c].map(buf), params(['u32', n]));
  return { r, n, x, y, ref: c.u32.slice(0, n * n), chB: r.drv.createChannel(r.vm), chC: r.drv.createChannel(r.vm) };
}

/** The device's reference GEMM against the CPU's (FMMUL tolerance, test/gpu/builtins-spirv.test.ts:
 * |got − want| ≤ 2e-4·Σ|a·b| + 2e-6): the first element out of it, or -1. */
export function refVsCpu(L: LossRig): number {
  const { n } = L;
  const A = L.x.f32.slice(0, n * n), B = L.y.f32.slice(0, n * n), C = new Float32Array(n * n);
  const st = native.runKernelSync({ kernel: K.FMMUL, windows: [A, B, C].map((x) => native.addressOf(x)), lengths: [A, B, C].map((x) => x.byteLength), params: params(['u32', n]) });
  if (st !== 0) return 0;
  const got = new Float32Array(L.ref.buffer);
  for (let i = 0; i < n; i++)
    for (let j = 0; j < n; j++) {
      let mag = 0;
      for (let k = 0; k < n; k++) mag += Math.abs(A[i * n + k]! * B[k * n + j]!);
      if (!(Math.abs(got[i * n + j]! - C[i * n + j]!) <= 2e-4 * mag + 2e-6)) return i * n + j;
    }
  return -1;
}

const equalBits = (a: Uint32Array, b: Uint32Array) => a.length === b.length && a.every((v, i) => v === b[i]);

/** One round; `lose` makes the device go (and returns what it saw). */
export async function lossRound(L: LossRig, lose: () => string, burst = 16): Promise<LossRound> {
  const { r, n, x, y, ref, chB, chC } = L;
  const bytes = 4 * n * n;
  const problems: string[] = [];
  const gemm = (ch: typeof r.ch, out: GpuBuf) => ch.launch(K.FMMUL, [x, y, out].map(buf), params(['u32', n]));
  const s0 = native.vulkanStats();

  // A: a finished result.
  const cA = r.vram(bytes);
  await gemm(r.ch, cA);
  const aBefore = cA.u32.slice(0, n * n);
  if (!equalBits(aBefore, ref)) problems.push('A before the loss: bits differ from the reference');

  // B: an endless LOOP (compiled by a short one first, so the loss meets it running).
  const rec = r.vram(4096);
  const loopShort = () => chB.launch(K.LOOP, [{ va: rec.va, length: 24 }], params(['u64', 1000n], ['u64', 0n], ['u32', 1]));
  await loopShort();
  const bOutcome = chB.launch(K.LOOP, [{ va: rec.va, length: 24 }], params(['u64', 0n], ['u64', 30_000_000_000n], ['u32', 1]))
    .then(() => null, (e: unknown) => e);
  await sleep(300);

  // C: a burst of GEMMs in flight and queued.
  const outs = Array.from({ length: burst }, () => r.vram(bytes));
  for (const o of outs) o.f32.fill(NaN);
  const cOutcomes = outs.map((o) => gemm(chC, o).then(() => null, (e: unknown) => e));

  const lost = lose();
  const tLost = performance.now();
  const eB = await Promise.race([bOutcome, sleep(10_000).then(() => 'timeout' as const)]);
  const bFailedMs = performance.now() - tLost;
  let bCode: number | null = null;
  if (eB === 'timeout') problems.push('B: still running 10 s after the loss');
  else if (!(eB instanceof GpuError)) problems.push(`B: ${eB === null ? 'finished' : String(eB)} instead of ENGINE_LOST`);
  else if ((bCode = eB.code) !== CHAN_ERR.ENGINE_LOST) problems.push(`B: failed with code ${eB.code}, not ENGINE_LOST`);

  const c = { ok: 0, engineLost: 0, otherErrors: [] as number[], wrong: 0 };
  const results = await Promise.all(cOutcomes);
  results.forEach((e, i) => {
    if (e === null) {
      if (equalBits(outs[i]!.u32.slice(0, n * n), ref)) c.ok++;
      else c.wrong++;
    } else if (e instanceof GpuError && e.code === CHAN_ERR.ENGINE_LOST) c.engineLost++;
    else c.otherErrors.push(e instanceof GpuError ? e.code : -1);
  });
  if (c.wrong) problems.push(`C: ${c.wrong} launches finished with wrong bits`);
  if (c.otherErrors.some((k) => k < 0)) problems.push('C: a launch failed with something other than a channel error');

  const aKept = equalBits(cA.u32.slice(0, n * n), aBefore);
  if (!aKept) problems.push('A: its finished result changed');

  // Recovery: A first (timed), then B and C rebound.
  const cA2 = r.vram(bytes);
  let recoveredMs = NaN;
  const after = { a: false, b: false, c: false };
  try {
    await gemm(r.ch, cA2);
    recoveredMs = performance.now() - tLost;
    after.a = equalBits(cA2.u32.slice(0, n * n), ref);
  } catch (e) {
    problems.push(`A after the loss: ${String(e)}`);
  }
  try {
    chB.bind();
    await loopShort();
    after.b = true;
  } catch (e) {
    problems.push(`B after the loss: ${String(e)}`);
  }
  try {
    if (c.engineLost || c.otherErrors.length) chC.bind();
    const o = r.vram(bytes);
    await gemm(chC, o);
    after.c = equalBits(o.u32.slice(0, n * n), ref);
  } catch (e) {
    problems.push(`C after the loss: ${String(e)}`);
  }
  if (!after.a || !after.b || !after.c) problems.push(`after the loss: ${JSON.stringify(after)}`);

  const s1 = native.vulkanStats();
  const stats = { losses: s1.losses - s0.losses, rebuilds: s1.rebuilds - s0.rebuilds, generationUp: s1.generation > s0.generation };
  if (stats.losses !== 1 || stats.rebuilds !== 1 || !stats.generationUp) problems.push(`counters: ${JSON.stringify(stats)}`);
  return {
    lose: lost, bFailedMs, bCode, recoveredMs, aKept, c, stats, lastLoss: s1.lastLoss, after,
    pass: problems.length === 0, problems,
  };
}
