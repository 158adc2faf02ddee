// The loop rewrite's cost (hw-spec §6.3.5; goal ≤ 3 % on SGEMM): the same module run raw and as
// the engine hands it to the driver (programPrepare: loop rewrite + index clamps), on one path —
// vulkanDirectRun with the rewrite's control block bound (set 1, a lane's, as in the engine; the
// raw module ignores it), the same buffers, copies and dispatch. Each round is one call that
// runs the modules in turn, repetition by repetition (the order rotates), so the two runs
// compared are milliseconds apart on a noisy host; a call's first repetition (lavapipe compiles
// at the first dispatch) is dropped and the fastest of the others kept (a shared host only ever
// adds time). ratio = the median over rounds of rewritten / raw. Results are checked against
// the raw module's (maxRelDiff: 0 on lavapipe; a GPU compiler may contract a loop it no longer
// unrolls differently).
// Modules: the guest SGEMM sample (build/spirv/guest/programs/sgemm.spv) and the built-in FMMUL
// (native/shaders/builtins/fmmul.spv). bench/programs.ts imports this; run alone (a GPU host):
//   node bench/rewrite-cost.ts [--n 1024] [--rounds 9] [--reps 4] [--device NAME]   (prints JSON)
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { native } from '../src/native.ts';
import type { ProgramLimits } from '../src/gpu/programs.ts';
import { median, quantile } from './lib/common.ts';

export interface RewriteCase {
  module: string;
  n: number;
  rounds: number;
  /** Median per-round ratio of the dispatch time (timestamps; wall where there are none). */
  ratio: number;
  /** Quartiles of the per-round ratios: how far one round can be trusted on this host. */
  ratioQuartiles: [number, number];
  /** Fastest rewritten run / fastest raw run over all rounds (on a loaded CPU host the most
   * stable estimate: interference only ever adds time). */
  ratioBest: number;
  /** The same from the wall time of the whole submission (copies included). */
  ratioWall: number;
  rawMs: number;
  rewrittenMs: number;
  perRound: number[];
  /** On a device that cuts loops (loopLimit > 0): the rewrite without the loop-cut probe (what a
   * GPU gets), same rounds — ratio / this is the probe's own cost. */
  cancelOnlyRatio?: number;
  /** On a device that cuts loops: the cancel word loaded at every back-edge, without the probe,
   * same rounds — this / cancelOnlyRatio is what loading it every 64th back-edge saves. */
  everyLoadNoDetectRatio?: number;
  /** The engine's rewrite with the cancel word loaded in the loop header (program.h
   * cancelLoadEarly, a benchmark switch): is hiding the load's latency worth making the default? */
  earlyLoadRatio: number;
  /** The loop rewrite without the index clamps, and the clamps alone (program.h benchParts). */
  noClampRatio: number;
  clampOnlyRatio: number;
  /** The cancel word loaded at every back-edge (Limits.cancelEvery 1). */
  everyBackEdgeRatio: number;
  words: { raw: number; rewritten: number };
  /** Largest |rewritten − raw| / (1 + |raw|) over C (every variant). */
  maxRelDiff: number;
  clock: 'timestamps' | 'wall';
}

function spvWords(root: string, rel: string): Uint32Array {
  const p = path.join(root, 'build/spirv', rel);
  if (!fs.existsSync(p)) throw new Error(`${p} is missing: run scripts/build-spirv.sh`);
  const b = fs.readFileSync(p);
  return new Uint32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
}

const u32s = (...v: number[]): Uint8Array => new Uint8Array(new Uint32Array(v).buffer);
const min = (v: number[]): number => Math.min(...v);

/** Needs an open Vulkan device (VulkanBackend.open). limits: the backend's (loopLimit decides
 * whether the loop-cut detection is added, as in the engine). */
