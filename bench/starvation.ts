// No policy starves a VM (npm run bench:starvation; issue 34): a tiny-launch flood beside a
// copy-bound and, separately, a compute-bound neighbour, under every scheduling policy, with
// equal weights, and each VM's share of device time per 1 s window (median, min).
//
//   VM f (flood):     starvation-client nop  — NOP launches back to back, each synchronized
//   VM n (neighbour): starvation-client copy — device-to-device copies of --mb MiB, or
//                     starvation-client loop — LOOP kernels of --kernel-ms ms
// Both are clients of the runtime's host backend (the native twin's driver core over
// vfio-user: bench/starvation-client.c), so no QEMU is involved and each resubmits as fast as
// the host lets it, which is what starved a neighbour on GPU hosts.
//
// Device time: the server runs in this process and the aggregator's DeviceObserver reports
// every submission's dispatch and completion on the scheduler's clock. A VM's device time in a
// window is the part of its submissions' [dispatch, completion] spans inside it: the time no
// other VM could start (one submission runs at a time). The engine's own ns are reported as
// well (their share spread over each span): for NOPs they are a small part of the hold.
// Each neighbour also runs alone first, for its throughput without the flood.
//
//   node bench/starvation.ts [--policies band,fair,…] [--neighbours copy,compute] [--seconds 10] [--warmup 2]
//                            [--mb 64] [--kernel-ms 50] [--engine auto|native|vulkan] [--client PATH] [--out NAME]
// --client: a prebuilt starvation-client (e.g. a static one carried to a GPU host); otherwise it
// is built from this checkout's guest/runtime and guest/common with the host's cc.
// Writes bench/results/starvation/<device>.json (device: the Vulkan device's short name, or cpu).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Vugpu, type EngineBackend } from '../src/server.ts';
import { policyNames } from '../src/aggregator/scheduler/index.ts';
import { median, outVariant, repoRoot, resultDevice, textTable, writeBenchResult } from './lib/common.ts';

const S = 1e9;
const MS = 1e6;

type Neighbour = 'copy' | 'compute';
type Role = Neighbour | 'nop';
interface Options {
  seconds: number;
  warmup: number;
  mb: number;
  kernelMs: number;
  engine: EngineBackend;
  client: string;
}
interface Span { vm: string; start: number; end: number; ns: number }

function fail(msg: string): never {
  process.stderr.write(`bench:starvation: ${msg}\n`);
  process.exit(2);
}

const { values } = parseArgs({
  options: {
    policies: { type: 'string', default: policyNames.join(',') },
    neighbours: { type: 'string', default: 'copy,compute' },
    seconds: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '2' },
    mb: { type: 'string', default: '64' },
    'kernel-ms': { type: 'string', default: '50' },
    engine: { type: 'string', default: 'auto' },
    client: { type: 'string' },
    out: { type: 'string' },
  },
});
const int = (name: string, v: string, lo: number, hi: number): number => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < lo || n > hi) fail(`--${name} must be a whole number from ${lo} to ${hi}, got "${v}"`);
  return n;
};
const policies = values.policies.split(',');
for (const p of policies) if (!policyNames.includes(p as never)) fail(`unknown policy "${p}" (known: ${policyNames.join(', ')})`);
const neighbours = values.neighbours.split(',') as Neighbour[];
for (const n of neighbours) if (n !== 'copy' && n !== 'compute') fail(`a neighbour is copy or compute, got "${n}"`);
if (!['auto', 'native', 'vulkan'].includes(values.engine)) fail(`--engine is auto, native or vulkan, got "${values.engine}"`);

