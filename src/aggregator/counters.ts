// Per-VM event counters of a vGPU: plain numbers incremented on the hot paths (no allocation,
// no map lookups) and exported through the metrics registry by name. GPUvm's instruments.h
// counted the same things (flushes, shadowing passes, hypercalls) per context.

export interface VgpuCounters {
  /** Trapped BAR0 accesses (and trapped BAR1 accesses in fv-naive). */
  mmioReads: number;
  mmioWrites: number;
  /** Of those, BAR1 accesses (fv-naive only; the other modes map BAR1). */
  bar1Reads: number;
  bar1Writes: number;
  /** MMU_FLUSH_TRIGGER writes (and PV FLUSH calls). */
  tlbFlushes: number;
  /** Shadow address spaces rebuilt (one guest PD rescanned and its shadow rewritten). */
  shadowRebuilds: number;
  /** Shadow PDEs/PTEs whose value changed (rebuilds and PV map/unmap). */
  shadowPtesWritten: number;
  hypercalls: number;
  /** PV MAP/UNMAP entries applied. */
  hypercallEntries: number;
  doorbells: number;
  /** Submissions the scheduler handed to the engine. */
  dispatches: number;
  /** Device ns of this VM's jobs (from the engine's channel-idle events). */
  deviceNs: number;
  /** MMU faults reflected into the VM. */
  faults: number;
  /** Channel errors reflected into the VM (MMU faults excluded). */
  channelErrors: number;
  /** Binds refused because the physical channel pool was empty. */
  poolExhausted: number;
  fences: number;
  interrupts: number;
}

export function newCounters(): VgpuCounters {
  return {
    mmioReads: 0, mmioWrites: 0, bar1Reads: 0, bar1Writes: 0, tlbFlushes: 0, shadowRebuilds: 0,
    shadowPtesWritten: 0, hypercalls: 0, hypercallEntries: 0, doorbells: 0, dispatches: 0,
    deviceNs: 0, faults: 0, channelErrors: 0, poolExhausted: 0, fences: 0, interrupts: 0,
  };
}
