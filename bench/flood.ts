// A flood of distinct program modules against a co-tenant's launch latency, with real guests
// (npm run bench:flood; issue 13: "the canary's launch latency stays within 10 % of its solo
// figure"). bench/programs.ts measures the same in-process; this is the QEMU version.
//
// One `vugpu serve --mode fv` process, two fv guests; programs run on the default program device
// (lavapipe here):
//   canary    programs.sh --latency MS: the built-in NOP program launched back to back through the
//             driver and the runtime's program API, launch → vgSynchronize on the guest clock; one
//             `VUGPU-LAT {p50_us, mean_us, p99_us, ok}` per 250 ms window, each window ending with
//             one small vecadd checked against the CPU ("ok").
//   attacker  hostile.sh flood-bursts: driverless, --bursts flood bursts of --flood distinct
//             modules each (new constants every burst: every launch a new compile), each followed
//             by as long an idle period; with the control on, a control burst after each flood burst
//             (the same guest work — module generation, VRAM writes, launches, polling — but one
//             module, so cache hits) as long as it, and its idle period. PHASE markers at each
//             burst's start and end.
// The canary boots first and runs alone for --solo-s (the baseline with no attacker at all).
// Every line is stamped with the host's receive time; a canary window [previous record, this
// record] wholly inside a flood burst is "flood", inside a control burst "control", inside an
// idle period after the attacker's first burst "solo", before the attacker booted "baseline".
// ratio = median of the flood windows' p50 / median of the solo windows' p50 (solo and flood
// interleave, so slow drifts of this shared 2-core host hit both). The goal (≤ 1.10) is reported,
// not asserted; correctness is: every canary window ok, every flood burst verified all its
// modules, compile CPU seen on the server's nice-19 thread during every flood burst, the server
// alive with no error lines.
//
// Compiles: ProgramCache.lookup (src/gpu/programs.ts) hands every new module to
// VulkanBackend.compile → submitProgramCompile (native/src/vulkan/napi.cc), which enqueues it with
// background=true: native/src/pool.cc's one background worker, setpriority(…, 19) on its own tid.
// The server does not count compiles in /metrics, so the bench reads that thread's CPU time
// (/proc/<pid>/task/*/stat, nice 19) at every phase boundary: compile CPU per burst.
//   node bench/flood.ts [--flood 256] [--bursts 4] [--solo-s 10] [--window-ms 250] [--no-control] [--out flood] [--seed N]
//                       [--compile-nice N]   (diagnostic: renice the server's compile lane from 19 to N)
//                       [--attacker-nice N]  (diagnostic: the attacker guest's QEMU at nice N, as on a host
//                                             where the canary's vCPU has a core of its own; a 2-core
//                                             host otherwise shares its CPUs between the two emulators)
//   node bench/flood.ts --replot [--out flood]   (the plot again from the JSON)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { bootGuest, type GuestVm } from '../src/vm/launcher.ts';
import { loadManifest } from '../src/vm/manifest.ts';
import { chooseAccel } from '../src/vm/accel.ts';
import { startServer, type ServerProcess } from '../src/vm/server-process.ts';
import { benchFile, environment, median, type Environment, outVariant, resultDevice, textTable, writeBenchResult, freePort } from './lib/common.ts';

const PROGRAMS = '/opt/vugpu/programs.sh';
const HOSTILE = '/opt/vugpu/hostile.sh';
const GOAL = 1.1;
const TICK_MS = 10; // USER_HZ = 100
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Opts {
  flood: number; bursts: number; soloS: number; windowMs: number; control: boolean; out: string;
  /** Diagnostic: renice the server's compile lane to this (the lane runs at 19). */
  compileNice?: number;
  /** Diagnostic: the attacker guest's QEMU (every thread of its process tree) at this nice. */
  attackerNice?: number;
  /**
   * The attacker's seed: burst i's modules carry constants (seed + i)·2^16 + 0x100·k. Random per
   * run: Mesa keeps an on-disk shader cache (lavapipe), and modules it has compiled in an earlier
   * run are cache hits there, not compiles (a repeated seed measured 0.9× where new modules gave 35×).
   */
  seed: number;
}

type Kind = 'baseline' | 'solo' | 'flood' | 'control' | 'other';

interface Window {
  /** Host receive time of the record, s since the canary's first window. */
  t: number;
  /** The window's span on the host clock, s (previous record → this one). */
  from: number;
  n: number;
  p50Us: number;
  meanUs: number;
  p99Us: number;
  maxUs: number;
  ok: boolean;
  kind: Kind;
  /** The attacker phase it fell in (burst number), if any. */
  burst?: number;
}

/** Per server thread (tid): on-CPU and run-queue-wait ns (/proc/…/schedstat), its nice. */
type Threads = Map<string, { cpuNs: number; waitNs: number; nice: number }>;

/** CPU counters at one instant (ticks of 10 ms). */
interface Snap {
  t: number;
  hostBusy: number;
  hostTotal: number;
  compile: number;
  serverOther: number;
  attacker: number;
  canary: number;
  load1: number;
  threads: Threads;
}

