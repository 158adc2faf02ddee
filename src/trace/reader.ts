// Reading trace files: the header, then batches, then records flattened to one plain object
// each with its absolute time. Reads in chunks, so a trace larger than memory can be
// summarised; a file cut short mid-message ends the iteration with `truncated` set.
import fs from 'node:fs';
import {
  EVENT_TYPES, TRACE_FORMAT, TraceBatchType, TraceHeaderType,
  type EventType, type TraceBatch, type TraceEvents, type TraceHeader,
} from './schema.ts';

const CHUNK = 1 << 20;
/** Larger than any batch the recorder writes (4096 records of < 40 bytes), far below memory. */
const MAX_MESSAGE = 256 << 20;

/** One record with its absolute time (ns since the header's start) and event type. */
export type FlatRecord = TraceEvents & { tNs: number; vm: number; type: EventType };

export class TraceReader {
  readonly path: string;
  /** Set when the file ended inside a message. */
  truncated = false;
  private fd: number;
  private buf = new Uint8Array(0);
  private pos = 0;
  private eof = false;
  private headerCache: TraceHeader | null = null;

  constructor(path: string) {
    this.path = path;
    this.fd = fs.openSync(path, 'r');
  }

  /** The first message; throws if the file is not a vugpu trace. */
  header(): TraceHeader {
    if (this.headerCache) return this.headerCache;
    const bytes = this.next();
    if (!bytes) throw new Error(`${this.path}: empty file, not a vugpu trace`);
    let h: TraceHeader;
    try {
      h = TraceHeaderType.toObject(TraceHeaderType.decode(bytes), { defaults: true, arrays: true }) as TraceHeader;
    } catch (err) {
      throw new Error(`${this.path}: not a vugpu trace (${(err as Error).message})`);
    }
    if (h.format !== TRACE_FORMAT) throw new Error(`${this.path}: not a vugpu trace (format "${h.format}")`);
    this.headerCache = h;
    return h;
  }

  /** The batches, in file order. */
  *batches(): Generator<TraceBatch> {
    this.header();
    for (let bytes = this.next(); bytes; bytes = this.next()) {
      const at = this.pos - bytes.length;
      try {
        const m = TraceBatchType.decode(bytes);
        // Plain objects with every field (the decoded message keeps defaults on its prototype).
        yield TraceBatchType.toObject(m, { defaults: true, arrays: true }) as TraceBatch;
      } catch (err) {
        throw new Error(`${this.path}: bad batch at byte ${at}: ${(err as Error).message}`);
      }
    }
  }

  /** Every record, with its absolute time and event type. Drop counts are in batches(). */
  *records(onBatch?: (b: TraceBatch) => void): Generator<FlatRecord> {
    for (const b of this.batches()) {
      onBatch?.(b);
      let t = b.baseNs;
      for (const r of b.records) {
        t += r.dtNs;
        const type = EVENT_TYPES.find((k) => r[k] != null);
        if (!type) continue; // a record from a newer writer with an event this reader lacks
        yield { tNs: t, vm: r.vm, type, [type]: r[type] } as FlatRecord;
      }
    }
  }

  close(): void {
    if (this.fd >= 0) fs.closeSync(this.fd);
    this.fd = -1;
  }

  /** The next length-delimited message's bytes, or null at the end of the file. */
  private next(): Uint8Array | null {
    for (;;) {
      // Varint length prefix (uint32: at most 5 bytes).
      let len = 0;
      let shift = 0;
      let p = this.pos;
      let complete = false;
      while (p < this.buf.length && shift < 35) {
        const byte = this.buf[p++]!;
        len += (byte & 0x7f) * 2 ** shift;
        shift += 7;
        if ((byte & 0x80) === 0) {
          complete = true;
          break;
        }
      }
      if (complete && len > MAX_MESSAGE) throw new Error(`${this.path}: message of ${len} bytes at ${this.pos}: corrupt file`);
      if (!complete && shift >= 35) throw new Error(`${this.path}: bad length prefix at ${this.pos}: corrupt file`);
      if (complete && p + len <= this.buf.length) {
        this.pos = p + len;
        return this.buf.subarray(p, p + len);
      }
      if (this.eof) {
        if (this.pos < this.buf.length) this.truncated = true;
        return null;
      }
      this.fill(complete ? p + len - this.pos : CHUNK);
    }
  }

  /** Read more of the file, keeping the unconsumed bytes (and room for `need` of them). */
  private fill(need: number): void {
    const rest = this.buf.subarray(this.pos);
    const next = new Uint8Array(Math.max(need, rest.length + CHUNK));
    next.set(rest);
    let have = rest.length;
    while (have < next.length) {
      const n = fs.readSync(this.fd, next, have, next.length - have, null);
      if (n === 0) {
        this.eof = true;
        break;
      }
      have += n;
    }
    this.buf = next.subarray(0, have);
    this.pos = 0;
  }
}

/** Convenience: the header and every record of a (small) trace. */
export function readTrace(path: string): { header: TraceHeader; records: FlatRecord[]; dropped: number; truncated: boolean } {
  const r = new TraceReader(path);
  try {
    const header = r.header();
    let dropped = 0;
    const records = [...r.records((b) => (dropped += b.dropped))];
    return { header, records, dropped, truncated: r.truncated };
  } finally {
    r.close();
  }
}
