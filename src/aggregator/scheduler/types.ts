// The scheduling-policy contract shared by every policy and the dispatcher.
//
// The device is non-preemptive: once a VM's submission (one doorbell) is handed to the engine
// it runs to completion, and the engine reports how many device ns it took when the channel
// goes idle. A guest doorbell is therefore the only scheduling point. A policy decides *which*
// VM's head submission goes next; it never owns timers or payloads:
//   - the caller passes `now` (ns, any monotonic origin) to every call, so a policy is a
//     deterministic function of its inputs (tests drive it with a virtual clock);
//   - the policy counts pending submissions per VM; the payloads stay with the caller, who
//     pops that VM's head doorbell when the policy names it;
//   - when the policy wants the device to stay idle for a while (BAND's yield window, a hard
//     cap) it returns `{ waitUntil }` and the caller arranges to call `pickNext` again then
//     (or earlier, on a doorbell or a completion).
// All state is one plain object (numbers, strings, arrays, records) that `state()` returns as a
// deep copy: it can be logged, serialized and compared in tests.

/** A VM's identifier as the aggregator names it (also the `vm` label in metrics). */
export type VmId = string;

export interface VmOptions {
  /** Relative share of device time (> 0). Shares are weight / Σ weights of the active VMs. */
  weight: number;
}

/** Returned by pickNext when the device should stay idle until the given time (ns). */
export interface WaitUntil {
  waitUntil: number;
}

/** The result of a scheduling decision: run this VM's head submission now, wait, or nothing to do. */
export type Pick = VmId | WaitUntil | null;

/** Bookkeeping every policy keeps per VM. */
export interface VmCommonState {
  weight: number;
  /** Doorbells enqueued and not yet picked. */
  pending: number;
  /** Total device ns charged: per submission, the engine's device ns or, if longer, dispatch to completion. */
  deviceNs: number;
  /** Submissions completed. */
  completed: number;
  /** Last enqueue or completion (ns), null before the first; drives the "active" notion. */
  lastActiveNs: number | null;
}

/** Fields every policy state carries; each policy extends it with its own. */
export interface PolicyStateBase<V extends VmCommonState = VmCommonState> {
  policy: string;
  /**
   * How long after its last doorbell or completion a VM still counts as active (ns). Shares are
   * computed among active VMs, so a VM that stopped submitting stops diluting the others.
   */
  activeGraceNs: number;
  vms: Record<VmId, V>;
  /** The VM whose submission is on the device, or null when the device is idle. */
  running: VmId | null;
  runningSinceNs: number;
  /** A VM removed while its submission was on the device: its completion is accepted and dropped. */
  runningRemoved: boolean;
}

export interface SchedulerPolicy {
  readonly name: string;
  /** Register a VM (throws on a duplicate id or a weight that is not a finite number > 0). */
  addVm(vm: VmId, options: VmOptions, now: number): void;
  /** Forget a VM and its pending submissions; an in-flight submission may still complete. */
  removeVm(vm: VmId, now: number): void;
  setWeight(vm: VmId, weight: number, now: number): void;
  /** A doorbell: one more submission pending for vm. Allocation-free. */
  enqueue(vm: VmId, now: number): void;
  /**
   * Decide what the device does next (only meaningful while it is idle; returns null while a
   * submission is running). A returned VmId means "submit that VM's head doorbell now": the
   * policy counts it as running until onComplete.
   */
  pickNext(now: number): Pick;
  /** The engine reported vm's submission done after deviceNs of device time. */
  onComplete(vm: VmId, deviceNs: number, now: number): void;
  /** Apply any periodic replenishment due by now (policies also do this lazily on every call). */
  replenish(now: number): void;
  pending(vm: VmId): number;
  hasVm(vm: VmId): boolean;
  readonly running: VmId | null;
  /** Deep copy of the whole policy state (plain, JSON-serializable). */
  state(): PolicyStateBase;
  /** Replace the whole state with (a copy of) one taken by state() from the same policy kind. */
  load(state: PolicyStateBase): void;
}

export function isWait(pick: Pick): pick is WaitUntil {
  return pick !== null && typeof pick === 'object';
}
