// MMIO benchmark (npm run bench:mmio): the cost of a trapped BAR0 access as a guest sees it
// (QEMU vfio-user-pci → socket → vugpu serve → back), BAR1 aperture bandwidth, and, for
// comparison, the TypeScript vfio-user client's round trip to the same server without QEMU.
// Writes bench/results/mmio/cpu.json and prints a table.
//   node bench/mmio.ts [N]     (N trapped reads and N writes, default 20000; env VUGPU_BENCH_N)
// Reference: a Python server measured ~40 µs per trapped access under TCG (feasibility notes).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { VfioUserClient } from '../src/device-model/client.ts';
import { runGuest } from '../src/vm/launcher.ts';
import { loadManifest } from '../src/vm/manifest.ts';
import { startServer } from '../src/vm/server-process.ts';
import { chooseAccel } from '../src/vm/accel.ts';
import { environment, writeBenchResult } from './lib/common.ts';

const BAR0 = 0;
const DIAG_SCRATCH0 = 0x00a010;
const DIAG_SCRATCH1 = 0x00a014;

interface Stats { mean: number; p50: number; p99: number; min: number; max: number }

function stats(samplesNs: Float64Array): Stats {
  const s = Float64Array.from(samplesNs).sort();
  let sum = 0;
  for (const v of s) sum += v;
  const us = (v: number) => Math.round(v / 10) / 100; // ns → µs, 2 decimals
  return {
    mean: us(sum / s.length),
    p50: us(s[s.length >> 1]!),
    p99: us(s[Math.floor((s.length * 99) / 100)]!),
    min: us(s[0]!),
    max: us(s[s.length - 1]!),
  };
}

async function clientRtt(socket: string, n: number): Promise<{ read: Stats; write: Stats }> {
  const client = VfioUserClient.connect(socket);
  try {
    await client.version();
    const warm = Math.min(1000, n);
    for (let i = 0; i < warm; i++) await client.read32(BAR0, DIAG_SCRATCH0);
    const rd = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const t0 = process.hrtime.bigint();
      await client.read32(BAR0, DIAG_SCRATCH0);
      rd[i] = Number(process.hrtime.bigint() - t0);
    }
    const wr = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const t0 = process.hrtime.bigint();
      await client.write32(BAR0, DIAG_SCRATCH1, i);
      wr[i] = Number(process.hrtime.bigint() - t0);
    }
    return { read: stats(rd), write: stats(wr) };
  } finally {
    client.close();
  }
}

function num(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new Error(`guest bench record: ${what} missing`);
  return v;
}

function guestStats(v: unknown, what: string): Stats {
  const o = (v ?? {}) as Record<string, unknown>;
  return { mean: num(o.mean, `${what}.mean`), p50: num(o.p50, `${what}.p50`), p99: num(o.p99, `${what}.p99`),
    min: num(o.min, `${what}.min`), max: num(o.max, `${what}.max`) };
}

async function main(): Promise<void> {
  const n = Number(process.argv[2] ?? process.env.VUGPU_BENCH_N ?? 20000);
  if (!Number.isInteger(n) || n < 20000) throw new Error(`N must be an integer ≥ 20000 (got ${n})`);
  const manifest = loadManifest();
  const accel = chooseAccel();
  const env = environment(manifest, accel);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-bench-'));
  const socket = path.join(dir, 'gpu0.sock');
  const server = await startServer({ socket });
  let guest: Record<string, unknown>;
  let rtt: { read: Stats; write: Stats };
  let guestWallS: number;
  try {
    process.stderr.write(`[bench] booting guest (${accel.accel}), ${n} trapped reads + ${n} writes\n`);
    const mark = server.output.length;
    const r = await runGuest({ manifest, sockets: [socket], run: '/opt/vugpu/foundation-test.sh', args: ['--bench', String(n)], timeoutMs: 900_000 });
    const rec = r.records.find((x) => x.kind === 'BENCH');
    if (!rec || r.guestExit !== 0) {
      throw new Error(`guest bench failed (exit ${r.exitCode}, guest rc ${r.guestExit}, timedOut ${r.timedOut}):\n` +
        `${r.console.slice(-30).join('\n')}\n${r.stderr.join('\n')}\n${server.tail()}`);
    }
    guest = rec.data;
    guestWallS = r.durationMs / 1000;
    // The server takes one client per socket: wait until it has let QEMU's connection go.
    await server.waitForOutput(/client gone/, mark, 5000);
    process.stderr.write('[bench] client round trips\n');
    rtt = await clientRtt(socket, n);
  } finally {
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }

  const result = {
    date: new Date().toISOString(),
    environment: env,
    n,
    guest: {
      bar0ReadUs: guestStats(guest.bar0_read_us, 'bar0_read_us'),
      bar0WriteUs: guestStats(guest.bar0_write_us, 'bar0_write_us'),
      clockGettimeUs: guestStats(guest.clock_gettime_us, 'clock_gettime_us'),
      bar1WriteMBps: num(guest.bar1_write_MBps, 'bar1_write_MBps'),
      bar1ReadMBps: num(guest.bar1_read_MBps, 'bar1_read_MBps'),
      bar1Read32Ns: num(guest.bar1_read32_ns, 'bar1_read32_ns'),
      bar1Write32Ns: num(guest.bar1_write32_ns, 'bar1_write32_ns'),
      bar1Bytes: num(guest.bar1_bytes, 'bar1_bytes'),
      wallSeconds: Math.round(guestWallS * 10) / 10,
    },
    client: { readRttUs: rtt.read, writeRttUs: rtt.write },
    reference: { pythonServerTrappedAccessUsTcg: 40 },
  };
  const out = writeBenchResult('mmio', 'cpu', result);

  const g = result.guest;
  const row = (name: string, s: Stats) =>
    `${name.padEnd(34)} ${s.mean.toFixed(2).padStart(9)} ${s.p50.toFixed(2).padStart(9)} ${s.p99.toFixed(2).padStart(9)}`;
  const lines = [
    `vugpu MMIO bench — ${result.environment.accel.toUpperCase()}, ${result.environment.qemu}, N=${n}`,
    `${'latency (µs)'.padEnd(34)} ${'mean'.padStart(9)} ${'p50'.padStart(9)} ${'p99'.padStart(9)}`,
    row('guest BAR0 read (trapped)', g.bar0ReadUs),
    row('guest BAR0 write (trapped, posted)', g.bar0WriteUs),
    row('guest clock_gettime pair (overhead)', g.clockGettimeUs),
    row('TS client REGION_READ round trip', result.client.readRttUs),
    row('TS client REGION_WRITE round trip', result.client.writeRttUs),
    `${'guest BAR1 memcpy write / read'.padEnd(34)} ${g.bar1WriteMBps.toFixed(0)} / ${g.bar1ReadMBps.toFixed(0)} MB/s ` +
      `(${(g.bar1Bytes / 1048576).toFixed(0)} MiB blocks)`,
    `${'guest BAR1 32-bit write / read'.padEnd(34)} ${g.bar1Write32Ns.toFixed(2)} / ${g.bar1Read32Ns.toFixed(2)} ns`,
    `reference: Python server ~40 µs per trapped access under TCG`,
    `written ${path.relative(process.cwd(), out)}`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}

main().catch((err: Error) => {
  process.stderr.write(`[bench] ${err.stack ?? err.message}\n`);
  process.exit(1);
});
