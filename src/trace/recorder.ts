// The opt-in tracer: trapped MMIO accesses and aggregator events, recorded into a preallocated
// ring of typed-array columns (one slot per record, no object per access), and converted to
// protobuf TraceBatch messages off the hot path — when a batch's worth is pending (on
// setImmediate) or every flushMs — appended length-delimited to the trace file.
//
// Call sites test `tracer.enabled` before doing anything else, so a disabled (or closed)
// tracer costs one property load. When the ring is full, new records are dropped and counted
// (the count goes into the next batch); records already in the ring are never overwritten.
//
// Records are in insertion order, and an MMIO access is inserted when its handler returns:
// its time is the completion time (its start is t - latencyNs), and events its handler caused
// (a TLB flush on an MMU_FLUSH_TRIGGER write) come before it.
import fs from 'node:fs';
import { logger } from '../log.ts';
import {
  TRACE_FORMAT, TRACE_VERSION, TraceBatchType, TraceHeaderType,
  type EngineConfig, type RegisterName, type TraceBatch, type TraceHeader, type TraceRecord, type VmInfo,
} from './schema.ts';

export interface TracerOptions {
  /** Trace file (created or truncated). */
  path: string;
  /** Ring slots, a power of two (default 65536: ~2.9 MiB of columns). */
  capacity?: number;
  /** Records per TraceBatch, and the backlog that triggers a flush (default 4096). */
  batchSize?: number;
  /** Flush whatever is pending this often (default 100 ms; 0 = only by backlog/flush()). */
  flushMs?: number;
  engine?: EngineConfig;
  /** VMs known up front (ids 0..n-1 in this order); vm() adds others. */
  vms?: { name: string; mode: string }[];
  registers?: RegisterName[];
  comment?: string;
}

export interface TracerStats {
  /** Records accepted into the ring. */
  recorded: number;
  /** Records lost because the ring was full. */
  dropped: number;
  /** Records written to the file. */
  written: number;
  batches: number;
  /** Bytes written, header included. */
  bytes: number;
}

// Record kinds (ring column `kind`). Column use per kind:
//   MMIO_*:  region, a = offset, b = value 31:0, c = value 63:32, d = size, x = latency (ms)
//   TLB:     a = all (0/1), x = pd address
//   SHADOW:  a = ptes, x = pd address
//   HCALL:   a = op, b = count, c = result (int32 bits)
//   DOORBELL a = chid;  CHERR: a = chid, b = code
//   FAULT:   a = chid, b = reason, c = unit, d = write (0/1), x = va
//   ATTACH / DETACH: aux = strings (rare: the one place a record may hold an object)
const K_MMIO_READ = 1;
const K_MMIO_WRITE = 2;
const K_TLB = 3;
const K_SHADOW = 4;
const K_HCALL = 5;
const K_DOORBELL = 6;
const K_FAULT = 7;
const K_CHERR = 8;
const K_ATTACH = 9;
const K_DETACH = 10;

const U32_MAX = 0xffffffff;
const perf = performance; // module binding: cheaper than the global lookup per record
const TWO32 = 2 ** 32;

export class Tracer {
  /** The call-site guard: false when paused, closed, or after a write error. */
  enabled = true;
  readonly path: string;
  readonly capacity: number;
  readonly batchSize: number;

  // Ring columns.
  private readonly kind: Uint8Array;
  private readonly region: Uint8Array;
  private readonly vmCol: Uint16Array;
  private readonly a: Uint32Array;
  private readonly b: Uint32Array;
  private readonly c: Uint32Array;
  private readonly d: Uint32Array;
  private readonly t: Float64Array; // perf.now() ms at insertion
  private readonly x: Float64Array;
  private readonly aux: (string[] | undefined)[];
  private readonly mask: number;
  private head = 0; // records ever inserted
  private tail = 0; // records ever drained
  private droppedPending = 0;
  private droppedTotal = 0;

  private readonly t0: number; // perf.now() of t = 0
  private lastNs = 0; // time of the last record written (ns since t0)
  private fd: number;
  private readonly vmIds = new Map<string, number>();
  private flushScheduled = false;
  private readonly timer: NodeJS.Timeout | null;
  private readonly st = { written: 0, batches: 0, bytes: 0 };

