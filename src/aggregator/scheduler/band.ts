// BAND (Gdev's gdev_vsched_band.c, A3's band_scheduler): credit plus a measured-utilisation band.
//
// Credit (credit-base.ts) tracks the short term. The band is each VM's share of the device
// time used in a sliding window (default 1 s), compared with its weight share:
//   - a VM is demoted to the run-list tail only when its credit ≤ 0 AND its utilisation is
//     above its share (credit alone would demote a VM that has merely had one long kernel);
//   - pick = first VM in the run list with pending work that is not demotable; if every
//     candidate is demotable, the first one anyway (work-conserving);
//   - yield window: the device is non-preemptive and a loop of short kernels leaves a gap
//     between one kernel's completion and the next doorbell, which a competitor with long
//     kernels would win every time. So when the candidate is over its share while the VM that
//     just completed is under its share and has used less, the device stays idle for up to
//     `yieldNs` (default 500 µs, Gdev's spin) for that VM to submit again. One chance per
//     completion (GDEV_VSCHED_BAND_SELECT_CHANCES = 1). Gdev spins; we return { waitUntil }.
//     The wait is free up to the length of that VM's last submission and charged to it beyond
//     (see endYield): otherwise a VM of tiny launches with longer gaps would win every yield
//     and leave the device idle most of the time while its neighbour waits.
//   - a VM alone is never throttled (no demotion, no waiting), so BAND is work-conserving.
//
// Utilisation is the VM's fraction of the device time all VMs used in the window (not of wall
// time), so shares and utilisations both sum to 1 and compare directly. The window slides: it
// is kept in buckets (default 100 of 10 ms), the oldest counted for the part still inside the
// window. Coarse buckets bias the estimate whenever the workload's cycle locks onto the
// bucket grid (two 1 s halves skewed a 1 ms/100 ms pair by several %), and an exponential
// decay favours whoever ran last; fine buckets measured best in the simulation tests. A
// running submission is charged as it runs (see credit-base.ts), so it lands in the buckets
// where it ran. When an idle VM becomes active the window restarts for everyone: the shares
// just changed, and a newcomer measured against history from before it arrived would look
// "under share" until it had taken a whole window's share for itself (hoarding by another name).
//
// Device time is what a submission held the device (base.ts: dispatch to completion, or the
// engine's ns if longer): charged only the engine's ns, a VM of NOP launches used almost
// nothing, stayed under its share, won every yield and starved a copy-bound neighbour until
// that neighbour's last job left the window (test/aggregator/scheduler-starvation.test.ts).
//
// Residual unfairness: the idle gaps the yield window leaves (the guest's doorbell latency)
// are device time nobody uses, and the sliding window tends to lock the alternation onto equal
// *wall* time per turn, so the short-kernel VM ends up about gap / (kernel + gap) / 2 below an
// even split of device time (simulation tests report it).
import { moveToTail } from './base.ts';
import { CreditPolicyBase, creditBaseState, newCreditVm } from './credit-base.ts';
import type { CreditConfig, CreditStateBase, CreditVmState } from './credit-base.ts';
import type { Pick, PolicyStateBase, VmCommonState, VmId } from './types.ts';

export interface BandConfig extends CreditConfig {
  /** Utilisation window, ns (default 1 s, Gdev's com_bw_used window). */
  windowNs?: number;
  /** Buckets the window is kept in (default 100, i.e. 10 ms each for 1 s). */
  windowBuckets?: number;
  /** Yield window, ns (default 500 µs; 0 disables). */
  yieldNs?: number;
}

export interface BandVmState extends CreditVmState {
  /** Device ns per window bucket: a ring of windowBuckets + 1 slots (see windowed). */
  usage: number[];
  /** Σ usage, kept up to date so reading the window is O(1). */
  usageSum: number;
  /** Device ns charged for its last submission: how long a yield may idle for it free. */
  lastNs: number;
  /** Idle device time its yields charged to it, ns (observability). */
  yieldHeldNs: number;
}

export interface BandState extends CreditStateBase<BandVmState> {
  policy: 'band';
  windowNs: number;
  bucketNs: number;
  yieldNs: number;
  /** Start of the current bucket (null until the clock origin is known) and its ring slot. */
  bucketStartNs: number | null;
  bucket: number;
  /** Last completion, which may earn its VM a yield chance. */
  lastCompleted: VmId | null;
  lastCompletedNs: number;
  yieldChance: boolean;
  /** Active yield: the device waits for this VM until yieldUntilNs. */
  yieldVm: VmId | null;
  yieldUntilNs: number;
  /** When the active yield began: the idle time from then on is charged to yieldVm. */
  yieldSinceNs: number;
}

