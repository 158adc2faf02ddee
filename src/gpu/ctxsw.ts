// The engine's context switch for a program device that cannot switch a running program out
// (hw-spec §3.4 "Preempt", docs/architecture.md "What bounds a neighbour's stall").
//
// A GPU does not time-slice a compute program that never ends against other contexts: measured
// with bench/vulkan-timeslice.c, the H200's driver neither preempts it for another VkDevice of
// the same process, of another instance nor of another process — the other context waits until
// the driver gives up on the switch and kills the spinning one (Xid 109, CTX SWITCH TIMEOUT),
// seconds later. So on such a device the engine does the switch itself, as a host driver does
// when a preempt times out, but with a bound it chooses: GPU jobs of different owners (VMs)
// never overlap on the device (a second owner's job waits here, not on the GPU where it would
// freeze the spinning context and itself), and a guest program that has run a timeslice on the
// device while another owner's job waits is stopped through its cancel word; its channel reports
// CTXSW_TIMEOUT. The timeslice counts from the program's submission to the device, on the pool
// thread (jobPool.preempt): time queued behind its own VM's jobs or staging its buffers is not
// the device's, and a legitimate short program must not be cut for it. Built-in kernels are the
// host's, bounded by their size: they are never cut.
//
// Jobs of the owner holding the device are admitted at once while nobody else waits, so the
// common case is a compare and a counter; with others waiting, admission alternates owners in
// arrival order (an owner's new jobs queue behind the waiters).
//
// A CPU device (lavapipe) does time-slice, but only between its ways: each way is a Vulkan
// instance whose compute threads the host's scheduler shares the cores with, and owners beyond
// the device's ways share one (owner % ways, native/src/vulkan WayContext). Two owners on one
// way are one context to the device, as every owner is on a GPU: an endless program of one holds
// the other's dispatches on that instance's threads. So the engine switches between the owners
// of each way (ContextSwitches: one switch per group of owners the device does not time-slice
// between), and owners on ways of their own never wait here for each other.
import type { ChannelState } from './channel.ts';

/** What a job is to the context switch: not on the program device (native kernels, copies: not
 * switched), a built-in kernel there (switched, never cut), a guest program (cut after a
 * timeslice while another owner waits). */
export const GpuJob = { NONE: 0, BUILTIN: 1, PROGRAM: 2 } as const;
export type GpuJob = (typeof GpuJob)[keyof typeof GpuJob];

export interface ContextSwitchOptions {
  /** How long a guest program may run on the device while another owner's job waits, ms. */
  timesliceMs: number;
  /** Ask the job in flight on `ch` to stop once it has run the timeslice on the device (the
   * channel is flagged ctxswCut first: a stop then reports CTXSW_TIMEOUT). */
  preempt(ch: ChannelState, timesliceMs: number): void;
}

interface Waiter {
  owner: number;
  run: () => boolean;
}

/** The engine's context switches: one per group of owners that the device does not time-slice
 * between (a GPU: all owners, one group; a CPU device: the owners of one way). */
export class ContextSwitches {
  readonly timesliceMs: number;
  /** Guest programs stopped for another owner (counted by the command processor). */
  cuts = 0;
  private readonly groups: ContextSwitch[];

  constructor(opts: ContextSwitchOptions, groups: number) {
    this.timesliceMs = opts.timesliceMs;
    this.groups = Array.from({ length: Math.max(1, groups) }, () => new ContextSwitch(opts));
  }

  /** Whether one switch covers every owner (a GPU): every job of another VM waits here. */
  get wholeDevice(): boolean {
    return this.groups.length === 1;
  }

  /** The switch that `owner`'s jobs go through (owner % groups: the device's way). */
  of(owner: number): ContextSwitch {
    return this.groups[owner % this.groups.length]!;
  }
}

export class ContextSwitch {
  readonly timesliceMs: number;
  private holder = -1;
  private held = 0;
  /** The holder's guest programs in flight. */
  private programs: ChannelState[] = [];
  private waiting: Waiter[] = [];
  private readonly preempt: (ch: ChannelState, timesliceMs: number) => void;

  constructor(opts: ContextSwitchOptions) {
    this.timesliceMs = opts.timesliceMs;
    this.preempt = opts.preempt;
  }

  /** Run `run` now (true) or once the device is this owner's (false). `run` returns whether it
   * started a job (a channel stopped meanwhile starts none). */
  enter(owner: number, run: () => boolean): boolean {
    if (this.holder < 0 || (this.holder === owner && this.waiting.length === 0)) {
      this.holder = owner;
      this.held++;
      return true;
    }
    this.waiting.push({ owner, run });
    for (const ch of this.programs) this.cut(ch);
    return false;
  }

  /** A job admitted by enter() is in flight on `ch`. */
  started(ch: ChannelState, kind: GpuJob): void {
    if (kind !== GpuJob.PROGRAM) return;
    this.programs.push(ch);
    if (this.waiting.length > 0) this.cut(ch);
  }

  /** A job admitted by enter() ended (or never started). */
  leave(ch: ChannelState): void {
    const i = this.programs.indexOf(ch);
    if (i >= 0) this.programs.splice(i, 1);
    if (--this.held > 0) return;
    this.held = 0;
    this.holder = -1;
    this.admit();
  }

  /** The device is free: the first waiter's owner takes it, with every job of that owner queued. */
  private admit(): void {
    while (this.holder < 0 && this.waiting.length > 0) {
      const owner = this.waiting[0]!.owner;
      const mine = this.waiting.filter((w) => w.owner === owner);
      this.waiting = this.waiting.filter((w) => w.owner !== owner);
      this.holder = owner;
      for (const w of mine) {
        this.held++;
        if (!w.run()) this.held--;
      }
      if (this.held === 0) this.holder = -1;
    }
    // Jobs still waiting (another owner's) bound the new holder's programs as well.
    if (this.waiting.length > 0) for (const ch of this.programs) this.cut(ch);
  }

  private cut(ch: ChannelState): void {
    if (ch.ctxswCut) return;
    ch.ctxswCut = true;
    this.preempt(ch, this.timesliceMs);
  }
}
