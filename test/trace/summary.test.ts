// Summaries and the CLI: counts per offset (named), per event type and per VM from a recorded
// trace; and the whole path through `vugpu serve --trace`: a real vfio-user client on a real
// socket against a pass-through vGPU, then `vugpu trace summary/dump` as a child process.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { VfioUserClient } from '../../src/device-model/client.ts';
import { DIAG_SCRATCH0, DOORBELL, MSIX_TABLE_OFFSET, PMC_BOOT_0, PMC_BOOT_0_VALUE, PRAMIN_WINDOW, PV_OP, FAULT, CHAN_ERR } from '../../src/gpu/spec.ts';
import { Vugpu } from '../../src/server.ts';
import { traceRegion } from '../../src/trace/hook.ts';
import { registerNames } from '../../src/trace/names.ts';
import { readTrace } from '../../src/trace/reader.ts';
import { Tracer } from '../../src/trace/recorder.ts';
import { summarizeTrace, type TraceSummary } from '../../src/trace/summary.ts';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-trace-'));
});
afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

function cli(...args: string[]): string {
  return execFileSync(process.execPath, [path.join(repo, 'src/cli.ts'), ...args], {
    encoding: 'utf8', env: { ...process.env, VUGPU_LOG: 'silent' }, timeout: 60_000,
  });
}

const row = (s: TraceSummary, offset: number, region = 0) => s.offsets.find((o) => o.offset === offset && o.region === region);

