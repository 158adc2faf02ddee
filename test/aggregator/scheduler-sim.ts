// A deterministic discrete-event simulation of the non-preemptive device for scheduler tests:
// a virtual clock, guests that ring doorbells, and a device that runs one submission at a time
// for a given number of ns. It drives the real Dispatcher and policies; nothing sleeps.
import { Dispatcher } from '../../src/aggregator/scheduler/dispatcher.ts';
import type { SchedulerPolicy, VmId } from '../../src/aggregator/scheduler/types.ts';
import { rng } from '../prng.ts';

interface Event {
  at: number;
  seq: number;
  fn: () => void;
  cancelled: boolean;
}

/** Binary min-heap of events ordered by (at, seq): equal times run in scheduling order. */
class EventQueue {
  private heap: Event[] = [];
  private seq = 0;

  push(at: number, fn: () => void): Event {
    const e: Event = { at, seq: this.seq++, fn, cancelled: false };
    const h = this.heap;
    h.push(e);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.less(h[i]!, h[p]!)) break;
      [h[i], h[p]] = [h[p]!, h[i]!];
      i = p;
    }
    return e;
  }

  pop(): Event | undefined {
    const h = this.heap;
    if (h.length === 0) return undefined;
    const top = h[0]!;
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && this.less(h[l]!, h[m]!)) m = l;
        if (r < h.length && this.less(h[r]!, h[m]!)) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m]!, h[i]!];
        i = m;
      }
    }
    return top;
  }

  get size(): number {
    return this.heap.length;
  }

  private less(a: Event, b: Event): boolean {
    return a.at < b.at || (a.at === b.at && a.seq < b.seq);
  }
}

/** A guest workload: a closed loop of kernels (depth outstanding at most). */
export interface Workload {
  /** Device ns per submission (a function of the submission index for variable kernels). */
  kernelNs: number | ((i: number) => number);
  /**
   * What the engine reports as the submission's device ns (default: kernelNs). A tiny launch
   * holds the device from dispatch to completion far longer than the engine's own job runs
   * (the hand-off to the pool, the completion's way back), so it reports much less.
   */
  reportedNs?: number;
  /** Guest time between a completion and its next doorbell (the trap path), ns; a function of the gap index for variable gaps. */
  thinkNs: number | ((i: number) => number);
  /**
   * The guest driver's interrupt request (depth 1 only): this long after a kernel's doorbell,
   * if the kernel has not completed, the guest rings again with a zero-length submission and
   * sleeps; it wakes (and starts its gap) only when that request has been dispatched, as
   * vgSynchronize does.
   */
  irqRequestAfterNs?: number;
  /** Submissions the guest keeps outstanding (1 = submit, wait, submit…). */
  depth?: number;
  startNs?: number;
  /** The guest stops ringing doorbells after this time. */
  stopNs?: number;
}

export interface Interval {
  vm: VmId;
  start: number;
  end: number;
}

export class Simulation {
  now = 0;
  readonly dispatcher: Dispatcher<Event>;
  readonly intervals: Interval[] = [];
  /** Doorbell-to-dispatch delays per VM, ns. */
  readonly waits = new Map<VmId, number[]>();
  private readonly events = new EventQueue();
  private readonly workloads = new Map<VmId, Workload>();
  private readonly submitted = new Map<VmId, number>();
  /** Per VM, its channel's queue: doorbell time and whether it is an interrupt request. */
  private readonly queued = new Map<VmId, { rang: number; irq: boolean }[]>();
  private readonly gaps = new Map<VmId, number>();
  /** Per VM: the kernel on the device is done / an interrupt request is outstanding. */
  private readonly kernelDone = new Map<VmId, boolean>();
  private readonly irqOutstanding = new Map<VmId, boolean>();
  private deviceBusy = false;

  readonly policy: SchedulerPolicy;

  constructor(policy: SchedulerPolicy) {
    this.policy = policy;
    this.dispatcher = new Dispatcher<Event>(policy, {
      now: () => this.now,
      submit: (vm) => this.runOnDevice(vm),
      setTimer: (at, cb) => this.events.push(Math.max(at, this.now), cb),
      cancelTimer: (e) => {
        e.cancelled = true;
      },
    });
  }

  addVm(vm: VmId, weight: number, workload: Workload): void {
    this.policy.addVm(vm, { weight }, this.now);
    this.workloads.set(vm, workload);
    this.submitted.set(vm, 0);
    this.queued.set(vm, []);
    this.waits.set(vm, []);
    this.gaps.set(vm, 0);
    if (workload.irqRequestAfterNs !== undefined && (workload.depth ?? 1) !== 1) {
      throw new Error('simulation: irqRequestAfterNs needs depth 1');
    }
    const depth = workload.depth ?? 1;
    for (let i = 0; i < depth; i++) this.at(workload.startNs ?? 0, () => this.doorbell(vm));
  }

