// The whole server's state (src/persist/state.ts) on a real `Vugpu`: two VMs (fv and pv-batch)
// whose guests connect over vfio-user sockets, DMA-map their RAM (sealed memfds, as QEMU's),
// register MSI-X eventfds, enable MSI-X in config space, mmap BAR1 from the reply's fd, and
// drive the GPU (the host driver as the guest driver; interrupts arrive on the eventfds). A
// stand-in keeper mirrors every fd through the tables' hooks. saveAll → JSON → restoreAll with
// the keeper's duplicates and the same options → saveAll again (equal); then the restored
// server and one that never restarted produce bit-identical results.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { Vugpu, type VmConfig, type VugpuOptions } from '../../src/server.ts';
import type { MediatedVgpu } from '../../src/aggregator/mediated.ts';
import type { Engine } from '../../src/gpu/engine.ts';
import { HostDriver, type GpuVm, type HostChannel } from '../support/host-driver/driver.ts';
import { K } from '../../src/gpu/kernels.ts';
import * as S from '../../src/gpu/spec.ts';
import { Pushbuffer } from '../support/host-driver/pushbuf.ts';
import { VfioUserClient } from '../../src/device-model/client.ts';
import { Endpoint, maxMessageSize } from '../../src/device-model/endpoint.ts';
import { SocketTransport } from '../../src/device-model/transport.ts';
import { DEFAULT_SERVER_CAPS } from '../../src/device-model/version.ts';
import { PciCapId } from '../../src/device-model/config-layout.ts';
import { DmaMapFlag } from '../../src/device-model/protocol.ts';
import { dmaFdName, irqFdName, restoreEndpoint } from '../../src/device-model/persist.ts';
import {
  endpointState, fdNames, prebuild, prebuiltFits, restoreAll, resumeAll, saveAll, VRAM_FD, type VugpuState,
} from '../../src/persist/state.ts';
import { jobPool } from '../../src/gpu/jobs.ts';
import { sealedMemfd } from '../device-model/helpers.ts';
import { PV_AREA_GPA, PvClient, PvGpuVm } from '../aggregator/harness.ts';
import { params, rng } from '../gpu/helpers.ts';
import { FdBox } from './fds.ts';

const cleanup: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const N = 32;
const json = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;
const b64 = (u8: Uint8Array) => Buffer.from(u8).toString('base64');
const ref = (b: { va: number; size: number }) => ({ va: b.va, length: b.size });

/** A guest: its vfio-user client, RAM, eventfds, BAR1 mapping and driver. */
interface G {
  name: string;
  client: VfioUserClient;
  drv: HostDriver;
  gvm: GpuVm;
  ch: HostChannel;
  /** Where BAR0 goes: the vGPU's register view, or the engine itself in pt. */
  bar0: () => { mmioRead(o: number, s: number): number | bigint; mmioWrite(o: number, s: number, v: number | bigint): void };
  pv: PvClient | null;
}

interface World {
  dir: string;
  opts: VugpuOptions;
  v: Vugpu;
  box: FdBox;
  guests: G[];
  /** Endpoints over adopted connections (after a restart), by VM. */
  adopted: Map<string, Endpoint>;
}

function options(dir: string): VugpuOptions {
  return {
    vms: [
      { name: 'f', mode: 'fv', socket: path.join(dir, 'f.sock'), slice: 32 << 20 },
      { name: 'p', mode: 'pv-batch', socket: path.join(dir, 'p.sock'), slice: 32 << 20, weight: 2 },
    ],
    vramSize: 256 << 20, channels: 16, policy: 'credit', engine: 'native',
  };
}

/** The keeper's mirror: every fd the devices hold, under its stable name. */
function mirror(v: Vugpu, box: FdBox): void {
  box.put(VRAM_FD, v.engine.vramFd);
  for (const [name, m] of v.vms) {
    const dev = m.device;
    dev.dma.fileHook = (ev, id, fd) => (ev === 'open' ? box.put(dmaFdName(name, id), fd) : box.drop(dmaFdName(name, id)));
    dev.irq.fdHook = (index, vec, fd) => (fd >= 0 ? box.put(irqFdName(name, index, vec), fd) : box.drop(irqFdName(name, index, vec)));
  }
}

