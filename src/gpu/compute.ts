// Compute class 0x90c0 (hw-spec §6.2, §6.3): launches a built-in kernel by id, or a guest's
// SPIR-V program. At LAUNCH every buffer VA range is translated (write access for the buffers
// the launch may write), mapped into one contiguous host window each, and the job runs on the
// backend — built-ins on the native pool, programs on the program backend (programs.ts); the
// windows are unmapped when it completes. Nothing runs if any translation faults. This file is
// the shared front end: translation, faults, checks and accounting happen here once.
import type { WindowRef } from './windows.ts';
import type { ChannelState } from './channel.ts';
import { CONTINUE, STOP, type PostOp, type Step, type ClassContext } from './step.ts';
import { jobPool } from './jobs.ts';
import { GpuJob } from './ctxsw.ts';
import { KERNELS } from './kernels.ts';
import { ProgramCache, type Program } from './programs.ts';
import { builtinPlan } from './program/builtins.ts';
import { BUILTIN_OWNER, builtinKey, builtinWords, overlapping, runPlan } from './builtin-programs.ts';
import type { Extent } from '../native.ts';
import {
  BUFFER_DEVICE_CACHED, BUFFER_FLAGS_KNOWN, BUFFER_READ_ONLY, CHAN_ERR, COMPUTE, COMPUTE_MAX_BUFFERS, COMPUTE_MAX_PARAMS, LAUNCH_PROGRAM,
  PROG_REASON, SMALL_PAGE, UNIT,
} from './spec.ts';

const TWO32 = 0x1_0000_0000;
/** LAUNCH bits a compute launch may set: flush, semaphore type, interrupt type, PROGRAM. */
const LAUNCH_ALLOWED = 0x7c | LAUNCH_PROGRAM;
const BUF_END = COMPUTE.BUFFER_BASE + COMPUTE_MAX_BUFFERS * COMPUTE.BUFFER_STRIDE;
const NO_BYTES: Uint8Array = new Uint8Array(0);
const NO_WORDS = new Uint32Array(0);

export function computeMethod(cp: ClassContext, ch: ChannelState, method: number, data: number): Step {
  const k = ch.compute;
  if (method >= COMPUTE.BUFFER_BASE && method < BUF_END) {
    const word = (method - COMPUTE.BUFFER_BASE) >> 2;
    if ((word & 3) === 0) data &= 0xff; // VA upper
    else if ((word & 3) === 3 && (data & ~BUFFER_FLAGS_KNOWN) !== 0) return cp.error(ch, CHAN_ERR.BAD_METHOD_DATA); // flags
    k.buffers[word] = data >>> 0;
    return CONTINUE;
  }
  switch (method) {
    case COMPUTE.KERNEL_ID: k.kernel = data >>> 0; return CONTINUE;
    case COMPUTE.GRID_X:
    case COMPUTE.GRID_Y:
    case COMPUTE.GRID_Z:
      if (data === 0) return cp.error(ch, CHAN_ERR.BAD_METHOD_DATA);
      k.grid[(method - COMPUTE.GRID_X) >> 2] = data >>> 0;
      return CONTINUE;
    case COMPUTE.PARAM_VA_UPPER: k.paramHi = data & 0xff; return CONTINUE;
    case COMPUTE.PARAM_VA_LOWER: k.paramLo = data >>> 0; return CONTINUE;
    case COMPUTE.PARAM_LENGTH: k.paramLength = data >>> 0; return CONTINUE;
    case COMPUTE.BUFFER_COUNT: k.bufferCount = data >>> 0; return CONTINUE;
    case COMPUTE.PROGRAM_VA_UPPER: k.progHi = data & 0xff; return CONTINUE;
    case COMPUTE.PROGRAM_VA_LOWER: k.progLo = data >>> 0; return CONTINUE;
    case COMPUTE.PROGRAM_LENGTH: k.progLength = data >>> 0; return CONTINUE;
    case COMPUTE.PROGRAM_ENTRY: k.progEntry = data >>> 0; return CONTINUE;
    case COMPUTE.SPEC_VA_UPPER: k.specHi = data & 0xff; return CONTINUE;
    case COMPUTE.SPEC_VA_LOWER: k.specLo = data >>> 0; return CONTINUE;
    case COMPUTE.SPEC_COUNT: k.specCount = data >>> 0; return CONTINUE;
    case COMPUTE.SET_SEMAPHORE_A: k.hi = data & 0xff; return CONTINUE;
    case COMPUTE.SET_SEMAPHORE_B: k.lo = data >>> 0; return CONTINUE;
    case COMPUTE.SET_SEMAPHORE_PAYLOAD: k.payload = data >>> 0; return CONTINUE;
    case COMPUTE.LAUNCH: return launch(cp, ch, data >>> 0);
    default: return cp.error(ch, CHAN_ERR.BAD_METHOD);
  }
}

