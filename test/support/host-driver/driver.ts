// A host-side driver for the vugpu engine, written only against docs/hw-spec.md: it programs the
// engine through BAR0 registers and touches VRAM only as a guest would through BAR1. It owns a
// VRAM allocator, GPU address spaces (page tables), channels (instance block, USERD, GPFIFO,
// pushbuffer ring), the doorbell, interrupts and fences. Test support, not product: tests and
// benchmarks drive the engine with it (the product's driver is the guest's, guest/driver/); it
// shares the aggregator's range allocator rather than keep a second one.
import { native } from '../../../src/native.ts';
import type { Engine } from '../../../src/gpu/engine.ts';
import { RegionBus, type BusResolver } from '../../../src/gpu/bus.ts';
import { RangeAllocator } from '../../../src/aggregator/alloc.ts';
import { gpfifoEntry, Pushbuffer, type SemaphoreRelease } from './pushbuf.ts';
import { largeIndex, pde, pdIndex, pte, smallIndex, type Entry } from './pte.ts';
import * as S from '../../../src/gpu/spec.ts';

const TWO32 = 0x1_0000_0000;
const PDE_SPAN = 2 ** S.PD_SHIFT;
/** First VA handed out: above 4 GiB, so every VA exercises the upper address bits. */
const VA_BASE = 0x1_0000_0000;

export class GpuError extends Error {
  readonly chid: number;
  readonly code: number;
  readonly fault: FaultReport | undefined;
  /** PFIFO_CHAN_ERR_REASON for BAD_PROGRAM (hw-spec §6.3.6), else 0. */
  readonly reason: number;

  constructor(chid: number, code: number, fault?: FaultReport, reason = 0) {
    const f = fault ? ` (${S.faultName(fault.reason)} at VA 0x${fault.va.toString(16)}, unit ${fault.unit}, ${fault.write ? 'write' : 'read'})` : '';
    const r = code === S.CHAN_ERR.BAD_PROGRAM ? `/${S.progReasonName(reason)}` : '';
    super(`channel ${chid} stopped: ${S.chanErrName(code)}${r}${f}`);
    this.chid = chid;
    this.code = code;
    this.fault = fault;
    this.reason = reason;
  }
}

/** A SPIR-V module placed in GPU memory (HostDriver.programBuffer). */
export interface ProgramModule {
  va: number;
  length: number;
}

/** What HostChannel.launchProgram needs beyond the module (hw-spec §6.3). */
export interface ProgramLaunch {
  /** Entry-point index (PROGRAM_ENTRY), default 0. */
  entry?: number;
  /** Workgroup counts, default 1×1×1. */
  grid?: [number, number, number];
  /** Binding i = buffer i; readOnly sets BUFFER_FLAGS.READ_ONLY (the binding must be NonWritable),
   * cached BUFFER_FLAGS.DEVICE_CACHED (hw-spec 1.6). */
  buffers: { va: number; length: number; readOnly?: boolean; cached?: boolean }[];
  /** Push constants (offset 0). */
  push?: Uint8Array;
  /** Specialization constants. */
  spec?: { id: number; value: number }[];
}

export interface FaultReport {
  va: number;
  chid: number;
  reason: number;
  write: boolean;
  unit: number;
  overflow: boolean;
}

export interface SysmemBuffer {
  bus: number;
  size: number;
  fd: number;
  u8: Uint8Array;
  buf: ArrayBuffer;
}

export interface MapOptions {
  target?: number;
  readOnly?: boolean;
  /** Use 128 KiB pages (VA gets its own 128 MiB page-directory entries). */
  large?: boolean;
}

/** A GPU address space: page directory + on-demand page tables in VRAM. */
export class GpuVm {
  readonly pd: number;
  private drv: HostDriver;
  private tables = new Map<number, { addr: number; large: boolean }>();
  private va = new RangeAllocator(VA_BASE, S.VA_LIMIT - VA_BASE, S.SMALL_PAGE);

