// The aggregator (GPUvm's A3): many VMs sharing one engine. It owns what is physical and shared
// — VRAM partitioning (a host-reserved area + one slice per VM), the physical channel pool and
// shadow instance blocks, the merged runlist, the bus resolver for every VM's system memory,
// engine event routing and the scheduler — and hands each VM a Vgpu that mediates its BAR0.
//
// Scheduling: a guest doorbell is queued on its VM (vgpu.ts) and announced to the policy
// (scheduler/); the dispatcher picks a VM whenever the device is idle and this file lets that
// channel run: physically, channels are enabled only while their submission is dispatched, so
// nothing reaches the engine behind the scheduler's back (a merged-runlist resubmit makes the
// engine re-read every listed channel's GP_PUT). The submission completes with the engine's
// channel-idle event for that channel (its device ns are charged to the VM), or earlier when
// the channel cannot make progress (error, not runnable, or blocked on a semaphore acquire —
// such a channel stays enabled so that it continues when the semaphore is released). A timer
// with back-off only re-checks a long-running submission; nothing busy-polls.
import { logger, withWarnBudget, type Logger } from '../log.ts';
import type { Engine } from '../gpu/engine.ts';
import type { FaultRecord } from '../gpu/mmu.ts';
import {
  DOORBELL, INST_SIZE, MMU_FAULT_STATUS, PFIFO_CHAN_COUNT, PFIFO_CHAN_STATE, PFIFO_RUNLIST_BASE,
  PFIFO_RUNLIST_SUBMIT, PMC_ENABLE, PMC_ENABLE_PFIFO, STATE_ACQUIRE_WAIT, STATE_BUSY,
  STATE_ENABLE, STATE_ERROR, STATE_PROGRAM_WAIT,
} from '../gpu/spec.ts';
import { Dispatcher, createPolicy, type SchedulerPolicy } from './scheduler/index.ts';
import { RangeAllocator, isPow2 } from './alloc.ts';
import { MAX_BUS_VMS, MediatedBus, type GuestMemory } from './guest-memory.ts';
import { MODES, type MediatedMode } from './modes.ts';
import { newCounters } from './counters.ts';
import type { MetricsRegistry } from './metrics.ts';
import { Vgpu, type VgpuHost } from './vgpu.ts';
import type { Persist } from '../state/persist.ts';
import { restoreAggregator, resumeAggregator, saveAggregator, type AggregatorState } from './persist.ts';

const MIB = 1 << 20;

export interface AggregatorOptions {
  engine: Engine;
  /** Host-reserved VRAM at the bottom of the engine's VRAM (default: 1/16, at least 16 MiB). */
  hostReserved?: number;
  /** Scheduling policy by name (scheduler/registry.ts): fifo, credit, band, weighted. */
  policy?: string;
  policyConfig?: object;
  /** First re-check of a running submission, ms (doubles up to 100 ms). */
  stallCheckMs?: number;
  /** A submission still running after this long gives the device back and goes on beside the
   * others, on its VM's own way onto the device (default 50 ms, or the engine's timeslice where it
   * switches contexts itself; 0 = never). */
  releaseAfterMs?: number;
  /** How long a detached VM's slice stays quarantined before reuse, ms (cancelled jobs may
   * still be writing to it until they notice the cancel). */
  quarantineMs?: number;
  /** Per-VM counters are registered here (and exported by its server). */
  metrics?: MetricsRegistry;
  log?: Logger;
  /** Restart: the engine and VRAM carry a checkpointed aggregator's state (persist.ts loads
   * it next), so the constructor leaves engine registers and host VRAM alone. */
  adopt?: boolean;
}

export interface AttachOptions {
  name: string;
  mode: MediatedMode;
  /** VRAM slice bytes: a power of two, at least 1 MiB. */
  slice: number;
  /** Scheduler weight (> 0), default 1. */
  weight?: number;
  /** Virtual channels (PFIFO_CHAN_COUNT the guest sees); default: the engine's count. */
  channels?: number;
  /** Restart: the VM's bus index and slice base from a checkpoint (nothing is allocated or
   * scrubbed; persist.ts restores the allocators and checks them). */
  at?: { index: number; base: number };
}

