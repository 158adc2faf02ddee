// One and two VMs on one engine through the aggregator: guest drivers (the engine's HostDriver
// over each vGPU's register view) run kernels and copies whose results are checked exactly.
import { describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import * as S from '../../src/gpu/spec.ts';
import { buf, closedAfterEach, type Guest, type Host } from './harness.ts';
import { params, rng } from '../gpu/helpers.ts';

const { host, guest } = closedAfterEach();
let h: Host | null = null;

async function madd(g: Guest, n: number, seed: number, where: 'vram' | 'sys'): Promise<void> {
  const rand = rng(seed);
  const a = where === 'sys' ? g.sys(4 * n * n) : g.vram(4 * n * n);
  const b = g.vram(4 * n * n);
  const c = g.vram(4 * n * n);
  a.u32.forEach((_, i) => (a.u32[i] = (rand() * 2 ** 32) >>> 0));
  b.u32.forEach((_, i) => (b.u32[i] = (rand() * 2 ** 32) >>> 0));
  await g.ch.launch(K.MADD, [buf(a), buf(b), buf(c)], params(['u32', n]));
  for (let i = 0; i < n * n; i++) {
    if (c.u32[i] !== ((a.u32[i]! + b.u32[i]!) >>> 0)) expect.fail(`${g.vm.name}: MADD element ${i}`);
  }
}

describe('aggregator basics', () => {
  it('a guest sees its slice as its VRAM and its own channel count', () => {
    h = host();
    const g = guest(h.agg, { name: 'a', mode: 'fv', slice: 64 << 20, channels: 8 });
    expect(g.rd(S.PFB_PART_COUNT) * g.rd(S.PFB_PART_SIZE_MB)).toBe(64);
    expect(g.rd(S.PFIFO_CHAN_COUNT)).toBe(8);
    expect(g.rd(S.PMC_BOOT_0)).toBe(S.PMC_BOOT_0_VALUE);
    expect(g.rd(S.PV_MAGIC)).toBe(0); // no PV page in fv
    // The guest's channel 0 runs on some physical channel whose instance block is a shadow in
    // the host-reserved area, not the guest's.
    const pchid = g.vm.s.channels[0]!.pchid;
    expect(pchid).toBeGreaterThanOrEqual(0);
    const inst = (h.engine.mmioRead(S.PFIFO_CHAN + 8 * pchid, 4) & S.CHAN_INST_MASK) * 4096;
    expect(inst).toBeLessThan(32 << 20);
  });

  it('one VM runs NOP, MADD (VRAM and system-memory inputs) and a copy', async () => {
    h = host();
    const g = guest(h.agg, { name: 'a', mode: 'fv', slice: 64 << 20 });
    await g.ch.launch(K.NOP, []);
    await madd(g, 37, 1, 'vram');
    await madd(g, 41, 2, 'sys');
    const src = g.sys(8192);
    const dst = g.vram(8192);
    src.u8.forEach((_, i) => (src.u8[i] = (i * 7) & 0xff));
    await g.ch.copy(dst.va, src.va, 8192);
    expect(Buffer.compare(dst.u8, src.u8)).toBe(0);
    expect(g.vm.counters.doorbells).toBeGreaterThan(0);
    expect(g.vm.counters.dispatches).toBeGreaterThan(0);
    expect(g.vm.counters.shadowRebuilds).toBeGreaterThan(0);
    expect(g.vm.counters.deviceNs).toBeGreaterThan(0);
  });

  for (const mode of ['fv-naive', 'fv', 'pv', 'pv-batch'] as const) {
    it(`two VMs (${mode}) run kernels concurrently; results are exact`, async () => {
      h = host();
      const a = guest(h.agg, { name: 'a', mode, slice: 64 << 20 });
      const b = guest(h.agg, { name: 'b', mode, slice: 64 << 20 });
      // Both guests use the same guest VRAM addresses: the slices keep them apart.
      await Promise.all([
        (async () => {
          for (let i = 0; i < 3; i++) await madd(a, 33, 10 + i, i % 2 ? 'sys' : 'vram');
        })(),
        (async () => {
          for (let i = 0; i < 3; i++) await madd(b, 35, 20 + i, i % 2 ? 'vram' : 'sys');
        })(),
      ]);
      expect(a.vm.counters.faults + b.vm.counters.faults).toBe(0);
      for (const g of [a, b]) {
        const c = g.vm.counters;
        if (mode === 'pv' || mode === 'pv-batch') {
          // Host-owned tables: every mapping was a validated hypercall, nothing was rescanned.
          expect(c.hypercalls).toBeGreaterThan(0);
          expect(c.shadowRebuilds).toBe(0);
          expect(c.hypercallEntries).toBe(c.shadowPtesWritten - Object.keys(g.vm.mmu.spaces.values().next().value!.tables).length);
        } else {
          expect(c.hypercalls).toBe(0);
          expect(c.shadowRebuilds).toBeGreaterThan(0);
        }
        if (mode === 'fv-naive') expect(c.bar1Writes).toBeGreaterThan(0);
        else expect(c.bar1Writes).toBe(0);
        // The scheduler saw this VM's submissions.
        expect(h!.agg.policy.state().vms[g.vm.name]!.completed).toBeGreaterThan(0);
      }
    });
  }

  it('more distinct VRAM windows than the engine caches (a full suite per VM): every launch is served', async () => {
    // Regression: a full window cache used to evict the window it was handing out.
    h = host();
    const a = guest(h.agg, { name: 'a', mode: 'pv-batch', slice: 64 << 20 });
    const b = guest(h.agg, { name: 'b', mode: 'fv', slice: 64 << 20 });
    for (let i = 0; i < 40; i++) {
      const g = i % 2 ? a : b;
      const dst = g.vram(16384 + 4096 * i);
      await g.ch.launch(K.MEMSET, [buf({ va: dst.va, bytes: dst.bytes })], params(['u32', 0xa5a50000 + i], ['u32', 0], ['u64', BigInt(dst.bytes / 4)]));
      if (!dst.u32.every((v) => v === 0xa5a50000 + i)) expect.fail(`MEMSET ${i}`);
    }
  });
});

