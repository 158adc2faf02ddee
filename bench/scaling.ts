// Scaling (npm run bench:scaling): AvA's scalability experiment (seeds/001 §4.6.4: N VMs
// each running a device-saturating benchmark; 5.7 % slowdown per doubling) on `vugpu serve`
// with 1, 2, 4 and 8 fv guests at once, then the suite in N guests at once (up to 32), then a soak.
//
//   saturate  N guests each launch loop kernels of --kernel-ms back to back (vugpu-bench loop,
//             each launch synchronized): the device always has work. Measured over --seconds
//             after all N are in their loop and a warm-up: per-VM throughput (kernels/s, device
//             ms/s), aggregate device utilization (Σ device time / wall time), the spread between
//             VMs, server RSS and open fds. Slowdown per doubling = aggregate kernel throughput
//             at N over that at 2N, minus 1 (0 = the device serves 2N VMs as fast as N).
//   suite     N guests (--suite-vms, default --vms) each run the 14 benchmarks once (default
//             sizes) at the same time, --guest-mib of RAM each: every result verified, per-VM
//             suite time (Σ benchmark totals and guest wall time); a guest that did not finish
//             leaves its console's tail in the result.
//   soak      (--soak-min M) 8 guests run the suite in a loop for M minutes; server RSS and fd
//             count sampled every --soak-sample-s; every result verified. RSS growth is the
//             last minute's mean over the first minute's after warm-up.
//
// The server is the real one in its own process (`vugpu serve --mode fv --socket … --metrics-port`),
// read through /metrics.json; RSS and fds from /proc/<pid>. Each VM gets a --slice-mib VRAM slice.
// Writes bench/results/scaling/cpu.json (writeBenchResult; the built-ins run on the native pool)
// and cpu.svg (and soak.svg), and the docs/results.md section.
//   node bench/scaling.ts [--vms 1,2,4,8] [--suite-vms 1,2,4,8,32] [--guest-mib 384] [--slice-mib 128]
//                         [--seconds 20] [--warmup 5] [--kernel-ms 20] [--policy band]
//                         [--no-suite] [--no-saturate] [--soak-min 10] [--soak-sample-s 5] [--replot]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { bootGuest, type GuestVm } from '../src/vm/launcher.ts';
import { loadManifest, type Manifest } from '../src/vm/manifest.ts';
import { chooseAccel } from '../src/vm/accel.ts';
import { startServer, type ServerProcess } from '../src/vm/server-process.ts';
import { toBenchRecord, BENCHMARKS } from '../src/demo/records.ts';
import { extendInitramfs } from './lib/initramfs.ts';
import { cpuInterval } from './lib/cpu.ts';
import {
  environment, freePort, mdTable, median, repoRoot, replaceSection, resultsDir, textTable, writeBenchResult, writeResult,
  type Cell, type Environment,
} from './lib/common.ts';

const SUITE = '/opt/vugpu/bench-suite.sh';
const SOAK_SCRIPT = '/opt/vugpu-bench/soak.sh';
const MIB = 1 << 20;
const BENCH = 'scaling';
/** The suite's built-ins run on the engine's native pool (`--engine auto`): the CPU is the device. */
const DEVICE = 'cpu';
/** The most guests at once: each is a QEMU process with its own RAM; 32 is what the suite reaches. */
const MAX_VMS = 32;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The soak's guest side: load the driver once, then the suite in a loop until powered off. */
const SOAK_GUEST = `#!/bin/sh
# soak.sh (written by bench/scaling.ts)
insmod /opt/vugpu/vugpu.ko || { echo 'VUGPU-ERROR {"error":"insmod failed"}'; exit 1; }
i=0
while true; do
  for b in ${BENCHMARKS.join(' ')}; do /opt/vugpu/vugpu-bench "$b"; done
  i=$((i + 1))
  echo "VUGPU-PHASE {\\"phase\\":\\"soak-loop\\",\\"i\\":$i}"
done
`;

interface VmMetric { vm: string; deviceNs: number; dispatches: number; faults: number; channelErrors: number }

