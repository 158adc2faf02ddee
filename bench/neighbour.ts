// A tenant's endless program beside a neighbour, without QEMU (issue 34; npm run bench:neighbour):
// one `vugpu serve` (fv, two VMs) per engine and two native twins (the runtime's host backend,
// the guest's driver core over vfio-user). VM b launches the built-in NOP program back to back,
// timing each launch → vgSynchronize (`vugpu-programs --neighbour 0 --nop`); after --attack-after
// seconds VM a loads the endless program (guest/programs/endless.comp: `for (;;)` with
// `continue` and an atomicAdd) and launches it over 256 workgroups (`vugpu-programs --endless 1`);
// b goes on until a's launch has been stopped and --tail seconds more. Reports VM b's longest
// launch, p99.9, p50, failures and windows with a stall, and VM a's outcome (WATCHDOG expected;
// CTXSW_TIMEOUT where the engine switches contexts itself, a GPU; PROGRAM_LOOP_LIMIT on a device
// with a loop cap). Writes bench/results/neighbour/<device>.json.
//   node bench/neighbour.ts [--engine vulkan,auto] [--device NAME] [--watchdog-ms N]
//                           [--attack-after S] [--tail S] [--endless N]
//                           [--timeslice-ms N] [--timeslice-always] [--json FILE]
// (--endless N: VM a launches the endless program N times in a row, each on a fresh context;
// --timeslice-ms/--timeslice-always go to serve (src/gpu/ctxsw.ts); --json FILE writes the result
// there instead of bench/results, for test/integration/ctxsw.test.ts.)
// Runs from a checkout (builds the twin with make) and from the offline bundle (its twin/);
// bench/gpu-host-neighbour.sh is the GPU host's call. Exit 1 if a scenario could not run.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { startServer } from '../src/vm/server-process.ts';
import { vulkanDevices } from '../src/gpu/vulkan.ts';
import { repoRoot, textTable, writeBenchResult } from './lib/common.ts';
import { twin, twinBinary, twinModules, type Twin } from './lib/twin.ts';

const BENCH = 'neighbour';
/** The goal for a neighbour's longest launch; windows over it are counted. */
const GOAL_MS = 50;

function usage(msg: string): never {
  console.error(`bench:neighbour: ${msg}`);
  process.exit(2);
}

let opts: {
  engine: string; device?: string; 'watchdog-ms'?: string; 'attack-after': string; tail: string; endless: string;
  'timeslice-ms'?: string; 'timeslice-always'?: boolean; json?: string;
};
try {
  opts = parseArgs({
    options: {
      engine: { type: 'string', default: 'auto' }, device: { type: 'string' }, 'watchdog-ms': { type: 'string' },
      'attack-after': { type: 'string', default: '2' }, tail: { type: 'string', default: '2' }, endless: { type: 'string', default: '1' },
      'timeslice-ms': { type: 'string' }, 'timeslice-always': { type: 'boolean' }, json: { type: 'string' },
    },
  }).values as typeof opts;
} catch (e) {
  usage((e as Error).message);
}
const engines = opts.engine.split(',').filter(Boolean);
for (const e of engines) if (!['auto', 'native', 'vulkan'].includes(e)) usage(`--engine takes auto, native or vulkan (a comma list), not ${e}`);
const num = (v: string | undefined, name: string): number | undefined => {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) usage(`${name} takes a number of ${name === '--watchdog-ms' ? 'ms' : 's'}, not ${v}`);
  return n;
};
const watchdogMs = num(opts['watchdog-ms'], '--watchdog-ms');
const attackAfterS = num(opts['attack-after'], '--attack-after')!;
const tailS = num(opts.tail, '--tail')!;
const endlessN = Math.max(1, Math.floor(num(opts.endless, '--endless')!));
const timesliceMs = num(opts['timeslice-ms'], '--timeslice-ms');
const serveExtra = [
  ...(timesliceMs !== undefined ? ['--timeslice-ms', String(Math.floor(timesliceMs))] : []),
  ...(opts['timeslice-always'] ? ['--timeslice-always'] : []),
];