  constructor(drv: HostDriver) {
    this.drv = drv;
    this.pd = drv.allocVram(S.PD_SIZE, S.PD_SIZE, true);
  }

  /** Map [phys, phys + size) at a fresh VA and flush; returns the VA. */
  map(phys: number, size: number, opts: MapOptions = {}): number {
    const page = opts.large ? S.LARGE_PAGE : S.SMALL_PAGE;
    const span = opts.large ? Math.ceil(size / PDE_SPAN) * PDE_SPAN : Math.ceil(size / page) * page;
    const va = this.va.alloc(span, opts.large ? PDE_SPAN : page);
    if (va === null) throw new Error('GPU VA space exhausted');
    this.mapAt(va, phys, size, opts);
    return va;
  }

  /** Map at a given VA (pages of the chosen size), then flush the TLB. */
  mapAt(va: number, phys: number, size: number, opts: MapOptions = {}): void {
    const page = opts.large ? S.LARGE_PAGE : S.SMALL_PAGE;
    if (va % page !== 0 || phys % page !== 0) throw new RangeError('mapping not page aligned');
    for (let off = 0; off < size; off += page) {
      this.setPte(va + off, pte(phys + off, { target: opts.target, readOnly: opts.readOnly }), !!opts.large);
    }
    this.drv.flushTlb(this.pd);
  }

  /** Write a raw PTE (tests use this for hostile entries). */
  setPte(va: number, e: Entry, large = false): void {
    const t = this.table(va, large);
    const idx = large ? largeIndex(va) : smallIndex(va);
    this.drv.vramWrite64(t.addr + idx * 8, e);
  }

  /** Write a raw PDE (tests). */
  setPde(va: number, e: Entry): void {
    this.drv.vramWrite64(this.pd + pdIndex(va) * 8, e);
  }

  /** Unmap a range returned by map() and give its VA back. */
  free(va: number, size: number, opts: MapOptions = {}): void {
    const page = opts.large ? S.LARGE_PAGE : S.SMALL_PAGE;
    const span = opts.large ? Math.ceil(size / PDE_SPAN) * PDE_SPAN : Math.ceil(size / page) * page;
    this.unmap(va, Math.ceil(size / page) * page, !!opts.large);
    if (this.va.sizeOf(va) !== span) throw new RangeError(`GPU VA 0x${va.toString(16)}+${span} is not a mapping of this space`);
    this.va.free(va);
  }

  unmap(va: number, size: number, large = false): void {
    const page = large ? S.LARGE_PAGE : S.SMALL_PAGE;
    for (let off = 0; off < size; off += page) this.setPte(va + off, [0, 0], large);
    this.drv.flushTlb(this.pd);
  }

  private table(va: number, large: boolean): { addr: number; large: boolean } {
    const i = pdIndex(va);
    let t = this.tables.get(i);
    if (t) {
      if (t.large !== large) throw new Error(`PDE ${i} already holds ${t.large ? 'large' : 'small'} pages`);
      return t;
    }
    const bytes = (large ? S.LARGE_PT_ENTRIES : S.SMALL_PT_ENTRIES) * 8;
    t = { addr: this.drv.allocVram(bytes, 4096, true), large };
    this.tables.set(i, t);
    this.drv.vramWrite64(this.pd + i * 8, pde(t.addr, { large }));
    return t;
  }
}

/** A buffer in VRAM, mapped into a VM, with the CPU view a guest would get through BAR1. */
export interface VramBuffer {
  addr: number;
  va: number;
  size: number;
  u8: Uint8Array;
}

export interface ChannelOptions {
  /** GPFIFO entries (power of two), default 1024. */
  entries?: number;
  /** Pushbuffer ring bytes, default 1 MiB. */
  pushbufferSize?: number;
}

interface Outstanding {
  gp: number;
  start: number;
  end: number;
}