/** Optional observer of scheduling events (bench/fairness.ts): times are `now()` ns. */
export interface DeviceObserver {
  /** A doorbell (or other submission) was announced to the scheduler. */
  doorbell?(vm: string, atNs: number): void;
  /** A dispatched submission ended: on the device from startNs to endNs, charged deviceNs. */
  submission?(vm: string, startNs: number, endNs: number, deviceNs: number): void;
}

/** The submission on the device. */
export interface Submission {
  vm: Vgpu | null;
  vmId: string;
  pchid: number;
  startNs: number;
  done: boolean;
  timer: NodeJS.Timeout | null;
  checkMs: number;
}

export class Aggregator implements VgpuHost, Persist<AggregatorState> {
  readonly engine: Engine;
  readonly hostArea: RangeAllocator;
  readonly slices: RangeAllocator;
  readonly bus = new MediatedBus();
  readonly dispatcher: Dispatcher<NodeJS.Timeout>;
  readonly log: Logger;
  readonly channels: number;
  // State (saved by persist.ts): plain fields, not private.
  readonly vms = new Map<string, Vgpu>();
  readonly byIndex: (Vgpu | null)[] = [];
  /** Physical chid → owning VM and its virtual chid. */
  readonly owner: (Vgpu | null)[];
  readonly ownerVchid: Int16Array;
  /** Physical channels each VM holds. */
  readonly held = new Map<Vgpu, number>();
  readonly shadowInst: number[];
  readonly runlistPages: [number, number];
  runlistFlip = 0;
  lastRunlist = '';
  readonly onRunlist: Uint8Array;
  /** Physical STATE.ENABLE as this file set it (the dispatcher's gate). */
  readonly open: Uint8Array;
  running: Submission | null = null;
  /** Completions handed to the scheduler on the next microtask (see finish()). */
  readonly completions: { vmId: string; deviceNs: number }[] = [];
  private readonly stallCheckMs: number;
  private readonly releaseAfterNs: number;
  private readonly quarantineMs: number;
  private readonly metrics: MetricsRegistry | null;
  /** Scheduler clock origin (hrtime ns); a restart keeps it so that policy times continue. */
  t0 = process.hrtime.bigint();
  private closed = false;
  /** Set by whoever wants per-submission timing (off the hot path when null). */
  observer: DeviceObserver | null = null;

  constructor(opts: AggregatorOptions) {
    const engine = opts.engine;
    this.engine = engine;
    this.log = opts.log ?? logger.child({ part: 'aggregator' });
    this.stallCheckMs = opts.stallCheckMs ?? 10;
    // Where the engine switches between all VMs itself (a GPU, gpu/ctxsw.ts), a released
    // submission's jobs still wait there for the device, so the release may come as early as a
    // program's timeslice: the next VM's job then reaches the context switch, which cuts the
    // program, within it.
    const ctxsw = opts.engine.cp.ctxsw;
    this.releaseAfterNs = (opts.releaseAfterMs ?? (ctxsw?.wholeDevice ? Math.min(ctxsw.timesliceMs, 50) : 50)) * 1e6;
    this.quarantineMs = opts.quarantineMs ?? 250;
    this.metrics = opts.metrics ?? null;
    const vram = engine.vramSize;
    const reserved = opts.hostReserved ?? Math.max(16 * MIB, Math.floor(vram / 16 / MIB) * MIB);
    if (reserved % MIB !== 0 || reserved <= 0 || reserved >= vram) {
      throw new RangeError(`host-reserved VRAM must be a multiple of 1 MiB below the VRAM size, got ${reserved}`);
    }
    this.hostArea = new RangeAllocator(0, reserved, 4096);
    this.slices = new RangeAllocator(reserved, vram - reserved, MIB);
    this.channels = engine.mmioRead(PFIFO_CHAN_COUNT, 4);
    this.owner = new Array<Vgpu | null>(this.channels).fill(null);
    this.ownerVchid = new Int16Array(this.channels).fill(-1);
    this.onRunlist = new Uint8Array(this.channels);
    this.open = new Uint8Array(this.channels);
    if (!opts.adopt) for (let c = 0; c < this.channels; c++) engine.mmioWrite(PFIFO_CHAN_STATE + 8 * c, 4, 0);
    // Fixed host structures: one shadow instance block per physical channel, two runlist pages.
    this.shadowInst = [];
    const zero = !opts.adopt;
    for (let c = 0; c < this.channels; c++) this.shadowInst.push(this.hostAlloc(INST_SIZE, zero));
    this.runlistPages = [this.hostAlloc(4096, zero), this.hostAlloc(4096, zero)];

    engine.bus = this.bus;
    engine.onInterrupt = () => {}; // physical vectors are not used: events carry the chid
    engine.listener = {
      channelIdle: (chid, busyNs) => this.onIdle(chid, busyNs),
      fence: (chid) => {
        const vm = this.owner[chid];
        if (vm) vm.fence(this.ownerVchid[chid]!);
      },
      channelError: (chid, code) => {
        this.open[chid] = 0; // the engine cleared ENABLE
        const vm = this.owner[chid];
        if (vm) vm.channelError(this.ownerVchid[chid]!, code);
        if (this.running && this.running.pchid === chid) this.finish(this.running, 0);
      },
      fault: (f) => this.onFault(f),
      // Lazy shadowing: a VM's shadow is rebuilt when the device is about to translate through
      // it for new work, not at every doorbell or runlist submit that finds nothing to fetch.
      translating: (chid) => this.owner[chid]?.syncChannel(this.ownerVchid[chid]!),
      // A program compiling: like an acquire wait, the submission leaves the device but the
      // channel stays open and continues by itself once the compile is done.
      channelWaiting: (chid) => {
        if (this.running && this.running.pchid === chid) this.finish(this.running, 0, true);
      },
    };

    const policy: SchedulerPolicy = createPolicy(opts.policy ?? 'fifo', opts.policyConfig ?? {});
    this.dispatcher = new Dispatcher<NodeJS.Timeout>(policy, {
      now: () => this.now(),
      submit: (vm) => this.submit(vm),
      setTimer: (at, cb) => {
        const t = setTimeout(cb, Math.max(0, (at - this.now()) / 1e6));
        return t;
      },
      cancelTimer: (t) => clearTimeout(t),
    });
    this.log.info(
      { vramMiB: vram / MIB, hostReservedMiB: reserved / MIB, channels: this.channels, policy: policy.name },
      'aggregator ready',
    );
  }