/** The result file's name: the first Vulkan device, as other results name it. */
function deviceName(): string {
  if (opts.device) return opts.device;
  const d = vulkanDevices()[0]?.name ?? 'cpu';
  if (/llvmpipe|lavapipe/i.test(d)) return 'lavapipe';
  const m = /\b([A-Z]\d{2,4}[A-Z]?)\b/.exec(d); // "NVIDIA H200" → h200
  return (m ? m[1]! : d).toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '') || 'gpu';
}

const live: Twin[] = [];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(pred: () => boolean, ms: number): Promise<boolean> {
  const end = performance.now() + ms;
  while (!pred() && performance.now() < end) await sleep(50);
  return pred();
}

interface NbWindow { window: number; t_ms: number; n: number; fails: number; wrong: number; p50_us: number; max_us: number }

async function scenario(engine: string, bin: string, modules: string, tmp: string): Promise<Record<string, unknown>> {
  const dir = fs.mkdtempSync(path.join(tmp, `${engine}-`));
  const sock = (vm: string) => path.join(dir, `${vm}.sock`);
  const server = await startServer({
    socket: sock('a'),
    args: ['--mode', 'fv', '--vm', `name=b,socket=${sock('b')},mode=fv,slice=1G`, '--vram', '4G', '--engine', engine,
      ...(watchdogMs !== undefined ? ['--watchdog-ms', String(watchdogMs)] : []), ...serveExtra],
  });
  try {
    if (!(await until(() => fs.existsSync(sock('b')), 30_000))) throw new Error(`VM b's socket never appeared\n${server.tail()}`);
    const from = server.output.length;
    const b = twin(bin, sock('b'), ['--dir', modules, '--neighbour', '0', '--nop']);
    live.push(b);
    const started = () => b.records.some((r) => r.rec.kind === 'PHASE' && r.rec.data.phase === 'neighbour-start');
    if (!(await until(started, 60_000))) throw new Error(`VM b never started launching\n${b.lines.slice(-20).join('\n')}`);
    await sleep(attackAfterS * 1000);
    const tA = performance.now();
    const a = twin(bin, sock('a'), ['--dir', modules, '--endless', String(endlessN)]);
    live.push(a);
    // The endless launch ends when the device stops it; 10 s is the default watchdog.
    const aTimer = setTimeout(() => a.kill('SIGKILL'), endlessN * (watchdogMs ?? 10_000) + 60_000);
    const aCode = await a.closed;
    clearTimeout(aTimer);
    const aEnd = performance.now();
    await sleep(tailS * 1000);
    b.kill('SIGTERM');
    const bTimer = setTimeout(() => b.kill('SIGKILL'), 20_000);
    await b.closed;
    clearTimeout(bTimer);

    const endlessAll = a.records.filter((r) => r.rec.kind === 'CHECK' && r.rec.data.check === 'program-endless').map((r) => r.rec.data);
    const endless = endlessAll[0];
    const total = b.records.find((r) => r.rec.kind === 'CHECK' && r.rec.data.check === 'program-neighbour')?.rec.data;
    const windows = b.records.filter((r) => r.rec.kind === 'NB');
    const w = (x: (typeof windows)[number]) => x.rec.data as unknown as NbWindow;
    // b's windows that overlap a's run (a window ends at its record's arrival, starts at the previous one's)
    const during = windows.filter((x, i) => x.t >= tA && (i === 0 ? -Infinity : windows[i - 1]!.t) <= aEnd).map(w);
    const errLines = server.output.slice(from).filter((l) => /gpu channel error/.test(l));
    return {
      engine,
      watchdogMs: watchdogMs ?? 'default',
      a: {
        exit: aCode, outcome: endless?.outcome ?? null, ms: typeof endless?.us === 'number' ? Math.round(endless.us / 100) / 10 : null,
        detail: endless?.detail ?? a.lines.slice(-5).join(' | '),
        launches: endlessAll.map((x) => ({ outcome: x.outcome, ms: Math.round((x.us as number) / 100) / 10 })),
      },
      b: total ? {
        launches: total.launches, failures: total.failures, wrong: total.wrong, p50Us: total.p50_us,
        p999Ms: Math.round((total.p999_us as number) / 10) / 100, maxMs: Math.round((total.max_us as number) / 10) / 100,
        wallMs: total.ms, firstError: total.detail || null,
        windows: windows.length,
        windowsOver50ms: windows.filter((x) => w(x).max_us > GOAL_MS * 1000).length,
        windowsOver900ms: windows.filter((x) => w(x).max_us > 900_000).length,
        duringA: {
          windows: during.length, launches: during.reduce((n, x) => n + x.n, 0), failures: during.reduce((n, x) => n + x.fails, 0),
          maxMs: Math.round(Math.max(0, ...during.map((x) => x.max_us)) / 10) / 100,
        },
        stalls: windows.map(w).filter((x) => x.max_us > GOAL_MS * 1000).map((x) => ({ tMs: x.t_ms, maxMs: Math.round(x.max_us / 10) / 100, fails: x.fails })),
      } : { error: `no program-neighbour record from VM b`, tail: b.lines.slice(-10) },
      attackStartedMs: Math.round(tA - (windows[0]?.t ?? tA)),
      serverChannelErrors: errLines.map((l) => { const j = JSON.parse(l) as Record<string, unknown>; return { chid: j.chid, code: j.code }; }),
      serverErrors: server.errorLines().length,
    };
  } finally {
    for (const t of live.splice(0)) t.kill('SIGKILL'); // a scenario that threw leaves no twin behind
    await server.stop();
  }
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-neighbour-'));
const device = deviceName();
let bin = '', modules = '';
try {
  bin = twinBinary();
  modules = twinModules(tmp);
} catch (e) {
  usage((e as Error).message);
}
const runs: Record<string, unknown>[] = [];
let broken = 0;
for (const engine of engines) {
  try {
    const r = await scenario(engine, bin, modules, tmp);
    runs.push(r);
    if (!(r.a as { outcome: unknown }).outcome || 'error' in (r.b as object)) broken++;
  } catch (e) {
    broken++;
    runs.push({ engine, error: (e as Error).message });
  }
}
fs.rmSync(tmp, { recursive: true, force: true });

const rows = runs.map((r) => {
  const a = r.a as Record<string, unknown> | undefined;
  const b = r.b as Record<string, unknown> | undefined;
  return [r.engine as string, a?.outcome as string ?? String(r.error ?? ''), a?.ms as number, b?.launches as number, b?.failures as number,
    b?.p50Us as number, b?.p999Ms as number, b?.maxMs as number, b?.windowsOver50ms as number,
    (b?.duringA as Record<string, number> | undefined)?.maxMs];
});
console.log(`\nbench:neighbour on ${device} (VM a: endless program after ${attackAfterS} s; VM b: NOPs back to back)`);
console.log(textTable(['engine', 'a: outcome', 'a: ms', 'b: launches', 'b: failed', 'b: p50 µs', 'b: p99.9 ms', 'b: max ms', `b: windows > ${GOAL_MS} ms`, 'b: max during a (ms)'], rows));
// From the bundle there is no git: its BUNDLE-INFO says which commit it was built from.
const bundleInfo = fs.existsSync(path.join(repoRoot, 'BUNDLE-INFO')) ? fs.readFileSync(path.join(repoRoot, 'BUNDLE-INFO'), 'utf8').trim().split('\n') : null;
const result = {
  bundle: bundleInfo,
  scenario: 'fv, two VMs on one serve; twins (host backend): b launches the built-in NOP back to back, a launches the endless program over 256 workgroups',
  goal: `VM b: longest launch <= ${GOAL_MS} ms and no failed launch while VM a runs an endless program`,
  attackAfterS, tailS, serveArgs: serveExtra, runs,
};
if (opts.json) {
  fs.writeFileSync(opts.json, `${JSON.stringify(result, null, 2)}\n`);
} else {
  const file = writeBenchResult(BENCH, device, result);
  console.log(`wrote ${path.relative(repoRoot, file)}`);
}
process.exit(broken ? 1 : 0);
