// FAIR: equal device time per weight in every window, not only on average.
//
// AvA's unfairness |t1 − t2| / (t1 + t2) is taken over windows of W = 1 s at any phase. The
// device is non-preemptive, so a VM with 100 ms kernels moves the device-time lag L between
// two VMs by 100 ms per kernel, and a window's unfairness is L(t + W) − L(t) over the device
// time in it. Whatever the long-run split, that is small at every phase only if the schedule
// repeats with a period that divides W. Greedy policies (least-served first, with or without
// waiting for the VM behind) settle into a cycle of one long kernel plus the short VM's
// catch-up, ~225 ms when the short VM's doorbell gap is 0.25 ms per 1 ms kernel (TCG): 4.4
// cycles per window, a median unfairness of several percent in the simulation tests even with equal long-run
// shares. FAIR makes the schedule tile the window:
//
//   1. Charge device time only (idle time belongs to nobody): vt = Σ device ns / weight.
//   2. A VM may start a submission only if, after its expected length (that of its last
//      non-empty submission), its vt exceeds no other contender's by more than `slackNs`
//      (default 0.5 % of W). Contenders: VMs with work queued, and VMs in their doorbell gap
//      (below). Among those that may start, the lowest vt goes. So a short-kernel VM runs
//      until it is level, and never more than the slack ahead.
//   3. Hold: when nobody with work may start but a VM in its doorbell gap could, the device
//      waits for it instead of handing a competitor a whole long kernel. Bounded by the VM's
//      own device time, not by a host-dependent latency: a VM earns hold budget = `holdRatio`
//      (default 1) × its device time, at most `holdCapNs` (default 50 ms); its gap contends only
//      while the budget it had at the completion lasts, and held idle time is paid from it. A
//      VM that stops submitting stalls the device once, for at most the cap; a VM whose gaps
//      are long CPU phases does not keep the device idle for it.
//   4. Turns on a grid: when nobody may start (everyone level, or a long kernel would put its VM
//      ahead), the lowest-vt VM with work that has not had a turn in the current frame gets
//      one: one submission regardless of rule 2. A VM gets at most one turn per frame (a turn
//      that used no device time, like the driver's interrupt request, is given back), and with
//      no turn left the device waits for the next frame. Frames are W / m long, so whatever
//      happens inside a frame repeats m times per window: the long VM's kernels start on the
//      grid and the short VM catches up to it in each frame.
//   5. m adapts to the workload: a frame whose first turn came late (the catch-up of the
//      previous one ran over) makes frames longer (m − 1); a window in which every round
//      (first turn to the wait for the next frame) fitted in 85 % of a shorter frame makes them
//      shorter (m + 1). So the device idles at most the tail of a frame that the round did not
//      fill: what equal device time in every window costs when the long kernel does not tile it.
//   6. A VM that starts wanting the device again (a doorbell with nothing queued) may be behind
//      the other contenders by at most one of their expected submissions plus the slack (the lag
//      a non-preemptive device imposes); its vt is raised to that. Device time it did not ask
//      for is not owed to it: no burst on return, and a VM whose demand is low (long CPU phases)
//      does not hold the others back to its level.
//
// Starvation is impossible: every VM with work gets a turn in every frame (≤ W), and a decision
// idles only until the next frame or for a hold bounded by the cap.
import { PolicyBase } from './base.ts';
import type { Pick, PolicyStateBase, VmCommonState, VmId } from './types.ts';

/** How much a round may overrun its frame and still count as fitting (see setFrames). */
const TILE_TOLERANCE = 0.015;
/** How much shorter than a frame a round must be before the frames get shorter (see setFrames). */
const TILE_MARGIN = 0.03;

export interface FairConfig {
  /** Fairness window, ns (default 1 s: AvA's reporting window); frames divide it. */
  windowNs?: number;
  /** How far a VM may run ahead of the least-served contender, ns (default windowNs / 200). */
  slackNs?: number;
  /** Hold budget earned per device ns used (default 1; 0 disables holds). */
  holdRatio?: number;
  /** Most hold budget a VM can have, so the longest single hold (default 50 ms). */
  holdCapNs?: number;
  /** Frames per window to start with (default 10); adapts between 1 and maxFrames. */
  frames?: number;
  /** Most frames per window (default 200: 5 ms frames for 1 s). */
  maxFrames?: number;
  /** A VM idle this long (no work, not running) is inactive; its next doorbell levels it (default 100 ms). */
  activeGraceNs?: number;
}

