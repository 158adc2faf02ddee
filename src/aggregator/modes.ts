// The mediated vGPU modes (GPUvm's FV-naive, FV-optimized, PV-naive, PV-multicall) as a table
// of traits, so code asks "is BAR1 mapped?" instead of comparing mode names. Pass-through (pt)
// is not mediated and lives in passthrough.ts.

export type MediatedMode = 'fv-naive' | 'fv' | 'pv' | 'pv-batch';

export interface ModeTraits {
  /** Rebuild shadows at every trapped TLB flush (else mark dirty; rebuild at doorbell/bind). */
  eagerShadow: boolean;
  /** BAR1 is the VM's VRAM slice mmapped into the guest (BAR remap); else every access traps. */
  bar1Mapped: boolean;
  /** The PV hypercall page at BAR0 0xFE0000 is present. pv and pv-batch differ only in the
   * guest: one entry per MAP/UNMAP call versus batches of up to 128 (the multicall). */
  pv: boolean;
}

export const MODES: Readonly<Record<MediatedMode, ModeTraits>> = Object.freeze({
  'fv-naive': { eagerShadow: true, bar1Mapped: false, pv: false },
  fv: { eagerShadow: false, bar1Mapped: true, pv: false },
  pv: { eagerShadow: false, bar1Mapped: true, pv: true },
  'pv-batch': { eagerShadow: false, bar1Mapped: true, pv: true },
});

export const MEDIATED_MODES = Object.freeze(Object.keys(MODES) as MediatedMode[]);

export function isMediatedMode(m: string): m is MediatedMode {
  return Object.hasOwn(MODES, m);
}
