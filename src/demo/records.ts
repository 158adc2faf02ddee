// The benchmark records guest/bench prints (`VUGPU-BENCH {json}`), in the guest and natively:
// one run of one benchmark with its nine stage times (G-KVM Table IV). Parsed defensively: a
// record that does not have the expected shape is reported, never half-used.

export const STAGES = ['Init', 'MemAlloc', 'DataInit', 'HtoD', 'KernConf', 'Exec', 'DtoH', 'DataRead', 'Close'] as const;
export type Stage = (typeof STAGES)[number];

export const BENCHMARKS = [
  'nop', 'loop', 'madd', 'mmul', 'fmadd', 'fmmul', 'cpy', 'pincpy', 'backprop', 'bfs', 'hotspot', 'lud', 'srad', 'srad2',
] as const;

export interface BenchRecord {
  bench: string;
  ok: boolean;
  backend: string;        // kmod (guest driver) or host (native twin)
  size: string;
  stages_us: Record<Stage, number>;
  total_us: number;
  driver_us: number;      // vgInit (driver bring-up), not part of the stages
  verified: boolean | null;
  mmio: number;           // BAR0 accesses by the driver during the run
  irqs: number;
  pv_calls: number;
  pv: number;
  error?: string;
  where?: string;
  detail: string;
}

/** One benchmark of the demo, guest beside native (index.ts builds it, table.ts prints it). */
export interface DemoRow {
  bench: string;
  size: string;
  guest: BenchRecord | null;
  native: BenchRecord | null;
  /** Both sides ran and verified. */
  ok: boolean;
  ratio: { total: number | null; stages: Record<Stage, number | null> };
  guestRuns: number;
  nativeRuns: number;
}

const isNum = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** The record, or a string saying what is wrong with it. */
export function toBenchRecord(data: Record<string, unknown>): BenchRecord | string {
  if (typeof data.bench !== 'string') return 'no bench name';
  if (typeof data.ok !== 'boolean') return `${data.bench}: no ok flag`;
  const st = data.stages_us;
  if (typeof st !== 'object' || st === null) return `${data.bench}: no stages_us`;
  const stages = {} as Record<Stage, number>;
  for (const s of STAGES) {
    const v = (st as Record<string, unknown>)[s];
    if (!isNum(v) || v < 0) return `${data.bench}: stage ${s} is ${JSON.stringify(v)}`;
    stages[s] = v;
  }
  if (!isNum(data.total_us)) return `${data.bench}: no total_us`;
  return {
    bench: data.bench,
    ok: data.ok,
    backend: typeof data.backend === 'string' ? data.backend : '?',
    size: typeof data.size === 'string' ? data.size : '',
    stages_us: stages,
    total_us: data.total_us,
    driver_us: isNum(data.driver_us) ? data.driver_us : 0,
    verified: typeof data.verified === 'boolean' ? data.verified : null,
    mmio: isNum(data.mmio) ? data.mmio : 0,
    irqs: isNum(data.irqs) ? data.irqs : 0,
    pv_calls: isNum(data.pv_calls) ? data.pv_calls : 0,
    pv: isNum(data.pv) ? data.pv : 0,
    error: typeof data.error === 'string' ? data.error : undefined,
    where: typeof data.where === 'string' ? data.where : undefined,
    detail: typeof data.detail === 'string' ? data.detail : '',
  };
}

/**
 * One representative run per benchmark: every run must have passed, and the one with the median
 * total is kept (repeats smooth out the noise of a shared 2-core machine). A failed run wins, so
 * a failure is never hidden by a passing repeat.
 */
export function representative(runs: BenchRecord[]): BenchRecord | null {
  if (runs.length === 0) return null;
  const failed = runs.find((r) => !r.ok);
  if (failed) return failed;
  const sorted = [...runs].sort((a, b) => a.total_us - b.total_us);
  return sorted[Math.floor((sorted.length - 1) / 2)]!;
}

/** Group records by benchmark name, in order of first appearance. */
export function byBench(records: BenchRecord[]): Map<string, BenchRecord[]> {
  const m = new Map<string, BenchRecord[]>();
  for (const r of records) {
    const list = m.get(r.bench) ?? [];
    list.push(r);
    m.set(r.bench, list);
  }
  return m;
}
