// Per-VM event counters of a vGPU. The object is the metrics registry's per-VM object
// (metrics.ts: fixed numeric fields, exported by name) extended with the aggregator's own
// detail counters, so hot paths do one property increment and scrapes see it directly.
// GPUvm's instruments.h counted the same things (flushes, shadowing passes, hypercalls).
import { createVmMetrics, type VmCounters } from './metrics.ts';

/** Counters beyond the exported set (also in the JSON snapshot). */
export interface VgpuDetailCounters {
  /** Of mmioReads/mmioWrites, trapped BAR1 accesses (fv-naive only; other modes map BAR1). */
  bar1Reads: number;
  bar1Writes: number;
  /** PV MAP/UNMAP entries applied. */
  hypercallEntries: number;
  /** Submissions the scheduler handed to the engine. */
  dispatches: number;
  /** Binds refused because the physical channel pool was empty. */
  poolExhausted: number;
  fences: number;
  /** MSI-X messages sent to the VM. */
  interrupts: number;
}

/**
 * mmioReads/mmioWrites: every trapped access (BAR0, and BAR1 in fv-naive); tlbFlushes: trapped
 * MMU_FLUSH_TRIGGER writes and PV FLUSH calls; shadowRebuilds: guest PDs rescanned;
 * shadowPtesWritten: shadow PDEs/PTEs whose value changed (rebuilds and PV map/unmap);
 * deviceNs: from the engine's channel-idle events; faults: MMU faults; channelErrors: the rest.
 */
export type VgpuCounters = VmCounters & VgpuDetailCounters;

/** Extend `base` (a registry object, or a fresh one) with the detail counters. */
export function newCounters(base: VmCounters = createVmMetrics('unregistered', 'none')): VgpuCounters {
  return Object.assign(base, {
    bar1Reads: 0, bar1Writes: 0, hypercallEntries: 0, dispatches: 0, poolExhausted: 0, fences: 0, interrupts: 0,
  });
}
