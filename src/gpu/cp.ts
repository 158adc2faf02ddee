// The command processor (hw-spec §4–§6): fetches GPFIFO entries of runnable channels, decodes
// pushbuffer method headers, executes host methods and hands class methods to the copy and
// compute classes. Every method is validated; anything wrong stops only that channel.
// Work is bounded per turn so a huge pushbuffer cannot stall the event loop.
import type { GpuCore } from './core.ts';
import { recordFault, type Fault, type Mmu } from './mmu.ts';
import type { Pfifo } from './pfifo.ts';
import { WAIT_ACQUIRE, WAIT_JOB, WAIT_NONE, WAIT_PROGRAM, type ChannelState, type Cursor } from './channel.ts';
import type { Extent } from './bus.ts';
import { readExtents, writeExtents } from './bus.ts';
import { jobPool, type JobResult } from './jobs.ts';
import {
  CHAN_ERR, CLASS_COMPUTE, CLASS_COPY, GPFIFO_ENTRY_SIZE, GPFIFO_MAX_DWORDS, HOST,
  HOST_METHOD_LIMIT, IRQ_MMU_FAULT, SEC_OP, SEM_OP, SEM_RELEASE_16BYTE, SEM_RELEASE_INTERRUPT,
  UNIT, USERD, type FaultUnit,
} from './spec.ts';
import { WindowCache } from './windows.ts';
import type { DispatchJob, ProgramCache } from './programs.ts';
import { copyMethod } from './copy.ts';
import { BLOCK, CONTINUE, RETRY, STOP, type ClassContext, type ClassMethod, type PostOp, type Step } from './step.ts';

import { computeMethod } from './compute.ts';
import { GpuJob, type ContextSwitches } from './ctxsw.ts';

/** Methods executed per pump turn before yielding to the event loop. */
const TURN_BUDGET = 65536;
const NO_POST: PostOp = { semType: 0, interrupt: false, va: 0, payload: 0 };

/** Launches in one batch at most (hw-spec §6.3 "Batched launches"): VUGPU_BATCH_LAUNCHES,
 * 1 = every launch its own job (A/B). */
function batchLaunches(): number {
  const v = Number(process.env.VUGPU_BATCH_LAUNCHES ?? 64);
  return Number.isInteger(v) && v >= 1 && v <= 1024 ? v : 64;
}

/** A channel's program launches since its last synchronization point, not yet on the device. */
interface Batch {
  jobs: DispatchJob[];
  cleanups: (() => void)[];
  /** Where each launch was (error reports name the one that failed). */
  wheres: number[];
}
const ACQUIRE_POLL_MS = 1;
const ECANCELED = 125;
const EAGAIN = 11;
const ELOOP = 40;
const ENODEV = 19;
const TWO32 = 0x1_0000_0000;

/** Host methods that only set state: they run beside a waiting batch. */
const BATCH_SAFE_HOST = new Set<number>([HOST.SET_OBJECT, HOST.NOP, HOST.SEMAPHORE_A, HOST.SEMAPHORE_B, HOST.SEMAPHORE_C]);

const CLASSES = new Map<number, ClassMethod>([
  [CLASS_COPY, copyMethod],
  [CLASS_COMPUTE, computeMethod],
]);

export class CommandProcessor implements ClassContext {
  readonly core: GpuCore;
  readonly mmu: Mmu;
  readonly fifo: Pfifo;
  watchdogMs: number;
  /** Jobs of this engine in flight. */
  inFlight = 0;
  /** Compute buffer windows (VRAM-only windows are reused across launches). */
  readonly windows: WindowCache;
  /** Compiled guest programs per owner, on the program backend; null = no program device
   * (PROG_VERSION 0: program launches are BAD_PROGRAM/UNSUPPORTED). */
  programs: ProgramCache | null = null;
  /** Run KERNEL_ID launches as the built-ins' SPIR-V on the program backend (--engine vulkan). */
  builtinsOnPrograms = false;
  /** The program device's jobs go through these where the device cannot switch a running
   * program out for another owner's: on a GPU between all owners, on a CPU device between the
   * owners of one way (ctxsw.ts); null = no timeslice (timesliceMs 0). */
  ctxsw: ContextSwitches | null = null;
  /** Launches per batch at most (1: none batched). */
  batchLaunches = batchLaunches();
  /** Batches run and the launches in them (/metrics; tests). */
  readonly batchStats = { batches: 0, launches: 0, yields: 0 };
  private ready = new Set<ChannelState>();
  /** No method runs while halted (a live upgrade's handover: jobs in flight finish, nothing new
   * starts, so the last checkpoint is exact wherever a channel stands in its pushbuffer). */
  private halted = false;
  private pumping = false;
  private pumpQueued = false;
  /** Segment words of each channel's current GPFIFO entry (transient, not state). */
  private words: (Uint32Array | null)[];
  private acquirers = new Set<ChannelState>();
  /** Per channel, its batch of launches (null: none waiting). */
  private batches: (Batch | null)[];
  private acquireTimer: NodeJS.Timeout | null = null;
  /** (GP_GET << 16 | subch << 13 | method >> 2) of the method being executed. */
  private where = 0;
  private poolHeld = false;

