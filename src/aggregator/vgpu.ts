// One VM's mediated vGPU (GPUvm's per-VM "vGPU control block"): its BAR0 register view (a table
// of pass / emulate / trap rows, regview.ts), its VRAM slice, its virtual channels and their
// shadow channels on the engine, its shadow page tables, its virtual interrupt state and, in PV
// modes, its hypercall page. It never touches another VM's state: everything physical it needs
// (channel ids, the merged runlist, the scheduler) it asks of its host, the Aggregator.
import type { Logger } from '../log.ts';
import type { Engine } from '../gpu/engine.ts';
import type { FaultRecord } from '../gpu/mmu.ts';
import { Interrupts } from '../gpu/irq.ts';
import { fnv1a } from '../gpu/diag.ts';
import { RangeAllocator } from './alloc.ts';
import { newCounters, type VgpuCounters } from './counters.ts';
import { GuestRanges, type GuestMemory } from './guest-memory.ts';
import { MODES, type MediatedMode, type ModeTraits } from './modes.ts';
import { PvPage } from './pv.ts';
import { RegisterView, type ViewRange, type ViewRow } from './regview.ts';
import { ShadowMmu, type Slice } from './shadow-mmu.ts';
import { ShadowChannels, type ChannelHost, type VChannel } from './shadow-channels.ts';
import type { Persist } from '../state/persist.ts';
import { restoreVgpu, saveVgpu, type SavedVgpu } from './persist.ts';

export type { VChannel };
import {
  BAR1_INST, CHAN_ERR, DIAG_DMA_ADDR_HI, DIAG_DMA_ADDR_LO, DIAG_DMA_CTRL, DIAG_DMA_ERROR,
  DIAG_DMA_FNV, DIAG_DMA_LEN, DIAG_DMA_MAX, DIAG_DMA_STATUS, DIAG_DMA_VRAM_OFF, DIAG_IRQ_COUNT,
  DIAG_IRQ_FIRE, DIAG_MAGIC, DIAG_SCRATCH0, DIAG_VRAM_OFF, DIAG_VRAM_PEEK, DIAG_VRAM_POKE,
  DOORBELL, FAULT, IRQ_MMU_FAULT, MMU_FAULT_ADDR_HI, MMU_FAULT_ADDR_LO, MMU_FAULT_CHID,
  MMU_FAULT_INFO, MMU_FAULT_STATUS, MMU_FAULT_STATUS_OVERFLOW, MMU_FAULT_STATUS_VALID,
  MMU_FLUSH_ALL_PDB, MMU_FLUSH_GO, MMU_FLUSH_PDB, MMU_FLUSH_STATUS, MMU_FLUSH_STATUS_VALUE,
  MMU_FLUSH_TRIGGER, MSIX_VECTORS, PFB_PART_COUNT, PFB_PART_SIZE_MB, PFIFO_CHAN, PFIFO_CHAN_COUNT,
  PFIFO_CHAN_ERR, PFIFO_CHAN_ERR_INFO, PFIFO_CHAN_ERR_REASON, PFIFO_CHAN_STATE, PPROG, PFIFO_ERR_PENDING, PFIFO_FENCE_PENDING,
  PFIFO_INTR, PFIFO_INTR_CHAN_ERROR, PFIFO_INTR_EN, PFIFO_INTR_FENCE, PFIFO_INTR_RUNLIST_ERROR,
  PFIFO_PREEMPT, PFIFO_PREEMPT_PENDING, PFIFO_RUNLIST_BASE, PFIFO_RUNLIST_STATUS,
  PFIFO_RUNLIST_SUBMIT, PGRAPH_STATUS, PMC_BOOT_0, PMC_ENABLE, PMC_ENABLE_PFIFO, PMC_ENABLE_RESET,
  PMC_INTR, PMC_INTR_EN, PRAMIN_BASE, PRAMIN_WINDOW, PRAMIN_WINDOW_SIZE, PTIMER_TIME_0,
  PTIMER_TIME_1, STATE_ENABLE, EFAULT, EINVAL, EIO,
} from '../gpu/spec.ts';

const RO = 0xffffffff;
const TWO32 = 0x1_0000_0000;

/** What a vGPU needs from the aggregator (physical resources shared by all VMs). */
export interface VgpuHost extends ChannelHost {
  readonly engine: Engine;
  /** Host-reserved VRAM for shadows. */
  readonly hostArea: RangeAllocator;
  /** A physical channel for (vm, vchid), or −1 when the pool is empty. */
  allocChid(vm: Vgpu, vchid: number): number;
  /** vm queued one more submission: tell the scheduler. */
  announce(vm: Vgpu): void;
  // closeChannel (ChannelHost): channels are enabled physically only by the dispatcher, while
  // their submission is on the device.
}