function launch(cp: ClassContext, ch: ChannelState, flags: number): Step {
  const k = ch.compute;
  const post = cp.postOp(flags, k);
  if ((flags & ~LAUNCH_ALLOWED) !== 0 || !post) return cp.error(ch, CHAN_ERR.BAD_METHOD_DATA);
  if ((flags & LAUNCH_PROGRAM) !== 0) return launchProgram(cp, ch, flags, post);
  // A kernel launch is not batched: the channel's batch runs first.
  if (cp.batched(ch)) return cp.flushBatch(ch);
  const info = KERNELS[k.kernel];
  if (!info || k.bufferCount !== info.buffers || k.paramLength > COMPUTE_MAX_PARAMS) {
    return cp.error(ch, CHAN_ERR.BAD_LAUNCH);
  }
  // READ_ONLY on a buffer the kernel writes cannot be honoured.
  for (let i = 0; i < info.buffers; i++) {
    if ((k.buffers[4 * i + 3]! & BUFFER_READ_ONLY) !== 0 && ((info.writes >>> i) & 1) === 1) return cp.error(ch, CHAN_ERR.BAD_LAUNCH);
  }
  let params = new Uint8Array(0);
  if (k.paramLength > 0) {
    const p = cp.readVa(ch, k.paramHi * TWO32 + k.paramLo, k.paramLength, UNIT.COMPUTE);
    if (!p) return STOP;
    params = p.slice(); // the job keeps its own copy (the guest may reuse the memory)
  }

  const write = (i: number): boolean => ((info.writes >>> i) & 1) === 1;
  if (cp.builtinsOnPrograms) return launchBuiltinProgram(cp, ch, flags, post, params, write);
  const mapped = mapBuffers(cp, ch, info.buffers, write);
  if (!mapped) return STOP;
  const job = { kernel: k.kernel, windows: mapped.windows, lengths: mapped.lengths, params, way: ch.owner };
  return cp.startJob(ch, (wd, done) => jobPool.submitKernel(job, wd, done), post, mapped.unmap);
}

interface Mapped {
  windows: bigint[];
  lengths: number[];
  /** Each binding's VRAM offset when it is one contiguous VRAM range, else -1. */
  vram: number[];
  unmap: () => void;
}

/** Translate buffers 0..count-1 (write access where `write(i)`), then map each into a host
 * window. Every buffer is translated before any is mapped: a fault leaves nothing behind.
 * null = the channel stopped (fault or mapping failure). */
