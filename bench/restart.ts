// Restart benchmark (npm run bench:restart): what a guest sees when vugpu serve dies or is
// replaced under it (issue 9). Per VM count (1, 2, 4 fv VMs), every guest runs
// `foundation-test --probe` (back-to-back trapped BAR0 reads; every access slower than 5 ms is
// reported with its length: guest-measured, from the access that found the server gone until it
// was served) while the host makes, per kind, EVENTS events:
//   crash    SIGKILL of the server (and its standby): a new process started with the same
//            arguments adopts the VMs (cold restart: includes the process's start-up)
//   standby  SIGKILL of the server while a standby process waits: it takes over at once
//   upgrade  `vugpu upgrade`: a new server takes over, the old one hands over and exits
// and, in the same run, the trapped-access latency (foundation-test --bench) on a plain server
// and on a restartable one (checkpointing on). Writes bench/results/restart/cpu.json and
// cpu.svg, prints a table.
//   node bench/restart.ts        (env VUGPU_BENCH_RESTARTS: events per kind and size, default 20;
//                                 VUGPU_BENCH_SIZES: e.g. "1,2,4")
//   node bench/restart.ts --in-process-only   only the in-process access cost (no guest, ~2 min),
//                                 written into the last run's restart.json as mmioInProcess
//   node bench/restart.ts --access-only       both access-cost comparisons (guests too, ~5 min),
//                                 written into the last run's restart.json (mmio, mmioInProcess)
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { native } from '../src/native.ts';
import { bootGuest, type GuestResult } from '../src/vm/launcher.ts';
import { loadManifest, type Manifest } from '../src/vm/manifest.ts';
import { chooseAccel } from '../src/vm/accel.ts';
import { nodeBinary, ServerLineage } from '../src/vm/server-process.ts';
import { KeeperClient } from '../src/persist/keeper-client.ts';
import { VfioUserClient } from '../src/device-model/client.ts';
import { benchFile, environment, quantile, repoRoot, textTable, writeBenchResult } from './lib/common.ts';

const EVENTS = Number(process.env.VUGPU_BENCH_RESTARTS ?? 20);
const SIZES = (process.env.VUGPU_BENCH_SIZES ?? '1,2,4').split(',').map(Number);
const KINDS = ['crash', 'standby', 'upgrade'] as const;
type Kind = (typeof KINDS)[number];
const PROBE = '/opt/vugpu/foundation-test.sh';
const STOP = 0x504f5453; // 'STOP' in the first word of a VM's BAR1 ends its probe
const SLICE = 64 << 20;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let manifest: Manifest;
let dir = '';

/** `vugpu serve` arguments of the benchmark's server: vms fv VMs, restartable or not. */
function serveArgs(vms: number, restartable: boolean): string[] {
  const args = ['--vram', '512M', '--engine', 'native', '--watchdog-ms', '20000'];
  if (restartable) args.push('--state-dir', dir, '--standby');
  for (let i = 0; i < vms; i++) args.push('--vm', `name=vm${i},socket=${sock(i)},mode=fv,slice=${SLICE >> 20}M`);
  return args;
}

function sock(i: number): string {
  return path.join(dir, `vm${i}.sock`);
}

async function status(): Promise<{ pid: number; server: number | null; standby: number | null }> {
  const st = await KeeperClient.statusAt(path.join(dir, 'keeper.sock'));
  if (!st) throw new Error('no keeper');
  return st;
}

async function untilStandby(): Promise<{ server: number; standby: number }> {
  for (let i = 0; i < 600; i++) {
    const st = await status();
    if (st.server !== null && st.standby !== null) return { server: st.server, standby: st.standby };
    await sleep(100);
  }
  throw new Error('no standby came up');
}

function keeperVram(keeperPid: number): number {
  for (const e of fs.readdirSync(`/proc/${keeperPid}/fd`)) {
    try {
      if (/memfd:vugpu-vram/.test(fs.readlinkSync(`/proc/${keeperPid}/fd/${e}`))) {
        const fd = native.open(`/proc/${keeperPid}/fd/${e}`, 2);
        if (fd >= 0) return fd;
      }
    } catch {
      // raced
    }
  }
  throw new Error('the keeper holds no VRAM memfd');
}

interface Stats { n: number; p50: number; p90: number; max: number; mean: number }

function stats(v: number[]): Stats {
  const r = (x: number) => Math.round(x * 10) / 10;
  return { n: v.length, p50: r(quantile(v, 0.5)), p90: r(quantile(v, 0.9)), max: r(Math.max(...v)), mean: r(v.reduce((a, b) => a + b, 0) / (v.length || 1)) };
}

