// Mediated modes end to end with real guests: the vugpu server (the `Vugpu` of `vugpu serve`, run
// in this process so that counters can be read synchronously) with several VMs on one engine,
// QEMU guests (TCG) loading the guest driver (vugpu.ko, pv=0|1|2) and running the 14-benchmark
// suite (guest/bench/suite.sh). Per benchmark the VM's counters are read the moment its
// VUGPU-BENCH line arrives on the console, giving GPUvm's numbers per benchmark and mode (the
// next benchmark process may have begun its init by then: counts are close, not exact; the
// native twin, aggregator-twin.test.ts, has exact ones for the modes it can run).
// Needs `npm run setup` (npm test runs it); without it the tests fail, they are never skipped.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { vfioErrorLines, type GuestRecord } from '../../src/vm/console.ts';
import { bootGuest, type GuestResult } from '../../src/vm/launcher.ts';
import { loadManifest, type Manifest } from '../../src/vm/manifest.ts';
import { Vugpu } from '../../src/server.ts';

const SUITE = '/opt/vugpu/bench-suite.sh';
const BENCHES = ['nop', 'loop', 'madd', 'mmul', 'fmadd', 'fmmul', 'cpy', 'pincpy', 'backprop', 'bfs', 'hotspot', 'lud', 'srad', 'srad2'];
const GUEST_TIMEOUT_MS = 1_500_000;
const MODES = [
  { vm: 'naive', mode: 'fv-naive', pv: 0 },
  { vm: 'fv', mode: 'fv', pv: 0 },
  { vm: 'pv', mode: 'pv', pv: 1 },
  { vm: 'batch', mode: 'pv-batch', pv: 2 },
] as const;

type Counters = Record<string, number>;
let manifest: Manifest;
let server: Vugpu | null = null;
let dir: string;

const sock = (vm: string) => path.join(dir, `${vm}.sock`);

let started: Promise<void> | null = null;
function serverUp(): Promise<void> {
  started ??= (async () => {
    manifest = loadManifest();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-agg-'));
    server = new Vugpu({
      vramSize: 1 << 30, channels: 64, watchdogMs: 20_000, policy: 'band',
      vms: [
        ...MODES.map((m) => ({ name: m.vm, socket: sock(m.vm), mode: m.mode, slice: 128 << 20 })),
        { name: 'a', socket: sock('a'), mode: 'fv', slice: 128 << 20 },
        { name: 'b', socket: sock('b'), mode: 'fv', slice: 128 << 20 },
        { name: 'evil', socket: sock('evil'), mode: 'fv', slice: 64 << 20 },
      ],
    });
  })();
  return started;
}

function counters(vm: string): Counters {
  return { ...(server!.metrics.get(vm) as unknown as Counters) };
}

interface SuiteRun {
  result: GuestResult;
  /** Counter snapshots of the VM taken at each VUGPU-BENCH line (and one before the first). */
  snaps: { bench: string; ok: boolean; c: Counters }[];
}

/** Boot a guest on `vm` running the suite; snapshot the VM's counters at every BENCH line. */
async function suite(vm: string, args: string[]): Promise<SuiteRun> {
  const snaps: SuiteRun['snaps'] = [];
  const snap = (bench: string, ok: boolean) => snaps.push({ bench, ok, c: counters(vm) });
  const g = bootGuest({
    // Through sh: the script's mode bits are not guaranteed in the initramfs.
    manifest, sockets: [sock(vm)], run: '/bin/sh', args: [SUITE, ...args], timeoutMs: GUEST_TIMEOUT_MS,
    onLine: (_l, rec: GuestRecord | null) => {
      if (rec?.kind === 'PHASE' && rec.data.phase === 'driver-loaded') snap('(driver)', true);
      if (rec?.kind === 'BENCH') snap(String(rec.data.bench), rec.data.ok === true);
    },
  });
  const result = await g.done;
  return { result, snaps };
}

function failure(r: GuestResult): string {
  return [
    `exit=${r.exitCode} signal=${r.signal} timedOut=${r.timedOut} guestExit=${r.guestExit} wall=${Math.round(r.durationMs)}ms`,
    '--- console (tail)', ...r.console.slice(-60), '--- qemu stderr', ...r.stderr,
  ].join('\n');
}

