// Guest programs (hw-spec §6.3) end to end: the real `vugpu serve` (pt, program device = the host's
// Vulkan device: lavapipe here), a QEMU guest that loads the vugpu driver and runs the program
// suite (guest/programs/programs.sh suite: the five sample programs verified against the CPU,
// the PPROG limits and a refusal one step past each, spin below and past the loop limit, the
// kernel benchmarks as SPIR-V programs). Then the same programs through the native twin (the
// runtime's host backend, no VM) on the same server: every output digest must be the guest's,
// bit for bit. Then a driverless hostile guest's program attacks (guest/hostile/prog_attacks.c).
// Needs `npm run setup` (npm test runs it); without it the tests fail, they are never skipped.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { vfioErrorLines, type CheckResult } from '../../src/vm/console.ts';
import { runGuest, type GuestResult } from '../../src/vm/launcher.ts';
import { loadManifest, type Manifest } from '../../src/vm/manifest.ts';
import { startServer, type ServerProcess } from '../../src/vm/server-process.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const PROGRAMS = '/opt/vugpu/programs.sh';
const HOSTILE = '/opt/vugpu/hostile.sh';
const GUEST_TIMEOUT_MS = 600_000;
const SAMPLES = ['vecadd', 'sgemm', 'reduce', 'histogram', 'spin'];
const KERNEL_BENCHES = ['nop', 'loop', 'madd', 'mmul', 'fmadd', 'fmmul', 'backprop', 'bfs', 'hotspot', 'lud', 'srad', 'srad2'];
const PROGRAM_ATTACKS = [
  'program-invalid-spirv', 'program-module-size', 'program-capability', 'program-oob-access', 'program-endless-loop',
  'program-loop-limit', 'program-huge-grid', 'program-shared-memory', 'program-bindings', 'program-readonly',
  'program-foreign-memory', 'program-module-flood',
];

type Check = CheckResult & Record<string, unknown>;

let manifest: Manifest;
let server: ServerProcess;
let dir: string;
let suite: GuestResult;
let twinDir: string;

function context(r: GuestResult): string {
  return [
    `exit=${r.exitCode} signal=${r.signal} timedOut=${r.timedOut} guestExit=${r.guestExit} wall=${Math.round(r.durationMs)}ms`,
    '--- console (tail)', ...r.console.slice(-60),
    '--- server (tail)', server?.tail(30) ?? '',
  ].join('\n');
}

function records(r: GuestResult, kind: string): Record<string, unknown>[] {
  return r.records.filter((x) => x.kind === kind).map((x) => x.data as Record<string, unknown>);
}

/** Parse VUGPU-<KIND> lines of a native run. */
function lines(out: string, kind: string): Record<string, unknown>[] {
  return out.split('\n').filter((l) => l.startsWith(`VUGPU-${kind} `)).map((l) => JSON.parse(l.slice(kind.length + 7)) as Record<string, unknown>);
}

function make(target: string, dirName: string): void {
  const r = spawnSync('make', ['-s', '-C', path.join(ROOT, dirName), target, `O=${twinDir}`], { encoding: 'utf8' });
  expect(r.status, `${r.stdout}${r.stderr}`).toBe(0);
}

function native(bin: string, args: string[]): string {
  const r = spawnSync(path.join(twinDir, bin), args, {
    encoding: 'utf8', timeout: 300_000, env: { ...process.env, VUGPU_SOCKET: path.join(dir, 'gpu0.sock') },
  });
  return `${r.stdout ?? ''}${r.stderr ?? ''}`;
}

