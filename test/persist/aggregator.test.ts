// The aggregator's checkpoint section (src/aggregator/persist.ts) with the engine's: an fv and a
// pv-batch guest on a shared engine (kernels through shadow page tables, PV map/alloc calls, a
// lazily shadowed mapping left dirty, doorbells held by a VM's PMC_ENABLE, a channel parked on
// a semaphore acquire, a completion not yet handed to the scheduler) are saved, sent through
// JSON and restored into a fresh engine and aggregator over the same VRAM memfd; saving again
// gives the same state, and the restored server then produces bit-identical results to one that
// never restarted. A kernel in flight at the crash fails its VM's channel with ENGINE_LOST
// while the other VM's queued work runs.
import { afterEach, describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import * as S from '../../src/gpu/spec.ts';
import { Pushbuffer } from '../support/host-driver/pushbuf.ts';
import { pte } from '../support/host-driver/pte.ts';
import { CHAN_ERR_ENGINE_LOST, restoreEngine, resumeEngine, saveEngine, type EngineState } from '../../src/gpu/persist.ts';
import {
  AGGREGATOR_STATE_VERSION, restoreAggregator, resumeAggregator, saveAggregator, type AggregatorState,
} from '../../src/aggregator/persist.ts';
import { params, rng } from '../gpu/helpers.ts';
import { until } from '../aggregator/harness.ts';
import { aggWorld, type AggWorld, type WGuest } from './agg-world.ts';

const worlds: AggWorld[] = [];
afterEach(() => {
  for (const w of worlds.splice(0)) w.close();
});

const N = 48;
const ref = (b: { va: number; bytes: number }) => ({ va: b.va, length: b.bytes });
const json = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;
const b64 = (u8: Uint8Array) => Buffer.from(u8).toString('base64');
type Saved = { engine: EngineState; agg: AggregatorState };
/** Two saves differ only in the clocks' current readings. */
const stable = (s: Saved) => ({
  engine: { ...s.engine, ptimer: s.engine.ptimer.originNs },
  agg: { ...s.agg, clock: s.agg.clock.originNs },
});

function save(w: AggWorld): Saved {
  return json({ engine: saveEngine(w.engine), agg: saveAggregator(w.agg) });
}

/** Crash and restart: save, kill, rebuild over the same VRAM memfd, restore, save again, resume. */
async function restart(w: AggWorld, first = save(w)): Promise<{ first: Saved; second: Saved; lost: number[] }> {
  const fd = w.vramFd();
  await w.kill();
  w.rebuild(fd);
  const { inFlight } = restoreEngine(w.engine, first.engine);
  restoreAggregator(w.agg, first.agg);
  const second = save(w);
  resumeEngine(w.engine, inFlight);
  resumeAggregator(w.agg);
  return { first, second, lost: inFlight };
}

async function build(w: AggWorld) {
  const r = rng(7);
  const f = w.attach({ name: 'f', mode: 'fv', slice: 32 << 20, weight: 2 });
  const p = w.attach({ name: 'p', mode: 'pv-batch', slice: 32 << 20 });
  const fill = (g: WGuest) => {
    const a = g.vram(4 * N * N), b = g.vram(4 * N * N), c = g.vram(4 * N * N);
    for (let i = 0; i < N * N; i++) {
      a.u32[i] = (r() * 2 ** 32) >>> 0;
      b.u32[i] = (r() * 2 ** 32) >>> 0;
    }
    return { a, b, c };
  };
  const fb = fill(f);
  const pb = fill(p);
  await f.ch.launch(K.MADD, [ref(fb.a), ref(fb.b), ref(fb.c)], params(['u32', N]));
  await p.ch.launch(K.MADD, [ref(pb.a), ref(pb.b), ref(pb.c)], params(['u32', N]));
  // Sysmem through the DMA map (bus addresses in shadow PTEs), a PV MEM_ALLOC.
  const s = f.sys(8192);
  for (let i = 0; i < s.u32.length; i++) s.u32[i] = i * 7;
  await f.ch.copy(fb.c.va, s.va, 8192);
  const alloc = p.pv!.call(S.PV_OP.MEM_ALLOC, { arg0: 1 << 20, arg1: 4096 });
  expect(alloc.result).toBe(0);
  // p: a PV 4 address space with a buffer MAP_RANGE ALLOC made in it (SPACE_FREE frees it after
  // the restart: the space's list of such buffers is state).
  const space = p.pv!.call(S.PV_OP.SPACE_NEW, { arg0: S.PD_SIZE, arg1: 4096 });
  expect(space.result).toBe(0);
  const R = S.PV_RANGE;
  expect(p.pv!.call(S.PV_OP.MAP_RANGE, { arg0: space.ret0, arg1: 0x45_0000_0000, arg2: 4096, count: 4, flags: R.CONTIGUOUS | R.ALLOC, ptes: [pte(0)] }).result).toBe(0);
  // f: a mapping made after the last doorbell: its flush left the shadow dirty (lazy).
  const late = f.vram(4 * N * N);
  // f: a second channel parked on an acquire inside its segment (it stays open on the engine).
  const f2 = f.drv.createChannel(f.gvm);
  await f2.idle();
  const gate = f.vram(4096);
  const mark = f.vram(4096);
  f2.submit(new Pushbuffer().semaphoreAcquire(gate.va, 5).semaphoreRelease({ va: mark.va, payload: 77 }).words());
  const gated = f2.launch(K.MADD, [ref(fb.c), ref(fb.b), ref(late)], params(['u32', N]));
  // p: PMC_ENABLE.PFIFO off: its doorbells are held in its queue.
  p.wr(S.PMC_ENABLE, p.rd(S.PMC_ENABLE) & ~S.PMC_ENABLE_PFIFO);
  const held = p.ch.launch(K.MADD, [ref(pb.c), ref(pb.a), ref(pb.b)], params(['u32', N]));
  // f: a third channel in its own address space, and a mapping made there after its last
  // doorbell: the trapped flush only marked that shadow dirty (lazy shadowing).
  const gvm3 = f.drv.createVm();
  const f3 = f.drv.createChannel(gvm3);
  await f3.idle();
  const dirty = f.drv.vramBuffer(gvm3, 4 * N * N);
  await new Promise((res) => setTimeout(res, 5));
  return { f, p, fb, pb, s, alloc, space, late, f2, gate, mark, gated, held, f3, dirty, fence: Promise.resolve() };
}

/** The last step, synchronous with the save that follows: a fence on f runs and completes
 * inside its doorbell write, and the scheduler hears of it only on the next microtask. */
function fenceNow(x: Built): void {
  x.fence = x.f.ch.fence();
}

type Built = Awaited<ReturnType<typeof build>>;

async function act(w: AggWorld, x: Built) {
  await x.fence;
  x.gate.u32[0] = 5;
  await x.gated;
  x.p.wr(S.PMC_ENABLE, x.p.rd(S.PMC_ENABLE) | S.PMC_ENABLE_PFIFO);
  await x.held;
  const m = x.p.vram(4 * N * N);
  await x.p.ch.launch(K.MADD, [ref(x.pb.b), ref(x.pb.c), ref(m)], params(['u32', N]));
  const n = x.f.vram(4 * N * N);
  await x.f.ch.launch(K.MADD, [ref(x.late), ref(x.fb.a), ref(n)], params(['u32', N]));
  // f3's doorbell must see the mapping its flush left to lazy shadowing.
  const src = x.f.drv.vramBuffer(x.f3.vm, 4 * N * N);
  src.u8.set(x.fb.a.u8);
  await x.f3.launch(K.MADD, [{ va: src.va, length: 4 * N * N }, { va: src.va, length: 4 * N * N }, { va: x.dirty.va, length: 4 * N * N }], params(['u32', N]));
  const free = x.p.pv!.call(S.PV_OP.MEM_FREE, { arg0: x.alloc.ret0 });
  const spaceFree = x.p.pv!.call(S.PV_OP.SPACE_FREE, { arg0: x.space.ret0 });
  expect(spaceFree).toMatchObject({ result: 0, ret0: 1 });
  return {
    late: b64(x.late.u8), dirty: b64(x.dirty.u8), pbb: b64(x.pb.b.u8), m: b64(m.u8), n: b64(n.u8), fc: b64(x.fb.c.u8),
    mark: x.mark.u32[0], free: free.result, alloc: x.alloc.ret0, spaceFree: [spaceFree.result, spaceFree.ret0],
    errs: [x.f, x.p].map((g) => g.rd(S.PFIFO_CHAN_ERR + 8 * g.ch.chid)),
    faults: [x.f, x.p].map((g) => g.vm.counters.faults),
    vramInUse: x.p.vm.counters.vramInUseBytes,
    dispatches: [x.f, x.p].map((g) => g.vm.counters.dispatches),
  };
}

describe('aggregator state', () => {
  it('round-trips through JSON and carries on bit-identically', async () => {
    const w1 = aggWorld('credit');
    const w2 = aggWorld('credit');
    worlds.push(w1, w2);
    const x1 = await build(w1);
    const x2 = await build(w2);
    fenceNow(x2);
    fenceNow(x1);
    const { first, second, lost } = await restart(w1, save(w1));
    expect(lost).toEqual([]);
    expect(stable(second)).toEqual(stable(first));
    // What the save holds.
    const a = first.agg;
    expect(a.version).toBe(AGGREGATOR_STATE_VERSION);
    expect(a.completions.length).toBe(1); // the fence's completion, not yet with the scheduler
    expect(a.policy.running).toBe('f');
    const vf = a.vms.find((v) => v.name === 'f')!;
    const vp = a.vms.find((v) => v.name === 'p')!;
    expect(vf.shadow.spaces.some((sp) => sp.dirty)).toBe(true);
    expect(vf.state.channels.filter((c) => c.pchid >= 0).length).toBe(3);
    expect(vp.state.pfifoEnabled).toBe(false);
    expect(vp.state.queue.length).toBe(1);
    expect(vp.pv).toEqual({ area: 0x8000_0000, slots: 2 });
    expect(vp.shadow.spaces.some((sp) => sp.pv)).toBe(true);
    expect(vp.vramAlloc.inUse).toBeGreaterThan(0);
    expect(a.owner.filter((o) => o !== null).sort()).toEqual(['f', 'f', 'f', 'p']);
    expect(first.engine.channels.some((c) => c.wait === 2)).toBe(true);

    const r1 = await act(w1, x1);
    const r2 = await act(w2, x2);
    expect(r1).toEqual(r2);
    expect(r1.mark).toBe(77);
    expect(r1.errs).toEqual([0, 0]);
    expect(r1.faults).toEqual([0, 0]);
  });

  it('a kernel in flight fails its VM channel with ENGINE_LOST; the other VM goes on', async () => {
    const w = aggWorld('band');
    worlds.push(w);
    const f = w.attach({ name: 'f', mode: 'fv', slice: 32 << 20 });
    const p = w.attach({ name: 'p', mode: 'pv-batch', slice: 32 << 20 });
    const out = p.vram(64);
    const loop = p.ch.launch(K.LOOP, [ref(out)], params(['u64', 1n << 62n], ['u64', 0n], ['u32', 3]));
    void loop.catch(() => {});
    await until(() => w.engine.stats().jobsInFlight === 1);
    // f's work queues behind p's job (one submission on the device at a time).
    const a = f.vram(4 * N * N), b = f.vram(4 * N * N), c = f.vram(4 * N * N);
    a.u32.fill(3);
    b.u32.fill(4);
    const queued = f.ch.launch(K.MADD, [ref(a), ref(b), ref(c)], params(['u32', N]));
    await new Promise((res) => setTimeout(res, 5));
    const { first, lost } = await restart(w);
    expect(first.agg.running?.vmId).toBe('p');
    expect(first.agg.vms.find((v) => v.name === 'f')!.state.queue.length).toBe(1);
    expect(lost).toEqual([w.agg.vm('p')!.s.channels[p.ch.chid]!.pchid]);
    await expect(loop).rejects.toThrow(/stopped/);
    expect(p.rd(S.PFIFO_CHAN_ERR + 8 * p.ch.chid)).toBe(CHAN_ERR_ENGINE_LOST);
    await queued;
    expect(Array.from(c.u32.subarray(0, 4))).toEqual([7, 7, 7, 7]);
    expect(f.rd(S.PFIFO_CHAN_ERR + 8 * f.ch.chid)).toBe(0);
    // p recovers after a rebind.
    p.ch.bind();
    await p.ch.launch(K.LOOP, [ref(out)], params(['u64', 10n], ['u64', 0n], ['u32', 3]));
    expect(new DataView(out.u8.buffer, out.u8.byteOffset).getBigUint64(0, true)).toBe(10n);
  });

  it('a scrub cut short by the crash starts over after the restart; older states without the flag load', async () => {
    const w = aggWorld('credit');
    worlds.push(w);
    const f = w.attach({ name: 'f', mode: 'fv', slice: 32 << 20 });
    await f.ch.idle();
    const vm = w.agg.vm('f')!;
    const { base, size } = vm.slice;
    w.engine.vram.u8.fill(0xa5, base, base + size);
    w.agg.resetVm(vm, true); // the client went away: the scrub starts, 16 MiB per turn
    expect(vm.s.scrubPending).toBe(true);
    const first = save(w);
    expect(first.agg.vms[0]!.state.scrubPending).toBe(true);
    await restart(w, first);
    const again = w.agg.vm('f')!;
    expect(again.s.scrubPending).toBe(true);
    await new Promise<void>((r) => again.whenScrubbed(r));
    const u8 = w.engine.vram.u8;
    expect(Buffer.compare(u8.subarray(base, base + size), Buffer.alloc(size))).toBe(0);
    // A checkpoint of a version that had no scrubPending restores as "nothing pending".
    const old = save(w);
    delete (old.agg.vms[0]!.state as { scrubPending?: boolean }).scrubPending;
    const r = await restart(w, old);
    expect(w.agg.vm('f')!.s.scrubPending).toBe(false);
    expect(r.second.agg.vms[0]!.state.scrubPending).toBe(false);
  });

  it('refuses a state for other VMs, another policy or a newer version, changing nothing', async () => {
    const w = aggWorld('credit');
    worlds.push(w);
    const f = w.attach({ name: 'f', mode: 'fv', slice: 32 << 20 });
    await f.ch.idle();
    const s = save(w).agg;
    const before = JSON.stringify(json(saveAggregator(w.agg)).vms);
    expect(() => restoreAggregator(w.agg, { ...s, version: 99 })).toThrow(/newer vugpu/);
    expect(() => restoreAggregator(w.agg, { ...s, policy: { ...s.policy, policy: 'fifo' } })).toThrow(/policy fifo/);
    expect(() => restoreAggregator(w.agg, { ...s, vms: [] })).toThrow(/no VM f/);
    expect(() => restoreAggregator(w.agg, { ...s, vms: [{ ...s.vms[0]!, index: 3 }] })).toThrow(/bus index/);
    expect(() => restoreAggregator(w.agg, { ...s, vms: [{ ...s.vms[0]!, version: 2 }] })).toThrow(/vgpu f state has version 2/);
    expect(() => restoreAggregator(w.agg, { ...s, owner: s.owner.map(() => 'x') })).toThrow(/owners/);
    expect(JSON.stringify(json(saveAggregator(w.agg)).vms)).toBe(before);
  });
});
