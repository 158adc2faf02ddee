// Fair sharing of the device between two guests (npm run bench:fairness): AvA's experiment
// (kernels of 1 ms and 100 ms in two VMs, unfairness per 1 s window) on real QEMU guests in fv
// mode, one run per scheduling policy.
//
//   VM A: `vugpu-bench loop --ms 1 --launches N`   (1 ms loop kernels back to back)
//   VM B: `vugpu-bench loop --ms 100 --launches N` (100 ms loop kernels back to back)
// Each launch is synchronized before the next, so every kernel is one doorbell and the guest's
// CPU time between a completion and the next doorbell (the doorbell gap) is device idle time
// that the VM cannot use; under TCG it is large and the report gives it per VM.
//
// Measurement: the server runs in this process. The aggregator's DeviceObserver reports every
// submission (its start, end and device ns) and every doorbell on the scheduler's clock. A
// VM's device time in a window is the device ns of its submissions spread evenly over each
// submission's span, so a 100 ms kernel across a window boundary counts in both windows. As a
// cross-check, a sampler in this process also reads the VMs' deviceNs counters at every window
// boundary (those are charged at completion, so each window is quantised to whole kernels).
// unfairness(window) = |tA − tB| / (tA + tB) (AvA; 0 = even split, 1 = one VM only); the first
// window is skipped. Writes bench/results/fairness/cpu.json and cpu.svg (--out NAME: cpu-NAME.*), prints a table and
// replaces the fairness section of docs/results.md.
//   node bench/fairness.ts [--policies fair,band,band:3000,fifo,credit,weighted] [--out NAME] [--seconds 25] [--warmup 3]
//                          [--short-ms 1] [--long-ms 100] [--rounds 2] [--kernels 1,100,1,100] [--weights 1,2]
// --kernels gives one VM per entry (A, B, C, …: that VM's kernel ms; default short,long), --weights
// their scheduler weights (default all 1). With N VMs or weights, unfairness per window is
// (max − min) / (max + min) of device time per weight (AvA's |t1 − t2| / (t1 + t2) for two equal
// weights) and the shares are reported per VM.
//   node bench/fairness.ts --replot    (plot, table and docs section again from fairness.json)
// With --rounds N every policy runs N times, the policies interleaved: guest CPU timing depends
// on what else the host runs, and the spread between rounds shows how much.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Vugpu } from '../src/server.ts';
import { bootGuest, type GuestVm } from '../src/vm/launcher.ts';
import { loadManifest } from '../src/vm/manifest.ts';
import { chooseAccel } from '../src/vm/accel.ts';
import { cpuInterval } from './lib/cpu.ts';
import {
  benchFile, environment, median, type Environment, mdTable, outVariant, quantile, repoRoot, replaceSection, textTable, writeBenchResult, type Cell,
} from './lib/common.ts';

type Vm = string;
const S = 1e9;
const MS = 1e6;

interface Options {
  seconds: number;
  warmupS: number;
  shortMs: number;
  longMs: number;
  /** One VM per entry: its kernel length, ms (A = kernels[0], B = kernels[1], …). */
  kernels: number[];
  weights: number[];
}

const vmNames = (o: Options): Vm[] => o.kernels.map((_, i) => String.fromCharCode(65 + i));

interface Submission { vm: Vm; start: number; end: number; ns: number }

