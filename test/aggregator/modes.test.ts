// GPUvm's evaluation in miniature, in process: Gdev-style programs (init, alloc, HtoD, launch,
// DtoH, close) in every mediated mode, each in a fresh VM, with the counts GPUvm reported
// (trapped MMIO, shadow page-table updates, hypercalls). The table goes to stdout; the tests
// check results exactly and the relations between modes (eager > lazy rebuilds, PV never
// rescans, the multicall needs fewer hypercalls, BAR remap removes BAR1 traps).
// Note: the in-process guest writes pushbuffer bodies into BAR1 with bulk copies that bypass
// the fv-naive trap counter; the word-sized accesses (GP_PUT, instance blocks, PTEs) are counted.
import { afterAll, describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import type { MediatedMode } from '../../src/aggregator/modes.ts';
import { guest, host, type Guest } from './harness.ts';
import { params, rng } from '../gpu/helpers.ts';

interface Bench {
  name: string;
  run(g: Guest): Promise<void>;
}

const u32n = (g: Guest, n: number) => {
  // Staging in system memory, device buffers in VRAM, as a Gdev program does.
  const r = rng(n);
  const ha = g.sys(4 * n * n), hb = g.sys(4 * n * n), hc = g.sys(4 * n * n);
  ha.u32.forEach((_, i) => (ha.u32[i] = (r() * 2 ** 32) >>> 0));
  hb.u32.forEach((_, i) => (hb.u32[i] = (r() * 2 ** 32) >>> 0));
  const da = g.vram(4 * n * n), db = g.vram(4 * n * n), dc = g.vram(4 * n * n);
  return { ha, hb, hc, da, db, dc };
};

function matrixBench(name: string, kernel: number, n: number, ref: (a: Uint32Array, b: Uint32Array, i: number) => number): Bench {
  return {
    name,
    async run(g) {
      const { ha, hb, hc, da, db, dc } = u32n(g, n);
      await g.ch.copy(da.va, ha.va, da.bytes);
      await g.ch.copy(db.va, hb.va, db.bytes);
      await g.ch.launch(kernel, [{ va: da.va, length: da.bytes }, { va: db.va, length: db.bytes }, { va: dc.va, length: dc.bytes }], params(['u32', n]));
      await g.ch.copy(hc.va, dc.va, dc.bytes);
      for (let i = 0; i < n * n; i += 97) if (hc.u32[i] !== ref(ha.u32, hb.u32, i)) expect.fail(`${name} element ${i}`);
    },
  };
}

const mmulRef = (n: number) => (a: Uint32Array, b: Uint32Array, i: number) => {
  const r = Math.floor(i / n), c = i % n;
  let s = 0;
  for (let k = 0; k < n; k++) s = (s + Math.imul(a[r * n + k]!, b[k * n + c]!)) >>> 0;
  return s;
};

const BENCHES: Bench[] = [
  { name: 'nop', run: (g) => g.ch.launch(K.NOP, []) },
  {
    name: 'loop',
    async run(g) {
      const out = g.vram(64);
      await g.ch.launch(K.LOOP, [{ va: out.va, length: 64 }], params(['u64', 200_000n], ['u64', 0n], ['u32', 9]));
      expect(out.u32[0]).toBe(200_000);
    },
  },
  matrixBench('madd', K.MADD, 256, (a, b, i) => (a[i]! + b[i]!) >>> 0),
  matrixBench('mmul', K.MMUL, 128, mmulRef(128)),
  {
    name: 'cpy',
    async run(g) {
      const size = 8 << 20;
      const h = g.sys(size), d = g.vram(size), back = g.sys(size);
      h.u32.forEach((_, i) => (h.u32[i] = i * 2654435761));
      await g.ch.copy(d.va, h.va, size);
      await g.ch.copy(back.va, d.va, size);
      expect(Buffer.compare(back.u8, h.u8)).toBe(0);
    },
  },
];

const MODES: MediatedMode[] = ['fv-naive', 'fv', 'pv', 'pv-batch'];
type Counts = { mmio: number; bar1: number; flushes: number; rebuilds: number; ptes: number; hypercalls: number; ms: number };
const table: Record<string, Record<string, Counts>> = {};

describe('benchmark programs in every mode', () => {
  const h = host({ vramSize: 512 << 20, channels: 16 });
  afterAll(() => {
    const rows = [];
    for (const b of BENCHES) {
      for (const m of MODES) {
        const c = table[b.name]?.[m];
        if (c) rows.push({ bench: b.name, mode: m, ...c });
      }
    }
    console.log('\nper-VM counts, one fresh VM per program (init → close):');
    console.table(rows);
    h.close();
  });

  for (const b of BENCHES) {
    it(`${b.name}: same result in every mode; counts follow GPUvm's relations`, async () => {
      for (const mode of MODES) {
        const t0 = performance.now();
        const g = guest(h.agg, { name: `${b.name}-${mode}`, mode, slice: 64 << 20 });
        await b.run(g);
        g.drv.destroyChannel(g.ch);
        const c = g.vm.counters;
        (table[b.name] ??= {})[mode] = {
          mmio: c.mmioReads + c.mmioWrites, bar1: c.bar1Reads + c.bar1Writes, flushes: c.tlbFlushes,
          rebuilds: c.shadowRebuilds, ptes: c.shadowPtesWritten, hypercalls: c.hypercalls, ms: Math.round(performance.now() - t0),
        };
        g.close();
        h.agg.detach(g.vm);
      }
      const t = table[b.name]!;
      // Programs that map several buffers after their channel is bound: eager rescans at every
      // flush. (6 flushes are the channel's own maps at create and unmaps at destroy, when no
      // shadow is in use.)
      if (t.fv!.flushes >= 8) expect(t['fv-naive']!.rebuilds).toBeGreaterThan(t.fv!.rebuilds);
      else expect(t['fv-naive']!.rebuilds).toBeGreaterThanOrEqual(t.fv!.rebuilds);
      expect(t['fv-naive']!.ptes).toBe(t.fv!.ptes);
      expect(t.fv!.rebuilds).toBeLessThanOrEqual(8);
      expect(t.pv!.rebuilds).toBe(0);
      expect(t['pv-batch']!.rebuilds).toBe(0);
      expect(t.pv!.hypercalls).toBeGreaterThan(t['pv-batch']!.hypercalls);
      expect(t['fv-naive']!.bar1).toBeGreaterThan(0);
      expect(t.fv!.bar1).toBe(0);
      expect(t['fv-naive']!.mmio).toBeGreaterThan(t.fv!.mmio);
      expect(t.fv!.hypercalls).toBe(0);
    });
  }
});
