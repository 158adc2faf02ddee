// Long run of the SPIR-V front-end fuzzer (test/gpu/spirv-fuzz.ts) over the test seeds: every
// input must come back from native programPrepare, and every accepted module's rewrite must
// validate and keep its stop checks. Writes bench/results/fuzz-programs/cpu.json.
//   node bench/fuzz-programs.ts [--count 1000000] [--seed N]
// A crash ends the process: the last progress line names the iteration; the same seed and
// iteration replay the same input (each iteration's input depends only on both).
import os from 'node:os';
import { parseArgs } from 'node:util';
import { fuzz } from '../test/gpu/spirv-fuzz.ts';
import { buildSeeds } from '../test/gpu/spirv-helpers.ts';
import { writeBenchResult } from './lib/common.ts';

const { values } = parseArgs({ options: { count: { type: 'string', default: '1000000' }, seed: { type: 'string', default: '1' } } });
const count = Number(values.count), seed = Number(values.seed) >>> 0;
const seeds = buildSeeds();
console.error(`fuzz-programs: ${count} inputs from ${seeds.length} seed modules, seed ${seed}`);
const t0 = Date.now();
const cpu0 = process.cpuUsage();
const stats = fuzz(seeds.map((s) => s.words), {
  iterations: count,
  seed,
  progressEvery: 50_000,
  onProgress: (i, s) =>
    console.error(`  ${i} inputs, ${s.accepted} accepted, ${s.findings.length} findings, ${((Date.now() - t0) / 1000).toFixed(0)} s`),
});
const cpu = process.cpuUsage(cpu0);
const result = {
  date: new Date().toISOString(),
  environment: {
    node: process.version, host: `${os.type()} ${os.release()}`, cpu: os.cpus()[0]?.model ?? 'unknown',
    cpus: os.cpus().length, loadAvgAtStart: os.loadavg().map((x) => Math.round(x * 100) / 100),
  },
  method: 'each input: 1-4 mutations (bit flip, word set, operand tweak, literal tweak (constants, sizes, decorations), swapped branch targets, instruction drop/dup/swap, word count, truncation, crossover with another seed, random module) of one seed module, varied limits (loop-cut detection on for half, random features, shared/push/binding/workgroup limits), entry index and spec constants; checks: programPrepare returns a known reason; accepted rewrites pass programValidate (SPIRV-Tools, Vulkan 1.2) and verifyRewrite (every CFG cycle cut by a cancel check, entry returns report, with detection the probe of the loop limiter), entry info within limits; determinism on every 97th input',
  seeds: seeds.map((s) => s.name),
  seed,
  iterations: stats.iterations,
  accepted: stats.accepted,
  refusedByReason: stats.byReason,
  pastValidatorOrAllowLists: stats.validatorPassedInputs,
  byMutation: stats.byMutation,
  findings: stats.findings,
  wallS: Math.round((Date.now() - t0) / 100) / 10,
  cpuS: Math.round((cpu.user + cpu.system) / 1e5) / 10,
  usPerInput: Math.round((stats.ms * 1000) / Math.max(1, stats.iterations)),
};
const file = writeBenchResult('fuzz-programs', 'cpu', result);
console.log(`${stats.iterations} inputs, ${stats.accepted} accepted, ${stats.findings.length} findings; ${result.wallS} s wall, ${result.cpuS} s CPU → ${file}`);
process.exit(stats.findings.length ? 1 : 0);