function mapBuffers(cp: ClassContext, ch: ChannelState, count: number, write: (i: number) => boolean,
                    resident: (i: number) => boolean = () => false): Mapped | null {
  const k = ch.compute;
  const ranges: { extents: Extent[]; offset: number; length: number; write: boolean }[] = [];
  for (let i = 0; i < count; i++) {
    const va = k.buffers[4 * i]! * TWO32 + k.buffers[4 * i + 1]!;
    const len = k.buffers[4 * i + 2]!;
    if (len === 0) {
      cp.error(ch, CHAN_ERR.BAD_METHOD_DATA);
      return null;
    }
    // Windows are mapped with page granularity; the job sees exactly [va, va + len).
    const start = va - (va % SMALL_PAGE);
    const end = Math.ceil((va + len) / SMALL_PAGE) * SMALL_PAGE;
    const w = write(i);
    const extents = cp.translate(ch, start, end - start, w, UNIT.COMPUTE);
    if (!extents) return null;
    ranges.push({ extents, offset: va - start, length: len, write: w });
  }
  // What the job writes other than through a resident copy makes the resident copies of those
  // bytes stale (vram.ts written): dropped before it runs, and again when it is done.
  const vram = cp.core.vram;
  const vramAt = ranges.map((r) => (r.extents.length === 1 && r.extents[0]!.fd === vram.fd ? r.extents[0]!.offset + r.offset : -1));
  // A binding the device may keep resident drops its own stale copies (resident.cc), also when it
  // falls back to staging; one that is not one VRAM range never runs resident.
  const dirty = vram.written ? ranges.filter((r, i) => r.write && !(resident(i) && vramAt[i]! >= 0)) : [];
  for (const r of dirty) vram.wroteExtents(r.extents);
  const maps: WindowRef[] = [];
  const unmap = (): void => {
    for (const m of maps) m.release();
    maps.length = 0;
    for (const r of dirty) vram.wroteExtents(r.extents);
  };
  try {
    for (const r of ranges) maps.push(cp.windows.acquire(r.extents, !r.write));
  } catch (err) {
    unmap();
    cp.core.log.warn({ chid: ch.chid, err: (err as Error).message }, 'gpu compute: mapWindow failed');
    cp.error(ch, CHAN_ERR.KERNEL_ERROR);
    return null;
  }
  return {
    windows: maps.map((m, i) => m.address + BigInt(ranges[i]!.offset)),
    lengths: ranges.map((r) => r.length),
    vram: vramAt,
    unmap,
  };
}

// ---- programs (hw-spec §6.3) ----

/** A module a channel launched recently: a relaunch of the same bytes skips hashing (SHA-256 of a
 * module of tens of KiB costs more than the rest of the launch path). */
interface LastProgram {
  owner: number;
  module: Uint8Array;
  entry: number;
  spec: Uint8Array;
  key: string;
}
/** Per channel, the modules of its recent launches by where they were (VA, length, entry):
 * applications alternate between tens of pipelines, so the last one alone missed at almost
 * every launch (docs/results.md, "llama.cpp on the H200 with resident VRAM"). The bytes are still compared at every launch (the
 * guest may rewrite them); the copies are bounded per channel. */
const recentPrograms = new WeakMap<ChannelState, Map<string, LastProgram>>();
const RECENT_PROGRAM_BYTES = 8 << 20;

function recentProgram(cp: ClassContext, ch: ChannelState, va: number, length: number, ext: Extent[], entry: number,
                       spec: Uint8Array): LastProgram | null {
  const where = `${va}:${length}:${entry}`;
  const owner = ch.owner;
  let m = recentPrograms.get(ch);
  if (!m) recentPrograms.set(ch, (m = new Map()));
  const hit = m.get(where);
  const same = hit !== undefined && hit.owner === owner && hit.entry === entry && sameBytes(hit.spec, spec);
  // Compared where the module lies when that is VRAM: no copy of its bytes per launch.
  let module: Uint8Array | null = null;
  if (same && !inVram(cp.core.vram, ext, hit!.module)) {
    module = cp.readVa(ch, va, length, UNIT.COMPUTE);
    if (!module) return null;
  }
  if (same && (module === null || sameBytes(hit!.module, module))) {
    m.delete(where); // most recent last: the first entry is the one to evict
    m.set(where, hit!);
    return hit!;
  }
  module ??= cp.readVa(ch, va, length, UNIT.COMPUTE);
  if (!module) return null;
  const last = { owner, module: module.slice(), entry, spec: spec.slice(), key: ProgramCache.key(module, entry, spec) };
  m.delete(where);
  m.set(where, last);
  let bytes = 0;
  for (const v of m.values()) bytes += v.module.length;
  for (const [w, v] of m) {
    if (bytes <= RECENT_PROGRAM_BYTES || v === last) break;
    bytes -= v.module.length;
    m.delete(w);
  }
  return last;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.compare(a, b) === 0;
}

