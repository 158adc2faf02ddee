// PTIMER (hw-spec §3.7): nanoseconds since reset; reading TIME_0 latches the 64-bit value so
// that TIME_1 returns the matching high word (the latch is TIME_1's stored value, reset 0).
import type { RegisterInfo } from './regs.ts';
import type { GpuCore } from './core.ts';
import { PTIMER_TIME_0, PTIMER_TIME_1 } from './spec.ts';

export function ptimerRegisters(core: GpuCore): RegisterInfo[] {
  return [
    {
      addr: PTIMER_TIME_0, name: 'PTIMER_TIME_0', reset: 0, ro: 0xffffffff,
      postRead: () => {
        const t = core.timeNs();
        core.regs.set(PTIMER_TIME_1, Number(t >> 32n));
        return Number(t & 0xffffffffn);
      },
    },
    { addr: PTIMER_TIME_1, name: 'PTIMER_TIME_1', reset: 0, ro: 0xffffffff },
  ];
}
