// The engine's side of the native job pool: one process-wide pool (started when the first
// engine needs it, stopped when the last one closes), completions routed by job id, the
// watchdog that cancels a job running longer than its limit, and completion polling.
import { performance } from 'node:perf_hooks';
import { native, type CopyJob, type DispatchJob, type JobCompletion, type KernelJob, type ProgramCompileJob } from '../native.ts';
import type { DispatchJob as ProgramDispatch } from './programs.ts';

export interface JobResult {
  /** 0, or a negative errno (-ECANCELED after a cancel). */
  status: number;
  deviceNs: number;
  /** The watchdog cancelled the job. */
  timedOut: boolean;
  /** A batch of launches: how many completed before `status` (all of them on success). */
  part?: number;
}

type Done = (r: JobResult) => void;

interface Pending {
  done: Done;
  timer: NodeJS.Timeout | null;
  timedOut: boolean;
}

const pending = new Map<number, Pending>();
let users = 0;
let started = false;

// Completion polling, KVM's halt_poll_ns for the JS thread: a pool thread's completion reaches
// JS through an eventfd, and a JS thread asleep in epoll for a GPU launch's half millisecond
// wakes late (docs/architecture.md, "Completion polling", has the measured gain). While jobs are in
// flight the loop turns with setImmediate (epoll with a zero timeout, sockets still served), at
// most pollUs after the last submission or completion; then it sleeps as before. It spends a
// core while it polls, so it is off unless asked for (an engine on a GPU asks: engine.ts).
// The same bound makes a pool thread that just ran a device task poll for the next job
// (native/src/pool.cc, poolSetPoll): a launch then wakes no sleeping thread.
const pollWanted = new Map<object, number>();
let pollUs = 0;
let polling = false;
let pollSince = 0; // performance.now() ms: no BigInt per launch
const pollCounts = { started: 0, completed: 0, expired: 0 };

function pollTick(): void {
  if (pending.size === 0) {
    polling = false;
    pollCounts.completed++;
  } else if (pollUs === 0 || (performance.now() - pollSince) * 1000 > pollUs) {
    polling = false;
    pollCounts.expired++;
  } else {
    setImmediate(pollTick);
  }
}

function pollFromNow(): void {
  if (pollUs === 0) return;
  pollSince = performance.now();
  if (polling) return;
  polling = true;
  pollCounts.started++;
  setImmediate(pollTick);
}

function onComplete(batch: JobCompletion[]): void {
  for (const c of batch) {
    const p = pending.get(c.job);
    if (!p) continue;
    pending.delete(c.job);
    if (p.timer) clearTimeout(p.timer);
    // The watchdog stops a job that overran; one that completed anyway (its cancel came too late
    // to matter) kept its results and is not failed for it.
    p.done({ status: c.status, deviceNs: c.deviceNs, timedOut: p.timedOut && c.status !== 0, part: c.part });
  }
  if (pending.size > 0) pollFromNow(); // the next job of the batch runs now
  if (users === 0 && pending.size === 0) setImmediate(maybeStop);
}

function maybeStop(): void {
  if (users === 0 && started && pending.size === 0) {
    native.poolStop();
    started = false;
  }
}

/** The pool threads' poll after a device task: the completion-poll budget (at most 10 ms), or
 * VUGPU_POOL_POLL_US (A/B measurement; 0 = off). */
function poolPollUs(): number {
  const env = process.env.VUGPU_POOL_POLL_US?.trim();
  const v = Number(env);
  return env && Number.isInteger(v) && v >= 0 && v <= 10_000 ? v : Math.min(pollUs, 10_000);
}

/** Threads per way of the pool (VUGPU_POOL_THREADS, default 2): each VM's jobs run on threads of
 * their own (native/src/pool.cc, "Ways"), so one VM's job that never ends holds none of another's. */
function poolThreads(): number {
  const n = Number(process.env.VUGPU_POOL_THREADS ?? 2);
  return Number.isInteger(n) && n >= 1 && n <= 8 ? n : 2;
}