  constructor(core: GpuCore, mmu: Mmu, fifo: Pfifo, watchdogMs: number) {
    this.core = core;
    this.mmu = mmu;
    this.fifo = fifo;
    this.watchdogMs = watchdogMs;
    this.words = fifo.channels.map(() => null);
    this.batches = fifo.channels.map(() => null);
    this.windows = new WindowCache(core.vram.fd);
  }

  // ---- scheduling ----

  schedule(ch: ChannelState): void {
    this.ready.add(ch);
    if (!this.pumping) this.pump();
  }

  private pump = (): void => {
    this.pumpQueued = false;
    if (this.pumping) return;
    this.pumping = true;
    let budget = TURN_BUDGET;
    try {
      while (!this.halted && this.ready.size > 0 && budget > 0) {
        const ch = this.ready.values().next().value!;
        this.ready.delete(ch);
        const used = this.run(ch, budget);
        budget -= used;
        // A channel that used its whole budget goes to the back of the queue.
        if (budget <= 0 && this.fifo.runnable(ch) && ch.wait === WAIT_NONE) this.ready.add(ch);
      }
    } finally {
      this.pumping = false;
    }
    if (!this.halted && this.ready.size > 0 && !this.pumpQueued) {
      this.pumpQueued = true;
      setImmediate(this.pump);
    }
  };

  /** Execute up to `budget` methods of one channel; returns how many were used. A batch of
   * launches never outlives the turn: it goes to the device when the turn ends. */
  private run(ch: ChannelState, budget: number): number {
    const used = this.runMethods(ch, budget);
    if (this.batches[ch.chid] !== null) {
      if (this.fifo.runnable(ch) && ch.wait === WAIT_NONE) this.flushBatch(ch);
      else this.dropBatch(ch);
    }
    return used;
  }

  private runMethods(ch: ChannelState, budget: number): number {
    if (!this.fifo.runnable(ch)) return 1;
    if (ch.wait === WAIT_ACQUIRE) {
      // A doorbell re-evaluates a pending acquire at once (the CPU may have written the value).
      if (ch.kicked) this.core.listener.translating?.(ch.chid);
      const met = this.acquireMet(ch);
      if (!met) return 1;
      ch.wait = WAIT_NONE;
      this.acquirers.delete(ch);
    }
    if (ch.wait !== WAIT_NONE) return 1;
    if (ch.kicked) {
      ch.kicked = false;
      const put = this.mmu.physRead(ch.userdTarget, ch.userdAddr + USERD.GP_PUT, 4);
      if (!put) {
        this.fifo.fail(ch, CHAN_ERR.BAD_INSTANCE, 0);
        return 1;
      }
      const v = put[0]! | (put[1]! << 8) | (put[2]! << 16) | (put[3]! << 24);
      if (v >>> 0 >= ch.gpEntries) {
        this.fifo.fail(ch, CHAN_ERR.BAD_GPFIFO_ENTRY, (ch.gpGet & 0xffff) << 16);
        return 1;
      }
      ch.gpPut = v >>> 0;
      // Nothing new and nothing left: this read of GP_PUT translates nothing.
      if (ch.gpPut !== ch.gpGet || ch.cursor) this.core.listener.translating?.(ch.chid);
    }
    let used = 0;
    while (used < budget) {
      if (!this.fifo.runnable(ch) || ch.wait !== WAIT_NONE) return used + 1;
      if (!ch.cursor) {
        if (ch.gpGet === ch.gpPut) {
          this.maybeIdle(ch);
          return used + 1;
        }
        ch.busy = true;
        if (!this.fetch(ch)) return used + 1;
      }
      const cur = ch.cursor!;
      if (cur.remaining === 0 && cur.pos >= cur.dwords) {
        // GP_GET passes an entry once its work has finished (hw-spec §4): its batch runs first.
        if (this.batches[ch.chid] !== null) {
          this.flushBatch(ch);
          return used + 1;
        }
        this.finishEntry(ch);
        used++;
        continue;
      }
      const step = this.step(ch, cur);
      used++;
      if (step !== CONTINUE) return used;
    }
    return used;
  }

