// Guest programs in the mediated modes: one `vugpu serve` with an fv VM and a pv-batch VM (the
// aggregator: shadow page tables, shadow channels, per-VM program caches). First the fv guest
// alone runs the sample programs (the solo digests), then both guests run them at the same time,
// twice each: every sample verifies against the CPU in both guests and every output digest is the
// solo run's, bit for bit. Needs `npm run setup` (npm test runs it); never skipped.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { vfioErrorLines, type CheckResult } from '../../src/vm/console.ts';
import { runGuest, type GuestResult } from '../../src/vm/launcher.ts';
import { loadManifest, type Manifest } from '../../src/vm/manifest.ts';
import { startServer, type ServerProcess } from '../../src/vm/server-process.ts';

const PROGRAMS = '/opt/vugpu/programs.sh';
const GUEST_TIMEOUT_MS = 600_000;
const SAMPLES = ['vecadd', 'sgemm', 'reduce', 'histogram', 'spin'];

type Check = CheckResult & Record<string, unknown>;

let manifest: Manifest;
let server: ServerProcess;
let dir: string;
let solo: GuestResult;
let fv: GuestResult;
let pv: GuestResult;

function context(r: GuestResult): string {
  return [
    `exit=${r.exitCode} timedOut=${r.timedOut} guestExit=${r.guestExit} wall=${Math.round(r.durationMs)}ms`,
    '--- console (tail)', ...r.console.slice(-40),
    '--- server (tail)', server?.tail(30) ?? '',
  ].join('\n');
}

function samples(r: GuestResult): Check[] {
  return r.checks.filter((c) => SAMPLES.some((s) => c.check === `program-${s}`)) as Check[];
}

describe('guest programs in fv and pv-batch, two VMs at once, bit-identical to a solo run', () => {
  beforeAll(async () => {
    manifest = loadManifest();
    expect(manifest.guestFiles, 'guest image lacks the program runner: run npm run setup').toContain(PROGRAMS);
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-programs-med-'));
    const a = path.join(dir, 'a.sock');
    const b = path.join(dir, 'b.sock');
    // The first socket is a third, idle fv VM (startServer's own --socket).
    server = await startServer({
      socket: path.join(dir, 'idle.sock'),
      args: ['--mode', 'fv', '--policy', 'band', '--vm', `name=a,socket=${a},mode=fv,slice=128M`, '--vm', `name=b,socket=${b},mode=pv-batch,slice=128M`],
    });
    for (const s of [a, b]) {
      const deadline = performance.now() + 30_000;
      while (!fs.existsSync(s) && performance.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(fs.existsSync(s), server.tail()).toBe(true);
    }
    solo = await runGuest({ manifest, sockets: [a], run: '/bin/sh', args: [PROGRAMS], timeoutMs: GUEST_TIMEOUT_MS });
    [fv, pv] = await Promise.all([
      runGuest({ manifest, sockets: [a], run: '/bin/sh', args: [PROGRAMS, '--repeat', '2'], timeoutMs: GUEST_TIMEOUT_MS }),
      runGuest({ manifest, sockets: [b], run: '/bin/sh', args: [PROGRAMS, '--pv', '2', '--repeat', '2'], timeoutMs: GUEST_TIMEOUT_MS }),
    ]);
  }, 3 * GUEST_TIMEOUT_MS);

  afterAll(async () => {
    await server?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the fv guest alone runs every sample program, verified against the CPU', () => {
    const s = samples(solo);
    expect(s.map((c) => c.check), context(solo)).toEqual(SAMPLES.map((n) => `program-${n}`));
    for (const c of s) expect(c.ok, JSON.stringify(c)).toBe(true);
  });

  test('fv and pv-batch guests at the same time: every sample verifies, every digest equals the solo run', () => {
    const want = new Map(samples(solo).map((c) => [c.check, c.digest]));
    for (const [name, r] of [['fv', fv], ['pv-batch', pv]] as const) {
      const s = samples(r);
      expect(s.length, `${name}\n${context(r)}`).toBe(2 * SAMPLES.length);
      for (const c of s) {
        expect(c.ok, `${name}: ${JSON.stringify(c)}`).toBe(true);
        expect(c.digest, `${name}: ${JSON.stringify(c)}`).toBe(want.get(c.check));
      }
    }
  });

  test('both guests ended cleanly and the server logged no error', () => {
    for (const r of [solo, fv, pv]) {
      expect(r.timedOut, context(r)).toBe(false);
      expect(r.guestExit, context(r)).toBe(0);
      expect(vfioErrorLines(r.stderr), context(r)).toEqual([]);
    }
    expect(server.alive, server.tail()).toBe(true);
    expect(server.errorLines(), server.tail()).toEqual([]);
  });
});
