// The engine's checkpoint section (src/gpu/persist.ts): real state from a driven engine (kernels,
// copies, a semaphore wait parked inside a pushbuffer segment, an MMU fault, PDIAG, PTIMER) is
// saved, sent through JSON, restored into a fresh engine that adopted the same VRAM memfd, and
// saved again (equal); then the restored engine and an identical engine that never restarted
// are driven the same way and must produce bit-identical results. A job in flight at the
// "crash" fails its channel with ENGINE_LOST, and the channel recovers after a rebind.
import { afterEach, describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import * as S from '../../src/gpu/spec.ts';
import { Pushbuffer } from '../support/host-driver/pushbuf.ts';
import {
  CHAN_ERR_ENGINE_LOST, ENGINE_STATE_VERSION, restoreEngine, resumeEngine, saveEngine, type EngineState,
} from '../../src/gpu/persist.ts';
import { StateError } from '../../src/state/plain.ts';
import { params, rng } from '../gpu/helpers.ts';
import { engineWorld, makeEngine, sleep, type Buf, type EngineWorld } from './engine-world.ts';

const worlds: EngineWorld[] = [];
afterEach(() => {
  for (const w of worlds.splice(0)) w.close();
});

const N = 64; // matrices of N×N u32
const ref = (b: Buf) => ({ va: b.va, length: b.bytes });
const json = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;
/** A save without the one field that must differ between two saves: the device time now. */
const stable = (s: EngineState) => ({ ...s, ptimer: { originNs: s.ptimer.originNs } });

/** Build the same state in any world, deterministically. */
async function build(w: EngineWorld) {
  const r = rng(42);
  const c0 = w.chan();
  const a = w.vram(4 * N * N), b = w.vram(4 * N * N), c = w.vram(4 * N * N);
  for (let i = 0; i < N * N; i++) {
    a.u32[i] = (r() * 2 ** 32) >>> 0;
    b.u32[i] = (r() * 2 ** 32) >>> 0;
  }
  await c0.launch(K.MADD, [ref(a), ref(b), ref(c)], params(['u32', N]));
  const s = w.sys(16 << 10);
  for (let i = 0; i < s.u32.length; i++) s.u32[i] = (r() * 2 ** 32) >>> 0;
  const d = w.vram(16 << 10);
  await c0.copy(d.va, s.va, 16 << 10);

  // c1: parked on a semaphore acquire; the rest of its segment (a launch and a fence) waits.
  const c1 = w.chan();
  await c1.idle();
  const gate = w.vram(4096);
  const out = w.vram(4 * N * N);
  const mark = w.vram(4096);
  // Inside one segment: the acquire, then a release the device executes only after it.
  c1.submit(new Pushbuffer().semaphoreAcquire(gate.va, 7).semaphoreRelease({ va: mark.va, payload: 99 }).nop().words());
  const gated = c1.launch(K.MADD, [ref(c), ref(a), ref(out)], params(['u32', N]));

  // c2: an MMU fault (a launch on an unmapped VA).
  const c2 = w.chan();
  await c2.idle();
  await expect(c2.launch(K.MEMSET, [{ va: 0x7f_0000_0000, length: 4096 }], params(['u32', 1], ['u32', 0], ['u64', 1024n]))).rejects.toThrow(/MMU_FAULT/);

  // PDIAG scratch, PRAMIN base, a PTIMER read (latches TIME_1).
  w.drv.wr(S.DIAG_SCRATCH0 + 12, 0xc0ffee);
  w.drv.wr(S.PRAMIN_BASE, 3);
  w.drv.rd(S.PTIMER_TIME_0);
  await sleep(5);
  expect(w.engine.channel(c1.chid)!.wait).toBe(2); // WAIT_ACQUIRE, cursor mid-segment
  expect(w.engine.channel(c1.chid)!.cursor).not.toBeNull();
  return { c0, c1, c2, a, b, c, d, gate, out, mark, gated };
}

type Built = Awaited<ReturnType<typeof build>>;

/** Drive a world on from the built state; returns everything a guest could observe. */
async function act(w: EngineWorld, x: Built) {
  x.gate.u32[0] = 7; // the CPU releases the semaphore: c1 continues by itself
  await x.gated;
  const m = w.vram(4 * N * N);
  await x.c0.launch(K.MADD, [ref(x.out), ref(x.b), ref(m)], params(['u32', N]));
  const fault = [S.MMU_FAULT_ADDR_LO, S.MMU_FAULT_ADDR_HI, S.MMU_FAULT_CHID, S.MMU_FAULT_INFO].map((o) => w.drv.rd(o));
  const err2 = w.drv.rd(S.PFIFO_CHAN_ERR + 8 * x.c2.chid);
  x.c2.bind();
  const f = w.vram(4096);
  await x.c2.launch(K.MEMSET, [ref(f)], params(['u32', 0xabcd1234], ['u32', 0], ['u64', 1024n]));
  return {
    out: Buffer.from(x.out.u8).toString('base64'),
    m: Buffer.from(m.u8).toString('base64'),
    f: Buffer.from(f.u8).toString('base64'),
    fault, err2,
    mark: x.mark.u32[0],
    scratch: w.drv.rd(S.DIAG_SCRATCH0 + 12),
    pramin: w.drv.rd(S.PRAMIN_BASE),
    gp: [x.c0, x.c1, x.c2].map((c) => c.gpGet),
    states: [x.c0, x.c1, x.c2].map((c) => c.state & ~S.STATE_BUSY),
    sems: [x.c0, x.c1, x.c2].map((c) => w.drv.vramRead32(c.sem)),
  };
}

/** Save, crash, restore into a fresh engine on the same VRAM memfd, resume. */
async function restart(w: EngineWorld): Promise<{ first: EngineState; second: EngineState; lost: number[] }> {
  const first = json(saveEngine(w.engine));
  const fd = w.vramFd();
  await w.kill();
  const e = makeEngine(w, fd);
  const { inFlight } = restoreEngine(e, first);
  w.swap(e);
  const second = json(saveEngine(e));
  resumeEngine(e, inFlight);
  return { first, second, lost: inFlight };
}

describe('engine state', () => {
  it('round-trips through JSON and carries on bit-identically', async () => {
    const w1 = engineWorld();
    const w2 = engineWorld();
    worlds.push(w1, w2);
    const x1 = await build(w1);
    const x2 = await build(w2);
    const before = w1.engine.timeNs();
    const { first, second, lost } = await restart(w1);
    expect(lost).toEqual([]);
    expect(stable(second)).toEqual(stable(first));
    // What the save holds: a parked acquire with its cursor, a faulted channel, PDIAG.
    const c1 = first.channels[x1.c1.chid]!;
    expect(c1.wait).toBe(2);
    expect(c1.cursor!.pos).toBeGreaterThan(0);
    expect(c1.cursor!.pos).toBeLessThan(c1.cursor!.dwords); // stopped inside the segment
    expect(first.channels[x1.c2.chid]!.error).toBe(S.CHAN_ERR.MMU_FAULT);
    expect(first.registers.DIAG_SCRATCH3).toBe(0xc0ffee);
    expect(first.registers.MMU_FAULT_CHID).toBe(x1.c2.chid); // fault registers (VALID cleared by the driver)
    expect(first.registers.MMU_FAULT_ADDR_HI).toBe(0x7f);
    expect(first.channels[x1.c0.chid]!.deviceNs).toBeGreaterThan(0);
    // PTIMER does not go backwards across the restart.
    expect(w1.engine.timeNs()).toBeGreaterThanOrEqual(before);

    const r1 = await act(w1, x1);
    const r2 = await act(w2, x2);
    expect(r1).toEqual(r2);
    expect(r1.states[2]! & S.STATE_ERROR).toBe(0);
    expect(r1.mark).toBe(99);
  });

  it('fails a job in flight with ENGINE_LOST; the channel recovers after a rebind', async () => {
    const w = engineWorld();
    worlds.push(w);
    const ch = w.chan();
    const other = w.chan();
    const rec = w.vram(64);
    const loop = ch.launch(K.LOOP, [ref(rec)], params(['u64', 1n << 62n], ['u64', 0n], ['u32', 1]));
    void loop.catch(() => {});
    await sleep(20);
    expect(w.engine.channel(ch.chid)!.wait).toBe(1); // WAIT_JOB
    const { first, lost } = await restart(w);
    expect(lost).toEqual([ch.chid]);
    expect(first.inFlight).toEqual([ch.chid]);
    expect(first.channels[ch.chid]!.job).toBe(-1);
    await expect(loop).rejects.toThrow(/channel \d+ stopped/);
    expect(w.drv.rd(S.PFIFO_CHAN_ERR + 8 * ch.chid)).toBe(CHAN_ERR_ENGINE_LOST);
    expect(w.drv.rd(S.PFIFO_CHAN_STATE + 8 * other.chid) & S.STATE_ERROR).toBe(0);
    // The other channel and, after a rebind, the failed one work as before.
    ch.bind();
    await ch.launch(K.LOOP, [ref(rec)], params(['u64', 1000n], ['u64', 0n], ['u32', 1]));
    const dv = new DataView(rec.u8.buffer, rec.u8.byteOffset, 24);
    expect(dv.getBigUint64(0, true)).toBe(1000n);
    let st = 1;
    for (let i = 0; i < 1000; i++) st = (Math.imul(st, 1664525) + 1013904223) >>> 0;
    expect(dv.getUint32(16, true)).toBe(st);
    await other.launch(K.NOP, []);
  });

  it('refuses a newer, unknown or mismatched section without touching the engine', async () => {
    const w = engineWorld();
    worlds.push(w);
    const ch = w.chan();
    await ch.idle();
    const s = json(saveEngine(w.engine));
    const fresh = makeEngine(w, w.vramFd());
    w.engines.push(fresh);
    const snap = JSON.stringify(saveEngine(fresh).registers);
    expect(() => restoreEngine(fresh, { ...s, version: ENGINE_STATE_VERSION + 1 })).toThrow(/newer vugpu/);
    expect(() => restoreEngine(fresh, { ...s, version: 0 })).toThrow(StateError);
    expect(() => restoreEngine(fresh, { ...s, vramSize: 1 << 20 })).toThrow(/VRAM/);
    expect(() => restoreEngine(fresh, { ...s, channels: s.channels.slice(1) })).toThrow(/channels/);
    const bad = json(s);
    (bad.channels[3] as unknown as Record<string, unknown>).gpGet = 'x';
    expect(() => restoreEngine(fresh, bad)).toThrow(/channel 3.gpGet/);
    expect(() => restoreEngine(fresh, null)).toThrow(/not an object/);
    expect(JSON.stringify(saveEngine(fresh).registers)).toBe(snap);
  });
});