  constructor(o: TracerOptions) {
    const capacity = o.capacity ?? 1 << 16;
    if (!(capacity >= 2 && capacity <= 1 << 24 && (capacity & (capacity - 1)) === 0)) {
      throw new Error(`trace ring capacity must be a power of two in [2, 2^24], got ${capacity}`);
    }
    this.path = o.path;
    this.capacity = capacity;
    this.mask = capacity - 1;
    this.batchSize = Math.max(1, Math.min(o.batchSize ?? 4096, capacity));
    this.kind = new Uint8Array(capacity);
    this.region = new Uint8Array(capacity);
    this.vmCol = new Uint16Array(capacity);
    this.a = new Uint32Array(capacity);
    this.b = new Uint32Array(capacity);
    this.c = new Uint32Array(capacity);
    this.d = new Uint32Array(capacity);
    this.t = new Float64Array(capacity);
    this.x = new Float64Array(capacity);
    this.aux = new Array<string[] | undefined>(capacity).fill(undefined);

    const vms: VmInfo[] = (o.vms ?? []).map((v, id) => ({ id, name: v.name, mode: v.mode }));
    for (const v of vms) this.vmIds.set(v.name, v.id);
    this.t0 = perf.now();
    const header: TraceHeader = {
      format: TRACE_FORMAT,
      version: TRACE_VERSION,
      startUnixMs: perf.timeOrigin + this.t0,
      engine: o.engine,
      vms,
      registers: o.registers ?? [],
      comment: o.comment ?? '',
    };
    this.fd = fs.openSync(o.path, 'w');
    this.writeOut(TraceHeaderType.encodeDelimited(header).finish());
    const flushMs = o.flushMs ?? 100;
    this.timer = flushMs > 0 ? setInterval(() => this.flush(), flushMs).unref() : null;
    logger.info({ path: o.path, capacity, batchSize: this.batchSize }, 'trace: recording');
  }

  get stats(): TracerStats {
    return { recorded: this.head, dropped: this.droppedTotal, ...this.st };
  }

  /** Records in the ring, not yet written. */
  get pending(): number {
    return this.head - this.tail;
  }

  /** The id records of VM `name` carry: its index in `vms`, or the next free one. Records
   * nothing (vmAttach does). */
  vm(name: string): number {
    let id = this.vmIds.get(name);
    if (id === undefined) {
      id = this.vmIds.size;
      if (id > 0xffff) throw new Error('trace: more than 65536 VMs');
      this.vmIds.set(name, id);
    }
    return id;
  }

  // ---- hot path ----

  /** A trapped access that started at `start` (perf.now()) and just completed. */
  mmio(start: number, vm: number, region: number, offset: number, size: number, write: boolean, value: number | bigint): void {
    const i = this.slot(write ? K_MMIO_WRITE : K_MMIO_READ, vm);
    if (i < 0) return;
    this.region[i] = region;
    this.a[i] = offset;
    this.d[i] = size;
    this.x[i] = this.t[i]! - start;
    if (typeof value === 'number') {
      this.b[i] = value; // ToUint32: bits 31:0
      this.c[i] = size === 8 ? Math.floor(value / TWO32) : 0;
    } else {
      // 8-byte accesses are the only bigints (rare on BAR0); these conversions allocate.
      this.b[i] = Number(BigInt.asUintN(32, value));
      this.c[i] = Number(BigInt.asUintN(32, value >> 32n));
    }
  }

  // ---- typed events (the mediated aggregator calls these) ----

  /** pd: the flushed page directory's VM VRAM address, or null for all. */
  tlbFlush(vm: number, pd: number | null): void {
    const i = this.slot(K_TLB, vm);
    if (i < 0) return;
    this.a[i] = pd === null ? 1 : 0;
    this.x[i] = pd ?? 0;
  }

  shadowRebuild(vm: number, ptes: number, pd = 0): void {
    const i = this.slot(K_SHADOW, vm);
    if (i < 0) return;
    this.a[i] = ptes;
    this.x[i] = pd;
  }

  hypercall(vm: number, op: number, count: number, result = 0): void {
    const i = this.slot(K_HCALL, vm);
    if (i < 0) return;
    this.a[i] = op;
    this.b[i] = count;
    this.c[i] = result;
  }

  doorbell(vm: number, chid: number): void {
    const i = this.slot(K_DOORBELL, vm);
    if (i >= 0) this.a[i] = chid;
  }

  fault(vm: number, chid: number, va: number, reason: number, write = false, unit = 0): void {
    const i = this.slot(K_FAULT, vm);
    if (i < 0) return;
    this.a[i] = chid;
    this.b[i] = reason;
    this.c[i] = unit;
    this.d[i] = write ? 1 : 0;
    this.x[i] = va;
  }

  channelError(vm: number, chid: number, code: number): void {
    const i = this.slot(K_CHERR, vm);
    if (i < 0) return;
    this.a[i] = chid;
    this.b[i] = code;
  }

  /** A client attached to VM `vm` (its name and mode go into the record). */
  vmAttach(vm: number, name: string, mode: string): void {
    const i = this.slot(K_ATTACH, vm);
    if (i >= 0) this.aux[i] = [name, mode];
  }

  vmDetach(vm: number, reason: string): void {
    const i = this.slot(K_DETACH, vm);
    if (i >= 0) this.aux[i] = [reason];
  }