/** Build the client from the checkout (guest/runtime + guest/common), unless one is given. */
function client(given: string | undefined): string {
  if (given) {
    if (!fs.existsSync(given)) fail(`--client ${given}: no such file`);
    return path.resolve(given);
  }
  const out = path.join(repoRoot, 'build/starvation/starvation-client');
  const g = (d: string, fs_: string[]) => fs_.map((f) => path.join(repoRoot, 'guest', d, f));
  const main = path.join(repoRoot, 'bench/starvation-client.c');
  // A checkout has the runtime's sources; the offline bundle has them as twin/sdk/libvugpu.a.
  const sdk = path.join(repoRoot, 'twin/sdk');
  const args = fs.existsSync(path.join(repoRoot, 'guest/runtime/vg_runtime.c'))
    ? [`-I${path.join(repoRoot, 'guest/runtime')}`, `-I${path.join(repoRoot, 'guest/common')}`, '-o', out, main,
        ...g('runtime', ['vg_runtime.c', 'vg_backend_kmod.c', 'vg_backend_host.c', 'vfu_client.c']),
        ...g('common', ['vg_ralloc.c', 'vg_vm_reg.c', 'vg_vm_pv.c', 'vg_dev.c', 'vg_ctx.c'])]
    : [`-I${sdk}`, '-o', out, main, path.join(sdk, 'libvugpu.a')];
  fs.mkdirSync(path.dirname(out), { recursive: true });
  const r = spawnSync(process.env.CC ?? 'cc', ['-O2', '-std=gnu11', '-Wall', '-Wextra', '-Werror', ...args, '-lm'], { encoding: 'utf8' });
  if (r.status !== 0) fail(`building the client failed (give a prebuilt one with --client): ${r.stderr || r.error?.message}`);
  return out;
}

const o: Options = {
  seconds: int('seconds', values.seconds, 2, 600),
  warmup: int('warmup', values.warmup, 0, 60),
  mb: int('mb', values.mb, 1, 1024),
  kernelMs: int('kernel-ms', values['kernel-ms'], 1, 10_000),
  engine: values.engine as EngineBackend,
  client: client(values.client),
};

interface Client { child: ChildProcess; ready: Promise<boolean>; result: Promise<{ ops: number; failures: number; seconds: number; error: string } | null>; lines: string[] }

