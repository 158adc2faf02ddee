// The real guest driver against the mediated server, without a VM: the native twin
// (guest/bench built for the host: the same driver core as the guest kernel module, over
// vfio-user on a UNIX socket, BAR1 mmapped, its memory DMA-mapped) runs the 14 GPUvm benchmarks
// in every mode whose BAR1 is mapped (fv, pv, pv-batch; fv-naive traps BAR1 and needs QEMU,
// see aggregator.test.ts) and in pt for reference. Per benchmark and mode the per-VM counters
// GPUvm reported are printed: trapped MMIO, TLB flushes, shadow rebuilds and PTEs, hypercalls.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Vugpu, type VmConfig } from '../../src/server.ts';
import type { VmCounters } from '../../src/aggregator/metrics.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const BENCHES = ['nop', 'loop', 'madd', 'mmul', 'fmadd', 'fmmul', 'cpy', 'pincpy', 'backprop', 'bfs', 'hotspot', 'lud', 'srad', 'srad2'];
let dir: string;
let bin: string;

interface Run {
  code: number | null;
  out: string;
  records: { kind: string; data: Record<string, unknown> }[];
}

/** Run the twin (asynchronously: the server runs on this event loop). */
function twin(socket: string, pv: number, args: string[], timeoutMs = 120_000): Promise<Run> {
  return new Promise((resolve) => {
    const p = spawn(bin, args, { env: { ...process.env, VUGPU_SOCKET: socket, VUGPU_PV: String(pv), VUGPU_SYSMEM_MB: '128' } });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('close', (code) => {
      clearTimeout(timer);
      const records = out.split('\n').flatMap((l) => {
        const m = /^VUGPU-([A-Z]+) (\{.*\})$/.exec(l);
        if (!m) return [];
        try {
          return [{ kind: m[1]!, data: JSON.parse(m[2]!) as Record<string, unknown> }];
        } catch {
          return [{ kind: 'PARSE_ERROR', data: { line: l } }];
        }
      });
      resolve({ code, out, records });
    });
  });
}

function bench(r: Run): Record<string, unknown> {
  const b = r.records.find((x) => x.kind === 'BENCH');
  if (!b) throw new Error(`no VUGPU-BENCH line:\n${r.out}`);
  return b.data;
}

type Row = { bench: string; mode: string; mmio: number; flushes: number; rebuilds: number; ptes: number; hypercalls: number; doorbells: number; ms: number };

function delta(after: VmCounters, before: VmCounters): Omit<Row, 'bench' | 'mode' | 'ms'> {
  return {
    mmio: after.mmioReads + after.mmioWrites - before.mmioReads - before.mmioWrites,
    flushes: after.tlbFlushes - before.tlbFlushes,
    rebuilds: after.shadowRebuilds - before.shadowRebuilds,
    ptes: after.shadowPtesWritten - before.shadowPtesWritten,
    hypercalls: after.hypercalls - before.hypercalls,
    doorbells: after.doorbells - before.doorbells,
  };
}

let server: Vugpu | null = null;
function serve(vms: Omit<VmConfig, 'socket'>[]): Vugpu {
  server?.close();
  server = new Vugpu({
    vramSize: 1 << 30,
    channels: 64,
    watchdogMs: 2000,
    policy: 'band',
    vms: vms.map((v) => ({ ...v, socket: path.join(dir, `${v.name}.sock`) })),
  });
  return server;
}
const sock = (name: string) => path.join(dir, `${name}.sock`);

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-agg-twin-'));
  const b = spawnSync('make', ['-s', '-C', path.join(ROOT, 'guest/bench'), 'host', `O=${dir}`], { encoding: 'utf8' });
  if (b.status !== 0) throw new Error(`building the native twin failed:\n${b.stdout}\n${b.stderr}`);
  bin = path.join(dir, 'vugpu-bench-host');
}, 120_000);

