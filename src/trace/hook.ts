// Where accesses enter the tracer: a RegionHandler wrapper for a VM's trapped regions (BAR0,
// and BAR1 when it is trapped). With tracing paused the wrapper costs one property load; with
// it on, two clock reads and one ring slot (no allocation). An access whose handler throws is
// not recorded (the device model turns the throw into an error reply).
import type { RegionHandler } from '../device-model/declaration.ts';
import type { Tracer } from './recorder.ts';

// A module binding: cheaper per call than looking up the global each time, and this wrapper runs
// on every trapped access.
const perf = performance;

export function traceRegion(h: RegionHandler, tracer: Tracer, vm: number, region: number): RegionHandler {
  const traced: RegionHandler = {
    read(offset, size) {
      if (!tracer.enabled) return h.read(offset, size);
      const start = perf.now();
      const v = h.read(offset, size);
      tracer.mmio(start, vm, region, offset, size, false, v);
      return v;
    },
    write(offset, size, value) {
      if (!tracer.enabled) {
        h.write(offset, size, value);
        return;
      }
      const start = perf.now();
      h.write(offset, size, value);
      tracer.mmio(start, vm, region, offset, size, true, value);
    },
  };
  // Block accesses (other sizes, e.g. a whole ROM) are recorded with their length, value 0.
  const readBlock = h.readBlock;
  if (readBlock) {
    traced.readBlock = (offset, dst) => {
      const start = tracer.enabled ? perf.now() : 0;
      readBlock.call(h, offset, dst);
      if (tracer.enabled) tracer.mmio(start, vm, region, offset, dst.length, false, 0);
    };
  }
  const writeBlock = h.writeBlock;
  if (writeBlock) {
    traced.writeBlock = (offset, src) => {
      const start = tracer.enabled ? perf.now() : 0;
      writeBlock.call(h, offset, src);
      if (tracer.enabled) tracer.mmio(start, vm, region, offset, src.length, true, 0);
    };
  }
  return traced;
}