/** Whether the VRAM extents hold exactly `bytes` (false when any extent is not VRAM). */
function inVram(vram: { fd: number; u8: Uint8Array }, ext: Extent[], bytes: Uint8Array): boolean {
  let at = 0;
  for (const e of ext) {
    if (e.fd !== vram.fd || at + e.length > bytes.length) return false;
    if (Buffer.compare(vram.u8.subarray(e.offset, e.offset + e.length), bytes.subarray(at, at + e.length)) !== 0) return false;
    at += e.length;
  }
  return at === bytes.length;
}

function launchProgram(cp: ClassContext, ch: ChannelState, flags: number, post: PostOp): Step {
  const cache = cp.programs;
  if (!cache) return cp.programError(ch, PROG_REASON.UNSUPPORTED);
  const lim = cache.backend.limits;
  const k = ch.compute;
  // §6.3.1 step 1: nothing is read before these hold.
  const progVa = k.progHi * TWO32 + k.progLo;
  const len = k.progLength;
  if (len % 4 !== 0 || len < 20 || len > lim.maxModuleBytes || progVa % 4 !== 0) return cp.programError(ch, PROG_REASON.MODULE_SIZE);
  if (k.specCount > lim.maxSpecConstants) return cp.programError(ch, PROG_REASON.SPEC_CONSTANTS);
  if (k.paramLength > lim.maxPushBytes) return cp.programError(ch, PROG_REASON.PUSH_CONSTANTS);
  for (let d = 0; d < 3; d++) if (k.grid[d]! > lim.maxGrid[d]!) return cp.programError(ch, PROG_REASON.GRID);
  if (k.bufferCount > lim.maxBindings) return cp.programError(ch, PROG_REASON.BUFFER);
  for (let i = 0; i < k.bufferCount; i++) {
    const va = k.buffers[4 * i]! * TWO32 + k.buffers[4 * i + 1]!;
    if (va % lim.bufferAlign !== 0 || k.buffers[4 * i + 2]! > lim.maxBufferBytes) return cp.programError(ch, PROG_REASON.BUFFER);
  }

  // Step 2: module, specialization and parameters through the MMU (the module's bytes are read
  // only when they are not those of a recent launch: recentProgram).
  const moduleExt = cp.translate(ch, progVa, len, false, UNIT.COMPUTE);
  if (!moduleExt) return STOP;
  let spec = NO_BYTES;
  if (k.specCount > 0) {
    const specVa = k.specHi * TWO32 + k.specLo;
    if (specVa % 4 !== 0) return cp.programError(ch, PROG_REASON.SPEC_CONSTANTS);
    const s = cp.readVa(ch, specVa, k.specCount * 8, UNIT.COMPUTE);
    if (!s) return STOP;
    spec = s;
  }
  let params = NO_BYTES;
  if (k.paramLength > 0) {
    const p = cp.readVa(ch, k.paramHi * TWO32 + k.paramLo, k.paramLength, UNIT.COMPUTE);
    if (!p) return STOP;
    params = p;
  }

  // Step 3: the owner's compiled program, or a compile beside the device.
  const entry = k.progEntry;
  const l = recentProgram(cp, ch, progVa, len, moduleExt, entry, spec);
  if (!l) return STOP;
  // A launch that must wait for its compile does not wait with a batch before it: the batch
  // runs meanwhile.
  if (cp.batched(ch) && !cache.settled(ch.owner, l.key)) return cp.flushBatch(ch);
  const resume = cp.waitProgram(ch);
  const prog: Program = cache.lookup(ch.owner, l.key, () => words(l.module), entry, words(l.spec),
    (_p, compileNs) => resume(compileNs, () => launch(cp, ch, flags)));
  if (!cache.ready(prog)) {
    if (prog.info) return cp.programError(ch, prog.info.reason); // refused before
    return cp.blockOnProgram(ch); // compiling: resume re-runs this launch
  }
  const entryInfo = prog.info!.entry!;
  const bad = ProgramCache.check(entryInfo, k.bufferCount, k.buffers, k.paramLength);
  if (bad) return cp.programError(ch, bad);

  // Step 4: bindings = exactly the translated ranges; READ_ONLY buffers translated for reading.
  // DEVICE_CACHED bindings (hw-spec §6.3) run on the device's resident copy of their VRAM when
  // the device keeps one (vram.written is set) and the binding is one contiguous VRAM range.
  let resident = 0;
  if (cp.core.vram.written) {
    for (let i = 0; i < k.bufferCount; i++) if ((k.buffers[4 * i + 3]! & BUFFER_DEVICE_CACHED) !== 0) resident |= 1 << i;
  }
  const mapped = mapBuffers(cp, ch, k.bufferCount, (i) => (k.buffers[4 * i + 3]! & BUFFER_READ_ONLY) === 0,
    (i) => ((resident >>> i) & 1) === 1);
  if (!mapped) return STOP;
  for (let i = 0; i < k.bufferCount; i++) {
    if (mapped.vram[i]! < 0) resident &= ~(1 << i);
    else if ((resident >>> i) & 1) cp.core.vram.markResident(mapped.vram[i]!, k.buffers[4 * i + 2]!);
  }
  const push = params.length > entryInfo.pushBytes ? params.slice(0, entryInfo.pushBytes) : params.slice();
  const job = { slot: prog.slot, windows: mapped.windows, lengths: mapped.lengths, params: push, grid: [k.grid[0]!, k.grid[1]!, k.grid[2]!] as [number, number, number], way: ch.owner,
    ...(resident !== 0 ? { vram: mapped.vram, resident } : {}) };
  prog.users++;
  return cp.queueDispatch(ch, job, post, () => {
    mapped.unmap();
    cache.unuse(prog);
  });
}

