// The PCI function every VM sees (docs/hw-spec.md §1), declared for the device model: identity,
// BAR0 (16 MiB, trapped), BAR1 (64-bit prefetchable VRAM aperture, sparse-mmapped from the VRAM
// memfd or trapped access by access), MSI-X with 4 vectors in BAR0. Pass-through and mediated
// vGPUs differ only in the handlers and the backing they plug in here.
import type { DeviceCallbacks, DeviceDeclaration, RegionHandler } from '../device-model/declaration.ts';
import { registerDurability } from '../gpu/persist.ts';
import { Durability } from '../state/persist.ts';
import {
  BAR0_SIZE, MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET, MSIX_VECTORS, PCI_CLASS, PCI_DEVICE_ID, PCI_VENDOR_ID,
} from '../gpu/spec.ts';

export interface GpuFunctionOptions {
  name: string;
  /** Trapped BAR0 (registers). */
  bar0: RegionHandler;
  /** BAR1 size in bytes (power of two): the VM's VRAM (slice). */
  bar1Size: number;
  /** BAR1 bytes live in this fd at this offset and are mmapped by the client (BAR remap). */
  bar1Backing?: { fd: number; offset: number };
  /** BAR1 accesses trapped one by one (fv-naive); used for everything not mmapped. */
  bar1Handler?: RegionHandler;
  callbacks: DeviceCallbacks;
}

export function gpuFunctionDeclaration(o: GpuFunctionOptions): DeviceDeclaration {
  if (!o.bar1Backing && !o.bar1Handler) throw new Error('BAR1 needs a backing fd or a trap handler');
  return {
    name: o.name,
    pci: { vendorId: PCI_VENDOR_ID, deviceId: PCI_DEVICE_ID, subsystemVendorId: PCI_VENDOR_ID, subsystemId: 1, classCode: PCI_CLASS, revision: 0xa1 },
    capabilities: {
      pm: true,
      pcie: 'endpoint',
      msix: { bar: 0, tableOffset: MSIX_TABLE_OFFSET, pbaOffset: MSIX_PBA_OFFSET },
    },
    regions: {
      // Every vGPU's BAR0 is the register map of docs/hw-spec.md: the engine's knowledge of
      // which of its writes a restart must keep applies to all of them.
      0: { size: BAR0_SIZE, kind: 'mem32', handler: o.bar0, durability: registerDurability },
      1: {
        size: o.bar1Size,
        kind: 'mem64',
        prefetchable: true,
        handler: o.bar1Handler,
        backing: o.bar1Backing ? { fd: o.bar1Backing.fd, offset: o.bar1Backing.offset } : undefined,
        durability: () => Durability.none, // VRAM: its bytes live in the shared memfd
      },
    },
    // ERR is declared so QEMU enables its error-recovery path quietly; vugpu never signals it
    // (signalling ERR stops the VM).
    irqs: { intx: 0, msix: MSIX_VECTORS, err: 1 },
    callbacks: o.callbacks,
  };
}