  private maybeIdle(ch: ChannelState): void {
    if (!ch.busy) return;
    ch.busy = false;
    const ns = ch.busyNs;
    ch.busyNs = 0;
    this.core.listener.channelIdle?.(ch.chid, ns, ch.deviceNs);
  }

  /** Load the GPFIFO entry at GP_GET and its pushbuffer segment. */
  private fetch(ch: ChannelState): boolean {
    this.where = (ch.gpGet & 0xffff) << 16;
    const ent = this.readVa(ch, ch.gpBase + ch.gpGet * GPFIFO_ENTRY_SIZE, GPFIFO_ENTRY_SIZE, UNIT.HOST);
    if (!ent) return false;
    const dv = new DataView(ent.buffer, ent.byteOffset, 8);
    const w0 = dv.getUint32(0, true);
    const w1 = dv.getUint32(4, true);
    const dwords = (w1 >>> 10) & 0x1fffff;
    if ((w0 & 3) !== 0 || dwords === 0 || dwords > GPFIFO_MAX_DWORDS || (w1 & 0x100) !== 0) {
      this.fifo.fail(ch, CHAN_ERR.BAD_GPFIFO_ENTRY, this.where);
      return false;
    }
    const segVa = w0 + (w1 & 0xff) * TWO32;
    const bytes = this.readVa(ch, segVa, dwords * 4, UNIT.HOST);
    if (!bytes) return false;
    this.words[ch.chid] =
      (bytes.byteOffset & 3) === 0
        ? new Uint32Array(bytes.buffer, bytes.byteOffset, dwords)
        : new Uint32Array(bytes.slice().buffer);
    ch.cursor = { segVa, dwords, pos: 0, remaining: 0, method: 0, subch: 0, op: 0 };
    return true;
  }

  private finishEntry(ch: ChannelState): void {
    ch.cursor = null;
    this.words[ch.chid] = null;
    ch.gpGet = (ch.gpGet + 1) % ch.gpEntries;
    const b = new Uint8Array(4);
    new DataView(b.buffer).setUint32(0, ch.gpGet, true);
    if (!this.mmu.physWrite(ch.userdTarget, ch.userdAddr + USERD.GP_GET, b)) {
      this.fifo.fail(ch, CHAN_ERR.BAD_INSTANCE, 0);
    }
  }

  /** Decode one header or execute one data word. */
  private step(ch: ChannelState, cur: Cursor): Step {
    // Where the cursor stood: a method that must wait for the channel's batch runs again.
    const pos = cur.pos, remaining = cur.remaining, method = cur.method, op = cur.op;
    const st = this.decode(ch, cur);
    if (st !== RETRY) return st;
    cur.pos = pos;
    cur.remaining = remaining;
    cur.method = method;
    cur.op = op;
    return BLOCK;
  }