describe('trace summary', () => {
  it('counts accesses per named offset, events per type and per VM, ops, reasons and codes', () => {
    const file = path.join(dir, 's.trace');
    const names = registerNames({ infos: [{ addr: PMC_BOOT_0, name: 'PMC_BOOT_0' }, { addr: DOORBELL, name: 'DOORBELL' }] });
    const t = new Tracer({ path: file, flushMs: 0, batchSize: 64, vms: [{ name: 'g0', mode: 'fv' }], registers: names });
    const g1 = t.vm('g1');
    t.vmAttach(g1, 'g1', 'pv');
    const regs = new Map<number, number>();
    const bar0 = { read: (o: number) => regs.get(o) ?? 0, write: (o: number, _s: number, v: number | bigint) => void regs.set(o, Number(v)) };
    const h0 = traceRegion(bar0, t, 0, 0);
    const h1 = traceRegion(bar0, t, g1, 0);
    const bar1 = traceRegion(bar0, t, 0, 1);
    for (let i = 0; i < 300; i++) h0.read(PMC_BOOT_0, 4);
    for (let i = 0; i < 7; i++) h1.write(DOORBELL, 4, i);
    h0.write(PRAMIN_WINDOW + 0x40, 4, 1);
    h0.write(MSIX_TABLE_OFFSET + 16, 4, 1);
    h0.read(0x123450, 4); // no name
    for (let i = 0; i < 5; i++) bar1.write(0x1000 + 4 * i, 4, i);
    for (let i = 0; i < 7; i++) t.doorbell(g1, i);
    t.hypercall(g1, PV_OP.MAP_BATCH, 100);
    t.hypercall(g1, PV_OP.MAP_BATCH, 28);
    t.hypercall(g1, PV_OP.FLUSH, 1);
    t.shadowRebuild(0, 40);
    t.shadowRebuild(0, 2);
    t.tlbFlush(0, null);
    t.fault(g1, 1, 0x1000, FAULT.PTE_NOT_PRESENT);
    t.channelError(g1, 1, CHAN_ERR.MMU_FAULT);
    t.channelError(0, 2, CHAN_ERR.BAD_METHOD);
    t.close();

    const s = summarizeTrace(file);
    expect(s.records).toBe(1 + 300 + 7 + 3 + 5 + 7 + 3 + 2 + 1 + 1 + 2);
    expect(s.dropped).toBe(0);
    expect(s.events).toMatchObject({ mmio: 315, doorbell: 7, hypercall: 3, shadowRebuild: 2, tlbFlush: 1, fault: 1, channelError: 2, vmAttach: 1, vmDetach: 0 });
    expect(s.vms).toEqual([
      expect.objectContaining({ id: 0, name: 'g0', mode: 'fv', mmioReads: 301, mmioWrites: 7, shadowPtes: 42, hypercallEntries: 0 }),
      expect.objectContaining({ id: 1, name: 'g1', mode: 'pv', mmioReads: 0, mmioWrites: 7, hypercallEntries: 129 }),
    ]);
    expect(s.vms[1]!.events).toMatchObject({ doorbell: 7, hypercall: 3, fault: 1, channelError: 1, vmAttach: 1 });
    expect(s.offsets[0]).toMatchObject({ region: 0, offset: PMC_BOOT_0, name: 'PMC_BOOT_0', reads: 300, writes: 0 });
    expect(s.offsets[0]!.meanLatencyNs).toBeGreaterThanOrEqual(0);
    expect(row(s, DOORBELL)).toMatchObject({ name: 'DOORBELL', reads: 0, writes: 7 });
    expect(row(s, PRAMIN_WINDOW + 0x40)!.name).toBe('PRAMIN+0x40');
    expect(row(s, MSIX_TABLE_OFFSET + 16)!.name).toBe('MSIX_TABLE+0x10');
    expect(row(s, 0x123450)!.name).toBe('');
    expect(row(s, 0x1000, 1)).toMatchObject({ name: '', writes: 1 }); // BAR1: not named as registers
    expect(s.offsets.filter((o) => o.region === 1)).toHaveLength(5);
    expect(s.hypercallOps).toEqual({ MAP_BATCH: 2, FLUSH: 1 });
    expect(s.faultReasons).toEqual({ PTE_NOT_PRESENT: 1 });
    expect(s.channelErrorCodes).toEqual({ MMU_FAULT: 1, BAD_METHOD: 1 });

    const text = cli('trace', 'summary', file, '--top', '3');
    expect(text).toMatch(/PMC_BOOT_0\s+300\s+0/);
    expect(text).toContain('top 3 of');
    expect(text).toMatch(/g1\s+pv\s+0\s+7/);
    expect(JSON.parse(cli('trace', 'summary', file, '--json'))).toEqual(JSON.parse(JSON.stringify(s)));
    const lines = cli('trace', 'dump', file, '--limit', '2', '--type', 'hypercall').trim().split('\n').map((l) => JSON.parse(l));
    expect(lines).toHaveLength(3);
    expect(lines[0].header.vms).toEqual([{ id: 0, name: 'g0', mode: 'fv' }]);
    expect(lines.slice(1).map((l) => l.hypercall.count)).toEqual([100, 28]);
  });

  it('vugpu serve --trace records a real client\'s BAR0 accesses with the engine\'s register names', async () => {
    const file = path.join(dir, 'pt.trace');
    const sock = path.join(dir, 'vm0.sock');
    const vugpu = new Vugpu({ vms: [{ name: 'vm0', socket: sock, mode: 'pt' }], vramSize: 64 << 20, trace: file });
    try {
      const c = VfioUserClient.connect(sock);
      await c.version();
      expect(await c.read32(0, PMC_BOOT_0)).toBe(PMC_BOOT_0_VALUE);
      for (let i = 0; i < 10; i++) await c.write32(0, DIAG_SCRATCH0, 0x1000 + i);
      expect(await c.read32(0, DIAG_SCRATCH0)).toBe(0x1009);
      c.close();
      const tr = vugpu.tracer!;
      for (let i = 0; i < 200 && !readTraceSafe(tr); i++) await new Promise((r) => setTimeout(r, 10));
    } finally {
      vugpu.close();
    }
    const r = readTrace(file);
    const mmio = r.records.filter((x) => x.mmio).map((x) => [x.mmio!.offset, x.mmio!.write, x.mmio!.value]);
    expect(mmio).toEqual([
      [PMC_BOOT_0, false, PMC_BOOT_0_VALUE],
      ...Array.from({ length: 10 }, (_, i) => [DIAG_SCRATCH0, true, 0x1000 + i]),
      [DIAG_SCRATCH0, false, 0x1009],
    ]);
    expect(r.records[0]).toMatchObject({ type: 'vmAttach', vm: 0, vmAttach: { name: 'vm0', mode: 'pt' } });
    expect(r.records.at(-1)).toMatchObject({ type: 'vmDetach', vm: 0 });
    expect(r.header.engine).toMatchObject({ vramBytes: 64 << 20, channels: 64 });
    const text = cli('trace', 'summary', file);
    expect(text).toMatch(/DIAG_SCRATCH0\s+1\s+10/);
    expect(text).toMatch(/PMC_BOOT_0\s+1\s+0/);
    expect(text).toMatch(/vm0\s+pt\s+2\s+10/);
  });
});

/** Whether the tracer has seen the client's disconnect (a VmDetach is the last record). */
function readTraceSafe(t: Tracer): boolean {
  t.flush();
  return readTrace(t.path).records.some((x) => x.type === 'vmDetach');
}