export class HostChannel {
  readonly chid: number;
  readonly vm: GpuVm;
  readonly drv: HostDriver;
  readonly inst: number;
  readonly userd: number;
  readonly gpfifo: number;
  readonly gpfifoVa: number;
  readonly entries: number;
  readonly pb: number;
  readonly pbVa: number;
  readonly pbSize: number;
  readonly sem: number;
  readonly semVa: number;
  /** Last fence sequence number emitted. */
  seq = 0;
  error: GpuError | null = null;
  private put = 0;
  private pbHead = 0;
  private outstanding: Outstanding[] = [];
  private waiters: { seq: number; resolve: () => void; reject: (e: Error) => void }[] = [];
  private enc = new Pushbuffer();

  constructor(drv: HostDriver, chid: number, vm: GpuVm, opts: ChannelOptions = {}) {
    this.drv = drv;
    this.chid = chid;
    this.vm = vm;
    this.entries = opts.entries ?? 1024;
    this.pbSize = opts.pushbufferSize ?? 1 << 20;
    const log2 = Math.log2(this.entries);
    if (!Number.isInteger(log2) || log2 < 1 || log2 > S.GPFIFO_MAX_LOG2) throw new RangeError('GPFIFO entries must be 2^1..2^20');
    this.inst = drv.allocVram(S.INST_SIZE, 4096, true);
    this.userd = drv.allocVram(S.USERD_SIZE, S.USERD_SIZE, true);
    this.gpfifo = drv.allocVram(this.entries * 8, 4096, true);
    this.gpfifoVa = vm.map(this.gpfifo, this.entries * 8);
    this.pb = drv.allocVram(this.pbSize, 4096, true);
    this.pbVa = vm.map(this.pb, this.pbSize);
    this.sem = drv.allocVram(4096, 4096, true);
    this.semVa = vm.map(this.sem, 4096);

    const w = (o: number, v: number) => drv.vramWrite32(this.inst + o, v);
    w(S.INST.USERD_LO, (this.userd % TWO32) | S.TARGET_VRAM);
    w(S.INST.USERD_HI, Math.floor(this.userd / TWO32));
    w(S.INST.MAGIC, 0xface);
    w(S.INST.GP_BASE_LO, this.gpfifoVa % TWO32);
    w(S.INST.GP_BASE_HI, (Math.floor(this.gpfifoVa / TWO32) & 0xff) | (log2 << 16));
    w(S.INST.PD_LO, (vm.pd % TWO32) | S.TARGET_VRAM);
    w(S.INST.PD_HI, Math.floor(vm.pd / TWO32));
    this.bind();
  }

  /** Give the channel's VRAM and VA back (after it was unbound). */
  release(): void {
    this.vm.free(this.gpfifoVa, this.entries * 8);
    this.vm.free(this.pbVa, this.pbSize);
    this.vm.free(this.semVa, 4096);
    this.drv.freeVram(this.inst, S.INST_SIZE);
    this.drv.freeVram(this.userd, S.USERD_SIZE);
    this.drv.freeVram(this.gpfifo, this.entries * 8);
    this.drv.freeVram(this.pb, this.pbSize);
    this.drv.freeVram(this.sem, 4096);
  }

  /** (Re)bind: CHAN with VALID, then enable. Clears an error state. */
  bind(): void {
    this.put = 0;
    this.outstanding = [];
    this.pbHead = 0;
    this.drv.vramWrite32(this.userd + S.USERD.GP_PUT, 0);
    this.error = null;
    this.drv.wr(S.PFIFO_CHAN + 8 * this.chid, S.CHAN_VALID | 0x40000000 | this.inst / 4096);
    this.drv.wr(S.PFIFO_CHAN_STATE + 8 * this.chid, S.STATE_ENABLE);
    // Every binding starts with the two classes on their conventional subchannels.
    this.submit(new Pushbuffer().setObject(S.SUBCH_COMPUTE, S.CLASS_COMPUTE).setObject(S.SUBCH_COPY, S.CLASS_COPY).words());
  }