  /** Scheduler clock: ns since the aggregator started. */
  now(): number {
    return Number(process.hrtime.bigint() - this.t0);
  }

  get policy(): SchedulerPolicy {
    return this.dispatcher.policy;
  }

  vm(name: string): Vgpu | undefined {
    return this.vms.get(name);
  }

  list(): Vgpu[] {
    return [...this.vms.values()];
  }

  // ---- VM lifecycle ----

  /** Create a VM's vGPU: a bus index, a zeroed VRAM slice (free slices are zero), a scheduler entry. */
  attach(o: AttachOptions): Vgpu {
    if (this.closed) throw new Error('aggregator is closed');
    if (this.vms.has(o.name)) throw new Error(`VM ${o.name} is already attached`);
    if (!Object.hasOwn(MODES, o.mode)) throw new Error(`mode ${o.mode} is not a mediated mode`);
    if (!isPow2(o.slice) || o.slice < MIB) throw new RangeError(`VM ${o.name}: slice must be a power of two ≥ 1 MiB, got ${o.slice}`);
    const channels = o.channels ?? this.channels;
    if (!Number.isInteger(channels) || channels < 1 || channels > this.channels) {
      throw new RangeError(`VM ${o.name}: channels must be 1–${this.channels}`);
    }
    let index = o.at ? o.at.index : this.byIndex.indexOf(null);
    if (index < 0) index = this.byIndex.length;
    if (index >= MAX_BUS_VMS || (o.at && this.byIndex[index])) throw new Error(o.at ? `VM ${o.name}: bus index ${index} is taken` : 'too many VMs');
    const base = o.at ? o.at.base : this.slices.alloc(o.slice, MIB);
    if (base === null) {
      throw new Error(`VM ${o.name}: no room for a ${o.slice / MIB} MiB VRAM slice (largest free: ${this.slices.largestFree / MIB} MiB)`);
    }
    const vm = new Vgpu(this, {
      name: o.name, mode: o.mode, index, slice: { base, size: o.slice }, channels,
      weight: o.weight ?? 1, log: withWarnBudget(this.log.child({ vm: o.name })), // a guest decides how often its vGPU warns
      counters: newCounters(this.metrics?.register(o.name, o.mode)),
    });
    // No scrub here: a free slice is zero (the VRAM memfd starts zeroed, detach zeroes a slice
    // before it is freed, a restart zeroes the slices no VM owns), and zeroing a fresh slice
    // would only fault in its memory.
    this.policy.addVm(o.name, { weight: vm.weight }, this.now());
    this.byIndex[index] = vm;
    this.vms.set(o.name, vm);
    this.log.info({ vm: o.name, mode: o.mode, index, sliceMiB: o.slice / MIB, sliceBase: base, weight: vm.weight }, 'vgpu attached');
    // Its way onto the device is opened now, not in the middle of its neighbours' work.
    this.engine.prepareOwner(vm.index + 1);
    return vm;
  }