  private decode(ch: ChannelState, cur: Cursor): Step {
    const words = this.words[ch.chid]!;
    if (cur.remaining === 0) {
      const hdr = words[cur.pos++]!;
      const op = hdr >>> 29;
      const subch = (hdr >>> 13) & 7;
      const method = (hdr & 0xfff) << 2;
      const count = (hdr >>> 16) & 0x1fff;
      this.where = ((ch.gpGet & 0xffff) << 16) | (subch << 13) | (hdr & 0xfff);
      if ((hdr & 0x1000) !== 0) return this.error(ch, CHAN_ERR.BAD_OPCODE);
      switch (op) {
        case SEC_OP.IMMD:
          return this.exec(ch, subch, method, count);
        case SEC_OP.INC:
        case SEC_OP.NON_INC:
        case SEC_OP.INC_ONCE:
          if (count > cur.dwords - cur.pos) return this.error(ch, CHAN_ERR.PB_TRUNCATED);
          cur.remaining = count;
          cur.method = method;
          cur.subch = subch;
          cur.op = op;
          return CONTINUE;
        case SEC_OP.END_PB_SEGMENT:
          cur.pos = cur.dwords;
          return CONTINUE;
        default:
          return this.error(ch, CHAN_ERR.BAD_OPCODE);
      }
    }
    const data = words[cur.pos++]!;
    cur.remaining--;
    const method = cur.method;
    if (cur.op === SEC_OP.INC) cur.method += 4;
    else if (cur.op === SEC_OP.INC_ONCE) {
      cur.method += 4;
      cur.op = SEC_OP.NON_INC;
    }
    this.where = ((ch.gpGet & 0xffff) << 16) | (cur.subch << 13) | ((method >> 2) & 0xfff);
    if (method > 0x3ffc) return this.error(ch, CHAN_ERR.BAD_METHOD);
    return this.exec(ch, cur.subch, method, data);
  }

  private exec(ch: ChannelState, subch: number, method: number, data: number): Step {
    if (method < HOST_METHOD_LIMIT) {
      if (this.batches[ch.chid] !== null && !BATCH_SAFE_HOST.has(method)) return this.flushBatch(ch);
      return this.host(ch, subch, method, data);
    }
    const cls = ch.subch[subch]!;
    // Compute methods only set state, and a LAUNCH decides for itself (compute.ts); anything
    // else may read what the batch writes.
    if (this.batches[ch.chid] !== null && cls !== CLASS_COMPUTE) return this.flushBatch(ch);
    const handler = CLASSES.get(cls);
    if (!handler) return this.error(ch, CHAN_ERR.NO_OBJECT);
    return handler(this, ch, method, data);
  }

  // ---- host methods (hw-spec §5.2) ----

  private host(ch: ChannelState, subch: number, method: number, data: number): Step {
    const s = ch.host;
    switch (method) {
      case HOST.SET_OBJECT:
        if (!CLASSES.has(data)) return this.error(ch, CHAN_ERR.BAD_CLASS);
        ch.subch[subch] = data;
        return CONTINUE;
      case HOST.NOP:
      case HOST.WFI:
        return CONTINUE;
      case HOST.SEMAPHORE_A:
        s.hi = data & 0xff;
        return CONTINUE;
      case HOST.SEMAPHORE_B:
        s.lo = data >>> 0;
        return CONTINUE;
      case HOST.SEMAPHORE_C:
        s.payload = data >>> 0;
        return CONTINUE;
      case HOST.SEMAPHORE_D:
        return this.semaphore(ch, data);
      case HOST.NON_STALL_INTERRUPT:
        this.fifo.fence(ch);
        return CONTINUE;
      case HOST.SET_REFERENCE: {
        const b = new Uint8Array(4);
        new DataView(b.buffer).setUint32(0, data >>> 0, true);
        if (!this.mmu.physWrite(ch.userdTarget, ch.userdAddr + USERD.REF, b)) return this.error(ch, CHAN_ERR.BAD_INSTANCE);
        return CONTINUE;
      }
      default:
        return this.error(ch, CHAN_ERR.BAD_METHOD);
    }
  }