/** A built-in kernel as its SPIR-V version (builtin-programs.ts): the same checks and results. */
function launchBuiltinProgram(cp: ClassContext, ch: ChannelState, flags: number, post: PostOp, params: Uint8Array,
                              write: (i: number) => boolean): Step {
  const cache = cp.programs!;
  const k = ch.compute;
  const id = k.kernel;
  const count = k.bufferCount;
  const lengths: number[] = [];
  const vas: number[] = [];
  for (let i = 0; i < count; i++) {
    lengths.push(k.buffers[4 * i + 2]!);
    vas.push(k.buffers[4 * i]! * TWO32 + k.buffers[4 * i + 1]!);
  }
  const plan = builtinPlan(id, params, lengths);
  if (!plan) return cp.error(ch, CHAN_ERR.KERNEL_ERROR); // the native kernel's -EINVAL
  const resume = cp.waitProgram(ch);
  let prog: Program;
  try {
    prog = cache.lookup(BUILTIN_OWNER, builtinKey(id, plan.spv), () => builtinWords(id, plan.spv), 0, NO_WORDS,
      (_p, compileNs) => resume(compileNs, () => launch(cp, ch, flags)));
  } catch (err) {
    cp.core.log.error({ kernel: id, err: (err as Error).message }, 'built-in program unavailable');
    return cp.error(ch, CHAN_ERR.KERNEL_ERROR);
  }
  if (!cache.ready(prog)) {
    if (prog.info) {
      cp.core.log.error({ kernel: id, reason: prog.info.reason, message: prog.info.message }, 'built-in program refused');
      return cp.error(ch, CHAN_ERR.KERNEL_ERROR);
    }
    return cp.blockOnProgram(ch);
  }
  const mapped = mapBuffers(cp, ch, count, write);
  if (!mapped) return STOP;
  if (overlapping(id, mapped.windows, mapped.lengths)) {
    mapped.unmap();
    return cp.error(ch, CHAN_ERR.KERNEL_ERROR);
  }
  prog.users++;
  const run = { cp, ch, backend: cache.backend, program: prog, plan, windows: mapped.windows, lengths: mapped.lengths, vas };
  return cp.startJob(ch, (wd, done) => runPlan(run, wd, done), post, () => {
    mapped.unmap();
    cache.unuse(prog);
  }, GpuJob.BUILTIN);
}

function words(b: Uint8Array): Uint32Array {
  if (b.length === 0) return NO_WORDS;
  return (b.byteOffset & 3) === 0 ? new Uint32Array(b.buffer, b.byteOffset, b.length >> 2) : new Uint32Array(b.slice().buffer);
}