  /** The VM's system memory and interrupt sink (its client connected). */
  connect(vm: Vgpu, mem: GuestMemory, msix: (vector: number) => void): void {
    vm.connect(mem, msix);
    this.bus.attach(vm.index, mem);
  }

  /**
   * Reset a VM (guest reset, client gone): its channels stop and go back to the pool, its
   * shadows and queued submissions are dropped. With scrub, its slice is zeroed too (a new
   * client must not see the old one's data).
   */
  resetVm(vm: Vgpu, scrub = false): void {
    if (this.vms.get(vm.name) !== vm) return;
    vm.reset();
    if (this.running?.vm === vm) this.finish(this.running, 0);
    this.engine.dropOwner(vm.index + 1);
    const now = this.now();
    this.policy.removeVm(vm.name, now);
    this.policy.addVm(vm.name, { weight: vm.weight }, now);
    if (scrub) vm.scrub();
    this.log.info({ vm: vm.name, scrub }, 'vgpu reset');
  }

  /** Remove a VM: everything resetVm does, then its slice and bus index are released. */
  detach(vm: Vgpu): void {
    if (this.vms.get(vm.name) !== vm) return;
    vm.cancelScrub(); // the release below zeroes the whole slice
    vm.reset();
    if (this.running?.vm === vm) this.finish(this.running, 0);
    this.engine.dropOwner(vm.index + 1);
    this.policy.removeVm(vm.name, this.now());
    this.bus.detach(vm.index);
    this.metrics?.unregister(vm.name);
    this.byIndex[vm.index] = null;
    this.vms.delete(vm.name);
    this.held.delete(vm);
    // Cancelled jobs may still write into the slice until they notice: quarantine it.
    const base = vm.slice.base;
    const release = () => {
      this.engine.vram.zero(base, vm.slice.size);
      this.slices.free(base);
    };
    if (this.quarantineMs > 0 && !this.closed) setTimeout(release, this.quarantineMs).unref();
    else release();
    this.log.info({ vm: vm.name }, 'vgpu detached');
  }

  setWeight(vm: Vgpu, weight: number): void {
    this.policy.setWeight(vm.name, weight, this.now());
    vm.weight = weight;
  }

  close(): void {
    this.closed = true;
    for (const vm of [...this.vms.values()]) this.detach(vm);
    this.dispatcher.close();
    if (this.running) this.finish(this.running, 0);
  }

  // ---- surviving a restart (how: ./persist.ts) ----

  /** The aggregator's section, every vGPU's inside it. */
  save(): AggregatorState {
    return saveAggregator(this);
  }

  /** Into an aggregator constructed to adopt, its VMs attached again at their saved places. */
  restore(raw: unknown): void {
    restoreAggregator(this, raw);
  }

  /** After the engine resumed: saved completions, the stall check, the dispatcher. */
  resume(): void {
    resumeAggregator(this);
  }

  // ---- VgpuHost: physical resources ----

  /**
   * A physical channel for (vm, vchid), or −1. The pool is shared but no VM can starve another:
   * each attached VM is guaranteed min(its virtual channels, ⌊channels / VMs⌋) physical
   * channels, and beyond its guarantee a VM takes a free channel only while enough stay free
   * for the other VMs' unused guarantees. A guest that binds every channel it has gets refused
   * binds on its own channels (hw-spec §10: a VM may only hurt itself). Work-conserving: a VM
   * alone gets the whole pool.
   */
  allocChid(vm: Vgpu, vchid: number): number {
    const p = this.owner.indexOf(null);
    if (p < 0) return -1;
    const held = this.held.get(vm) ?? 0;
    if (held >= this.guarantee(vm)) {
      let free = 0;
      for (const o of this.owner) if (!o) free++;
      let reserved = 0;
      for (const other of this.vms.values()) {
        if (other !== vm) reserved += Math.max(0, this.guarantee(other) - (this.held.get(other) ?? 0));
      }
      if (free - 1 < reserved) return -1;
    }
    this.owner[p] = vm;
    this.ownerVchid[p] = vchid;
    this.held.set(vm, held + 1);
    // Programs compiled on this channel belong to this VM's cache (never shared between VMs).
    this.engine.setChannelOwner(p, vm.index + 1);
    return p;
  }