  private semaphore(ch: ChannelState, d: number): Step {
    const s = ch.host;
    const va = s.hi * TWO32 + s.lo;
    const op = d & 0xf;
    if ((d & ~(0xf | SEM_RELEASE_INTERRUPT | SEM_RELEASE_16BYTE)) !== 0) return this.error(ch, CHAN_ERR.BAD_METHOD_DATA);
    if (op === SEM_OP.RELEASE) {
      const big = (d & SEM_RELEASE_16BYTE) !== 0;
      if (va % (big ? 16 : 4) !== 0) return this.error(ch, CHAN_ERR.BAD_METHOD_DATA);
      const ok = this.release(ch, { semType: big ? 2 : 1, interrupt: (d & SEM_RELEASE_INTERRUPT) !== 0, va, payload: s.payload });
      return ok ? CONTINUE : STOP;
    }
    if (op === SEM_OP.ACQUIRE || op === SEM_OP.ACQ_GEQ) {
      if (va % 4 !== 0) return this.error(ch, CHAN_ERR.BAD_METHOD_DATA);
      ch.acquire = { va, payload: s.payload, geq: op === SEM_OP.ACQ_GEQ };
      const met = this.acquireMet(ch);
      if (met === null) return STOP;
      if (met) return CONTINUE;
      ch.wait = WAIT_ACQUIRE;
      this.pollAcquire(ch);
      return BLOCK;
    }
    return this.error(ch, CHAN_ERR.BAD_METHOD_DATA);
  }

  private pollAcquire(ch: ChannelState): void {
    this.acquirers.add(ch);
    if (!this.acquireTimer) {
      this.acquireTimer = setInterval(() => this.recheckAcquires(), ACQUIRE_POLL_MS);
      this.acquireTimer.unref();
    }
  }

  /**
   * After a restore (gpu/persist.ts): rebuild what the command processor keeps beside a
   * channel's plain state — the words of the segment being decoded (re-read from memory; a
   * fault stops the channel as a fetch would) and the semaphore-acquire poll.
   */
  resumeChannel(ch: ChannelState): void {
    const cur = ch.cursor;
    if (cur) {
      const bytes = this.readVa(ch, cur.segVa, cur.dwords * 4, UNIT.HOST);
      if (!bytes) return;
      this.words[ch.chid] = (bytes.byteOffset & 3) === 0
        ? new Uint32Array(bytes.buffer, bytes.byteOffset, cur.dwords)
        : new Uint32Array(bytes.slice().buffer);
    }
    if (ch.wait === WAIT_ACQUIRE && ch.error === 0) this.pollAcquire(ch);
  }

  /** true/false = condition, null = the read faulted (channel stopped). */
  private acquireMet(ch: ChannelState): boolean | null {
    const b = this.readVa(ch, ch.acquire.va, 4, UNIT.SEMAPHORE);
    if (!b) return null;
    const v = (b[0]! | (b[1]! << 8) | (b[2]! << 16) | (b[3]! << 24)) >>> 0;
    return ch.acquire.geq ? ((v - ch.acquire.payload) | 0) >= 0 : v === ch.acquire.payload >>> 0;
  }

  recheckAcquires(): void {
    for (const ch of this.acquirers) {
      if (ch.wait !== WAIT_ACQUIRE) {
        this.acquirers.delete(ch);
        continue;
      }
      const met = this.acquireMet(ch);
      if (met === false) continue;
      this.acquirers.delete(ch);
      if (met) {
        ch.wait = WAIT_NONE;
        this.schedule(ch);
      }
    }
    if (this.acquirers.size === 0 && this.acquireTimer) {
      clearInterval(this.acquireTimer);
      this.acquireTimer = null;
    }
  }

  /** Semaphore release (+ optional FENCE interrupt). false if it faulted. */
  release(ch: ChannelState, p: PostOp): boolean {
    if (p.semType !== 0) {
      const bytes = new Uint8Array(p.semType === 2 ? 16 : 4);
      const dv = new DataView(bytes.buffer);
      dv.setUint32(0, p.payload >>> 0, true);
      if (p.semType === 2) dv.setBigUint64(8, this.core.timeNs(), true);
      const ext: Extent[] = [];
      const f = this.mmu.translate(ch, p.va, bytes.length, true, ext);
      if (f) {
        this.fault(ch, f, UNIT.SEMAPHORE);
        return false;
      }
      if (!writeExtents(this.core.vram, ext, bytes)) {
        this.fault(ch, { reason: 5, va: p.va - (p.va % 4096), write: true }, UNIT.SEMAPHORE);
        return false;
      }
    }
    if (p.interrupt) this.fifo.fence(ch);
    if (p.semType !== 0 && this.acquirers.size > 0) this.recheckAcquires();
    return true;
  }

  // ---- helpers for the classes ----