async function metrics(port: number): Promise<VmMetric[]> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics.json`);
  const j = (await res.json()) as { vms: VmMetric[] };
  return j.vms;
}

/** Server process RSS (MiB) and open fds. */
function procStats(pid: number): { rssMiB: number; fds: number } {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN) / 1024;
  return { rssMiB: Math.round(rss * 10) / 10, fds: fs.readdirSync(`/proc/${pid}/fd`).length };
}

interface Served {
  server: ServerProcess;
  port: number;
  sockets: string[];
  names: string[];
}

async function serve(dir: string, n: number, o: Opts, tag: string): Promise<Served> {
  const sockets = Array.from({ length: n }, (_, i) => path.join(dir, `${tag}-vm${i}.sock`));
  const port = await freePort();
  const names = sockets.map((_, i) => `vm${i}`);
  // VRAM of 5/4 of a slice per VM: after the host's reserve (1/16) each VM's default slice (an
  // equal share rounded down to a power of two) is --slice-mib whatever N, so the server's memory
  // per VM compares across N.
  const server = await startServer({
    socket: sockets[0]!, readyTimeoutMs: 120_000,
    args: ['--mode', 'fv', ...sockets.slice(1).flatMap((s) => ['--socket', s]), '--vram', `${(o.sliceMiB * 5 * n) / 4}M`, '--policy', o.policy,
      '--metrics-port', String(port), '--log-level', 'warn', '--watchdog-ms', '60000'],
  });
  // Every VM's socket, then the metrics server (it starts once all VMs are attached).
  for (let i = 0; i < 1200; i++) {
    if (sockets.every((x) => fs.existsSync(x))) {
      try {
        if ((await metrics(port)).length === n) break;
      } catch {
        // not listening yet
      }
    }
    await sleep(100);
  }
  return { server, port, sockets, names };
}

// ---- saturate ----

interface SaturateRun {
  vms: number;
  seconds: number;
  /** Per VM over the measured span: kernels/s and device ms/s. */
  perVm: { vm: string; kernelsPerS: number; deviceMsPerS: number }[];
  aggregateKernelsPerS: number;
  /** Σ device time / wall time over the measured span. */
  utilization: number;
  /** (max − min) / mean of the per-VM throughput. */
  spread: number;
  /** Server process: before any guest connected (VMs attached), and median while running. */
  rssIdleMiB: number;
  rssMiB: number;
  fdsIdle: number;
  fds: number;
  bootS: number;
  cpuCores: { ours: number; others: number };
  problems: string[];
}

async function saturate(manifest: Manifest, dir: string, n: number, o: Opts): Promise<SaturateRun> {
  const problems: string[] = [];
  const s = await serve(dir, n, o, `sat${n}`);
  const pid = s.server.pid!;
  await sleep(500);
  const idle = procStats(pid);
  const guests: GuestVm[] = [];
  const t0 = performance.now();
  try {
    const launches = Math.ceil(((o.warmupS + o.seconds + 600) * 1000) / o.kernelMs);
    for (const sock of s.sockets) {
      guests.push(bootGuest({
        manifest, sockets: [sock], run: SUITE, timeoutMs: 1_200_000, memoryMiB: 256,
        args: ['--only', 'loop', '--', '--ms', String(o.kernelMs), '--launches', String(launches)],
      }));
    }
    const started = await Promise.all(guests.map((g) => g.waitFor((r) => r.kind === 'PHASE' && r.data.phase === 'exec')));
    if (started.some((r) => r.kind === 'VM_EXITED')) {
      throw new Error(`a guest exited before its loop started:\n${guests.map((g) => g.console.slice(-10).join('\n')).join('\n---\n')}`);
    }
    const bootS = (performance.now() - t0) / 1000;
    process.stderr.write(`[scaling] ${n} VM(s) launching after ${bootS.toFixed(1)} s; ${o.warmupS} s warm-up, ${o.seconds} s measured\n`);
    await sleep(o.warmupS * 1000);
    const endCpu = cpuInterval(() => [pid, ...guests.flatMap((g) => (g.child.pid ? [g.child.pid] : []))]);
    const a = await metrics(s.port);
    const ta = performance.now();
    const samples: { rssMiB: number; fds: number }[] = [];
    for (let k = 0; k < o.seconds; k++) {
      await sleep(1000);
      samples.push(procStats(pid));
    }
    const b = await metrics(s.port);
    const wall = (performance.now() - ta) / 1000;
    const use = endCpu();
    if (guests.some((g) => g.records.some((r) => r.kind === 'BENCH' || r.kind === 'EXIT'))) problems.push('a guest finished its launches early');
    const perVm = s.names.map((vm) => {
      const x = a.find((m) => m.vm === vm)!;
      const y = b.find((m) => m.vm === vm)!;
      if (y.faults + y.channelErrors > 0) problems.push(`${vm}: ${y.faults} faults, ${y.channelErrors} channel errors`);
      const dev = (y.deviceNs - x.deviceNs) / 1e6;
      // Each launch is one kernel of kernelMs device time (plus a zero-length interrupt request).
      return { vm, kernelsPerS: dev / o.kernelMs / wall, deviceMsPerS: dev / wall };
    });
    const agg = perVm.reduce((t, v) => t + v.kernelsPerS, 0);
    const mean = agg / n;
    return {
      vms: n, seconds: Math.round(wall * 10) / 10, perVm, aggregateKernelsPerS: agg,
      utilization: perVm.reduce((t, v) => t + v.deviceMsPerS, 0) / 1000,
      spread: (Math.max(...perVm.map((v) => v.kernelsPerS)) - Math.min(...perVm.map((v) => v.kernelsPerS))) / mean,
      rssIdleMiB: idle.rssMiB, rssMiB: median(samples.map((x) => x.rssMiB)), fdsIdle: idle.fds, fds: median(samples.map((x) => x.fds)),
      bootS: Math.round(bootS * 10) / 10,
      cpuCores: { ours: Math.round(use.ours * use.cpus * 100) / 100, others: Math.round(use.others * use.cpus * 100) / 100 },
      problems: [...problems, ...s.server.errorLines().slice(0, 5).map((l) => `server: ${l}`)],
    };
  } finally {
    await Promise.all(guests.map((g) => g.kill()));
    await s.server.stop();
  }
}

// ---- suite ----

interface SuiteRun {
  vms: number;
  guestMiB: number;
  /** Per VM: Σ of its benchmarks' totals (ms), guest wall time (s), runs verified, guest uptime
   * (s) when its init started. */
  perVm: { vm: string; suiteMs: number; wallS: number; verified: number; runs: number; initUptimeS: number | null }[];
  medianSuiteMs: number;
  rssMiB: number;
  /** Server open fds: attached and idle, the most while running, after the guests went away. */
  fds: { idle: number; max: number; after: number };
  /** The console's last lines of each guest that did not verify every benchmark. */
  failures: { vm: string; exit: number | null; timedOut: boolean; console: string[] }[];
  problems: string[];
}

async function suite(manifest: Manifest, dir: string, n: number, o: Opts): Promise<SuiteRun> {
  const problems: string[] = [];
  const s = await serve(dir, n, o, `suite${n}`);
  const pid = s.server.pid!;
  await sleep(500);
  const idleFds = procStats(pid).fds;
  let rss = 0;
  let maxFds = idleFds;
  const timer = setInterval(() => {
    try {
      const st = procStats(pid);
      rss = Math.max(rss, st.rssMiB);
      maxFds = Math.max(maxFds, st.fds);
    } catch {
      // exited
    }
  }, 1000);
  try {
    // Many TCG guests share the host's cores: the bound grows with N so that a slow boot is
    // reported as a failed guest only when it really stalls.
    const timeoutMs = Math.max(1_500_000, n * 120_000);
    const guests = s.sockets.map((sock) => bootGuest({ manifest, sockets: [sock], run: SUITE, timeoutMs, memoryMiB: o.guestMiB }));
    const results = await Promise.all(guests.map((g) => g.done));
    const failures: SuiteRun['failures'] = [];
    const perVm = results.map((r, i) => {
      const recs = r.records.filter((x) => x.kind === 'BENCH').map((x) => toBenchRecord(x.data));
      const good = recs.filter((x): x is Exclude<typeof x, string> => typeof x !== 'string');
      const verified = good.filter((x) => x.ok).length;
      if (r.guestExit !== 0) problems.push(`vm${i}: suite exit ${r.guestExit}${r.timedOut ? ' (timed out)' : ''}`);
      if (verified !== BENCHMARKS.length) {
        problems.push(`vm${i}: ${verified} of ${BENCHMARKS.length} benchmarks verified`);
        failures.push({ vm: `vm${i}`, exit: r.guestExit, timedOut: r.timedOut, console: r.console.slice(-30) });
      }
      return {
        vm: `vm${i}`, suiteMs: good.reduce((t, x) => t + x.total_us, 0) / 1000, wallS: Math.round(r.durationMs / 100) / 10, verified,
        runs: good.length, initUptimeS: r.initUptime,
      };
    });
    await sleep(1000);
    const after = procStats(pid).fds;
    problems.push(...s.server.errorLines().slice(0, 5).map((l) => `server: ${l}`));
    return {
      vms: n, guestMiB: o.guestMiB, perVm, medianSuiteMs: median(perVm.map((v) => v.suiteMs)), rssMiB: rss,
      fds: { idle: idleFds, max: maxFds, after }, failures, problems,
    };
  } finally {
    clearInterval(timer);
    await s.server.stop();
  }
}

// ---- soak ----

interface SoakResult {
  vms: number;
  minutes: number;
  sampleS: number;
  samples: { t: number; rssMiB: number; fds: number; deviceS: number; loops: number }[];
  runs: number;
  verified: number;
  failed: string[];
  warmupS: number;
  rssFirstMinMiB: number;
  rssLastMinMiB: number;
  rssGrowth: number;
  fdsFirst: number;
  fdsLast: number;
  fdsMax: number;
  problems: string[];
}

async function soak(manifest: Manifest, dir: string, o: Opts): Promise<SoakResult> {
  const n = 8;
  const problems: string[] = [];
  const m: Manifest = { ...manifest, initramfs: extendInitramfs(manifest.initramfs, [{ path: SOAK_SCRIPT, content: SOAK_GUEST }], path.join(dir, 'soak-initramfs.img')) };
  const s = await serve(dir, n, o, 'soak');
  const pid = s.server.pid!;
  let runs = 0;
  let verified = 0;
  let loops = 0;
  const failed: string[] = [];
  const guests: GuestVm[] = [];
  const samples: SoakResult['samples'] = [];
  try {
    s.sockets.forEach((sock, i) => guests.push(bootGuest({
      manifest: m, sockets: [sock], run: '/bin/sh', args: [SOAK_SCRIPT], timeoutMs: (o.soakMin * 60 + 600) * 1000, memoryMiB: 384,
      onLine: (_l, rec) => {
        if (rec?.kind === 'BENCH') {
          runs++;
          if (rec.data.ok === true) verified++;
          else if (failed.length < 20) failed.push(`vm${i}: ${JSON.stringify(rec.data).slice(0, 200)}`);
        } else if (rec?.kind === 'PHASE' && rec.data.phase === 'soak-loop') loops++;
        else if (rec?.kind === 'ERROR' && failed.length < 20) failed.push(`vm${i}: ${JSON.stringify(rec.data)}`);
      },
    })));
    const t0 = performance.now();
    const end = t0 + o.soakMin * 60_000;
    while (performance.now() < end) {
      const st = procStats(pid);
      const mm = await metrics(s.port);
      samples.push({ t: Math.round((performance.now() - t0) / 100) / 10, ...st, deviceS: mm.reduce((t, x) => t + x.deviceNs, 0) / 1e9, loops });
      process.stderr.write(`\r[scaling] soak ${samples.at(-1)!.t.toFixed(0)} s: RSS ${st.rssMiB} MiB, ${st.fds} fds, ${runs} runs (${verified} verified), ${loops} loops   `);
      await sleep(o.soakSampleS * 1000);
    }
    process.stderr.write('\n');
    for (const g of guests) if (g.records.some((r) => r.kind === 'VM_EXITED' || r.kind === 'EXIT')) problems.push('a guest stopped during the soak');
  } finally {
    await Promise.all(guests.map((g) => g.kill()));
    problems.push(...s.server.errorLines().slice(0, 5).map((l) => `server: ${l}`));
    await s.server.stop();
  }
  // Warm-up: the first two minutes (or a fifth of the soak) are boot and first-touch.
  const warmupS = Math.min(120, (o.soakMin * 60) / 5);
  const first = samples.filter((x) => x.t >= warmupS && x.t < warmupS + 60);
  const last = samples.filter((x) => x.t >= samples.at(-1)!.t - 60);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  const rssFirst = mean(first.map((x) => x.rssMiB));
  const rssLast = mean(last.map((x) => x.rssMiB));
  if (failed.length) problems.push(`${runs - verified} runs not verified`);
  return {
    vms: n, minutes: o.soakMin, sampleS: o.soakSampleS, samples, runs, verified, failed, warmupS,
    rssFirstMinMiB: Math.round(rssFirst * 10) / 10, rssLastMinMiB: Math.round(rssLast * 10) / 10, rssGrowth: rssLast / rssFirst - 1,
    fdsFirst: first[0]?.fds ?? NaN, fdsLast: samples.at(-1)?.fds ?? NaN, fdsMax: Math.max(...samples.filter((x) => x.t >= warmupS).map((x) => x.fds)),
    problems,
  };
}

// ---- report ----

interface Opts {
  vms: number[];
  suiteVms: number[];
  guestMiB: number;
  sliceMiB: number;
  seconds: number;
  warmupS: number;
  kernelMs: number;
  policy: string;
  soakMin: number;
  soakSampleS: number;
}

interface Result {
  date: string;
  environment: Environment & { loadAvgAtEnd: number[] };
  options: Opts;
  wallS: number;
  saturate: SaturateRun[];
  suite: SuiteRun[];
  /** Per doubling N → 2N: aggregate throughput(N) / throughput(2N) − 1; and their geometric mean. */
  slowdownPerDoubling: { from: number; to: number; slowdown: number }[];
  meanSlowdownPerDoubling: number | null;
  suiteSlowdownPerDoubling: { from: number; to: number; slowdown: number }[];
  reference: Record<string, unknown>;
  soak: SoakResult | null;
  problems: string[];
}

function doublings<T extends { vms: number }>(rs: T[], rate: (r: T) => number): { from: number; to: number; slowdown: number }[] {
  const out: { from: number; to: number; slowdown: number }[] = [];
  for (const r of rs) {
    const next = rs.find((x) => x.vms === 2 * r.vms);
    if (next) out.push({ from: r.vms, to: next.vms, slowdown: rate(r) / rate(next) - 1 });
  }
  return out;
}

const pct = (v: number | null | undefined) => (v === null || v === undefined || !Number.isFinite(v) ? '—' : `${(v * 100).toFixed(1)}%`);

function scalingSvg(r: Result): string {
  const W = 760, H = 360, left = 60, right = 60, top = 50, ph = 250;
  const pw = W - left - right;
  const sat = r.saturate;
  const maxK = Math.max(1, ...sat.map((x) => x.aggregateKernelsPerS)) * 1.15;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="10" y="18" font-size="13" font-weight="bold">N fv guests launching ${r.options.kernelMs} ms loop kernels at once (${r.environment.accel.toUpperCase()}, policy ${r.options.policy})</text>`,
    `<text x="10" y="34" fill="#555">stacked bars: each VM's kernels/s (left axis); <tspan fill="#d62728" font-weight="bold">● device utilization</tspan> (right axis); <tspan fill="#2ca02c" font-weight="bold">● server RSS MiB / 10</tspan> (right axis, ×10)</text>`,
    `<rect x="${left}" y="${top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`,
  ];
  const y = (v: number) => top + ph - (v / maxK) * ph;
  const yr = (v: number) => top + ph - v * ph; // 0..1
  for (let k = 0; k <= 4; k++) {
    const v = (maxK * k) / 4;
    parts.push(`<text x="${left - 5}" y="${y(v) + 4}" text-anchor="end">${v.toFixed(0)}</text>`);
    parts.push(`<text x="${left + pw + 5}" y="${yr(k / 4) + 4}">${(k * 25).toFixed(0)}%</text>`);
  }
  const gw = pw / Math.max(1, sat.length);
  const colors = ['#1f77b4', '#aec7e8', '#ff7f0e', '#ffbb78', '#9467bd', '#c5b0d5', '#8c564b', '#c49c94'];
  const pts: string[] = [];
  const rssPts: string[] = [];
  sat.forEach((s, i) => {
    const x0 = left + i * gw + gw * 0.25;
    let acc = 0;
    s.perVm.forEach((v, j) => {
      parts.push(`<rect x="${x0.toFixed(1)}" y="${y(acc + v.kernelsPerS).toFixed(1)}" width="${(gw * 0.5).toFixed(1)}" height="${(y(acc) - y(acc + v.kernelsPerS)).toFixed(1)}" fill="${colors[j % colors.length]}" stroke="#fff" stroke-width="0.5"><title>${v.vm}: ${v.kernelsPerS.toFixed(2)} kernels/s</title></rect>`);
      acc += v.kernelsPerS;
    });
    parts.push(`<text x="${(x0 + gw * 0.25).toFixed(1)}" y="${top + ph + 15}" text-anchor="middle">${s.vms} VM${s.vms > 1 ? 's' : ''}</text>`);
    parts.push(`<text x="${(x0 + gw * 0.25).toFixed(1)}" y="${(y(acc) - 4).toFixed(1)}" text-anchor="middle">${acc.toFixed(1)}/s</text>`);
    pts.push(`${(x0 + gw * 0.25).toFixed(1)},${yr(s.utilization).toFixed(1)}`);
    rssPts.push(`${(x0 + gw * 0.25).toFixed(1)},${yr(Math.min(1, s.rssMiB / 1000)).toFixed(1)}`);
  });
  parts.push(`<polyline fill="none" stroke="#d62728" stroke-width="2" points="${pts.join(' ')}"/>`);
  for (const p of pts) parts.push(`<circle cx="${p.split(',')[0]}" cy="${p.split(',')[1]}" r="3" fill="#d62728"/>`);
  parts.push(`<polyline fill="none" stroke="#2ca02c" stroke-width="2" points="${rssPts.join(' ')}"/>`);
  for (const p of rssPts) parts.push(`<circle cx="${p.split(',')[0]}" cy="${p.split(',')[1]}" r="3" fill="#2ca02c"/>`);
  parts.push(`<text x="${left}" y="${H - 12}" fill="#555">slowdown per doubling: ${r.slowdownPerDoubling.map((d) => `${d.from}→${d.to}: ${pct(d.slowdown)}`).join(', ')}; mean ${pct(r.meanSlowdownPerDoubling)} (AvA: 5.7 %)</text>`);
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