/** Optional observer of a vGPU's mediation events (the tracer); called on the hot paths, so
 * implementations must be cheap. pd values are guest page-directory addresses. */
export interface VgpuObserver {
  tlbFlush(pd: number | null): void;
  shadowRebuild(ptesWritten: number, pd: number): void;
  hypercall(op: number, count: number, result: number): void;
  doorbell(vchid: number): void;
  fault(vchid: number, va: number, reason: number, write: boolean, unit: number): void;
  channelError(vchid: number, code: number): void;
}

export interface VgpuConfig {
  name: string;
  mode: MediatedMode;
  /** Bus index k: sysmem bus addresses are (k+1)·2^44 + gpa. */
  index: number;
  slice: Slice;
  /** Virtual channels the guest sees (PFIFO_CHAN_COUNT). */
  channels: number;
  weight: number;
  log: Logger;
  /** Counters object (the metrics registry's for this VM); default: a standalone one. */
  counters?: VgpuCounters;
}

export interface VgpuState {
  channels: VChannel[];
  /** The guest runlist as last submitted (virtual chids). */
  runlist: number[];
  /** The VM's PMC_ENABLE.PFIFO: its channels are held while clear. */
  pfifoEnabled: boolean;
  /** PTIMER_TIME_1 latched by this VM's last TIME_0 read. */
  timeHi: number;
  /** Submissions waiting for the scheduler, in doorbell order (virtual chids). */
  queue: number[];
  /** Of those, how many (at the tail) were not yet announced because PFIFO is disabled. */
  held: number;
  /** The slice is being zeroed (scrub): no client is served until it is done. */
  scrubPending: boolean;
}

/** Bytes zeroed per event-loop turn while scrubbing: a few milliseconds' work, so other VMs are
 * served between (docs/architecture.md, "Threads"). */
export const SCRUB_CHUNK = 16 << 20;

export class Vgpu implements Persist<SavedVgpu> {
  readonly name: string;
  readonly mode: MediatedMode;
  readonly traits: ModeTraits;
  readonly index: number;
  readonly slice: Slice;
  readonly vchannels: number;
  weight: number;
  readonly counters: VgpuCounters;
  readonly s: VgpuState;
  readonly view: RegisterView;
  readonly mmu: ShadowMmu;
  readonly chans: ShadowChannels;
  readonly pv: PvPage | null;
  /** PV MEM_ALLOC allocator over the slice (guest view). */
  readonly vramAlloc: RangeAllocator;
  readonly log: Logger;
  private readonly host: VgpuHost;
  private readonly engine: Engine;
  /** The VM's interrupt logic (its counters are state: persist.ts). */
  readonly irq: Interrupts;
  /** Mediation events go here when set (vugpu serve --trace). */
  observer: VgpuObserver | null = null;
  private guestMem: GuestMemory | null = null;
  private msix: (vector: number) => void = () => {};

  constructor(host: VgpuHost, cfg: VgpuConfig) {
    this.host = host;
    this.engine = host.engine;
    this.name = cfg.name;
    this.mode = cfg.mode;
    this.traits = MODES[cfg.mode];
    this.index = cfg.index;
    this.slice = cfg.slice;
    this.vchannels = cfg.channels;
    this.weight = cfg.weight;
    this.log = cfg.log;
    this.counters = cfg.counters ?? newCounters();
    this.s = { channels: [], runlist: [], pfifoEnabled: true, timeHi: 0, queue: [], held: 0, scrubPending: false };
    this.vramAlloc = new RangeAllocator(0, cfg.slice.size, 4096);
    this.mmu = new ShadowMmu({
      vram: this.engine.vram, slice: cfg.slice, guest: () => this.guestMem, busIndex: cfg.index,
      host: host.hostArea, counters: this.counters, log: cfg.log,
      rebuilt: (ptes, pd) => this.observer?.shadowRebuild(ptes, pd),
    });
    this.chans = new ShadowChannels({
      engine: this.engine, host, allocChid: (vchid) => host.allocChid(this, vchid), slice: cfg.slice,
      index: cfg.index, mmu: this.mmu, guest: () => this.guestMem, pfifoEnabled: () => this.s.pfifoEnabled,
      counters: this.counters, log: cfg.log,
      refused: (vchid, code) => this.channelError(vchid, code),
      // A channel becoming runnable fetches GP_PUT: that is a submission for the scheduler.
      becameRunnable: (vchid) => this.queue(vchid),
    }, cfg.channels);
    this.s.channels = this.chans.list;
    this.pv = this.traits.pv
      ? new PvPage({
        mmu: this.mmu, guest: () => this.guestMem, vramAlloc: this.vramAlloc, counters: this.counters, log: cfg.log,
        reg: (a) => this.view.regs.get(a), setReg: (a, v) => this.view.regs.set(a, v),
        called: (op, count, result) => this.observer?.hypercall(op, count, result),
      })
      : null;
    this.view = new RegisterView(this.rows(), this.ranges(), this.engine);
    this.irq = new Interrupts(() => this.view.regs, (v) => {
      this.counters.interrupts++;
      this.msix(v);
    });
    this.counters.vramInUseBytes = this.vramInUse;
  }

