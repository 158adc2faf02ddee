// The demo's record handling and tables (src/demo): parsing of VUGPU-BENCH records, the choice
// of the representative run, ratios and the stage table. The end-to-end run is in
// test/integration/guest-suite.test.ts.
import { describe, expect, test } from 'vitest';
import { STAGES, byBench, representative, toBenchRecord, type BenchRecord } from '../src/demo/records.ts';
import { fmtMs, ratio, stageTable, summaryTable } from '../src/demo/table.ts';
import type { DemoRow } from '../src/demo/index.ts';

function raw(bench: string, total: number, ok = true): Record<string, unknown> {
  const stages: Record<string, number> = {};
  STAGES.forEach((s, i) => (stages[s] = i === 5 ? total - 8 : 1));
  return {
    bench, ok, backend: 'kmod', size: '256x256', stages_us: stages, total_us: total, driver_us: 3,
    verified: ok, checksum: 1, mmio: 58, irqs: 7, pv_calls: 0, pv: 0, detail: 'x',
  };
}

function rec(bench: string, total: number, ok = true): BenchRecord {
  const r = toBenchRecord(raw(bench, total, ok));
  if (typeof r === 'string') throw new Error(r);
  return r;
}

describe('benchmark records', () => {
  test('a well-formed record parses with all nine stages', () => {
    const r = rec('madd', 100);
    expect(r.stages_us.Exec).toBe(92);
    expect(Object.keys(r.stages_us)).toEqual([...STAGES]);
    expect(r.mmio).toBe(58);
  });

  test('malformed records are rejected with the reason', () => {
    const noStage = raw('madd', 100);
    delete (noStage.stages_us as Record<string, number>).DtoH;
    expect(toBenchRecord(noStage)).toMatch(/DtoH/);
    const negative = raw('madd', 100);
    (negative.stages_us as Record<string, number>).Init = -1;
    expect(toBenchRecord(negative)).toMatch(/Init/);
    expect(toBenchRecord({ ...raw('madd', 100), ok: 'yes' })).toMatch(/ok flag/);
    expect(toBenchRecord({ ...raw('madd', 100), total_us: 'NaN' })).toMatch(/total_us/);
    expect(toBenchRecord({})).toBe('no bench name');
  });

  test('the median run represents a benchmark, but a failed run always wins', () => {
    expect(representative([rec('a', 30), rec('a', 10), rec('a', 20)])!.total_us).toBe(20);
    expect(representative([rec('a', 30), rec('a', 10)])!.total_us).toBe(10);
    const failed = rec('a', 50, false);
    expect(representative([rec('a', 10), failed, rec('a', 20)])).toBe(failed);
    expect(representative([])).toBeNull();
  });

  test('records group by benchmark in order of first appearance', () => {
    const g = byBench([rec('b', 11), rec('a', 12), rec('b', 13)]);
    expect([...g.keys()]).toEqual(['b', 'a']);
    expect(g.get('b')!.map((r) => r.total_us)).toEqual([11, 13]);
  });
});

describe('tables', () => {
  test('ratios need both sides non-empty', () => {
    expect(ratio(300, 100)).toBe(3);
    expect(ratio(300, 0)).toBeNull();
    expect(ratio(0.5, 100)).toBeNull();
    expect(fmtMs(1234)).toBe('1.2');
    expect(fmtMs(523)).toBe('0.52');
    expect(fmtMs(123456)).toBe('123');
    expect(fmtMs(undefined)).toBe('-');
  });

  test('the stage table has guest, native and ratio lines per benchmark', () => {
    const g = rec('madd', 4000);
    const n = { ...rec('madd', 1000), backend: 'host' };
    const row: DemoRow = {
      bench: 'madd', size: g.size, guest: g, native: n, ok: true, guestRuns: 1, nativeRuns: 1,
      ratio: { total: 4, stages: Object.fromEntries(STAGES.map((s) => [s, ratio(g.stages_us[s], n.stages_us[s])])) as DemoRow['ratio']['stages'] },
    };
    const lines = stageTable([row]).split('\n');
    expect(lines[0]).toMatch(/^bench\s+run\s+Init\s+MemAlloc/);
    expect(lines[2]).toMatch(/^madd\s+guest/);
    expect(lines[3]).toMatch(/^\s+native/);
    expect(lines[4]).toMatch(/ratio.*4\.00x$/); // total ratio in the last column
    expect(summaryTable([row])).toMatch(/madd\s+256x256\s+4\.0\s+1\.0\s+4\.00x\s+yes/);
    expect(summaryTable([{ ...row, native: null, ok: false }])).toMatch(/guest only/);
  });
});