const MMIO_ROUNDS = Number(process.env.VUGPU_BENCH_MMIO_ROUNDS ?? 3);
type AccessStats = Record<string, number>;

/** Field-wise median of per-round statistics. */
function medianStats(v: AccessStats[]): AccessStats {
  const out: AccessStats = {};
  for (const k of Object.keys(v[0] ?? {})) out[k] = Math.round(quantile(v.map((x) => x[k]!), 0.5) * 1000) / 1000;
  return out;
}

/**
 * Trapped-access latency as a guest sees it, on a plain and on a restartable server: rounds
 * interleaved (the order alternates), each kind's figures the median over rounds, and the
 * per-round ratio restartable / plain (the shared host's load changes between boots).
 */
async function mmioCost(): Promise<Record<string, unknown>> {
  const rounds: Record<'plain' | 'restartable', { read: AccessStats; write: AccessStats }[]> = { plain: [], restartable: [] };
  let checkpoints: unknown = null;
  for (let i = 0; i < MMIO_ROUNDS; i++) {
    const order = i % 2 === 0 ? (['plain', 'restartable'] as const) : (['restartable', 'plain'] as const);
    for (const kind of order) {
      const one = await mmioOnce(kind);
      rounds[kind].push({ read: one.read, write: one.write });
      if (kind === 'restartable') checkpoints = one.checkpoints;
    }
  }
  const ratio = (f: 'read' | 'write', k: string) =>
    Math.round(quantile(rounds.plain.map((p, i) => rounds.restartable[i]![f][k]! / p[f][k]!), 0.5) * 1000) / 1000;
  return {
    rounds: MMIO_ROUNDS,
    plain: { read_us: medianStats(rounds.plain.map((r) => r.read)), write_us: medianStats(rounds.plain.map((r) => r.write)) },
    restartable: { read_us: medianStats(rounds.restartable.map((r) => r.read)), write_us: medianStats(rounds.restartable.map((r) => r.write)) },
    ratio: { read_p50: ratio('read', 'p50'), read_mean: ratio('read', 'mean'), write_p50: ratio('write', 'p50'), write_mean: ratio('write', 'mean') },
    perRound: rounds,
    checkpoints,
  };
}

async function mmioOnce(kind: 'plain' | 'restartable'): Promise<{ read: AccessStats; write: AccessStats; checkpoints: unknown }> {
  const out: Record<string, unknown> = {};
  dir = fs.mkdtempSync(path.join(os.tmpdir(), `vugpu-restart-mmio-`));
  const s = new ServerLineage();
  s.start(serveArgs(1, kind === 'restartable'));
  await s.waitFor((r) => r.msg === 'vugpu serving', 0, 120_000);
  await sleep(300);
  const r = await bootGuest({ manifest, sockets: [sock(0)], run: PROBE, args: ['--bench', '20000'], timeoutMs: 600_000 }).done;
  const b = r.records.find((x) => x.kind === 'BENCH')?.data as Record<string, Record<string, number>> | undefined;
  if (!b) throw new Error(`no BENCH record (${kind}):\n${r.console.slice(-20).join('\n')}`);
  await stopServer(s, kind === 'restartable');
  if (kind === 'restartable') {
    const st = s.records().find((x) => x.msg === 'restartable server stopping');
    out.checkpoints = st?.checkpoints ?? null;
  }
  fs.rmSync(dir, { recursive: true, force: true });
  return { read: b.bar0_read_us as AccessStats, write: b.bar0_write_us as AccessStats, checkpoints: out.checkpoints ?? null };
}

const IN_PROCESS_ROUNDS = Number(process.env.VUGPU_BENCH_INPROC_ROUNDS ?? 6);
const IN_PROCESS_N = Number(process.env.VUGPU_BENCH_INPROC_N ?? 20000);
const DIAG_SCRATCH0 = 0x00a010;

/**
 * The same comparison without TCG: a vfio-user client in this process times BAR0 scratch reads
 * and writes (one request, one reply each) against a plain and a restartable server (its
 * standby up, so its start-up is not measured), rounds interleaved with the order alternating.
 * The guest-measured figures above carry TCG's exit and wake-up noise (±30 % between rounds on
 * this host); this one resolves the journal's per-request cost (MSG_PEEK, marks) in µs.
 */
