// What the per-block register tables and engine parts share: the register file, VRAM, the
// bus resolver, the interrupt logic and the device clock. The Engine implements it. The fault
// record types live here, not in mmu.ts, because mmu.ts imports this file (no import cycle).
import type { RegisterFile } from './regs.ts';
import type { Vram } from './vram.ts';
import type { BusResolver } from './bus.ts';
import type { Interrupts } from './irq.ts';
import type { GuestWarnings, Logger } from '../log.ts';
import type { FaultReason, FaultUnit } from './spec.ts';

export interface Fault {
  reason: FaultReason;
  /** VA of the failing page (4 KiB aligned, never below the access start's page). */
  va: number;
  write: boolean;
}

export interface FaultRecord extends Fault {
  chid: number;
  unit: FaultUnit;
}

/**
 * Events for the layer above (the aggregator's scheduler and interrupt routing). They carry
 * the physical chid, which the interrupt vectors alone do not.
 */
export interface EngineListener {
  /** The channel has nothing more to do (GP_GET caught up, no job in flight, not waiting on a
   * semaphore — or it stopped with an error). busyNs = device ns of its jobs since the last
   * idle event; totalNs = all device ns of this channel since the engine was created. */
  channelIdle?(chid: number, busyNs: number, totalNs: number): void;
  /** A FENCE interrupt for this channel (semaphore release with interrupt, NON_STALL_INTERRUPT). */
  fence?(chid: number): void;
  /** The channel entered the error state (MMU faults included, code 16). */
  channelError?(chid: number, code: number, info: number): void;
  /** An MMU fault (reported even when the fault registers were already holding one). */
  fault?(f: FaultRecord): void;
  /** The channel waits beside the device (a program compiling, hw-spec §6.3.1): the device may
   * serve others meanwhile; the channel continues by itself and reports idle when done. */
  channelWaiting?(chid: number): void;
  /** The device read the channel's GP_PUT and is about to translate through its page directory
   * (new entries to fetch, work left in an entry, an acquire to re-check). A mediator brings the
   * channel's shadow up to date here (lazy shadowing, hw-spec §10): the latest point that is
   * still before the device relies on the guest's flushed tables. */
  translating?(chid: number): void;
}

export interface GpuCore {
  readonly regs: RegisterFile;
  readonly vram: Vram;
  readonly irq: Interrupts;
  readonly log: Logger;
  /** Rate-limited warnings for what a driver (a guest) can cause at will, per channel. */
  readonly guestWarnings: GuestWarnings;
  /** Current bus resolver (pluggable: device model DMA map, aggregator, tests). */
  bus: BusResolver;
  listener: EngineListener;
  /** Nanoseconds since the last device reset (PTIMER). */
  timeNs(): bigint;
}