interface PolicyRun {
  policy: string;
  /** Round (1-based): with --rounds N every policy runs N times, interleaved. */
  round: number;
  label: string;
  /** Per window: device ms per VM (A, B, … as keys), shares of the window's device time. */
  windows: ({ t: number; busy: number; unfairness: number; shareA: number; kernelsA: number; kernelsB: number; shares: Record<Vm, number> } & Record<Vm, unknown>)[];
  /** Windows from the once-per-second counter sampler (charged at completion). */
  sampled: ({ unfairness: number } & Record<Vm, number>)[];
  medianUnfairness: number;
  maxUnfairness: number;
  medianShareA: number;
  /** Median share of each VM (with weights: compare with weight / Σ weights). */
  medianShares: Record<Vm, number>;
  sampledMedianUnfairness: number;
  sampledMaxUnfairness: number;
  deviceBusy: number;
  /** Device idle time per A kernel, µs (median over windows): what A's turns lose to its gaps. */
  idlePerKernelUs: number;
  /**
   * The unfairness expected if every turn got the same wall time and A's idle time counted
   * against A: idle / (2·kernel + idle). BAND's sliding window tends to that (band.ts).
   */
  equalTurnUnfairness: number;
  /** Doorbell gaps, µs; overYield = the fraction longer than 1 ms (BAND's 500 µs yield window, on 1 ms timers). */
  gapUs: Record<Vm, { p10: number; median: number; p90: number; p99: number; overYield: number; n: number }>;
  kernelMs: Record<Vm, number>;
  /** Σ observed submission device ns vs the counters' deviceNs over the same span (sanity). */
  accountedVsCounters: number;
  /** CPU use over the measured windows, in cores: the whole host, this benchmark (server + guests), everyone else. */
  cpuCores: { host: number; ours: number; others: number };
  problems: string[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Device ns of vm in [t0, t1): each submission's ns spread evenly over its span. */
function deviceTime(subs: Submission[], vm: Vm, t0: number, t1: number): { ns: number; kernels: number } {
  let ns = 0;
  let kernels = 0;
  for (const s of subs) {
    if (s.vm !== vm || s.ns <= 0 || s.end <= t0 || s.start >= t1) continue;
    const span = Math.max(1, s.end - s.start);
    ns += (s.ns * (Math.min(s.end, t1) - Math.max(s.start, t0))) / span;
    if (s.end >= t0 && s.end < t1) kernels++;
  }
  return { ns, kernels };
}

/**
 * The doorbell gap of one VM, µs: guest time from "the device is done with my kernel" to the
 * doorbell of its next kernel (interrupt delivery, wake-up, the launch itself; the device is
 * idle for this VM meanwhile). Between the two the guest driver rings once more: before
 * sleeping in vgSynchronize it asks for a completion interrupt (a zero-length submission,
 * scheduled like any other). The gap starts at the end of the kernel or, if that request was
 * served after it, at the end of the request (when the interrupt went out), so time spent
 * waiting behind the other VM is not counted; the kernel's doorbell is the first one after the
 * request was dispatched. A kernel dispatched together with the request gives no sample.
 */
function doorbellGaps(subs: Submission[], doorbells: number[], t0: number, t1: number): number[] {
  const gaps: number[] = [];
  let prev: Submission | null = null;
  let after = 0; // the kernel doorbell comes after this time
  let from = 0; // the gap starts here
  let j = 0; // doorbells are in time order, and `after` only grows
  for (const s of subs) {
    if (s.ns <= 0) {
      if (prev && s.start >= prev.end) {
        after = Math.max(after, s.start);
        from = Math.max(from, s.end);
      }
      continue;
    }
    while (j < doorbells.length && doorbells[j]! <= after) j++;
    if (prev && s.start >= t0 && s.start < t1 && j < doorbells.length && doorbells[j]! <= s.start) {
      gaps.push((doorbells[j]! - from) / 1e3);
    }
    prev = s;
    after = s.end;
    from = s.end;
  }
  return gaps;
}

const unfair = (a: number, b: number) => (a + b > 0 ? Math.abs(a - b) / (a + b) : 0);

/** (max − min) / (max + min) of device time per weight: AvA's metric for two equal weights. */
function unfairN(t: number[], w: number[]): number {
  const x = t.map((v, i) => v / w[i]!);
  return unfair(Math.max(...x), Math.min(...x));
}

/** "band" or "band:3000" (BAND with a 3000 µs yield window). */
function policyOptions(spec: string): { policy: string; policyConfig?: object } {
  const [policy, yieldUs] = spec.split(':');
  return yieldUs === undefined ? { policy: policy! } : { policy: policy!, policyConfig: { yieldNs: Number(yieldUs) * 1000 } };
}

async function runPolicy(policy: string, round: number, label: string, o: Options, dir: string): Promise<PolicyRun> {
  const manifest = loadManifest();
  const VMS = vmNames(o);
  const sock = (vm: Vm) => path.join(dir, `${policy}-${round}-${vm}.sock`);
  const server = new Vugpu({
    // 128 MiB per VM (and the host's 1/16): 512 MiB for two, more for more VMs.
    vramSize: Math.max(512, 160 * VMS.length) << 20, channels: 16, watchdogMs: 60_000, ...policyOptions(policy),
    vms: VMS.map((vm, i) => ({ name: vm, socket: sock(vm), mode: 'fv' as const, slice: 128 << 20, weight: o.weights[i] })),
  });
  const agg = server.aggregator!;
  const subs: Submission[] = [];
  const doorbells: Record<Vm, number[]> = Object.fromEntries(VMS.map((vm) => [vm, []]));
  agg.observer = {
    doorbell: (vm, at) => doorbells[vm]?.push(at),
    submission: (vm, start, end, ns) => {
      if (Object.hasOwn(doorbells, vm)) subs.push({ vm, start, end, ns });
    },
  };
  const problems: string[] = [];
  const guests: GuestVm[] = [];
  const counter = (vm: Vm) => server.metrics.get(vm)?.deviceNs ?? 0;
  try {
    for (const [i, vm] of VMS.entries()) {
      const ms = o.kernels[i]!;
      // Far more launches than the run needs: the guest is stopped when the measurement is done.
      const launches = Math.ceil(((o.warmupS + o.seconds + 60) * 1000) / ms);
      guests.push(bootGuest({
        manifest, sockets: [sock(vm)], run: '/bin/sh', timeoutMs: 300_000,
        args: ['/opt/vugpu/bench-suite.sh', '--only', 'loop', '--', '--ms', String(ms), '--launches', String(launches)],
      }));
    }
    // Both guests are in their kernel loop: the loop bench prints PHASE exec before its first launch.
    const started = await Promise.all(guests.map((g) => g.waitFor((r) => r.kind === 'PHASE' && r.data.phase === 'exec')));
    if (started.some((r) => r.kind === 'VM_EXITED')) {
      throw new Error(`a guest exited before its kernels started:\n${guests.map((g) => g.console.slice(-15).join('\n')).join('\n---\n')}`);
    }
    process.stderr.write(`[fairness] ${label}: both guests launching; ${o.warmupS} s warm-up, ${o.seconds + 1} windows of 1 s\n`);
    const t0 = agg.now() + o.warmupS * S;
    // The counter sampler: one reading at every window boundary, on the scheduler's clock.
    const samples: ({ t: number } & Record<Vm, number>)[] = [];
    let endCpu: (() => ReturnType<ReturnType<typeof cpuInterval>>) | null = null;
    for (let k = 0; k <= o.seconds + 1; k++) {
      const at = t0 + k * S;
      await sleep(Math.max(0, (at - agg.now()) / MS));
      samples.push(Object.assign({ t: agg.now() }, Object.fromEntries(VMS.map((vm) => [vm, counter(vm)]))) as { t: number } & Record<Vm, number>);
      if (k === 0) endCpu = cpuInterval(() => guests.flatMap((g) => (g.child.pid ? [g.child.pid] : [])));
    }
    const use = endCpu!();
    const cores = (f: number) => Math.round(f * use.cpus * 100) / 100;
    // Let the submissions that straddle the last boundary finish before looking at them.
    await sleep(o.longMs * 3 + 500);
    for (const g of guests) if (g.records.some((r) => r.kind === 'BENCH' || r.kind === 'EXIT')) problems.push('a guest finished its launches early');
    const faults = VMS.map((vm) => (server.metrics.get(vm)?.faults ?? 0) + (server.metrics.get(vm)?.channelErrors ?? 0));
    if (faults.some((f) => f > 0)) problems.push(`faults/channel errors: ${VMS.map((vm, i) => `${vm} ${faults[i]}`).join(', ')}`);

    const windows: PolicyRun['windows'] = [];
    for (let k = 0; k <= o.seconds; k++) {
      const w0 = t0 + k * S;
      const d = VMS.map((vm) => deviceTime(subs, vm, w0, w0 + S));
      const total = d.reduce((x, y) => x + y.ns, 0);
      const shares = Object.fromEntries(VMS.map((vm, i) => [vm, total > 0 ? d[i]!.ns / total : 0]));
      windows.push(Object.assign({
        t: k, busy: total / S, unfairness: unfairN(d.map((x) => x.ns), o.weights),
        shareA: shares['A']!, kernelsA: d[0]!.kernels, kernelsB: d[1]?.kernels ?? 0, shares,
      }, Object.fromEntries(VMS.map((vm, i) => [vm, d[i]!.ns / MS]))));
    }
    const sampled = samples.slice(1).map((s, i) => {
      const p = samples[i]!;
      const d = VMS.map((vm) => s[vm]! - p[vm]!);
      return Object.assign({ unfairness: unfairN(d, o.weights) }, Object.fromEntries(VMS.map((vm, j) => [vm, d[j]! / MS]))) as { unfairness: number } & Record<Vm, number>;
    });
    const steady = windows.slice(1); // skip the first window
    const sampledSteady = sampled.slice(1, o.seconds + 1);
    const tEnd = t0 + (o.seconds + 1) * S;
    const gapUs = {} as PolicyRun['gapUs'];
    const kernelMs = {} as PolicyRun['kernelMs'];
    for (const vm of VMS) {
      const gaps = doorbellGaps(subs.filter((s) => s.vm === vm), doorbells[vm], t0, tEnd);
      gapUs[vm] = {
        p10: quantile(gaps, 0.1), median: median(gaps), p90: quantile(gaps, 0.9), p99: quantile(gaps, 0.99),
        overYield: gaps.filter((g) => g > 1000).length / Math.max(1, gaps.length), n: gaps.length,
      };
      const ks = subs.filter((s) => s.vm === vm && s.ns > 0 && s.start >= t0 && s.end < tEnd).map((s) => s.ns / MS);
      kernelMs[vm] = median(ks);
    }
    const idleUs = median(steady.map((w) => (w.kernelsA > 0 ? ((1 - w.busy) * 1e6) / w.kernelsA : NaN)).filter((x) => !Number.isNaN(x)));
    const accounted = subs.filter((s) => s.end > samples[0]!.t && s.end <= samples.at(-1)!.t).reduce((x, s) => x + s.ns, 0);
    const counted = VMS.reduce((x, vm) => x + samples.at(-1)![vm]! - samples[0]![vm]!, 0);
    return {
      policy,
      round,
      label,
      windows,
      sampled,
      medianUnfairness: median(steady.map((w) => w.unfairness)),
      maxUnfairness: Math.max(...steady.map((w) => w.unfairness)),
      medianShareA: median(steady.map((w) => w.shareA)),
      medianShares: Object.fromEntries(VMS.map((vm) => [vm, median(steady.map((w) => w.shares[vm]!))])),
      sampledMedianUnfairness: median(sampledSteady.map((w) => w.unfairness)),
      sampledMaxUnfairness: Math.max(...sampledSteady.map((w) => w.unfairness)),
      deviceBusy: median(steady.map((w) => w.busy)),
      idlePerKernelUs: idleUs,
      equalTurnUnfairness: idleUs / 1e3 / (2 * kernelMs['A']! + idleUs / 1e3),
      gapUs,
      kernelMs,
      accountedVsCounters: counted > 0 ? accounted / counted : NaN,
      cpuCores: { host: cores(use.hostBusy), ours: cores(use.ours), others: cores(use.others) },
      problems,
    };
  } finally {
    agg.observer = null;
    await Promise.all(guests.map((g) => g.kill()));
    server.close();
  }
}

// ---- plot ----

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#e377c2', '#7f7f7f'];

/** "VM A (1 ms kernels) vs VM B (100 ms kernels)", with weights when they differ. */
function describeVms(o: Options): string {
  const w = o.weights.some((x) => x !== o.weights[0]);
  return vmNames(o).map((vm, i) => `VM ${vm} (${o.kernels[i]} ms kernels${w ? `, weight ${o.weights[i]}` : ''})`).join(' vs ');
}

function svg(runs: PolicyRun[], o: Options): string {
  const vms = vmNames(o);
  const wsum = o.weights.reduce((a, b) => a + b, 0);
  const W = 760, ph = 150, top = 46, left = 56, right = 20, gapY = 40;
  const pw = W - left - right;
  const H = top + runs.length * (ph + gapY) + 10;
  const n = runs[0]?.windows.length ?? 1;
  const x = (t: number) => left + (t / n) * pw;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="10" y="18" font-size="13" font-weight="bold">Share of device time per 1 s window: ${describeVms(o)}, ${o.kernels.length} fv guests</text>`,
    `<text x="10" y="34" fill="#555">${vms.map((vm, i) => `<tspan fill="${COLORS[i % COLORS.length]}" font-weight="bold">━ ${vm}</tspan>`).join(' ')}  first window (grey) skipped in the statistics; dashed: each VM's weight share; unfairness = ${o.kernels.length === 2 && o.weights[0] === o.weights[1] ? '|tA − tB| / (tA + tB)' : '(max − min) / (max + min) of t / weight'}</text>`,
  ];
  runs.forEach((r, i) => {
    const y0 = top + i * (ph + gapY) + 14;
    const y = (v: number) => y0 + ph - v * ph;
    parts.push(`<text x="${left}" y="${y0 - 5}" font-weight="bold">${r.label}: median unfairness ${(r.medianUnfairness * 100).toFixed(1)}%, max ${(r.maxUnfairness * 100).toFixed(1)}%, device busy ${(r.deviceBusy * 100).toFixed(0)}%, others' CPU load ${r.cpuCores.others.toFixed(2)} cores</text>`);
    parts.push(`<rect x="${left}" y="${y0}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
    parts.push(`<rect x="${x(0)}" y="${y0}" width="${(x(1) - x(0)).toFixed(1)}" height="${ph}" fill="#eee"/>`);
    for (const v of [0, 0.5, 1]) {
      parts.push(`<text x="${left - 6}" y="${y(v) + 4}" text-anchor="end">${v.toFixed(1)}</text>`);
    }
    for (const share of new Set(o.weights.map((w) => w / wsum))) {
      parts.push(`<line x1="${left}" x2="${left + pw}" y1="${y(share)}" y2="${y(share)}" stroke="#888" stroke-dasharray="4,3"/>`);
    }
    for (let t = 0; t <= n; t += 5) {
      parts.push(`<line x1="${x(t)}" x2="${x(t)}" y1="${y0 + ph}" y2="${y0 + ph + 4}" stroke="#999"/><text x="${x(t)}" y="${y0 + ph + 15}" text-anchor="middle">${t} s</text>`);
    }
    vms.forEach((vm, j) => {
      const pts = r.windows.map((w) => {
        const total = vms.reduce((a, v) => a + Number(w[v] ?? 0), 0);
        const share = total > 0 ? Number(w[vm] ?? 0) / total : 0;
        return `${x(w.t).toFixed(1)},${y(share).toFixed(1)} ${x(w.t + 1).toFixed(1)},${y(share).toFixed(1)}`;
      });
      parts.push(`<polyline fill="none" stroke="${COLORS[j % COLORS.length]}" stroke-width="2" points="${pts.join(' ')}"/>`);
    });
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      policies: { type: 'string', default: 'fair,band,fifo,credit,weighted' },
      out: { type: 'string', default: 'fairness' },
      seconds: { type: 'string', default: '25' },
      warmup: { type: 'string', default: '3' },
      'short-ms': { type: 'string', default: '1' },
      'long-ms': { type: 'string', default: '100' },
      rounds: { type: 'string', default: '2' },
      kernels: { type: 'string' },
      weights: { type: 'string' },
      replot: { type: 'boolean', default: false },
    },
  });
  if (values.replot) {
    report(JSON.parse(fs.readFileSync(benchFile('fairness', 'cpu', outVariant('fairness', values.out)), 'utf8')) as Result, values.out!);
    return;
  }
  const shortMs = Number(values['short-ms']);
  const longMs = Number(values['long-ms']);
  const kernels = values.kernels ? values.kernels.split(',').map(Number) : [shortMs, longMs];
  const weights = values.weights ? values.weights.split(',').map(Number) : kernels.map(() => 1);
  if (kernels.length < 2 || kernels.length > 8 || kernels.some((k) => !(k > 0))) throw new Error('--kernels: 2 to 8 kernel lengths in ms');
  if (weights.length !== kernels.length || weights.some((w) => !(w > 0))) throw new Error('--weights: one weight > 0 per VM');
  const o: Options = { seconds: Number(values.seconds), warmupS: Number(values.warmup), shortMs: Math.min(...kernels), longMs: Math.max(...kernels), kernels, weights };
  if (!Number.isInteger(o.seconds) || o.seconds < 3) throw new Error('--seconds must be an integer ≥ 3');
  const policies = values.policies!.split(',');
  const rounds = Number(values.rounds);
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error('--rounds must be an integer ≥ 1');
  const manifest = loadManifest();
  const accel = chooseAccel();
  const env = environment(manifest, accel);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-fair-'));
  const runs: PolicyRun[] = [];
  const t0 = performance.now();
  try {
    for (let k = 1; k <= rounds; k++) {
      for (const p of policies) runs.push(await runPolicy(p, k, rounds > 1 ? `${p} #${k}` : p, o, dir));
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const result = {
    date: new Date().toISOString(),
    environment: { ...env, loadAvgAtEnd: os.loadavg().map((x) => Math.round(x * 100) / 100) },
    setup: {
      mode: 'fv', guests: o.kernels.length, vcpusPerGuest: 1, shortKernelMs: o.shortMs, longKernelMs: o.longMs, kernelsMs: o.kernels, weights: o.weights, windowS: 1,
      windows: o.seconds, warmupS: o.warmupS, skippedWindows: 1, rounds,
      unfairness: '(max − min) / (max + min) of device time per weight per 1 s window (for two equal weights AvA\'s |tA − tB| / (tA + tB)), device time spread over each submission\'s span',
      bandYieldWindowUs: 500,
    },
    reference: {
      avaMedianUnfairness1s: 0.024, avaFixedRateMedian1s: 0.026,
      simulation: 'test/aggregator/scheduler-sim.test.ts: BAND median 2.1 % at a 50 µs doorbell gap, 4.2 % at 200 µs; ' +
        'test/aggregator/scheduler-fair.test.ts: fair ≤ 2 % at every gap incl. TCG-like gap tails, BAND 27–55 % with those tails',
    },
    wallS: Math.round((performance.now() - t0) / 100) / 10,
    runs,
  };
  writeBenchResult('fairness', 'cpu', result, outVariant('fairness', values.out));
  report(result, values.out!);
}

type Result = {
  date: string;
  environment: Environment & { loadAvgAtEnd: number[] };
  setup: { shortKernelMs: number; longKernelMs: number; kernelsMs?: number[]; weights?: number[]; windows: number; warmupS: number };
  wallS: number;
  runs: PolicyRun[];
};

/** Plot, docs section and printed table from a result (also `--replot`: from the saved JSON). */
function report(result: Result, out = 'fairness'): void {
  const kernels = result.setup.kernelsMs ?? [result.setup.shortKernelMs, result.setup.longKernelMs];
  const o: Options = {
    seconds: result.setup.windows, warmupS: result.setup.warmupS, shortMs: result.setup.shortKernelMs, longMs: result.setup.longKernelMs,
    kernels, weights: result.setup.weights ?? kernels.map(() => 1),
  };
  const vms = vmNames(o);
  const wsum = o.weights.reduce((a, b) => a + b, 0);
  const runs = result.runs;
  const env = result.environment;
  const file = (ext: string) => benchFile('fairness', 'cpu', outVariant('fairness', out), ext);
  fs.writeFileSync(file('svg'), svg(runs, o));
  const pct = (v: number) => `${(v * 100).toFixed(1)}%`;
  const head = ['policy', 'median unfairness', 'max unfairness', vms.length === 2 ? 'A share (median)' : `shares ${vms.join('/')} (median)`, 'device busy', 'A gap µs p10/med/p90/p99', 'A gaps > 1 ms', 'B gap µs med',
    'idle µs per A kernel', 'equal-turn model', 'A kernel ms', 'B kernel ms', 'sampled median/max',
    'CPU cores: ours/others'];
  const rows: Cell[][] = runs.map((r) => [
    r.label, pct(r.medianUnfairness), pct(r.maxUnfairness),
    vms.length === 2 ? r.medianShareA.toFixed(3) : vms.map((vm) => (r.medianShares?.[vm] ?? NaN).toFixed(3)).join('/'), pct(r.deviceBusy),
    `${r.gapUs.A.p10.toFixed(0)}/${r.gapUs.A.median.toFixed(0)}/${r.gapUs.A.p90.toFixed(0)}/${r.gapUs.A.p99.toFixed(0)}`,
    pct(r.gapUs.A.overYield), r.gapUs.B.median.toFixed(0),
    r.idlePerKernelUs.toFixed(0), pct(r.equalTurnUnfairness),
    r.kernelMs['A']!.toFixed(2), r.kernelMs['B']!.toFixed(1), `${pct(r.sampledMedianUnfairness)}/${pct(r.sampledMaxUnfairness)}`,
    `${r.cpuCores.ours.toFixed(2)}/${r.cpuCores.others.toFixed(2)}`,
  ]);
  const problems = runs.flatMap((r) => r.problems.map((p) => `${r.label}: ${p}`));
  // Only the default run owns the docs section; experiments (--out NAME) write their own files.
  if (out === 'fairness') replaceSection(path.join(repoRoot, 'docs', 'results.md'), 'fairness', [
    `Measured ${result.date.slice(0, 10)} (${env.accel.toUpperCase()}, two fv guests with one vCPU each, ${o.seconds} windows of 1 s after a ` +
      `${o.warmupS} s warm-up and a skipped first window; host load average ${env.loadAvgAtStart[0]} at start, ` +
      `${env.loadAvgAtEnd[0]} at the end; ${result.wallS} s). Raw data: \`bench/results/fairness/cpu.json\`; plot: \`bench/results/fairness/cpu.svg\`.` +
      `${problems.length ? ` **Problems:** ${problems.join('; ')}` : ''}`,
    '',
    mdTable(head, rows),
    '',
    'Gap = a VM\'s kernel doorbell minus the end of its previous kernel, or of the driver\'s interrupt request for it when that ' +
      'was served later (guest time: interrupt delivery, wake-up, launch; device idle for that VM); "> 1 ms" = the share of A\'s gaps longer than BAND\'s yield window ' +
      '(500 µs on 1 ms Node timers). Idle per A kernel = the device\'s idle time in a window divided by ' +
      'A\'s kernels in it; the equal-turn model = idle / (2·kernel + idle), the unfairness if both VMs got equal wall time per turn ' +
      'and A lost its idle time. ' +
      '"sampled" = the same statistic from the once-per-second counter sampler (device time charged at completion, so a window holds whole kernels). ' +
      'CPU cores = CPU time over the measured windows: this benchmark (server, engine, both QEMUs) / every other process on the 2-core host.',
  ].join('\n'));
  process.stdout.write([
    `vugpu fairness — ${vms.length} fv guests (${env.accel.toUpperCase()}), ${describeVms(o)}, ${o.seconds} × 1 s windows` +
      (o.weights.some((w) => w !== o.weights[0]) ? `; weight shares ${o.weights.map((w) => (w / wsum).toFixed(3)).join('/')}` : ''),
    textTable(head, rows),
    `reference: AvA median unfairness 2.4 % (1 s windows); simulation BAND 2.1 % at 50 µs gap, 4.2 % at 200 µs, 27 % with TCG gap tails; fair ≤ 2 %`,
    ...(problems.length ? [`PROBLEMS:\n  ${problems.join('\n  ')}`] : []),
    `written ${path.relative(repoRoot, file('json'))}, ${path.relative(repoRoot, file('svg'))}${out === 'fairness' ? ' and docs/results.md' : ''} (${result.wallS} s)`,
  ].join('\n') + '\n');
  if (problems.length) process.exitCode = 1;
}

main().catch((err: Error) => {
  process.stderr.write(`[fairness] ${err.stack ?? err.message}\n`);
  process.exit(1);
});
