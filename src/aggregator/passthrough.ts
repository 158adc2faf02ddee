// Mode `pt`: one VM drives the engine directly, as with VFIO pass-through. BAR0 goes straight
// to the engine's registers, BAR1 is the whole VRAM memfd (mmapped), the engine's bus addresses
// are the VM's guest-physical addresses resolved through its DMA map, and engine interrupts
// are the VM's MSI-X vectors. No mediation, so only one VM may use the engine this way.
import { PciDevice } from '../device-model/device.ts';
import type { Engine } from '../gpu/engine.ts';
import type { BusResolver, Extent } from '../gpu/bus.ts';
import type { RegionHandler } from '../device-model/declaration.ts';
import { logger } from '../log.ts';
import type { Tracer } from '../trace/recorder.ts';
import { traceRegion } from '../trace/hook.ts';
import { gpuFunctionDeclaration } from './gpu-function.ts';

/** The counters pass-through keeps (a subset of the per-VM metrics). */
export interface MmioCounters {
  mmioReads: number;
  mmioWrites: number;
}

export class PassthroughVgpu {
  readonly name: string;
  readonly device: PciDevice;
  readonly engine: Engine;
  private readonly counters: MmioCounters | undefined;

  /** tracer: record every trapped BAR0 access (vugpu serve --trace). */
  constructor(name: string, engine: Engine, counters?: MmioCounters, tracer?: Tracer) {
    this.name = name;
    this.engine = engine;
    this.counters = counters;
    const c = counters;
    const bar0: RegionHandler = {
      read: (off, size) => {
        if (c) c.mmioReads++;
        return engine.mmioRead(off, size);
      },
      write: (off, size, value) => {
        if (c) c.mmioWrites++;
        engine.mmioWrite(off, size, value);
      },
    };
    const traceVm = tracer ? tracer.vm(name) : -1;
    this.device = new PciDevice(
      gpuFunctionDeclaration({
        name,
        bar0: tracer ? traceRegion(bar0, tracer, traceVm, 0) : bar0,
        bar1Size: engine.vramSize,
        bar1Backing: { fd: engine.vramFd, offset: 0 },
        callbacks: {
          connected: () => {
            if (tracer?.enabled) tracer.vmAttach(traceVm, name, 'pt');
          },
          reset: (reason) => {
            logger.info({ vm: name, reason }, 'pt: device reset');
            engine.reset();
          },
          disconnected: (reason) => {
            logger.info({ vm: name, reason }, 'pt: client gone');
            if (tracer?.enabled) tracer.vmDetach(traceVm, String(reason));
          },
        },
      }),
    );
    const dma = this.device.dma;
    const bus: BusResolver = {
      resolve(busAddr: number, length: number, write: boolean): Extent[] | null {
        const r = dma.translate(busAddr, length, write);
        return r.ok ? r.extents : null;
      },
    };
    engine.bus = bus;
    engine.onInterrupt = (vector) => {
      this.device.irq.msix(vector);
    };
    if (tracer) {
      // The engine's own fault and channel-error events (no mediation: chids are the VM's).
      const prev = engine.listener;
      engine.listener = {
        ...prev,
        fault: (f) => {
          prev.fault?.(f);
          if (tracer.enabled) tracer.fault(traceVm, f.chid, f.va, f.reason, f.write, f.unit);
        },
        channelError: (chid, code, info) => {
          prev.channelError?.(chid, code, info);
          if (tracer.enabled) tracer.channelError(traceVm, chid, code);
        },
      };
    }
  }
}
