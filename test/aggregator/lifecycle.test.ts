// Resources and bookkeeping of the aggregator over a VM's life: the shared physical channel
// pool, attach/detach/reset, lazy versus eager shadowing, shared shadows, the per-VM PFIFO
// hold, and the metrics registry.
import { describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import * as S from '../../src/gpu/spec.ts';
import { GpuError, type HostChannel } from '../support/host-driver/driver.ts';
import { MetricsRegistry } from '../../src/aggregator/metrics.ts';
import { buf, closedAfterEach, type Guest, type Host } from './harness.ts';
import { params, rng } from '../gpu/helpers.ts';

const { host, guest } = closedAfterEach();
let h: Host | null = null;

async function madd(g: Guest, n: number, seed: number, ch: HostChannel = g.ch): Promise<void> {
  const r = rng(seed);
  const a = g.vram(4 * n * n), b = g.sys(4 * n * n), c = g.vram(4 * n * n);
  a.u32.forEach((_, i) => (a.u32[i] = (r() * 2 ** 32) >>> 0));
  b.u32.forEach((_, i) => (b.u32[i] = (r() * 2 ** 32) >>> 0));
  await ch.launch(K.MADD, [buf(a), buf(b), buf(c)], params(['u32', n]));
  for (let i = 0; i < n * n; i++) if (c.u32[i] !== ((a.u32[i]! + b.u32[i]!) >>> 0)) expect.fail(`${g.vm.name}: MADD element ${i}`);
}

describe('physical channel pool', () => {
  it('no VM can starve another: beyond its fair share a bind is refused on that guest only; a freed channel can be bound again', async () => {
    h = host({ channels: 8 });
    const good = guest(h.agg, { name: 'good', mode: 'fv', slice: 32 << 20 });
    const greedy = guest(h.agg, { name: 'greedy', mode: 'fv', slice: 64 << 20 });
    // 8 physical channels, 2 VMs: each is guaranteed 4. greedy takes its 4 ...
    const mine: HostChannel[] = [greedy.ch];
    for (let i = 0; i < 3; i++) mine.push(greedy.drv.createChannel(greedy.gvm, { pushbufferSize: 64 << 10 }));
    expect(h.agg.chidsInUse).toBe(5);
    expect(greedy.vm.counters.poolExhausted).toBe(0);
    // ... but not the free ones good is guaranteed.
    const refused = greedy.drv.createChannel(greedy.gvm, { pushbufferSize: 64 << 10 });
    expect(greedy.vm.counters.poolExhausted).toBe(1);
    expect(greedy.rd(S.PFIFO_CHAN_ERR + 8 * refused.chid)).toBe(S.CHAN_ERR.BAD_INSTANCE);
    expect(greedy.rd(S.PFIFO_CHAN_STATE + 8 * refused.chid) & S.STATE_ERROR).toBe(S.STATE_ERROR);
    const err = await refused.fence().then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(GpuError);
    expect((err as GpuError).code).toBe(S.CHAN_ERR.BAD_INSTANCE);
    // Nobody else noticed: good still binds its whole share.
    const goods: HostChannel[] = [good.ch];
    for (let i = 0; i < 3; i++) goods.push(good.drv.createChannel(good.gvm, { pushbufferSize: 64 << 10 }));
    expect(h.agg.chidsInUse).toBe(8);
    expect(good.vm.counters.poolExhausted).toBe(0);
    await madd(good, 24, 1);
    for (const c of goods) await c.launch(K.NOP, []);
    expect(good.vm.counters.channelErrors + good.vm.counters.faults).toBe(0);
    for (const c of mine) await c.launch(K.NOP, []);
    // Free one, rebind the refused one: it works now.
    greedy.drv.destroyChannel(mine.pop()!);
    expect(h.agg.chidsInUse).toBe(7);
    refused.bind();
    await madd(greedy, 16, 2, refused);
    expect(h.agg.chidsInUse).toBe(8);
  });

  it('a VM alone gets the whole pool', async () => {
    h = host({ channels: 8 });
    const only = guest(h.agg, { name: 'only', mode: 'fv', slice: 32 << 20 });
    const mine: HostChannel[] = [only.ch];
    for (let i = 0; i < 7; i++) mine.push(only.drv.createChannel(only.gvm, { pushbufferSize: 64 << 10 }));
    expect(h.agg.chidsInUse).toBe(8);
    expect(only.vm.counters.poolExhausted).toBe(0);
    for (const c of mine) await c.launch(K.NOP, []);
  });
});

describe('attach, detach, reset', () => {
  it('detach frees channels, shadows, the slice and the metrics entry; the co-tenant is undisturbed', async () => {
    const metrics = new MetricsRegistry();
    h = host({}, { metrics });
    const base = { host: h.agg.hostArea.inUse, slices: h.agg.slices.inUse };
    const b = guest(h.agg, { name: 'b', mode: 'fv', slice: 32 << 20 });
    await b.ch.launch(K.NOP, []); // b's shadow is built at its first launch
    const withB = { host: h.agg.hostArea.inUse, chids: h.agg.chidsInUse };
    const a = guest(h.agg, { name: 'a', mode: 'fv-naive', slice: 64 << 20 });
    a.drv.createChannel(a.drv.createVm());
    const mark = a.vram(4096);
    mark.u32.fill(0x5a5a5a5a);
    await Promise.all([madd(a, 20, 3), madd(b, 20, 4)]);
    expect(h.agg.chidsInUse).toBe(withB.chids + 2);
    expect(h.agg.hostArea.inUse).toBeGreaterThan(withB.host);
    expect(metrics.get('a')?.doorbells).toBeGreaterThan(0);
    const aSlice = { ...a.vm.slice };

    h.agg.detach(a.vm);
    expect(h.agg.chidsInUse).toBe(withB.chids);
    expect(h.agg.hostArea.inUse).toBe(withB.host);
    expect(h.agg.slices.inUse).toBe(base.slices + (32 << 20));
    expect(metrics.get('a')).toBeUndefined();
    expect(h.agg.vm('a')).toBeUndefined();
    await madd(b, 20, 5);

    // A new VM gets the freed slice, scrubbed.
    const c = guest(h.agg, { name: 'c', mode: 'fv', slice: 64 << 20 });
    expect(c.vm.slice).toEqual(aSlice);
    expect(c.vm.index).toBe(a.vm.index);
    const old = h.engine.vram.u8.subarray(aSlice.base + mark.addr, aSlice.base + mark.addr + 4096);
    expect(old.every((x) => x === 0)).toBe(true);
    await madd(c, 20, 6);
    expect(metrics.renderPrometheus()).toMatch(/vugpu_doorbells_total\{vm="c",mode="fv"\} [1-9]/);
  });

  it('detaching a VM whose long job is on the device lets the queued co-tenant run at once', async () => {
    h = host();
    const a = guest(h.agg, { name: 'a', mode: 'fv', slice: 32 << 20 });
    const b = guest(h.agg, { name: 'b', mode: 'fv', slice: 32 << 20 });
    const out = a.vram(64);
    const long = a.ch.launch(K.LOOP, [buf(out)], params(['u64', 0n], ['u64', 5_000_000_000n], ['u32', 1]));
    long.catch(() => {});
    await new Promise((r) => setTimeout(r, 30));
    expect(h.agg.policy.running).toBe('a');
    const t0 = Date.now();
    const work = madd(b, 16, 7);
    await new Promise((r) => setTimeout(r, 30));
    h.agg.detach(a.vm);
    await work;
    expect(Date.now() - t0).toBeLessThan(2000);
  });

  it('a reset unbinds the VM’s channels, drops its queued submissions and reloads its registers', async () => {
    h = host();
    const a = guest(h.agg, { name: 'a', mode: 'fv', slice: 32 << 20 });
    const b = guest(h.agg, { name: 'b', mode: 'fv', slice: 32 << 20 });
    await a.ch.launch(K.NOP, []);
    // Hold a's PFIFO so its doorbells queue up.
    a.wr(S.PMC_ENABLE, S.PMC_ENABLE_RESET & ~S.PMC_ENABLE_PFIFO);
    const p = a.ch.launch(K.NOP, []);
    p.catch(() => {});
    expect(a.vm.s.queue.length).toBe(1);
    expect(a.vm.s.held).toBe(1);
    a.wr(S.DIAG_SCRATCH0, 42);
    const chids = h.agg.chidsInUse;
    h.agg.resetVm(a.vm);
    expect(h.agg.chidsInUse).toBe(chids - 1);
    expect(a.vm.s.queue.length).toBe(0);
    expect(h.agg.policy.pending('a')).toBe(0);
    expect(a.rd(S.DIAG_SCRATCH0)).toBe(0);
    expect(a.rd(S.PMC_INTR_EN)).toBe(0);
    expect(a.rd(S.PMC_ENABLE)).toBe(S.PMC_ENABLE_RESET);
    expect(a.rd(S.PFIFO_CHAN + 8 * a.ch.chid)).toBe(0);
    await madd(b, 16, 8);
  });

  it('PMC_ENABLE.PFIFO holds only that VM’s channels', async () => {
    h = host();
    const a = guest(h.agg, { name: 'a', mode: 'fv', slice: 32 << 20 });
    const b = guest(h.agg, { name: 'b', mode: 'fv', slice: 32 << 20 });
    a.wr(S.PMC_ENABLE, S.PMC_ENABLE_RESET & ~S.PMC_ENABLE_PFIFO);
    let done = false;
    const p = a.ch.launch(K.NOP, []).then(() => (done = true));
    await madd(b, 16, 9);
    await new Promise((r) => setTimeout(r, 20));
    expect(done).toBe(false);
    a.wr(S.PMC_ENABLE, S.PMC_ENABLE_RESET);
    await p;
    expect(done).toBe(true);
  });
});

describe('shadow page tables', () => {
  it('lazy shadowing rebuilds once per doorbell after flushes; eager once per flush; same PTE writes', async () => {
    h = host();
    const eager = guest(h.agg, { name: 'eager', mode: 'fv-naive', slice: 64 << 20 });
    const lazy = guest(h.agg, { name: 'lazy', mode: 'fv', slice: 64 << 20 });
    const counts = [];
    for (const g of [eager, lazy]) {
      await g.ch.launch(K.NOP, []); // the channel's own mappings shadowed first
      const c = g.vm.counters;
      const before = { rebuilds: c.shadowRebuilds, flushes: c.tlbFlushes, ptes: c.shadowPtesWritten, doorbells: c.doorbells };
      // Eight mappings (eight flushes), then one launch (one doorbell).
      const bufs = Array.from({ length: 8 }, () => g.vram(64 << 10));
      await g.ch.launch(K.NOP, []);
      for (const b of bufs) expect(b.va).toBeGreaterThan(0);
      counts.push({
        rebuilds: c.shadowRebuilds - before.rebuilds,
        flushes: c.tlbFlushes - before.flushes,
        ptes: c.shadowPtesWritten - before.ptes,
        doorbells: c.doorbells - before.doorbells,
      });
    }
    const [e, l] = counts as [typeof counts[0], typeof counts[0]];
    expect(e.flushes).toBe(8);
    expect(l.flushes).toBe(8);
    expect(e.rebuilds).toBe(8);
    expect(l.rebuilds).toBe(1);
    expect(l.ptes).toBe(e.ptes);
    expect(e.ptes).toBe(8 * 16); // 16 new 4 KiB PTEs per 64 KiB buffer (their PDE was present)
  });

  it('channels sharing a guest page directory share one shadow', async () => {
    h = host();
    const g = guest(h.agg, { name: 'g', mode: 'fv', slice: 64 << 20 });
    const second = g.drv.createChannel(g.gvm, { pushbufferSize: 64 << 10 });
    const other = g.drv.createChannel(g.drv.createVm(), { pushbufferSize: 64 << 10 });
    expect(g.vm.mmu.spaces.size).toBe(2);
    const shared = [...g.vm.mmu.spaces.values()].find((s) => s.addr === g.gvm.pd)!;
    expect(shared.refs).toBe(2);
    await Promise.all([madd(g, 16, 10, second), madd(g, 16, 11), other.launch(K.NOP, [])]);
    g.drv.destroyChannel(other);
    expect(g.vm.mmu.spaces.size).toBe(1);
  });

  it('a guest PD and page tables in system memory are shadowed through the DMA map', async () => {
    h = host();
    const g = guest(h.agg, { name: 'g', mode: 'fv', slice: 32 << 20 });
    const data = g.vram(4096), dst = g.vram(4096), alt = g.vram(4096);
    data.u32.fill(0x11223344);
    alt.u32.fill(0x55667788);
    // Move the channel's address space to guest RAM: PD at gpa P (a copy of the VRAM PD plus
    // PDE 64 → a small page table at gpa T), then rebind with PD_LO naming system memory.
    const P = 0x4_0000_0000, T = 0x4_0010_0000;
    const pd = g.ram(P, 64 << 10);
    const pt = new DataView(g.ram(T, 256 << 10).buffer);
    pd.set(g.bar1.subarray(g.gvm.pd, g.gvm.pd + (64 << 10)));
    const pdv = new DataView(pd.buffer);
    pdv.setUint32(64 * 8, (T % 2 ** 32) | 1 | (S.TARGET_SYSMEM << 4), true);
    pdv.setUint32(64 * 8 + 4, Math.floor(T / 2 ** 32), true);
    pt.setUint32(0, data.addr | 1, true);
    pt.setUint32(8, dst.addr | 1, true);
    const va = 0x2_0000_0000;
    g.drv.vramWrite32(g.ch.inst + S.INST.PD_LO, (P % 2 ** 32) | S.TARGET_SYSMEM);
    g.drv.vramWrite32(g.ch.inst + S.INST.PD_HI, Math.floor(P / 2 ** 32));
    g.ch.bind();
    expect([...g.vm.mmu.spaces.keys()]).toContain(`sys:${P}`);
    await g.ch.copy(va + 4096, va, 4096);
    expect(dst.u32.every((x) => x === 0x11223344)).toBe(true);
    // Change a PTE in guest RAM and flush that PD: the next doorbell sees the new page.
    pt.setUint32(0, alt.addr | 1, true);
    g.wr(S.MMU_FLUSH_PDB, P / 256);
    g.wr(S.MMU_FLUSH_TRIGGER, S.MMU_FLUSH_GO);
    await g.ch.copy(va + 4096, va, 4096);
    expect(dst.u32.every((x) => x === 0x55667788)).toBe(true);
  });
});

describe('flush rule', () => {
  it('a mapping made without a flush faults once; the retry after a rebind sees it', async () => {
    h = host();
    const g = guest(h.agg, { name: 'g', mode: 'fv', slice: 32 << 20 });
    const src = g.vram(4096), dst = g.vram(4096);
    src.u32.fill(0x31415926);
    const va = 0x30_0000_0000;
    await g.ch.launch(K.NOP, []); // the lazy rebuild for the flushes above happens here
    // Write PDE + PTE straight into the guest tables, no MMU_FLUSH.
    const pt = g.drv.allocVram(256 << 10, 4096, true);
    g.gvm.setPde(va, [(pt | 1) >>> 0, 0]);
    g.drv.vramWrite32(pt, (src.addr | 1) >>> 0);
    const err = await g.ch.copy(dst.va, va, 4096).then(() => null, (e: unknown) => e);
    expect((err as GpuError).fault?.reason).toBe(S.FAULT.PDE_NOT_PRESENT);
    g.ch.bind();
    await g.ch.copy(dst.va, va, 4096);
    expect(dst.u32.every((x) => x === 0x31415926)).toBe(true);
  });
});