  /** The VM's system memory and MSI-X became available (a client connected). */
  connect(mem: GuestMemory, msix: (vector: number) => void): void {
    this.guestMem = mem;
    this.msix = msix;
  }

  get guest(): GuestMemory | null {
    return this.guestMem;
  }

  // ---- BAR0 and BAR1 ----

  mmioRead(offset: number, size: number): number | bigint {
    this.counters.mmioReads++;
    return this.view.read(offset, size);
  }

  mmioWrite(offset: number, size: number, value: number | bigint): void {
    this.counters.mmioWrites++;
    this.view.write(offset, size, value);
  }

  /** Trapped BAR1 read (fv-naive): the slice, by identity. */
  bar1Read(offset: number, size: number): number | bigint {
    this.counters.mmioReads++;
    this.counters.bar1Reads++;
    return this.sliceRead(offset, size);
  }

  bar1Write(offset: number, size: number, value: number | bigint): void {
    this.counters.mmioWrites++;
    this.counters.bar1Writes++;
    this.sliceWrite(offset, size, value);
  }

  /** Read `size` bytes at guest VRAM address a; outside the slice reads 0. */
  private sliceRead(a: number, size: number): number | bigint {
    if (!(a >= 0 && a + size <= this.slice.size)) return size === 8 ? 0n : 0;
    const dv = this.engine.vram.dv;
    const p = this.slice.base + a;
    switch (size) {
      case 1: return dv.getUint8(p);
      case 2: return dv.getUint16(p, true);
      case 8: return dv.getBigUint64(p, true);
      default: return dv.getUint32(p, true);
    }
  }

  private sliceWrite(a: number, size: number, value: number | bigint): void {
    if (!(a >= 0 && a + size <= this.slice.size)) return;
    const dv = this.engine.vram.dv;
    const p = this.slice.base + a;
    if (size === 8) dv.setBigUint64(p, BigInt.asUintN(64, BigInt(value)), true);
    else if (size === 1) dv.setUint8(p, Number(value) & 0xff);
    else if (size === 2) dv.setUint16(p, Number(value) & 0xffff, true);
    else dv.setUint32(p, Number(value) >>> 0, true);
  }

  // ---- the register table ----

