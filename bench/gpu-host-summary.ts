// Turns the logs of bench/gpu-host-suite.sh (fetched from the GPU host's $OUT) into
// bench/results/gpu-host-suite/<device>.json (stamped): per run, which benchmarks and sample programs passed, with
// total and Exec times and digests; for the two-client run, whether both clients' digests equal
// the solo fv run's.
//   node bench/gpu-host-summary.ts --logs DIR [--out FILE] [--bundle TEXT] [--device TEXT]
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { benchFile, resultDevice, stamp } from './lib/common.ts';

interface Result { ok: boolean; total_us: number | null; exec_us: number | null; digest: string | null; detail: string; stages_us?: Record<string, number> }
interface Run { passed: number; failed: string[]; results: Record<string, Result> }

const RUNS: [string, string][] = [
  ['pt-native.log', 'pt, --engine native (CPU)'],
  ['pt-vulkan.log', 'pt, --engine vulkan (staging to device memory)'],
  ['fv-vulkan.log', 'fv, --engine vulkan'],
  ['fv-programs.log', 'fv, --engine vulkan, kernels as SPIR-V programs'],
  ['pt-import.log', 'pt, --engine vulkan, VUGPU_VK_MEMORY=import (zero-copy; subset)'],
];

function records(text: string): Record<string, Result> {
  const out: Record<string, Result> = {};
  for (const line of text.split('\n')) {
    const m = /^VUGPU-(BENCH|CHECK) (\{.*\})\s*$/.exec(line);
    if (!m) continue;
    let r: Record<string, unknown>;
    try {
      r = JSON.parse(m[2]!) as Record<string, unknown>;
    } catch {
      continue;
    }
    const name = m[1] === 'BENCH' ? String(r.bench) : String(r.check);
    const stages = r.stages_us as Record<string, number> | undefined;
    out[name] = {
      ok: r.ok === true && (m[1] === 'CHECK' || r.verified === true),
      total_us: typeof r.total_us === 'number' ? r.total_us : null,
      exec_us: stages?.Exec ?? null,
      digest: typeof r.digest === 'string' ? r.digest : null,
      detail: String(r.detail ?? r.error_detail ?? ''),
      ...(stages ? { stages_us: stages } : {}),
    };
  }
  return out;
}

function summarize(results: Record<string, Result>): Run {
  const failed = Object.entries(results).filter(([, r]) => !r.ok).map(([k]) => k);
  return { passed: Object.keys(results).length - failed.length, failed, results };
}

const { values } = parseArgs({
  options: {
    logs: { type: 'string' },
    out: { type: 'string' },
    bundle: { type: 'string', default: 'build/vugpu-bundle.tar.xz' },
    device: { type: 'string' },
  },
});
if (!values.logs || !fs.existsSync(values.logs)) {
  process.stderr.write('gpu-host-summary: --logs DIR must name the directory with the suite\'s logs.\n');
  process.exit(2);
}
const dir = values.logs;
const read = (f: string): string | null => (fs.existsSync(path.join(dir, f)) ? fs.readFileSync(path.join(dir, f), 'utf8') : null);
const gpu = (read('gpu.txt') ?? '').trim().split('\n')[0] ?? '';
const runs: Record<string, unknown> = {};
for (const [file, label] of RUNS) {
  const text = read(file);
  if (text !== null) runs[label] = summarize(records(text));
}
const two = read('two-clients.log');
if (two !== null) {
  const [a = '', b = ''] = two.split(/^== client b$/m);
  const ra = records(a.replace(/^== client a$/m, '')), rb = records(b.split(/^== serve errors$/m)[0]!);
  const solo = (runs['fv, --engine vulkan'] as Run | undefined)?.results ?? {};
  const equal: Record<string, boolean> = {};
  for (const k of Object.keys(ra)) equal[k] = ra[k]!.digest === rb[k]?.digest && ra[k]!.digest === (solo[k]?.digest ?? ra[k]!.digest);
  const serveErrors = (two.split(/^== serve errors$/m)[1] ?? '').trim();
  runs['fv, two clients at once (vulkan)'] = {
    a: summarize(ra), b: summarize(rb), digest_equal_a_b_solo: equal, serve_errors: serveErrors ? serveErrors.split('\n') : [],
  };
}
// G-KVM Table IV's stages, CPU engine vs the GPU, from the same run (pt, the twin): ms per stage.
const STAGES = ['Init', 'MemAlloc', 'DataInit', 'HtoD', 'KernConf', 'Exec', 'DtoH', 'DataRead', 'Close'];
const cpu = (runs['pt, --engine native (CPU)'] as Run | undefined)?.results;
const gpuRun = (runs['pt, --engine vulkan (staging to device memory)'] as Run | undefined)?.results;
let stageTable = '';
if (cpu && gpuRun) {
  const rows = ['| benchmark | engine | ' + STAGES.join(' | ') + ' | total |', '|---|---|' + STAGES.map(() => '---:').join('|') + '|---:|'];
  const ms = (v: number | undefined): string => (v === undefined ? '–' : v >= 100_000 ? (v / 1000).toFixed(0) : (v / 1000).toFixed(v >= 10_000 ? 1 : 2));
  for (const b of Object.keys(cpu)) {
    for (const [label, res] of [['CPU', cpu[b]], ['GPU', gpuRun[b]]] as const) {
      if (!res?.stages_us) continue;
      rows.push(`| ${b} | ${label} | ${STAGES.map((k) => ms(res.stages_us![k])).join(' | ')} | ${ms(res.total_us ?? undefined)} |`);
    }
  }
  stageTable = rows.join('\n');
}
const doc = {
  device: values.device ?? `${gpu || 'unknown GPU'} (gpu.txt: name, driver)`,
  date: new Date().toISOString().slice(0, 10),
  bundle: values.bundle,
  how: 'bench/gpu-host-suite.sh: vugpu serve from the offline bundle driven by the native twin (guest driver core over vfio-user, no VM); sizes --large; this file by bench/gpu-host-summary.ts',
  runs,
  stageTableMs: stageTable,
};
const out = values.out ?? benchFile('gpu-host-suite', resultDevice(gpu));
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out, JSON.stringify({ stamp: stamp(resultDevice(gpu)), ...doc }, null, 1) + '\n');
if (stageTable) console.log(`\nper-stage ms, pt, CPU engine vs GPU (same run):\n${stageTable}\n`);
for (const [k, v] of Object.entries(runs)) {
  const r = v as Run & { a?: Run; b?: Run };
  console.log(k, r.a ? `a ${r.a.passed} ok, failed [${r.a.failed}]; b ${r.b!.passed} ok, failed [${r.b!.failed}]` : `${r.passed} ok, failed [${r.failed}]`);
}