  /** Schedule an arbitrary action (e.g. a one-off doorbell) at time at. */
  at(at: number, fn: () => void): void {
    this.events.push(at, fn);
  }

  /** Change when a guest stops ringing (e.g. resume a stopped guest). */
  setStop(vm: VmId, stopNs: number | undefined): void {
    this.workloads.get(vm)!.stopNs = stopNs;
  }

  doorbell(vm: VmId): void {
    const w = this.workloads.get(vm)!;
    if (w.stopNs !== undefined && this.now >= w.stopNs) return;
    this.queued.get(vm)!.push({ rang: this.now, irq: false });
    if (w.irqRequestAfterNs !== undefined) {
      this.kernelDone.set(vm, false);
      this.at(this.now + w.irqRequestAfterNs, () => {
        if (this.kernelDone.get(vm)) return; // the fence passed: no interrupt needed
        this.irqOutstanding.set(vm, true);
        this.queued.get(vm)!.push({ rang: this.now, irq: true });
        this.dispatcher.doorbell(vm);
      });
    }
    this.dispatcher.doorbell(vm);
  }

  /** The guest wakes and, after its gap, rings for the next kernel. */
  private think(vm: VmId): void {
    const w = this.workloads.get(vm)!;
    const k = this.gaps.get(vm)!;
    this.gaps.set(vm, k + 1);
    const gap = typeof w.thinkNs === 'function' ? w.thinkNs(k) : w.thinkNs;
    this.events.push(this.now + gap, () => this.doorbell(vm));
  }

  run(untilNs: number): void {
    for (;;) {
      const e = this.events.pop();
      if (e === undefined) break;
      if (e.at > untilNs) {
        this.events.push(e.at, e.fn);
        break;
      }
      if (e.cancelled) continue;
      this.now = e.at;
      e.fn();
    }
    this.now = untilNs;
  }

  private runOnDevice(vm: VmId): void {
    if (this.deviceBusy) throw new Error('simulation: dispatcher submitted while the device was busy');
    this.deviceBusy = true;
    const w = this.workloads.get(vm)!;
    const head = this.queued.get(vm)!.shift()!;
    if (head.irq) {
      // A zero-length submission: done at once; the interrupt wakes the guest.
      this.irqRequests++;
      this.events.push(this.now, () => {
        this.deviceBusy = false;
        this.dispatcher.complete(vm, 0);
        this.irqOutstanding.set(vm, false);
        this.think(vm);
      });
      return;
    }
    const i = this.submitted.get(vm)!;
    this.submitted.set(vm, i + 1);
    const ns = typeof w.kernelNs === 'function' ? w.kernelNs(i) : w.kernelNs;
    this.waits.get(vm)!.push(this.now - head.rang);
    const start = this.now;
    this.events.push(this.now + ns, () => {
      this.deviceBusy = false;
      this.intervals.push({ vm, start, end: this.now });
      this.kernelDone.set(vm, true);
      this.dispatcher.complete(vm, w.reportedNs ?? ns);
      if (!this.irqOutstanding.get(vm)) this.think(vm);
    });
  }

  /** Zero-length interrupt-request submissions dispatched so far. */
  irqRequests = 0;

  /** Device ns vm used in [t0, t1) (intervals split at the bounds). */
  deviceTime(vm: VmId, t0: number, t1: number): number {
    let sum = 0;
    for (const iv of this.intervals) {
      if (iv.vm !== vm) continue;
      const a = Math.max(iv.start, t0);
      const b = Math.min(iv.end, t1);
      if (b > a) sum += b - a;
    }
    return sum;
  }
}

/** AvA's unfairness of two VMs in a window: |t1 − t2| / (t1 + t2) (0 = equal, 1 = one VM only). */
export function unfairness(t1: number, t2: number): number {
  return t1 + t2 > 0 ? Math.abs(t1 - t2) / (t1 + t2) : 0;
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

export function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
}

/**
 * Doorbell gaps like a TCG guest's (bench/results/fairness.json, BAND runs): a log-normal body
 * (median `medianNs`, p90 ≈ 1.6 × median) and with probability `tailP` a stall of 1–`tailMaxNs`
 * (log-uniform) when the vCPU thread waits for a host CPU. Deterministic per seed.
 */
export function tcgGaps(seed: number, medianNs = 240e3, tailP = 0.03, tailMaxNs = 15e6): (i: number) => number {
  const r = rng(seed);
  return () => {
    if (r() < tailP) return 1e6 * Math.exp(r() * Math.log(tailMaxNs / 1e6));
    // Box–Muller; sigma 0.36 puts p90 at 1.59 × median.
    const z = Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
    return medianNs * Math.exp(0.36 * z);
  };
}

export const MS = 1e6;
export const US = 1e3;
export const S = 1e9;
