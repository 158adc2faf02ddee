// PMC (hw-spec §3.2) and the PBUS/PFB/PGRAPH odds and ends that are a register or two each.
import type { RegisterInfo } from './regs.ts';
import type { GpuCore } from './core.ts';
import {
  BAR1_INST, PFB_PART_COUNT, PFB_PART_SIZE_MB, PMC_BOOT_0, PMC_BOOT_0_VALUE, PMC_ENABLE,
  PMC_ENABLE_RESET, PMC_INTR, PMC_INTR_EN, PRAMIN_BASE, PGRAPH_STATUS,
} from './spec.ts';

const RO = 0xffffffff;

export interface PmcHooks {
  /** PMC_ENABLE changed (the PFIFO bit gates channel scheduling). */
  enableChanged(now: number, old: number): void;
  /** PGRAPH busy: any job in flight. */
  busy(): boolean;
}

export function pmcRegisters(core: GpuCore, hooks: PmcHooks): RegisterInfo[] {
  return [
    { addr: PMC_BOOT_0, name: 'PMC_BOOT_0', reset: PMC_BOOT_0_VALUE, ro: RO },
    { addr: PMC_INTR, name: 'PMC_INTR', reset: 0, ro: ~0xf, w1c: 0xf },
    {
      addr: PMC_INTR_EN, name: 'PMC_INTR_EN', reset: 0, ro: ~0xf,
      postWrite: (now, _w, old) => core.irq.enableChanged(now, old),
    },
    {
      addr: PMC_ENABLE, name: 'PMC_ENABLE', reset: PMC_ENABLE_RESET, ro: ~PMC_ENABLE_RESET,
      postWrite: (now, _w, old) => hooks.enableChanged(now, old),
    },
    { addr: PRAMIN_BASE, name: 'PRAMIN_BASE', reset: 0, ro: 0xff000000 },
    { addr: BAR1_INST, name: 'BAR1_INST', reset: 0, ro: RO },
    { addr: PFB_PART_COUNT, name: 'PFB_PART_COUNT', reset: 1, ro: RO },
    { addr: PFB_PART_SIZE_MB, name: 'PFB_PART_SIZE_MB', reset: core.vram.size / (1 << 20), ro: RO },
    { addr: PGRAPH_STATUS, name: 'PGRAPH_STATUS', reset: 0, ro: RO, postRead: () => (hooks.busy() ? 1 : 0) },
  ];
}
