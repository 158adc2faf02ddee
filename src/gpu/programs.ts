// Guest programs (hw-spec §6.3), the engine's shared front end for them: the program backend
// seam, and the per-owner cache of checked and compiled modules. Like gallium's state tracker,
// everything every backend would otherwise repeat lives here once — module identity, the
// cache, the launch checks against what the front end (native/src/spirv) found in the module,
// compile concurrency per owner. A backend (vulkan.ts) only compiles and dispatches what it is
// handed.
import { createHash } from 'node:crypto';
import type { JobResult } from './jobs.ts';
import type { KStream, ProgramLimits } from '../native.ts';
import { BUFFER_READ_ONLY, PROG_REASON } from './spec.ts';

/** What a backend's device can do, as PPROG reports it (hw-spec §3.10): the addon's own record. */
export type { ProgramLimits };

/** vugpu's envelope (hw-spec §3.10, the numbers in brackets): a device never reports more. */
export const PROGRAM_ENVELOPE: ProgramLimits = {
  maxModuleBytes: 1 << 20, maxBindings: 16, maxPushBytes: 128, maxSpecConstants: 64,
  maxWgInvocations: 1024, maxWgSize: [1024, 1024, 64], maxSharedBytes: 32768,
  maxGrid: [65535, 65535, 65535], maxBufferBytes: 128 << 20, bufferAlign: 16, subgroupSize: 0,
  loopLimit: 0, features: 0,
};

export interface EntryInfo {
  name: string;
  wg: [number, number, number];
  sharedBytes: number;
  pushBytes: number;
  bindings: { binding: number; writable: boolean }[];
}

export interface CompiledInfo {
  /** 0, or the BAD_PROGRAM reason. */
  reason: number;
  message: string;
  entry?: EntryInfo;
}

export interface DispatchJob {
  slot: number;
  /** Host address of each binding (binding i = windows[i]). */
  windows: bigint[];
  lengths: number[];
  /** Push constants. */
  params: Uint8Array;
  grid: [number, number, number];
  /** Built-in kernels only (host code, never a guest's program): bind up to the device's range. */
  builtin?: boolean;
  /** Built-ins only: rows of workgroups the device-memory path may stream (BuiltinDispatch). */
  panelRowBytes?: number[];
  /** Built-ins only: bindings the dispatch writes completely (BuiltinDispatch.overwrites). */
  overwrites?: number[];
  /** Built-ins only: a GEMM operand the device-memory path may stream by rows of k. */
  kStream?: KStream;
  /** Whose way onto the device it takes: the channel's owner (the VM), so one VM's launch that
   * never ends holds neither another's pool thread nor its queue (pool.cc, vk.h WayQueue). */
  way?: number;
  /** Guest programs: each binding's VRAM offset (-1: not one VRAM range) and the mask of
   * DEVICE_CACHED bindings, run on the device's resident copy (ProgramBackend.keepVram). */
  vram?: number[];
  resident?: number;
}

/** How a device needs windows of READ_ONLY buffers mapped (ProgramBackend.readOnlyWindows). */
export type ReadOnlyWindows = 'private' | 'shared' | 'fresh';

