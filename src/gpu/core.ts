// What the per-block register tables and engine parts share: the register file, VRAM, the
// bus resolver, the interrupt logic and the device clock. The Engine implements it.
import type { RegisterFile } from './regs.ts';
import type { Vram } from './vram.ts';
import type { BusResolver } from './bus.ts';
import type { Interrupts } from './irq.ts';
import type { Logger } from '../log.ts';

export interface GpuCore {
  readonly regs: RegisterFile;
  readonly vram: Vram;
  readonly irq: Interrupts;
  readonly log: Logger;
  /** Current bus resolver (pluggable: device model DMA map, aggregator, tests). */
  bus: BusResolver;
  /** Nanoseconds since the last device reset (PTIMER). */
  timeNs(): bigint;
}