afterAll(() => {
  server?.close();
  server = null;
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('real driver core over the mediated server (native twin)', () => {
  const rows: Row[] = [];
  afterAll(() => {
    console.log('\nper benchmark and mode (one fresh process each; pt: trapped MMIO only):');
    console.table(rows);
  });

  for (const [mode, pv] of [['pt', 0], ['fv', 0], ['pv', 1], ['pv-batch', 2]] as const) {
    it(`every benchmark passes in ${mode}`, async () => {
      const v = serve([{ name: 'vm', mode, slice: 256 << 20 }]);
      const counters = (): VmCounters => ({ ...v.metrics.get('vm')! });
      for (const name of BENCHES) {
        const before = counters();
        const t0 = performance.now();
        const r = await twin(sock('vm'), pv, [name]);
        const b = bench(r);
        expect(b.ok, `${name} in ${mode}:\n${r.out}`).toBe(true);
        expect(b.verified, `${name} in ${mode}`).not.toBe(false);
        const d = delta(counters(), before);
        rows.push({ bench: name, mode, ...d, ms: Math.round(performance.now() - t0) });
        if (mode === 'fv') expect(d.hypercalls).toBe(0);
        if (mode === 'pv' || mode === 'pv-batch') {
          expect(d.rebuilds).toBe(0);
          expect(d.hypercalls).toBeGreaterThan(0);
        }
      }
      if (mode !== 'pt') {
        const agg = v.aggregator!;
        expect(agg.chidsInUse).toBe(0); // every process released its channels
        const c = agg.vm('vm')!.counters;
        expect(c.faults + c.channelErrors).toBe(0);
      }
      if (mode === 'pv-batch') {
        const get = (m: string) => rows.filter((x) => x.mode === m).reduce((s, x) => s + x.hypercalls, 0);
        expect(get('pv')).toBeGreaterThan(3 * get('pv-batch'));
      }
    }, 600_000);
  }

  // bench:mediation runs a cell's repeats in one twin process, as a guest runs them: each run a
  // context of its own on the one client, each verified, none leaving a channel behind.
  it('vugpu-bench --repeat N: N runs, N contexts, one client', async () => {
    const v = serve([{ name: 'vm', mode: 'fv', slice: 256 << 20 }]);
    const before = v.metrics.get('vm')!.shadowRebuilds;
    const r = await twin(sock('vm'), 0, ['madd', '--repeat', '3']);
    expect(r.code, r.out).toBe(0);
    const runs = r.records.filter((x) => x.kind === 'BENCH').map((x) => x.data);
    expect(runs).toHaveLength(3);
    for (const b of runs) {
      expect(b.ok).toBe(true);
      expect(b.verified).toBe(true);
      expect(b.checksum).toBe(runs[0]!.checksum);
    }
    expect(v.metrics.get('vm')!.shadowRebuilds - before).toBeGreaterThanOrEqual(3); // a context, a shadow each
    expect(v.aggregator!.chidsInUse).toBe(0);
  }, 120_000);

  it('two VMs run the suite concurrently in fv; a third, hostile, faults on its own', async () => {
    const v = serve([
      { name: 'a', mode: 'fv', slice: 256 << 20 },
      { name: 'b', mode: 'fv', slice: 256 << 20 },
      { name: 'evil', mode: 'fv', slice: 64 << 20 },
    ]);
    const suite = async (name: string): Promise<string[]> => {
      const failed: string[] = [];
      for (const bname of BENCHES) {
        const r = await twin(sock(name), 0, [bname]);
        const b = r.records.find((x) => x.kind === 'BENCH')?.data;
        if (!b || b.ok !== true) failed.push(`${name}/${bname}: ${r.out.slice(-400)}`);
      }
      return failed;
    };
    const hostile = async (): Promise<Run[]> => {
      const runs: Run[] = [];
      for (let i = 0; i < 3; i++) runs.push(await twin(sock('evil'), 0, ['fault']));
      return runs;
    };
    const [fa, fb, ev] = await Promise.all([suite('a'), suite('b'), hostile()]);
    expect(fa).toEqual([]);
    expect(fb).toEqual([]);
    for (const r of ev) {
      const c = r.records.find((x) => x.kind === 'CHECK');
      expect(c?.data.ok, r.out).toBe(true);
    }
    const agg = v.aggregator!;
    expect(agg.vm('evil')!.counters.faults).toBeGreaterThanOrEqual(3);
    for (const n of ['a', 'b']) {
      const c = agg.vm(n)!.counters;
      expect(c.faults + c.channelErrors, n).toBe(0);
    }
  }, 600_000);
});