async function connectGuest(w: World, vm: VmConfig): Promise<G> {
  const client = VfioUserClient.connect(vm.socket);
  await client.version();
  // RAM: the PV area; sealed as QEMU's memory-backend-memfd.
  const ramFd = sealedMemfd('guest-ram', 1 << 20);
  const ram = new Uint8Array(native.mmap(ramFd, 1 << 20, 0));
  await client.dmaMap({ addr: PV_AREA_GPA, size: 1 << 20, flags: DmaMapFlag.READ | DmaMapFlag.WRITE, fd: ramFd });
  const events = [0, 1, 2, 3].map(() => native.eventfd(0, true));
  await client.setMsixEventfds(0, events);
  const dev = w.v.vms.get(vm.name)!.device;
  await client.regionWrite(7, dev.config.findCapability(PciCapId.MSIX) + 2, new Uint8Array([0, 0x80]));
  const bar1Info = await client.getRegionInfo(1, 4096);
  const bar1 = new Uint8Array(client.mmapRegion(bar1Info));
  native.close(bar1Info.fd);
  const dv = new DataView(bar1.buffer);
  const g = { name: vm.name, client } as G;
  g.bar0 = () => (vm.mode === 'pt' ? w.v.engine : (w.v.vms.get(vm.name) as MediatedVgpu).vgpu);
  let sink: (v: number) => void = () => {};
  const facade = {
    vram: {
      fd: -1, size: bar1.length, u8: bar1, dv,
      contains: (a: number, n: number) => a >= 0 && a + n <= bar1.length,
      read32: (a: number) => dv.getUint32(a, true),
      write32: (a: number, v: number) => dv.setUint32(a, v >>> 0, true),
    },
    // BAR0 straight into the vGPU (a REGION_READ/WRITE would reach the same handler).
    mmioRead: (off: number, sz: number) => g.bar0().mmioRead(off, sz),
    mmioWrite: (off: number, sz: number, v: number | bigint) => g.bar0().mmioWrite(off, sz, v),
    set onInterrupt(f: (v: number) => void) {
      sink = f;
    },
    bus: null as unknown,
  };
  // Interrupts arrive on the eventfds, as KVM would inject them.
  const watches = events.map((fd, vec) => native.watch(fd, () => {
    if (native.eventfdRead(fd) > 0) sink(vec);
  }));
  g.drv = new HostDriver(facade as unknown as Engine, { sysmemBusBase: 0x1_0000_0000 });
  g.pv = null;
  if (vm.mode === 'pv-batch') {
    g.pv = new PvClient(ram, PV_AREA_GPA, 2, (o) => g.drv.rd(o), (o, v) => g.drv.wr(o, v));
    g.gvm = new PvGpuVm(g.drv, g.pv, S.PV_BATCH_MAX);
  } else {
    g.gvm = g.drv.createVm();
  }
  g.ch = g.drv.createChannel(g.gvm);
  cleanup.push(() => {
    watches.forEach((h) => native.unwatch(h));
    events.forEach((fd) => native.close(fd));
    native.munmap(bar1.buffer);
    native.munmap(ram.buffer);
    native.close(ramFd);
  });
  return g;
}

async function world(pt = false): Promise<World> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vugpu-persist-'));
  const opts = pt ? { vms: [{ name: 't', mode: 'pt' as const, socket: path.join(dir, 't.sock') }], vramSize: 64 << 20, channels: 8, engine: 'native' as const } : options(dir);
  const v = new Vugpu(opts);
  const box = new FdBox();
  mirror(v, box);
  const w: World = { dir, opts, v, box, guests: [], adopted: new Map() };
  cleanup.push(() => {
    for (const g of w.guests) g.client.close();
    w.v.close();
    box.close();
    rmSync(dir, { recursive: true, force: true });
  });
  for (const vm of opts.vms) w.guests.push(await connectGuest(w, vm));
  return w;
}

async function build(w: World) {
  const r = rng(3);
  const [f, p] = w.guests as [G, G];
  const bufs = (g: G) => [0, 1, 2].map(() => g.drv.vramBuffer(g.gvm, 4 * N * N));
  const fb = bufs(f);
  const pb = bufs(p);
  for (const b of [...fb, ...pb]) {
    const u32 = new Uint32Array(b.u8.buffer, b.u8.byteOffset, N * N);
    for (let i = 0; i < N * N; i++) u32[i] = (r() * 2 ** 32) >>> 0;
  }
  await f.ch.launch(K.MADD, [ref(fb[0]!), ref(fb[1]!), ref(fb[2]!)], params(['u32', N]));
  await p.ch.launch(K.MADD, [ref(pb[0]!), ref(pb[1]!), ref(pb[2]!)], params(['u32', N]));
  const alloc = p.pv!.call(S.PV_OP.MEM_ALLOC, { arg0: 1 << 20, arg1: 1 << 16 });
  // f: a channel parked on an acquire inside its segment.
  const f2 = f.drv.createChannel(f.gvm);
  await f2.idle();
  const gate = f.drv.vramBuffer(f.gvm, 4096);
  const mark = f.drv.vramBuffer(f.gvm, 4096);
  f2.submit(new Pushbuffer().semaphoreAcquire(gate.va, 9).semaphoreRelease({ va: mark.va, payload: 5, interrupt: true }).words());
  const out = f.drv.vramBuffer(f.gvm, 4 * N * N);
  const gated = f2.launch(K.MADD, [ref(fb[2]!), ref(fb[0]!), ref(out)], params(['u32', N]));
  f.drv.wr(S.DIAG_SCRATCH0, 0x5eed);
  await new Promise((res) => setTimeout(res, 5));
  return { f, p, fb, pb, alloc, gate, mark, out, gated };
}