  get gpGet(): number {
    return this.drv.vramRead32(this.userd + S.USERD.GP_GET);
  }

  /** STATE register as the hardware reports it. */
  get state(): number {
    return this.drv.rd(S.PFIFO_CHAN_STATE + 8 * this.chid);
  }

  /**
   * Copy `words` (and optionally `data` placed before them, returned as its VA) into the
   * pushbuffer ring, append a GPFIFO entry, update GP_PUT and ring the doorbell.
   */
  submit(words: Uint32Array, data?: Uint8Array): { gp: number; dataVa: number } {
    const dataBytes = data ? Math.ceil(data.length / 16) * 16 : 0;
    const bytes = dataBytes + words.length * 4;
    if (words.length === 0 || words.length > S.GPFIFO_MAX_DWORDS) throw new RangeError('segment length out of range');
    if (bytes > this.pbSize) throw new RangeError('segment larger than the pushbuffer ring');
    this.reclaim();
    if ((this.put + 1) % this.entries === this.gpGet) throw new Error(`channel ${this.chid}: GPFIFO full`);
    let start = this.pbHead;
    if (start + bytes > this.pbSize) start = 0;
    const end = start + bytes;
    for (const o of this.outstanding) {
      if (o.start < end && start < o.end) throw new Error(`channel ${this.chid}: pushbuffer ring full (await idle())`);
    }
    const vram = this.drv.engine.vram.u8;
    if (data) vram.set(data, this.pb + start);
    const segOff = start + dataBytes;
    new Uint32Array(vram.buffer, vram.byteOffset + this.pb + segOff, words.length).set(words);
    this.pbHead = end;
    const gp = this.put;
    const [e0, e1] = gpfifoEntry(this.pbVa + segOff, words.length);
    this.drv.vramWrite32(this.gpfifo + gp * 8, e0);
    this.drv.vramWrite32(this.gpfifo + gp * 8 + 4, e1);
    this.outstanding.push({ gp, start, end });
    this.put = (this.put + 1) % this.entries;
    this.drv.vramWrite32(this.userd + S.USERD.GP_PUT, this.put);
    this.drv.wr(S.DOORBELL, this.chid);
    return { gp, dataVa: this.pbVa + start };
  }

  /** Drop ring bookkeeping for entries the device has finished. */
  private reclaim(): void {
    const get = this.gpGet;
    // Entries in [get, put) are still pending; everything else is done.
    this.outstanding = this.outstanding.filter((o) => (o.gp - get + this.entries) % this.entries < (this.put - get + this.entries) % this.entries);
  }

  /** The next fence release (semaphore + interrupt) for a launch. */
  nextRelease(): SemaphoreRelease {
    return { va: this.semVa, payload: ++this.seq, interrupt: true };
  }

  /** Append a fence; the promise settles when the semaphore reaches it or the channel fails. */
  fence(): Promise<void> {
    const r = this.nextRelease();
    this.submit(this.enc.clear().semaphoreRelease(r).words());
    return this.wait(r.payload);
  }

  wait(seq: number): Promise<void> {
    if (this.error) return Promise.reject(this.error);
    if (this.reached(seq)) return Promise.resolve();
    return new Promise((resolve, reject) => this.waiters.push({ seq, resolve, reject }));
  }

  /** Resolves when GP_GET has caught up (or rejects on error). */
  idle(): Promise<void> {
    return this.fence();
  }

  private reached(seq: number): boolean {
    return ((this.drv.vramRead32(this.sem) - seq) | 0) >= 0;
  }

  /** Called by the interrupt handler. */
  checkFences(): void {
    if (this.waiters.length === 0) return;
    const left = [];
    for (const w of this.waiters) {
      if (this.reached(w.seq)) w.resolve();
      else left.push(w);
    }
    this.waiters = left;
  }

  failed(err: GpuError): void {
    this.error = err;
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w.reject(err);
  }

