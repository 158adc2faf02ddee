// Each device says how soon a handled request must reach the checkpoint (src/state/persist.ts
// Durability): the device model for the protocol's requests and config space, the GPU function
// for its BARs (BAR0's register map from src/gpu/persist.ts). The restart layer only acts on it.
import { describe, expect, it } from 'vitest';
import { PciDevice } from '../../src/device-model/device.ts';
import { Command, RegionIndex } from '../../src/device-model/protocol.ts';
import type { RegionHandler } from '../../src/device-model/declaration.ts';
import { gpuFunctionDeclaration } from '../../src/aggregator/gpu-function.ts';
import { registerDurability } from '../../src/gpu/persist.ts';
import { Durability } from '../../src/state/persist.ts';
import * as S from '../../src/gpu/spec.ts';

const regs: RegionHandler = { read: () => 0, write: () => {} };

function gpuDevice(): PciDevice {
  return new PciDevice(gpuFunctionDeclaration({ name: 'd', bar0: regs, bar1Size: 1 << 20, bar1Handler: regs, callbacks: {} }));
}

describe('durability declared by the devices', () => {
  const dev = gpuDevice();
  const write = (region: number, offset: number, errno = 0) => dev.durability(Command.REGION_WRITE, region, offset, errno);

  it('BAR0: state the guest relies on before the reply; acknowledgements and doorbells coalesced; PRAMIN is VRAM', () => {
    expect(write(0, S.PMC_ENABLE)).toBe(Durability.now);
    expect(write(0, S.DOORBELL)).toBe(Durability.later);
    expect(write(0, S.PFIFO_INTR)).toBe(Durability.later);
    expect(write(0, S.PMC_INTR)).toBe(Durability.later);
    expect(write(0, S.MMU_FAULT_STATUS)).toBe(Durability.later);
    expect(write(0, S.PFIFO_FENCE_PENDING + 12)).toBe(Durability.later);
    expect(write(0, S.PFIFO_ERR_PENDING)).toBe(Durability.later);
    expect(write(0, S.DIAG_SCRATCH0)).toBe(Durability.later);
    expect(write(0, S.PRAMIN_WINDOW)).toBe(Durability.none);
    expect(write(0, S.PRAMIN_WINDOW + S.PRAMIN_WINDOW_SIZE)).toBe(registerDurability(S.PRAMIN_WINDOW + S.PRAMIN_WINDOW_SIZE));
  });

  it('BAR1 (VRAM) needs nothing; config space before the reply; a failed write only coalesced', () => {
    expect(write(1, 0x100)).toBe(Durability.none);
    expect(write(RegionIndex.CONFIG, 0x04)).toBe(Durability.now);
    expect(write(0, S.PMC_ENABLE, 22)).toBe(Durability.later);
    expect(write(5, 0)).toBe(Durability.later); // a region the device did not declare
  });

  it('protocol requests: reads need nothing, state changes before the reply unless they failed', () => {
    expect(dev.durability(Command.REGION_READ, 0, S.PMC_ENABLE, 0)).toBe(Durability.none);
    expect(dev.durability(Command.DEVICE_GET_REGION_INFO, 0, 0, 0)).toBe(Durability.none);
    for (const c of [Command.VERSION, Command.DMA_MAP, Command.DMA_UNMAP, Command.DEVICE_SET_IRQS, Command.DEVICE_RESET]) {
      expect(dev.durability(c, 0, 0, 0), `command ${c}`).toBe(Durability.now);
      expect(dev.durability(c, 0, 0, 1), `command ${c} failed`).toBe(Durability.later);
    }
  });
});