  freeChid(pchid: number): void {
    const vm = this.owner[pchid];
    if (vm) this.held.set(vm, Math.max(0, (this.held.get(vm) ?? 0) - 1));
    this.owner[pchid] = null;
    this.ownerVchid[pchid] = -1;
  }

  /** Physical channels a VM can always get (its fair share of the pool). */
  private guarantee(vm: Vgpu): number {
    return Math.min(vm.vchannels, Math.floor(this.channels / Math.max(1, this.vms.size)));
  }

  /** Physical chids in use. */
  get chidsInUse(): number {
    let n = 0;
    for (const o of this.owner) if (o) n++;
    return n;
  }

  shadowInstance(pchid: number): number {
    return this.shadowInst[pchid]!;
  }

  /** Rebuild the merged runlist of all VMs and submit it if it changed. */
  runlistChanged(): void {
    const ids: number[] = [];
    for (const vm of this.vms.values()) vm.runlistPchids(ids);
    ids.sort((a, b) => a - b);
    const key = ids.join(',');
    if (key === this.lastRunlist) return;
    this.lastRunlist = key;
    this.onRunlist.fill(0);
    for (const c of ids) this.onRunlist[c] = 1;
    // Double-buffered: the page being replaced is never rewritten under the engine.
    this.runlistFlip ^= 1;
    const page = this.runlistPages[this.runlistFlip]!;
    const vram = this.engine.vram;
    ids.forEach((c, i) => {
      vram.write32(page + 8 * i, c);
      vram.write32(page + 8 * i + 4, 4);
    });
    // A submit makes every open listed channel re-read GP_PUT: the engine's `translating`
    // event syncs the shadows of those that find work.
    this.engine.mmioWrite(PFIFO_RUNLIST_BASE, 4, page / 4096);
    this.engine.mmioWrite(PFIFO_RUNLIST_SUBMIT, 4, ids.length);
  }

  announce(vm: Vgpu): void {
    this.observer?.doorbell?.(vm.name, this.now());
    this.dispatcher.doorbell(vm.name);
  }

  closeChannel(pchid: number): void {
    if (!this.open[pchid]) return;
    this.open[pchid] = 0;
    this.engine.mmioWrite(PFIFO_CHAN_STATE + 8 * pchid, 4, 0);
  }

  // ---- dispatch ----

  private submit(vmId: string): void {
    const vm = this.vms.get(vmId) ?? null;
    const vchid = vm ? vm.takeSubmission() : -1;
    const pchid = vm && vchid >= 0 ? vm.s.channels[vchid]!.pchid : -1;
    const sub: Submission = { vm, vmId, pchid, startNs: this.now(), done: false, timer: null, checkMs: this.stallCheckMs };
    this.running = sub;
    if (!vm || pchid < 0 || !vm.dispatchable(vchid) || !this.runnable(pchid)) {
      if (vm && vchid >= 0) vm.notDispatched(vchid);
      this.finish(sub, 0);
      return;
    }
    vm.counters.dispatches++;
    // Open the gate (ENABLE 0→1 makes the engine read GP_PUT) and ring: the engine may run the
    // whole submission, and report idle, inside these writes.
    if (!this.open[pchid]) {
      this.open[pchid] = 1;
      this.engine.mmioWrite(PFIFO_CHAN_STATE + 8 * pchid, 4, STATE_ENABLE);
    }
    if (!sub.done) this.engine.mmioWrite(DOORBELL, 4, pchid);
    if (!sub.done) this.check(sub);
  }

  /** Able to fetch once opened: no error, on the merged runlist, the engine's PFIFO on. */
  private runnable(pchid: number): boolean {
    if (!this.onRunlist[pchid]) return false;
    if ((this.engine.mmioRead(PMC_ENABLE, 4) & PMC_ENABLE_PFIFO) === 0) return false;
    return (this.engine.mmioRead(PFIFO_CHAN_STATE + 8 * pchid, 4) & STATE_ERROR) === 0;
  }

