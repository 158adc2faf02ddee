// In-process guests for the aggregator tests: a real engine, the aggregator, and per VM the
// engine's own HostDriver acting as the guest driver. The driver is pointed at a guest-side
// view of the vGPU (BAR0 = the vGPU's register view, BAR1 = the VM's VRAM slice, MSI-X = the
// vGPU's interrupt sink) and its system memory is a real device-model DmaTable: every buffer
// the driver allocates (a memfd) is also DMA-mapped at the same guest-physical address, as
// QEMU maps guest RAM. Nothing is mocked: shadow tables, the bus resolver and the kernels run
// for real.
import { openSync } from 'node:fs';
import { afterEach } from 'vitest';
import { Engine, type EngineOptions } from '../../src/gpu/engine.ts';
import { GpuVm, HostDriver, type HostChannel, type MapOptions } from '../support/host-driver/driver.ts';
import { pte, type Entry } from '../support/host-driver/pte.ts';
import type { BusRegion } from '../../src/gpu/bus.ts';
import { DmaTable } from '../../src/device-model/dma.ts';
import { native } from '../../src/native.ts';
import { Aggregator, type AggregatorOptions, type AttachOptions } from '../../src/aggregator/aggregator.ts';
import type { Vgpu } from '../../src/aggregator/vgpu.ts';
import * as S from '../../src/gpu/spec.ts';
import { TARGET_SYSMEM } from '../../src/gpu/spec.ts';

export interface GpuBuf {
  va: number;
  bytes: number;
  u8: Uint8Array;
  u32: Uint32Array;
  f32: Float32Array;
  /** Guest VRAM address (slice-relative) or guest-physical address. */
  addr: number;
}

export interface Guest {
  vm: Vgpu;
  drv: HostDriver;
  ch: HostChannel;
  gvm: GpuVm;
  dma: DmaTable;
  /** The guest's BAR1: its VRAM slice. */
  bar1: Uint8Array;
  rd(off: number): number;
  wr(off: number, v: number): void;
  vram(bytes: number, opts?: { readOnly?: boolean; large?: boolean }): GpuBuf;
  sys(bytes: number, opts?: { readOnly?: boolean }): GpuBuf;
  /** Map extra guest RAM (a memfd) at gpa; returns its CPU view. */
  ram(gpa: number, bytes: number, writable?: boolean): Uint8Array;
  /** The PV client (pv modes). */
  pv: PvClient | null;
  close(): void;
}

/** Guest-physical address of the PV shared area in the test guests. */
export const PV_AREA_GPA = 0x8000_0000;

export interface PvResult {
  result: number;
  count: number;
  ret0: number;
}

/** The guest side of hw-spec §9: a registered shared area and calls through slot 0. */
export class PvClient {
  readonly slots: number;
  private readonly wr: (off: number, v: number) => void;
  readonly dv: DataView;

  constructor(area: Uint8Array, gpa: number, slots: number, rd: (off: number) => number, wr: (off: number, v: number) => void) {
    this.slots = slots;
    this.wr = wr;
    this.dv = new DataView(area.buffer, area.byteOffset, area.byteLength);
    wr(S.PV_AREA_LO, gpa % 2 ** 32);
    wr(S.PV_AREA_HI, Math.floor(gpa / 2 ** 32));
    wr(S.PV_AREA_SLOTS, slots);
    const st = rd(S.PV_STATUS);
    if (st !== 0) throw new Error(`PV area registration failed: errno ${st}`);
  }

  /** ptes: a PV 2 u64 PTE array written from the slot's entries on (it may run into later slots). */
  call(op: number, args: { arg0?: number; arg1?: number; arg2?: number; entries?: [number, Entry][]; count?: number; flags?: number; ptes?: Entry[] } = {}, slot = 0): PvResult {
    const dv = this.dv;
    const b = slot * S.PV_SLOT_SIZE;
    const u64 = (at: number, v: number) => {
      dv.setUint32(b + at, v % 2 ** 32, true);
      dv.setUint32(b + at + 4, Math.floor(v / 2 ** 32), true);
    };
    const entries = args.entries ?? [];
    dv.setUint32(b + S.PV_SLOT.op, op, true);
    dv.setInt32(b + S.PV_SLOT.result, 0x7eadbeef, true);
    dv.setUint32(b + S.PV_SLOT.count, args.count ?? entries.length, true);
    dv.setUint32(b + S.PV_SLOT.flags, args.flags ?? 0, true);
    (args.ptes ?? []).forEach((e, i) => {
      dv.setUint32(b + S.PV_SLOT.entries + 8 * i, e[0], true);
      dv.setUint32(b + S.PV_SLOT.entries + 8 * i + 4, e[1], true);
    });
    u64(S.PV_SLOT.arg0, args.arg0 ?? 0);
    u64(S.PV_SLOT.arg1, args.arg1 ?? 0);
    u64(S.PV_SLOT.arg2, args.arg2 ?? 0);
    entries.forEach(([va, e], i) => {
      u64(S.PV_SLOT.entries + 16 * i, va);
      dv.setUint32(b + S.PV_SLOT.entries + 16 * i + 8, e[0], true);
      dv.setUint32(b + S.PV_SLOT.entries + 16 * i + 12, e[1], true);
    });
    this.wr(S.PV_CALL, slot);
    return {
      result: dv.getInt32(b + S.PV_SLOT.result, true),
      count: dv.getUint32(b + S.PV_SLOT.count, true),
      ret0: dv.getUint32(b + S.PV_SLOT.ret0, true) + dv.getUint32(b + S.PV_SLOT.ret0 + 4, true) * 2 ** 32,
    };
  }
}

