// Weighted time slices (GVT-g's sched_policy.c, "TBS").
//
// GVT-g ticks every 1 ms and rebalances every 100 ms ("stage"); ten stages make a 1 s period.
// At each stage every VM is allotted `sliceNs × weight / Σ weight` (Σ over the active VMs, so
// an idle VM does not leave the device idle under a cap). On the first stage of a period
// `left = allotted` (debt and surplus dropped); on the others `left += allotted` (carried
// within the period). Pick = the first VM in LRU order with pending work and left > 0, which
// then moves to the LRU tail. Being event-driven we evaluate at every scheduling point
// (doorbell or completion) rather than on a 1 ms tick; the outcome is the same because the
// device is non-preemptive anyway.
//
// When nobody with time left has work ("else…" in GVT-g, which then idles the engine until the
// next rebalance): with `workConserving` (default) the first pending VM in LRU order runs
// anyway and its debt is carried; without it the device waits for the next stage (a hard
// cap), except for a VM alone, which is never throttled.
//
// Running time is charged provisionally at stage boundaries (wall time), the rest at
// completion, so a long kernel's time lands in the stage and period where it ran.
import { PolicyBase, moveToTail } from './base.ts';
import type { Pick, PolicyStateBase, VmCommonState, VmId } from './types.ts';

export interface WeightedConfig {
  /** Stage length, ns (default 100 ms). */
  sliceNs?: number;
  /** Stages per period; left time resets at period start (default 10 → 1 s). */
  stagesPerPeriod?: number;
  workConserving?: boolean;
  activeGraceNs?: number;
}

export interface WeightedVmState extends VmCommonState {
  allottedNs: number;
  leftNs: number;
  chargedNs: number;
}

export interface WeightedState extends PolicyStateBase<WeightedVmState> {
  policy: 'weighted';
  sliceNs: number;
  stagesPerPeriod: number;
  workConserving: boolean;
  stageStartNs: number | null;
  stage: number;
  chargedUntilNs: number;
  lru: VmId[];
}

export class WeightedPolicy extends PolicyBase<WeightedVmState, WeightedState> {
  readonly name = 'weighted';

  constructor(config: WeightedConfig = {}) {
    const sliceNs = config.sliceNs ?? 100e6;
    const stagesPerPeriod = config.stagesPerPeriod ?? 10;
    if (!Number.isFinite(sliceNs) || sliceNs <= 0) throw new RangeError('scheduler: sliceNs must be > 0');
    if (!Number.isInteger(stagesPerPeriod) || stagesPerPeriod < 1) {
      throw new RangeError('scheduler: stagesPerPeriod must be an integer ≥ 1');
    }
    super(
      {
        policy: 'weighted',
        activeGraceNs: config.activeGraceNs ?? sliceNs,
        vms: {},
        running: null,
        runningSinceNs: 0,
        runningRemoved: false,
        sliceNs,
        stagesPerPeriod,
        workConserving: config.workConserving ?? true,
        stageStartNs: null,
        stage: 0,
        chargedUntilNs: 0,
        lru: [],
      },
    );
  }

  protected newVm(common: VmCommonState): WeightedVmState {
    return { ...common, allottedNs: 0, leftNs: 0, chargedNs: 0 };
  }

  protected override onAdded(vm: VmId): void {
    this.s.lru.push(vm);
  }

  protected override onRemoved(vm: VmId): void {
    const i = this.s.lru.indexOf(vm);
    if (i >= 0) this.s.lru.splice(i, 1);
  }

  protected override onActivate(_vm: VmId, _v: WeightedVmState, now: number): void {
    // Rebalance for the rest of the current stage: every active VM's allotment becomes its new
    // share and its left time moves by the difference, pro rata. The newcomer does not wait up
    // to a whole stage, and the stage still hands out sliceNs in total.
    const s = this.s;
    if (s.stageStartNs === null) return;
    const rest = (s.stageStartNs + s.sliceNs - now) / s.sliceNs;
    const total = this.activeWeight(now);
    for (const id in s.vms) {
      const v = s.vms[id]!;
      if (!this.isActive(id, v, now)) continue;
      const allotted = (s.sliceNs * v.weight) / total;
      v.leftNs += (allotted - v.allottedNs) * rest;
      v.allottedNs = allotted;
    }
  }

  protected override dispatched(_vm: VmId, v: WeightedVmState, now: number): void {
    v.chargedNs = 0;
    this.s.chargedUntilNs = now;
  }

  protected completed(_vm: VmId, v: WeightedVmState, deviceNs: number): void {
    v.leftNs -= deviceNs - v.chargedNs;
    v.chargedNs = 0;
  }

  protected catchUp(now: number): void {
    const s = this.s;
    if (s.stageStartNs === null) {
      s.stageStartNs = now;
      this.rebalance(now, true);
      return;
    }
    let idle = 0;
    let start: number = s.stageStartNs;
    while (now - start >= s.sliceNs) {
      const t: number = start + s.sliceNs;
      this.chargeRunning(t);
      s.stageStartNs = start = t;
      s.stage = (s.stage + 1) % s.stagesPerPeriod;
      this.rebalance(t, s.stage === 0);
      if (s.running !== null || this.activeWeight(t) > 0) {
        idle = 0;
      } else if (++idle >= s.stagesPerPeriod) {
        // A whole idle period replayed: allotments are 0 and left times reset; jump ahead,
        // keeping the stage phase.
        const skip = Math.floor((now - start) / s.sliceNs);
        s.stageStartNs = start = start + skip * s.sliceNs;
        s.stage = (s.stage + skip) % s.stagesPerPeriod;
        if (skip > 0) this.rebalance(start, true);
        break;
      }
    }
  }

  private chargeRunning(t: number): void {
    const s = this.s;
    if (s.running === null || s.runningRemoved) return;
    const v = s.vms[s.running]!;
    const d = t - s.chargedUntilNs;
    if (d <= 0) return;
    v.chargedNs += d;
    v.leftNs -= d;
    s.chargedUntilNs = t;
  }

  private rebalance(t: number, periodStart: boolean): void {
    const s = this.s;
    const total = this.activeWeight(t);
    for (const id in s.vms) {
      const v = s.vms[id]!;
      v.allottedNs = this.isActive(id, v, t) ? (s.sliceNs * v.weight) / total : 0;
      v.leftNs = periodStart ? v.allottedNs : v.leftNs + v.allottedNs;
    }
  }

  protected decide(now: number): Pick {
    const s = this.s;
    let firstPending: VmId | null = null;
    for (const id of s.lru) {
      const v = s.vms[id]!;
      if (v.pending === 0) continue;
      firstPending ??= id;
      if (v.leftNs > 0) {
        moveToTail(s.lru, id);
        return id;
      }
    }
    if (firstPending === null) return null;
    if (s.workConserving || this.isAlone(firstPending, now)) {
      moveToTail(s.lru, firstPending);
      return firstPending;
    }
    return { waitUntil: s.stageStartNs! + s.sliceNs };
  }
}