/** A device that runs SPIR-V programs (vulkan.ts). Completions come back like native jobs. */
export interface ProgramBackend {
  /** The device's name (startup log, /metrics, benchmark JSON). */
  readonly device: string;
  readonly limits: ProgramLimits;
  /** How windows of READ_ONLY buffers must be mapped for this device (windows.ts): 'private'
   * (copy-on-write, cached: a device that reads through the mapping itself), 'shared' (the
   * device pins pages but only copies from them), 'fresh' (it pins and binds them: a new private
   * window per launch). Absent = 'private'. */
  readonly readOnlyWindows?: ReadOnlyWindows;
  /** µs of completion polling this device suggests to the engine (jobs.ts); absent = none. */
  readonly completionPollUs?: number;
  /** Whether the device itself switches between ways while a program runs (a CPU device's
   * threads); false: a program that never ends holds the device, and the engine switches
   * (ctxsw.ts). Absent = true. */
  readonly timesliced?: boolean;
  /** A time-slicing device's ways: owner % ways is an owner's way, and owners on one way are one
   * context to the device (the engine switches between them, ctxsw.ts). Absent = one per owner. */
  readonly ways?: number;
  /** Bumped when the device is lost and rebuilt (a multi-dispatch launch that spans it fails). */
  generation?(): number;
  /** Check, rewrite and compile into `slot`; status 0 = ready, -EINVAL = refused (see info). */
  compile(slot: number, words: Uint32Array, entryIndex: number, spec: Uint32Array, done: (r: JobResult) => void): number;
  info(slot: number): CompiledInfo;
  dispatch(job: DispatchJob, watchdogMs: number, done: (r: JobResult) => void): number;
  /** One channel's launches in order as one job (hw-spec §6.3 "Batched launches"); the result's
   * `part` says how many completed before its status. Absent = one job per launch. */
  dispatchBatch?(jobs: DispatchJob[], watchdogMs: number, done: (r: JobResult) => void): number;
  /** Open `way`'s own device now, in the background (DispatchJob.way); absent = at first use. */
  prepareWay?(way: number): void;
  /** Keep DEVICE_CACHED bindings' VRAM (of this many bytes) on the device between launches.
   * Returns what the engine calls when it writes VRAM itself (Vram.written), or null when the
   * device does not keep VRAM (it reads host memory directly, or another engine holds it). */
  keepVram?(vramBytes: number): ((offset: number, length: number) => void) | null;
  /** The engine closes: drop what keepVram kept. */
  releaseVram?(): void;
  cancel(id: number): void;
  release(slot: number): void;
  close(): void;
}

const READY = 1;
const REFUSED = 2;
const COMPILING = 0;

/** One (owner, module, entry, specialization) the device has seen. */
export interface Program {
  readonly key: string;
  readonly slot: number;
  state: number;
  info: CompiledInfo | null;
  /** Launches of this program in flight (an entry is never released under them). */
  users: number;
  /** Evicted while launches were in flight: its slot goes when the last one ends. */
  dropped: boolean;
  lastUse: number;
  waiters: (() => void)[];
}

interface OwnerCache {
  programs: Map<string, Program>;
  /** Compiles waiting for this owner's one compile slot. */
  queue: (() => void)[];
  compiling: boolean;
  compileNs: number;
  compiles: number;
}

export interface ProgramCacheOptions {
  /** Programs kept per owner (LRU beyond it). */
  perOwner?: number;
}

export interface ProgramStats {
  compiles: number;
  compileNs: number;
  hits: number;
  refused: number;
  cached: number;
}

/** Program slots are process-wide in the addon: one counter for every cache in the process. */
let nextSlot = 1;

export class ProgramCache {
  readonly backend: ProgramBackend;
  private readonly perOwner: number;
  private readonly owners = new Map<number, OwnerCache>();
  private clock = 0;
  readonly stats: ProgramStats = { compiles: 0, compileNs: 0, hits: 0, refused: 0, cached: 0 };

  constructor(backend: ProgramBackend, opts: ProgramCacheOptions = {}) {
    this.backend = backend;
    this.perOwner = opts.perOwner ?? 64;
  }

  /** The cache key: module content, entry point and specialization (a different specialization
   * is a different pipeline, as in Vulkan). */
  /** Modules hashed by key() since the process started (the launch path avoids it: compute.ts). */
  static hashes = 0;

  static key(module: Uint8Array, entry: number, spec: Uint8Array): string {
    ProgramCache.hashes++;
    const h = createHash('sha256');
    h.update(module);
    h.update(new Uint8Array(new Uint32Array([entry]).buffer));
    h.update(spec);
    return h.digest('base64');
  }