  private rows(): ViewRow[] {
    const reg = (a: number) => this.view.regs.get(a);
    const rows: ViewRow[] = [
      // PMC
      { addr: PMC_BOOT_0, name: 'PMC_BOOT_0', access: 'pass', reset: 0, ro: RO },
      { addr: PMC_INTR, name: 'PMC_INTR', access: 'emulate', reset: 0, ro: ~0xf, w1c: 0xf },
      {
        addr: PMC_INTR_EN, name: 'PMC_INTR_EN', access: 'emulate', reset: 0, ro: ~0xf,
        postWrite: (now, _w, old) => this.irq.enableChanged(now, old),
      },
      {
        addr: PMC_ENABLE, name: 'PMC_ENABLE', access: 'trap', reset: PMC_ENABLE_RESET, ro: ~PMC_ENABLE_RESET,
        postWrite: (now) => this.setPfifoEnabled((now & PMC_ENABLE_PFIFO) !== 0),
      },
      // PBUS
      { addr: PRAMIN_BASE, name: 'PRAMIN_BASE', access: 'emulate', reset: 0, ro: 0xff000000 },
      { addr: BAR1_INST, name: 'BAR1_INST', access: 'emulate', reset: 0, ro: RO },
      // PFIFO
      { addr: PFIFO_CHAN_COUNT, name: 'PFIFO_CHAN_COUNT', access: 'emulate', reset: this.vchannels, ro: RO },
      { addr: PFIFO_INTR, name: 'PFIFO_INTR', access: 'emulate', reset: 0, ro: ~7, w1c: 7 },
      { addr: PFIFO_INTR_EN, name: 'PFIFO_INTR_EN', access: 'emulate', reset: 7, ro: ~7 },
      { addr: PFIFO_RUNLIST_BASE, name: 'PFIFO_RUNLIST_BASE', access: 'emulate', reset: 0, ro: 0xf0000000 },
      {
        addr: PFIFO_RUNLIST_SUBMIT, name: 'PFIFO_RUNLIST_SUBMIT', access: 'trap', reset: 0, ro: RO,
        postWrite: (_s, w) => this.submitRunlist(w & 0xfff),
      },
      {
        addr: PFIFO_RUNLIST_STATUS, name: 'PFIFO_RUNLIST_STATUS', access: 'emulate', reset: 0, ro: RO,
        postRead: () => this.s.runlist.length,
      },
      {
        addr: PFIFO_PREEMPT, name: 'PFIFO_PREEMPT', access: 'trap', reset: 0, ro: ~0x7f,
        postWrite: (v) => this.chans.preempt(v & 0x7f),
        postRead: (v) => (this.chans.preemptPending(v & 0x7f) ? v | PFIFO_PREEMPT_PENDING : v),
      },
      {
        addr: DOORBELL, name: 'DOORBELL', access: 'trap', reset: 0, ro: RO,
        postWrite: (_s, w) => this.doorbell(w & 0x7f),
      },
      // PTIMER: the latch is per VM (another VM's TIME_0 read must not move ours).
      {
        addr: PTIMER_TIME_0, name: 'PTIMER_TIME_0', access: 'trap', reset: 0, ro: RO,
        postRead: () => {
          const lo = this.engine.mmioRead(PTIMER_TIME_0, 4);
          this.s.timeHi = this.engine.mmioRead(PTIMER_TIME_1, 4);
          return lo;
        },
      },
      { addr: PTIMER_TIME_1, name: 'PTIMER_TIME_1', access: 'emulate', reset: 0, ro: RO, postRead: () => this.s.timeHi },
      // PFB: the slice is the VM's whole VRAM.
      { addr: PFB_PART_COUNT, name: 'PFB_PART_COUNT', access: 'emulate', reset: 1, ro: RO },
      { addr: PFB_PART_SIZE_MB, name: 'PFB_PART_SIZE_MB', access: 'emulate', reset: this.slice.size / (1 << 20), ro: RO },
      // MMU
      { addr: MMU_FLUSH_STATUS, name: 'MMU_FLUSH_STATUS', access: 'emulate', reset: MMU_FLUSH_STATUS_VALUE, ro: RO },
      { addr: MMU_FLUSH_PDB, name: 'MMU_FLUSH_PDB', access: 'emulate', reset: 0 },
      {
        addr: MMU_FLUSH_TRIGGER, name: 'MMU_FLUSH_TRIGGER', access: 'trap', reset: 0, ro: RO,
        postWrite: (_s, w) => this.flush(w),
      },
      { addr: MMU_FAULT_ADDR_LO, name: 'MMU_FAULT_ADDR_LO', access: 'emulate', reset: 0, ro: RO },
      { addr: MMU_FAULT_ADDR_HI, name: 'MMU_FAULT_ADDR_HI', access: 'emulate', reset: 0, ro: RO },
      { addr: MMU_FAULT_CHID, name: 'MMU_FAULT_CHID', access: 'emulate', reset: 0, ro: RO },
      { addr: MMU_FAULT_INFO, name: 'MMU_FAULT_INFO', access: 'emulate', reset: 0, ro: RO },
      { addr: MMU_FAULT_STATUS, name: 'MMU_FAULT_STATUS', access: 'emulate', reset: 0, ro: ~3, w1c: 3 },
      { addr: PGRAPH_STATUS, name: 'PGRAPH_STATUS', access: 'trap', reset: 0, ro: RO, postRead: () => (this.chans.busy() ? 1 : 0) },
      // PDIAG (docs/diag-block.md), resolved through the VM's DMA map and slice.
      { addr: DIAG_MAGIC, name: 'DIAG_MAGIC', access: 'pass', reset: 0, ro: RO },
      // PPROG (hw-spec §3.10): the device's program limits, the same for every VM.
      ...Object.values(PPROG).map((addr) => ({ addr, name: `PPROG_${addr.toString(16)}`, access: 'pass' as const, reset: 0, ro: RO })),
      { addr: DIAG_DMA_ADDR_LO, name: 'DIAG_DMA_ADDR_LO', access: 'emulate', reset: 0 },
      { addr: DIAG_DMA_ADDR_HI, name: 'DIAG_DMA_ADDR_HI', access: 'emulate', reset: 0 },
      { addr: DIAG_DMA_LEN, name: 'DIAG_DMA_LEN', access: 'emulate', reset: 0 },
      { addr: DIAG_DMA_VRAM_OFF, name: 'DIAG_DMA_VRAM_OFF', access: 'emulate', reset: 0 },
      { addr: DIAG_DMA_CTRL, name: 'DIAG_DMA_CTRL', access: 'trap', reset: 0, ro: RO, postWrite: (_s, w) => this.diagDma(w) },
      { addr: DIAG_DMA_STATUS, name: 'DIAG_DMA_STATUS', access: 'emulate', reset: 0, ro: RO },
      { addr: DIAG_DMA_ERROR, name: 'DIAG_DMA_ERROR', access: 'emulate', reset: 0, ro: RO },
      { addr: DIAG_DMA_FNV, name: 'DIAG_DMA_FNV', access: 'emulate', reset: 0, ro: RO },
      { addr: DIAG_VRAM_OFF, name: 'DIAG_VRAM_OFF', access: 'emulate', reset: 0 },
      {
        addr: DIAG_VRAM_PEEK, name: 'DIAG_VRAM_PEEK', access: 'trap', reset: 0, ro: RO,
        postRead: () => {
          const a = reg(DIAG_VRAM_OFF);
          return (a & 3) === 0 ? Number(this.sliceRead(a, 4)) : 0;
        },
      },
      {
        addr: DIAG_VRAM_POKE, name: 'DIAG_VRAM_POKE', access: 'trap', reset: 0, ro: RO,
        postWrite: (_s, w) => {
          const a = reg(DIAG_VRAM_OFF);
          if ((a & 3) === 0) this.sliceWrite(a, 4, w);
        },
      },
      {
        addr: DIAG_IRQ_FIRE, name: 'DIAG_IRQ_FIRE', access: 'trap', reset: 0, ro: RO,
        postWrite: (_s, w) => {
          if (w >= MSIX_VECTORS) return;
          this.view.regs.set(DIAG_IRQ_COUNT, (reg(DIAG_IRQ_COUNT) + 1) >>> 0);
          this.irq.raise(w);
        },
      },
      { addr: DIAG_IRQ_COUNT, name: 'DIAG_IRQ_COUNT', access: 'emulate', reset: 0, ro: RO },
    ];
    for (let i = 0; i < 8; i++) rows.push({ addr: DIAG_SCRATCH0 + 4 * i, name: `DIAG_SCRATCH${i}`, access: 'emulate', reset: 0 });
    for (let i = 0; i < 4; i++) {
      rows.push({ addr: PFIFO_FENCE_PENDING + 4 * i, name: `PFIFO_FENCE_PENDING${i}`, access: 'emulate', reset: 0, w1c: RO });
      rows.push({ addr: PFIFO_ERR_PENDING + 4 * i, name: `PFIFO_ERR_PENDING${i}`, access: 'emulate', reset: 0, w1c: RO });
    }
    for (let c = 0; c < this.vchannels; c++) {
      rows.push(
        {
          addr: PFIFO_CHAN_ERR + 8 * c, name: `PFIFO_CHAN_ERR${c}`, access: 'trap', reset: 0, ro: RO,
          postRead: () => this.chans.error(c, PFIFO_CHAN_ERR),
        },
        {
          addr: PFIFO_CHAN_ERR_INFO + 8 * c, name: `PFIFO_CHAN_ERR_INFO${c}`, access: 'trap', reset: 0, ro: RO,
          postRead: () => this.chans.error(c, PFIFO_CHAN_ERR_INFO),
        },
        {
          addr: PFIFO_CHAN_ERR_REASON + 4 * c, name: `PFIFO_CHAN_ERR_REASON${c}`, access: 'trap', reset: 0, ro: RO,
          postRead: () => this.chans.errorReason(c),
        },
        {
          addr: PFIFO_CHAN + 8 * c, name: `PFIFO_CHAN${c}`, access: 'trap', reset: 0, ro: 0x70000000,
          postWrite: (v) => this.chans.bind(c, v),
        },
        {
          addr: PFIFO_CHAN_STATE + 8 * c, name: `PFIFO_CHAN_STATE${c}`, access: 'trap', reset: 0, ro: ~STATE_ENABLE,
          postWrite: (v) => this.chans.setEnable(c, (v & STATE_ENABLE) !== 0),
          postRead: () => this.chans.state(c),
        },
      );
    }
    if (this.pv) rows.push(...this.pv.rows());
    return rows;
  }