function soakSvg(s: SoakResult): string {
  const W = 760, H = 300, left = 60, right = 60, top = 50, ph = 200;
  const pw = W - left - right;
  const tMax = Math.max(1, ...s.samples.map((x) => x.t));
  const rMax = Math.max(1, ...s.samples.map((x) => x.rssMiB)) * 1.1;
  const fMax = Math.max(1, ...s.samples.map((x) => x.fds)) * 1.2;
  const x = (t: number) => left + (t / tMax) * pw;
  const yr = (v: number) => top + ph - (v / rMax) * ph;
  const yf = (v: number) => top + ph - (v / fMax) * ph;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="10" y="18" font-size="13" font-weight="bold">Soak: ${s.vms} fv guests running the suite in a loop for ${s.minutes} min — ${s.runs} runs, ${s.verified} verified</text>`,
    `<text x="10" y="34" fill="#555"><tspan fill="#1f77b4" font-weight="bold">━ server RSS MiB</tspan> (left)  <tspan fill="#d62728" font-weight="bold">━ server open fds</tspan> (right)  grey: warm-up; RSS growth after warm-up ${pct(s.rssGrowth)}</text>`,
    `<rect x="${left}" y="${top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`,
    `<rect x="${left}" y="${top}" width="${(x(s.warmupS) - left).toFixed(1)}" height="${ph}" fill="#eee"/>`,
  ];
  for (let k = 0; k <= 4; k++) {
    parts.push(`<text x="${left - 5}" y="${yr((rMax * k) / 4) + 4}" text-anchor="end">${((rMax * k) / 4).toFixed(0)}</text>`);
    parts.push(`<text x="${left + pw + 5}" y="${yf((fMax * k) / 4) + 4}">${((fMax * k) / 4).toFixed(0)}</text>`);
  }
  for (let t = 0; t <= tMax; t += 60) parts.push(`<text x="${x(t).toFixed(1)}" y="${top + ph + 15}" text-anchor="middle">${t / 60} min</text>`);
  parts.push(`<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="${s.samples.map((p) => `${x(p.t).toFixed(1)},${yr(p.rssMiB).toFixed(1)}`).join(' ')}"/>`);
  parts.push(`<polyline fill="none" stroke="#d62728" stroke-width="2" points="${s.samples.map((p) => `${x(p.t).toFixed(1)},${yf(p.fds).toFixed(1)}`).join(' ')}"/>`);
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

