// A deterministic discrete-event simulation of the non-preemptive device for scheduler tests:
// a virtual clock, guests that ring doorbells, and a device that runs one submission at a time
// for a given number of ns. It drives the real Dispatcher and policies; nothing sleeps.
import { Dispatcher } from '../../src/aggregator/scheduler/dispatcher.ts';
import type { SchedulerPolicy, VmId } from '../../src/aggregator/scheduler/types.ts';

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
  /** Guest time between a completion and its next doorbell (the trap path), ns. */
  thinkNs: number;
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
  private readonly queued = new Map<VmId, number[]>();
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
    this.queued.get(vm)!.push(this.now);
    this.dispatcher.doorbell(vm);
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
    const i = this.submitted.get(vm)!;
    this.submitted.set(vm, i + 1);
    const ns = typeof w.kernelNs === 'function' ? w.kernelNs(i) : w.kernelNs;
    const rang = this.queued.get(vm)!.shift()!;
    this.waits.get(vm)!.push(this.now - rang);
    const start = this.now;
    this.events.push(this.now + ns, () => {
      this.deviceBusy = false;
      this.intervals.push({ vm, start, end: this.now });
      this.dispatcher.complete(vm, ns);
      this.events.push(this.now + w.thinkNs, () => this.doorbell(vm));
    });
  }

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

export const MS = 1e6;
export const US = 1e3;
export const S = 1e9;