  private ranges(): ViewRange[] {
    return [{
      start: PRAMIN_WINDOW, end: PRAMIN_WINDOW + PRAMIN_WINDOW_SIZE, name: 'PRAMIN', access: 'trap',
      // The window is relative to the slice: guest VRAM address (PRAMIN_BASE << 16) + x.
      read: (x, size) => this.sliceRead(this.view.regs.get(PRAMIN_BASE) * 0x10000 + x, size),
      write: (x, size, v) => this.sliceWrite(this.view.regs.get(PRAMIN_BASE) * 0x10000 + x, size, v),
    }];
  }

  // ---- channels (shadow-channels.ts) ----

  /** May the channel run when dispatched: bound, enabled by the guest, the VM's PFIFO on. */
  dispatchable(vchid: number): boolean {
    return this.chans.dispatchable(vchid);
  }

  /**
   * The dispatcher found vchid not dispatchable. Doorbells to a channel that cannot run are
   * remembered (hw-spec §3.4): held until the VM's PFIFO is enabled again. (A channel the guest
   * disabled is queued again when re-enabled; an unbound one needs a new doorbell anyway.)
   */
  notDispatched(vchid: number): void {
    const vc = this.s.channels[vchid];
    if (!vc || vc.pchid < 0 || this.s.pfifoEnabled || vc.queued) return;
    vc.queued = true;
    this.s.queue.push(vchid);
    this.s.held++;
  }