  /** Copy `length` bytes between two VAs; resolves on completion. */
  copy(dstVa: number, srcVa: number, length: number): Promise<void> {
    const r = this.nextRelease();
    this.submit(this.enc.clear().copy(S.SUBCH_COPY, { src: srcVa, dst: dstVa, length, semaphore: r }).words());
    return this.wait(r.payload);
  }

  /**
   * Launch a SPIR-V program (hw-spec §6.3) on buffers given by VA ranges; resolves on completion,
   * rejects with a GpuError (BAD_PROGRAM with its reason, PROGRAM_LOOP_LIMIT, WATCHDOG, MMU_FAULT).
   * The push and spec blocks travel in the pushbuffer ring just before the methods, as launch()
   * does with kernel parameters.
   */
  launchProgram(module: ProgramModule, l: ProgramLaunch): Promise<void> {
    const r = this.nextRelease();
    const push = l.push ?? new Uint8Array(0);
    const spec = l.spec ?? [];
    const pushBytes = Math.ceil(push.length / 16) * 16;
    const data = new Uint8Array(pushBytes + spec.length * 8);
    data.set(push);
    const dv = new DataView(data.buffer);
    spec.forEach((e, i) => {
      dv.setUint32(pushBytes + 8 * i, e.id >>> 0, true);
      dv.setUint32(pushBytes + 8 * i + 4, e.value >>> 0, true);
    });
    const methods = (base: number) => this.enc.clear().program(S.SUBCH_COMPUTE, {
      moduleVa: module.va, moduleLength: module.length, entry: l.entry, grid: l.grid,
      paramVa: base, paramLength: push.length, specVa: base + pushBytes, specCount: spec.length,
      buffers: l.buffers, semaphore: r,
    }).words().slice();
    // The encoding's length does not depend on the VAs: encode, place, encode with the real VA.
    let words = methods(0);
    if (data.length > 0) {
      const dataBytes = Math.ceil(data.length / 16) * 16;
      const start = this.pbHead + dataBytes + words.length * 4 > this.pbSize ? 0 : this.pbHead;
      words = methods(this.pbVa + start);
    }
    this.submit(words, data.length > 0 ? data : undefined);
    return this.wait(r.payload);
  }

  /**
   * Several program launches in one pushbuffer segment and one fence after the last, as a guest
   * driver submits a command buffer: the engine runs them as one batch (hw-spec §6.3 "Batched
   * launches"). Resolves when the fence is reached; with `fence: false` the segment ends with the
   * last launch (the caller watches GP_GET or a later fence) and it resolves at once.
   */
  launchPrograms(launches: { module: ProgramModule; l: ProgramLaunch }[], opts: { fence?: boolean } = {}): Promise<void> {
    const fence = opts.fence ?? true;
    const r = fence ? this.nextRelease() : null;
    const offs: number[] = [];
    let total = 0;
    for (const x of launches) {
      if (x.l.spec?.length) throw new RangeError('launchPrograms: no specialization constants');
      offs.push(total);
      total += Math.ceil((x.l.push?.length ?? 0) / 16) * 16;
    }
    const data = new Uint8Array(total);
    launches.forEach((x, i) => data.set(x.l.push ?? new Uint8Array(0), offs[i]));
    const methods = (base: number) => {
      const enc = this.enc.clear();
      launches.forEach((x, i) => enc.program(S.SUBCH_COMPUTE, {
        moduleVa: x.module.va, moduleLength: x.module.length, entry: x.l.entry, grid: x.l.grid,
        paramVa: base + offs[i]!, paramLength: x.l.push?.length ?? 0, buffers: x.l.buffers,
      }));
      return (r ? enc.semaphoreRelease(r) : enc).words().slice();
    };
    let words = methods(0);
    if (total > 0) {
      const start = this.pbHead + total + words.length * 4 > this.pbSize ? 0 : this.pbHead;
      words = methods(this.pbVa + start);
    }
    this.submit(words, total > 0 ? data : undefined);
    return r ? this.wait(r.payload) : Promise.resolve();
  }

