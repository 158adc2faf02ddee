// The Vulkan program backend (hw-spec §6.3): a ProgramBackend over the addon's Vulkan device
// (native/src/vulkan). Mesa's lavapipe on hosts without a GPU, the GPU's own driver elsewhere.
// It only compiles and dispatches what the front end (programs.ts, compute.ts) hands it:
// modules are checked and made stoppable by native/src/spirv inside the compile job, on a pool
// thread, so a hostile module never reaches the driver unchecked and never blocks the JS thread.
import os from 'node:os';
import { native, type VulkanDeviceInfo } from '../native.ts';
import { jobPool, type JobResult } from './jobs.ts';
import { useGpuVariants } from './program/builtins.ts';
import { PROGRAM_ENVELOPE, type CompiledInfo, type DispatchJob, type ProgramBackend, type ProgramLimits, type ReadOnlyWindows } from './programs.ts';

export interface VulkanDeviceSummary {
  name: string;
  type?: string;
  driver?: string;
  api?: string;
}

/** Vulkan devices the loader sees (empty when there is no loader or no device). */
export function vulkanDevices(): VulkanDeviceSummary[] {
  try {
    return native.vulkanDevices();
  } catch {
    return [];
  }
}

type Clampable = Partial<Omit<ProgramLimits, 'maxWgSize' | 'maxGrid'>> & { maxWgSize?: number[]; maxGrid?: number[] };

/** A device's limits clamped to vugpu's envelope (hw-spec §3.10: never more than the bracket). */
export function clampLimits(dev: Clampable): ProgramLimits {
  const e = PROGRAM_ENVELOPE;
  const min = (a: number | undefined, b: number): number => (a === undefined || !Number.isFinite(a) ? b : Math.min(a, b));
  return {
    maxModuleBytes: e.maxModuleBytes,
    maxBindings: min(dev.maxBindings, e.maxBindings),
    maxPushBytes: min(dev.maxPushBytes, e.maxPushBytes),
    maxSpecConstants: e.maxSpecConstants,
    maxWgInvocations: min(dev.maxWgInvocations, e.maxWgInvocations),
    maxWgSize: [0, 1, 2].map((i) => min(dev.maxWgSize?.[i], e.maxWgSize[i]!)) as [number, number, number],
    maxSharedBytes: min(dev.maxSharedBytes, e.maxSharedBytes),
    maxGrid: [0, 1, 2].map((i) => min(dev.maxGrid?.[i], e.maxGrid[i]!)) as [number, number, number],
    maxBufferBytes: min(dev.maxBufferBytes, e.maxBufferBytes),
    // A binding's VA must satisfy the device's offset alignment: never below 16.
    bufferAlign: Math.max(dev.bufferAlign ?? e.bufferAlign, e.bufferAlign),
    subgroupSize: dev.subgroupSize ?? 0,
    loopLimit: dev.loopLimit ?? 0,
    features: dev.features ?? 0,
  };
}

/** Completion polling a GPU asks for (µs): a 1024³ GEMM's launch on a large GPU fits. */
export const GPU_COMPLETION_POLL_US = 1000;

/** The backend whose engine keeps VRAM resident now (keepVram), if any. */
let vramHolder: VulkanBackend | null = null;

export class VulkanBackend implements ProgramBackend {
  readonly device: string;
  readonly driver: string;
  readonly limits: ProgramLimits;
  readonly readOnlyWindows: ReadOnlyWindows;
  readonly completionPollUs: number;
  readonly timesliced: boolean;
  readonly ways: number;
  private closed = false;

  readonly deviceInfo: VulkanDeviceInfo;

  private constructor(info: VulkanDeviceInfo) {
    this.deviceInfo = info;
    this.device = info.name;
    this.driver = `${info.driver} ${info.driverInfo}`.trim();
    this.limits = clampLimits(info.limits);
    // A GPU pins imported host pages: over a copy-on-write mapping it would keep the pages of
    // the first import (native/src/vulkan/staging.cc). Staged, it only copies from them.
    this.readOnlyWindows = info.type === 'cpu' ? 'private' : info.memory === 'device' ? 'shared' : 'fresh';
    // A GPU finishes most launches in well under a millisecond: wake for them by polling (jobs.ts),
    // on a host with cores to spare. A CPU device computes on the cores a poll would take.
    this.completionPollUs = info.type !== 'cpu' && os.availableParallelism() >= 4 ? GPU_COMPLETION_POLL_US : 0;
    // A CPU device's ways are threads the OS time-slices; a GPU's driver does not switch a program
    // that never ends out for another context (ctxsw.ts).
    this.timesliced = info.type === 'cpu';
    // Owners beyond a CPU device's ways share one (native/src/vulkan WayContext: owner % ways).
    this.ways = info.type === 'cpu' ? Math.max(1, info.tuning.CPU_WAYS) : 1;
  }