export class BandPolicy extends CreditPolicyBase<BandVmState, BandState> {
  readonly name = 'band';

  constructor(config: BandConfig = {}) {
    const windowNs = config.windowNs ?? 1e9;
    const buckets = config.windowBuckets ?? 100;
    const yieldNs = config.yieldNs ?? 500e3;
    if (!Number.isFinite(windowNs) || windowNs <= 0) throw new RangeError('scheduler: windowNs must be > 0');
    if (!Number.isInteger(buckets) || buckets < 1 || buckets > 1000) {
      throw new RangeError('scheduler: windowBuckets must be an integer in 1..1000');
    }
    if (!Number.isFinite(yieldNs) || yieldNs < 0) throw new RangeError('scheduler: yieldNs must be ≥ 0');
    super(
      {
        ...creditBaseState('band', config),
        windowNs,
        bucketNs: windowNs / buckets,
        yieldNs,
        bucketStartNs: null,
        bucket: 0,
        lastCompleted: null,
        lastCompletedNs: 0,
        yieldChance: false,
        yieldVm: null,
        yieldUntilNs: 0,
        yieldSinceNs: 0,
      },
    );
  }

  protected newVm(common: VmCommonState): BandVmState {
    const slots = Math.round(this.s.windowNs / this.s.bucketNs) + 1;
    return { ...newCreditVm(common), usage: new Array<number>(slots).fill(0), usageSum: 0, lastNs: 0, yieldHeldNs: 0 };
  }

  /** A state from a server before the yield was charged lacks its fields: they start at 0. */
  override load(state: PolicyStateBase): void {
    super.load(state);
    this.s.yieldSinceNs ??= 0;
    for (const id in this.s.vms) {
      const v = this.s.vms[id]!;
      v.lastNs ??= 0;
      v.yieldHeldNs ??= 0;
    }
  }

  /** Device ns vm used in the sliding window ending at now. */
  usage(vm: VmId, now: number): number {
    return this.windowed(this.vm(vm), now);
  }

  /** vm's fraction of all device time used in the window (0 when nothing ran). */
  utilisation(vm: VmId, now: number): number {
    const total = this.totalUsage(now);
    return total > 0 ? this.windowed(this.vm(vm), now) / total : 0;
  }

  /** vm's weight share among the active VMs (1 when it is the only one). */
  share(vm: VmId, now: number): number {
    const v = this.vm(vm);
    const total = this.activeWeight(now);
    return total > 0 ? v.weight / Math.max(total, v.weight) : 1;
  }

  /**
   * The ring holds the current bucket (a fraction f of it elapsed), B − 1 full buckets and the
   * oldest one, of which the part (1 − f) still lies inside the window.
   */
  private windowed(v: BandVmState, now: number): number {
    const s = this.s;
    const f = Math.min(1, Math.max(0, (now - (s.bucketStartNs ?? now)) / s.bucketNs));
    const oldest = (s.bucket + 1) % v.usage.length;
    return v.usageSum - v.usage[oldest]! * f;
  }

  private totalUsage(now: number): number {
    let total = 0;
    for (const id in this.s.vms) total += this.windowed(this.s.vms[id]!, now);
    return total;
  }

  private overShare(vm: VmId, total: number, now: number): boolean {
    return total > 0 && this.windowed(this.s.vms[vm]!, now) / total > this.share(vm, now);
  }

  private demotable(vm: VmId, v: BandVmState, total: number, now: number): boolean {
    return v.credit <= 0 && !this.isAlone(vm, now) && this.overShare(vm, total, now);
  }

  protected override charge(vm: VmId, v: BandVmState, ns: number, now: number): void {
    super.charge(vm, v, ns, now);
    const b = this.s.bucket;
    const old = v.usage[b]!;
    const next = Math.max(0, old + ns);
    v.usage[b] = next;
    v.usageSum += next - old;
  }

  protected override beforeReplenish(t: number): void {
    this.rollWindow(t);
  }