function expectSuitePassed(run: SuiteRun, benches = BENCHES): void {
  const r = run.result;
  const info = failure(r);
  expect(r.timedOut, info).toBe(false);
  const got = r.records.filter((x) => x.kind === 'BENCH').map((x) => x.data);
  expect(got.map((b) => b.bench), info).toEqual(benches);
  expect(got.filter((b) => b.ok !== true), info).toEqual([]);
  expect(r.records.filter((x) => x.kind === 'PARSE_ERROR' || x.kind === 'ERROR'), info).toEqual([]);
  expect(r.guestExit, info).toBe(0);
  expect(vfioErrorLines(r.stderr), info).toEqual([]);
}

const KEYS = ['mmioReads', 'mmioWrites', 'tlbFlushes', 'shadowRebuilds', 'shadowPtesWritten', 'hypercalls', 'doorbells', 'bar1Reads', 'bar1Writes'];
const table: Record<string, unknown>[] = [];
function record(mode: string, run: SuiteRun): void {
  const s = [...run.snaps];
  for (let i = 1; i < s.length; i++) {
    const d: Record<string, number> = {};
    for (const k of KEYS) d[k] = (s[i]!.c[k] ?? 0) - (s[i - 1]!.c[k] ?? 0);
    table.push({
      bench: s[i]!.bench, mode, mmio: d.mmioReads! + d.mmioWrites!, bar1: d.bar1Reads! + d.bar1Writes!, flushes: d.tlbFlushes,
      rebuilds: d.shadowRebuilds, ptes: d.shadowPtesWritten, hypercalls: d.hypercalls, doorbells: d.doorbells,
    });
  }
}

describe('aggregator: QEMU guests on mediated vGPUs', () => {
  afterAll(async () => {
    if (table.length) {
      console.log('\nper benchmark and mode (QEMU guest, kernel driver; counts between BENCH lines):');
      console.table(table);
    }
    server?.close();
    server = null;
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('two guests run the suite concurrently in fv; a hostile guest faults and is killed mid-kernel on its own', async () => {
    await serverUp();
    const [a, b, evil] = await Promise.all([
      suite('a', []),
      suite('b', []),
      suite('evil', ['--no-bench', '--checks']),
    ]);
    expectSuitePassed(a);
    expectSuitePassed(b);
    // The hostile guest: a deliberate MMU fault, a process killed in the middle of a kernel.
    const ev = evil.result;
    expect(ev.checks.find((c) => c.check === 'fault-reported')?.ok, failure(ev)).toBe(true);
    expect(ev.checks.find((c) => c.check === 'kill-mid-kernel')?.ok, failure(ev)).toBe(true);
    expect(counters('evil').faults!).toBeGreaterThan(0);
    for (const vm of ['a', 'b']) expect(counters(vm).faults! + counters(vm).channelErrors!, vm).toBe(0);
    // Every process of every guest released its channels.
    expect(server!.aggregator!.chidsInUse).toBe(0);
  }, GUEST_TIMEOUT_MS + 60_000);

  for (const m of MODES) {
    test(`the suite passes in ${m.mode} (driver pv=${m.pv})`, async () => {
      await serverUp();
      const run = await suite(m.vm, m.pv ? ['--pv', String(m.pv)] : []);
      expectSuitePassed(run);
      record(m.mode, run);
      const c = counters(m.vm);
      expect(c.faults! + c.channelErrors!).toBe(0);
      if (m.pv) {
        expect(c.hypercalls!).toBeGreaterThan(0);
        expect(c.shadowRebuilds!).toBe(0);
      } else {
        expect(c.hypercalls!).toBe(0);
        expect(c.shadowRebuilds!).toBeGreaterThan(0);
      }
      if (m.mode === 'fv-naive') expect(c.bar1Reads! + c.bar1Writes!).toBeGreaterThan(0);
      else expect(c.bar1Reads! + c.bar1Writes!).toBe(0);
    }, GUEST_TIMEOUT_MS + 60_000);
  }
});
