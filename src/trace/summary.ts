// What a trace says in aggregate: records per event type and per VM, accesses per register
// offset (named from the header's table), hypercalls per op, faults per reason, channel errors
// per code — the numbers G-KVM (Table VI, MMIO handles) and GPUvm (Tables 3–4, shadow updates
// and hypercalls) report per benchmark. One pass over the file, memory bounded by the number
// of distinct offsets.
import { chanErrName, faultName, PV_OP } from '../gpu/spec.ts';
import { NameTable } from './names.ts';
import { TraceReader } from './reader.ts';
import { EVENT_TYPES, type EventType, type TraceHeader } from './schema.ts';

export type EventCounts = Record<EventType, number>;

export interface VmSummary {
  id: number;
  name: string;
  mode: string;
  events: EventCounts;
  mmioReads: number;
  mmioWrites: number;
  /** Shadow PDEs/PTEs written, summed over ShadowRebuild records. */
  shadowPtes: number;
  /** MAP/UNMAP entries, summed over Hypercall records. */
  hypercallEntries: number;
}

export interface OffsetSummary {
  region: number;
  offset: number;
  name: string;
  reads: number;
  writes: number;
  /** Mean handler time of the accesses that carry one (null if none). */
  meanLatencyNs: number | null;
}

export interface TraceSummary {
  file: string;
  version: number;
  startUnixMs: number;
  comment: string;
  records: number;
  dropped: number;
  truncated: boolean;
  /** Time from the first to the last record. */
  durationNs: number;
  events: EventCounts;
  vms: VmSummary[];
  /** Sorted by accesses, most first. */
  offsets: OffsetSummary[];
  hypercallOps: Record<string, number>;
  faultReasons: Record<string, number>;
  channelErrorCodes: Record<string, number>;
}

const PV_OP_NAMES = new Map<number, string>(Object.entries(PV_OP).map(([k, v]) => [v, k]));

function zeroCounts(): EventCounts {
  return Object.fromEntries(EVENT_TYPES.map((t) => [t, 0])) as EventCounts;
}

function bump(m: Record<string, number>, k: string, n = 1): void {
  m[k] = (m[k] ?? 0) + n;
}

export function summarizeTrace(file: string): TraceSummary {
  const reader = new TraceReader(file);
  try {
    const header: TraceHeader = reader.header();
    const names = new NameTable(header.registers);
    const vms = new Map<number, VmSummary>();
    const vm = (id: number): VmSummary => {
      let v = vms.get(id);
      if (!v) {
        v = { id, name: `vm${id}`, mode: '', events: zeroCounts(), mmioReads: 0, mmioWrites: 0, shadowPtes: 0, hypercallEntries: 0 };
        vms.set(id, v);
      }
      return v;
    };
    for (const v of header.vms) Object.assign(vm(v.id), { name: v.name, mode: v.mode });

    // Per-offset counters keyed by region * 2^32 + offset (exact in a double).
    const offsets = new Map<number, { reads: number; writes: number; latSum: number; latN: number }>();
    const s: TraceSummary = {
      file, version: header.version, startUnixMs: header.startUnixMs, comment: header.comment ?? '',
      records: 0, dropped: 0, truncated: false, durationNs: 0, events: zeroCounts(), vms: [], offsets: [],
      hypercallOps: {}, faultReasons: {}, channelErrorCodes: {},
    };
    let first = -1;
    let last = 0;
    for (const r of reader.records((b) => (s.dropped += b.dropped))) {
      if (first < 0) first = r.tNs;
      last = r.tNs;
      s.records++;
      s.events[r.type]++;
      const v = vm(r.vm);
      v.events[r.type]++;
      if (r.mmio) {
        const m = r.mmio;
        if (m.write) v.mmioWrites++;
        else v.mmioReads++;
        const key = m.region * 2 ** 32 + m.offset;
        let o = offsets.get(key);
        if (!o) offsets.set(key, (o = { reads: 0, writes: 0, latSum: 0, latN: 0 }));
        if (m.write) o.writes++;
        else o.reads++;
        if (m.latencyNs != null) {
          o.latSum += m.latencyNs;
          o.latN++;
        }
      } else if (r.shadowRebuild) {
        v.shadowPtes += r.shadowRebuild.ptes;
      } else if (r.hypercall) {
        v.hypercallEntries += r.hypercall.count;
        bump(s.hypercallOps, PV_OP_NAMES.get(r.hypercall.op) ?? `OP_${r.hypercall.op}`);
      } else if (r.fault) {
        bump(s.faultReasons, faultName(r.fault.reason));
      } else if (r.channelError) {
        bump(s.channelErrorCodes, chanErrName(r.channelError.code));
      } else if (r.vmAttach) {
        Object.assign(v, { name: r.vmAttach.name, mode: r.vmAttach.mode });
      }
    }
    s.truncated = reader.truncated;
    s.durationNs = first < 0 ? 0 : last - first;
    s.vms = [...vms.values()].sort((x, y) => x.id - y.id);
    s.offsets = [...offsets.entries()]
      .map(([key, o]) => {
        const region = Math.floor(key / 2 ** 32);
        const offset = key % 2 ** 32;
        const name = (region === 0 ? names.name(offset) : undefined) ?? '';
        return { region, offset, name, reads: o.reads, writes: o.writes, meanLatencyNs: o.latN ? o.latSum / o.latN : null };
      })
      .sort((x, y) => y.reads + y.writes - (x.reads + x.writes) || x.region - y.region || x.offset - y.offset);
    return s;
  } finally {
    reader.close();
  }
}