  /** The owner's program for this key, created (and its compile queued) when new. `onCompiled`
   * runs once the program is READY or REFUSED, with the compile's device ns (0 on a hit). */
  lookup(owner: number, key: string, words: () => Uint32Array, entry: number, spec: Uint32Array,
         onCompiled: (p: Program, compileNs: number) => void): Program {
    const oc = this.ownerCache(owner);
    let p = oc.programs.get(key);
    if (p) {
      p.lastUse = ++this.clock;
      if (p.state !== COMPILING) {
        this.stats.hits++;
        return p;
      }
      p.waiters.push(() => onCompiled(p!, 0));
      return p;
    }
    this.evict(oc);
    const prog: Program = { key, slot: nextSlot++, state: COMPILING, info: null, users: 0, dropped: false, lastUse: ++this.clock, waiters: [] };
    oc.programs.set(key, prog);
    this.stats.cached++;
    // The module words are copied now: the guest may change its memory while the compile waits.
    const w = words().slice();
    const start = (): void => {
      oc.compiling = true;
      this.backend.compile(prog.slot, w, entry, spec, (r) => {
        oc.compiling = false;
        oc.compileNs += r.deviceNs;
        oc.compiles++;
        this.stats.compiles++;
        this.stats.compileNs += r.deviceNs;
        prog.info = this.backend.info(prog.slot);
        if (r.status === 0 && prog.info.reason === 0) {
          prog.state = READY;
          if (prog.dropped) this.backend.release(prog.slot); // its owner left while it compiled
        } else {
          prog.state = REFUSED;
          if (!prog.info.reason) prog.info = { reason: PROG_REASON.COMPILE, message: prog.info.message || `compile failed (${r.status})` };
          this.stats.refused++;
          this.backend.release(prog.slot); // nothing to keep but the verdict
        }
        onCompiled(prog, r.deviceNs);
        for (const w of prog.waiters.splice(0)) w();
        const next = oc.queue.shift();
        if (next) next();
      });
    };
    // One compile per owner at a time: a VM that floods the device with modules queues behind
    // itself, never beside every other VM.
    if (oc.compiling) oc.queue.push(start);
    else start();
    return prog;
  }

  ready(p: Program): boolean {
    return p.state === READY;
  }

  /** Whether the owner's program for this key is compiled (or refused): a lookup that starts or
   * waits for nothing. */
  settled(owner: number, key: string): boolean {
    const p = this.owners.get(owner)?.programs.get(key);
    return p !== undefined && p.state !== COMPILING;
  }

  /** Launch checks that depend on the launch, not the module (hw-spec §6.3.2): 0 or a reason. */
  static check(info: EntryInfo, bufferCount: number, buffers: number[], paramLength: number): number {
    for (const b of info.bindings) {
      if (b.binding >= bufferCount) return PROG_REASON.BINDING;
      if (b.writable && (buffers[4 * b.binding + 3]! & BUFFER_READ_ONLY) !== 0) return PROG_REASON.BINDING_WRITABLE;
    }
    if (info.pushBytes > paramLength) return PROG_REASON.PUSH_CONSTANTS;
    return 0;
  }

  /** Drop everything an owner compiled (its VM left or was reset). */
  dropOwner(owner: number): void {
    const oc = this.owners.get(owner);
    if (!oc) return;
    for (const p of oc.programs.values()) this.forget(p);
    oc.programs.clear();
    oc.queue.length = 0;
    this.owners.delete(owner);
  }

  ownerStats(owner: number): { programs: number; compiles: number; compileNs: number } {
    const oc = this.owners.get(owner);
    return { programs: oc?.programs.size ?? 0, compiles: oc?.compiles ?? 0, compileNs: oc?.compileNs ?? 0 };
  }

  close(): void {
    for (const o of [...this.owners.keys()]) this.dropOwner(o);
  }

  /** Drop every owner's programs but `keep`'s (a device reset keeps the host's built-ins). */
  dropAllBut(keep: number): void {
    for (const o of [...this.owners.keys()]) if (o !== keep) this.dropOwner(o);
  }

  private ownerCache(owner: number): OwnerCache {
    let oc = this.owners.get(owner);
    if (!oc) {
      oc = { programs: new Map(), queue: [], compiling: false, compileNs: 0, compiles: 0 };
      this.owners.set(owner, oc);
    }
    return oc;
  }

  /** Keep at most perOwner programs: drop the least recently used idle ones. */
  private evict(oc: OwnerCache): void {
    while (oc.programs.size >= this.perOwner) {
      let victim: Program | null = null;
      for (const p of oc.programs.values()) {
        if (p.state === COMPILING || p.users > 0) continue;
        if (!victim || p.lastUse < victim.lastUse) victim = p;
      }
      if (!victim) return; // all busy: allow a temporary overshoot
      oc.programs.delete(victim.key);
      this.forget(victim);
    }
  }

  private forget(p: Program): void {
    this.stats.cached--;
    p.dropped = true;
    if (p.state === READY && p.users === 0) this.backend.release(p.slot);
  }

  /** A launch of p ended. */
  unuse(p: Program): void {
    p.users--;
    if (p.users === 0 && p.dropped && p.state === READY) this.backend.release(p.slot);
  }
}
