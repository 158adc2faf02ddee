// Stock QEMU guests through vugpu on a GPU host (issue 14: "a stock QEMU guest on the GPU host runs
// the sample programs and the suite through vugpu", and the programs issue's hostile suite), made to
// run from the offline bundle built with QEMU (scripts/bundle.sh --with-qemu; TCG, no network):
//
//   node bench/gpu-host-guests.ts [--large] [--timeout-s N] [--out DIR] [--only a:b] [--cotenant-repeat N]
//                                 [--vulkan-device NAME]
//
// vugpu's modules come from VUGPU_ROOT (default: the tree this file lives in), so that on the GPU
// host the bundle's src/ runs against the bundle's addon whatever checkout runs this file; the
// guests come from the setup manifest (VUGPU_CACHE: the bundle's vugpu-env.sh names its own).
// `vugpu serve --engine ${ENGINE:-vulkan}` runs as a child process, as the integration tests run it:
//   programs          (pt) programs.sh suite --repeat 2: the five sample programs verified against
//                     the CPU in two rounds with equal digests, the PPROG limits and a refusal one
//                     step past each, spin below/past the loop limit, the kernel benchmarks as
//                     SPIR-V programs (test/integration/programs.test.ts)
//   programs-hostile  (pt, same server) a driverless guest's program attacks, every one contained,
//                     the rebound channel works after the endless loop (programs.test.ts)
//   suite             (fv VM "a") bench-suite.sh: the 14 benchmarks verified (--large: GPUvm sizes)
//   hostile           (fv, same server as suite) the attacker (vm0, lowest slice) runs every attack
//                     of vugpu-hostile incl. the program attacks while "a" runs the suite
//                     (--cotenant-repeat rounds, default 6; the phase fails unless "a" was running
//                     before the first attack and still after the last; its digests must equal a
//                     run without attacks: the suite phase's, or with --large a solo run first); then the
//                     canary VM (the slice right above the attacker's, never booted before) scans its
//                     VRAM — all zeros, no attacker word — beside a fresh guest on the scrubbed
//                     attacker slice (scan + suite, bit-exact); server up, no error-level log line
//                     (test/integration/hostile.test.ts)
// Writes $OUT/gpu-host-guests.json (device, QEMU, accel, per phase pass/fail with the reasons and
// every VUGPU-BENCH/CHECK record summarized) and $OUT/gpu-host-guests.log (console tails of failed
// guests, server log tails); prints a table. Exit 0 whatever failed (the JSON says), 2 on bad arguments.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { GuestRecord } from '../src/vm/console.ts';
import type { GuestResult, GuestVm } from '../src/vm/launcher.ts';
import type { Manifest } from '../src/vm/manifest.ts';
import type { ServerProcess } from '../src/vm/server-process.ts';

const PHASES = ['programs', 'programs-hostile', 'suite', 'hostile'] as const;
type PhaseName = (typeof PHASES)[number];

const PROGRAMS = '/opt/vugpu/programs.sh';
const SUITE = '/opt/vugpu/bench-suite.sh';
const HOSTILE = '/opt/vugpu/hostile.sh';
const SAMPLES = ['vecadd', 'sgemm', 'reduce', 'histogram', 'spin'];
const KERNEL_BENCHES = ['nop', 'loop', 'madd', 'mmul', 'fmadd', 'fmmul', 'backprop', 'bfs', 'hotspot', 'lud', 'srad', 'srad2'];
const BENCHES = ['nop', 'loop', 'madd', 'mmul', 'fmadd', 'fmmul', 'cpy', 'pincpy', 'backprop', 'bfs', 'hotspot', 'lud', 'srad', 'srad2'];
// The attack lists of test/integration/programs.test.ts and hostile.test.ts (guest/hostile/main.c
// runs them in this order; the guest does not announce them, so a missing one must be caught here).
const PROGRAM_ATTACKS = [
  'program-invalid-spirv', 'program-module-size', 'program-capability', 'program-oob-access', 'program-endless-loop',
  'program-loop-limit', 'program-huge-grid', 'program-shared-memory', 'program-bindings', 'program-readonly',
  'program-foreign-memory', 'program-module-flood',
];
const ATTACKS = [
  'baseline', 'pte-other-slice-read', 'pte-other-slice-write', 'pte-other-slice-span', 'pte-other-slice-units',
  'pte-other-slice-large', 'pde-outside-slice', 'pte-unmapped-sysmem', 'instance-outside-slice', 'foreign-chid',
  'runlist-garbage', 'chid-pool-hog', 'pramin-beyond-slice', 'diag-outside', 'pv-garbage', 'bad-gpfifo-entry',
  'bad-methods', 'garbage-pushbuffer', 'endless-kernel', 'acquire-forever',
  ...PROGRAM_ATTACKS,
  'legit-after-attacks',
];
const PT_WATCHDOG_MS = 3000;   // programs.test.ts
const FV_WATCHDOG_MS = 2000;   // hostile.test.ts

