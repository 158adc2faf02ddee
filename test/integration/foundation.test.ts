// Foundation end to end: the real `vugpu serve` process, a real QEMU (vfio-user-pci) booting the
// test kernel, the guest diag driver (guest/foundation) checking ID registers, scratch, BAR1
// coherence both ways, DMA both ways and MSI-X delivery. Needs `npm run setup` (npm test runs it);
// without it the tests fail with the setup error, they are never skipped.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { vfioErrorLines, type CheckResult } from '../../src/vm/console.ts';
import { bootGuest, runGuest, type GuestResult } from '../../src/vm/launcher.ts';
import { loadManifest, type Manifest } from '../../src/vm/manifest.ts';
import { startServer, type ServerProcess } from '../../src/vm/server-process.ts';

const RUN = '/opt/vugpu/foundation-test.sh';
// Every check the guest program must report: a check that silently did not run fails the test.
const REQUIRED_CHECKS = [
  'module-load', 'driver-info', 'id-register', 'diag-magic', 'bar0-mmap-read', 'scratch',
  'bar1-guest-write', 'bar1-device-write', 'dma-to-vram', 'dma-from-vram', 'msix',
];
const GUEST_TIMEOUT_MS = 240_000;

let manifest: Manifest;
let server: ServerProcess;
let dir: string;
let socket: string;

function describeFailure(r: GuestResult, extra = ''): string {
  return [
    extra,
    `exit=${r.exitCode} signal=${r.signal} timedOut=${r.timedOut} guestExit=${r.guestExit} wall=${Math.round(r.durationMs)}ms`,
    '--- console (tail)', ...r.console.slice(-60),
    '--- qemu stderr', ...r.stderr,
    '--- server (tail)', server?.tail(30) ?? '',
  ].join('\n');
}

function expectAllChecksPass(r: GuestResult): void {
  const info = describeFailure(r);
  expect(r.timedOut, info).toBe(false);
  const byName = new Map<string, CheckResult>(r.checks.map((c) => [c.check, c]));
  expect(r.checks.length, info).toBe(byName.size); // no check reported twice
  for (const name of REQUIRED_CHECKS) {
    expect(byName.get(name), `check ${name} missing\n${info}`).toBeDefined();
  }
  const failed = r.checks.filter((c) => !c.ok);
  expect(failed, info).toEqual([]);
  expect(r.records.filter((x) => x.kind === 'PARSE_ERROR' || x.kind === 'ERROR'), info).toEqual([]);
  expect(r.guestExit, info).toBe(0);
  expect(r.exitCode, info).toBe(0); // poweroff -f, not a crash or a kill
  expect(vfioErrorLines(r.stderr), info).toEqual([]);
}

// Started by the first test that needs it (not in beforeAll: a missing setup must show as a
// failed test with the setup message, not as skipped tests).
let started: Promise<void> | null = null;
function serverUp(): Promise<void> {
  started ??= (async () => {
    manifest = loadManifest(); // throws "not set up … run npm run setup" when missing
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-foundation-'));
    socket = path.join(dir, 'gpu0.sock');
    server = await startServer({ socket });
  })();
  return started;
}

describe('foundation: QEMU guest against vugpu serve', () => {

  afterAll(async () => {
    await server?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the guest driver passes every check (IDs, scratch, BAR1 both ways, DMA both ways, MSI-X)', async () => {
    await serverUp();
    const r = await runGuest({ manifest, sockets: [socket], run: RUN, timeoutMs: GUEST_TIMEOUT_MS });
    expectAllChecksPass(r);
    expect(server.alive, server.tail()).toBe(true);
    expect(server.errorLines()).toEqual([]);
  });

  test('QEMU SIGKILLed in the middle of the MMIO loop; a second guest on the same server passes', async () => {
    await serverUp();
    const pid = server.pid;
    // A long BAR0 loop (~40 µs per access under TCG): killed long before it ends.
    const vm = bootGuest({ manifest, sockets: [socket], run: RUN, args: ['--bench', '1000000'], timeoutMs: GUEST_TIMEOUT_MS });
    const phase = await vm.waitFor((rec) => rec.kind === 'PHASE' && rec.data.phase === 'bar0-read');
    expect(phase.kind, `guest never reached the MMIO loop\n${vm.console.slice(-40).join('\n')}\n${vm.stderr.join('\n')}`).toBe('PHASE');
    await new Promise((r) => setTimeout(r, 1000)); // well inside the loop: trapped accesses in flight
    const killed = await vm.kill('SIGKILL');
    expect(killed.signal).toBe('SIGKILL');
    expect(killed.records.some((rec) => rec.kind === 'BENCH' || rec.kind === 'EXIT')).toBe(false); // it really was mid-loop

    expect(server.alive, `server died after the client was killed:\n${server.tail()}`).toBe(true);
    const r = await runGuest({ manifest, sockets: [socket], run: RUN, timeoutMs: GUEST_TIMEOUT_MS });
    expectAllChecksPass(r);
    expect(server.alive).toBe(true);
    expect(server.pid).toBe(pid); // the same server process served both guests
  });
});