function report(r: Result): void {
  const soakR = r.soak;
  const files = [`${BENCH}/${DEVICE}.json`];
  if (r.saturate.length) files.push(writeRel(`${BENCH}/${DEVICE}.svg`, scalingSvg(r)));
  const satHead = ['VMs', 'kernels/s (all)', 'per VM kernels/s (min–max)', 'device utilization', 'spread', 'server RSS MiB (idle → running)', 'RSS per VM MiB', 'fds (idle → running)', 'boot s', 'CPU cores ours/others'];
  const base = r.saturate[0];
  const satRows: Cell[][] = r.saturate.map((s) => [
    s.vms, s.aggregateKernelsPerS.toFixed(2),
    `${Math.min(...s.perVm.map((v) => v.kernelsPerS)).toFixed(2)}–${Math.max(...s.perVm.map((v) => v.kernelsPerS)).toFixed(2)}`,
    pct(s.utilization), pct(s.spread), `${s.rssIdleMiB} → ${s.rssMiB}`,
    base && s.vms > base.vms ? ((s.rssMiB - base.rssMiB) / (s.vms - base.vms)).toFixed(1) : '—',
    `${s.fdsIdle} → ${s.fds}`, s.bootS, `${s.cpuCores.ours.toFixed(2)}/${s.cpuCores.others.toFixed(2)}`,
  ]);
  const dHead = ['doubling', 'slowdown (saturating loop)', 'slowdown (suite, median Σ totals)'];
  const dRows: Cell[][] = r.slowdownPerDoubling.map((d) => [`${d.from} → ${d.to}`, pct(d.slowdown),
    pct(r.suiteSlowdownPerDoubling.find((x) => x.from === d.from)?.slowdown)]);
  dRows.push(['mean per doubling', pct(r.meanSlowdownPerDoubling), pct(geo(r.suiteSlowdownPerDoubling.map((d) => d.slowdown)))]);
  const suiteHead = ['VMs', 'guest MiB', 'suite ms per VM (median Σ totals)', 'per VM min–max', 'guest wall s (median)', 'init at uptime s (max)',
    'guests verified', 'benchmarks verified', 'server RSS MiB (max)', 'fds (idle → max → after)'];
  const suiteRows: Cell[][] = r.suite.map((s) => [s.vms, s.guestMiB ?? '—', s.medianSuiteMs.toFixed(0),
    `${Math.min(...s.perVm.map((v) => v.suiteMs)).toFixed(0)}–${Math.max(...s.perVm.map((v) => v.suiteMs)).toFixed(0)}`,
    median(s.perVm.map((v) => v.wallS)).toFixed(1), maxOf(s.perVm.map((v) => v.initUptimeS)),
    `${s.perVm.filter((v) => v.verified === BENCHMARKS.length).length}/${s.vms}`,
    `${s.perVm.reduce((t, v) => t + v.verified, 0)}/${s.vms * BENCHMARKS.length}`, s.rssMiB,
    s.fds ? `${s.fds.idle} → ${s.fds.max} → ${s.fds.after}` : '—']);
  const env = r.environment;
  const md = [
    `Measured ${r.date.slice(0, 10)} (${env.accel.toUpperCase()}, \`vugpu serve --mode fv\` in its own process, policy ${r.options.policy}, ` +
      `${r.options.kernelMs} ms loop kernels, ${r.options.seconds} s measured after a ${r.options.warmupS} s warm-up; host load average ${env.loadAvgAtStart[0]} at start, ` +
      `${env.loadAvgAtEnd[0]} at the end; ${r.wallS} s; VRAM slice ${r.options.sliceMiB ?? 128} MiB per VM). Raw data: \`bench/results/${BENCH}/${DEVICE}.json\`` +
      (r.saturate.length ? `; plot: \`bench/results/${BENCH}/${DEVICE}.svg\`.` : '.') +
      (r.problems.length ? ` **Problems:** ${r.problems.join('; ')}` : ''),
    ...(r.saturate.length ? ['', 'Device-saturating workload:', '', mdTable(satHead, satRows),
      '', 'Slowdown per doubling of the VMs (aggregate throughput at N over 2N, − 1; AvA: 5.7 %):', '', mdTable(dHead, dRows)] : []),
    ...(r.suite.length ? ['', 'The suite (14 benchmarks, default sizes) in N guests at once:', '', mdTable(suiteHead, suiteRows)] : []),
  ];
  if (soakR) {
    files.push(writeRel(`${BENCH}/${DEVICE}-soak.svg`, soakSvg(soakR)));
    const earlier = (soakR as { stamp?: { date?: string } }).stamp?.date;
    md.push('', `Soak${earlier ? ` (an earlier run, ${earlier.slice(0, 10)})` : ''}: ${soakR.vms} guests × ${soakR.minutes} min running the suite in a loop (raw data in the same file, plot \`bench/results/${BENCH}/${DEVICE}-soak.svg\`): ` +
      `${soakR.runs} benchmark runs, ${soakR.verified} verified; server RSS ${soakR.rssFirstMinMiB} MiB in the first minute after a ${soakR.warmupS} s warm-up, ` +
      `${soakR.rssLastMinMiB} MiB in the last (growth ${pct(soakR.rssGrowth)}); open fds ${soakR.fdsFirst} → ${soakR.fdsLast} (max ${soakR.fdsMax}).` +
      (soakR.problems.length ? ` **Problems:** ${soakR.problems.join('; ')}` : ''));
  }
  replaceSection(path.join(repoRoot, 'docs', 'results.md'), 'scaling', md.join('\n'));
  process.stdout.write([`vugpu scaling — ${env.accel.toUpperCase()}, ${r.wallS} s`,
    ...(r.saturate.length ? [textTable(satHead, satRows), '', textTable(dHead, dRows)] : []),
    ...(r.suite.length ? ['', textTable(suiteHead, suiteRows)] : []),
    ...(soakR ? ['', `soak: ${soakR.runs} runs, ${soakR.verified} verified, RSS ${soakR.rssFirstMinMiB} → ${soakR.rssLastMinMiB} MiB (${pct(soakR.rssGrowth)}), fds ${soakR.fdsFirst} → ${soakR.fdsLast}`] : []),
    ...(r.problems.length ? [`PROBLEMS:\n  ${r.problems.join('\n  ')}`] : []),
    `written ${files.map((f) => `bench/results/${f}`).join(', ')} and docs/results.md`].join('\n') + '\n');
}

