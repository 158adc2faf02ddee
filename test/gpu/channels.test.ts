// Channels and the command processor (hw-spec §3.4, §4, §5, §8.2): method decoding, host
// methods, semaphores, channel errors that stop one channel while others continue, the
// watchdog, idle events with device time, PMC_ENABLE gating, runlist and preempt.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import { HostChannel } from '../support/host-driver/driver.ts';
import { Pushbuffer, header, gpfifoEntry } from '../support/host-driver/pushbuf.ts';
import * as S from '../../src/gpu/spec.ts';
import { buf, params, rig, type Rig } from './helpers.ts';

const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));

describe('channels and the command processor', () => {
  let r: Rig;
  const vectors: number[] = [];
  const idle: { chid: number; busyNs: number; totalNs: number }[] = [];
  const fences: number[] = [];

  beforeAll(() => {
    r = rig({ channels: 64, watchdogMs: 10_000 });
    const handler = r.engine.irq.sink;
    r.engine.onInterrupt = (v) => {
      vectors.push(v);
      handler(v);
    };
    r.engine.listener = {
      channelIdle: (chid, busyNs, totalNs) => idle.push({ chid, busyNs, totalNs }),
      fence: (chid) => fences.push(chid),
    };
  });
  afterAll(() => r.close());

  const chan = () => r.drv.createChannel(r.vm);

  /** Submit raw words, then a fence; expect the channel to stop with `code`. */
  async function expectChanError(words: number[], code: number, info?: number): Promise<HostChannel> {
    const ch = chan();
    vectors.length = 0;
    ch.submit(Uint32Array.from(words));
    const gp = (ch.gpGet) >>> 0;
    await expect(ch.fence()).rejects.toThrow(new RegExp(S.chanErrName(code)));
    expect(r.drv.rd(S.PFIFO_CHAN_ERR + 8 * ch.chid)).toBe(code);
    expect(ch.state & (S.STATE_ERROR | S.STATE_ENABLE)).toBe(S.STATE_ERROR);
    expect(ch.gpGet).toBe(gp); // GP_GET stays at the failing entry
    if (info !== undefined) expect(r.drv.rd(S.PFIFO_CHAN_ERR_INFO + 8 * ch.chid) & 0xffff).toBe(info);
    expect(vectors).toContain(S.IRQ_CHAN_ERROR);
    return ch;
  }

  it('decodes INC, NON_INC, INC_ONCE, IMMD and END_PB_SEGMENT', async () => {
    const ch = chan();
    const pb = new Pushbuffer()
      .immd(0, S.HOST.SET_REFERENCE, 0x1abc) // IMMD: 13-bit data in the header
      .inc(0, S.HOST.SEMAPHORE_A, Math.floor(ch.semVa / 2 ** 32), ch.semVa % 2 ** 32)
      .incOnce(0, S.HOST.SEMAPHORE_C, 500, S.SEM_OP.RELEASE) // C then D
      .nonInc(0, S.HOST.NOP, 1, 2, 3)
      .end()
      .inc(0, S.HOST.SET_REFERENCE, 0xdead); // after END: never executed
    ch.submit(pb.words());
    await ch.idle();
    expect(r.drv.vramRead32(ch.userd + S.USERD.REF)).toBe(0x1abc);
    // The fence of idle() released seq afterwards; the INC_ONCE release wrote 500 before it.
    expect(r.drv.vramRead32(ch.sem)).toBe(ch.seq);
    const ch2 = chan();
    ch2.submit(new Pushbuffer().inc(0, S.HOST.SEMAPHORE_A, Math.floor(ch2.semVa / 2 ** 32), ch2.semVa % 2 ** 32).incOnce(0, S.HOST.SEMAPHORE_C, 500, S.SEM_OP.RELEASE).words());
    await sleep(1);
    expect(r.drv.vramRead32(ch2.sem)).toBe(500);
  });

  it('16-byte semaphore release carries a PTIMER timestamp; NON_STALL_INTERRUPT raises a fence', async () => {
    const ch = chan();
    fences.length = 0;
    const t0 = r.engine.timeNs();
    ch.submit(new Pushbuffer().semaphoreRelease({ va: ch.semVa + 16, payload: 77, timestamp: true }).nonStallInterrupt().words());
    await ch.idle();
    const dv = new DataView(r.engine.vram.u8.buffer, r.engine.vram.u8.byteOffset + ch.sem + 16, 16);
    expect(dv.getUint32(0, true)).toBe(77);
    expect(dv.getUint32(4, true)).toBe(0);
    const ts = dv.getBigUint64(8, true);
    expect(ts >= t0 && ts <= r.engine.timeNs()).toBe(true);
    expect(fences).toContain(ch.chid);
  });

  it('semaphore acquire blocks a channel until another channel releases', async () => {
    const waiter = chan(), releaser = chan();
    const shared = r.vram(4096);
    shared.u32[0] = 0;
    waiter.submit(new Pushbuffer().semaphoreAcquire(shared.va, 5).words());
    const done = waiter.fence();
    await sleep(5);
    expect(waiter.state & S.STATE_ACQUIRE_WAIT).toBeTruthy();
    let finished = false;
    void done.then(() => (finished = true));
    await sleep(5);
    expect(finished).toBe(false);
    releaser.submit(new Pushbuffer().semaphoreRelease({ va: shared.va, payload: 5 }).words());
    await done;
    expect(waiter.state & S.STATE_ACQUIRE_WAIT).toBe(0);
    // ACQ_GEQ with a value the CPU writes later: found by the 1 ms re-check.
    waiter.submit(new Pushbuffer().semaphoreAcquire(shared.va, 9, true).words());
    const d2 = waiter.fence();
    await sleep(3);
    shared.u32[0] = 12;
    await d2;
  });

  it('bad methods, classes, opcodes and entries stop only that channel', async () => {
    const other = chan();
    const src = r.vram(1 << 16), dst = r.vram(1 << 16);
    src.u8.fill(0x21);
    // Unknown host method 0x0040.
    await expectChanError([header(S.SEC_OP.INC, 1, 0, 0x40), 0], S.CHAN_ERR.BAD_METHOD, (0 << 13) | (0x40 >> 2));
    // Unknown class method on the copy subchannel.
    await expectChanError([header(S.SEC_OP.INC, 1, S.SUBCH_COPY, 0x0500), 0], S.CHAN_ERR.BAD_METHOD, (S.SUBCH_COPY << 13) | (0x500 >> 2));
    await expectChanError([header(S.SEC_OP.INC, 1, 2, S.HOST.SET_OBJECT), 0x1234], S.CHAN_ERR.BAD_CLASS);
    await expectChanError([header(S.SEC_OP.INC, 1, 3, 0x0300), 0], S.CHAN_ERR.NO_OBJECT);
    await expectChanError([0x00000000], S.CHAN_ERR.BAD_OPCODE);
    await expectChanError([(2 << 29) >>> 0], S.CHAN_ERR.BAD_OPCODE);
    await expectChanError([header(S.SEC_OP.INC, 5, 0, S.HOST.NOP), 0, 0], S.CHAN_ERR.PB_TRUNCATED);
    await expectChanError([header(S.SEC_OP.INC, 1, 0, S.HOST.SEMAPHORE_D), 0x7], S.CHAN_ERR.BAD_METHOD_DATA);
    // LAUNCH_DMA with MULTI_LINE_ENABLE.
    await expectChanError([header(S.SEC_OP.INC, 1, S.SUBCH_COPY, S.COPY.LAUNCH_DMA), 1 | (1 << 9)], S.CHAN_ERR.BAD_METHOD_DATA);
    // Compute with an unknown kernel id.
    await expectChanError(Array.from(new Pushbuffer().compute(S.SUBCH_COMPUTE, { kernel: 1000, buffers: [] }).words()), S.CHAN_ERR.BAD_LAUNCH);
    // GRID_X = 0.
    await expectChanError([header(S.SEC_OP.INC, 1, S.SUBCH_COMPUTE, S.COMPUTE.GRID_X), 0], S.CHAN_ERR.BAD_METHOD_DATA);
    // Inside one incrementing header of compute state words: the error names the word's
    // method — GRID_Y = 0 after a good GRID_X; buffer 1's flags with an unknown bit.
    await expectChanError([header(S.SEC_OP.INC, 3, S.SUBCH_COMPUTE, S.COMPUTE.GRID_X), 4, 0, 1], S.CHAN_ERR.BAD_METHOD_DATA,
      (S.SUBCH_COMPUTE << 13) | (S.COMPUTE.GRID_Y >> 2));
    const flags1 = S.COMPUTE.BUFFER_BASE + S.COMPUTE.BUFFER_STRIDE + 12;
    await expectChanError([header(S.SEC_OP.INC, 8, S.SUBCH_COMPUTE, S.COMPUTE.BUFFER_BASE), 0, 0x1000, 64, 0, 0, 0x2000, 64, 0x8000_0000],
      S.CHAN_ERR.BAD_METHOD_DATA, (S.SUBCH_COMPUTE << 13) | (flags1 >> 2));
    // A run into a method the class does not have (after SPEC_COUNT).
    await expectChanError([header(S.SEC_OP.INC, 4, S.SUBCH_COMPUTE, S.COMPUTE.SPEC_VA_UPPER), 0, 0, 0, 0], S.CHAN_ERR.BAD_METHOD,
      (S.SUBCH_COMPUTE << 13) | ((S.COMPUTE.SPEC_COUNT + 4) >> 2));
    // The other channel is unaffected throughout.
    await other.copy(dst.va, src.va, 1 << 16);
    expect(dst.u8.every((b) => b === 0x21)).toBe(true);
  });

  it('a bad GPFIFO entry (length 0) and a GP_PUT beyond the ring are channel errors', async () => {
    let ch = chan();
    await ch.idle();
    const put = ch.gpGet;
    const [e0] = gpfifoEntry(ch.pbVa, 1);
    r.drv.vramWrite32(ch.gpfifo + put * 8, e0);
    r.drv.vramWrite32(ch.gpfifo + put * 8 + 4, 0); // length 0
    r.drv.vramWrite32(ch.userd + S.USERD.GP_PUT, put + 1);
    r.drv.wr(S.DOORBELL, ch.chid);
    await expect(ch.fence()).rejects.toThrow(/BAD_GPFIFO_ENTRY/);
    ch = chan();
    await ch.idle();
    r.drv.vramWrite32(ch.userd + S.USERD.GP_PUT, ch.entries + 3);
    r.drv.wr(S.DOORBELL, ch.chid);
    await sleep(1);
    expect(r.drv.rd(S.PFIFO_CHAN_ERR + 8 * ch.chid)).toBe(S.CHAN_ERR.BAD_GPFIFO_ENTRY);
  });

  it('a channel in the error state cannot be re-enabled; rebinding recovers it', async () => {
    const ch = await expectChanError([header(S.SEC_OP.INC, 1, 0, 0x44), 0], S.CHAN_ERR.BAD_METHOD);
    r.drv.wr(S.PFIFO_CHAN_STATE + 8 * ch.chid, S.STATE_ENABLE);
    expect(ch.state & S.STATE_ENABLE).toBe(0);
    ch.bind();
    expect(ch.state & S.STATE_ERROR).toBe(0);
    expect(r.drv.rd(S.PFIFO_CHAN_ERR + 8 * ch.chid)).toBe(0);
    await ch.launch(K.NOP, []);
  });

  it('a bad instance block (GPFIFO size 0, instance outside VRAM) is BAD_INSTANCE', async () => {
    const ch = chan();
    await ch.idle();
    r.drv.vramWrite32(ch.inst + S.INST.GP_BASE_HI, 0); // log2(entries) = 0
    r.drv.wr(S.PFIFO_CHAN + 8 * ch.chid, S.CHAN_VALID | (ch.inst / 4096));
    expect(r.drv.rd(S.PFIFO_CHAN_ERR + 8 * ch.chid)).toBe(S.CHAN_ERR.BAD_INSTANCE);
    r.drv.wr(S.PFIFO_CHAN + 8 * ch.chid, S.CHAN_VALID | 0x0fffffff);
    expect(r.drv.rd(S.PFIFO_CHAN_ERR + 8 * ch.chid)).toBe(S.CHAN_ERR.BAD_INSTANCE);
    await sleep(1);
    expect(ch.error?.message).toMatch(/BAD_INSTANCE/);
  });

  it('the watchdog cancels an endless kernel; the event loop and other channels keep going', async () => {
    r.engine.watchdogMs = 300;
    try {
      const looper = chan(), other = chan();
      const out = r.vram(64);
      vectors.length = 0;
      const t0 = performance.now();
      const p = looper.launch(K.LOOP, [buf(out)], params(['u64', 1n << 62n], ['u64', 0n], ['u32', 1]));
      // While it runs: timers fire, registers answer, PGRAPH is busy, PREEMPT shows PENDING.
      let ticks = 0;
      const iv = setInterval(() => ticks++, 10);
      await sleep(100);
      expect(r.drv.rd(S.PGRAPH_STATUS) & 1).toBe(1);
      r.drv.wr(S.PFIFO_PREEMPT, looper.chid);
      expect(r.drv.rd(S.PFIFO_PREEMPT)).toBe(looper.chid | S.PFIFO_PREEMPT_PENDING);
      await other.launch(K.NOP, []); // the pool has a second thread
      await expect(p).rejects.toThrow(/WATCHDOG/);
      clearInterval(iv);
      const elapsed = performance.now() - t0;
      expect(elapsed).toBeGreaterThan(290);
      expect(elapsed).toBeLessThan(3000);
      expect(ticks).toBeGreaterThan(10);
      expect(vectors).toContain(S.IRQ_CHAN_ERROR);
      expect(r.drv.rd(S.PFIFO_PREEMPT) & S.PFIFO_PREEMPT_PENDING).toBe(0);
      // The kernel saw the cancel and stopped: its record shows partial progress.
      const done = new DataView(out.u8.buffer, out.u8.byteOffset, 8).getBigUint64(0, true);
      expect(done > 0n && done < 1n << 62n).toBe(true);
    } finally {
      r.engine.watchdogMs = 10_000;
    }
  });

  it('reports idle with the device time of the work since the last idle', async () => {
    const ch = chan();
    await ch.idle();
    idle.length = 0;
    const out = r.vram(64);
    const before = r.engine.channel(ch.chid)!.deviceNs;
    await ch.launch(K.LOOP, [buf(out)], params(['u64', 0n], ['u64', 30_000_000n], ['u32', 1]));
    await sleep(1);
    const ev = idle.filter((e) => e.chid === ch.chid);
    expect(ev.length).toBe(1);
    expect(ev[0]!.busyNs).toBeGreaterThan(29e6);
    expect(ev[0]!.busyNs).toBeLessThan(2e9);
    expect(r.engine.channel(ch.chid)!.deviceNs - before).toBe(ev[0]!.busyNs);
    expect(ev[0]!.totalNs).toBe(r.engine.channel(ch.chid)!.deviceNs);
  });

  it('PMC_ENABLE.PFIFO = 0 holds every channel; doorbells are served when it is set again', async () => {
    const ch = chan();
    await ch.idle();
    r.drv.wr(S.PMC_ENABLE, S.PMC_ENABLE_RESET & ~S.PMC_ENABLE_PFIFO);
    let done = false;
    const p = ch.launch(K.NOP, []).then(() => (done = true));
    await sleep(5);
    expect(done).toBe(false);
    expect(ch.state & S.STATE_BUSY).toBeTruthy();
    r.drv.wr(S.PMC_ENABLE, S.PMC_ENABLE_RESET);
    await p;
  });

  it('channels off the runlist do not run; a runlist longer than the channel count is rejected', async () => {
    const ch = chan();
    await ch.idle();
    // Submit a runlist without this channel (the driver's list minus one entry, by hand).
    const others = r.drv.channels.filter((c) => c && c !== ch).map((c) => c!.chid);
    const rl = r.drv.allocVram(4096);
    others.forEach((chid, i) => r.drv.vramWrite32(rl + 8 * i, chid));
    r.drv.wr(S.PFIFO_RUNLIST_BASE, rl / 4096);
    r.drv.wr(S.PFIFO_RUNLIST_SUBMIT, others.length);
    expect(r.drv.rd(S.PFIFO_RUNLIST_STATUS)).toBe(others.length);
    let done = false;
    const p = ch.launch(K.NOP, []).then(() => (done = true));
    await sleep(5);
    expect(done).toBe(false);
    vectors.length = 0;
    r.drv.wr(S.PFIFO_RUNLIST_SUBMIT, 65); // more entries than channels
    expect(vectors).toContain(S.IRQ_CHAN_ERROR);
    expect(r.drv.rd(S.PFIFO_RUNLIST_STATUS)).toBe(others.length); // unchanged
    r.drv.vramWrite32(rl + 8 * others.length, ch.chid);
    r.drv.wr(S.PFIFO_RUNLIST_SUBMIT, others.length + 1);
    await p;
  });

  it('unbinding a channel with a job in flight cancels it; its completion is dropped', async () => {
    const ch = chan();
    const out = r.vram(64);
    const p = ch.launch(K.LOOP, [buf(out)], params(['u64', 1n << 62n], ['u64', 0n], ['u32', 1]));
    void p.catch(() => {});
    await sleep(20);
    r.drv.wr(S.PFIFO_CHAN_STATE + 8 * ch.chid, 0);
    r.drv.wr(S.PFIFO_CHAN + 8 * ch.chid, 0);
    expect(r.drv.rd(S.PFIFO_PREEMPT) & S.PFIFO_PREEMPT_PENDING).toBe(0);
    await sleep(50);
    expect(r.engine.stats().jobsInFlight).toBe(0);
    ch.bind();
    await ch.launch(K.NOP, []);
  });

  it('many channels interleave copies and launches correctly', async () => {
    const chans = Array.from({ length: 6 }, () => chan());
    const bufs = chans.map(() => ({ a: r.sys(1 << 18), b: r.vram(1 << 18) }));
    bufs.forEach(({ a }, i) => a.u8.fill(i + 1));
    await Promise.all(chans.map(async (c, i) => {
      for (let k = 0; k < 5; k++) {
        await c.copy(bufs[i]!.b.va, bufs[i]!.a.va, 1 << 18);
        await c.launch(K.NOP, []);
      }
    }));
    bufs.forEach(({ b }, i) => expect(b.u8.every((x) => x === i + 1)).toBe(true));
  });
});
