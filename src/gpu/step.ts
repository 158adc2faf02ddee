// What the command processor (cp.ts) and its classes (copy.ts, compute.ts) share: the result of
// executing one method, a launch's completion actions, and the part of the command processor a
// class may use. A leaf module, so the classes never import the command processor itself.
import type { GpuJob } from './ctxsw.ts';
import type { ChannelState } from './channel.ts';
import type { Extent } from './bus.ts';
import type { GpuCore } from './core.ts';
import type { JobResult } from './jobs.ts';
import type { DispatchJob, ProgramCache } from './programs.ts';
import type { WindowCache } from './windows.ts';
import type { FaultUnit } from './spec.ts';

/** Result of executing one method. */
export const CONTINUE = 0;
export const BLOCK = 1;
export const STOP = 2;
/** The channel now waits for its batch of launches (cp.ts flushBatch): run this method again
 * once the batch is done (the command processor puts the cursor back before it). */
export const RETRY = 3;
export type Step = typeof CONTINUE | typeof BLOCK | typeof STOP | typeof RETRY;

/** What a launch does when its job has completed (hw-spec §6.1 LAUNCH_DMA bits 3–6). */
export interface PostOp {
  semType: number; // 0 none, 1 one word, 2 four words
  interrupt: boolean;
  va: number;
  payload: number;
}

/** The command processor as a class sees it. */
export interface ClassContext {
  readonly core: GpuCore;
  readonly windows: WindowCache;
  readonly programs: ProgramCache | null;
  readonly builtinsOnPrograms: boolean;
  error(ch: ChannelState, code: number): Step;
  programError(ch: ChannelState, reason: number): Step;
  postOp(flags: number, sem: { hi: number; lo: number; payload: number }): PostOp | null;
  completeNow(ch: ChannelState, post: PostOp): Step;
  readVa(ch: ChannelState, va: number, length: number, unit: FaultUnit): Uint8Array | null;
  writeVa(ch: ChannelState, va: number, bytes: Uint8Array, unit: FaultUnit): boolean;
  translate(ch: ChannelState, va: number, length: number, write: boolean, unit: FaultUnit): Extent[] | null;
  /** Block the channel on a job; `gpu` says what it is to the context switch (ctxsw.ts). */
  startJob(ch: ChannelState, submit: (watchdogMs: number, done: (r: JobResult) => void) => number,
           post: PostOp, cleanup: () => void, gpu?: GpuJob): Step;
  waitProgram(ch: ChannelState): (compileNs: number, relaunch: () => Step) => void;
  blockOnProgram(ch: ChannelState): Step;
  /** A checked guest-program launch: added to the channel's batch (hw-spec §6.3 "Batched
   * launches"), which runs as one job at the next synchronization point; CONTINUE, or BLOCK
   * when the batch went to the device now. */
  queueDispatch(ch: ChannelState, job: DispatchJob, post: PostOp, cleanup: () => void): Step;
  /** Whether launches of the channel wait in its batch. */
  batched(ch: ChannelState): boolean;
  /** The channel's batch to the device now: RETRY (the method runs again after it). */
  flushBatch(ch: ChannelState): Step;
}

export type ClassMethod = (cp: ClassContext, ch: ChannelState, method: number, data: number) => Step;
