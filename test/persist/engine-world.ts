// A "world" for the engine round-trip tests: a real engine driven by the host driver (the
// guest stand-in), whose engine can be swapped under it for a restored one. The driver talks
// to whichever engine is current through a facade, as a guest keeps talking to its device
// across a server restart; its own state (channels, fences, buffers) is the guest's and stays.
import { openSync } from 'node:fs';
import { Engine } from '../../src/gpu/engine.ts';
import type { BusResolver } from '../../src/gpu/bus.ts';
import { HostDriver, type HostChannel } from '../support/host-driver/driver.ts';
import { jobPool } from '../../src/gpu/jobs.ts';
import { TARGET_SYSMEM } from '../../src/gpu/spec.ts';

export interface Buf {
  va: number;
  bytes: number;
  u8: Uint8Array;
  u32: Uint32Array;
}

export interface EngineWorld {
  engine: Engine;
  /** Every engine this world used (closed at the end). */
  engines: Engine[];
  drv: HostDriver;
  vram(bytes: number): Buf;
  sys(bytes: number): Buf;
  chan(): HostChannel;
  /** Stop the current engine as a crash would (channels dropped, jobs cancelled, no more
   * events), leaving VRAM to whoever adopts it; resolves when no job of it still runs. */
  kill(): Promise<void>;
  /** A new fd on the VRAM memfd (what the keeper would hand back). */
  vramFd(): number;
  /** Make `e` the engine the driver talks to (same bus, same interrupt handler). */
  swap(e: Engine): void;
  close(): void;
}

export const ENGINE_OPTS = { vramSize: 64 << 20, channels: 8, watchdogMs: 10_000 };

export function engineWorld(): EngineWorld {
  let sink: (v: number) => void = () => {};
  let bus: BusResolver = { resolve: () => null };
  const relay: BusResolver = { resolve: (a, l, w) => bus.resolve(a, l, w) };
  const make = (vramFd?: number) => new Engine({ ...ENGINE_OPTS, vramFd, bus: relay, onInterrupt: (v) => sink(v) });
  const w = {} as EngineWorld;
  w.engine = make();
  w.engines = [w.engine];
  const facade = {
    get vram() {
      return w.engine.vram;
    },
    mmioRead: (o: number, s: number) => w.engine.mmioRead(o, s),
    mmioWrite: (o: number, s: number, v: number | bigint) => w.engine.mmioWrite(o, s, v),
    set onInterrupt(f: (v: number) => void) {
      sink = f;
    },
    set bus(b: BusResolver) {
      bus = b;
    },
  };
  w.drv = new HostDriver(facade as unknown as Engine);
  const vm = () => w.drv.channels.find((c) => c)!.vm;
  const views = (u8: Uint8Array) => ({ u8, u32: new Uint32Array(u8.buffer, u8.byteOffset, u8.byteLength >> 2) });
  w.chan = () => w.drv.createChannel(w.drv.channels.find((c) => c)?.vm ?? w.drv.createVm());
  w.vram = (bytes) => {
    const b = w.drv.vramBuffer(vm(), bytes);
    return { va: b.va, bytes, ...views(b.u8) };
  };
  w.sys = (bytes) => {
    const b = w.drv.allocSysmem(bytes);
    const va = vm().map(b.bus, b.size, { target: TARGET_SYSMEM });
    return { va, bytes, ...views(b.u8.subarray(0, bytes)) };
  };
  w.kill = async () => {
    const e = w.engine;
    e.listener = {};
    e.onInterrupt = () => {};
    e.fifo.reset();
    e.cp.close();
    for (let i = 0; i < 500 && jobPool.inFlight > 0; i++) await new Promise((r) => setTimeout(r, 2));
  };
  w.vramFd = () => openSync(`/proc/self/fd/${w.engine.vramFd}`, 'r+');
  w.swap = (e) => {
    w.engine = e;
    w.engines.push(e);
  };
  w.close = () => {
    w.drv.close();
    // Later engines first: the first one's VRAM mapping backs the driver's buffer views.
    for (const e of w.engines.slice().reverse()) e.close();
  };
  return Object.assign(w, { make });
}

/** The engine constructor of a world (adopting a VRAM fd). */
export function makeEngine(w: EngineWorld, vramFd: number): Engine {
  return (w as EngineWorld & { make(fd?: number): Engine }).make(vramFd);
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
