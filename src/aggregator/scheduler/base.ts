// Common bookkeeping for all policies: VM registry, pending counts, the running submission,
// activity tracking and input validation. Subclasses add their state and the decision.
import type { Pick, PolicyStateBase, SchedulerPolicy, VmCommonState, VmId, VmOptions } from './types.ts';

export function checkWeight(weight: number): number {
  if (typeof weight !== 'number' || !Number.isFinite(weight) || weight <= 0) {
    throw new RangeError(`scheduler: weight must be a finite number > 0, got ${String(weight)}`);
  }
  return weight;
}

/** Device ns reported by the engine, made safe to add (a bad value must not poison credit). */
export function sanitizeNs(ns: number): number {
  return Number.isFinite(ns) && ns > 0 ? ns : 0;
}

/** Remove vm from an ordered list (run list, LRU queue) if present. */
export function removeFrom(list: VmId[], vm: VmId): void {
  const i = list.indexOf(vm);
  if (i >= 0) list.splice(i, 1);
}

/** Move vm to the tail of an ordered list. */
export function moveToTail(list: VmId[], vm: VmId): void {
  const i = list.indexOf(vm);
  if (i < 0 || i === list.length - 1) return;
  list.splice(i, 1);
  list.push(vm);
}

export abstract class PolicyBase<V extends VmCommonState, S extends PolicyStateBase<V>>
  implements SchedulerPolicy
{
  abstract readonly name: string;
  protected readonly s: S;

  protected constructor(state: S) {
    if (!Number.isFinite(state.activeGraceNs) || state.activeGraceNs < 0) {
      throw new RangeError(`scheduler: activeGraceNs must be ≥ 0, got ${state.activeGraceNs}`);
    }
    this.s = state;
  }

  /** Per-policy VM state for a new VM. */
  protected abstract newVm(common: VmCommonState, now: number): V;
  protected abstract decide(now: number): Pick;
  /** Called once per completion after the common accounting, with the sanitized device ns. */
  protected abstract completed(vm: VmId, v: V, deviceNs: number, now: number): void;
  /** Time-driven state changes due by now (replenish, stage and window rollover). */
  protected abstract catchUp(now: number): void;
  /** A VM that was idle became active (first doorbell after a pause). */
  protected onActivate(_vm: VmId, _v: V, _now: number): void {}
  /** vm's head submission was just handed to the device. */
  protected dispatched(_vm: VmId, _v: V, _now: number): void {}
  /** After a doorbell was counted (FIFO records the arrival order here). */
  protected enqueued(_vm: VmId, _now: number): void {}
  protected onAdded(_vm: VmId, _now: number): void {}
  protected onRemoved(_vm: VmId, _now: number): void {}

  get running(): VmId | null {
    return this.s.running;
  }

  hasVm(vm: VmId): boolean {
    return Object.hasOwn(this.s.vms, vm);
  }

  pending(vm: VmId): number {
    return this.vm(vm).pending;
  }

  addVm(vm: VmId, options: VmOptions, now: number): void {
    if (typeof vm !== 'string' || vm.length === 0) throw new TypeError('scheduler: vm id must be a non-empty string');
    if (this.hasVm(vm)) throw new Error(`scheduler: vm ${vm} already registered`);
    this.catchUp(now);
    // A VM is inactive until its first doorbell.
    const common: VmCommonState = {
      weight: checkWeight(options.weight),
      pending: 0,
      deviceNs: 0,
      completed: 0,
      lastActiveNs: null,
    };
    this.s.vms[vm] = this.newVm(common, now);
    this.onAdded(vm, now);
  }

  removeVm(vm: VmId, now: number): void {
    this.vm(vm);
    this.catchUp(now);
    delete this.s.vms[vm];
    if (this.s.running === vm) this.s.runningRemoved = true;
    this.onRemoved(vm, now);
  }

  setWeight(vm: VmId, weight: number, now: number): void {
    const v = this.vm(vm);
    this.catchUp(now);
    v.weight = checkWeight(weight);
  }

  enqueue(vm: VmId, now: number): void {
    const v = this.vm(vm);
    this.catchUp(now);
    const wasActive = this.isActive(vm, v, now);
    v.pending++;
    v.lastActiveNs = now;
    if (!wasActive) this.onActivate(vm, v, now);
    this.enqueued(vm, now);
  }

  pickNext(now: number): Pick {
    this.catchUp(now);
    if (this.s.running !== null) return null;
    const pick = this.decide(now);
    if (typeof pick === 'string') {
      const v = this.s.vms[pick]!;
      v.pending--;
      this.s.running = pick;
      this.s.runningSinceNs = now;
      this.dispatched(pick, v, now);
    }
    return pick;
  }

  onComplete(vm: VmId, deviceNs: number, now: number): void {
    if (this.s.running !== vm) {
      throw new Error(`scheduler: completion for ${vm} but ${this.s.running ?? 'nothing'} is running`);
    }
    this.catchUp(now);
    this.s.running = null;
    if (this.s.runningRemoved) {
      this.s.runningRemoved = false;
      return;
    }
    const v = this.s.vms[vm]!;
    // Charge the time the submission held the device, not only what the engine reports: one
    // submission runs at a time, so from its dispatch to its completion nobody else can start.
    // For a tiny launch the engine's job is a small part of that (the hand-off to the pool, the
    // completion's way back), and a VM of tiny launches charged only for its jobs would look
    // idle to every policy while it kept the device from its neighbours.
    const ns = Math.max(sanitizeNs(deviceNs), sanitizeNs(now - this.s.runningSinceNs));
    v.deviceNs += ns;
    v.completed++;
    v.lastActiveNs = now;
    this.completed(vm, v, ns, now);
  }

  replenish(now: number): void {
    this.catchUp(now);
  }

  state(): S {
    return structuredClone(this.s);
  }

  load(state: PolicyStateBase): void {
    if (state === null || typeof state !== 'object' || state.policy !== this.name) {
      throw new Error(`scheduler: cannot load ${String(state?.policy)} state into a ${this.name} policy`);
    }
    const copy = structuredClone(state) as S;
    for (const key of Object.keys(this.s)) delete (this.s as Record<string, unknown>)[key];
    Object.assign(this.s, copy);
  }

  protected vm(vm: VmId): V {
    const v = this.s.vms[vm];
    if (v === undefined || !Object.hasOwn(this.s.vms, vm)) throw new Error(`scheduler: unknown vm ${vm}`);
    return v;
  }

  /** Wants the device: has pending work, is running, or was busy within the grace time. */
  protected isActive(vm: VmId, v: V, now: number): boolean {
    return (
      v.pending > 0 ||
      this.s.running === vm ||
      (v.lastActiveNs !== null && now - v.lastActiveNs < this.s.activeGraceNs)
    );
  }

  /** Σ weights of the active VMs at now (0 if none). */
  protected activeWeight(now: number): number {
    let sum = 0;
    for (const id in this.s.vms) {
      const v = this.s.vms[id]!;
      if (this.isActive(id, v, now)) sum += v.weight;
    }
    return sum;
  }

  /** True when vm is the only active VM: such a VM is never throttled. */
  protected isAlone(vm: VmId, now: number): boolean {
    for (const id in this.s.vms) {
      if (id !== vm && this.isActive(id, this.s.vms[id]!, now)) return false;
    }
    return true;
  }
}