  /** The guest submitted its runlist: remember which virtual channels are on it. */
  private submitRunlist(entries: number): void {
    const base = this.view.regs.get(PFIFO_RUNLIST_BASE) * 4096;
    if (entries > this.vchannels || !(base + entries * 8 <= this.slice.size)) {
      this.log.warn({ vm: this.name, entries, base }, 'guest runlist rejected');
      this.irq.raiseFifo(PFIFO_INTR_RUNLIST_ERROR);
      return;
    }
    const list: number[] = [];
    for (let i = 0; i < entries; i++) {
      const v = this.engine.vram.read32(this.slice.base + base + 8 * i) & 0x7f;
      if (v < this.vchannels && !list.includes(v)) list.push(v);
    }
    this.s.runlist = list;
    for (const vc of this.s.channels) vc.onRunlist = false;
    for (const v of list) this.s.channels[v]!.onRunlist = true;
    this.host.runlistChanged();
    // A submit makes the device read GP_PUT of every listed channel: one submission each.
    for (const v of list) if (this.s.channels[v]!.pchid >= 0) this.queue(v);
  }

  /** Physical chids of this VM's channels on its runlist (for the merged runlist). */
  runlistPchids(out: number[]): void {
    for (const v of this.s.runlist) {
      const p = this.s.channels[v]!.pchid;
      if (p >= 0) out.push(p);
    }
  }

  // ---- doorbells and the scheduler ----

  private doorbell(vchid: number): void {
    this.counters.doorbells++;
    this.observer?.doorbell(vchid);
    const vc = this.s.channels[vchid];
    if (!vc || vc.pchid < 0) return; // the engine ignores doorbells to unbound channels too
    this.queue(vchid);
  }

  /** Queue a submission for vchid (one per channel at a time: a dispatch serves all entries). */
  private queue(vchid: number): void {
    const vc = this.s.channels[vchid]!;
    if (vc.queued) return;
    vc.queued = true;
    this.s.queue.push(vchid);
    if (this.s.pfifoEnabled) this.host.announce(this);
    else this.s.held++;
  }

  /** The scheduler picked this VM: its head submission (a virtual chid), or −1. */
  takeSubmission(): number {
    const vchid = this.s.queue.shift();
    if (vchid === undefined) return -1;
    this.s.channels[vchid]!.queued = false;
    return vchid;
  }

  /**
   * Bring vchid's shadow up to date if a trapped flush left it dirty (lazy shadowing). Called
   * when the device read the channel's GP_PUT and is about to translate for it (the engine's
   * `translating` event): a dispatch or runlist submit that finds work. The device reads GP_PUT
   * at the dispatch, not at the doorbell, so entries written after a flush whose doorbell is
   * still on its way see the flushed tables too.
   */
  syncChannel(vchid: number): void {
    const vc = this.s.channels[vchid];
    if (!vc || vc.space === null) return;
    const sp = this.mmu.spaces.get(vc.space);
    if (sp) this.mmu.sync(sp);
  }

