// Launch-latency tail (npm run bench:launches, issue 34): back-to-back NOP launches, each
// followed by vgSynchronize and timed on its own (`vugpu-bench b2b`), through the native twin
// (the host backend of the runtime over vfio-user) against `vugpu serve` in pt and fv, and
// through a real guest (the kernel driver; TCG here, so fewer launches). Reports p50, p99.9 and
// the longest launch, how many took over 100 ms, and the five longest. A lost wake-up shows as
// launches of exactly one poll timeout (~1,001 ms); a mean would hide it.
//
// Results go into bench/results/launches/<device>.json under a label ("before" / "after" a
// fix): a run replaces only the measurements it made under its own label, so both stay side
// by side.
//   node bench/launches.ts --label after                      (this checkout's runtime)
//   node bench/launches.ts --label before --runtime-from REV  (guest/runtime and guest/common as
//                      they were at REV, with this checkout's guest/bench: the same client)
// Options: --launches N (twin, default 100000), --guest-launches N (default 20000; 0 = no
// guest), --modes pt,fv, --engine E (serve --engine, default auto: lavapipe here).
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { parseRecord } from '../src/vm/console.ts';
import { bootGuest } from '../src/vm/launcher.ts';
import { loadManifest } from '../src/vm/manifest.ts';
import { startServer } from '../src/vm/server-process.ts';
import { benchFile, repoRoot, resultDevice, writeBenchResult } from './lib/common.ts';

const { values: opt } = parseArgs({
  options: {
    label: { type: 'string', default: 'after' },
    'runtime-from': { type: 'string' },
    launches: { type: 'string', default: '100000' },
    'guest-launches': { type: 'string', default: '20000' },
    modes: { type: 'string', default: 'pt,fv' },
    engine: { type: 'string', default: 'auto' },
  },
});

function fail(msg: string): never {
  process.stderr.write(`bench:launches: ${msg}\n`);
  process.exit(2);
}

const label = opt.label!;
if (!/^[a-z][a-z0-9-]*$/.test(label)) fail(`--label ${label}: lower-case letters, digits and '-' only`);
const launches = Number(opt.launches);
const guestLaunches = Number(opt['guest-launches']);
if (!Number.isInteger(launches) || launches < 1000) fail(`--launches ${opt.launches}: a whole number ≥ 1000`);
if (!Number.isInteger(guestLaunches) || guestLaunches < 0) fail(`--guest-launches ${opt['guest-launches']}: a whole number ≥ 0`);
const modes = opt.modes!.split(',').filter((m) => m !== '');
for (const m of modes) if (m !== 'pt' && m !== 'fv') fail(`--modes: ${m} is not pt or fv`);

interface B2b {
  ok: boolean; launches: number; failed: number; ms: number;
  p50_us: number; p999_us: number; max_us: number; over_100ms: number;
  longest: { at: number; us: number }[];
}

function b2bOf(lines: string[]): B2b | null {
  for (let i = lines.length - 1; i >= 0; i--) {
    const r = parseRecord(lines[i]!, i);
    if (r?.kind === 'B2B') return r.data as unknown as B2b;
  }
  return null;
}