/**
 * A run without a soak keeps the last soak of the current result, with the stamp it was measured
 * under: the file stays the current result of every phase.
 */
function previousSoak(): (SoakResult & { stamp?: unknown }) | null {
  const file = path.join(resultsDir, BENCH, `${DEVICE}.json`);
  if (!fs.existsSync(file)) return null;
  const old = JSON.parse(fs.readFileSync(file, 'utf8')) as { stamp?: unknown; soak?: SoakResult & { stamp?: unknown } | null };
  return old.soak ? { ...old.soak, stamp: old.soak.stamp ?? old.stamp } : null;
}

function writeRel(name: string, data: string): string {
  writeResult(name, data);
  return name;
}

function maxOf(xs: (number | null)[]): string {
  const ok = xs.filter((x): x is number => x !== null);
  return ok.length ? Math.max(...ok).toFixed(1) : '—';
}

/** A bad flag: one sentence and exit 2. */
function usage(msg: string): never {
  process.stderr.write(`bench:scaling: ${msg}\n`);
  process.exit(2);
}

function vmList(flag: string, v: string): number[] {
  const xs = v.split(',').map(Number);
  if (xs.some((n) => !Number.isInteger(n) || n < 1 || n > MAX_VMS)) usage(`--${flag} ${v}: a comma-separated list of integers 1..${MAX_VMS}.`);
  return xs;
}

