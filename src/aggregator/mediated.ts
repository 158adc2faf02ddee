// Mediated modes (fv-naive, fv, pv, pv-batch): a VM's PCI function (gpu-function.ts) whose BAR0
// is the vGPU's register view and whose BAR1 is the VM's VRAM slice — mmapped by the client
// from the engine's VRAM memfd at the slice offset (BAR remap), or trapped access by access in
// fv-naive. The device model's DMA table is the VM's system memory; its MSI-X vectors are the
// vGPU's. A client that goes away resets the vGPU and scrubs its slice; the VM stays attached
// (its socket accepts the next client).
import { PciDevice } from '../device-model/device.ts';
import { gpuFunctionDeclaration } from './gpu-function.ts';
import type { Aggregator, AttachOptions } from './aggregator.ts';
import type { Vgpu } from './vgpu.ts';

export class MediatedVgpu {
  readonly name: string;
  readonly vgpu: Vgpu;
  readonly device: PciDevice;
  private readonly agg: Aggregator;

  constructor(agg: Aggregator, o: AttachOptions) {
    this.agg = agg;
    this.name = o.name;
    const vm = agg.attach(o);
    this.vgpu = vm;
    try {
      this.device = new PciDevice(
        gpuFunctionDeclaration({
          name: o.name,
          bar0: {
            read: (off, size) => vm.mmioRead(off, size),
            write: (off, size, value) => vm.mmioWrite(off, size, value),
          },
          bar1Size: vm.slice.size,
          bar1Backing: vm.traits.bar1Mapped ? { fd: agg.engine.vramFd, offset: vm.slice.base } : undefined,
          bar1Handler: vm.traits.bar1Mapped
            ? undefined
            : { read: (off, size) => vm.bar1Read(off, size), write: (off, size, value) => vm.bar1Write(off, size, value) },
          callbacks: {
            connected: () => vm.log.info({ mode: vm.mode }, 'client connected'),
            // A client gone (reason 'disconnect') is a new VM next time: scrub its slice.
            reset: (reason) => agg.resetVm(vm, reason === 'disconnect'),
            disconnected: (reason) => vm.log.info({ reason }, 'client gone'),
          },
        }),
      );
    } catch (err) {
      agg.detach(vm);
      throw err;
    }
    agg.connect(vm, this.device.dma, (vector) => {
      this.device.irq.msix(vector);
    });
  }

  /** Remove the VM from the aggregator (its socket is closed by the server). */
  close(): void {
    this.agg.detach(this.vgpu);
  }
}