  private setPfifoEnabled(on: boolean): void {
    if (on === this.s.pfifoEnabled) return;
    this.s.pfifoEnabled = on;
    for (const vc of this.s.channels) this.chans.applyEnable(vc);
    if (on) {
      for (; this.s.held > 0; this.s.held--) this.host.announce(this);
    }
  }

  // ---- MMU ----

  private flush(w: number): void {
    if ((w & MMU_FLUSH_GO) === 0) return;
    this.counters.tlbFlushes++;
    const pd = (w & MMU_FLUSH_ALL_PDB) !== 0 ? null : this.view.regs.get(MMU_FLUSH_PDB) * 256;
    this.observer?.tlbFlush(pd);
    this.mmu.flush(pd, this.traits.eagerShadow);
  }

  // ---- events from the engine, routed by physical chid (aggregator) ----

  /** A FENCE interrupt of virtual channel vchid. */
  fence(vchid: number): void {
    this.counters.fences++;
    this.view.regs.setBits(PFIFO_FENCE_PENDING + 4 * (vchid >> 5), 1 << (vchid & 31));
    this.irq.raiseFifo(PFIFO_INTR_FENCE);
  }

  /** Virtual channel vchid entered the error state (MMU faults: code 16, no CHAN_ERROR irq). */
  channelError(vchid: number, code: number): void {
    this.observer?.channelError(vchid, code);
    const vc = this.s.channels[vchid];
    if (vc) vc.enable = false;
    this.view.regs.setBits(PFIFO_ERR_PENDING + 4 * (vchid >> 5), 1 << (vchid & 31));
    if (code !== CHAN_ERR.MMU_FAULT) {
      this.counters.channelErrors++;
      this.irq.raiseFifo(PFIFO_INTR_CHAN_ERROR);
    }
  }

  /** An MMU fault of virtual channel vchid: the VM's own fault registers (first one wins until
   * the guest clears VALID), then its fault vector. */
  fault(f: FaultRecord, vchid: number): void {
    this.counters.faults++;
    this.observer?.fault(vchid, f.va, f.reason, f.write, f.unit);
    // A not-present fault may come from a mapping the guest made without a flush: resync the
    // shadow at the channel's next doorbell, so a retry after the rebind sees it.
    const vc = this.s.channels[vchid];
    if ((f.reason === FAULT.PDE_NOT_PRESENT || f.reason === FAULT.PTE_NOT_PRESENT) && vc && vc.space !== null) {
      const sp = this.mmu.spaces.get(vc.space);
      if (sp && !sp.pv) sp.dirty = true;
    }
    const regs = this.view.regs;
    const status = regs.get(MMU_FAULT_STATUS);
    if (status & MMU_FAULT_STATUS_VALID) {
      regs.set(MMU_FAULT_STATUS, status | MMU_FAULT_STATUS_OVERFLOW);
    } else {
      regs.set(MMU_FAULT_ADDR_LO, f.va % TWO32);
      regs.set(MMU_FAULT_ADDR_HI, Math.floor(f.va / TWO32));
      regs.set(MMU_FAULT_CHID, vchid);
      regs.set(MMU_FAULT_INFO, (f.reason & 0xff) | (f.write ? 1 << 8 : 0) | ((f.unit & 7) << 12));
      regs.set(MMU_FAULT_STATUS, status | MMU_FAULT_STATUS_VALID);
    }
    this.irq.raise(IRQ_MMU_FAULT);
  }

  // ---- PDIAG DMA, through the VM's DMA map and slice ----

  private diagDma(ctrl: number): void {
    const regs = this.view.regs;
    const fail = (errno: number) => {
      regs.set(DIAG_DMA_STATUS, 2);
      regs.set(DIAG_DMA_ERROR, errno);
    };
    const len = regs.get(DIAG_DMA_LEN);
    const off = regs.get(DIAG_DMA_VRAM_OFF);
    const gpa = regs.get(DIAG_DMA_ADDR_LO) + regs.get(DIAG_DMA_ADDR_HI) * TWO32;
    if ((ctrl !== 1 && ctrl !== 2) || len === 0 || len > DIAG_DMA_MAX || !(off + len <= this.slice.size)) return fail(EINVAL);
    const mem = this.guestMem;
    if (!mem) return fail(EFAULT);
    const view = this.engine.vram.u8.subarray(this.slice.base + off, this.slice.base + off + len);
    if (ctrl === 1) {
      // Staging copy: a failed read leaves VRAM untouched.
      const tmp = new Uint8Array(len);
      const f = mem.read(gpa, tmp);
      if (f) return fail(f.kind === 'unmapped' || f.kind === 'invalid' ? EFAULT : EIO);
      view.set(tmp);
    } else {
      const f = mem.write(gpa, view);
      if (f) return fail(f.kind === 'unmapped' || f.kind === 'invalid' ? EFAULT : EIO);
    }
    regs.set(DIAG_DMA_FNV, fnv1a(view));
    regs.set(DIAG_DMA_ERROR, 0);
    regs.set(DIAG_DMA_STATUS, 1);
  }