async function mmioInProcess(): Promise<unknown> {
  const rounds: Record<'plain' | 'restartable', { read: number[]; write: number[] }[]> = { plain: [], restartable: [] };
  for (let i = 0; i < IN_PROCESS_ROUNDS; i++) {
    const order = i % 2 === 0 ? (['plain', 'restartable'] as const) : (['restartable', 'plain'] as const);
    for (const kind of order) {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-restart-inproc-'));
      const s = new ServerLineage();
      s.start(serveArgs(1, kind === 'restartable'));
      await s.waitFor((r) => r.msg === 'vugpu serving', 0, 120_000);
      if (kind === 'restartable') await untilStandby();
      await sleep(kind === 'restartable' ? 2500 : 300); // the standby's warm-up done
      const c = VfioUserClient.connect(sock(0));
      await c.version();
      await c.getInfo();
      const rd: number[] = [];
      const wr: number[] = [];
      for (let k = 0; k < 500; k++) await c.read32(0, DIAG_SCRATCH0); // warm
      for (let k = 0; k < IN_PROCESS_N; k++) {
        const t = performance.now();
        await c.read32(0, DIAG_SCRATCH0);
        rd.push((performance.now() - t) * 1000);
      }
      for (let k = 0; k < IN_PROCESS_N; k++) {
        const t = performance.now();
        await c.write32(0, DIAG_SCRATCH0 + 4, k);
        wr.push((performance.now() - t) * 1000);
      }
      c.close();
      await stopServer(s, kind === 'restartable');
      fs.rmSync(dir, { recursive: true, force: true });
      rounds[kind].push({ read: rd, write: wr });
      process.stdout.write(`  in-process round ${i + 1}/${IN_PROCESS_ROUNDS} ${kind}: read p50 ${quantile(rd, 0.5).toFixed(1)} µs, write p50 ${quantile(wr, 0.5).toFixed(1)} µs\n`);
    }
  }
  const r3 = (x: number) => Math.round(x * 1000) / 1000;
  const per = (kind: 'plain' | 'restartable', f: 'read' | 'write', q: number) => rounds[kind].map((x) => quantile(x[f], q));
  const ratios = (f: 'read' | 'write', q: number) => per('restartable', f, q).map((v, i) => r3(v / per('plain', f, q)[i]!));
  return {
    what: 'BAR0 scratch register, one REGION_READ/REGION_WRITE and its reply per access, vfio-user client in the benchmark process (no guest), µs',
    date: new Date().toISOString(), rounds: IN_PROCESS_ROUNDS, accessesPerRound: IN_PROCESS_N,
    loadAvg: os.loadavg().map((x) => Math.round(x * 100) / 100),
    p50Us: {
      plain: { read: r3(quantile(per('plain', 'read', 0.5), 0.5)), write: r3(quantile(per('plain', 'write', 0.5), 0.5)) },
      restartable: { read: r3(quantile(per('restartable', 'read', 0.5), 0.5)), write: r3(quantile(per('restartable', 'write', 0.5), 0.5)) },
    },
    ratioPerRound: { readP50: ratios('read', 0.5), writeP50: ratios('write', 0.5), readP90: ratios('read', 0.9), writeP90: ratios('write', 0.9) },
    ratioMedian: { readP50: r3(quantile(ratios('read', 0.5), 0.5)), writeP50: r3(quantile(ratios('write', 0.5), 0.5)) },
  };
}

async function stopServer(s: ServerLineage, restartable: boolean): Promise<void> {
  if (restartable) {
    try {
      const st = await status();
      if (st.server) process.kill(st.server, 'SIGTERM');
    } catch {
      // gone
    }
  } else {
    for (const p of s.procs) p.kill('SIGTERM');
  }
  await sleep(1500);
  for (const p of s.procs) p.kill('SIGKILL');
}

interface Event { kind: Kind; t: number; serverPauseMs: number | null; lost: number[] }