interface Burst {
  burst: number;
  kind: 'flood' | 'control';
  start: number;
  end: number;
  /** Idle period after it, until the next burst-start (or bursts-done). */
  idleEnd: number;
  check?: Record<string, unknown>;
  snapStart?: Snap;
  snapEnd?: Snap;
  snapIdleEnd?: Snap;
}

function ticksOf(stat: string): { ticks: number; nice: number } {
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { ticks: Number(f[11]) + Number(f[12]), nice: Number(f[16]) }; // fields 14, 15, 19
}

/** Threads seen at nice 19 (the compile lane, and what it started), by tid. */
const laneTids = new Set<string>();

/**
 * The server's threads: CPU of its nice-19 ones (the compile lane) and of the rest; how many
 * nice-19. With renice (the --compile-nice diagnostic) those threads are set to that nice value.
 */
function serverTicks(pid: number, renice?: number): { compile: number; other: number; niceThreads: number } {
  let compile = 0, other = 0, niceThreads = 0;
  try {
    for (const task of fs.readdirSync(`/proc/${pid}/task`)) {
      try {
        const s = ticksOf(fs.readFileSync(`/proc/${pid}/task/${task}/stat`, 'utf8'));
        if (s.nice === 19) laneTids.add(task);
        if (laneTids.has(task)) {
          if (renice !== undefined && s.nice !== renice) os.setPriority(Number(task), renice);
          compile += s.ticks;
          niceThreads++;
        } else other += s.ticks;
      } catch {
        // thread gone
      }
    }
  } catch {
    // server gone: the checks after the run say so
  }
  return { compile, other, niceThreads };
}

function serverThreads(pid: number): Threads {
  const m: Threads = new Map();
  try {
    for (const task of fs.readdirSync(`/proc/${pid}/task`)) {
      try {
        const comm = fs.readFileSync(`/proc/${pid}/task/${task}/comm`, 'utf8').trim();
        const nice = ticksOf(fs.readFileSync(`/proc/${pid}/task/${task}/stat`, 'utf8')).nice;
        const [cpu, wait] = fs.readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'utf8').trim().split(' ').map(Number);
        m.set(`${task} ${comm}${nice ? ` nice ${nice}` : ''}`, { cpuNs: cpu!, waitNs: wait!, nice });
      } catch {
        // thread gone
      }
    }
  } catch {
    // server gone
  }
  return m;
}

/**
 * Per server thread, mean cores on CPU and waiting for one (run queue) between two snaps; only
 * threads that did something. Where the flood's CPU went, and who waited for a CPU.
 */
function threadCores(a: Snap | undefined, b: Snap | undefined): Record<string, { cpu: number; runqWait: number }> {
  const out: Record<string, { cpu: number; runqWait: number }> = {};
  if (!a || !b || b.t <= a.t) return out;
  const ns = (b.t - a.t) * 1e9;
  for (const [k, v] of b.threads) {
    const p = a.threads.get(k) ?? { cpuNs: 0, waitNs: 0 };
    const cpu = (v.cpuNs - p.cpuNs) / ns, wait = (v.waitNs - p.waitNs) / ns;
    if (cpu >= 0.01 || wait >= 0.01) out[k] = { cpu: r3(cpu), runqWait: r3(wait) };
  }
  return out;
}

/** utime + stime of a process tree (timeout → QEMU), ticks. */
/** pid and every process below it (a guest's QEMU under its launcher), while they exist. */
function treePids(pid: number | undefined, out: number[] = []): number[] {
  if (pid === undefined) return out;
  try {
    out.push(pid);
    for (const task of fs.readdirSync(`/proc/${pid}/task`)) {
      const kids = fs.readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').trim();
      for (const k of kids ? kids.split(' ') : []) treePids(Number(k), out);
    }
  } catch {
    // exited
  }
  return out;
}

function treeTicks(pid: number | undefined): number {
  let t = 0;
  for (const p of treePids(pid)) {
    try {
      t += ticksOf(fs.readFileSync(`/proc/${p}/stat`, 'utf8')).ticks;
    } catch {
      // exited
    }
  }
  return t;
}

/** Every thread of pid's process tree to nice `nice` (threads QEMU starts later: the next call). */
function reniceTree(pid: number | undefined, nice: number): void {
  for (const p of treePids(pid)) {
    try {
      for (const task of fs.readdirSync(`/proc/${p}/task`)) os.setPriority(Number(task), nice);
    } catch {
      // exited
    }
  }
}

function hostTicks(): { busy: number; total: number } {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
  const idle = (f[3] ?? 0) + (f[4] ?? 0);
  return { busy: f.slice(0, 8).reduce((a, b) => a + b, 0) - idle, total: f.slice(0, 8).reduce((a, b) => a + b, 0) };
}

interface Lat { windows: number; p50Us: number; meanUs: number; p99Us: number }

