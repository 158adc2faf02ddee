// Measures the vfio-user round trip of a trapped 32-bit REGION_READ through the TypeScript
// client: mean over N sequential reads, with the server in another process (the realistic
// case: QEMU is another process) and in this process (both ends on one JS thread).
//   node test/device-model/rtt.ts [N]
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Server } from '../../src/device-model/server.ts';
import { VfioUserClient } from '../../src/device-model/client.ts';

const N = Number(process.argv[2] ?? 20000);
const here = path.dirname(fileURLToPath(import.meta.url));
const dir = mkdtempSync(path.join(tmpdir(), 'vugpu-rtt-'));

async function measure(sock: string): Promise<{ mean: number; p50: number; p99: number }> {
  const c = VfioUserClient.connect(sock);
  await c.version();
  await c.write32(0, 0x40, 0x12345678);
  for (let i = 0; i < 1000; i++) await c.read32(0, 0x40);
  const lat = new Float64Array(N);
  const t0 = process.hrtime.bigint();
  let prev = t0;
  for (let i = 0; i < N; i++) {
    if ((await c.read32(0, 0x40)) !== 0x12345678) throw new Error('bad value');
    const now = process.hrtime.bigint();
    lat[i] = Number(now - prev) / 1000;
    prev = now;
  }
  const mean = Number(process.hrtime.bigint() - t0) / N / 1000;
  c.close();
  lat.sort();
  return { mean, p50: lat[Math.floor(N / 2)]!, p99: lat[Math.floor(N * 0.99)]! };
}

const fmt = (r: { mean: number; p50: number; p99: number }): string =>
  `mean ${r.mean.toFixed(1)} µs, p50 ${r.p50.toFixed(1)} µs, p99 ${r.p99.toFixed(1)} µs`;

try {
  const sock = path.join(dir, 'x.sock');
  const child = spawn(process.execPath, [path.join(here, 'fixtures', 'server-child.ts'), sock], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((res) => child.stdout!.on('data', (d: Buffer) => d.toString().includes('listening') && res()));
  console.log(`cross-process REGION_READ (N=${N}): ${fmt(await measure(sock))}`);
  child.kill('SIGTERM');

  const server = new Server();
  const regs = new Uint32Array(1024);
  const local = path.join(dir, 'local.sock');
  server.listen(local, {
    name: 'rtt-local',
    pci: { vendorId: 0x1de5, deviceId: 0x7e57, classCode: 0x030200 },
    regions: { 0: { size: 4096, handler: { read: (o) => regs[o >> 2]!, write: (o, _s, v) => void (regs[o >> 2] = Number(v)) } } },
    irqs: {},
  });
  console.log(`in-process REGION_READ (N=${N}): ${fmt(await measure(local))}`);
  server.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