// ---------------------------------------------------------------- arguments
interface Args { large: boolean; timeoutS: number | null; out: string; only: PhaseName[]; cotenantRepeat: number; vulkanDevice: string | null }

function usage(msg: string): never {
  process.stderr.write(`gpu-host-guests: ${msg} (usage: node bench/gpu-host-guests.ts [--large] [--timeout-s N] [--out DIR] [--only ${PHASES.join(':')}] [--cotenant-repeat N] [--vulkan-device NAME]).\n`);
  process.exit(2);
}

function parseArgs(argv: string[]): Args {
  const a: Args = { large: false, timeoutS: null, out: process.env.OUT ?? '/tmp/vugpu-out', only: [...PHASES], cotenantRepeat: 6, vulkanDevice: null };
  const int = (flag: string, v: string | undefined, min: number): number => {
    if (v === undefined || !/^\d+$/.test(v) || Number(v) < min) usage(`${flag} takes a whole number ≥ ${min}, not ${v ?? 'nothing'}`);
    return Number(v);
  };
  for (let i = 0; i < argv.length; i++) {
    const f = argv[i]!;
    const v = argv[i + 1];
    if (f === '--large') a.large = true;
    else if (f === '--timeout-s') { a.timeoutS = int(f, v, 10); i++; }
    else if (f === '--cotenant-repeat') { a.cotenantRepeat = int(f, v, 1); i++; }
    else if (f === '--out') {
      if (!v) usage('--out needs a directory');
      a.out = v; i++;
    } else if (f === '--vulkan-device') {
      if (!v) usage('--vulkan-device needs (part of) a device name');
      a.vulkanDevice = v; i++;
    } else if (f === '--only') {
      const names = (v ?? '').split(/[:,]/).filter(Boolean);
      const bad = names.filter((n) => !(PHASES as readonly string[]).includes(n));
      if (names.length === 0 || bad.length) usage(`--only takes phases among ${PHASES.join(', ')}, not ${bad.join(', ') || 'nothing'}`);
      a.only = PHASES.filter((p) => names.includes(p));
      i++;
    } else if (f === '-h' || f === '--help') {
      process.stdout.write(fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\nimport ')[0]!.replace(/^\/\/ ?/gm, '') + '\n');
      process.exit(0);
    } else usage(`unknown argument ${f}`);
  }
  return a;
}

const args = parseArgs(process.argv.slice(2));
const ENGINE = process.env.ENGINE ?? 'vulkan';
if (!/^[a-z]+$/.test(ENGINE)) usage(`ENGINE=${ENGINE} is not an engine name`);
const root = path.resolve(process.env.VUGPU_ROOT ?? path.join(path.dirname(fileURLToPath(import.meta.url)), '..'));
if (!fs.existsSync(path.join(root, 'src/cli.ts'))) usage(`VUGPU_ROOT=${root} holds no src/cli.ts`);
// This process logs warnings only; the servers log at info (their engine and metrics lines are read).
const serverLogLevel = process.env.VUGPU_LOG ?? 'info';
process.env.VUGPU_LOG = 'warn';

const imp = (rel: string): Promise<unknown> => import(pathToFileURL(path.join(root, rel)).href);
const { bootGuest } = (await imp('src/vm/launcher.ts')) as typeof import('../src/vm/launcher.ts');
const { loadManifest } = (await imp('src/vm/manifest.ts')) as typeof import('../src/vm/manifest.ts');
const { startServer } = (await imp('src/vm/server-process.ts')) as typeof import('../src/vm/server-process.ts');
const { vfioErrorLines } = (await imp('src/vm/console.ts')) as typeof import('../src/vm/console.ts');
const { chooseAccel } = (await imp('src/vm/accel.ts')) as typeof import('../src/vm/accel.ts');

// ---------------------------------------------------------------- report structures
type Rec = Record<string, unknown>;
interface GuestSummary {
  vm: string; args: string[]; wallS: number; exitCode: number | null; guestExit: number | null; timedOut: boolean;
  benches: Rec[]; checks: Rec[]; errors: Rec[];
}
interface Phase {
  name: PhaseName; mode: string; pass: boolean; failures: string[]; wallS: number; guests: GuestSummary[]; notes: Rec;
}

const T0 = performance.now();
const logParts: string[] = [];
const phases: Phase[] = [];
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-gg-'));
const sock = (vm: string) => path.join(dir, `${vm}.sock`);
const guestTimeoutMs = (defaultS: number) => (args.timeoutS ?? defaultS) * 1000;
const engineRecords: Rec[] = [];
let manifest: Manifest | null = null;
let setupError: string | null = null;

function log(s: string): void {
  logParts.push(s);
}

function parseLog(line: string): Rec | null {
  if (!line.startsWith('{')) return null;
  try {
    return JSON.parse(line) as Rec;
  } catch {
    return null;
  }
}

/** What each record says in a line of JSON: the name, ok, the time and digest, and why not ok. */
function summarizeBench(b: Rec): Rec {
  const s: Rec = { name: b.bench, ok: b.ok === true && b.verified === true, verified: b.verified, total_us: b.total_us, digest: b.digest };
  if (b.size !== undefined) s.size = b.size;
  if (b.programs) s.programs = true;
  if (b.error !== undefined) s.error = b.error;
  return s;
}

const CHECK_KEEP = ['digest', 'first_us', 'expect', 'code_name', 'reason_name', 'outcome', 'iterations', 'err', 'device_ms',
  'waited_ms', 'bound', 'refused', 'errors', 'attacker_words', 'nonzero_qwords', 'rebound_channel_works', 'verified', 'modules', 'ms', 'detail'];
function summarizeCheck(c: Rec): Rec {
  const s: Rec = { name: c.check, ok: c.ok };
  for (const k of CHECK_KEEP) if (c[k] !== undefined) s[k] = c[k];
  if (Array.isArray(c.cases)) s.cases = c.cases.length;
  return s;
}

function summarizeGuest(vm: string, gargs: string[], r: GuestResult): GuestSummary {
  const data = (kind: string) => r.records.filter((x) => x.kind === kind).map((x) => x.data);
  return {
    vm, args: gargs, wallS: round(r.durationMs / 1000), exitCode: r.exitCode, guestExit: r.guestExit, timedOut: r.timedOut,
    benches: data('BENCH').map(summarizeBench), checks: data('CHECK').map(summarizeCheck),
    errors: r.records.filter((x) => x.kind === 'ERROR' || x.kind === 'PARSE_ERROR').map((x) => ({ kind: x.kind, ...x.data })),
  };
}

const round = (x: number) => Math.round(x * 10) / 10;
/** "3.2 s before" / "1.5 s after": when t was, seen from ref (ms). */
const rel = (t: number, ref: number) => `${round(Math.abs(t - ref) / 1000)} s ${t < ref ? 'before' : 'after'}`;

/** Collects what failed in one phase; `expect` records a failure when the condition is false. */
class Verdict {
  readonly failures: string[] = [];
  expect(cond: boolean, what: string): boolean {
    if (!cond) this.failures.push(what);
    return cond;
  }
  /** The guest ran cleanly: not timed out, exit 0, no error or malformed record, no vfio-user error from QEMU. */
  clean(vm: string, r: GuestResult): void {
    this.expect(!r.timedOut, `${vm}: timed out after ${Math.round(r.durationMs / 1000)} s`);
    this.expect(r.guestExit === 0, `${vm}: guest exit ${r.guestExit} (QEMU exit ${r.exitCode}${r.signal ? `, ${r.signal}` : ''})`);
    const errs = r.records.filter((x) => x.kind === 'PARSE_ERROR' || x.kind === 'ERROR');
    this.expect(errs.length === 0, `${vm}: ${errs.length} ERROR/PARSE_ERROR record(s), first ${JSON.stringify(errs[0]?.data)}`);
    const vfio = vfioErrorLines(r.stderr);
    this.expect(vfio.length === 0, `${vm}: QEMU printed vfio-user errors: ${vfio.slice(0, 2).join(' | ')}`);
  }
  /** The names, in order, are exactly `want`. */
  sequence(vm: string, what: string, got: unknown[], want: string[]): void {
    const g = got.map(String);
    if (g.length === want.length && g.every((x, i) => x === want[i])) return;
    const missing = want.filter((w) => !g.includes(w));
    const extra = g.filter((x) => !want.includes(x));
    this.failures.push(`${vm}: ${what} ${g.length}/${want.length}${missing.length ? `, missing ${missing.join(' ')}` : ''}${extra.length ? `, unexpected ${extra.join(' ')}` : ''}${!missing.length && !extra.length ? ', out of order' : ''}`);
  }
  /** Every check ok. */
  checksOk(vm: string, r: GuestResult): void {
    for (const c of r.checks) this.expect(c.ok === true, `${vm}: check ${c.check} not ok: ${JSON.stringify(c).slice(0, 300)}`);
  }
  /** Every benchmark ok and verified; with a reference, its output digest is the reference's. */
  benchesOk(vm: string, r: GuestResult, ref?: Map<string, unknown>): void {
    for (const b of benches(r)) {
      const name = String(b.bench);
      this.expect(b.ok === true && b.verified === true && b.error === undefined, `${vm}: ${name} not ok/verified: ${JSON.stringify(b).slice(0, 300)}`);
      if (ref?.has(name)) this.expect(b.digest === ref.get(name), `${vm}: ${name} digest ${String(b.digest)} differs from the reference ${String(ref.get(name))}`);
    }
  }
  server(s: ServerProcess, from = 0): void {
    this.expect(s.alive, 'the server exited');
    const errs = s.errorLines().filter((l) => s.output.indexOf(l) >= from);
    this.expect(errs.length === 0, `the server logged ${errs.length} error-level line(s): ${errs[0]?.slice(0, 300) ?? ''}`);
  }
}

function benches(r: GuestResult): Rec[] {
  return r.records.filter((x) => x.kind === 'BENCH').map((x) => x.data);
}
function check(r: GuestResult, name: string): Rec | undefined {
  return r.checks.find((c) => c.check === name) as Rec | undefined;
}

function guestLog(phase: string, vm: string, r: GuestResult, failed: boolean): void {
  log(`== ${phase} / ${vm}: ${failed ? 'FAILED' : 'ok'} — QEMU exit ${r.exitCode}${r.signal ? ` (${r.signal})` : ''}, guest exit ${r.guestExit}, timed out ${r.timedOut}, ${Math.round(r.durationMs / 1000)} s`);
  if (!failed) return;
  log(`argv: ${r.argv.join(' ')}`);
  log(`--- console (last 120 lines)\n${r.console.slice(-120).join('\n')}`);
  if (r.stderr.length) log(`--- QEMU stderr (last 20 lines)\n${r.stderr.slice(-20).join('\n')}`);
}

function serverLog(label: string, s: ServerProcess, failed: boolean): void {
  const errs = s.errorLines();
  log(`== server ${label}: ${s.alive ? 'up' : 'exited'}, ${s.output.length} log lines, ${errs.length} at error level`);
  if (errs.length) log(`--- error-level lines (first 20)\n${errs.slice(0, 20).join('\n')}`);
  log(`--- server log (last ${failed ? 80 : 15} lines)\n${s.tail(failed ? 80 : 15)}`);
}

async function server(label: string, extra: string[], socket: string, waitFor: string[] = []): Promise<ServerProcess> {
  const a = ['--engine', ENGINE, ...(args.vulkanDevice ? ['--vulkan-device', args.vulkanDevice] : []), ...extra];
  const s = await startServer({ socket, args: a, readyTimeoutMs: 120_000, env: { VUGPU_LOG: serverLogLevel } });
  // The other VMs' sockets appear one by one (each slice is scrubbed at attach).
  for (const p of waitFor) {
    const deadline = performance.now() + 60_000;
    while (!fs.existsSync(p) && performance.now() < deadline && s.alive) await sleep(50);
    if (!fs.existsSync(p)) {
      await s.stop();
      throw new Error(`server ${label}: no socket ${p} within 60 s:\n${s.tail()}`);
    }
  }
  await s.waitForOutput(/gpu engine created/, 0, 10_000);
  const created = s.output.map(parseLog).find((r) => r?.msg === 'gpu engine created');
  if (created) engineRecords.push({ server: label, ...created });
  return s;
}

function boot(vm: string, gargs: string[], timeoutMs: number, stamped?: { rec: GuestRecord; t: number }[]): GuestVm {
  return bootGuest({
    // Through sh: the scripts' mode bits are not guaranteed in the initramfs.
    manifest: manifest!, sockets: [sock(vm)], run: '/bin/sh', args: gargs, timeoutMs,
    onLine: stamped ? (_l, rec) => { if (rec) stamped.push({ rec, t: performance.now() }); } : undefined,
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function runPhase(name: PhaseName, mode: string, body: (v: Verdict, p: Phase) => Promise<void>): Promise<Phase | null> {
  if (!args.only.includes(name)) return null;
  const t = performance.now();
  const p: Phase = { name, mode, pass: false, failures: [], wallS: 0, guests: [], notes: {} };
  const v = new Verdict();
  process.stdout.write(`[gpu-host-guests] ${name} (${mode})…\n`);
  try {
    if (!manifest) throw new Error(setupError ?? 'no manifest');
    await body(v, p);
  } catch (err) {
    v.failures.push(`aborted: ${(err as Error).message.split('\n')[0]}`);
    log(`== ${name}: aborted\n${(err as Error).stack ?? String(err)}`);
  }
  p.failures = v.failures;
  p.pass = v.failures.length === 0;
  p.wallS = round((performance.now() - t) / 1000);
  phases.push(p);
  process.stdout.write(`[gpu-host-guests] ${name}: ${p.pass ? 'pass' : `FAIL (${p.failures.length}: ${p.failures[0]})`} in ${p.wallS} s\n`);
  return p;
}

// ---------------------------------------------------------------- the run
try {
  manifest = loadManifest();
  for (const f of ['/opt/vugpu/vugpu-programs', PROGRAMS, SUITE, HOSTILE, '/opt/vugpu/vugpu-hostile', '/programs/builtins/madd.spv']) {
    if (!manifest.guestFiles.includes(f)) throw new Error(`the guest image lacks ${f} (an initramfs from before it existed)`);
  }
} catch (err) {
  setupError = (err as Error).message;
}
const accel = (() => {
  try {
    const a = chooseAccel('auto');
    return { accel: a.accel, reason: a.reason };
  } catch (err) {
    return { accel: 'unknown', reason: (err as Error).message };
  }
})();
process.stdout.write(`[gpu-host-guests] root ${root}, engine ${ENGINE}, QEMU ${manifest?.qemu.version ?? '(none)'}, accel ${accel.accel} (${accel.reason})${args.large ? ', --large' : ''}\n`);

/** Default-size digests of the suite (the solo reference of the co-tenants and the fresh guest). */
let reference: Map<string, unknown> | null = null;
let referenceFrom = '';

// pt: the sample programs, then the program attacks, on one server.
if (args.only.includes('programs') || args.only.includes('programs-hostile')) {
  let s: ServerProcess | null = null;
  let failed = false;
  try {
    if (manifest) s = await server('pt', ['--mode', 'pt', '--watchdog-ms', String(PT_WATCHDOG_MS)], sock('pt'));
  } catch (err) {
    setupError = `server (pt): ${(err as Error).message}`;
  }
  const ptServer = s;
  const pt = async (name: PhaseName, body: (v: Verdict, p: Phase) => Promise<void>) =>
    runPhase(name, 'pt', async (v, p) => {
      if (!ptServer) throw new Error(setupError ?? 'no server');
      await body(v, p);
    });
  const pa = await pt('programs', async (v, p) => {
    const gargs = [PROGRAMS, 'suite', '--repeat', '2'];
    const r = await boot('pt', gargs, guestTimeoutMs(600)).done;
    p.guests.push(summarizeGuest('pt', gargs, r));
    const n0 = v.failures.length;
    v.clean('pt', r);
    v.checksOk('pt', r);
    const samples = r.checks.filter((c) => SAMPLES.some((n) => c.check === `program-${n}`));
    v.sequence('pt', 'sample programs', samples.map((c) => c.check), [...SAMPLES, ...SAMPLES].map((n) => `program-${n}`));
    for (const c of samples) v.expect(/^0x[0-9a-f]{8}$/.test(String(c.digest)), `pt: ${c.check} has no output digest`);
    for (let i = 0; i < SAMPLES.length && samples.length === 2 * SAMPLES.length; i++) {
      v.expect(samples[i + SAMPLES.length]!.digest === samples[i]!.digest, `pt: ${samples[i]!.check} round 2 digest differs from round 1`);
    }
    const limits = check(r, 'program-limits');
    v.expect(limits?.ok === true, 'pt: no ok program-limits check');
    const probes = r.checks.filter((c) => c.check.startsWith('limit-')) as Rec[];
    v.expect(probes.length >= 18, `pt: ${probes.length} limit probes, want ≥ 18`);
    for (const q of probes) {
      if (q.expect !== 'ok') v.expect(q.code_name === 'BAD_PROGRAM' && q.reason_name === q.expect, `pt: ${String(q.check)} refused with ${String(q.code_name)}/${String(q.reason_name)}, want BAD_PROGRAM/${String(q.expect)}`);
    }
    const spins = r.checks.filter((c) => c.check === 'program-spin-run') as Rec[];
    v.expect(spins.map((x) => x.iterations).join() === '1000,4294967295', `pt: spin runs ${spins.map((x) => x.iterations).join()}`);
    if (spins.length === 2) {
      v.expect(spins[0]!.outcome === 'ok', `pt: short spin outcome ${String(spins[0]!.outcome)}`);
      const want = (spins[1]!.loop_limit as number) > 0 ? 'PROGRAM_LOOP_LIMIT' : 'WATCHDOG';
      v.expect(spins[1]!.outcome === want, `pt: spin past the loop limit: ${String(spins[1]!.outcome)}, want ${want}`);
    }
    v.sequence('pt', 'kernel benchmarks as programs', benches(r).map((b) => b.bench), KERNEL_BENCHES);
    v.benchesOk('pt', r);
    for (const b of benches(r)) v.expect(b.programs === true && (b.program_launches as number) > 0, `pt: ${String(b.bench)} did not run as programs`);
    p.notes.sampleDigests = Object.fromEntries(samples.slice(0, SAMPLES.length).map((c) => [c.check, c.digest]));
    guestLog('programs', 'pt', r, v.failures.length > n0);
  });
  const ph = await pt('programs-hostile', async (v, p) => {
    const from = ptServer!.output.length;
    const gargs = [HOSTILE, 'attack', '--only', 'baseline:programs:legit-after', '--endless-ms', '30000'];
    const r = await boot('pt', gargs, guestTimeoutMs(600)).done;
    p.guests.push(summarizeGuest('pt', gargs, r));
    const n0 = v.failures.length;
    v.clean('pt', r);
    v.sequence('pt', 'program attacks', r.checks.map((c) => c.check), ['baseline', ...PROGRAM_ATTACKS, 'legit-after-attacks']);
    v.checksOk('pt', r);
    v.expect(check(r, 'program-endless-loop')?.rebound_channel_works === true, 'pt: after the endless program the rebound channel did not work');
    v.server(ptServer!, from);
    guestLog('programs-hostile', 'pt', r, v.failures.length > n0);
  });
  failed = (pa !== null && !pa.pass) || (ph !== null && !ph.pass);
  if (s) {
    serverLog('pt', s, failed);
    await s.stop();
  }
}

// fv: the suite on VM a, then the attacker vm0 beside co-tenant a and the canary.
if (args.only.includes('suite') || args.only.includes('hostile')) {
  let s: ServerProcess | null = null;
  let metricsPort = 0;
  try {
    // Slice order as in hostile.test.ts: vm0 (the attacker, --socket) lowest, the canary right above
    // it ("slice size + 4 MiB" from the attacker lands there), then the suite's VM.
    if (manifest) {
      s = await server('fv', [
        '--mode', 'fv',
        '--vm', `name=canary,socket=${sock('canary')},mode=fv,slice=64M`,
        '--vm', `name=a,socket=${sock('a')},mode=fv,slice=256M`,
        '--watchdog-ms', String(FV_WATCHDOG_MS), '--policy', 'band', '--metrics-port', '0', '--metrics-host', '127.0.0.1',
      ], sock('vm0'), [sock('canary'), sock('a')]);
      if (!(await s.waitForOutput(/metrics: listening/, 0, 30_000))) throw new Error(`no metrics listener:\n${s.tail()}`);
      metricsPort = (parseLog(s.output.find((l) => /metrics: listening/.test(l))!) as { port: number }).port;
    }
  } catch (err) {
    setupError = `server (fv): ${(err as Error).message}`;
  }
  const fvServer = s;
  const counters = async (): Promise<Record<string, Record<string, number>>> => {
    const res = await fetch(`http://127.0.0.1:${metricsPort}/metrics.json`);
    const snap = (await res.json()) as { vms: (Record<string, number> & { vm: string })[] };
    return Object.fromEntries(snap.vms.map((x) => [x.vm, x]));
  };
  const fv = async (name: PhaseName, body: (v: Verdict, p: Phase) => Promise<void>) =>
    runPhase(name, 'fv', async (v, p) => {
      if (!fvServer) throw new Error(setupError ?? 'no server');
      await body(v, p);
    });

  const pSuite = await fv('suite', async (v, p) => {
    const gargs = args.large ? [SUITE, '--', '--large'] : [SUITE];
    const r = await boot('a', gargs, guestTimeoutMs(600)).done;
    p.guests.push(summarizeGuest('a', gargs, r));
    v.clean('a', r);
    v.sequence('a', 'benchmarks', benches(r).map((b) => b.bench), BENCHES);
    v.benchesOk('a', r);
    v.expect(BENCHES.filter((b) => b !== 'nop' && !benches(r).find((x) => x.bench === b)?.digest).length === 0, 'a: a benchmark other than nop has no output digest');
    v.server(fvServer!);
    if (!args.large && v.failures.length === 0) {
      reference = new Map(benches(r).map((b) => [String(b.bench), b.digest]));
      referenceFrom = 'suite phase (solo)';
    }
    guestLog('suite', 'a', r, v.failures.length > 0);
  });

  const pHostile = await fv('hostile', async (v, p) => {
    const from = fvServer!.output.length;
    const vramMiB = Number(engineRecords.find((e) => e.server === 'fv')?.vramMiB ?? 1024);
    if (!reference) {
      // --large or no suite phase: the reference digests come from a solo run at the co-tenant's
      // sizes, before any attack — never from a run beside the attacker, whose results are what
      // the reference is there to judge.
      const soloArgs = [SUITE];
      const solo = await boot('a', soloArgs, guestTimeoutMs(600)).done;
      p.guests.push(summarizeGuest('a (solo reference)', soloArgs, solo));
      v.clean('a (solo reference)', solo);
      v.sequence('a (solo reference)', 'benchmarks', benches(solo).map((b) => b.bench), BENCHES);
      v.benchesOk('a (solo reference)', solo);
      reference = new Map(benches(solo).map((b) => [String(b.bench), b.digest]));
      referenceFrom = 'solo run before the attacks (hostile phase)';
      p.notes.soloSuiteS = round(solo.durationMs / 1000);
    }
    const before = await counters();
    // The co-tenant runs the suite (default sizes) through the attack; the attacker starts once
    // its driver is loaded.
    const coStamped: { rec: GuestRecord; t: number }[] = [];
    const evStamped: { rec: GuestRecord; t: number }[] = [];
    const coArgs = [SUITE, '--repeat', String(args.cotenantRepeat)];
    const co = boot('a', coArgs, guestTimeoutMs(600), coStamped);
    const loaded = await co.waitFor((x) => x.kind === 'PHASE' && x.data.phase === 'driver-loaded');
    v.expect(loaded.kind === 'PHASE', 'a (co-tenant): never loaded its driver');
    const evArgs = [HOSTILE, 'attack', '--engine-vram-mib', String(vramMiB), '--seed', '7'];
    const ev = boot('vm0', evArgs, guestTimeoutMs(600), evStamped);
    const [e, c] = await Promise.all([ev.done, co.done]);
    const after = await counters();
    const delta = (vm: string, k: string) => (after[vm]?.[k] ?? 0) - (before[vm]?.[k] ?? 0);
    p.guests.push(summarizeGuest('vm0', evArgs, e), summarizeGuest('a', coArgs, c));
    const n0 = v.failures.length;

    // The attacker: every attack contained, as the spec says.
    v.clean('vm0', e);
    v.sequence('vm0', 'attacks', e.checks.map((x) => x.check), ATTACKS);
    v.checksOk('vm0', e);
    const endless = check(e, 'endless-kernel');
    v.expect(endless?.err === 8 && (endless.device_ms as number) >= FV_WATCHDOG_MS - 100 && (endless.waited_ms as number) < 15_000,
      `vm0: endless-kernel not stopped by the watchdog as specified: ${JSON.stringify(endless)}`);
    const hog = check(e, 'chid-pool-hog');
    v.expect((hog?.refused as number) > 0 && (hog?.bound as number) > 0, `vm0: chid-pool-hog bound/refused ${String(hog?.bound)}/${String(hog?.refused)}, want both > 0`);
    v.expect((check(e, 'garbage-pushbuffer')?.errors as number) >= 8, 'vm0: garbage-pushbuffer raised fewer than 8 channel errors');
    v.expect(check(e, 'program-endless-loop')?.rebound_channel_works === true, 'vm0: after the endless program the rebound channel did not work');
    for (const k of ['faults', 'channelErrors', 'poolExhausted']) v.expect(delta('vm0', k) > 0, `vm0: metrics ${k} did not grow`);
    const attacksDone = evStamped.find((x) => x.rec.kind === 'PHASE' && x.rec.data.phase === 'attacks-done')?.t ?? NaN;
    v.expect(attacksDone > 0, 'vm0: no attacks-done phase');

    // The co-tenant: every benchmark verified and bit-exact, untouched by the attacks.
    v.clean('a', c);
    v.sequence('a', 'co-tenant benchmarks', benches(c).map((b) => b.bench), BENCHES.flatMap((b) => Array<string>(args.cotenantRepeat).fill(b)));
    v.benchesOk('a', c, reference ?? undefined);
    for (const k of ['faults', 'channelErrors', 'poolExhausted']) v.expect(delta('a', k) === 0, `a: metrics ${k} grew by ${delta('a', k)}`);
    const lastBench = coStamped.filter((x) => x.rec.kind === 'BENCH').at(-1)?.t ?? NaN;
    const attacksStart = evStamped.find((x) => x.rec.kind === 'PHASE' && x.rec.data.phase === 'attacks-start')?.t ?? NaN;
    const coLoaded = coStamped.find((x) => x.rec.kind === 'PHASE' && x.rec.data.phase === 'driver-loaded')?.t ?? NaN;
    // The co-tenant's results only say something about isolation if it ran beside every attack:
    // running before the first began and still running (a benchmark finished) after the last.
    v.expect(coLoaded < attacksStart && lastBench > attacksDone,
      `a (co-tenant): did not run through every attack (driver loaded ${rel(coLoaded, attacksStart)} the attacks began, ` +
      `last benchmark ${rel(lastBench, attacksDone)} they ended; raise --cotenant-repeat)`);
    p.notes.cotenantRanThroughAttacks = coLoaded < attacksStart && lastBench > attacksDone;
    p.notes.cotenantLastBenchAfterAttacksS = round((lastBench - attacksDone) / 1000);
    p.notes.reference = referenceFrom;
    p.notes.metrics = Object.fromEntries(['vm0', 'a'].map((vm) => [vm, Object.fromEntries(['faults', 'channelErrors', 'poolExhausted'].map((k) => [k, delta(vm, k)]))]));
    const refusals = fvServer!.output.slice(from).filter((l) => /physical channel pool exhausted/.test(l)).map(parseLog);
    v.expect(refusals.length > 0 && refusals.every((w) => w?.vm === 'vm0'), `refused channel binds: ${refusals.length}, for ${[...new Set(refusals.map((w) => String(w?.vm)))].join(' ')} (want > 0, only vm0)`);
    guestLog('hostile', 'vm0 (attacker)', e, v.failures.length > n0);
    guestLog('hostile', 'a (co-tenant)', c, v.failures.length > n0);

    // Afterwards, two at once: the canary's slice (right above the attacker's, never booted
    // before) holds no byte at all, the attacker's slice was scrubbed and serves a fresh guest.
    const n1 = v.failures.length;
    const canArgs = [HOSTILE, 'scan'];
    const freshArgs = [HOSTILE, 'scan-suite'];
    const [cn, fr] = await Promise.all([boot('canary', canArgs, guestTimeoutMs(600)).done, boot('vm0', freshArgs, guestTimeoutMs(600)).done]);
    p.guests.push(summarizeGuest('canary', canArgs, cn), summarizeGuest('vm0', freshArgs, fr));
    v.clean('canary', cn);
    const clean = check(cn, 'vram-clean');
    v.expect(clean?.ok === true && clean.attacker_words === 0, `canary: VRAM changed: ${JSON.stringify(clean)}`);
    v.clean('vm0 (fresh)', fr);
    const scrubbed = check(fr, 'vram-clean');
    v.expect(scrubbed?.ok === true, `vm0 (fresh): the attacker's slice was not scrubbed: ${JSON.stringify(scrubbed)}`);
    v.sequence('vm0 (fresh)', 'benchmarks', benches(fr).map((b) => b.bench), BENCHES);
    v.benchesOk('vm0 (fresh)', fr, reference);
    p.notes.canary = clean ?? null;
    v.server(fvServer!, from);
    guestLog('hostile', 'canary', cn, v.failures.length > n1);
    guestLog('hostile', 'vm0 (fresh)', fr, v.failures.length > n1);
  });
  if (s) {
    serverLog('fv', s, (pSuite !== null && !pSuite.pass) || (pHostile !== null && !pHostile.pass));
    await s.stop();
  }
}

// ---------------------------------------------------------------- report
fs.mkdirSync(args.out, { recursive: true });
const device = engineRecords.map((e) => e.programDevice).find((d) => typeof d === 'string') ?? null;
const report = {
  what: 'stock QEMU guests through vugpu serve (bench/gpu-host-guests.ts)',
  date: new Date().toISOString(),
  host: { hostname: os.hostname(), cpus: os.cpus().length, kernel: os.release() },
  root, engine: ENGINE, device, engines: engineRecords.map((e) => ({ server: e.server, vramMiB: e.vramMiB, channels: e.channels, watchdogMs: e.watchdogMs, programDevice: e.programDevice })),
  qemu: manifest ? { version: manifest.qemu.version, source: manifest.qemu.source, kernelRelease: manifest.kernelRelease } : null,
  accel, large: args.large, timeoutS: args.timeoutS, cotenantRepeat: args.cotenantRepeat, setupError,
  pass: setupError === null && phases.length === args.only.length && phases.every((p) => p.pass),
  wallS: round((performance.now() - T0) / 1000),
  phases,
};
const jsonFile = path.join(args.out, 'gpu-host-guests.json');
const logFile = path.join(args.out, 'gpu-host-guests.log');
fs.writeFileSync(jsonFile, JSON.stringify(report, null, 1) + '\n');
fs.writeFileSync(logFile, `${logParts.join('\n')}\n`);
fs.rmSync(dir, { recursive: true, force: true });

const rows = phases.map((p) => {
  const recs = p.guests.flatMap((g) => [...g.benches, ...g.checks]);
  return `${p.name.padEnd(17)} ${p.mode.padEnd(3)} ${(p.pass ? 'pass' : 'FAIL').padEnd(5)} ${String(p.wallS).padStart(6)} s  ${String(p.guests.length).padStart(2)} guests  ${String(recs.filter((x) => x.ok === true).length).padStart(3)}/${String(recs.length).padEnd(3)} records ok${p.pass ? '' : `  ${p.failures[0]}`}`;
});
process.stdout.write(`\ndevice ${device ?? '(none)'} · engine ${ENGINE} · QEMU ${manifest?.qemu.version ?? '(none)'} · ${accel.accel}${args.large ? ' · --large' : ''}\n`);
process.stdout.write(`phase             mode result   wall   guests  records\n${rows.join('\n')}\n`);
if (setupError) process.stdout.write(`setup: ${setupError}\n`);
process.stdout.write(`${report.pass ? 'ALL PASS' : 'FAILED'} in ${report.wallS} s → ${jsonFile}, ${logFile}\n`);
process.exit(0);