function startClient(socket: string, args: string[]): Client {
  const child = spawn(o.client, args, { env: { ...process.env, VUGPU_SOCKET: socket }, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  let partial = '';
  let onReady: (ok: boolean) => void = () => {};
  let onResult: (r: Awaited<Client['result']>) => void = () => {};
  const ready = new Promise<boolean>((r) => { onReady = r; });
  const result = new Promise<Awaited<Client['result']>>((r) => { onResult = r; });
  child.stdout!.setEncoding('utf8').on('data', (c: string) => {
    const ls = (partial + c).split('\n');
    partial = ls.pop() ?? '';
    for (const l of ls) {
      lines.push(l);
      if (l === 'STARVE-READY') onReady(true);
      if (l.startsWith('STARVE {')) onResult(JSON.parse(l.slice(7)));
    }
  });
  child.stderr!.setEncoding('utf8').on('data', (c: string) => lines.push(...c.split('\n').filter(Boolean)));
  child.on('error', (e) => lines.push(`spawn: ${e.message}`));
  child.on('close', () => { onReady(false); onResult(null); });
  return { child, ready, result, lines };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Device time of vm in [t0, t1): held = span overlap; engine = its ns spread over its span. */
function windowTime(spans: Span[], vm: string, t0: number, t1: number): { held: number; engine: number } {
  let held = 0;
  let engine = 0;
  for (const s of spans) {
    if (s.vm !== vm) continue;
    const ov = Math.min(s.end, t1) - Math.max(s.start, t0);
    if (ov <= 0) continue;
    held += ov;
    engine += s.end > s.start ? (s.ns * ov) / (s.end - s.start) : 0;
  }
  return { held, engine };
}

interface Run {
  policy: string;
  neighbour: Role;
  /** Per 1 s window: the flood's and the neighbour's share of held device time, and of engine ns. */
  windows: { flood: number; neighbour: number; floodEngine: number; neighbourEngine: number; busy: number }[];
  floodShare: { median: number; min: number };
  neighbourShare: { median: number; min: number };
  floodEngineShare: { median: number };
  /** Device held by either VM per window (1 = never idle). */
  busy: number;
  floodOps: number;
  neighbourOps: number;
  /** Neighbour throughput: GB/s (copy) or kernels/s (compute), over the whole run. */
  neighbourRate: number;
  failures: number;
  problems: string[];
}

async function runOne(policy: string | null, neighbour: Role, dir: string, device: { name: string | null }): Promise<Run> {
  const sock = (vm: string) => path.join(dir, `${policy ?? 'alone'}-${neighbour}-${vm}.sock`);
  const vms = policy === null ? ['n'] : ['f', 'n'];
  const server = new Vugpu({
    vramSize: 1 << 30, channels: 16, watchdogMs: 60_000, engine: o.engine, policy: policy ?? 'band',
    vms: vms.map((vm) => ({ name: vm, socket: sock(vm), mode: 'fv' as const, slice: Math.max(256, 4 * o.mb) << 20 })),
  });
  device.name ??= server.programs?.device ?? null;
  const agg = server.aggregator!;
  const spans: Span[] = [];
  agg.observer = { submission: (vm, start, end, ns) => { spans.push({ vm, start, end, ns }); } };
  const problems: string[] = [];
  const runMs = (o.warmup + o.seconds + 1) * 1000;
  const nArgs = neighbour === 'copy' ? ['copy', '--mb', String(o.mb)] : neighbour === 'nop' ? ['nop'] : ['loop', '--kernel-ms', String(o.kernelMs)];
  try {
    await server.started();
    const clients: Record<string, Client> = {};
    clients.n = startClient(sock('n'), [...nArgs, '--ms', String(runMs)]);
    if (policy !== null) clients.f = startClient(sock('f'), ['nop', '--ms', String(runMs)]);
    const ready = await Promise.all(Object.values(clients).map((c) => c.ready));
    if (ready.some((r) => !r)) throw new Error(`a client did not start:\n${Object.values(clients).map((c) => c.lines.slice(-5).join('\n')).join('\n---\n')}`);
    const t0 = agg.now() + o.warmup * S;
    const results = await Promise.all(Object.entries(clients).map(async ([vm, c]) => [vm, await c.result] as const));
    const res = Object.fromEntries(results);
    for (const [vm, r] of results) {
      if (r === null) problems.push(`client ${vm} ended without a result: ${clients[vm]!.lines.slice(-3).join(' | ')}`);
      else if (r.failures > 0) problems.push(`client ${vm}: ${r.failures} failed operation(s) (${r.error})`);
    }
    const windows: Run['windows'] = [];
    for (let k = 0; k < o.seconds; k++) {
      const w0 = t0 + k * S;
      const f = windowTime(spans, 'f', w0, w0 + S);
      const n = windowTime(spans, 'n', w0, w0 + S);
      const held = f.held + n.held;
      const eng = f.engine + n.engine;
      windows.push({
        flood: held > 0 ? f.held / held : 0, neighbour: held > 0 ? n.held / held : 0,
        floodEngine: eng > 0 ? f.engine / eng : 0, neighbourEngine: eng > 0 ? n.engine / eng : 0, busy: held / S,
      });
    }
    const nr = res.n;
    const neighbourRate = !nr || nr.seconds <= 0 ? 0 : neighbour === 'copy' ? (nr.ops * o.mb * (1 << 20)) / nr.seconds / 1e9 : nr.ops / nr.seconds;
    const pick = (k: 'flood' | 'neighbour') => ({ median: median(windows.map((w) => w[k])), min: Math.min(...windows.map((w) => w[k])) });
    return {
      policy: policy ?? 'alone', neighbour, windows,
      floodShare: pick('flood'), neighbourShare: pick('neighbour'),
      floodEngineShare: { median: median(windows.map((w) => w.floodEngine)) },
      busy: median(windows.map((w) => w.busy)),
      floodOps: res.f?.ops ?? 0, neighbourOps: nr?.ops ?? 0, neighbourRate,
      failures: (res.f?.failures ?? 0) + (nr?.failures ?? 0), problems,
    };
  } finally {
    agg.observer = null;
    server.close();
  }
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-starvation-'));
const device = { name: null as string | null };
const runs: Run[] = [];
try {
  // The flood alone: how much of the device its own gaps let it hold (its share cannot exceed it).
  const floodAlone = await runOne(null, 'nop', dir, device);
  runs.push(floodAlone);
  process.stderr.write(`[starvation] flood alone: device held ${(floodAlone.busy * 100).toFixed(0)}% of the time\n`);
  for (const neighbour of neighbours) {
    const alone = await runOne(null, neighbour, dir, device);
    runs.push(alone);
    process.stderr.write(`[starvation] ${neighbour} alone: ${alone.neighbourRate.toFixed(neighbour === 'copy' ? 2 : 1)} ${neighbour === 'copy' ? 'GB/s' : 'kernels/s'}\n`);
    for (const policy of policies) {
      const r = await runOne(policy, neighbour, dir, device);
      runs.push(r);
      process.stderr.write(`[starvation] ${policy} vs ${neighbour}: flood share median ${r.floodShare.median.toFixed(3)} min ${r.floodShare.min.toFixed(3)}, ` +
        `neighbour median ${r.neighbourShare.median.toFixed(3)} min ${r.neighbourShare.min.toFixed(3)}; ${r.problems.join('; ')}\n`);
      await sleep(200);
    }
  }
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}

const rows = runs.map((r) => {
  const alone = runs.find((a) => a.policy === 'alone' && a.neighbour === r.neighbour)!;
  const rate = (x: number) => (r.neighbour === 'copy' ? `${x.toFixed(2)} GB/s` : `${x.toFixed(1)} k/s`);
  return r.policy === 'alone'
    ? [r.policy, r.neighbour, '', '', '', '', (r.busy * 100).toFixed(0) + '%', '', String(r.neighbourOps), r.neighbour === 'nop' ? '' : rate(r.neighbourRate), '']
    : [r.policy, r.neighbour, r.floodShare.median.toFixed(3), r.floodShare.min.toFixed(3), r.neighbourShare.median.toFixed(3), r.neighbourShare.min.toFixed(3),
      (r.busy * 100).toFixed(0) + '%', r.floodEngineShare.median.toFixed(3), String(r.floodOps), rate(r.neighbourRate),
      alone.neighbourRate > 0 ? `${((r.neighbourRate / alone.neighbourRate) * 100).toFixed(0)}%` : ''];
});
console.log(textTable(['policy', 'neighbour', 'flood med', 'flood min', 'nbr med', 'nbr min', 'busy', 'flood eng ns', 'flood launches', 'nbr rate', 'of alone'], rows));
const sharing = runs.filter((r) => r.policy !== 'alone');
const result = {
  what: 'device-time shares per 1 s window of a NOP flood (f) and a copy- or compute-bound neighbour (n), two fv VMs of equal weight, clients of the host backend (no QEMU)',
  deviceTime: 'per window, the part of each VM\'s submissions\' [dispatch, completion] spans inside it (one submission runs at a time); floodEngineShare: the same with the engine\'s reported ns',
  options: { ...o, client: path.basename(o.client), policies, neighbours },
  programDevice: device.name,
  allAtLeast40: Object.fromEntries(policies.map((p) => [p, sharing.filter((r) => r.policy === p).every((r) => r.floodShare.min >= 0.4 && r.neighbourShare.min >= 0.4)])),
  neighbourAtLeast40: Object.fromEntries(policies.map((p) => [p, sharing.filter((r) => r.policy === p).every((r) => r.neighbourShare.min >= 0.4)])),
  runs,
};
const file = writeBenchResult('starvation', resultDevice(device.name), result, outVariant('starvation', values.out));
console.log(`wrote ${file}`);
if (runs.some((r) => r.problems.length > 0)) {
  console.log(`problems:\n${runs.flatMap((r) => r.problems.map((p) => `  ${r.policy} vs ${r.neighbour}: ${p}`)).join('\n')}`);
  process.exitCode = 1;
}
