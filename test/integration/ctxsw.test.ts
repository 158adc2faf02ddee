// The engine's context switch end to end (issue 34 on a GPU; src/gpu/ctxsw.ts): one `vugpu serve`
// (fv, two VMs, `--timeslice-always`, which makes lavapipe behave as a GPU that cannot switch a
// running program out) and two native twins, as bench:neighbour runs them: VM b launches the NOP
// back to back while VM a launches the endless program twice. Each of a's launches must end with
// CTXSW_TIMEOUT (cut after its timeslice because b waited, long before the watchdog), and b must
// have no failed or wrong launch and no launch longer than the bound below. The same scenario on
// the H200 is bench/results/neighbour/h200.json (docs/results.md).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, test } from 'vitest';

const ROOT = new URL('../../', import.meta.url).pathname;
const WATCHDOG_MS = 3000;
/**
 * b's longest launch while a's programs are cut: the 20 ms timeslice (the scheduler's release of
 * a's submission comes at the same time), the cut (the cancel word, read every 64th back-edge)
 * and b's NOP — tens of ms; a loaded 2-core host adds the time to schedule the server, the twins
 * and lavapipe's threads beside a's spinning ones. Without the switch b would not fail here (the
 * CPU device time-slices), so the outcome is what this test is about; the bound is a quarter of
 * the watchdog period, which b would wait if a's launch held the device.
 */
const BOUND_MS = WATCHDOG_MS / 4;

interface Run {
  engine: string;
  error?: string;
  a: { outcome: string | null; launches: { outcome: string; ms: number }[] };
  b: { launches: number; failures: number; wrong: number; maxMs: number; error?: string; duringA: { windows: number; launches: number; failures: number } };
  serverErrors: number;
}

test('a VM\'s endless programs are cut for its waiting neighbour, which never fails (serve --timeslice-always, twins)', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-ctxsw-'));
  try {
    const json = path.join(dir, 'neighbour.json');
    const r = spawnSync(process.execPath, [
      path.join(ROOT, 'bench/neighbour.ts'), '--engine', 'auto', '--timeslice-always', '--endless', '2',
      '--attack-after', '1', '--tail', '1', '--watchdog-ms', String(WATCHDOG_MS), '--json', json,
    ], { encoding: 'utf8', timeout: 150_000 });
    const out = `${r.stdout}\n${r.stderr}`.split('\n').filter((l) => !l.includes('"level":30')).slice(-30).join('\n');
    expect(r.status, out).toBe(0);
    const res = JSON.parse(fs.readFileSync(json, 'utf8')) as { serveArgs: string[]; runs: Run[] };
    expect(res.serveArgs).toContain('--timeslice-always');
    const run = res.runs[0]!;
    const ctx = `${JSON.stringify(run)}\n${out}`;
    expect(run.error, ctx).toBeUndefined();
    expect(run.a.launches.map((l) => l.outcome), ctx).toEqual(['CTXSW_TIMEOUT', 'CTXSW_TIMEOUT']);
    for (const l of run.a.launches) expect(l.ms, ctx).toBeLessThan(WATCHDOG_MS / 2);
    expect(run.b.error, ctx).toBeUndefined();
    expect(run.b.launches, ctx).toBeGreaterThan(100);
    expect(run.b.failures, ctx).toBe(0);
    // The neighbour was launching while a's programs ran and were cut, not only around them.
    expect(run.b.duringA.windows, ctx).toBeGreaterThan(0);
    expect(run.b.duringA.launches, ctx).toBeGreaterThan(0);
    expect(run.b.duringA.failures, ctx).toBe(0);
    expect(run.b.wrong, ctx).toBe(0);
    expect(run.b.maxMs, ctx).toBeLessThan(BOUND_MS);
    expect(run.serverErrors, ctx).toBe(0);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}, 180_000);