  /** Open the named device (substring match) or the first suitable one; throws a readable
   * Error when there is none. One Vulkan device per process. */
  static open(deviceName?: string): VulkanBackend {
    let r: ReturnType<typeof native.vulkanOpen>;
    try {
      r = native.vulkanOpen(deviceName ? { device: deviceName } : {});
    } catch (err) {
      throw new Error(`Vulkan is not usable: ${(err as Error).message}`);
    }
    if (!r.ok) throw new Error(r.error);
    // Built-ins written for a GPU where the device is one (VUGPU_VK_GEMM=gpu|portable overrides).
    const v = process.env.VUGPU_VK_GEMM;
    useGpuVariants(v === 'gpu' ? true : v === 'portable' ? false : r.info.type !== 'cpu');
    jobPool.acquire(); // compile and dispatch jobs run on the shared pool
    return new VulkanBackend(r.info);
  }

  compile(slot: number, words: Uint32Array, entryIndex: number, spec: Uint32Array, done: (r: JobResult) => void): number {
    return jobPool.submitProgramCompile({ slot, words, entryIndex, spec, limits: this.nativeLimits() }, 0, done);
  }

  info(slot: number): CompiledInfo {
    const i = native.programInfo(slot);
    if (!i) return { reason: 0, message: 'no such program slot' };
    return { reason: i.reason, message: i.message, entry: i.entry ?? undefined };
  }

  dispatch(job: DispatchJob, watchdogMs: number, done: (r: JobResult) => void): number {
    return jobPool.submitDispatch(job, watchdogMs, done);
  }

  dispatchBatch(jobs: DispatchJob[], watchdogMs: number, done: (r: JobResult) => void): number {
    return jobPool.submitDispatchBatch(jobs, watchdogMs, done);
  }

  keepVram(vramBytes: number): ((offset: number, length: number) => void) | null {
    // Only the device-memory path copies VRAM to the device; zero-copy devices read it in place.
    // One engine per process keeps VRAM (the mirrors are keyed by VRAM offset).
    if (this.deviceInfo.memory !== 'device' || vramHolder !== null) return null;
    vramHolder = this;
    native.vulkanResident(vramBytes);
    return (offset, length) => native.vulkanVramWritten(offset, length);
  }

  releaseVram(): void {
    if (vramHolder !== this) return;
    vramHolder = null;
    native.vulkanResident(0);
  }

  prepareWay(way: number): void {
    // A CPU device's way opens in well under a second, and only a VM that launches needs one.
    if (!this.timesliced) native.vulkanPrepareWay(way);
  }

  cancel(id: number): void {
    jobPool.cancel(id);
  }

  release(slot: number): void {
    native.programRelease(slot);
  }

  generation(): number {
    return native.vulkanStats().generation;
  }

  /** Device losses seen and rebuilds after them since the process started, and the last loss's
   * log text ("" before any): /metrics and the control API's status. */
  lossReport(): { losses: number; rebuilds: number; lastLoss: string } {
    const s = native.vulkanStats();
    return { losses: s.losses, rebuilds: s.rebuilds, lastLoss: s.lastLoss };
  }

  /** Host imports and staged bytes since the process started (/metrics). */
  transfers(): { imports: number; uploadBytes: number; downloadBytes: number; residentBytes: number; mirrorBytes: number } {
    const s = native.vulkanStats();
    return { imports: s.imports, uploadBytes: s.uploadBytes, downloadBytes: s.downloadBytes, residentBytes: s.residentBytes, mirrorBytes: s.mirrorBytes };
  }

  /** Dispatches and their pool-thread time by phase since the process started (/metrics). */
  dispatchPhases(): { dispatches: number; setupNs: number; recordNs: number; queueSubmitNs: number; waitNs: number; finishNs: number } {
    return native.vulkanStats().dispatchPhases;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    native.vulkanClose();
    jobPool.release();
  }

  /** What the SPIR-V front end checks against (program.h Limits): the guest's envelope. */
  private nativeLimits() {
    const l = this.limits;
    return {
      maxModuleBytes: l.maxModuleBytes, maxBindings: l.maxBindings, maxPushBytes: l.maxPushBytes,
      maxSpecConstants: l.maxSpecConstants, maxWgInvocations: l.maxWgInvocations, maxWgSize: l.maxWgSize,
      maxSharedBytes: l.maxSharedBytes, features: l.features, loopLimit: l.loopLimit,
    };
  }
}
