// A "world" for the aggregator round-trip tests: a real engine and aggregator with in-process
// guests (the engine's HostDriver as each guest's driver, as in test/aggregator/harness.ts),
// where the engine, the aggregator and the vGPUs can be replaced by restored ones while the
// guests — their drivers, buffers, DMA tables (their RAM) — stay, as guests stay across a
// server restart.
import { openSync } from 'node:fs';
import { Engine } from '../../src/gpu/engine.ts';
import { GpuVm, HostDriver, type HostChannel } from '../support/host-driver/driver.ts';
import type { BusRegion } from '../../src/gpu/bus.ts';
import { DmaTable } from '../../src/device-model/dma.ts';
import { native } from '../../src/native.ts';
import { Aggregator, type AttachOptions } from '../../src/aggregator/aggregator.ts';
import type { Vgpu } from '../../src/aggregator/vgpu.ts';
import { jobPool } from '../../src/gpu/jobs.ts';
import * as S from '../../src/gpu/spec.ts';
import { PV_AREA_GPA, PvClient, PvGpuVm, views, type GpuBuf } from '../aggregator/harness.ts';

export interface WGuest {
  name: string;
  vm: Vgpu;
  drv: HostDriver;
  ch: HostChannel;
  gvm: GpuVm;
  dma: DmaTable;
  pv: PvClient | null;
  rd(off: number): number;
  wr(off: number, v: number): void;
  vram(bytes: number): GpuBuf;
  sys(bytes: number): GpuBuf;
}

export interface AggWorld {
  engine: Engine;
  agg: Aggregator;
  guests: Map<string, WGuest>;
  attach(o: AttachOptions): WGuest;
  /** Make the current engine and aggregator inert, as a killed process is; VRAM stays. */
  kill(): Promise<void>;
  vramFd(): number;
  /** A fresh engine (adopting fd) and aggregator (adopt), the VMs attached again at their saved
   * index and slice, each guest reconnected to its vGPU. */
  rebuild(fd: number): void;
  close(): void;
}

const ENGINE = { vramSize: 256 << 20, channels: 16 };
const AGG = { hostReserved: 32 << 20, quarantineMs: 0 };

export function aggWorld(policy = 'credit'): AggWorld {
  const dead: { engine: Engine; agg: Aggregator }[] = [];
  const sinks = new Map<string, (v: number) => void>();
  const opts = new Map<string, AttachOptions>();
  const w = {} as AggWorld;
  w.engine = new Engine(ENGINE);
  w.agg = new Aggregator({ engine: w.engine, policy, ...AGG });
  w.guests = new Map();

  w.attach = (o) => {
    opts.set(o.name, o);
    const vm = w.agg.attach(o);
    const { base, size } = vm.slice;
    // BAR1 stays a view of the first engine's mapping: the memfd is shared, so it stays right.
    const bar1 = w.engine.vram.u8.subarray(base, base + size);
    const dv = new DataView(bar1.buffer, bar1.byteOffset, size);
    const g = { name: o.name, vm } as WGuest;
    const vram = {
      fd: -1, size, u8: bar1, dv,
      contains: (a: number, n: number) => a >= 0 && a + n <= size,
      read32: (a: number) => dv.getUint32(a, true),
      write32: (a: number, v: number) => dv.setUint32(a, v >>> 0, true),
    };
    let sink: (v: number) => void = () => {};
    const facade = {
      vram,
      mmioRead: (off: number, sz: number) => g.vm.mmioRead(off, sz),
      mmioWrite: (off: number, sz: number, v: number | bigint) => g.vm.mmioWrite(off, sz, v),
      set onInterrupt(f: (v: number) => void) {
        sink = f;
      },
      bus: null as unknown,
    };
    g.dma = new DmaTable();
    sinks.set(o.name, (v) => sink(v));
    w.agg.connect(vm, g.dma, (v) => sinks.get(o.name)!(v));
    g.drv = new HostDriver(facade as unknown as Engine, { sysmemBusBase: 0x1_0000_0000 });
    const add = g.drv.bus.add.bind(g.drv.bus);
    g.drv.bus.add = (r: BusRegion) => {
      add(r);
      const own = openSync(`/proc/self/fd/${r.fd}`, 'r+');
      const err = g.dma.map({ addr: r.bus, size: r.length, offset: 0, readable: true, writable: r.writable, fd: own });
      if (err !== 0) throw new Error(`DMA map failed: ${err}`);
    };
    g.rd = (off) => Number(g.vm.mmioRead(off, 4));
    g.wr = (off, v) => g.vm.mmioWrite(off, 4, v >>> 0);
    g.pv = null;
    if (vm.traits.pv) {
      const fd = native.memfdCreate('guest-ram', 2 * S.PV_SLOT_SIZE);
      const buf = native.mmap(fd, 2 * S.PV_SLOT_SIZE, 0);
      const err = g.dma.map({ addr: PV_AREA_GPA, size: 2 * S.PV_SLOT_SIZE, offset: 0, readable: true, writable: true, fd });
      if (err !== 0) throw new Error(`DMA map failed: ${err}`);
      g.pv = new PvClient(new Uint8Array(buf), PV_AREA_GPA, 2, g.rd, g.wr);
      g.gvm = new PvGpuVm(g.drv, g.pv, o.mode === 'pv' ? 1 : S.PV_BATCH_MAX);
    } else {
      g.gvm = g.drv.createVm();
    }
    g.ch = g.drv.createChannel(g.gvm);
    g.vram = (bytes) => {
      const b = g.drv.vramBuffer(g.gvm, bytes);
      return { va: b.va, bytes, addr: b.addr, ...views(b.u8) };
    };
    g.sys = (bytes) => {
      const b = g.drv.allocSysmem(bytes);
      const va = g.gvm.map(b.bus, b.size, { target: S.TARGET_SYSMEM });
      return { va, bytes, addr: b.bus, ...views(b.u8.subarray(0, bytes)) };
    };
    w.guests.set(o.name, g);
    return g;
  };

  w.kill = async () => {
    const { engine, agg } = w;
    dead.push({ engine, agg });
    engine.listener = {};
    engine.onInterrupt = () => {};
    agg.dispatcher.close();
    agg.dispatcher.kick = () => {};
    agg.completions.length = 0;
    if (agg.running?.timer) clearTimeout(agg.running.timer);
    agg.running = null;
    engine.fifo.reset();
    engine.cp.close();
    for (let i = 0; i < 500 && jobPool.inFlight > 0; i++) await new Promise((r) => setTimeout(r, 2));
  };

  w.vramFd = () => openSync(`/proc/self/fd/${w.engine.vramFd}`, 'r+');

  w.rebuild = (fd) => {
    w.engine = new Engine({ ...ENGINE, vramFd: fd });
    w.agg = new Aggregator({ engine: w.engine, policy, ...AGG, adopt: true });
    for (const g of w.guests.values()) {
      const old = g.vm;
      g.vm = w.agg.attach({ ...opts.get(g.name)!, at: { index: old.index, base: old.slice.base } });
      w.agg.connect(g.vm, g.dma, (v) => sinks.get(g.name)!(v));
    }
  };

  w.close = () => {
    for (const g of w.guests.values()) {
      g.drv.close();
      g.dma.unmapAll();
    }
    w.agg.dispatcher.close();
    w.engine.close();
    for (const d of dead.reverse()) d.engine.close();
  };
  return w;
}