export const jobPool = {
  acquire(): void {
    users++;
    if (!started) {
      native.poolStart(poolThreads(), onComplete);
      started = true;
    }
  },

  release(): void {
    users = Math.max(0, users - 1);
    maybeStop();
  },

  submitKernel(job: KernelJob, watchdogMs: number, done: Done): number {
    return track(guard(() => native.submitKernel(job)), watchdogMs, done);
  },

  submitCopy(job: CopyJob, watchdogMs: number, done: Done): number {
    return track(guard(() => native.submitCopy(job)), watchdogMs, done);
  },

  /** Compile a SPIR-V program into a slot (the Vulkan backend; see native.ts). */
  submitProgramCompile(job: ProgramCompileJob, watchdogMs: number, done: Done): number {
    return track(guard(() => native.submitProgramCompile(job)), watchdogMs, done);
  },

  /** Launch a slot's program; the watchdog's cancel reaches it through its cancel word. */
  submitDispatch(job: DispatchJob, watchdogMs: number, done: Done): number {
    return track(guard(() => native.submitDispatch(job)), watchdogMs, done);
  },

  /** One channel's launches in order as one job (native DispatchBatch), all on jobs[0].way. */
  submitDispatchBatch(jobs: ProgramDispatch[], watchdogMs: number, done: Done): number {
    return track(guard(() => {
      const { meta, params } = packBatch(jobs);
      return native.submitDispatchBatch(meta, params, jobs[0]?.way ?? 0);
    }), watchdogMs, done);
  },

  cancel(id: number): void {
    if (pending.has(id)) native.cancelJob(id);
  },

  /** Stop the job's program once it has run `afterMs` on the device since its submission (the
   * context switch, ctxsw.ts: time queued or staging does not count). */
  preempt(id: number, afterMs: number): void {
    if (pending.has(id)) native.preemptJob(id, Math.max(1, Math.round(afterMs * 1e6)));
  },

  get inFlight(): number {
    return pending.size;
  },

  /** Ask for completion polling of up to `us` µs (0 = none) on behalf of `owner`; the pool
   * polls for the largest wish of its owners. */
  setCompletionPoll(owner: object, us: number): void {
    if (us > 0) pollWanted.set(owner, us);
    else pollWanted.delete(owner);
    pollUs = 0;
    for (const v of pollWanted.values()) pollUs = Math.max(pollUs, v);
    native.poolSetPoll(poolPollUs());
  },

  get completionPollUs(): number {
    return pollUs;
  },

  /** Polls begun, ended by a completion (none left in flight), and ended by the bound. */
  get pollCounts(): Readonly<typeof pollCounts> {
    return pollCounts;
  },

  /** The pool threads' polls after device tasks: those that found the next job, and those that
   * ended at the bound. */
  get poolPollCounts(): { hits: number; misses: number } {
    return native.poolStats().polls;
  },
};

/** A batch as native.submitDispatchBatch reads it: per launch [slot, n, grid ×3, resident mask
 * (-1: no VRAM offsets), params offset, params length], then n × [address, length, VRAM offset]
 * (host addresses are below 2^53). Built-in launches are never batched (no plan fields here). */
function packBatch(jobs: ProgramDispatch[]): { meta: Float64Array; params: Uint8Array } {
  let words = 0;
  let bytes = 0;
  for (const j of jobs) {
    words += 8 + 3 * j.windows.length;
    bytes += j.params.length;
  }
  const meta = new Float64Array(words);
  const params = new Uint8Array(bytes);
  let w = 0;
  let p = 0;
  for (const j of jobs) {
    const n = j.windows.length;
    meta[w] = j.slot;
    meta[w + 1] = n;
    meta[w + 2] = j.grid[0];
    meta[w + 3] = j.grid[1];
    meta[w + 4] = j.grid[2];
    meta[w + 5] = j.vram ? (j.resident ?? 0) : -1;
    meta[w + 6] = p;
    meta[w + 7] = j.params.length;
    params.set(j.params, p);
    p += j.params.length;
    w += 8;
    for (let i = 0; i < n; i++, w += 3) {
      meta[w] = Number(j.windows[i]!);
      meta[w + 1] = j.lengths[i]!;
      meta[w + 2] = j.vram ? j.vram[i]! : -1;
    }
  }
  return { meta, params };
}

/** A submit that throws (argument validation in the addon) becomes a failed job, never an
 * exception through the MMIO path. */
function guard(submit: () => number): number {
  try {
    return submit();
  } catch {
    return -22; // EINVAL
  }
}

function track(id: number, watchdogMs: number, done: Done): number {
  if (id < 0) {
    // Submission refused: report it as a completion on the next tick (never re-entrantly).
    setImmediate(() => done({ status: id, deviceNs: 0, timedOut: false }));
    return id;
  }
  const p: Pending = { done, timer: null, timedOut: false };
  if (watchdogMs > 0) {
    p.timer = setTimeout(() => {
      p.timedOut = true;
      native.cancelJob(id);
    }, watchdogMs);
    p.timer.unref();
  }
  pending.set(id, p);
  pollFromNow();
  return id;
}