  /** Write through the channel's MMU; false after a fault (the channel stopped). */
  writeVa(ch: ChannelState, va: number, bytes: Uint8Array, unit: FaultUnit): boolean {
    const ext = this.translate(ch, va, bytes.length, true, unit);
    if (!ext) return false;
    if (writeExtents(this.core.vram, ext, bytes)) return true;
    this.fault(ch, { reason: 5, va: va - (va % 4096), write: true }, unit);
    return false;
  }

  /** Translate or fault the channel; null after a fault. */
  translate(ch: ChannelState, va: number, length: number, write: boolean, unit: FaultUnit): Extent[] | null {
    const out: Extent[] = [];
    // A ChannelState is an AddressSpace (pdTarget, pdAddr, limit): no copy per translate.
    const f = this.mmu.translate(ch, va, length, write, out);
    if (f) {
      this.fault(ch, f, unit);
      return null;
    }
    return out;
  }

  /** Read through the channel's MMU; null after a fault. */
  readVa(ch: ChannelState, va: number, length: number, unit: FaultUnit): Uint8Array | null {
    const ext = this.translate(ch, va, length, false, unit);
    if (!ext) return null;
    const vram = this.core.vram;
    if (ext.length === 1 && ext[0]!.fd === vram.fd) return vram.u8.subarray(ext[0]!.offset, ext[0]!.offset + length);
    const buf = new Uint8Array(length);
    if (!readExtents(vram, ext, buf)) {
      this.fault(ch, { reason: 5, va: va - (va % 4096), write: false }, unit);
      return null;
    }
    return buf;
  }

  fault(ch: ChannelState, f: Fault, unit: FaultUnit): void {
    const rec = { ...f, chid: ch.chid, unit };
    recordFault(this.core, rec);
    this.core.guestWarnings.warn(ch.chid, { chid: ch.chid, va: `0x${f.va.toString(16)}`, reason: f.reason, unit, write: f.write }, 'gpu mmu fault');
    this.fifo.fail(ch, CHAN_ERR.MMU_FAULT, this.where);
    this.core.irq.raise(IRQ_MMU_FAULT);
    this.core.listener.fault?.(rec);
  }

  error(ch: ChannelState, code: number): Step {
    this.fifo.fail(ch, code, this.where);
    return STOP;
  }

  /** Parse LAUNCH flags' semaphore/interrupt part into a PostOp (null = invalid). */
  postOp(flags: number, sem: { hi: number; lo: number; payload: number }): PostOp | null {
    const semType = (flags >>> 3) & 3;
    const intr = (flags >>> 5) & 3;
    if (semType === 3 || intr === 3) return null;
    const va = sem.hi * TWO32 + sem.lo;
    if (semType !== 0 && va % (semType === 2 ? 16 : 4) !== 0) return null;
    return { semType, interrupt: intr !== 0, va, payload: sem.payload };
  }

  /** A launch with nothing to run: do its completion actions now. */
  completeNow(ch: ChannelState, post: PostOp): Step {
    return this.release(ch, post) ? CONTINUE : STOP;
  }

  /** Block the channel on a native job; `cleanup` runs when it completes (unmap windows). */
  startJob(ch: ChannelState, submit: (watchdogMs: number, done: (r: JobResult) => void) => number,
           post: PostOp, cleanup: () => void, gpu: GpuJob = GpuJob.NONE, wheres: number[] | null = null,
           resume: ((part: number) => boolean) | null = null): Step {
    if (!this.poolHeld) {
      jobPool.acquire();
      this.poolHeld = true;
    }
    const epoch = ch.epoch;
    const where = wheres ? wheres : this.where;
    ch.wait = WAIT_JOB;
    this.inFlight++;
    const ctxsw = gpu !== GpuJob.NONE && this.ctxsw ? this.ctxsw.of(ch.owner) : null;
    // Without a context switch (kernels and copies on the CPU pool) no second closure per launch.
    if (!ctxsw) {
      ch.job = submit(this.watchdogMs, (r) => {
        this.inFlight--;
        cleanup();
        this.jobDone(ch, epoch, where, r, post, resume);
      });
      return BLOCK;
    }
    // Through the context switch: now, or once another owner's job has left the device.
    const run = (): boolean => {
      if (epoch !== ch.epoch || ch.wait !== WAIT_JOB) {
        // Stopped (error, unbind, reset) while it waited: nothing to run.
        this.inFlight--;
        cleanup();
        return false;
      }
      ch.job = submit(this.watchdogMs, (r) => {
        this.inFlight--;
        ctxsw.leave(ch);
        cleanup();
        this.jobDone(ch, epoch, where, r, post, resume);
      });
      ctxsw.started(ch, gpu);
      return true;
    };
    if (ctxsw.enter(ch.owner, run)) run();
    return BLOCK;
  }