describe('guest programs: driver + runtime program API in a QEMU guest, the native twin, hostile programs', () => {
  beforeAll(async () => {
    manifest = loadManifest();
    for (const f of ['/opt/vugpu/vugpu-programs', PROGRAMS, '/programs/vecadd.spv', '/programs/builtins/madd.spv']) {
      expect(manifest.guestFiles, `guest image lacks ${f}: run npm run setup`).toContain(f);
    }
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-programs-'));
    twinDir = path.join(dir, 'twin');
    server = await startServer({ socket: path.join(dir, 'gpu0.sock'), args: ['--mode', 'pt', '--watchdog-ms', '3000'] });
    suite = await runGuest({
      manifest, sockets: [path.join(dir, 'gpu0.sock')], run: '/bin/sh', args: [PROGRAMS, 'suite', '--repeat', '2'],
      timeoutMs: GUEST_TIMEOUT_MS,
    });
  }, GUEST_TIMEOUT_MS + 60_000);

  afterAll(async () => {
    await server?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the sample programs run in the guest and verify against the CPU, the same digests in both rounds', () => {
    const info = context(suite);
    expect(suite.timedOut, info).toBe(false);
    const samples = suite.checks.filter((c) => String(c.check).startsWith('program-') && c.check !== 'program-limits'
      && c.check !== 'program-spin-run') as Check[];
    expect(samples.map((c) => c.check), info).toEqual([...SAMPLES, ...SAMPLES].map((s) => `program-${s}`));
    for (const c of samples) {
      expect(c.ok, JSON.stringify(c)).toBe(true);
      expect(c.digest, JSON.stringify(c)).toMatch(/^0x[0-9a-f]{8}$/);
      expect(c.first_us as number).toBeGreaterThan(0);
    }
    for (let i = 0; i < SAMPLES.length; i++) expect(samples[i + SAMPLES.length].digest).toBe(samples[i].digest);
  });

  test('the limits are within the envelope, and every launch one step past one is BAD_PROGRAM with its reason', () => {
    const limits = suite.checks.find((c) => c.check === 'program-limits') as Check | undefined;
    expect(limits, context(suite)).toBeDefined();
    expect(limits!.ok, JSON.stringify(limits)).toBe(true);
    expect(limits!.version).toBe('0x00010001');
    const probes = suite.checks.filter((c) => String(c.check).startsWith('limit-')) as Check[];
    expect(probes.length, context(suite)).toBeGreaterThanOrEqual(18);
    for (const p of probes) {
      expect(p.ok, JSON.stringify(p)).toBe(true);
      if (p.expect !== 'ok') {
        expect(p.code_name, JSON.stringify(p)).toBe('BAD_PROGRAM');
        expect(p.reason_name, JSON.stringify(p)).toBe(p.expect);
      }
    }
  });

  test('spin: a short run is right; one past the loop limit stops with PROGRAM_LOOP_LIMIT (or WATCHDOG), never a wrong result', () => {
    const spins = suite.checks.filter((c) => c.check === 'program-spin-run') as Check[];
    expect(spins.map((s) => s.iterations), context(suite)).toEqual([1000, 4294967295]);
    for (const s of spins) expect(s.ok, JSON.stringify(s)).toBe(true);
    expect(spins[0].outcome).toBe('ok');
    expect(spins[1].outcome).toBe((spins[1].loop_limit as number) > 0 ? 'PROGRAM_LOOP_LIMIT' : 'WATCHDOG');
  });

  test('the kernel benchmarks run as SPIR-V programs (--programs) and verify against the CPU', () => {
    const benches = records(suite, 'BENCH');
    expect(benches.map((b) => b.bench), context(suite)).toEqual(KERNEL_BENCHES);
    for (const b of benches) {
      expect(b.ok, JSON.stringify(b)).toBe(true);
      expect(b.verified, JSON.stringify(b)).toBe(true);
      expect(b.programs, JSON.stringify(b)).toBe(true);
      expect(b.program_launches as number, JSON.stringify(b)).toBeGreaterThan(0);
    }
    expect(suite.guestExit, context(suite)).toBe(0);
    expect(suite.records.filter((r) => r.kind === 'PARSE_ERROR' || r.kind === 'ERROR'), context(suite)).toEqual([]);
    expect(vfioErrorLines(suite.stderr)).toEqual([]);
  });

  test('the native twin computes the same outputs, bit for bit', () => {
    make('host', 'guest/programs');
    make('host', 'guest/bench');
    const guestDigests = new Map(suite.checks.filter((c) => SAMPLES.includes(String(c.check).slice(8)))
      .map((c) => [String(c.check), (c as Check).digest]));
    const out = native('vugpu-programs-host', ['--dir', path.join(ROOT, 'build/spirv/guest/programs')]);
    const checks = lines(out, 'CHECK');
    expect(checks.map((c) => c.check), out).toEqual(SAMPLES.map((s) => `program-${s}`));
    for (const c of checks) {
      expect(c.ok, JSON.stringify(c)).toBe(true);
      expect(c.digest, String(c.check)).toBe(guestDigests.get(String(c.check)));
    }
    const guestBench = new Map(records(suite, 'BENCH').map((b) => [String(b.bench), b.digest]));
    for (const b of ['madd', 'fmmul', 'hotspot', 'lud']) {
      const o = native('vugpu-bench-host', [b, '--programs', path.join(ROOT, 'build/spirv/native/shaders/builtins')]);
      const rec = lines(o, 'BENCH')[0];
      expect(rec?.ok, o).toBe(true);
      expect(rec.backend).toBe('host');
      expect(rec.digest, b).toBe(guestBench.get(b));
    }
  }, 600_000);

  test('hostile programs from a driverless guest are contained as the spec says', async () => {
    const r = await runGuest({
      manifest, sockets: [path.join(dir, 'gpu0.sock')], run: '/bin/sh',
      args: [HOSTILE, 'attack', '--only', 'baseline:programs:legit-after', '--endless-ms', '30000'], timeoutMs: GUEST_TIMEOUT_MS,
    });
    const info = context(r);
    expect(r.checks.map((c) => c.check), info).toEqual(['baseline', ...PROGRAM_ATTACKS, 'legit-after-attacks']);
    for (const c of r.checks) expect(c.ok, `${c.check}: ${JSON.stringify(c)}`).toBe(true);
    const endless = r.checks.find((c) => c.check === 'program-endless-loop') as Check;
    expect(endless.rebound_channel_works).toBe(true);
    expect(server.alive, server.tail()).toBe(true);
    expect(server.errorLines(), server.tail()).toEqual([]);
  }, GUEST_TIMEOUT_MS + 30_000);
});