type Built = Awaited<ReturnType<typeof build>>;

async function act(w: World, x: Built) {
  new Uint32Array(x.gate.u8.buffer, x.gate.u8.byteOffset, 1)[0] = 9;
  await x.gated;
  const m = x.p.drv.vramBuffer(x.p.gvm, 4 * N * N);
  await x.p.ch.launch(K.MADD, [ref(x.pb[2]!), ref(x.pb[0]!), ref(m)], params(['u32', N]));
  const ep = (g: G) => w.adopted.get(g.name) ?? w.v.server.listener(w.opts.vms.find((vm) => vm.name === g.name)!.socket)!.endpoint!;
  return {
    out: b64(x.out.u8), m: b64(m.u8), pb2: b64(x.pb[2]!.u8),
    mark: x.mark.u8[0],
    scratch: await x.f.client.read32(0, S.DIAG_SCRATCH0),
    chans: await x.p.client.read32(0, S.PFIFO_CHAN_COUNT),
    config: b64(await x.f.client.regionRead(7, 0, 64)),
    free: x.p.pv!.call(S.PV_OP.MEM_FREE, { arg0: x.alloc.ret0 }).result,
    errs: w.guests.map((g) => g.drv.rd(S.PFIFO_CHAN_ERR + 8 * g.ch.chid)),
    negotiated: w.guests.map((g) => ep(g).client?.maxMsgFds),
  };
}

/** Make a Vugpu inert as a killed process is (nothing it owns may act again), without the
 * detach/reset a clean close would do (those scrub slices in the shared VRAM). */
async function kill(v: Vugpu): Promise<void> {
  const agg = v.aggregator;
  if (agg) {
    agg.resetVm = () => {};
    agg.dispatcher.close();
    agg.dispatcher.kick = () => {};
    agg.completions.length = 0;
    if (agg.running?.timer) clearTimeout(agg.running.timer);
    agg.running = null;
  }
  v.engine.reset = () => {}; // pt: the device reset a lost connection triggers
  v.engine.listener = {};
  v.engine.onInterrupt = () => {};
  v.engine.fifo.reset();
  v.engine.cp.close();
  for (let i = 0; i < 500 && jobPool.inFlight > 0; i++) await new Promise((r) => setTimeout(r, 2));
}

/** Crash and restart a world's server from `state` with the keeper's fds; the guests' clients
 * get new connections to endpoints that carry their negotiated state. */