  // ---- lifecycle ----

  /**
   * Load the reset state: every channel unbound on the engine and its physical chid freed,
   * shadows and PV allocations dropped, registers at their reset values. The aggregator drops
   * the VM's queued submissions from the scheduler.
   */
  reset(): void {
    this.chans.reset();
    this.s.runlist = [];
    this.s.queue = [];
    this.s.held = 0;
    this.s.pfifoEnabled = true;
    this.s.timeHi = 0;
    this.mmu.reset();
    this.vramAlloc.reset();
    this.pv?.reset();
    this.view.reset();
    this.counters.vramInUseBytes = this.vramInUse;
    this.host.runlistChanged();
  }

  /**
   * Zero the slice (a new client must not see the previous one's data). In SCRUB_CHUNK steps,
   * one per event-loop turn: the server goes on serving the other VMs (zeroing a large slice at
   * once held every VM for tens of milliseconds: docs/architecture.md, "Threads"). Holes of the VRAM memfd are skipped (Vram.zero).
   * whenScrubbed() says when it is done; until then the VM's listener holds a new client
   * (DeviceCallbacks.whenReady). Called again while running, it starts over.
   */
  scrub(): void {
    this.s.scrubPending = true;
    this.scrubAt = 0;
    this.scrubT0 = performance.now();
    this.scrubTimer ??= setImmediate(this.scrubStep);
  }

  /** Run go once the slice is zeroed (at once when no scrub is pending). */
  whenScrubbed(go: () => void): void {
    if (this.s.scrubPending) this.scrubWaiters.push(go);
    else go();
  }

  /** Stop scrubbing without finishing (the VM is detached; its slice is zeroed on release). */
  cancelScrub(): void {
    if (this.scrubTimer) clearImmediate(this.scrubTimer);
    this.scrubTimer = null;
    this.scrubWaiters = [];
  }

  private scrubAt = 0;
  private scrubT0 = 0;
  private scrubTimer: NodeJS.Immediate | null = null;
  private scrubWaiters: (() => void)[] = [];
  private readonly scrubStep = (): void => {
    this.scrubTimer = null; // only the timer runs a step
    const end = Math.min(this.slice.size, this.scrubAt + SCRUB_CHUNK);
    this.engine.vram.zero(this.slice.base + this.scrubAt, end - this.scrubAt);
    this.scrubAt = end;
    if (end < this.slice.size) {
      this.scrubTimer = setImmediate(this.scrubStep);
      return;
    }
    this.s.scrubPending = false;
    this.log.info({ sliceMiB: this.slice.size / (1 << 20), ms: Math.round(performance.now() - this.scrubT0) }, 'slice scrubbed');
    const waiters = this.scrubWaiters;
    this.scrubWaiters = [];
    for (const go of waiters) go();
  };

  /** Bytes of VRAM the VM uses: in PV modes its MEM_ALLOC allocations (the host allocator
   * accounts exactly), otherwise its whole slice. */
  get vramInUse(): number {
    return this.traits.pv ? this.vramAlloc.inUse : this.slice.size;
  }

  /** A plain snapshot for logs, tests and metrics. */
  snapshot(): { name: string; mode: MediatedMode; index: number; slice: Slice; state: VgpuState; counters: VgpuCounters; registers: Record<string, number> } {
    return {
      name: this.name, mode: this.mode, index: this.index, slice: { ...this.slice },
      state: structuredClone(this.s), counters: { ...this.counters }, registers: this.view.snapshot(),
    };
  }

  /** Ranges of the VM's DMA map (for tests and diagnostics). */
  guestRanges(): GuestRanges {
    return new GuestRanges(this.guestMem?.describe() ?? []);
  }

  // ---- surviving a restart (how: ./persist.ts; the aggregator's section carries it) ----

  save(): SavedVgpu {
    return saveVgpu(this);
  }

  /** Into the vGPU a restarted server attached for it (same name, mode, slice, channels). */
  restore(raw: unknown): void {
    restoreVgpu(this, raw);
  }
}