  protected override catchUp(now: number): void {
    super.catchUp(now);
    this.rollWindow(now);
    this.chargeRunning(now);
  }

  private rollWindow(now: number): void {
    const s = this.s;
    if (s.bucketStartNs === null) {
      s.bucketStartNs = now;
      return;
    }
    const n = Math.floor((now - s.bucketStartNs) / s.bucketNs);
    if (n <= 0) return;
    const slots = Math.round(s.windowNs / s.bucketNs) + 1;
    // In-flight device time belongs to the bucket it ran in.
    this.chargeRunning(s.bucketStartNs + s.bucketNs);
    for (let k = 0; k < Math.min(n, slots); k++) {
      s.bucket = (s.bucket + 1) % slots;
      for (const id in s.vms) {
        const v = s.vms[id]!;
        v.usageSum -= v.usage[s.bucket]!;
        v.usage[s.bucket] = 0;
      }
    }
    s.bucketStartNs += n * s.bucketNs;
  }

  protected override onActivate(): void {
    // Restart the window for everyone (see the header comment). Credit is untouched.
    for (const id in this.s.vms) {
      const v = this.s.vms[id]!;
      v.usage.fill(0);
      v.usageSum = 0;
    }
  }

  protected override onRemoved(vm: VmId, now: number): void {
    super.onRemoved(vm, now);
    if (this.s.yieldVm === vm) this.s.yieldVm = null;
    if (this.s.lastCompleted === vm) this.s.lastCompleted = null;
  }

  protected completed(vm: VmId, v: BandVmState, deviceNs: number, now: number): void {
    this.settle(vm, v, deviceNs, now);
    v.lastNs = deviceNs;
    if (this.demotable(vm, v, this.totalUsage(now), now)) moveToTail(this.s.order, vm);
    this.s.lastCompleted = vm;
    this.s.lastCompletedNs = now;
    this.s.yieldChance = true;
  }

  /**
   * The device idled for yieldVm. Up to the length of its last submission the wait is free
   * (the yield's purpose: a VM whose gaps are shorter than its kernels gets an even split);
   * beyond that it is charged like device time. Nobody else could use it, and uncharged it let
   * a VM of tiny launches with longer gaps keep the device mostly idle while its neighbour
   * waited: its usage grew only by its launches, so it stayed under share and won every yield.
   */
  private endYield(now: number): void {
    const s = this.s;
    const vm = s.yieldVm;
    s.yieldVm = null;
    if (vm === null) return;
    const v = s.vms[vm]!;
    const over = now - s.yieldSinceNs - v.lastNs;
    if (over <= 0) return;
    v.yieldHeldNs += over;
    this.charge(vm, v, over, now);
  }

  protected decide(now: number): Pick {
    const s = this.s;
    // A yield in progress: the awaited VM takes the device as soon as it submits.
    if (s.yieldVm !== null) {
      if (s.vms[s.yieldVm]!.pending > 0) {
        const vm = s.yieldVm;
        this.endYield(now);
        return vm;
      }
      if (now >= s.yieldUntilNs) this.endYield(now);
    }
    const total = this.totalUsage(now);
    let first: VmId | null = null;
    let choice: VmId | null = null;
    for (const id of s.order) {
      const v = s.vms[id]!;
      if (v.pending === 0) continue;
      first ??= id;
      if (!this.demotable(id, v, total, now)) {
        choice = id;
        break;
      }
    }
    choice ??= first;
    if (choice === null) return null;
    if (s.yieldVm !== null) {
      // Keep waiting only while the reason holds: the candidate is over its share.
      if (this.overShare(choice, total, now)) return { waitUntil: s.yieldUntilNs };
      this.endYield(now);
      return choice;
    }
    if (s.yieldChance) {
      s.yieldChance = false;
      const cur = s.lastCompleted;
      const until = s.lastCompletedNs + s.yieldNs;
      if (
        cur !== null &&
        cur !== choice &&
        now < until &&
        s.vms[cur]!.pending === 0 &&
        this.overShare(choice, total, now) &&
        this.windowed(s.vms[cur]!, now) < this.share(cur, now) * total &&
        this.windowed(s.vms[cur]!, now) < this.windowed(s.vms[choice]!, now)
      ) {
        s.yieldVm = cur;
        s.yieldUntilNs = until;
        s.yieldSinceNs = now;
        return { waitUntil: until };
      }
    }
    return choice;
  }
}