async function restart(w: World, state: VugpuState, early?: VugpuState): Promise<VugpuState> {
  // An upgrade's successor builds its server from an earlier checkpoint, before the handover.
  let prebuilt: Vugpu | undefined;
  // DMA maps the ahead-build mapped, by VM and guest address: the restore must keep them.
  const mappedAhead = new Map<string, ArrayBufferLike>();
  const dmaBuffer = (v: Vugpu, vm: string, gpa: number) => {
    const r = v.vms.get(vm)!.device.dma.view(gpa, 1);
    return r.ok ? r.bytes.buffer : null;
  };
  if (early) {
    const earlyFds = w.box.take();
    const p = prebuild(early, earlyFds, w.opts);
    expect(p.errors).toEqual([]);
    expect(p.owned).toContain(VRAM_FD);
    for (const name of p.owned) earlyFds.delete(name); // the prebuilt server's: its engine's VRAM, its DMA files
    for (const fd of earlyFds.values()) native.close(fd);
    expect(prebuiltFits(p, state)).toBe(true);
    prebuilt = p.vugpu;
    for (const vm of early.vms) {
      for (const m of early.devices[vm.name]!.dma.maps) {
        if (m.file !== 0) mappedAhead.set(`${vm.name}@${m.addr}`, dmaBuffer(prebuilt, vm.name, m.addr)!);
      }
    }
    expect(mappedAhead.size).toBeGreaterThan(0);
  }
  const fds = w.box.take();
  if (prebuilt) {
    native.close(fds.get(VRAM_FD)!);
    fds.set(VRAM_FD, prebuilt.engine.vramFd);
  }
  expect([...fds.keys()].sort()).toEqual(fdNames(state).sort());
  await kill(w.v);
  const old = w.v;
  old.server.close(); // its connections go; the devices' fds were duplicated above
  old.engine.close();
  const clients = new Map<string, VfioUserClient>();
  const { vugpu } = restoreAll(state, fds, w.opts, {
    resume: false,
    prebuilt,
    listen: (vm, device) => {
      const [a, b] = native.socketpair();
      native.setNonblock(a, true);
      const transport = new SocketTransport(a, { name: `adopted:${vm.name}`, maxMessageSize: maxMessageSize(DEFAULT_SERVER_CAPS) });
      const ep = new Endpoint(device, transport, { limits: { dmaRequireSealed: true } });
      restoreEndpoint(ep, endpointState(state, vm.name));
      ep.start();
      w.adopted.set(vm.name, ep);
      clients.set(vm.name, VfioUserClient.fromFd(b, `guest:${vm.name}`));
    },
  });
  w.v = vugpu;
  for (const [k, buf] of mappedAhead) {
    const [vm, gpa] = k.split('@') as [string, string];
    expect(dmaBuffer(vugpu, vm, Number(gpa)), `${k} mapped again in the restore`).toBe(buf);
  }
  for (const g of w.guests) {
    g.client.close();
    g.client = clients.get(g.name)!;
  }
  mirror(vugpu, w.box);
  const second = json(saveAll(vugpu, { endpoint: (vm) => w.adopted.get(vm.name) ?? null }));
  resumeAll(vugpu, { inFlight: state.engine.inFlight });
  return second;
}

/** Two saves differ only in the clocks' current readings. */
const stable = (s: VugpuState) => ({
  ...s,
  engine: { ...s.engine, ptimer: s.engine.ptimer.originNs },
  aggregator: s.aggregator && { ...s.aggregator, clock: s.aggregator.clock.originNs },
});

