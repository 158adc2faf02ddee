// The guest stack end to end: the real `vugpu serve` (pt), a QEMU guest that loads the vugpu
// driver (guest/driver) and runs the 14 GPUvm benchmarks through the runtime (guest/runtime,
// guest/bench) at their small sizes, then the robustness checks of bench-suite.sh: an MMU fault
// reaches the process, a process SIGKILLed in the middle of a kernel leaves the device usable
// (the next run in the same guest passes), rmmod + insmod works, unbinding the driver under a
// waiting process gives that process an error (not a hang). Then the demo (src/demo):
// guest beside the native twin. Needs `npm run setup` (npm test runs it); without it the tests
// fail with the setup error, they are never skipped.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { vfioErrorLines } from '../../src/vm/console.ts';
import { runGuest, type GuestResult } from '../../src/vm/launcher.ts';
import { loadManifest, type Manifest } from '../../src/vm/manifest.ts';
import { startServer, type ServerProcess } from '../../src/vm/server-process.ts';
import { BENCHMARKS, STAGES, toBenchRecord, type BenchRecord } from '../../src/demo/records.ts';
import { runDemo } from '../../src/demo/index.ts';

const SUITE = '/opt/vugpu/bench-suite.sh';
const GUEST_TIMEOUT_MS = 600_000;

let manifest: Manifest;
let server: ServerProcess;
let dir: string;
let run: GuestResult;
let benches: BenchRecord[];

function context(): string {
  return [
    `exit=${run.exitCode} signal=${run.signal} timedOut=${run.timedOut} guestExit=${run.guestExit} wall=${Math.round(run.durationMs)}ms`,
    '--- console (tail)', ...run.console.slice(-80),
    '--- qemu stderr', ...run.stderr.slice(-20),
    '--- server (tail)', server?.tail(30) ?? '',
  ].join('\n');
}

function check(name: string): Record<string, unknown> | undefined {
  return run.checks.find((c) => c.check === name);
}

describe('guest suite: vugpu driver + runtime + GPUvm benchmarks in a QEMU guest (pt)', () => {
  beforeAll(async () => {
    manifest = loadManifest(); // throws "not set up … run npm run setup" when missing
    for (const f of ['/opt/vugpu/vugpu.ko', '/opt/vugpu/vugpu-bench', SUITE]) {
      expect(manifest.guestFiles, `guest image lacks ${f}: run npm run setup`).toContain(f);
    }
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-guest-suite-'));
    const socket = path.join(dir, 'gpu0.sock');
    server = await startServer({ socket, args: ['--mode', 'pt'] });
    run = await runGuest({ manifest, sockets: [socket], run: SUITE, args: ['--checks'], timeoutMs: GUEST_TIMEOUT_MS });
    benches = [];
    for (const r of run.records) {
      if (r.kind !== 'BENCH') continue;
      const b = toBenchRecord(r.data);
      if (typeof b === 'string') throw new Error(`malformed VUGPU-BENCH record: ${b}\n${context()}`);
      benches.push(b);
    }
  });

  afterAll(async () => {
    await server?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('all 14 benchmarks run in the guest through the driver and verify against the CPU reference', () => {
    const info = context();
    expect(run.timedOut, info).toBe(false);
    // the suite's runs come first; the checks add three more madd runs at the end
    const suite = benches.slice(0, BENCHMARKS.length);
    expect(suite.map((b) => b.bench), info).toEqual([...BENCHMARKS]);
    for (const b of suite) {
      const what = `${b.bench}: ${JSON.stringify(b)}\n${info}`;
      expect(b.ok, what).toBe(true);
      expect(b.verified, what).toBe(true);
      expect(b.backend, what).toBe('kmod');
      expect(b.error, what).toBeUndefined();
      expect(b.total_us, what).toBeGreaterThan(0);
      expect(STAGES.reduce((s, k) => s + b.stages_us[k], 0), what).toBeCloseTo(b.total_us, -1);
      // the run really went through the driver: BAR0 accesses (at least a doorbell), and fence
      // interrupts for every benchmark that copies (copies ask for one; nop's fence may well
      // have passed before anyone had to sleep on it)
      expect(b.mmio, what).toBeGreaterThan(0);
      if (b.bench !== 'nop') expect(b.irqs, what).toBeGreaterThan(0);
    }
  });

  test('an MMU fault comes back to the process as VG_ERROR_ILLEGAL_ADDRESS with the faulting VA', () => {
    const c = check('fault-reported');
    expect(c, context()).toBeDefined();
    expect(c!.ok, JSON.stringify(c)).toBe(true);
    expect(String(c!.detail)).toContain('0x7000000000');
  });

  test('a process SIGKILLed mid-kernel releases its channel and VRAM; the next run in the same guest passes', () => {
    const kill = check('kill-mid-kernel');
    const after = check('after-kill');
    expect(kill, context()).toBeDefined();
    expect(kill!.ok, JSON.stringify(kill)).toBe(true);
    expect(after, context()).toBeDefined();
    expect(after!.ok, JSON.stringify(after)).toBe(true);
    // the run after the kill is a real, verified benchmark run
    const madds = benches.filter((b) => b.bench === 'madd');
    expect(madds.length, context()).toBe(4);
    expect(madds.every((b) => b.ok && b.verified)).toBe(true);
  });

  test('the driver unloads and reloads (rmmod + insmod) and works afterwards', () => {
    const c = check('reload');
    expect(c, context()).toBeDefined();
    expect(c!.ok, JSON.stringify(c)).toBe(true);
  });

  test('unbinding the driver under a process waiting on a kernel fails that process cleanly; bind again works', () => {
    const c = check('unbind-busy');
    expect(c, context()).toBeDefined();
    expect(c!.ok, JSON.stringify(c)).toBe(true);
  });

  test('the whole guest run was clean and the server survived it', () => {
    const info = context();
    expect(run.guestExit, info).toBe(0);
    expect(run.exitCode, info).toBe(0); // poweroff, not a crash or a kill
    expect(run.records.filter((r) => r.kind === 'PARSE_ERROR' || r.kind === 'ERROR'), info).toEqual([]);
    expect(run.checks.map((c) => c.check).sort(), info).toEqual(['after-kill', 'fault-reported', 'kill-mid-kernel', 'reload', 'unbind-busy']);
    expect(vfioErrorLines(run.stderr), info).toEqual([]);
    expect(server.alive, server.tail()).toBe(true);
    expect(server.errorLines(), server.tail()).toEqual([]);
  });

  test('the demo runs the suite in a guest and natively and compares them stage by stage', async () => {
    const json = path.join(dir, 'demo.json');
    const lines: string[] = [];
    const report = await runDemo({ benches: ['nop', 'madd', 'bfs'], repeat: 1, json, print: (t) => lines.push(t) });
    const out = lines.join('\n');
    expect(report.ok, out).toBe(true);
    expect(report.rows.map((r) => r.bench)).toEqual(['nop', 'madd', 'bfs']);
    for (const r of report.rows) {
      expect(r.guest?.backend, out).toBe('kmod');
      expect(r.native?.backend, out).toBe('host');
      expect(r.guest?.verified && r.native?.verified, out).toBe(true);
      expect(r.ratio.total, out).toBeGreaterThan(0);
      expect(r.ratio.stages.Exec, out).toBeGreaterThan(0);
    }
    expect(out).toContain('Stage times');
    const saved = JSON.parse(fs.readFileSync(json, 'utf8')) as { rows: { bench: string }[]; ok: boolean };
    expect(saved.ok).toBe(true);
    expect(saved.rows.map((r) => r.bench)).toEqual(['nop', 'madd', 'bfs']);
  });
});