function geo(xs: number[]): number | null {
  if (xs.length === 0) return null;
  return Math.exp(xs.reduce((a, x) => a + Math.log(1 + x), 0) / xs.length) - 1;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      vms: { type: 'string', default: '1,2,4,8' },
      'suite-vms': { type: 'string' },
      'guest-mib': { type: 'string', default: '384' },
      'slice-mib': { type: 'string', default: '128' },
      seconds: { type: 'string', default: '20' },
      warmup: { type: 'string', default: '5' },
      'kernel-ms': { type: 'string', default: '20' },
      policy: { type: 'string', default: 'band' },
      'no-suite': { type: 'boolean', default: false },
      'no-saturate': { type: 'boolean', default: false },
      'soak-min': { type: 'string', default: '0' },
      'soak-sample-s': { type: 'string', default: '5' },
      replot: { type: 'boolean', default: false },
    },
  });
  if (values.replot) {
    const file = path.join(resultsDir, BENCH, `${DEVICE}.json`);
    if (!fs.existsSync(file)) usage(`--replot: no result to replot (${path.relative(repoRoot, file)} does not exist).`);
    report(JSON.parse(fs.readFileSync(file, 'utf8')) as Result);
    return;
  }
  const guestMiB = Number(values['guest-mib']);
  const sliceMiB = Number(values['slice-mib']);
  if (!Number.isInteger(guestMiB) || guestMiB < 128) usage(`--guest-mib ${values['guest-mib']}: an integer of at least 128 (the guest's kernel and initramfs).`);
  if (!Number.isInteger(sliceMiB) || sliceMiB < 1 || (sliceMiB & (sliceMiB - 1)) !== 0) usage(`--slice-mib ${values['slice-mib']}: a power of two.`);
  const vms = vmList('vms', values.vms!);
  const o: Opts = {
    vms, suiteVms: values['suite-vms'] ? vmList('suite-vms', values['suite-vms']) : vms, guestMiB, sliceMiB,
    seconds: Number(values.seconds), warmupS: Number(values.warmup),
    kernelMs: Number(values['kernel-ms']), policy: values.policy!, soakMin: Number(values['soak-min']), soakSampleS: Number(values['soak-sample-s']),
  };
  const manifest = loadManifest();
  const env = environment(manifest, chooseAccel());
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-scaling-'));
  const t0 = performance.now();
  const sat: SaturateRun[] = [];
  const suites: SuiteRun[] = [];
  let soakR: SoakResult | null = null;
  try {
    if (!values['no-saturate']) for (const n of o.vms) sat.push(await saturate(manifest, dir, n, o));
    if (!values['no-suite']) {
      for (const n of o.suiteVms) {
        process.stderr.write(`[scaling] suite in ${n} guest(s) at once\n`);
        suites.push(await suite(manifest, dir, n, o));
      }
    }
    if (o.soakMin > 0) soakR = await soak(manifest, dir, o);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const d = doublings(sat, (x) => x.aggregateKernelsPerS);
  // The suite: each VM runs the same work; with N VMs sharing one device the ideal per-VM time is N × that of one.
  const sd = doublings(suites, (x) => x.vms / x.medianSuiteMs);
  const result: Result = {
    date: new Date().toISOString(),
    environment: { ...env, loadAvgAtEnd: os.loadavg().map((x) => Math.round(x * 100) / 100) },
    options: o,
    wallS: Math.round((performance.now() - t0) / 100) / 10,
    saturate: sat,
    suite: suites,
    slowdownPerDoubling: d,
    meanSlowdownPerDoubling: geo(d.map((x) => x.slowdown)),
    suiteSlowdownPerDoubling: sd,
    reference: { avaSlowdownPerDoubling: 0.057, avaSource: 'seeds/001 §4.6.4: N VMs each running OpenCL gaussian (saturates the GPU), runtime relative to N native applications' },
    soak: soakR ?? previousSoak(),
    problems: [...sat.flatMap((s) => s.problems.map((p) => `${s.vms} VMs: ${p}`)), ...suites.flatMap((s) => s.problems.map((p) => `suite ${s.vms} VMs: ${p}`))],
  };
  writeBenchResult(BENCH, DEVICE, result);
  report(result);
  if (result.problems.length || (soakR && soakR.problems.length)) process.exitCode = 1;
}

main().catch((err: Error) => {
  process.stderr.write(`[scaling] ${err.stack ?? err.message}\n`);
  process.exit(1);
});
