// Drives a SchedulerPolicy: one submission on the device at a time. It owns the only timer a
// policy needs (the wait of a { waitUntil } decision) through a host interface, so the same
// code runs against the engine with real timers and against a simulated device with a virtual
// clock in tests.
import type { SchedulerPolicy, VmId } from './types.ts';
import { isWait } from './types.ts';

export interface DispatcherHost<T = unknown> {
  /** Current time, ns (same clock for every call). */
  now(): number;
  /** Submit vm's head doorbell to the engine; the engine later reports completion. */
  submit(vm: VmId): void;
  /** Call cb at (or soon after) atNs; returns a handle for cancelTimer. */
  setTimer(atNs: number, cb: () => void): T;
  cancelTimer(handle: T): void;
}

export class Dispatcher<T = unknown> {
  /** Replaced only by setPolicy (run-time policy change). */
  policy: SchedulerPolicy;
  private readonly host: DispatcherHost<T>;
  /** A policy waiting for the running submission to complete (setPolicy). */
  private nextPolicy: SchedulerPolicy | null = null;
  private timer: T | null = null;
  private timerAt = 0;
  private readonly onTimer = (): void => {
    this.timer = null;
    this.kick();
  };

  constructor(policy: SchedulerPolicy, host: DispatcherHost<T>) {
    this.policy = policy;
    this.host = host;
  }

  /** A guest doorbell: the VM has one more submission. */
  doorbell(vm: VmId): void {
    this.policy.enqueue(vm, this.host.now());
    this.kick();
  }

  /** The engine reported vm's submission done (channel idle) after deviceNs of device time. */
  complete(vm: VmId, deviceNs: number): void {
    this.policy.onComplete(vm, deviceNs, this.host.now());
    if (this.nextPolicy !== null) this.switchPolicy(this.nextPolicy);
    this.kick();
  }

  /**
   * Change the policy at run time (the control API): the VMs, their weights and pending
   * submissions move to `next`; credit and history start afresh. While a submission is on the
   * device the switch waits for its completion, so that no policy sees a completion it did not
   * dispatch. Returns true when the switch happened now.
   */
  setPolicy(next: SchedulerPolicy): boolean {
    if (this.policy.running !== null) {
      this.nextPolicy = next;
      return false;
    }
    this.switchPolicy(next);
    this.kick();
    return true;
  }

  private switchPolicy(next: SchedulerPolicy): void {
    this.nextPolicy = null;
    const now = this.host.now();
    for (const [vm, s] of Object.entries(this.policy.state().vms)) {
      next.addVm(vm, { weight: s.weight }, now);
      for (let i = 0; i < s.pending; i++) next.enqueue(vm, now);
    }
    this.clearTimer();
    this.policy = next;
  }

  get busy(): boolean {
    return this.policy.running !== null;
  }

  /** Make a scheduling decision if the device is idle. */
  kick(): void {
    if (this.policy.running !== null) return;
    const now = this.host.now();
    const pick = this.policy.pickNext(now);
    if (pick === null) return this.clearTimer();
    if (isWait(pick)) {
      if (this.timer !== null && this.timerAt === pick.waitUntil) return;
      this.clearTimer();
      this.timerAt = pick.waitUntil;
      this.timer = this.host.setTimer(pick.waitUntil, this.onTimer);
      return;
    }
    this.clearTimer();
    this.host.submit(pick);
  }

  /** Stop the pending timer (shutdown). */
  close(): void {
    this.clearTimer();
  }

  private clearTimer(): void {
    if (this.timer !== null) {
      this.host.cancelTimer(this.timer);
      this.timer = null;
    }
  }
}

/** Monotonic ns as a number (exact to 2^53 ns ≈ 104 days of uptime). */
export function monotonicNowNs(): number {
  return Number(process.hrtime.bigint());
}

/**
 * A host on Node's own clock and timers. setTimeout has 1 ms granularity, so a 500 µs yield
 * window lasts about 1 ms in practice; a doorbell or completion still ends it early.
 */
export function nodeHost(submit: (vm: VmId) => void): DispatcherHost<NodeJS.Timeout> {
  return {
    now: monotonicNowNs,
    submit,
    setTimer: (atNs, cb) => {
      const t = setTimeout(cb, Math.max(0, (atNs - monotonicNowNs()) / 1e6));
      t.unref();
      return t;
    },
    cancelTimer: (t) => clearTimeout(t),
  };
}
