// Mediated modes (fv-naive, fv, pv, pv-batch): a VM's PCI function (gpu-function.ts) whose BAR0
// is the vGPU's register view and whose BAR1 is the VM's VRAM slice — mmapped by the client
// from the engine's VRAM memfd at the slice offset (BAR remap), or trapped access by access in
// fv-naive. The device model's DMA table is the VM's system memory; its MSI-X vectors are the
// vGPU's. A client that goes away resets the vGPU and scrubs its slice; the VM stays attached
// (its socket accepts the next client).
import { PciDevice } from '../device-model/device.ts';
import type { RegionHandler } from '../device-model/declaration.ts';
import type { Tracer } from '../trace/recorder.ts';
import { traceRegion } from '../trace/hook.ts';
import { gpuFunctionDeclaration } from './gpu-function.ts';
import type { Aggregator, AttachOptions } from './aggregator.ts';
import type { Vgpu, VgpuObserver } from './vgpu.ts';

export class MediatedVgpu {
  readonly name: string;
  readonly vgpu: Vgpu;
  readonly device: PciDevice;
  private readonly agg: Aggregator;

  /** tracer: record trapped accesses and mediation events (vugpu serve --trace). */
  constructor(agg: Aggregator, o: AttachOptions, tracer?: Tracer) {
    this.agg = agg;
    this.name = o.name;
    const vm = agg.attach(o);
    this.vgpu = vm;
    const tv = tracer ? tracer.vm(o.name) : -1;
    if (tracer) vm.observer = traceObserver(tracer, tv);
    const traced = (h: RegionHandler, region: number) => (tracer ? traceRegion(h, tracer, tv, region) : h);
    try {
      this.device = new PciDevice(
        gpuFunctionDeclaration({
          name: o.name,
          bar0: traced({
            read: (off, size) => vm.mmioRead(off, size),
            write: (off, size, value) => vm.mmioWrite(off, size, value),
          }, 0),
          bar1Size: vm.slice.size,
          bar1Backing: vm.traits.bar1Mapped ? { fd: agg.engine.vramFd, offset: vm.slice.base } : undefined,
          bar1Handler: vm.traits.bar1Mapped
            ? undefined
            : traced({ read: (off, size) => vm.bar1Read(off, size), write: (off, size, value) => vm.bar1Write(off, size, value) }, 1),
          callbacks: {
            connected: () => {
              vm.log.info({ mode: vm.mode }, 'client connected');
              if (tracer?.enabled) tracer.vmAttach(tv, o.name, vm.mode);
            },
            // A client gone (reason 'disconnect') is a new VM next time: scrub its slice, and
            // serve the next client only once that is done.
            reset: (reason) => agg.resetVm(vm, reason === 'disconnect'),
            whenReady: (go) => vm.whenScrubbed(go),
            disconnected: (reason) => {
              vm.log.info({ reason }, 'client gone');
              if (tracer?.enabled) tracer.vmDetach(tv, String(reason));
            },
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

/** Mediation events into the tracer (each call is one guard and at most one ring slot). */
function traceObserver(t: Tracer, vm: number): VgpuObserver {
  return {
    tlbFlush: (pd) => t.enabled && t.tlbFlush(vm, pd),
    shadowRebuild: (ptes, pd) => t.enabled && t.shadowRebuild(vm, ptes, pd),
    hypercall: (op, count, result) => t.enabled && t.hypercall(vm, op, count, result),
    doorbell: (vchid) => t.enabled && t.doorbell(vm, vchid),
    fault: (vchid, va, reason, write, unit) => t.enabled && t.fault(vm, vchid, va, reason, write, unit),
    channelError: (vchid, code) => t.enabled && t.channelError(vm, vchid, code),
  };
}