function summarize(ws: Window[]): Lat {
  return {
    windows: ws.length,
    p50Us: median(ws.map((w) => w.p50Us)),
    meanUs: median(ws.map((w) => w.meanUs)),
    p99Us: median(ws.map((w) => w.p99Us)),
  };
}

const r2 = (x: number) => Math.round(x * 100) / 100;
const r3 = (x: number) => Math.round(x * 1000) / 1000;

/** Cores used between two snaps, per counter. */
function cores(a: Snap | undefined, b: Snap | undefined): Record<string, number> | null {
  if (!a || !b || b.t <= a.t) return null;
  const s = (b.t - a.t) * 1000 / TICK_MS;
  return {
    compile: r2((b.compile - a.compile) / s), serverOther: r2((b.serverOther - a.serverOther) / s),
    attackerQemu: r2((b.attacker - a.attacker) / s), canaryQemu: r2((b.canary - a.canary) / s),
    host: r2(((b.hostBusy - a.hostBusy) / Math.max(1, b.hostTotal - a.hostTotal)) * os.cpus().length),
  };
}

interface Result {
  what: string;
  date: string;
  environment: Environment & { loadAvgAtEnd: number[] };
  programDevice: string;
  options: Opts;
  wallS: number;
  goal: number;
  baseline: Lat;
  solo: Lat;
  flood: Lat;
  control: Lat | null;
  ratioP50: number;
  ratioMean: number;
  /** Control bursts (one cached module) over solo: what any busy co-tenant costs. */
  controlRatioP50: number | null;
  controlRatioMean: number | null;
  /** Flood over control: what the compiles themselves cost. */
  floodOverControlP50: number | null;
  baselineRatioP50: number;
  /** Per flood burst: its windows' median p50 over the median p50 of its own idle period. */
  perBurst: { burst: number; kind: string; windows: number; p50Us: number; idleWindows: number; idleP50Us: number; ratio: number }[];
  bursts: {
    burst: number; kind: string; ms: number; modules: number; distinctModules: number; verified: number; rounds: number; launches: number;
    /** CPU of the server's nice-19 thread(s) during the burst (compile), ms; per compiled module. */
    compileCpuMs: number; compileCpuMsPerModule: number | null;
    /** Mean cores used during the burst and during its idle period. */
    coresBurst: Record<string, number> | null; coresIdle: Record<string, number> | null;
    loadAvg1: number;
  }[];
  /** Mean cores per phase kind over all bursts of that kind (compile lane, server rest, each QEMU, host). */
  coresByKind: Record<string, Record<string, number>>;
  /** Per phase kind, per server thread ("tid comm [nice]"): mean cores on CPU and waiting in the run queue (first burst of the kind). */
  threadsByKind: Record<string, Record<string, { cpu: number; runqWait: number }>>;
  niceThreads: number;
  loadAvg1: { min: number; median: number; max: number };
  windows: Window[];
  problems: string[];
}