  /** Launch a kernel on buffers given by VA ranges; resolves on completion. */
  launch(kernel: number, buffers: { va: number; length: number }[], params?: Uint8Array): Promise<void> {
    const r = this.nextRelease();
    const plen = params?.length ?? 0;
    // Params travel in the pushbuffer ring just before the methods; their VA is known only
    // after placement, so the segment is encoded for a placeholder and patched (same length).
    const words = this.enc.clear().compute(S.SUBCH_COMPUTE, { kernel, paramVa: 0, paramLength: plen, buffers, semaphore: r }).words().slice();
    if (plen > 0) {
      const dataBytes = Math.ceil(plen / 16) * 16;
      const start = this.pbHead + dataBytes + words.length * 4 > this.pbSize ? 0 : this.pbHead;
      const pva = this.pbVa + start;
      // PARAM_VA_UPPER header is at word 5 (after KERNEL_ID + grid): [hdr, hi, lo, len].
      words[6] = Math.floor(pva / TWO32) & 0xff;
      words[7] = pva % TWO32;
    }
    this.submit(words, params);
    return this.wait(r.payload);
  }
}

export interface HostDriverOptions {
  /** Bus resolver to install in the engine; default: the driver's own RegionBus for sysmem. */
  bus?: BusResolver;
  /** Bus address where driver-allocated system memory starts. */
  sysmemBusBase?: number;
}

export class HostDriver {
  readonly engine: Engine;
  readonly bus: RegionBus;
  readonly channels: (HostChannel | null)[];
  lastFault: FaultReport | null = null;
  private vram: RangeAllocator;
  private sysBus: RangeAllocator;
  private sysBufs: SysmemBuffer[] = [];
  private runlist: number;
  private irqQueued = false;

  constructor(engine: Engine, opts: HostDriverOptions = {}) {
    this.engine = engine;
    this.bus = new RegionBus();
    engine.bus = opts.bus ?? this.bus;
    const vramSize = this.rd(S.PFB_PART_COUNT) * this.rd(S.PFB_PART_SIZE_MB) * (1 << 20);
    // Byte granule: each caller aligns its allocation itself (USERD, page tables, rings).
    this.vram = new RangeAllocator(0, vramSize, 1);
    const base = opts.sysmemBusBase ?? 0x10_0000_0000;
    this.sysBus = new RangeAllocator(base, 2 ** 44, 4096);
    this.channels = new Array(this.rd(S.PFIFO_CHAN_COUNT)).fill(null);
    this.runlist = this.allocVram(4096, 4096, true);
    engine.onInterrupt = () => this.interrupt();
    this.wr(S.PMC_INTR_EN, 0xf);
  }

  // ---- registers and BAR1 ----

  rd(off: number): number {
    return this.engine.mmioRead(off, 4);
  }

  wr(off: number, v: number): void {
    this.engine.mmioWrite(off, 4, v >>> 0);
  }

  vramRead32(addr: number): number {
    return this.engine.vram.read32(addr);
  }

  vramWrite32(addr: number, v: number): void {
    this.engine.vram.write32(addr, v);
  }

  vramWrite64(addr: number, e: Entry): void {
    this.engine.vram.write32(addr, e[0]);
    this.engine.vram.write32(addr + 4, e[1]);
  }

  // ---- memory ----

  allocVram(size: number, align = 4096, zero = false): number {
    const a = this.vram.alloc(size, align);
    if (a === null) throw new Error(`out of VRAM allocating ${size} bytes`);
    if (zero) this.engine.vram.u8.fill(0, a, a + size);
    return a;
  }

  freeVram(addr: number, size: number): void {
    // size as asked at allocation (the allocator rounds it up to its granule)
    const held = this.vram.sizeOf(addr);
    if (!held || size > held) throw new RangeError(`VRAM 0x${addr.toString(16)}+${size} is not an allocation`);
    this.vram.free(addr);
  }

