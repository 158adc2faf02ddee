// Text tables of the demo: a summary (total per benchmark, guest vs native) and the stage
// breakdown (G-KVM Table IV stages: guest, native and their ratio per benchmark).
import { STAGES, type DemoRow, type Stage } from './records.ts';

/** Below this many µs a stage is treated as empty (no ratio). */
const EMPTY_US = 1;

export function ratio(guestUs: number, nativeUs: number): number | null {
  return guestUs < EMPTY_US || nativeUs < EMPTY_US ? null : guestUs / nativeUs;
}

export function fmtMs(us: number | undefined): string {
  if (us === undefined) return '-';
  const ms = us / 1000;
  if (ms === 0) return '0';
  if (ms < 1) return ms.toFixed(2);
  if (ms < 100) return ms.toFixed(1);
  return ms.toFixed(0);
}

export function fmtRatio(r: number | null): string {
  if (r === null) return '-';
  return r < 10 ? `${r.toFixed(2)}x` : `${r.toFixed(1)}x`;
}

function render(header: string[], rows: string[][], leftCols = 1): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i < leftCols ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ').trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

export function summaryTable(rows: DemoRow[]): string {
  const header = ['bench', 'size', 'guest ms', 'native ms', 'guest/native', 'ok', 'guest mmio', 'guest irqs'];
  const body = rows.map((r) => [
    r.bench,
    r.size,
    fmtMs(r.guest?.total_us),
    fmtMs(r.native?.total_us),
    fmtRatio(r.ratio.total),
    r.guest === null ? 'no run' : r.native === null ? (r.guest.ok ? 'guest only' : 'FAIL') : r.ok ? 'yes' : 'FAIL',
    r.guest ? String(r.guest.mmio) : '-',
    r.guest ? String(r.guest.irqs) : '-',
  ]);
  return render(header, body, 2);
}

export function stageTable(rows: DemoRow[]): string {
  const header = ['bench', 'run', ...STAGES, 'total'];
  const body: string[][] = [];
  for (const r of rows) {
    const g = r.guest?.stages_us;
    const n = r.native?.stages_us;
    body.push([r.bench, 'guest', ...STAGES.map((s: Stage) => fmtMs(g?.[s])), fmtMs(r.guest?.total_us)]);
    body.push(['', 'native', ...STAGES.map((s: Stage) => fmtMs(n?.[s])), fmtMs(r.native?.total_us)]);
    body.push(['', 'ratio', ...STAGES.map((s: Stage) => fmtRatio(r.ratio.stages[s])), fmtRatio(r.ratio.total)]);
  }
  return render(header, body, 2);
}
