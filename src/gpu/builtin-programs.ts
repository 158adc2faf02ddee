// The built-in kernels on the program backend (`serve --engine vulkan`): a KERNEL_ID launch runs
// the kernel's SPIR-V version (native/shaders/builtins, plans in program/builtins.ts) instead of
// the C++ kernel, with the same buffers, parameter checks and results. The translation, windows,
// compile-beside-the-device and accounting are compute.ts's; this file only turns a plan into
// the chain of dispatches one job runs.
import fs from 'node:fs';
import type { ChannelState } from './channel.ts';
import type { JobResult } from './jobs.ts';
import { BUILTIN_PROGRAMS, SPIRV_DIR, builtinSpvPath, type BuiltinPlan } from './program/builtins.ts';
import type { Program, ProgramBackend } from './programs.ts';
import type { ClassContext } from './step.ts';
import { ECANCELED, EINVAL, ENODEV } from './spec.ts';

/** The program cache's owner of the built-ins: host code, shared by every channel. */
export const BUILTIN_OWNER = -1;

const modules = new Map<string, Uint32Array>();

/** Kernel `id`'s SPIR-V words (read once), or those of the plan's GPU form `spv` (a path under
 * SPIRV_DIR); throws a readable error when the build lacks them. */
export function builtinWords(id: number, spv?: string): Uint32Array {
  let w = modules.get(spv ?? String(id));
  if (!w) {
    const path = spv ? new URL(spv, SPIRV_DIR).pathname : builtinSpvPath(id);
    let b: Buffer;
    try {
      b = fs.readFileSync(path);
    } catch {
      throw new Error(`built-in kernel ${BUILTIN_PROGRAMS[id]?.name ?? id}: ${path} is missing (run scripts/build-spirv.sh)`);
    }
    w = new Uint32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
    modules.set(spv ?? String(id), w);
  }
  return w;
}

export const builtinKey = (id: number, spv?: string): string => (spv ? `builtin:${id}:${spv}` : `builtin:${id}`);

/** Windows of kernel `id` that must not overlap (the native kernels' -EINVAL). */
export function overlapping(id: number, windows: bigint[], lengths: number[]): boolean {
  for (const [a, b] of BUILTIN_PROGRAMS[id]!.noOverlap) {
    const a0 = windows[a]!, a1 = a0 + BigInt(lengths[a]!);
    const b0 = windows[b]!, b1 = b0 + BigInt(lengths[b]!);
    if (a0 < b1 && b0 < a1) return true;
  }
  return false;
}

export interface PlanRun {
  cp: ClassContext;
  ch: ChannelState;
  backend: ProgramBackend;
  program: Program;
  plan: BuiltinPlan;
  windows: bigint[];
  lengths: number[];
  /** VA of each buffer (for the plan's elapsed/error words, written through the MMU). */
  vas: number[];
}

/** Run the plan's dispatches one after another as one job; `done` gets their summed device ns.
 * The channel's job id follows the dispatch in flight, so a stop or the watchdog cancels it. */
export function runPlan(r: PlanRun, watchdogMs: number, done: (res: JobResult) => void): number {
  const { plan, ch } = r;
  const started = process.hrtime.bigint();
  // A device lost (and rebuilt) between two dispatches of the plan loses the launch too. One
  // dispatch needs no check here: the addon fails a dispatch queued before a loss.
  const chained = plan.dispatches.length > 1 || (plan.dispatches[0]?.repeat ?? 1) > 1;
  const generation = chained ? r.backend.generation?.() : undefined;
  let index = 0;
  let repeats = 0;
  let deviceNs = 0;
  const finish = (res: JobResult): void => {
    const result = { ...res, deviceNs };
    if (result.status === 0 && !result.timedOut) result.status = epilogue(r, started);
    else if (plan.elapsedAt) writeElapsed(r, started);
    done(result);
  };
  const next = (): number => {
    // Skip exhausted dispatches (repeat 0), stop when the time limit passed (LOOP).
    while (index < plan.dispatches.length && repeats >= (plan.dispatches[index]!.repeat ?? 1)) {
      index++;
      repeats = 0;
    }
    const elapsed = process.hrtime.bigint() - started;
    const timeUp = plan.timeLimitNs !== undefined && elapsed >= plan.timeLimitNs;
    if (index >= plan.dispatches.length || (timeUp && repeats > 0)) {
      setImmediate(() => finish({ status: 0, deviceNs: 0, timedOut: false }));
      return ch.job;
    }
    // The watchdog bounds the launch, not each dispatch of its plan: an endless LOOP is a chain
    // of dispatches that each end in time.
    const leftMs = watchdogMs > 0 ? watchdogMs - Number(elapsed) / 1e6 : 0;
    if (watchdogMs > 0 && leftMs <= 0) {
      setImmediate(() => finish({ status: 0, deviceNs: 0, timedOut: true }));
      return ch.job;
    }
    if (generation !== undefined && (index > 0 || repeats > 0) && r.backend.generation!() !== generation) {
      setImmediate(() => finish({ status: -ENODEV, deviceNs: 0, timedOut: false }));
      return ch.job;
    }
    const d = plan.dispatches[index]!;
    repeats++;
    const job = { slot: r.program.slot, windows: r.windows, lengths: r.lengths, params: d.push, grid: d.grid, builtin: true, panelRowBytes: d.panelRowBytes, overwrites: d.overwrites, kStream: d.kStream, way: ch.owner };
    const id = r.backend.dispatch(job, watchdogMs > 0 ? Math.max(1, Math.ceil(leftMs)) : 0, (res) => {
      deviceNs += res.deviceNs;
      if (res.status !== 0 || res.timedOut) return finish(res);
      if (ch.job !== id) return finish({ status: -ECANCELED, deviceNs: 0, timedOut: false }); // stopped meanwhile
      ch.job = next();
    });
    return id;
  };
  return next();
}

/** After the last dispatch: the plan's elapsed-time record and error word. 0 or -errno. */
function epilogue(r: PlanRun, started: bigint): number {
  if (r.plan.elapsedAt) writeElapsed(r, started);
  const e = r.plan.errorWord;
  if (e) {
    const b = r.cp.readVa(r.ch, r.vas[e.binding]! + e.offset, 4, 3);
    if (!b) return -EINVAL;
    const v = (b[0]! | (b[1]! << 8) | (b[2]! << 16) | (b[3]! << 24)) >>> 0;
    if ((v & e.mask) !== 0) return -EINVAL;
  }
  return 0;
}

function writeElapsed(r: PlanRun, started: bigint): void {
  const at = r.plan.elapsedAt!;
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, process.hrtime.bigint() - started, true);
  r.cp.writeVa(r.ch, r.vas[at.binding]! + at.offset, b, 3);
}