async function pauses(n: number): Promise<Record<Kind, unknown>> {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), `vugpu-restart-${n}-`));
  const s = new ServerLineage();
  s.start(serveArgs(n, true));
  await s.waitFor((r) => r.msg === 'restartable serving: fds held outside the process', 0, 180_000);
  const slices: number[] = [];
  for (let i = 0; i < n; i++) slices.push((await s.waitFor((r) => r.msg === 'vgpu attached' && r.vm === `vm${i}`, 0, 1000)).sliceBase as number);
  // Guests: the probe, with its slow accesses stamped as they arrive.
  const seen: { t: number; ms: number; ok: boolean }[][] = [];
  const started: boolean[] = [];
  const guests: Promise<GuestResult>[] = [];
  for (let i = 0; i < n; i++) {
    seen.push([]);
    started.push(false);
    guests.push(bootGuest({
      manifest, sockets: [sock(i)], run: PROBE, args: ['--probe', '7200'], timeoutMs: 7_500_000,
      onLine: (_l, rec) => {
        if (rec?.kind === 'PAUSE') seen[i]!.push({ t: performance.now(), ms: rec.data.ms as number, ok: rec.data.value_ok === true });
        if (rec?.kind === 'PHASE' && rec.data.phase === 'probe') started[i] = true;
      },
    }).done);
  }
  while (started.some((x) => !x)) await sleep(200);
  await sleep(2000);
  const events: Event[] = [];
  for (const kind of KINDS) {
    for (let e = 0; e < EVENTS; e++) {
      const st = await untilStandby();
      await sleep(500 + Math.random() * 1500);
      const from = s.lines.length;
      const t = performance.now();
      if (kind === 'upgrade') {
        const p = spawn(nodeBinary(), [path.join(repoRoot, 'src/cli.ts'), 'upgrade', '--state-dir', dir], { cwd: repoRoot, stdio: 'ignore' });
        await new Promise((r) => p.once('exit', r));
        const r = await s.waitFor((x) => x.event === 'upgrade-adopted', from, 60_000);
        events.push({ kind, t, serverPauseMs: r.pauseMs as number | null, lost: r.lostChannels as number[] });
      } else {
        if (kind === 'crash') process.kill(st.standby, 'SIGKILL');
        process.kill(st.server, 'SIGKILL');
        if (kind === 'crash') {
          await sleep(100);
          s.start();
        }
        const r = await s.waitFor((x) => x.event === 'restart-adopted', from, 60_000);
        events.push({ kind, t, serverPauseMs: r.pauseMs as number | null, lost: r.lostChannels as number[] });
      }
      process.stdout.write(`  ${n} VM(s) ${kind} ${e + 1}/${EVENTS}: server-side pause ${events.at(-1)!.serverPauseMs} ms\n`);
    }
  }
  await sleep(3000);
  // End the probes: STOP into each VM's VRAM (BAR1 word 0).
  const st = await status();
  const vram = keeperVram(st.pid);
  const word = new Uint8Array(4);
  new DataView(word.buffer).setUint32(0, STOP, true);
  for (const base of slices) native.pwrite(vram, word, base);
  native.close(vram);
  const results = await Promise.all(guests);
  await stopServer(s, true);
  fs.rmSync(dir, { recursive: true, force: true });
  // Per event and guest: the longest access between this event and the next.
  const out = {} as Record<Kind, unknown>;
  for (const kind of KINDS) {
    const guestMs: number[] = [];
    let bad = 0;
    const evs = events.filter((x) => x.kind === kind);
    for (const ev of evs) {
      const next = events[events.indexOf(ev) + 1]?.t ?? Infinity;
      for (let g = 0; g < n; g++) {
        const inWin = seen[g]!.filter((p) => p.t >= ev.t && p.t < next);
        guestMs.push(inWin.length ? Math.max(...inWin.map((p) => p.ms)) : 0);
        bad += inWin.filter((p) => !p.ok).length;
      }
    }
    out[kind] = {
      guestPauseMs: stats(guestMs),
      serverPauseMs: stats(evs.map((x) => x.serverPauseMs ?? 0)),
      badReads: bad,
      lostChannels: evs.reduce((a, x) => a + x.lost.length, 0),
      samples: guestMs.map((x) => Math.round(x * 10) / 10),
    };
  }
  const probes = results.map((r) => r.records.find((x) => x.kind === 'PROBE')?.data ?? null);
  (out as Record<string, unknown>).probes = probes;
  (out as Record<string, unknown>).qemuExit = results.map((r) => ({ exit: r.exitCode, signal: r.signal, timedOut: r.timedOut }));
  return out;
}