  /** Finish a submission that cannot make progress now; else look again later. */
  check(sub: Submission): void {
    if (sub.done) return;
    const st = this.engine.mmioRead(PFIFO_CHAN_STATE + 8 * sub.pchid, 4);
    if ((st & (STATE_ACQUIRE_WAIT | STATE_PROGRAM_WAIT)) !== 0 && this.owner[sub.pchid] === sub.vm) {
      // Blocked on a semaphore or a program compile: release the device but leave the channel
      // enabled, so that it continues (outside the scheduler) when the wait is over. A channel
      // dispatched again while its compile runs (a second doorbell) gets no channelWaiting
      // event: without this it held the device until the compile, on the nice-19 lane, was done.
      this.finish(sub, 0, true);
      return;
    }
    if ((st & STATE_BUSY) === 0 || (st & STATE_ENABLE) === 0 || !this.runnable(sub.pchid) || this.owner[sub.pchid] !== sub.vm) {
      this.finish(sub, 0);
      return;
    }
    const ranNs = this.now() - sub.startNs;
    if (this.releaseAfterNs > 0 && ranNs >= this.releaseAfterNs) {
      // A job that may never end (a guest's endless program, until the watchdog) must not hold
      // every other VM off the device: past its slice the submission is charged what it held,
      // and its channel goes on outside the scheduler, on its VM's own way onto the device (each
      // VM its own pool threads and Vulkan device), beside the next VM's submission — as a GPU
      // time-slices between contexts. Closed again when it goes idle (onIdle).
      this.finish(sub, 0, true);
      return;
    }
    sub.timer = setTimeout(() => {
      sub.timer = null;
      this.check(sub);
    }, sub.checkMs);
    sub.timer.unref();
    const leftMs = this.releaseAfterNs > 0 ? Math.max(1, (this.releaseAfterNs - ranNs) / 1e6) : 100;
    sub.checkMs = Math.min(sub.checkMs * 2, 100, leftMs);
  }

  finish(sub: Submission, deviceNs: number, keepOpen = false): void {
    if (sub.done) return;
    sub.done = true;
    if (sub.timer) clearTimeout(sub.timer);
    sub.timer = null;
    if (this.running === sub) this.running = null;
    this.observer?.submission?.(sub.vmId, sub.startNs, this.now(), deviceNs);
    if (!keepOpen && sub.pchid >= 0 && this.owner[sub.pchid] === sub.vm) this.closeChannel(sub.pchid);
    // Deferred: completions often arrive inside the engine's own processing, and the next
    // dispatch must not write a doorbell from within it. Queued as data, so that a checkpoint
    // taken before the microtask runs still carries it.
    this.completions.push({ vmId: sub.vmId, deviceNs });
    queueMicrotask(this.completeNext);
  }

  /** Hand the oldest queued completion to the scheduler (one per microtask, in order). */
  readonly completeNext = (): void => {
    const c = this.completions.shift();
    if (!c) return;
    try {
      this.dispatcher.complete(c.vmId, c.deviceNs);
    } catch (err) {
      this.log.error({ err, vm: c.vmId }, 'scheduler completion failed');
    }
  };

  // ---- engine events ----

  private onIdle(chid: number, busyNs: number): void {
    const vm = this.owner[chid];
    if (vm) vm.counters.deviceNs += busyNs;
    const sub = this.running;
    if (sub && sub.pchid === chid) this.finish(sub, busyNs);
    // A channel left enabled while blocked on an acquire has finished: close it again.
    else this.closeChannel(chid);
  }

  private onFault(f: FaultRecord): void {
    // Keep the physical fault registers free: every fault is reported through the listener.
    this.engine.mmioWrite(MMU_FAULT_STATUS, 4, 3);
    const vm = this.owner[f.chid];
    if (vm) vm.fault(f, this.ownerVchid[f.chid]!);
  }

  private hostAlloc(size: number, zero: boolean): number {
    const a = this.hostArea.alloc(size, 4096);
    if (a === null) throw new Error('host-reserved VRAM too small for the fixed host structures');
    if (zero) this.engine.vram.u8.fill(0, a, a + size);
    return a;
  }
}
