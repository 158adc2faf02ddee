// Signed time credit per VM, shared by the `credit` and `band` policies (A3 / Gdev).
//
// Every period each active VM earns `elapsed × share` (share = weight / Σ weights of the active
// VMs; `elapsed` is the real time since the last replenish, as A3 does, so a late caller does
// not skew it). Device time is charged against it. Two clamps keep credit meaningful:
//   - surplus: credit above `capNs` (default one period) is clamped to the cap (default) or
//     reset to 0 (`surplus: 'reset'`, Gdev's GDEV_CREDIT_INACTIVE_THRESHOLD rule). We clamp by
//     default because Gdev's reset is not monotone: a VM that waited one period longer (behind
//     a competitor's long kernel) can end up with *less* credit. Either way an idle VM cannot
//     hoard more than one period of device time.
//   - debt: credit below −`debtLimitNs` is forgiven to 0 (Gdev and A3), so one very long
//     kernel does not lock its VM out for many periods; long-run fairness is BAND's
//     utilisation band's job, not credit's.
// A VM that is not active gets no replenishment and its credit is set to 0: it neither hoards
// nor carries debt across an idle gap.
//
// The device is non-preemptive and its time is known only at completion, so a long submission
// is charged provisionally with the wall time it has been running, at each period boundary
// (and by BAND at each window-bucket boundary and whenever it decides); the completion charges
// the remainder (device ns − provisional, possibly a refund). The clamps therefore see
// in-flight use in the period where it happened.
import { PolicyBase } from './base.ts';
import type { PolicyStateBase, VmCommonState, VmId } from './types.ts';

export function newCreditVm(common: VmCommonState): CreditVmState {
  return { ...common, credit: 0, chargedNs: 0 };
}

export type SurplusRule = 'clamp' | 'reset';

export interface CreditConfig {
  /** Replenish period, ns (default 30 ms, Gdev's GDEV_PERIOD_DEFAULT). */
  periodNs?: number;
  /** Surplus threshold, ns (default one period). */
  capNs?: number;
  /** What happens above the cap (default 'clamp'; Gdev: 'reset'). */
  surplus?: SurplusRule;
  /** Debt beyond this is forgiven to 0, ns (default one period). */
  debtLimitNs?: number;
  /** Activity grace, ns (default two periods): a VM idle longer stops counting for shares. */
  activeGraceNs?: number;
}

export interface CreditVmState extends VmCommonState {
  /** Signed device-time credit, ns. */
  credit: number;
  /** Provisional charge of the submission now on the device, ns. */
  chargedNs: number;
}

export interface CreditParams {
  periodNs: number;
  capNs: number;
  surplus: SurplusRule;
  debtLimitNs: number;
}

export interface CreditStateBase<V extends CreditVmState = CreditVmState> extends PolicyStateBase<V> {
  params: CreditParams;
  /** Time of the last replenish (null until the first call gives the clock origin). */
  lastReplenishNs: number | null;
  /** Up to when the running submission has been charged provisionally. */
  chargedUntilNs: number;
  /** Run list: order in which VMs with pending work are considered. */
  order: VmId[];
}

function positive(name: string, v: number): number {
  if (!Number.isFinite(v) || v <= 0) throw new RangeError(`scheduler: ${name} must be > 0, got ${v}`);
  return v;
}

export function creditParams(config: CreditConfig): CreditParams {
  const periodNs = positive('periodNs', config.periodNs ?? 30e6);
  const surplus = config.surplus ?? 'clamp';
  if (surplus !== 'clamp' && surplus !== 'reset') throw new RangeError(`scheduler: surplus must be clamp|reset`);
  return {
    periodNs,
    capNs: positive('capNs', config.capNs ?? periodNs),
    surplus,
    debtLimitNs: positive('debtLimitNs', config.debtLimitNs ?? periodNs),
  };
}

/** The state every credit-family policy starts from (credit, band). */
export function creditBaseState<P extends string>(policy: P, config: CreditConfig): CreditStateBase<never> & { policy: P } {
  const params = creditParams(config);
  return {
    policy,
    activeGraceNs: config.activeGraceNs ?? 2 * params.periodNs,
    vms: {},
    running: null,
    runningSinceNs: 0,
    runningRemoved: false,
    params,
    lastReplenishNs: null,
    chargedUntilNs: 0,
    order: [],
  };
}

/** After this many consecutive idle periods the replay jumps to now (state is a fixed point). */
const IDLE_SKIP_PERIODS = 4;

export abstract class CreditPolicyBase<
  V extends CreditVmState,
  S extends CreditStateBase<V>,
> extends PolicyBase<V, S> {

  protected override onAdded(vm: VmId): void {
    this.s.order.push(vm);
  }

  protected override onRemoved(vm: VmId, _now: number): void {
    const i = this.s.order.indexOf(vm);
    if (i >= 0) this.s.order.splice(i, 1);
  }

  protected override dispatched(_vm: VmId, v: V, now: number): void {
    v.chargedNs = 0;
    this.s.chargedUntilNs = now;
  }

  /** Charge device time to vm (negative = refund). Subclasses also record it in their window. */
  protected charge(_vm: VmId, v: V, ns: number, _now: number): void {
    v.credit -= ns;
  }

  /** Completion: charge what the provisional charges did not cover. Returns nothing; subclasses demote. */
  protected settle(vm: VmId, v: V, deviceNs: number, now: number): void {
    const rest = deviceNs - v.chargedNs;
    v.chargedNs = 0;
    this.charge(vm, v, rest, now);
  }

  /** Hook before each replenish at time t (BAND rolls its utilisation window here). */
  protected beforeReplenish(_t: number): void {}

  protected catchUp(now: number): void {
    const s = this.s;
    const P = s.params.periodNs;
    if (s.lastReplenishNs === null) {
      s.lastReplenishNs = now;
      return;
    }
    let idle = 0;
    while (now - s.lastReplenishNs >= P) {
      const t = s.lastReplenishNs + P;
      this.replenishAt(t);
      if (s.running === null && this.activeWeight(t) === 0) {
        // Nothing runs and nobody is active: every credit is 0, further periods change nothing.
        if (++idle >= IDLE_SKIP_PERIODS) {
          s.lastReplenishNs += Math.floor((now - s.lastReplenishNs) / P) * P;
          break;
        }
      } else {
        idle = 0;
      }
    }
  }

  /** Charge the running submission provisionally for its wall time up to t. */
  protected chargeRunning(t: number): void {
    const s = this.s;
    if (s.running === null || s.runningRemoved) return;
    const d = t - s.chargedUntilNs;
    if (d <= 0) return;
    const v = s.vms[s.running]!;
    v.chargedNs += d;
    s.chargedUntilNs = t;
    this.charge(s.running, v, d, t);
  }

  private replenishAt(t: number): void {
    const s = this.s;
    this.beforeReplenish(t);
    const elapsed = t - s.lastReplenishNs!;
    this.chargeRunning(t);
    const total = this.activeWeight(t);
    const { capNs, surplus, debtLimitNs } = s.params;
    for (const id in s.vms) {
      const v = s.vms[id]!;
      if (!this.isActive(id, v, t)) {
        v.credit = 0;
        continue;
      }
      v.credit += (elapsed * v.weight) / total;
      if (v.credit > capNs) v.credit = surplus === 'clamp' ? capNs : 0;
      else if (v.credit < -debtLimitNs) v.credit = 0;
    }
    s.lastReplenishNs = t;
  }
}