function svg(sizes: Record<string, Record<Kind, { guestPauseMs: Stats; samples: number[] }>>): string {
  const W = 760;
  const H = 360;
  const m = { l: 60, r: 20, t: 40, b: 50 };
  const all = Object.values(sizes).flatMap((s) => KINDS.flatMap((k) => s[k].samples));
  const ymax = Math.max(100, ...all) * 1.1;
  const y = (v: number) => m.t + (H - m.t - m.b) * (1 - v / ymax);
  const ns = Object.keys(sizes);
  const colW = (W - m.l - m.r) / (KINDS.length * ns.length + KINDS.length);
  const color: Record<Kind, string> = { crash: '#c0392b', standby: '#e67e22', upgrade: '#2980b9' };
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<text x="${W / 2}" y="18" text-anchor="middle" font-size="13">Pause a guest sees per restart (guest-measured, ms): crash (cold), crash with standby, live upgrade</text>`,
    `<line x1="${m.l}" y1="${m.t}" x2="${m.l}" y2="${H - m.b}" stroke="#333"/>`,
    `<line x1="${m.l}" y1="${H - m.b}" x2="${W - m.r}" y2="${H - m.b}" stroke="#333"/>`,
  ];
  for (let i = 0; i <= 5; i++) {
    const v = (ymax / 5) * i;
    parts.push(`<text x="${m.l - 6}" y="${y(v) + 4}" text-anchor="end">${Math.round(v)}</text>`, `<line x1="${m.l}" y1="${y(v)}" x2="${W - m.r}" y2="${y(v)}" stroke="#eee"/>`);
  }
  KINDS.forEach((k, ki) => {
    ns.forEach((n, ni) => {
      const x0 = m.l + colW * (ki * (ns.length + 1) + ni + 0.5);
      const s = sizes[n]![k];
      for (const v of s.samples) parts.push(`<circle cx="${x0 + colW / 2 + (Math.random() - 0.5) * colW * 0.5}" cy="${y(v)}" r="2" fill="${color[k]}" fill-opacity="0.45"/>`);
      parts.push(`<line x1="${x0 + colW * 0.15}" x2="${x0 + colW * 0.85}" y1="${y(s.guestPauseMs.p50)}" y2="${y(s.guestPauseMs.p50)}" stroke="#000" stroke-width="2"/>`);
      parts.push(`<text x="${x0 + colW / 2}" y="${H - m.b + 14}" text-anchor="middle">${n} VM${n === '1' ? '' : 's'}</text>`);
    });
    const xc = m.l + colW * (ki * (ns.length + 1) + ns.length / 2 + 0.5);
    parts.push(`<text x="${xc}" y="${H - m.b + 32}" text-anchor="middle" font-weight="bold" fill="${color[k]}">${k}</text>`);
  });
  parts.push(`<text x="14" y="${H / 2}" transform="rotate(-90 14 ${H / 2})" text-anchor="middle">ms (bar: median)</text>`, '</svg>');
  return parts.join('\n');
}

async function main(): Promise<void> {
  const inProcessOnly = process.argv.includes('--in-process-only');
  if (inProcessOnly || process.argv.includes('--access-only')) {
    // Only the access cost (in process; with --access-only also guest-measured), written into
    // the last full run's results (each part carries its own date).
    const file = benchFile('restart', 'cpu');
    const last = JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, unknown>;
    if (!inProcessOnly) {
      manifest = loadManifest();
      last.mmio = { ...(await mmioCost()) as Record<string, unknown>, date: new Date().toISOString(), loadAvg: os.loadavg() };
      console.log('trapped access, guest-measured:', JSON.stringify(last.mmio));
    }
    last.mmioInProcess = await mmioInProcess();
    writeBenchResult('restart', 'cpu', last);
    console.log('trapped access, in process:', JSON.stringify(last.mmioInProcess));
    return;
  }
  manifest = loadManifest();
  const accel = chooseAccel('auto');
  const env = environment(manifest, accel);
  const t0 = performance.now();
  console.log(`restart bench: ${EVENTS} events per kind, VM counts ${SIZES.join(', ')} (${accel.accel})`);
  const mmio = await mmioCost();
  const mmioInProc = await mmioInProcess();
  const sizes: Record<string, Record<Kind, { guestPauseMs: Stats; samples: number[] }>> = {};
  for (const n of SIZES) sizes[String(n)] = (await pauses(n)) as Record<Kind, { guestPauseMs: Stats; samples: number[] }>;
  const result = { environment: { ...env, loadAvgAtEnd: os.loadavg().map((x) => Math.round(x * 100) / 100) }, eventsPerKind: EVENTS, mmio, mmioInProcess: mmioInProc, sizes, wallS: Math.round((performance.now() - t0) / 1000) };
  writeBenchResult('restart', 'cpu', result);
  fs.writeFileSync(benchFile('restart', 'cpu', undefined, 'svg'), svg(sizes));
  const rows = SIZES.flatMap((n) => KINDS.map((k) => {
    const s = sizes[String(n)]![k] as unknown as { guestPauseMs: Stats; serverPauseMs: Stats; badReads: number; lostChannels: number };
    return [n, k, s.guestPauseMs.p50, s.guestPauseMs.p90, s.guestPauseMs.max, s.serverPauseMs.p50, s.badReads];
  }));
  console.log(textTable(['VMs', 'kind', 'guest p50 ms', 'p90', 'max', 'server p50', 'bad reads'], rows));
  console.log('trapped access (µs):', JSON.stringify(mmio));
  console.log(`written bench/results/restart/cpu.json and cpu.svg (${result.wallS} s)`);
}

main().then(() => process.exit(0), (err: unknown) => {
  console.error(err);
  process.exit(1);
});