export interface FairVmState extends VmCommonState {
  /** Virtual time: device ns charged / weight. */
  vt: number;
  /** Expected device ns of its next submission: its last non-empty one's. */
  estNs: number;
  /** Hold budget, ns. */
  holdBudgetNs: number;
  /** In its doorbell gap, it contends until this time (completion + budget then); null when not. */
  gapUntilNs: number | null;
  /** The frame in which it last had a turn (−1: none). */
  turnFrame: number;
  /** Last dispatch (tie-break: least recently served first); −1 before the first. */
  lastDispatchNs: number;
  /** Idle time the device was held for this VM, ns, and how often; turns taken (observability). */
  heldNs: number;
  holds: number;
  turns: number;
}

export interface FairState extends PolicyStateBase<FairVmState> {
  policy: 'fair';
  windowNs: number;
  slackNs: number;
  holdRatio: number;
  holdCapNs: number;
  maxFrames: number;
  /** Frames per window now, the current frame's index and start (null until the first call). */
  frames: number;
  frame: number;
  frameStartNs: number | null;
  /** The open round: the first turn of a frame until the wait for the next frame (null: none open). */
  roundStartNs: number | null;
  roundFrame: number;
  /** Round lengths since the last adaptation (at most maxFrames + 1), and the frame of the next one. */
  rounds: number[];
  adaptFrame: number;
  /** The VM whose turn is on the device (a turn that used no device time is given back). */
  turnVm: VmId | null;
  /** The device is idle, held for this VM since holdSinceNs (paid from its budget). */
  holdVm: VmId | null;
  holdSinceNs: number;
}

export class FairPolicy extends PolicyBase<FairVmState, FairState> {
  readonly name = 'fair';

  constructor(config: FairConfig = {}) {
    const windowNs = config.windowNs ?? 1e9;
    const slackNs = config.slackNs ?? windowNs / 200;
    const holdRatio = config.holdRatio ?? 2;
    const holdCapNs = config.holdCapNs ?? 50e6;
    const maxFrames = config.maxFrames ?? 200;
    const frames = config.frames ?? 10;
    if (!Number.isFinite(windowNs) || windowNs <= 0) throw new RangeError('scheduler: windowNs must be > 0');
    if (!Number.isFinite(slackNs) || slackNs < 0) throw new RangeError('scheduler: slackNs must be ≥ 0');
    if (!Number.isFinite(holdRatio) || holdRatio < 0) throw new RangeError('scheduler: holdRatio must be ≥ 0');
    if (!Number.isFinite(holdCapNs) || holdCapNs < 0) throw new RangeError('scheduler: holdCapNs must be ≥ 0');
    if (!Number.isInteger(maxFrames) || maxFrames < 1 || maxFrames > 10_000) {
      throw new RangeError('scheduler: maxFrames must be an integer in 1..10000');
    }
    if (!Number.isInteger(frames) || frames < 1 || frames > maxFrames) {
      throw new RangeError('scheduler: frames must be an integer in 1..maxFrames');
    }
    super({
      policy: 'fair',
      activeGraceNs: config.activeGraceNs ?? 100e6,
      vms: {},
      running: null,
      runningSinceNs: 0,
      runningRemoved: false,
      windowNs,
      slackNs,
      holdRatio,
      holdCapNs,
      maxFrames,
      frames,
      frame: 0,
      frameStartNs: null,
      roundStartNs: null,
      roundFrame: -1,
      rounds: [],
      adaptFrame: frames,
      turnVm: null,
      holdVm: null,
      holdSinceNs: 0,
    });
  }

  protected newVm(common: VmCommonState): FairVmState {
    return {
      ...common, vt: 0, estNs: 0, holdBudgetNs: 0, gapUntilNs: null, turnFrame: -1, lastDispatchNs: -1,
      heldNs: 0, holds: 0, turns: 0,
    };
  }

  /** The VM the device is being held for, or null. */
  get holding(): VmId | null {
    return this.s.holdVm;
  }