  private jobDone(ch: ChannelState, epoch: number, where: number | number[], r: JobResult, post: PostOp,
                  resume: ((part: number) => boolean) | null = null): void {
    // Device time is spent whether or not anyone still wants the result.
    ch.deviceNs += r.deviceNs;
    ch.busyNs += r.deviceNs;
    const yielded = r.status === -EAGAIN && !r.timedOut && resume !== null;
    ch.jobs += typeof where === 'number' ? 1 : yielded ? (r.part ?? 0) : where.length;
    const cut = ch.ctxswCut;
    ch.ctxswCut = false;
    if (epoch !== ch.epoch || ch.wait !== WAIT_JOB) return;
    ch.job = -1;
    ch.wait = WAIT_NONE;
    // A batch that gave the device to another VM runs its remaining launches as a job of its own,
    // behind that VM's (the context switch admits them in turn).
    if (yielded && resume!(r.part ?? 0)) return;
    // A batch names the launch that ended it.
    this.where = typeof where === 'number' ? where : where[Math.min(r.part ?? 0, where.length - 1)]!;
    if (r.timedOut) {
      this.error(ch, CHAN_ERR.WATCHDOG);
    } else if (cut && r.status !== 0) {
      // The context switch stopped it for another owner (ctxsw.ts); one that completed anyway
      // keeps its results, as after a late watchdog.
      if (this.ctxsw) this.ctxsw.cuts++;
      this.error(ch, CHAN_ERR.CTXSW_TIMEOUT);
    } else if (r.status === -ELOOP) {
      this.error(ch, CHAN_ERR.PROGRAM_LOOP_LIMIT);
    } else if (r.status === -ENODEV) {
      this.error(ch, CHAN_ERR.ENGINE_LOST);
    } else if (r.status < 0) {
      if (r.status !== -ECANCELED) this.core.guestWarnings.warn(ch.chid, { chid: ch.chid, status: r.status }, 'gpu job failed');
      this.error(ch, CHAN_ERR.KERNEL_ERROR);
    } else if (!this.release(ch, post)) {
      // faulted: channel already stopped
    }
    if (ch.error) {
      this.maybeIdle(ch);
      return;
    }
    this.schedule(ch);
  }

  // ---- batched launches (hw-spec §6.3 "Batched launches") ----

  queueDispatch(ch: ChannelState, job: DispatchJob, post: PostOp, cleanup: () => void): Step {
    const backend = this.programs!.backend;
    // A device that pins fresh private windows (windows.ts 'fresh') would pin a later launch's
    // inputs before the earlier ones wrote them: one launch at a time there.
    if (!backend.dispatchBatch || this.batchLaunches === 1 || backend.readOnlyWindows === 'fresh') {
      return this.startJob(ch, (wd, done) => backend.dispatch(job, wd, done), post, cleanup, GpuJob.PROGRAM);
    }
    let b = this.batches[ch.chid];
    if (!b) this.batches[ch.chid] = b = { jobs: [], cleanups: [], wheres: [] };
    b.jobs.push(job);
    b.cleanups.push(cleanup);
    b.wheres.push(this.where);
    // A launch with completion actions is a synchronization point of its own.
    if (post.semType !== 0 || post.interrupt || b.jobs.length >= this.batchLaunches) {
      this.submitBatch(ch, post);
      return BLOCK;
    }
    return CONTINUE;
  }

  batched(ch: ChannelState): boolean {
    return this.batches[ch.chid] !== null;
  }

  flushBatch(ch: ChannelState): Step {
    this.submitBatch(ch, NO_POST);
    return RETRY;
  }

  private submitBatch(ch: ChannelState, post: PostOp): void {
    const b = this.batches[ch.chid]!;
    this.batches[ch.chid] = null;
    this.batchStats.batches++;
    this.batchStats.launches += b.jobs.length;
    this.runBatch(ch, b, 0, post);
  }