/**
 * A GPU address space whose page tables the host owns (PV): SET_PGD once, then every mapping
 * is a MAP_BATCH hypercall — one entry per call (pv) or up to 128 (pv-batch) — and a FLUSH.
 */
export class PvGpuVm extends GpuVm {
  private readonly pv: PvClient;
  private readonly batch: number;

  constructor(drv: HostDriver, pv: PvClient, batch: number) {
    super(drv);
    this.pv = pv;
    this.batch = batch;
    const r = pv.call(S.PV_OP.SET_PGD, { arg0: this.pd });
    if (r.result !== 0) throw new Error(`SET_PGD failed: ${r.result}`);
  }

  override mapAt(va: number, phys: number, size: number, opts: MapOptions = {}): void {
    const entries: [number, Entry][] = [];
    for (let off = 0; off < size; off += S.SMALL_PAGE) {
      entries.push([va + off, pte(phys + off, { target: opts.target, readOnly: opts.readOnly })]);
    }
    this.send(S.PV_OP.MAP_BATCH, entries);
  }

  override setPte(va: number, e: Entry): void {
    this.send(S.PV_OP.MAP_BATCH, [[va, e]]);
  }

  override unmap(va: number, size: number): void {
    const entries: [number, Entry][] = [];
    for (let off = 0; off < size; off += S.SMALL_PAGE) entries.push([va + off, [0, 0]]);
    this.send(S.PV_OP.UNMAP_BATCH, entries);
  }

  private send(op: number, entries: [number, Entry][]): void {
    for (let i = 0; i < entries.length; i += this.batch) {
      const chunk = entries.slice(i, i + this.batch);
      const r = this.pv.call(op, { arg0: this.pd, entries: chunk });
      if (r.result !== 0) throw new Error(`PV op ${op} failed: ${r.result} after ${r.count} entries`);
    }
    this.pv.call(S.PV_OP.FLUSH, { arg0: this.pd });
  }
}

export function views(u8: Uint8Array): { u8: Uint8Array; u32: Uint32Array; f32: Float32Array } {
  return {
    u8,
    u32: new Uint32Array(u8.buffer, u8.byteOffset, u8.byteLength >> 2),
    f32: new Float32Array(u8.buffer, u8.byteOffset, u8.byteLength >> 2),
  };
}

export type Host = ReturnType<typeof host>;

/** A kernel argument for a guest buffer. */
export const buf = (b: { va: number; bytes: number }) => ({ va: b.va, length: b.bytes });

/**
 * `host` and `guest` whose results are closed after each test of the calling file (call it once,
 * at the file's top level): the guests in the order they were opened, then the hosts, so no test
 * can leak a VM or an engine into the next.
 */
export function closedAfterEach(): { host: typeof host; guest: typeof guest } {
  const hosts: Host[] = [];
  const guests: Guest[] = [];
  afterEach(() => {
    for (const g of guests.splice(0)) g.close();
    for (const x of hosts.splice(0)) x.close();
  });
  return {
    host(...args) {
      const x = host(...args);
      hosts.push(x);
      return x;
    },
    guest(...args) {
      const g = guest(...args);
      guests.push(g);
      return g;
    },
  };
}

export function host(opts: EngineOptions = {}, aggOpts: Partial<AggregatorOptions> = {}): { engine: Engine; agg: Aggregator; close(): void } {
  const engine = new Engine({ vramSize: 256 << 20, channels: 16, ...opts });
  const agg = new Aggregator({ engine, hostReserved: 32 << 20, quarantineMs: 0, ...aggOpts });
  return {
    engine,
    agg,
    close() {
      agg.close();
      engine.close();
    },
  };
}