async function run(o: Opts): Promise<Result> {
  const t0 = performance.now();
  const manifest = loadManifest();
  for (const f of ['/opt/vugpu/vugpu-programs', PROGRAMS, '/programs/builtins/nop.spv', '/programs/vecadd.spv', HOSTILE, '/opt/vugpu/vugpu-hostile']) {
    if (!manifest.guestFiles.includes(f)) throw new Error(`the guest image lacks ${f}: run npm run setup`);
  }
  const env = environment(manifest, chooseAccel());
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-flood-'));
  const canarySock = path.join(dir, 'canary.sock');
  const attackerSock = path.join(dir, 'attacker.sock');
  const port = await freePort();
  const problems: string[] = [];
  // The --socket VM is vm0: the canary.
  const server: ServerProcess = await startServer({
    socket: canarySock, readyTimeoutMs: 120_000,
    args: ['--mode', 'fv', '--vm', `name=attacker,socket=${attackerSock},mode=fv`, '--vram', '512M',
      '--metrics-port', String(port), '--watchdog-ms', '60000', '--log-level', 'info'],
  });
  const guests: GuestVm[] = [];
  const loads: number[] = [];
  const loadTimer = setInterval(() => loads.push(os.loadavg()[0]!), 1000);
  try {
    for (let i = 0; i < 600 && !fs.existsSync(attackerSock); i++) await sleep(100);
    let programDevice = 'unknown';
    for (let i = 0; i < 300; i++) {
      try {
        const m = (await (await fetch(`http://127.0.0.1:${port}/metrics.json`)).json()) as { engine?: { device: string }; vms: unknown[] };
        if (m.vms.length === 2) {
          programDevice = m.engine?.device ?? 'none';
          break;
        }
      } catch {
        // not listening yet
      }
      await sleep(100);
    }
    if (programDevice === 'none' || programDevice === 'unknown') throw new Error(`the server has no program device (${programDevice}):\n${server.tail()}`);

    const pid = server.pid!;
    let canary: GuestVm | null = null;
    let attacker: GuestVm | null = null;
    let niceThreads = 0;
    const snap = (): Snap => {
      const h = hostTicks();
      const s = serverTicks(pid, o.compileNice);
      if (o.attackerNice !== undefined) reniceTree(attacker?.child.pid, o.attackerNice);
      niceThreads = Math.max(niceThreads, s.niceThreads);
      return {
        t: performance.now() / 1000, hostBusy: h.busy, hostTotal: h.total, compile: s.compile, serverOther: s.other,
        attacker: treeTicks(attacker?.child.pid), canary: treeTicks(canary?.child.pid), load1: os.loadavg()[0]!,
        threads: serverThreads(pid),
      };
    };

    // ---- canary: boots first, alone
    const raw: { at: number; d: Record<string, unknown> }[] = [];
    // Far longer than the run needs: stopped once the attacker is done.
    const canaryMs = 600_000;
    canary = bootGuest({
      manifest, sockets: [canarySock], run: '/bin/sh', args: [PROGRAMS, '--latency', String(canaryMs), '--window-ms', String(o.windowMs)],
      timeoutMs: canaryMs + 120_000, memoryMiB: 256,
      onLine: (_l, rec) => {
        if (rec?.kind === 'LAT') raw.push({ at: performance.now() / 1000, d: rec.data });
      },
    });
    guests.push(canary);
    const first = await canary.waitFor((r) => r.kind === 'LAT' || r.kind === 'CHECK' || r.kind === 'ERROR');
    if (first.kind !== 'LAT') throw new Error(`the canary did not start launching (${first.kind} ${JSON.stringify(first.data)}):\n${canary.console.slice(-20).join('\n')}`);
    process.stderr.write(`[flood] canary launching; ${o.soloS} s alone, then the attacker boots\n`);
    await sleep(o.soloS * 1000);
    if (canary.records.some((r) => r.kind === 'CHECK')) throw new Error(`the canary stopped early:\n${canary.console.slice(-20).join('\n')}`);

    // ---- attacker
    const attackerBoot = performance.now() / 1000;
    // --attacker-nice: every thread of the attacker's QEMU, including those it starts later.
    const renicer = o.attackerNice !== undefined ? setInterval(() => reniceTree(attacker?.child.pid, o.attackerNice!), 200).unref() : null;
    const bursts: Burst[] = [];
    let done = false;
    attacker = bootGuest({
      manifest, sockets: [attackerSock], run: '/bin/sh', memoryMiB: 256, timeoutMs: 400_000,
      args: [HOSTILE, 'flood-bursts', '--flood', String(o.flood), '--bursts', String(o.bursts), '--control', o.control ? '1' : '0', '--seed', String(o.seed)],
      onLine: (_l, rec) => {
        const at = performance.now() / 1000;
        if (rec?.kind === 'PHASE') {
          const b = Number(rec.data.burst);
          const s = snap();
          if (rec.data.phase === 'burst-start') {
            const prev = bursts.at(-1);
            if (prev) {
              prev.idleEnd = at;
              prev.snapIdleEnd = s;
            }
            bursts.push({ burst: b, kind: rec.data.kind === 'control' ? 'control' : 'flood', start: at, end: NaN, idleEnd: NaN, snapStart: s });
            process.stderr.write(`[flood] burst ${b} (${String(rec.data.kind)}) started\n`);
          } else if (rec.data.phase === 'burst-end') {
            const cur = bursts.find((x) => x.burst === b);
            if (cur) {
              cur.end = at;
              cur.snapEnd = s;
            }
          } else if (rec.data.phase === 'bursts-done') {
            const prev = bursts.at(-1);
            if (prev) {
              prev.idleEnd = at;
              prev.snapIdleEnd = s;
            }
            done = true;
          }
        } else if (rec?.kind === 'CHECK' && rec.data.check === 'flood-burst') {
          const cur = bursts.find((x) => x.burst === Number(rec.data.burst));
          if (cur) cur.check = rec.data;
        }
      },
    });
    guests.push(attacker);
    const end = await attacker.waitFor((r) => r.kind === 'PHASE' && r.data.phase === 'bursts-done');
    if (end.kind === 'VM_EXITED' || !done) {
      throw new Error(`the attacker stopped before its bursts were done:\n${attacker.console.slice(-20).join('\n')}\n--- server\n${server.tail(20)}`);
    }
    await sleep(o.windowMs * 2);
    const canaryChecks = canary.records.filter((r) => r.kind === 'CHECK');
    // The server's state before the canary is killed mid-launch (its disconnect is not the bench's finding).
    if (!server.alive) problems.push('the server exited');
    problems.push(...server.errorLines().slice(0, 5).map((l) => `server: ${l}`));
    await Promise.all(guests.map((g) => g.kill()));
    const attackerResult = await attacker.done;
    if (renicer) clearInterval(renicer);
    if (attackerResult.guestExit !== null && attackerResult.guestExit !== 0) problems.push(`the attacker exited ${attackerResult.guestExit}`);
    if (canaryChecks.length) problems.push(`the canary ended early: ${JSON.stringify(canaryChecks[0]!.data).slice(0, 300)}`);

    // ---- classify the canary's windows
    const tBase = raw[0]!.at;
    const firstBurst = bursts[0]?.start ?? Infinity;
    const windows: Window[] = raw.map((x, i) => {
      const at = x.at;
      const from = i > 0 ? raw[i - 1]!.at : at - o.windowMs / 1000;
      let kind: Kind = 'other';
      let burst: number | undefined;
      if (at <= attackerBoot) kind = 'baseline';
      else if (from >= firstBurst) {
        for (const b of bursts) {
          if (from >= b.start && at <= b.end) {
            kind = b.kind;
            burst = b.burst;
          } else if (from >= b.end && at <= b.idleEnd) {
            kind = 'solo';
            burst = b.burst;
          }
        }
      }
      return {
        t: r3(at - tBase), from: r3(from - tBase), n: Number(x.d.n), p50Us: Number(x.d.p50_us), meanUs: Number(x.d.mean_us),
        p99Us: Number(x.d.p99_us), maxUs: Number(x.d.max_us), ok: x.d.ok === true, kind, burst,
      };
    });
    const of = (k: Kind) => windows.filter((w) => w.kind === k);
    const bad = windows.filter((w) => !w.ok);
    if (bad.length) problems.push(`${bad.length} of ${windows.length} canary windows not ok (first at ${bad[0]!.t} s)`);
    for (const b of bursts) {
      const c = b.check;
      if (!c) problems.push(`burst ${b.burst}: no flood-burst record`);
      else if (c.ok !== true || c.verified !== c.modules) problems.push(`burst ${b.burst} (${b.kind}): ${String(c.verified)} of ${String(c.modules)} modules verified (${String(c.err_name)})`);
      if (b.kind === 'flood' && c && c.distinct_modules !== o.flood) problems.push(`burst ${b.burst}: ${String(c.distinct_modules)} distinct modules, not ${o.flood}`);
    }
    const nFlood = bursts.filter((b) => b.kind === 'flood').length;
    if (nFlood !== o.bursts) problems.push(`${nFlood} flood bursts seen, ${o.bursts} asked for`);
    if (niceThreads === 0) problems.push('the server has no nice-19 thread: program compiles are not on the background lane');
    for (const k of ['baseline', 'solo', 'flood', ...(o.control ? ['control'] : [])] as Kind[]) {
      if (of(k).length < 3) problems.push(`only ${of(k).length} ${k} windows: bursts or periods too short for ${o.windowMs} ms windows`);
    }

    const burstRows: Result['bursts'] = bursts.map((b) => {
      const c = b.check ?? {};
      const compileCpuMs = b.snapStart && b.snapEnd ? (b.snapEnd.compile - b.snapStart.compile) * TICK_MS : NaN;
      // Compiles in a flood burst: every module, and the first one again at its end when the burst
      // was larger than the per-VM cache (64 programs, src/gpu/programs.ts); in a control burst at
      // most the one module.
      const compiled = b.kind === 'flood' ? Number(c.modules ?? 0) + (Number(c.modules ?? 0) > 64 ? 1 : 0) : 1;
      return {
        burst: b.burst, kind: b.kind, ms: Number(c.ms ?? NaN), modules: Number(c.modules ?? 0), distinctModules: Number(c.distinct_modules ?? 0),
        verified: Number(c.verified ?? 0), rounds: Number(c.rounds ?? 0), launches: Number(c.launches ?? 0),
        compileCpuMs, compileCpuMsPerModule: b.kind === 'flood' && compiled > 0 ? r2(compileCpuMs / compiled) : null,
        coresBurst: cores(b.snapStart, b.snapEnd), coresIdle: cores(b.snapEnd, b.snapIdleEnd), loadAvg1: r2(b.snapStart?.load1 ?? NaN),
      };
    });
    for (const b of burstRows) {
      // A flood burst must show compile work on the nice-19 lane (≥ 1 tick per 10 modules).
      if (b.kind === 'flood' && !(b.compileCpuMs >= (b.modules / 10) * TICK_MS)) problems.push(`burst ${b.burst}: only ${b.compileCpuMs} ms of CPU on the compile lane for ${b.modules} modules`);
    }
    const coresByKind: Record<string, Record<string, number>> = {};
    for (const [k, pick] of [['flood', (b: Burst) => [b.snapStart, b.snapEnd]], ['control', (b: Burst) => [b.snapStart, b.snapEnd]], ['idle', (b: Burst) => [b.snapEnd, b.snapIdleEnd]]] as const) {
      const rows = bursts.filter((b) => k === 'idle' || b.kind === k).map((b) => cores(...(pick(b) as [Snap | undefined, Snap | undefined]))).filter((x): x is Record<string, number> => x !== null);
      if (!rows.length) continue;
      coresByKind[k] = Object.fromEntries(Object.keys(rows[0]!).map((key) => [key, r2(rows.reduce((t, r) => t + r[key]!, 0) / rows.length)]));
    }
    const threadsByKind: Result['threadsByKind'] = {};
    for (const k of ['flood', 'control'] as const) {
      const b = bursts.find((x) => x.kind === k);
      if (b) {
        threadsByKind[k] = threadCores(b.snapStart, b.snapEnd);
        if (k === 'flood') threadsByKind.idle = threadCores(b.snapEnd, b.snapIdleEnd);
      }
    }
    const perBurst = bursts.map((b) => {
      const inside = windows.filter((w) => w.burst === b.burst && w.kind === b.kind);
      const idle = windows.filter((w) => w.burst === b.burst && w.kind === 'solo');
      const p = median(inside.map((w) => w.p50Us)), q = median(idle.map((w) => w.p50Us));
      return { burst: b.burst, kind: b.kind, windows: inside.length, p50Us: r2(p), idleWindows: idle.length, idleP50Us: r2(q), ratio: r3(p / q) };
    });

    const baseline = summarize(of('baseline')), solo = summarize(of('solo')), flood = summarize(of('flood'));
    const control = o.control ? summarize(of('control')) : null;
    return {
      what: 'canary NOP program launch → fence (guest clock, 250 ms windows) in one fv guest while another fv guest floods the device with distinct modules, interleaved with idle periods (and control bursts of one cached module); one vugpu serve process',
      date: new Date().toISOString(),
      environment: { ...env, loadAvgAtEnd: os.loadavg().map(r2) },
      programDevice,
      options: o,
      wallS: Math.round((performance.now() - t0) / 100) / 10,
      goal: GOAL,
      baseline, solo, flood, control,
      ratioP50: r3(flood.p50Us / solo.p50Us),
      ratioMean: r3(flood.meanUs / solo.meanUs),
      controlRatioP50: control ? r3(control.p50Us / solo.p50Us) : null,
      controlRatioMean: control ? r3(control.meanUs / solo.meanUs) : null,
      floodOverControlP50: control ? r3(flood.p50Us / control.p50Us) : null,
      baselineRatioP50: r3(solo.p50Us / baseline.p50Us),
      perBurst,
      bursts: burstRows,
      coresByKind,
      threadsByKind,
      niceThreads,
      loadAvg1: { min: r2(Math.min(...loads)), median: r2(median(loads)), max: r2(Math.max(...loads)) },
      windows,
      problems,
    };
  } finally {
    clearInterval(loadTimer);
    await Promise.all(guests.map((g) => g.kill()));
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// ---- plot

function svg(r: Result): string {
  const W = 860, left = 64, right = 20, top = 56, ph = 250, H = top + ph + 190;
  const pw = W - left - right;
  const ws = r.windows;
  const tMax = Math.max(1, ...ws.map((w) => w.t));
  // Log scale: solo windows sit at a few hundred µs, flood windows tens of ms.
  const yMax = 10 ** Math.ceil(Math.log10(Math.max(10, ...ws.map((w) => w.p50Us)) * 1.1));
  const yMin = 10 ** Math.floor(Math.log10(Math.max(1, Math.min(...ws.map((w) => w.p50Us)))));
  const x = (t: number) => left + (t / tMax) * pw;
  const y = (v: number) => top + ph - (Math.log10(Math.min(yMax, Math.max(yMin, v)) / yMin) / Math.log10(yMax / yMin)) * ph;
  const color: Record<Kind, string> = { baseline: '#7f7f7f', solo: '#2ca02c', flood: '#d62728', control: '#1f77b4', other: '#bbbbbb' };
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="10" y="18" font-size="13" font-weight="bold">Canary NOP program launch p50 per ${r.options.windowMs} ms window while another guest floods ${r.programDevice} with new modules (${r.environment.accel.toUpperCase()}, ${r.date.slice(0, 10)})</text>`,
    `<text x="10" y="34" fill="#555">shaded: <tspan fill="#d62728">flood bursts</tspan> (${r.options.flood} distinct modules each)${r.control ? ', <tspan fill="#1f77b4">control bursts</tspan> (one cached module)' : ''}; dots: windows (<tspan fill="#7f7f7f">baseline, no attacker</tspan>, <tspan fill="#2ca02c">solo: attacker idle</tspan>, <tspan fill="#d62728">flood</tspan>${r.control ? ', <tspan fill="#1f77b4">control</tspan>' : ''}, <tspan fill="#999">other</tspan>)</text>`,
    `<rect x="${left}" y="${top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`,
  ];
  // Burst spans, from the windows that fell in them (host times relative to the canary's start).
  const spans = new Map<number, { kind: string; from: number; to: number }>();
  for (const w of ws) {
    if ((w.kind === 'flood' || w.kind === 'control') && w.burst !== undefined) {
      const s = spans.get(w.burst) ?? { kind: w.kind, from: w.from, to: w.t };
      s.from = Math.min(s.from, w.from);
      s.to = Math.max(s.to, w.t);
      spans.set(w.burst, s);
    }
  }
  for (const s of spans.values()) {
    parts.push(`<rect x="${x(s.from).toFixed(1)}" y="${top}" width="${Math.max(1, x(s.to) - x(s.from)).toFixed(1)}" height="${ph}" fill="${s.kind === 'flood' ? '#d62728' : '#1f77b4'}" fill-opacity="0.12"/>`);
  }
  for (let d = yMin; d < yMax * 1.01; d *= 10) {
    for (const m of [1, 2, 5]) {
      const v = d * m;
      if (v > yMax * 1.01) break;
      parts.push(`<text x="${left - 5}" y="${y(v) + 4}" text-anchor="end">${v >= 1000 ? `${v / 1000} ms` : `${v} µs`}</text>`);
      parts.push(`<line x1="${left}" x2="${left + pw}" y1="${y(v)}" y2="${y(v)}" stroke="#eee"/>`);
    }
  }
  for (let t = 0; t <= tMax; t += tMax > 200 ? 30 : 10) parts.push(`<text x="${x(t).toFixed(1)}" y="${top + ph + 14}" text-anchor="middle">${t}</text>`);
  parts.push(`<text x="${left + pw / 2}" y="${top + ph + 28}" text-anchor="middle" fill="#555">seconds since the canary's first window (host clock)</text>`);
  parts.push(`<text x="12" y="${top + ph / 2}" transform="rotate(-90 12 ${top + ph / 2})" text-anchor="middle" fill="#555">p50 launch→fence (log scale)</text>`);
  const soloY = y(r.solo.p50Us), goalY = y(r.solo.p50Us * r.goal);
  parts.push(`<line x1="${left}" x2="${left + pw}" y1="${soloY}" y2="${soloY}" stroke="#2ca02c" stroke-dasharray="4,3"/>`);
  parts.push(`<line x1="${left}" x2="${left + pw}" y1="${goalY}" y2="${goalY}" stroke="#000" stroke-dasharray="2,3"/>`);
  parts.push(`<text x="${left + pw - 4}" y="${goalY - 4}" text-anchor="end">goal: 1.10 × solo median (${(r.solo.p50Us * r.goal).toFixed(0)} µs)</text>`);
  for (const w of ws) parts.push(`<circle cx="${x(w.t).toFixed(1)}" cy="${y(w.p50Us).toFixed(1)}" r="2" fill="${color[w.kind]}"><title>${w.t} s ${w.kind}: p50 ${w.p50Us} µs, n ${w.n}</title></circle>`);
  // Ratios against the goal.
  const bars: { label: string; v: number | null; c: string }[] = [
    { label: 'flood / solo (p50)', v: r.ratioP50, c: '#d62728' },
    { label: 'flood / solo (mean)', v: r.ratioMean, c: '#d62728' },
    { label: 'control / solo (p50)', v: r.controlRatioP50, c: '#1f77b4' },
    { label: 'solo / baseline (p50)', v: r.baselineRatioP50, c: '#7f7f7f' },
  ];
  const by = top + ph + 44, bh = 22, x0 = 190, scale = 300, maxV = 2;
  bars.forEach((b, i) => {
    const yy = by + i * (bh + 8);
    parts.push(`<text x="${x0 - 8}" y="${yy + 15}" text-anchor="end">${b.label}</text>`);
    if (b.v === null) return;
    parts.push(`<rect x="${x0}" y="${yy}" width="${(Math.min(maxV, b.v) / maxV * scale).toFixed(1)}" height="${bh}" fill="${b.c}" fill-opacity="0.8"/>`);
    parts.push(`<text x="${(x0 + (Math.min(maxV, b.v) / maxV) * scale + 6).toFixed(1)}" y="${yy + 15}">${b.v.toFixed(2)}×</text>`);
  });
  const gx = x0 + (r.goal / maxV) * scale, ox = x0 + (1 / maxV) * scale;
  parts.push(`<line x1="${gx}" x2="${gx}" y1="${by - 4}" y2="${by + bars.length * (bh + 8)}" stroke="#000" stroke-dasharray="3,2"/><text x="${gx + 3}" y="${by - 6}">goal 1.10</text>`);
  parts.push(`<line x1="${ox}" x2="${ox}" y1="${by - 4}" y2="${by + bars.length * (bh + 8)}" stroke="#888"/>`);
  const fb = r.bursts.filter((b) => b.kind === 'flood');
  parts.push(`<text x="${x0 + scale + 80}" y="${by + 15}" fill="#555">solo p50 ${r.solo.p50Us.toFixed(0)} µs, flood ${r.flood.p50Us.toFixed(0)} µs${r.control ? `, control ${r.control.p50Us.toFixed(0)} µs` : ''}</text>`);
  parts.push(`<text x="${x0 + scale + 80}" y="${by + 33}" fill="#555">${fb.length} flood bursts × ${r.options.flood} modules, compile CPU ${median(fb.map((b) => b.compileCpuMsPerModule ?? NaN)).toFixed(1)} ms/module (nice 19)</text>`);
  parts.push(`<text x="${x0 + scale + 80}" y="${by + 51}" fill="#555">load average (1 min) ${r.loadAvg1.min}–${r.loadAvg1.max}, ${r.environment.cpus} CPUs</text>`);
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

function report(r: Result): string {
  const row = (name: string, l: Lat | null, ratio: number | null) => [name, l?.windows ?? null, l ? r2(l.p50Us) : null, l ? r2(l.meanUs) : null, l ? r2(l.p99Us) : null, ratio];
  const lines = [
    textTable(['canary windows', 'n', 'p50 µs', 'mean µs', 'p99 µs', 'p50 / solo'], [
      row('baseline (no attacker)', r.baseline, r3(r.baseline.p50Us / r.solo.p50Us)),
      row('solo (attacker idle)', r.solo, 1),
      row('flood', r.flood, r.ratioP50),
      ...(r.control ? [row('control (one cached module)', r.control, r.controlRatioP50)] : []),
    ]),
    '',
    textTable(['burst', 'kind', 'ms', 'modules', 'distinct', 'verified', 'compile CPU ms', 'ms/module', 'windows', 'p50 µs', 'idle p50 µs', 'ratio'],
      r.bursts.map((b) => {
        const p = r.perBurst.find((x) => x.burst === b.burst)!;
        return [b.burst, b.kind, b.ms, b.modules, b.distinctModules, b.verified, b.compileCpuMs, b.compileCpuMsPerModule, p.windows, p.p50Us, p.idleP50Us, p.ratio];
      })),
    '',
    `ratio flood/solo: p50 ${r.ratioP50.toFixed(3)}, mean ${r.ratioMean.toFixed(3)} (goal ≤ ${GOAL}: ${r.ratioP50 <= GOAL ? 'met' : 'NOT met'})` +
      (r.control ? `; control/solo p50 ${r.controlRatioP50!.toFixed(3)}, flood/control p50 ${r.floodOverControlP50!.toFixed(3)}` : ''),
    `cores by phase: ${JSON.stringify(r.coresByKind)}`,
    `server threads by phase (cores on CPU / waiting for one): ${JSON.stringify(r.threadsByKind)}`,
    `program device ${r.programDevice}; load average ${r.loadAvg1.min}–${r.loadAvg1.max}; wall ${r.wallS} s`,
  ];
  return lines.join('\n');
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      flood: { type: 'string', default: '256' },
      bursts: { type: 'string', default: '4' },
      'solo-s': { type: 'string', default: '10' },
      'window-ms': { type: 'string', default: '250' },
      'no-control': { type: 'boolean', default: false },
      'compile-nice': { type: 'string' },
      'attacker-nice': { type: 'string' },
      seed: { type: 'string' },
      out: { type: 'string', default: 'flood' },
      device: { type: 'string', default: 'lavapipe' }, // --replot: whose result
      replot: { type: 'boolean', default: false },
    },
  });
  if (values.replot) {
    const variant = outVariant('flood', values.out);
    const r = JSON.parse(fs.readFileSync(benchFile('flood', values.device!, variant), 'utf8')) as Result;
    const plot = benchFile('flood', values.device!, variant, 'svg');
    fs.writeFileSync(plot, svg(r));
    console.log(`wrote ${plot}`);
    return;
  }
  const o: Opts = {
    flood: Number(values.flood), bursts: Number(values.bursts), soloS: Number(values['solo-s']),
    windowMs: Number(values['window-ms']), control: !values['no-control'], out: values.out!,
    ...(values['compile-nice'] !== undefined ? { compileNice: Number(values['compile-nice']) } : {}),
    ...(values['attacker-nice'] !== undefined ? { attackerNice: Number(values['attacker-nice']) } : {}),
    seed: values.seed !== undefined ? Number(values.seed) : 1 + Math.floor(Math.random() * 60_000),
  };
  if (!(o.seed >= 1 && o.seed + 2 * o.bursts < 65_536)) throw new Error('--seed: 1 to 65535 − 2·bursts (constants are (seed + burst)·2^16 + …)');
  if (o.attackerNice !== undefined && !(Number.isInteger(o.attackerNice) && o.attackerNice >= -20 && o.attackerNice <= 19))
    throw new Error('--attacker-nice: an integer from -20 to 19');
  if (!(o.flood >= 1 && o.flood <= 256)) throw new Error('--flood: 1 to 256 modules per burst (the attacker\'s VRAM layout)');
  const r = await run(o);
  // One result per program device (lavapipe here, the GPU on a GPU host).
  const device = resultDevice(r.programDevice);
  const json = writeBenchResult('flood', device, r, outVariant('flood', o.out));
  const plot = benchFile('flood', device, outVariant('flood', o.out), 'svg');
  fs.writeFileSync(plot, svg(r));
  console.log(report(r));
  console.log(`wrote ${json} and ${plot}`);
  if (r.problems.length) {
    console.error(`bench:flood failed: ${r.problems[0]}${r.problems.length > 1 ? ` (and ${r.problems.length - 1} more problem(s) in ${json})` : ''}.`);
    process.exitCode = 1;
  }
}

main().catch((err: unknown) => {
  console.error(`bench:flood failed: ${(err as Error).message}`);
  process.exitCode = 1;
});
