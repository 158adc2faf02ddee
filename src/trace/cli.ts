// `vugpu trace summary FILE` and `vugpu trace dump FILE`: reading what `vugpu serve --trace
// FILE` recorded.
import { parseArgs } from 'node:util';
import { TraceReader } from './reader.ts';
import { EVENT_TYPES, type EventType } from './schema.ts';
import { summarizeTrace, type TraceSummary } from './summary.ts';

export const TRACE_USAGE = `usage:
  vugpu trace summary FILE [--top N] [--json]   counts per event type, VM and register offset
  vugpu trace dump FILE [--limit N] [--type T]  records as JSON lines (header first)
     T: ${EVENT_TYPES.join('|')}`;

const hex = (n: number): string => `0x${n.toString(16).padStart(6, '0')}`;

/** The summary as text (what `trace summary` prints without --json). */
export function formatSummary(s: TraceSummary, top: number): string {
  const out: string[] = [];
  const line = (...cols: (string | number)[]) => out.push(cols.join('  ').trimEnd());
  line(`trace ${s.file}: version ${s.version}, started ${new Date(s.startUnixMs).toISOString()}`);
  if (s.comment) line(`  ${s.comment}`);
  line(`  ${s.records} records over ${(s.durationNs / 1e6).toFixed(3)} ms, ${s.dropped} dropped` +
    (s.truncated ? ', file truncated (last batch incomplete)' : ''));
  const present = EVENT_TYPES.filter((t) => s.events[t] > 0);
  out.push('', 'events:');
  for (const t of present) line(`  ${t.padEnd(14)}`, String(s.events[t]).padStart(10));
  out.push('', 'per VM:');
  line('  ' + ['vm'.padEnd(12), 'mode'.padEnd(8), 'mmio rd'.padStart(9), 'mmio wr'.padStart(9), ...present.filter((t) => t !== 'mmio').map((t) => t.padStart(13)), 'shadow ptes'.padStart(11), 'hc entries'.padStart(10)].join(' '));
  for (const v of s.vms) {
    line('  ' + [v.name.padEnd(12), v.mode.padEnd(8), String(v.mmioReads).padStart(9), String(v.mmioWrites).padStart(9),
      ...present.filter((t) => t !== 'mmio').map((t) => String(v.events[t]).padStart(13)),
      String(v.shadowPtes).padStart(11), String(v.hypercallEntries).padStart(10)].join(' '));
  }
  if (s.offsets.length > 0) {
    const shown = top > 0 ? s.offsets.slice(0, top) : s.offsets;
    out.push('', `accesses per offset${shown.length < s.offsets.length ? ` (top ${shown.length} of ${s.offsets.length})` : ''}:`);
    line('  ' + ['bar', 'offset'.padEnd(8), 'name'.padEnd(24), 'reads'.padStart(9), 'writes'.padStart(9), 'mean ns'.padStart(9)].join(' '));
    for (const o of shown) {
      line('  ' + [String(o.region).padEnd(3), hex(o.offset).padEnd(8), o.name.padEnd(24), String(o.reads).padStart(9),
        String(o.writes).padStart(9), (o.meanLatencyNs === null ? '-' : o.meanLatencyNs.toFixed(0)).padStart(9)].join(' '));
    }
  }
  for (const [title, m] of [['hypercalls per op', s.hypercallOps], ['faults per reason', s.faultReasons], ['channel errors per code', s.channelErrorCodes]] as const) {
    const entries = Object.entries(m);
    if (entries.length === 0) continue;
    out.push('', `${title}:`);
    for (const [k, n] of entries.sort((x, y) => y[1] - x[1])) line(`  ${k.padEnd(20)}`, String(n).padStart(10));
  }
  return out.join('\n') + '\n';
}

function summary(argv: string[]): number {
  const { values, positionals } = parseArgs({
    args: argv, allowPositionals: true,
    options: { top: { type: 'string', default: '40' }, json: { type: 'boolean', default: false } },
  });
  if (positionals.length !== 1) throw new Error(`trace summary: one FILE expected\n${TRACE_USAGE}`);
  const s = summarizeTrace(positionals[0]!);
  process.stdout.write(values.json ? `${JSON.stringify(s, null, 2)}\n` : formatSummary(s, Number(values.top)));
  return 0;
}

function dump(argv: string[]): number {
  const { values, positionals } = parseArgs({
    args: argv, allowPositionals: true,
    options: { limit: { type: 'string' }, type: { type: 'string' } },
  });
  if (positionals.length !== 1) throw new Error(`trace dump: one FILE expected\n${TRACE_USAGE}`);
  const limit = values.limit === undefined ? Infinity : Number(values.limit);
  if (!(limit >= 0)) throw new Error(`trace dump: bad --limit ${values.limit}`);
  const type = values.type as EventType | undefined;
  if (type !== undefined && !EVENT_TYPES.includes(type)) throw new Error(`trace dump: unknown --type ${type}\n${TRACE_USAGE}`);
  // `trace dump FILE | head` closes the pipe early: stop quietly.
  let closed = false;
  process.stdout.on('error', () => {
    closed = true;
  });
  const reader = new TraceReader(positionals[0]!);
  try {
    let chunk = `${JSON.stringify({ header: reader.header() })}\n`;
    let n = 0;
    for (const r of reader.records()) {
      if (n >= limit || closed) break;
      if (type !== undefined && r.type !== type) continue;
      chunk += `${JSON.stringify(r)}\n`;
      n++;
      if (chunk.length > 1 << 16) {
        process.stdout.write(chunk);
        chunk = '';
      }
    }
    if (!closed) process.stdout.write(chunk);
    if (reader.truncated) process.stderr.write(`${positionals[0]}: file truncated (last batch incomplete)\n`);
  } finally {
    reader.close();
  }
  return 0;
}

export async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  switch (cmd) {
    case 'summary':
      return summary(rest);
    case 'dump':
      return dump(rest);
    default:
      process.stderr.write(`${TRACE_USAGE}\n`);
      return cmd === undefined || cmd === '--help' || cmd === 'help' ? 0 : 2;
  }
}