  /** System memory: a memfd registered with the bus at a fresh bus address. */
  allocSysmem(size: number): SysmemBuffer {
    const rounded = Math.ceil(size / 4096) * 4096;
    const bus = this.sysBus.alloc(rounded, 1 << 21);
    if (bus === null) throw new Error('bus address space exhausted');
    const fd = native.memfdCreate('vugpu-sysmem', rounded);
    if (fd < 0) throw new Error(`memfd_create: errno ${-fd}`);
    const buf = native.mmap(fd, rounded, 0);
    const b: SysmemBuffer = { bus, size: rounded, fd, u8: new Uint8Array(buf), buf };
    this.bus.add({ bus, length: rounded, fd, offset: 0, writable: true });
    this.sysBufs.push(b);
    return b;
  }

  freeSysmem(b: SysmemBuffer): void {
    this.bus.remove(b.bus);
    this.sysBus.free(b.bus);
    native.munmap(b.buf);
    native.forgetFd?.(b.fd);
    native.close(b.fd);
    this.sysBufs = this.sysBufs.filter((x) => x !== b);
  }

  createVm(): GpuVm {
    return new GpuVm(this);
  }

  /** Allocate VRAM and map it into vm. */
  vramBuffer(vm: GpuVm, size: number, opts: MapOptions = {}): VramBuffer {
    const align = opts.large ? S.LARGE_PAGE : 4096;
    const rounded = Math.ceil(size / align) * align;
    const addr = this.allocVram(rounded, align, true);
    const va = vm.map(addr, rounded, { ...opts, target: S.TARGET_VRAM });
    return { addr, va, size, u8: this.engine.vram.u8.subarray(addr, addr + size) };
  }

  /** Place a SPIR-V module (its words or bytes) in VRAM mapped into vm, for launchProgram. */
  programBuffer(vm: GpuVm, spirv: Uint8Array | Uint32Array): ProgramModule & { buffer: VramBuffer } {
    const bytes = spirv instanceof Uint32Array ? new Uint8Array(spirv.buffer, spirv.byteOffset, spirv.byteLength) : spirv;
    const buffer = this.vramBuffer(vm, Math.max(bytes.length, 1));
    buffer.u8.set(bytes);
    return { va: buffer.va, length: bytes.length, buffer };
  }

  /** Allocate system memory and map it into vm. */
  sysmemBuffer(vm: GpuVm, size: number, opts: MapOptions = {}): SysmemBuffer & { va: number } {
    const b = this.allocSysmem(size);
    const va = vm.map(b.bus, b.size, { ...opts, target: S.TARGET_SYSMEM });
    return { ...b, va };
  }

  flushTlb(pd: number): void {
    // As nouveau: wait for a free flush slot, write the PD, trigger, wait for DONE.
    if ((this.rd(S.MMU_FLUSH_STATUS) & 0x00ff0000) === 0) throw new Error('no free TLB flush slot');
    this.wr(S.MMU_FLUSH_PDB, pd / 256);
    this.wr(S.MMU_FLUSH_TRIGGER, S.MMU_FLUSH_GO | 1);
    if ((this.rd(S.MMU_FLUSH_STATUS) & 0x8000) === 0) throw new Error('TLB flush did not complete');
  }

  // ---- channels ----

  createChannel(vm: GpuVm = this.createVm(), opts: ChannelOptions = {}): HostChannel {
    const chid = this.channels.indexOf(null);
    if (chid < 0) throw new Error('no free channel');
    const ch = new HostChannel(this, chid, vm, opts);
    this.channels[chid] = ch;
    this.submitRunlist();
    return ch;
  }