  /** Frame length now, ns. */
  get frameNs(): number {
    // Whole ns, so that a frame's end compares equal wherever it is computed.
    return Math.round(this.s.windowNs / this.s.frames);
  }

  // ---- frames ----

  protected catchUp(now: number): void {
    const s = this.s;
    if (s.frameStartNs === null) {
      s.frameStartNs = now;
      return;
    }
    let len = this.frameNs;
    while (now >= s.frameStartNs + len) {
      s.frameStartNs += len;
      s.frame++;
      this.frameEnded();
      len = this.frameNs;
      if (now - s.frameStartNs >= s.windowNs) {
        // Idle for a window or more: nothing to adapt; skip ahead keeping the frame length.
        const k = Math.floor((now - s.frameStartNs) / len);
        s.frameStartNs += k * len;
        s.frame += k;
      }
    }
  }

  /** Rule 5, at the end of a frame (s.frameStartNs is the next one's start). */
  private frameEnded(): void {
    const s = this.s;
    const open = s.roundStartNs === null ? 0 : s.frameStartNs! - s.roundStartNs;
    if (open > 2 * this.frameNs) {
      // A round far longer than a frame: lengthen the frames now.
      this.setFrames(open);
    } else if (s.frame >= s.adaptFrame) {
      // Once a window: frames as short as the rounds allow (one outlier round ignored).
      const r = [...s.rounds].sort((a, b) => b - a);
      if (r.length > 0) this.setFrames(r.length >= 3 ? r[1]! : r[0]!);
      s.rounds = [];
      s.adaptFrame = s.frame + s.frames;
    }
  }

  /**
   * Frames per window for rounds of roundNs. Fewer at once when a round overruns its frame by
   * more than TILE_TOLERANCE (within it, each round starts a little late and the schedule's
   * period is the round itself, which still nearly tiles the window); one more only when the
   * round fits the shorter frame with TILE_MARGIN to spare, so a round near a frame's length
   * does not make the frames flap (every change breaks the pattern for a window).
   */
  private setFrames(roundNs: number): void {
    const s = this.s;
    const fit = Math.max(1, Math.min(s.maxFrames, Math.floor((s.windowNs * (1 + TILE_TOLERANCE)) / Math.max(1, roundNs))));
    if (fit < s.frames) s.frames = fit;
    else if (fit > s.frames && roundNs <= (s.windowNs / (s.frames + 1)) * (1 - TILE_MARGIN)) s.frames++;
    s.rounds = [];
    s.adaptFrame = s.frame + s.frames;
  }

  // ---- events ----

  protected override enqueued(vm: VmId, now: number): void {
    const s = this.s;
    const v = s.vms[vm]!;
    v.gapUntilNs = null;
    if (v.pending !== 1 || s.running === vm) return;
    // Rule 6: a VM that starts wanting the device again may be behind the others by at most what
    // one submission of theirs (and the slack) explains: the lag a non-preemptive device
    // imposes. Anything more is device time it did not ask for, and is not owed (start-time
    // fair queueing's clamp, with that allowance).
    let floor = Infinity;
    for (const id in s.vms) {
      if (id === vm) continue;
      const o = s.vms[id]!;
      if (s.running !== id && !this.contends(id, o, now)) continue;
      floor = Math.min(floor, o.vt);
    }
    if (floor === Infinity) return;
    let allowance = s.slackNs / v.weight;
    for (const id in s.vms) if (id !== vm) allowance = Math.max(allowance, s.vms[id]!.estNs / s.vms[id]!.weight + s.slackNs / v.weight);
    if (v.vt < floor - allowance) v.vt = floor - allowance;
  }

  protected override dispatched(_vm: VmId, v: FairVmState, now: number): void {
    v.lastDispatchNs = now;
  }

  protected completed(vm: VmId, v: FairVmState, deviceNs: number, now: number): void {
    const s = this.s;
    v.vt += deviceNs / v.weight;
    if (deviceNs > 0) v.estNs = deviceNs;
    else if (s.turnVm === vm && v.turnFrame === s.frame) {
      v.turnFrame = -1; // a turn that used no device time is given back
      v.turns--;
    }
    s.turnVm = null;
    v.holdBudgetNs = Math.min(s.holdCapNs, v.holdBudgetNs + s.holdRatio * deviceNs);
    v.gapUntilNs = v.holdBudgetNs > 0 ? now + v.holdBudgetNs : null;
  }

