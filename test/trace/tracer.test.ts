// The recorder, the file format and the reader: round trip, ring overflow, batching, the
// disabled path, truncated files, and the cost per recorded access (printed, not asserted).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { RegionHandler } from '../../src/device-model/declaration.ts';
import { traceRegion } from '../../src/trace/hook.ts';
import { TraceReader, readTrace, type FlatRecord } from '../../src/trace/reader.ts';
import { Tracer, type TracerOptions } from '../../src/trace/recorder.ts';
import type { TraceEvents } from '../../src/trace/schema.ts';

let dir: string;
const open: Tracer[] = [];

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-trace-'));
});
afterEach(() => {
  for (const t of open.splice(0)) t.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

function tracer(o: Partial<TracerOptions> = {}): Tracer {
  const t = new Tracer({ path: path.join(dir, `t${open.length}.trace`), flushMs: 0, ...o });
  open.push(t);
  return t;
}

/** A register file as a region handler (what a vGPU's BAR0 does, minus the GPU). */
function regFile(): RegionHandler & { dv: DataView } {
  const dv = new DataView(new ArrayBuffer(0x10000));
  return {
    dv,
    read(off, size) {
      if (size === 8) return dv.getBigUint64(off, true);
      if (size === 1) return dv.getUint8(off);
      if (size === 2) return dv.getUint16(off, true);
      return dv.getUint32(off, true);
    },
    write(off, size, value) {
      if (size === 8) dv.setBigUint64(off, BigInt(value), true);
      else if (size === 1) dv.setUint8(off, Number(value));
      else if (size === 2) dv.setUint16(off, Number(value), true);
      else dv.setUint32(off, Number(value), true);
    },
  };
}

const strip = (r: FlatRecord): TraceEvents & { vm: number; type: string } => {
  const { tNs: _t, ...rest } = r;
  if (rest.mmio) rest.mmio = { ...rest.mmio, latencyNs: undefined };
  return rest;
};

describe('trace recorder', () => {
  it('round trip: accesses of every size and every event type come back identical, in order', () => {
    const t = tracer({ vms: [{ name: 'a', mode: 'fv' }], engine: { vramBytes: 2 ** 33, channels: 64, watchdogMs: 10_000, policy: 'band' } });
    const b = t.vm('b');
    expect(b).toBe(1);
    expect(t.vm('a')).toBe(0); // known up front
    expect(t.vm('b')).toBe(1);
    t.vmAttach(b, 'b', 'pv');
    t.vmAttach(0, 'a', 'fv');
    const h = traceRegion(regFile(), t, b, 0);
    const expected: (TraceEvents & { vm: number; type: string })[] = [
      { vm: 1, type: 'vmAttach', vmAttach: { name: 'b', mode: 'pv' } },
      { vm: 0, type: 'vmAttach', vmAttach: { name: 'a', mode: 'fv' } },
    ];
    const mmio = (offset: number, size: number, write: boolean, value: number, valueHi = 0) =>
      expected.push({ vm: 1, type: 'mmio', mmio: { region: 0, offset, size, write, value, valueHi, latencyNs: undefined } });
    const N = 1000;
    for (let i = 0; i < N; i++) {
      const off = (i * 8) & 0xfff8;
      h.write(off, 4, (i * 0x9e3779b9) >>> 0);
      mmio(off, 4, true, (i * 0x9e3779b9) >>> 0);
      expect(h.read(off, 4)).toBe((i * 0x9e3779b9) >>> 0);
      mmio(off, 4, false, (i * 0x9e3779b9) >>> 0);
    }
    h.write(0x100, 1, 0xab);
    mmio(0x100, 1, true, 0xab);
    h.write(0x102, 2, 0xbeef);
    mmio(0x102, 2, true, 0xbeef);
    h.write(0x200, 8, 0xfedcba9876543210n);
    mmio(0x200, 8, true, 0x76543210, 0xfedcba98);
    expect(h.read(0x200, 8)).toBe(0xfedcba9876543210n);
    mmio(0x200, 8, false, 0x76543210, 0xfedcba98);
    h.write(0x208, 8, 2 ** 40 + 5); // an 8-byte value given as a number
    mmio(0x208, 8, true, 5, 0x100);

    t.tlbFlush(0, null);
    t.tlbFlush(1, 0x20_0000);
    t.shadowRebuild(1, 513, 0x40_0000);
    t.hypercall(1, 2, 128, 0);
    t.hypercall(1, 3, 7, -22);
    t.doorbell(0, 127);
    t.fault(1, 5, 2 ** 40 - 4096, 3, true, 2);
    t.channelError(0, 9, 17);
    t.vmDetach(1, 'disconnect');
    expected.push(
      { vm: 0, type: 'tlbFlush', tlbFlush: { all: true, pdAddr: 0 } },
      { vm: 1, type: 'tlbFlush', tlbFlush: { all: false, pdAddr: 0x20_0000 } },
      { vm: 1, type: 'shadowRebuild', shadowRebuild: { ptes: 513, pdAddr: 0x40_0000 } },
      { vm: 1, type: 'hypercall', hypercall: { op: 2, count: 128, result: 0 } },
      { vm: 1, type: 'hypercall', hypercall: { op: 3, count: 7, result: -22 } },
      { vm: 0, type: 'doorbell', doorbell: { chid: 127 } },
      { vm: 1, type: 'fault', fault: { chid: 5, va: 2 ** 40 - 4096, reason: 3, write: true, unit: 2 } },
      { vm: 0, type: 'channelError', channelError: { chid: 9, code: 17 } },
      { vm: 1, type: 'vmDetach', vmDetach: { reason: 'disconnect' } },
    );
    t.close();
    expect(t.stats).toMatchObject({ recorded: expected.length, written: expected.length, dropped: 0 });
    expect(t.stats.bytes).toBe(fs.statSync(t.path).size);

    const r = readTrace(t.path);
    expect(r.truncated).toBe(false);
    expect(r.dropped).toBe(0);
    expect(r.header).toMatchObject({
      format: 'vugpu-trace', version: 1, vms: [{ id: 0, name: 'a', mode: 'fv' }],
      engine: { vramBytes: 2 ** 33, channels: 64, watchdogMs: 10_000, policy: 'band' },
    });
    expect(Math.abs(r.header.startUnixMs - Date.now())).toBeLessThan(60_000);
    expect(r.records.map(strip)).toEqual(expected);
    // Times: integer ns, non-decreasing; every access has a handler latency.
    for (let i = 1; i < r.records.length; i++) {
      expect(Number.isInteger(r.records[i]!.tNs)).toBe(true);
      expect(r.records[i]!.tNs).toBeGreaterThanOrEqual(r.records[i - 1]!.tNs);
    }
    for (const x of r.records) if (x.mmio) expect(x.mmio.latencyNs).toBeGreaterThanOrEqual(0);
  });

  it('a full ring drops (and counts) new records, never overwrites old ones, and recovers after a flush', () => {
    const t = tracer({ capacity: 8, batchSize: 8 });
    for (let i = 0; i < 20; i++) t.doorbell(0, i); // no event-loop turn: nothing drains
    expect(t.stats).toMatchObject({ recorded: 8, dropped: 12 });
    expect(t.pending).toBe(8);
    t.flush();
    for (let i = 100; i < 105; i++) t.doorbell(0, i);
    t.flush();
    for (let i = 200; i < 215; i++) t.doorbell(0, i); // wraps around the ring, drops 7
    t.close();
    const r = readTrace(t.path);
    const chids = r.records.map((x) => x.doorbell!.chid);
    expect(chids).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 100, 101, 102, 103, 104, 200, 201, 202, 203, 204, 205, 206, 207]);
    expect(r.dropped).toBe(12 + 7);
    expect(t.stats).toMatchObject({ recorded: 21, dropped: 19, written: 21 });
    // The drop counts are attributed to the batches that follow the losses.
    const rd = new TraceReader(t.path);
    const batches = [...rd.batches()].map((b) => [b.records.length, b.dropped]);
    rd.close();
    expect(batches).toEqual([[8, 12], [5, 0], [8, 7]]);
  });

  it('batches: a backlog of batchSize flushes on the next turn; the rest waits for the timer or flush()', async () => {
    const t = tracer({ capacity: 64, batchSize: 4 });
    for (let i = 0; i < 3; i++) t.doorbell(0, i);
    await new Promise((r) => setImmediate(r));
    expect(t.stats.batches).toBe(0); // below the batch size: no flush scheduled
    t.doorbell(0, 3);
    await new Promise((r) => setImmediate(r));
    expect(t.stats).toMatchObject({ batches: 1, written: 4 });
    for (let i = 4; i < 13; i++) t.doorbell(0, i); // crosses the boundary at 8 (one scheduled flush)
    t.flush();
    expect(t.stats).toMatchObject({ batches: 4, written: 13 });
    t.close();
    const rd = new TraceReader(t.path);
    const sizes = [...rd.batches()].map((b) => b.records.length);
    rd.close();
    expect(sizes).toEqual([4, 4, 4, 1]);
    expect(readTrace(t.path).records.map((x) => x.doorbell!.chid)).toEqual([...Array(13).keys()]);
  });

  it('a gap longer than a uint32 of ns starts a new batch with its own base time', () => {
    // The clock is stepped by hand here (a 5 s idle gap without waiting 5 s).
    let now = 1000;
    const spy = vi.spyOn(performance, 'now').mockImplementation(() => now);
    try {
      const t = tracer();
      now += 0.000_25;
      t.doorbell(0, 1);
      now += 5000;
      t.doorbell(0, 2);
      now += 1;
      t.doorbell(0, 3);
      t.close();
    } finally {
      spy.mockRestore();
    }
    const r = readTrace(path.join(dir, 't0.trace'));
    expect(r.records.map((x) => x.tNs)).toEqual([250, 5e9 + 250, 5e9 + 1e6 + 250]);
    const rd = new TraceReader(path.join(dir, 't0.trace'));
    expect([...rd.batches()].map((b) => [b.baseNs, b.records.length])).toEqual([[250, 1], [5e9 + 250, 2]]);
    rd.close();
  });

  it('the flush timer writes a partial batch', async () => {
    const t = tracer({ flushMs: 10 });
    t.doorbell(0, 1);
    for (let i = 0; i < 50 && t.stats.written === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(t.stats.written).toBe(1);
  });

  it('a disabled tracer records nothing and the traced handler still works', () => {
    const t = tracer();
    t.enabled = false;
    const regs = regFile();
    const h = traceRegion(regs, t, 0, 0);
    h.write(0x10, 4, 0x1234);
    expect(h.read(0x10, 4)).toBe(0x1234);
    t.doorbell(0, 1);
    t.tlbFlush(0, null);
    expect(t.stats).toMatchObject({ recorded: 0, dropped: 0 });
    expect(t.pending).toBe(0);
    t.enabled = true; // resume
    h.write(0x14, 4, 7);
    t.close();
    h.write(0x18, 4, 8); // after close: still no record, still handled
    expect(regs.dv.getUint32(0x18, true)).toBe(8);
    const r = readTrace(t.path);
    expect(r.records.map((x) => [x.type, x.mmio?.offset])).toEqual([['mmio', 0x14]]);
  });

  it('block accesses are recorded with their length', () => {
    const t = tracer();
    const base = regFile();
    const h = traceRegion({ ...base, readBlock: (off, dst) => dst.fill(off & 0xff) }, t, 0, 6);
    const dst = new Uint8Array(4096);
    h.readBlock!(0x40, dst);
    expect(dst[4095]).toBe(0x40);
    t.close();
    expect(readTrace(t.path).records[0]!.mmio).toMatchObject({ region: 6, offset: 0x40, size: 4096, write: false, value: 0 });
  });

  it('a file cut mid-batch keeps every complete batch and says it was truncated', () => {
    const t = tracer({ batchSize: 16 });
    for (let i = 0; i < 40; i++) t.doorbell(0, i);
    t.close();
    const full = fs.readFileSync(t.path);
    fs.writeFileSync(t.path, full.subarray(0, full.length - 3));
    const r = readTrace(t.path);
    expect(r.truncated).toBe(true);
    expect(r.records.map((x) => x.doorbell!.chid)).toEqual([...Array(32).keys()]);
    fs.writeFileSync(t.path, Buffer.from('not a trace at all, just text\n'));
    expect(() => readTrace(t.path)).toThrow(/not a vugpu trace/);
  });

  it('a write error stops tracing without throwing into the device', () => {
    // /dev/full fails every write (ENOSPC): here already the header's.
    const t = tracer({ path: '/dev/full' });
    expect(t.enabled).toBe(false);
    t.doorbell(0, 1);
    expect(t.stats.recorded).toBe(0);
    expect(() => t.flush()).not.toThrow();
    expect(() => t.close()).not.toThrow();
  });

  it('micro-benchmark: ns per recorded access (printed, not asserted)', () => {
    const N = 200_000;
    const t = tracer({ capacity: 1 << 18, batchSize: 4096 });
    const regs = regFile();
    const traced = traceRegion(regs, t, 0, 0);
    const off = new Uint32Array(1024).map((_, i) => (i * 4) & 0xfffc);
    const run = (h: RegionHandler): number => {
      const t0 = performance.now();
      for (let i = 0; i < N; i++) h.write(off[i & 1023]!, 4, i);
      return ((performance.now() - t0) * 1e6) / N;
    };
    const rounds: { bare: number; traced: number; paused: number }[] = [];
    for (let k = 0; k < 5; k++) {
      const bare = run(regs);
      t.flush();
      const tr = run(traced); // N < capacity: nothing dropped, nothing drained meanwhile
      t.enabled = false;
      const paused = run(traced);
      t.enabled = true;
      rounds.push({ bare, traced: tr, paused });
    }
    expect(t.stats.dropped).toBe(0);
    const t0 = performance.now();
    const before = t.stats.written;
    t.flush();
    const drainNs = ((performance.now() - t0) * 1e6) / (t.stats.written - before);
    const best = (k: 'bare' | 'traced' | 'paused') => Math.min(...rounds.map((r) => r[k]));
    const perAccess = best('traced') - best('bare');
    const bytesPerRecord = t.stats.bytes / t.stats.written;
    console.log(
      `trace micro-benchmark (best of 5 x ${N} writes): handler ${best('bare').toFixed(1)} ns, ` +
        `traced ${best('traced').toFixed(1)} ns (+${perAccess.toFixed(1)} ns per recorded access), ` +
        `paused ${best('paused').toFixed(1)} ns (+${(best('paused') - best('bare')).toFixed(1)} ns); ` +
        `off-path conversion + encode + write ${drainNs.toFixed(0)} ns per record, ${bytesPerRecord.toFixed(1)} bytes per record`,
    );
    expect(t.stats.written).toBe(5 * N);
  });
});
