// The loop rewrite's cost (hw-spec §6.3.5; goal ≤ 3 % on SGEMM): the same module run raw and as
// the engine hands it to the driver (programPrepare: loop rewrite + index clamps), on one path —
// vulkanDirectRun, which binds the rewrite's control block (set 1) the way the engine does
// (a lane's control block), with the same buffers, copies and dispatch. Calls alternate raw /
// rewritten; each call's first repetition (lavapipe compiles the shader at its first dispatch)
// is dropped; the ratio is the median over rounds of (rewritten / raw) per round.
// Modules: the guest SGEMM sample (build/spirv/guest/programs/sgemm.spv) and the built-in FMMUL
// (native/shaders/builtins/fmmul.spv), which bench/programs.ts imports; run alone for a GPU host:
//   node bench/rewrite-cost.ts [--n 1024] [--rounds 9] [--reps 4]   (prints JSON)
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { native } from '../src/native.ts';
import type { ProgramLimits } from '../src/gpu/programs.ts';
import { median } from './lib/common.ts';

export interface RewriteCase {
  module: string;
  n: number;
  rounds: number;
  /** Median per-round ratio of the dispatch time (timestamps; wall where there are none). */
  ratio: number;
  ratioWall: number;
  rawMs: number;
  rewrittenMs: number;
  perRound: number[];
  /** On a device that cuts loops (loopLimit > 0): the cancel checks alone, without the loop-cut
   * detection (what a GPU gets), same rounds. */
  cancelOnlyRatio?: number;
  words: { raw: number; rewritten: number };
  clock: 'timestamps' | 'wall';
}

function spvWords(root: string, rel: string): Uint32Array {
  const p = path.join(root, 'build/spirv', rel);
  if (!fs.existsSync(p)) throw new Error(`${p} is missing: run scripts/build-spirv.sh`);
  const b = fs.readFileSync(p);
  return new Uint32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
}

const u32s = (...v: number[]): Uint8Array => new Uint8Array(new Uint32Array(v).buffer);

/** Needs an open Vulkan device (VulkanBackend.open). limits: the backend's (loopLimit decides
 * whether the loop-cut detection is added, as in the engine). */
export function rewriteCost(root: string, limits: ProgramLimits, opts: { n?: number; rounds?: number; reps?: number } = {}): RewriteCase[] {
  const n = opts.n ?? 256, rounds = opts.rounds ?? 7, reps = opts.reps ?? 3;
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
    const prepared = pp.words;
    const cancelOnly = limits.loopLimit > 0 ? native.programPrepare(raw, 0, new Uint32Array(0), { ...limits, loopLimit: 0 }).words : undefined;
    const cRaw = new Float32Array(n * n), cPrep = new Float32Array(n * n), cCancel = new Float32Array(n * n);
    const run = (words: Uint32Array, dst: Float32Array, control: boolean) => {
      const r = native.vulkanDirectRun({ words, buffers: [a, b, dst], writable: [false, false, true], push: c.push, grid: c.grid, reps: reps + 1, control, entry: control ? pp.entry!.name : 'main' });
      if (control && r.status !== 0) throw new Error(`${c.rel}: the rewritten module reported status ${r.status}`);
      const ts = r.kernelNs.length === r.wallNs.length && r.kernelNs.every((x) => x > 0);
      return { k: median((ts ? r.kernelNs : r.wallNs).slice(1)), w: median(r.wallNs.slice(1)), ts };
    };
    const per: number[] = [], perWall: number[] = [], rawT: number[] = [], prepT: number[] = [], perCancel: number[] = [];
    let ts = true;
    run(raw, cRaw, false); // warm-up (allocations, caches)
    for (let r = 0; r < rounds; r++) {
      // Alternate which goes first, so neither always runs right after the other's compile.
      const x = r % 2 === 0 ? run(raw, cRaw, false) : null;
      const y = run(prepared, cPrep, true);
      const z = x ?? run(raw, cRaw, false);
      if (cancelOnly) perCancel.push(run(cancelOnly, cCancel, true).k / z.k);
      ts = ts && z.ts && y.ts;
      per.push(y.k / z.k);
      perWall.push(y.w / z.w);
      rawT.push(z.k);
      prepT.push(y.k);
    }
    for (const i of [0, n + 3, n * n - 1]) {
      for (const [what, got] of cancelOnly ? [['rewritten', cPrep], ['cancel-only', cCancel]] as const : [['rewritten', cPrep]] as const)
        if (got[i] !== cRaw[i]) throw new Error(`${c.rel}: ${what} result differs at ${i}: ${got[i]} vs ${cRaw[i]}`);
    }
    out.push({
      module: c.module, n, rounds, ratio: median(per), ratioWall: median(perWall), rawMs: median(rawT) / 1e6, rewrittenMs: median(prepT) / 1e6,
      perRound: per.map((x) => Math.round(x * 10000) / 10000), words: { raw: raw.length, rewritten: prepared.length },
      clock: ts ? 'timestamps' : 'wall',
      ...(cancelOnly ? { cancelOnlyRatio: median(perCancel) } : {}),
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
    console.log(JSON.stringify({ device: backend.device, driver: backend.driver, loopLimit: backend.limits.loopLimit, cases: r }, null, 2));
  } finally {
    backend.close();
  }
}