  destroyChannel(ch: HostChannel): void {
    this.wr(S.PFIFO_CHAN_STATE + 8 * ch.chid, 0);
    this.wr(S.PFIFO_PREEMPT, ch.chid);
    this.wr(S.PFIFO_CHAN + 8 * ch.chid, 0);
    this.channels[ch.chid] = null;
    ch.failed(new GpuError(ch.chid, S.CHAN_ERR.NONE));
    this.submitRunlist();
    ch.release();
  }

  private submitRunlist(): void {
    const ids = this.channels.filter((c): c is HostChannel => c !== null).map((c) => c.chid);
    ids.forEach((chid, i) => {
      this.vramWrite32(this.runlist + 8 * i, chid);
      this.vramWrite32(this.runlist + 8 * i + 4, 4);
    });
    this.wr(S.PFIFO_RUNLIST_BASE, this.runlist / 4096);
    this.wr(S.PFIFO_RUNLIST_SUBMIT, ids.length);
  }

  // ---- interrupts ----

  /** MSI-X handler: deferred to a microtask, as a real handler runs after the device write. */
  private interrupt(): void {
    if (this.irqQueued) return;
    this.irqQueued = true;
    queueMicrotask(() => {
      this.irqQueued = false;
      this.handleInterrupts();
    });
  }

  handleInterrupts(): void {
    const pend = this.rd(S.PMC_INTR);
    if (pend === 0) return;
    this.wr(S.PMC_INTR, pend); // clear first: later events re-raise
    if (pend & (1 << S.IRQ_MMU_FAULT)) {
      const st = this.rd(S.MMU_FAULT_STATUS);
      if (st & S.MMU_FAULT_STATUS_VALID) {
        const info = this.rd(S.MMU_FAULT_INFO);
        this.lastFault = {
          va: this.rd(S.MMU_FAULT_ADDR_LO) + this.rd(S.MMU_FAULT_ADDR_HI) * TWO32,
          chid: this.rd(S.MMU_FAULT_CHID),
          reason: info & 0xff,
          write: (info & 0x100) !== 0,
          unit: (info >>> 12) & 7,
          overflow: (st & S.MMU_FAULT_STATUS_OVERFLOW) !== 0,
        };
      }
      this.wr(S.MMU_FAULT_STATUS, st);
    }
    if (pend & ((1 << S.IRQ_MMU_FAULT) | (1 << S.IRQ_CHAN_ERROR))) {
      this.wr(S.PFIFO_INTR, S.PFIFO_INTR_CHAN_ERROR | S.PFIFO_INTR_RUNLIST_ERROR);
      for (let i = 0; i < 4; i++) {
        const bits = this.rd(S.PFIFO_ERR_PENDING + 4 * i);
        if (!bits) continue;
        this.wr(S.PFIFO_ERR_PENDING + 4 * i, bits);
        for (let b = 0; b < 32; b++) {
          if (!(bits & (1 << b))) continue;
          const chid = 32 * i + b;
          const ch = this.channels[chid];
          if (!ch) continue;
          const code = this.rd(S.PFIFO_CHAN_ERR + 8 * chid);
          const fault = code === S.CHAN_ERR.MMU_FAULT && this.lastFault?.chid === chid ? this.lastFault : undefined;
          const reason = code === S.CHAN_ERR.BAD_PROGRAM ? this.rd(S.PFIFO_CHAN_ERR_REASON + 4 * chid) : 0;
          ch.failed(new GpuError(chid, code, fault, reason));
        }
      }
    }
    if (pend & (1 << S.IRQ_FIFO)) {
      this.wr(S.PFIFO_INTR, S.PFIFO_INTR_FENCE);
      for (let i = 0; i < 4; i++) {
        const bits = this.rd(S.PFIFO_FENCE_PENDING + 4 * i);
        if (bits) this.wr(S.PFIFO_FENCE_PENDING + 4 * i, bits);
      }
      // Any channel may have passed a fence (several releases can share one message).
      for (const ch of this.channels) ch?.checkFences();
    }
  }

  close(): void {
    for (const b of [...this.sysBufs]) this.freeSysmem(b);
  }
}