/** A DmaTable entry for memory the test owns (a new fd on the same memfd, owned by the table). */
function dmaMap(dma: DmaTable, gpa: number, fd: number, size: number, writable: boolean): void {
  const own = openSync(`/proc/self/fd/${fd}`, 'r+');
  const err = dma.map({ addr: gpa, size, offset: 0, readable: true, writable, fd: own });
  if (err !== 0) throw new Error(`DMA map at 0x${gpa.toString(16)} failed: errno ${err}`);
}

/** Attach a VM and boot a HostDriver in it with one channel. */
export function guest(agg: Aggregator, o: AttachOptions & { pvTables?: boolean }): Guest {
  const vm = agg.attach(o);
  const engine = agg.engine;
  const { base, size } = vm.slice;
  const bar1 = engine.vram.u8.subarray(base, base + size);
  const dv = new DataView(bar1.buffer, bar1.byteOffset, size);
  const trapped = !vm.traits.bar1Mapped;
  // BAR1 as the guest sees it; word accesses go through the trap path in fv-naive.
  const vram = {
    fd: -1, size, u8: bar1, dv,
    contains: (a: number, n: number) => a >= 0 && a + n <= size,
    read32: (a: number) => (trapped ? Number(vm.bar1Read(a, 4)) : dv.getUint32(a, true)),
    write32: (a: number, v: number) => (trapped ? vm.bar1Write(a, 4, v >>> 0) : dv.setUint32(a, v >>> 0, true)),
  };
  let sink: (v: number) => void = () => {};
  const facade = {
    vram,
    mmioRead: (off: number, sz: number) => vm.mmioRead(off, sz),
    mmioWrite: (off: number, sz: number, v: number | bigint) => vm.mmioWrite(off, sz, v),
    set onInterrupt(f: (v: number) => void) {
      sink = f;
    },
    bus: null as unknown,
  };
  const dma = new DmaTable();
  agg.connect(vm, dma, (v) => sink(v));
  const drv = new HostDriver(facade as unknown as Engine, { sysmemBusBase: 0x1_0000_0000 });
  // Memory the driver allocates is guest RAM: put it into the VM's DMA map too.
  const add = drv.bus.add.bind(drv.bus);
  drv.bus.add = (r: BusRegion) => {
    add(r);
    dmaMap(dma, r.bus, r.fd, r.length, r.writable);
  };
  const extra: { buf: ArrayBuffer; fd: number }[] = [];
  const ram = (gpa: number, bytes: number, writable = true): Uint8Array => {
    const fd = native.memfdCreate('guest-ram', bytes);
    const buf = native.mmap(fd, bytes, 0);
    dmaMap(dma, gpa, fd, bytes, writable);
    extra.push({ buf, fd });
    return new Uint8Array(buf);
  };
  const rd = (off: number) => Number(vm.mmioRead(off, 4));
  const wr = (off: number, v: number) => vm.mmioWrite(off, 4, v >>> 0);
  let pv: PvClient | null = null;
  let gvm: GpuVm;
  if (vm.traits.pv && o.pvTables !== false) {
    pv = new PvClient(ram(PV_AREA_GPA, 2 * S.PV_SLOT_SIZE), PV_AREA_GPA, 2, rd, wr);
    gvm = new PvGpuVm(drv, pv, o.mode === 'pv' ? 1 : S.PV_BATCH_MAX);
  } else {
    gvm = drv.createVm();
  }
  const ch = drv.createChannel(gvm);
  return {
    vm, drv, ch, gvm, dma, bar1, pv, rd, wr, ram,
    vram(bytes, opts = {}) {
      const b = drv.vramBuffer(gvm, bytes, opts);
      return { va: b.va, bytes, addr: b.addr, ...views(b.u8) };
    },
    sys(bytes, opts = {}) {
      const b = drv.allocSysmem(bytes);
      const va = gvm.map(b.bus, b.size, { target: TARGET_SYSMEM, readOnly: opts.readOnly });
      return { va, bytes, addr: b.bus, ...views(b.u8.subarray(0, bytes)) };
    },
    close() {
      for (const e of extra) {
        native.munmap(e.buf);
        native.close(e.fd);
      }
      dma.unmapAll();
    },
  };
}

/** Wait until cond() holds, checking after each macrotask turn (bounded). */
export async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out waiting for a condition');
    await new Promise((r) => setTimeout(r, 2));
  }
}