describe('vugpu state (saveAll / restoreAll)', () => {
  it('restarts a two-VM server from its checkpoint and carries on bit-identically', async () => {
    const w1 = await world();
    const w2 = await world();
    const x1 = await build(w1);
    const x2 = await build(w2);
    const first = json(saveAll(w1.v));
    expect(first.kind).toBe('vugpu-state');
    expect(Object.values(first.endpoints).every((e) => e?.client)).toBe(true);
    expect(first.devices.p!.dma.maps.length).toBe(1);
    expect(first.devices.f!.irq.eventfds[2]).toEqual([0, 1, 2, 3]);
    const second = await restart(w1, first);
    expect(stable(second)).toEqual(stable(first));

    const r1 = await act(w1, x1);
    const r2 = await act(w2, x2);
    expect(r1).toEqual(r2);
    expect(r1.mark).toBe(5);
    expect(r1.scratch).toBe(0x5eed);
    expect(r1.errs).toEqual([0, 0]);
  });

  it('restores the final checkpoint into a server built ahead from an earlier one (an upgrade\'s successor), bit-identically', async () => {
    const w1 = await world();
    const w2 = await world();
    const x1 = await build(w1);
    const x2 = await build(w2);
    const early = json(saveAll(w1.v));
    // The old server goes on serving after the successor has built its server: more state.
    await w1.guests[0]!.client.write32(0, S.DIAG_SCRATCH0 + 8, 0x1234);
    await w2.guests[0]!.client.write32(0, S.DIAG_SCRATCH0 + 8, 0x1234);
    const final = json(saveAll(w1.v));
    expect(stable(final)).not.toEqual(stable(early));
    const second = await restart(w1, final, early);
    expect(stable(second)).toEqual(stable(final));
    const r1 = await act(w1, x1);
    const r2 = await act(w2, x2);
    expect(r1).toEqual(r2);
    expect(r1.errs).toEqual([0, 0]);
  });

  it('a server built ahead does not fit a final checkpoint with other VMs or slices', async () => {
    const w = await world();
    const early = json(saveAll(w.v));
    const fds = w.box.take();
    const p = prebuild(early, fds, w.opts);
    for (const name of p.owned) fds.delete(name);
    for (const fd of fds.values()) native.close(fd);
    cleanup.push(() => p.vugpu.close());
    expect(prebuiltFits(p, early)).toBe(true);
    const moved = json(early);
    moved.aggregator!.vms[0]!.slice.base += 1 << 20;
    expect(prebuiltFits(p, moved)).toBe(false);
    const fewer = json(early);
    fewer.vms = fewer.vms.slice(0, 1);
    fewer.aggregator!.vms = fewer.aggregator!.vms.slice(0, 1);
    expect(prebuiltFits(p, fewer)).toBe(false);
  });

  it('restarts a pt server (the guest drives the engine itself) and carries on bit-identically', async () => {
    const run = async (w: World, restartAt: boolean) => {
      const g = w.guests[0]!;
      const r = rng(11);
      const [a, b, c] = [0, 1, 2].map(() => g.drv.vramBuffer(g.gvm, 4 * N * N));
      for (const x of [a!, b!]) for (let i = 0; i < x.u8.length; i++) x.u8[i] = (r() * 256) | 0;
      await g.ch.launch(K.MADD, [ref(a!), ref(b!), ref(c!)], params(['u32', N]));
      const g2 = g.drv.createChannel(g.gvm);
      await g2.idle();
      const gate = g.drv.vramBuffer(g.gvm, 4096);
      const out = g.drv.vramBuffer(g.gvm, 4 * N * N);
      g2.submit(new Pushbuffer().semaphoreAcquire(gate.va, 1).words());
      const gated = g2.launch(K.MADD, [ref(c!), ref(a!), ref(out)], params(['u32', N]));
      await g.client.write32(0, S.DIAG_SCRATCH0 + 4, 0xabc); // through the socket (counted)
      await new Promise((res) => setTimeout(res, 5));
      let states: [VugpuState, VugpuState] | null = null;
      if (restartAt) {
        const first = json(saveAll(w.v));
        states = [first, await restart(w, first)];
      }
      gate.u8[0] = 1;
      await gated;
      await g.ch.launch(K.MADD, [ref(out), ref(b!), ref(c!)], params(['u32', N]));
      return {
        states,
        res: { out: b64(out.u8), c: b64(c!.u8), scratch: await g.client.read32(0, S.DIAG_SCRATCH0 + 4), errs: g.drv.rd(S.PFIFO_CHAN_ERR + 8 * g2.chid) },
      };
    };
    const w1 = await world(true);
    const w2 = await world(true);
    const r1 = await run(w1, true);
    const r2 = await run(w2, false);
    const [first, second] = r1.states!;
    expect(first.aggregator).toBeNull();
    expect(first.ptCounters.t!.mmioWrites).toBeGreaterThan(0);
    expect(stable(second)).toEqual(stable(first));
    expect(r1.res).toEqual(r2.res);
    expect(r1.res.scratch).toBe(0xabc);
  });

  it('a checkpoint it cannot use is a clear error that leaves the VRAM and the fds alone', async () => {
    const w = await world();
    await build(w);
    const state = json(saveAll(w.v));
    const slice = w.v.aggregator!.vm('f')!.slice;
    const before = b64(w.v.engine.vram.u8.subarray(slice.base, slice.base + (1 << 20)));
    const take = () => w.box.take();
    const openFds = () => readdirSync('/proc/self/fd').length;
    const fdsBefore = openFds();
    const bad = (s: unknown, o: VugpuOptions, re: RegExp) => {
      const fds = take();
      expect(() => restoreAll(s, fds, o, { listen: () => {} })).toThrow(re);
      fds.forEach((fd) => native.close(fd));
    };
    bad({ ...state, version: 2 }, w.opts, /newer vugpu/);
    bad({ ...state, kind: 'x' }, w.opts, /not a vugpu state/);
    bad(state, { ...w.opts, vms: w.opts.vms.slice(0, 1) }, /same VMs/);
    bad(state, { ...w.opts, policy: 'fifo' }, /--policy/);
    bad({ ...state, engine: { ...state.engine, version: 7 } }, w.opts, /engine state has version 7/);
    const noDma = take();
    native.close(noDma.get(dmaFdName('p', 1))!);
    noDma.delete(dmaFdName('p', 1));
    expect(() => restoreAll(state, noDma, w.opts, { listen: () => {} })).toThrow(/no adopted fd named dma:p:1/);
    noDma.forEach((fd) => native.close(fd));
    // The live server's VRAM is untouched by the failed attempts.
    expect(b64(w.v.engine.vram.u8.subarray(slice.base, slice.base + (1 << 20)))).toBe(before);
    // Nothing the failed attempts adopted stays open (discard released it).
    expect(openFds()).toBe(fdsBefore);
  });
});