/** Build the twin from this checkout, or with guest/runtime + guest/common taken from `rev`. */
function buildTwin(dir: string, rev: string | undefined): { bin: string; runtime: string } {
  let src = path.join(repoRoot, 'guest');
  let runtime = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: repoRoot, encoding: 'utf8' }).trim();
  const dirty = execFileSync('git', ['status', '--porcelain', '--', 'guest/runtime', 'guest/common'], { cwd: repoRoot, encoding: 'utf8' }).trim();
  if (dirty) runtime += '+uncommitted';
  if (rev) {
    src = path.join(dir, 'src');
    fs.mkdirSync(src, { recursive: true });
    const tar = spawnSync('sh', ['-c', `git archive ${JSON.stringify(rev)} guest/runtime guest/common | tar -x -C ${JSON.stringify(dir + '/src')} --strip-components=1`], { cwd: repoRoot, encoding: 'utf8' });
    if (tar.status !== 0) fail(`--runtime-from ${rev}: ${tar.stderr.trim()}`);
    fs.cpSync(path.join(repoRoot, 'guest/bench'), path.join(src, 'bench'), { recursive: true });
    runtime = execFileSync('git', ['rev-parse', '--short', rev], { cwd: repoRoot, encoding: 'utf8' }).trim();
  }
  const out = path.join(dir, 'twin');
  const b = spawnSync('make', ['-s', '-C', path.join(src, 'bench'), 'host', `O=${out}`], { encoding: 'utf8' });
  if (b.status !== 0) fail(`building the twin failed:\n${b.stdout}${b.stderr}`);
  return { bin: path.join(out, 'vugpu-bench-host'), runtime };
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-launches-'));
  const twin = buildTwin(dir, opt['runtime-from']);
  const run: Record<string, unknown> = {};
  // where and when each measurement ran: the host is shared, so its load is part of the figure
  const context = () => ({ runtime: twin.runtime, at: new Date().toISOString(), loadAvg1: Number(os.loadavg()[0]!.toFixed(2)) });
  let device = 'cpu';
  try {
    for (const mode of modes) {
      const socket = path.join(dir, `${mode}.sock`);
      const server = await startServer({
        socket, readyTimeoutMs: 120_000,
        args: ['--mode', mode, '--vram', '1G', '--engine', opt.engine!],
      });
      try {
        // the result file is named after the device that ran the programs (the server logs it)
        const logged = server.output.map((l) => /"programDevice":"([^"]*)"/.exec(l)?.[1]).find((x) => x !== undefined);
        if (logged !== undefined) device = resultDevice(logged);
        process.stderr.write(`[launches] twin ${mode}: ${launches} launches\n`);
        const ctx = context();
        const r = spawnSync(twin.bin, ['b2b', '--launches', String(launches)], {
          env: { ...process.env, VUGPU_SOCKET: socket }, encoding: 'utf8', timeout: 900_000, maxBuffer: 64 << 20,
        });
        const res = b2bOf(r.stdout.split('\n'));
        if (!res) fail(`twin ${mode}: no result line (exit ${r.status}):\n${r.stdout.slice(-2000)}${r.stderr.slice(-2000)}`);
        run[`twin-${mode}`] = { ...ctx, ...res };
        process.stderr.write(`[launches] twin ${mode}: p50 ${res.p50_us} µs, p99.9 ${res.p999_us} µs, max ${res.max_us} µs, >100 ms ${res.over_100ms}\n`);
      } finally {
        await server.stop();
      }
    }
    if (guestLaunches > 0) {
      const manifest = loadManifest();
      const socket = path.join(dir, 'guest.sock');
      const server = await startServer({
        socket, readyTimeoutMs: 120_000, args: ['--mode', 'fv', '--vram', '1G', '--engine', opt.engine!],
      });
      const logged = server.output.map((l) => /"programDevice":"([^"]*)"/.exec(l)?.[1]).find((x) => x !== undefined);
      if (logged !== undefined) device = resultDevice(logged);
      try {
        process.stderr.write(`[launches] guest (fv, kernel driver): ${guestLaunches} launches\n`);
        const ctx = context();
        const vm = bootGuest({
          manifest, sockets: [socket], run: '/opt/vugpu/bench-suite.sh', memoryMiB: 256,
          args: ['--only', 'b2b', '--', '--launches', String(guestLaunches)], timeoutMs: 1_800_000,
        });
        const g = await vm.done;
        const res = b2bOf(g.console);
        if (!res) fail(`guest: no result line (exit ${g.exitCode}):\n${g.console.slice(-30).join('\n')}`);
        run['guest-fv'] = { ...ctx, runtime: 'kernel driver (guest image from npm run setup)', ...res, accel: g.accel, note: guestLaunches < launches ? `${guestLaunches} launches, not ${launches}: a TCG guest's launch is slow` : undefined };
        process.stderr.write(`[launches] guest: p50 ${res.p50_us} µs, p99.9 ${res.p999_us} µs, max ${res.max_us} µs, >100 ms ${res.over_100ms} (${g.accel})\n`);
      } finally {
        await server.stop();
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  // keep the other labels of the last result (before / after side by side)
  let previous: Record<string, unknown> = {};
  try {
    previous = JSON.parse(fs.readFileSync(benchFile('launches', device), 'utf8')) as Record<string, unknown>;
  } catch {
    // first run
  }
  // a run replaces only what it measured (e.g. --guest-launches 0 keeps the label's guest figure)
  const prevRuns = (previous.runs as Record<string, Record<string, unknown>> | undefined) ?? {};
  const runs = { ...prevRuns, [label]: { ...(prevRuns[label] ?? {}), ...run } };
  const file = writeBenchResult('launches', device, {
    method: 'vugpu-bench b2b: NOP launch → vgSynchronize, each timed with CLOCK_MONOTONIC in the client; twin = the runtime\'s host ' +
      'backend against `vugpu serve --mode <m>` (a separate process); guest = the kernel driver in a QEMU guest (fv) running the same ' +
      'client. One VM, nothing else on the server. Times in µs; over_100ms = launches longer than 100 ms; longest = the five longest ' +
      'with their launch index; runtime = the commit of guest/runtime + guest/common the twin was built from; loadAvg1 = the host\'s ' +
      'load when the measurement began (a shared 2-core host).',
    engine: opt.engine,
    runs,
  });
  process.stderr.write(`[launches] wrote ${file}\n`);
}

await main();