  /** Claim the next slot and stamp it, or count a drop (−1). */
  private slot(kind: number, vm: number): number {
    if (!this.enabled) return -1;
    const h = this.head;
    if (h - this.tail >= this.capacity) {
      this.droppedPending++;
      this.droppedTotal++;
      return -1;
    }
    const i = h & this.mask;
    this.kind[i] = kind;
    this.vmCol[i] = vm;
    this.t[i] = perf.now();
    this.head = h + 1;
    if (h + 1 - this.tail === this.batchSize && !this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => {
        this.flushScheduled = false;
        this.flush();
      });
    }
    return i;
  }

  // ---- off the hot path ----

  /** Write everything in the ring to the file now (also a drop count with no records). */
  flush(): void {
    while (this.fd >= 0 && (this.head > this.tail || this.droppedPending > 0)) {
      const batch = this.drain();
      this.st.written += batch.records.length;
      this.st.batches++;
      this.writeOut(TraceBatchType.encodeDelimited(batch).finish());
    }
  }

  /** Stop recording, write what is pending and close the file. Idempotent. */
  close(): void {
    this.enabled = false;
    if (this.timer) clearInterval(this.timer);
    this.flush();
    if (this.fd >= 0) {
      fs.closeSync(this.fd);
      this.fd = -1;
      logger.info({ path: this.path, ...this.stats }, 'trace: closed');
    }
  }

  /** Up to batchSize records from the ring as one TraceBatch (a dt that does not fit 32 bits
   * ends the batch early: the next one gets its own base time). */
  private drain(): TraceBatch {
    const records: TraceRecord[] = [];
    const batch: TraceBatch = { baseNs: 0, dropped: this.droppedPending, records };
    this.droppedPending = 0;
    const end = Math.min(this.head, this.tail + this.batchSize);
    let prev = -1;
    for (let r = this.tail; r < end; r++) {
      const i = r & this.mask;
      // Integer ns, never before the previous record (the clock is monotonic; rounding is not).
      const ns = Math.max(this.lastNs, Math.round((this.t[i]! - this.t0) * 1e6));
      if (prev < 0) {
        batch.baseNs = ns;
        prev = ns;
      } else if (ns - prev > U32_MAX) {
        break;
      }
      records.push(this.record(i, ns - prev));
      prev = ns;
      this.lastNs = ns;
      this.aux[i] = undefined;
      this.tail = r + 1;
    }
    return batch;
  }

  private record(i: number, dtNs: number): TraceRecord {
    const vm = this.vmCol[i]!;
    const a = this.a[i]!;
    const b = this.b[i]!;
    switch (this.kind[i]) {
      case K_MMIO_READ:
      case K_MMIO_WRITE:
        return {
          dtNs, vm,
          mmio: {
            region: this.region[i]!, offset: a, size: this.d[i]!, write: this.kind[i] === K_MMIO_WRITE,
            value: b, valueHi: this.c[i]!, latencyNs: Math.min(U32_MAX, Math.round(this.x[i]! * 1e6)),
          },
        };
      case K_TLB: return { dtNs, vm, tlbFlush: { all: a === 1, pdAddr: this.x[i]! } };
      case K_SHADOW: return { dtNs, vm, shadowRebuild: { ptes: a, pdAddr: this.x[i]! } };
      case K_HCALL: return { dtNs, vm, hypercall: { op: a, count: b, result: this.c[i]! | 0 } };
      case K_DOORBELL: return { dtNs, vm, doorbell: { chid: a } };
      case K_FAULT:
        return { dtNs, vm, fault: { chid: a, va: this.x[i]!, reason: b, write: this.d[i] === 1, unit: this.c[i]! } };
      case K_CHERR: return { dtNs, vm, channelError: { chid: a, code: b } };
      case K_ATTACH: {
        const s = this.aux[i] ?? [];
        return { dtNs, vm, vmAttach: { name: s[0] ?? '', mode: s[1] ?? '' } };
      }
      default: {
        const s = this.aux[i] ?? [];
        return { dtNs, vm, vmDetach: { reason: s[0] ?? '' } };
      }
    }
  }

  private writeOut(buf: Uint8Array): void {
    try {
      let off = 0;
      while (off < buf.length) off += fs.writeSync(this.fd, buf, off, buf.length - off);
      this.st.bytes += buf.length;
    } catch (err) {
      // A full disk must not take the device down: stop tracing, keep serving.
      logger.error({ err, path: this.path }, 'trace: write failed, tracing stopped');
      this.enabled = false;
      if (this.timer) clearInterval(this.timer);
      try {
        fs.closeSync(this.fd);
      } catch {
        // already unusable
      }
      this.fd = -1;
    }
  }
}