  protected override onRemoved(vm: VmId): void {
    if (this.s.holdVm === vm) this.s.holdVm = null;
    if (this.s.turnVm === vm) this.s.turnVm = null;
  }

  // ---- the decision ----

  /** Work queued, or in its doorbell gap within its budget: it wants the device. */
  private contends(id: VmId, v: FairVmState, now: number): boolean {
    return v.pending > 0 || (v.gapUntilNs !== null && now < v.gapUntilNs && this.isActive(id, v, now));
  }

  /** Rule 2: after its expected submission, vm is at most the slack ahead of every other contender. */
  private eligible(id: VmId, v: FairVmState, now: number): boolean {
    const after = v.vt + (v.estNs - this.s.slackNs) / v.weight;
    for (const oid in this.s.vms) {
      if (oid === id) continue;
      const o = this.s.vms[oid]!;
      if (after > o.vt && this.contends(oid, o, now)) return false;
    }
    return true;
  }

  private endHold(now: number): void {
    const s = this.s;
    const v = s.holdVm === null ? undefined : s.vms[s.holdVm];
    if (v) {
      const held = Math.max(0, now - s.holdSinceNs);
      v.holdBudgetNs = Math.max(-s.holdCapNs, v.holdBudgetNs - held);
      v.heldNs += held;
    }
    s.holdVm = null;
  }

  /** Lower vt first, then the one served least recently. */
  private before(a: FairVmState, b: FairVmState | null): boolean {
    return b === null || a.vt < b.vt || (a.vt === b.vt && a.lastDispatchNs < b.lastDispatchNs);
  }

  private closeRound(now: number): void {
    const s = this.s;
    if (s.roundStartNs === null) return;
    if (s.rounds.length <= s.maxFrames) s.rounds.push(now - s.roundStartNs);
    s.roundStartNs = null;
  }

  protected decide(now: number): Pick {
    const s = this.s;
    const wasHeld = s.holdVm;
    this.endHold(now);
    // Rule 2: the lowest-vt VM with work that may start now.
    let pick: VmId | null = null;
    let anyPending = false;
    for (const id in s.vms) {
      const v = s.vms[id]!;
      if (v.pending === 0) continue;
      anyPending = true;
      if (this.before(v, pick === null ? null : s.vms[pick]!) && this.eligible(id, v, now)) pick = id;
    }
    if (pick !== null) return pick;
    if (!anyPending) return null;
    // Rule 3: hold for a VM in its gap that could start if it rang (the lowest-vt one).
    let hold: VmId | null = null;
    let least: VmId | null = null; // the least-served contender
    for (const id in s.vms) {
      const v = s.vms[id]!;
      if (!this.contends(id, v, now)) continue;
      if (this.before(v, least === null ? null : s.vms[least]!)) least = id;
      if (v.pending > 0 || v.holdBudgetNs <= 0) continue;
      if (this.before(v, hold === null ? null : s.vms[hold]!) && this.eligible(id, v, now)) hold = id;
    }
    // Rule 4: the least-served contender gets a turn (one per frame); if it is in its gap, the
    // device waits for its doorbell as for rule 3; if its turn is used, for the next frame.
    const lv = s.vms[least!]!;
    if (hold === null && lv.pending === 0 && lv.holdBudgetNs > 0) hold = least;
    if (hold !== null) {
      const v = s.vms[hold]!;
      if (hold !== wasHeld) v.holds++;
      s.holdVm = hold;
      s.holdSinceNs = now;
      return { waitUntil: Math.min(v.gapUntilNs!, now + v.holdBudgetNs) };
    }
    if (lv.pending > 0 && lv.turnFrame !== s.frame) {
      lv.turnFrame = s.frame;
      lv.turns++;
      s.turnVm = least;
      if (s.roundFrame !== s.frame) {
        // The first turn of this frame: the previous round (if still open) overran into it.
        this.closeRound(now);
        s.roundStartNs = now;
        s.roundFrame = s.frame;
      }
      return least;
    }
    this.closeRound(now);
    return { waitUntil: s.frameStartNs! + this.frameNs };
  }
}