export function rewriteCost(root: string, limits: ProgramLimits, opts: { n?: number; rounds?: number; reps?: number } = {}): RewriteCase[] {
  const n = opts.n ?? 256, rounds = opts.rounds ?? 9, reps = opts.reps ?? 3;
  const a = new Float32Array(n * n), b = new Float32Array(n * n);
  for (let i = 0; i < n * n; i++) { a[i] = ((i * 7) % 13) / 13 - 0.5; b[i] = ((i * 5) % 11) / 11 - 0.5; }
  const cases = [
    { module: 'sgemm (guest sample)', rel: 'guest/programs/sgemm.spv', push: u32s(n, n, n), grid: [Math.ceil(n / 16), Math.ceil(n / 16), 1] as [number, number, number] },
    { module: 'fmmul (built-in)', rel: 'native/shaders/builtins/fmmul.spv', push: u32s(n, 0, n, 0), grid: [Math.ceil(n / 64), Math.ceil(n / 64), 1] as [number, number, number] },
  ];
  const out: RewriteCase[] = [];
  for (const c of cases) {
    const raw = spvWords(root, c.rel);
    const pp = native.programPrepare(raw, 0, new Uint32Array(0), limits);
    if (pp.reason !== 0 || !pp.words || !pp.entry) throw new Error(`${c.rel}: refused (${pp.reason}): ${pp.message}`);
    const entry = pp.entry.name;
    const variant = (l: Partial<ProgramLimits> & { cancelLoadEarly?: number; benchParts?: number; cancelEvery?: number }): { words: Uint32Array; entry: string } => {
      const v = native.programPrepare(raw, 0, new Uint32Array(0), { ...limits, ...l });
      if (v.reason !== 0 || !v.words) throw new Error(`${c.rel}: refused (${JSON.stringify(l)}): ${v.message}`);
      return { words: v.words, entry: l.benchParts && l.benchParts & 2 ? 'main' : entry };
    };
    // [1] the engine's, [2] with the early load, [3] without the index clamps, [4] the clamps
    // alone (no loop rewrite), [5] the cancel word loaded at every back-edge (the engine's loads
    // it every 64th), [6] without the loop-cut probe (devices that cut loops), [7] the same
    // loading the word at every back-edge (devices that cut loops)
    const variants = [{ words: pp.words, entry }, variant({ cancelLoadEarly: 1 }), variant({ benchParts: 1 }), variant({ benchParts: 2 }), variant({ cancelEvery: 1 })];
    if (limits.loopLimit > 0) variants.push(variant({ loopLimit: 0 }), variant({ loopLimit: 0, cancelEvery: 1 }));
    const job = { buffers: [a, b, new Float32Array(n * n)], writable: [false, false, true], push: c.push, grid: c.grid };
    // Results: each module alone, compared with the raw one's.
    const result = (words: Uint32Array, control: boolean, name = entry): Float32Array => {
      const dst = new Float32Array(n * n);
      const r = native.vulkanDirectRun({ ...job, buffers: [a, b, dst], words, control, entry: control ? name : 'main', reps: 1 });
      if (r.status !== 0) throw new Error(`${c.rel}: the rewritten module reported status ${r.status}`);
      return dst;
    };
    const ref = result(raw, false);
    let maxRelDiff = 0;
    for (const [k, v] of variants.entries()) {
      const got = result(v.words, true, v.entry);
      for (let i = 0; i < n * n; i++) {
        const d = Math.abs(got[i]! - ref[i]!) / (1 + Math.abs(ref[i]!));
        if (!(d <= 1e-3)) throw new Error(`${c.rel}: variant ${k} differs from the raw module at ${i}: ${got[i]} vs ${ref[i]}`);
        maxRelDiff = Math.max(maxRelDiff, d);
      }
    }
    const per: number[] = [], perWall: number[] = [], perEarly: number[] = [], perCancel: number[] = [], perEveryNoDetect: number[] = [], rawT: number[] = [], prepT: number[] = [];
    const perNoClamp: number[] = [], perClampOnly: number[] = [], perEvery: number[] = [];
    let ts = true;
    for (let r = 0; r < rounds; r++) {
      const res = native.vulkanDirectRun({ ...job, words: raw, control: true, entry: 'main', variants, reps: reps + 1 });
      if (res.status !== 0) throw new Error(`${c.rel}: a rewritten module reported status ${res.status}`);
      const runs = [{ wallNs: res.wallNs, kernelNs: res.kernelNs }, ...res.variants];
      const hasTs = runs.every((x) => x.kernelNs.length === x.wallNs.length && x.kernelNs.every((k) => k > 0));
      ts = ts && hasTs;
      const k = runs.map((x) => min((hasTs ? x.kernelNs : x.wallNs).slice(1)));
      const w = runs.map((x) => min(x.wallNs.slice(1)));
      per.push(k[1]! / k[0]!);
      perWall.push(w[1]! / w[0]!);
      perEarly.push(k[2]! / k[0]!);
      perNoClamp.push(k[3]! / k[0]!);
      perClampOnly.push(k[4]! / k[0]!);
      perEvery.push(k[5]! / k[0]!);
      if (k.length > 6) perCancel.push(k[6]! / k[0]!);
      if (k.length > 7) perEveryNoDetect.push(k[7]! / k[0]!);
      rawT.push(k[0]!);
      prepT.push(k[1]!);
    }
    out.push({
      module: c.module, n, rounds, ratio: median(per), ratioQuartiles: [quantile(per, 0.25), quantile(per, 0.75)], ratioBest: min(prepT) / min(rawT), ratioWall: median(perWall), rawMs: median(rawT) / 1e6, rewrittenMs: median(prepT) / 1e6,
      perRound: per.map((x) => Math.round(x * 10000) / 10000),
      earlyLoadRatio: median(perEarly),
      noClampRatio: median(perNoClamp), clampOnlyRatio: median(perClampOnly), everyBackEdgeRatio: median(perEvery),
      ...(perCancel.length ? { cancelOnlyRatio: median(perCancel) } : {}),
      ...(perEveryNoDetect.length ? { everyLoadNoDetectRatio: median(perEveryNoDetect) } : {}),
      words: { raw: raw.length, rewritten: pp.words.length }, maxRelDiff, clock: ts ? 'timestamps' : 'wall',
    });
  }
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { n: { type: 'string' }, rounds: { type: 'string' }, reps: { type: 'string' }, device: { type: 'string' } } });
  const { VulkanBackend } = await import('../src/gpu/vulkan.ts');
  const { repoRoot } = await import('./lib/common.ts');
  const backend = VulkanBackend.open(values.device ?? process.env.VUGPU_VULKAN_DEVICE);
  try {
    const r = rewriteCost(repoRoot, backend.limits, {
      n: values.n ? Number(values.n) : undefined, rounds: values.rounds ? Number(values.rounds) : undefined, reps: values.reps ? Number(values.reps) : undefined,
    });
    console.log(JSON.stringify({ device: backend.device, driver: backend.driver, loopLimit: backend.limits.loopLimit, date: new Date().toISOString(), cases: r }, null, 2));
  } finally {
    backend.close();
  }
}