  /** The launches of batch b from `from` on as one job; when it yields the device to another VM
   * (status -EAGAIN after `part` launches) the rest run as the next job, and the batch's windows
   * stay mapped until its last launch is done. */
  private runBatch(ch: ChannelState, b: Batch, from: number, post: PostOp): void {
    const backend = this.programs!.backend;
    const jobs = from === 0 ? b.jobs : b.jobs.slice(from);
    const wheres = from === 0 ? b.wheres : b.wheres.slice(from);
    const epoch = ch.epoch;
    let yielded = false;
    // Only the part that yielded and will be resumed keeps the windows.
    const resumes = (): boolean => yielded && ch.epoch === epoch && ch.wait === WAIT_JOB;
    this.startJob(ch, (wd, done) => backend.dispatchBatch!(jobs, wd, (r) => {
      yielded = r.status === -EAGAIN && !r.timedOut && (r.part ?? 0) < jobs.length;
      done(r);
    }), post, () => {
      if (!resumes()) for (const c of b.cleanups) c();
    }, GpuJob.PROGRAM, wheres, (part) => {
      if (!yielded) return false;
      this.batchStats.yields++;
      this.runBatch(ch, b, from + part, post);
      return true;
    });
  }

  /** The channel stopped with launches still in its batch: they never run. */
  private dropBatch(ch: ChannelState): void {
    const b = this.batches[ch.chid];
    if (!b) return;
    this.batches[ch.chid] = null;
    for (const c of b.cleanups) c();
  }

  /** BAD_PROGRAM with its reason (hw-spec §6.3.6). */
  programError(ch: ChannelState, reason: number): Step {
    this.core.guestWarnings.warn(ch.chid, { chid: ch.chid, reason }, 'gpu program refused');
    this.fifo.fail(ch, CHAN_ERR.BAD_PROGRAM, this.where, reason);
    return STOP;
  }

  /**
   * A program launch whose module is being checked and compiled. Compiling happens beside the
   * device, not on it: the channel waits (STATE.PROGRAM_WAIT) and the layer above may give the
   * device to others meanwhile (listener.channelWaiting). The returned callback charges the
   * compile to this channel and re-runs the launch at the same place in its method stream.
   */
  waitProgram(ch: ChannelState): (compileNs: number, relaunch: () => Step) => void {
    const epoch = ch.epoch;
    const where = this.where;
    return (compileNs, relaunch) => {
      ch.deviceNs += compileNs;
      ch.busyNs += compileNs;
      if (epoch !== ch.epoch || ch.wait !== WAIT_PROGRAM) return;
      ch.wait = WAIT_NONE;
      this.where = where;
      if (relaunch() === CONTINUE) this.schedule(ch);
    };
  }

  blockOnProgram(ch: ChannelState): Step {
    ch.wait = WAIT_PROGRAM;
    this.core.listener.channelWaiting?.(ch.chid);
    return BLOCK;
  }

  /** The channel stopped (error, unbind, reset): forget its waits and cancel its job. */
  stopped(ch: ChannelState): void {
    this.dropBatch(ch);
    if (ch.job >= 0) jobPool.cancel(ch.job);
    ch.job = -1;
    ch.wait = WAIT_NONE;
    this.acquirers.delete(ch);
    this.ready.delete(ch);
    this.words[ch.chid] = null;
    if (ch.error) this.maybeIdle(ch);
  }

  /** Stop starting methods (the ready set is kept); jobs in flight still complete. */
  halt(): void {
    this.halted = true;
  }

  /** Carry on after halt() (an upgrade that was abandoned). */
  unhalt(): void {
    if (!this.halted) return;
    this.halted = false;
    if (this.ready.size > 0 && !this.pumping) this.pump();
  }

  close(): void {
    if (this.acquireTimer) clearInterval(this.acquireTimer);
    this.acquireTimer = null;
    this.acquirers.clear();
    this.ready.clear();
    for (const ch of this.fifo.channels) this.dropBatch(ch);
    this.windows.clear();
    if (this.poolHeld) jobPool.release();
    this.poolHeld = false;
  }
}
