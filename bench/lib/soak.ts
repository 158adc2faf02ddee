// What a soak records (bench:llama --soak-s, issue 32 goal 5): the server's memory and open files
// sampled over time, and the tenants' generations gathered into windows, so a leak shows as a
// trend and a stall as a window, without keeping every request.
import fs from 'node:fs';
import { median, quantile } from './common.ts';

/** The server's resident memory (MiB) and open descriptors now, from /proc; null once it is gone. */
export function procSample(pid: number): { rssMiB: number; fds: number } | null {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = Number(/^VmRSS:\s+(\d+)\s+kB/m.exec(status)?.[1] ?? NaN);
    return { rssMiB: +(kb / 1024).toFixed(1), fds: fs.readdirSync(`/proc/${pid}/fd`).length };
  } catch {
    return null;
  }
}

export interface SoakGen { tokens: number[]; genMs: number; maxGapMs?: number }

interface Window {
  tS: number;
  requests: number;
  tokens: number;
  wrong: number;
  errors: number;
  /** The longest wait for one generated token among the window's requests. */
  maxGapMs: number;
  rssMiB: number | null;
  fds: number | null;
  /** --hostile: whether the hostile VM was launching at the sample (its twin's descriptors count). */
  hostileAtSample?: boolean;
}

interface Waits { gaps: number[]; intervals: number[] }

const r1 = (x: number) => (Number.isFinite(x) ? +x.toFixed(1) : null);

/**
 * A soak's record. Generations and errors land in the current window; `sample()` closes it with
 * the server's memory and descriptors. The baseline for growth is the first sample at or after
 * `baselineS` (the warm-up: pipelines compiled, weights resident, pools at their size).
 */
export class SoakRecorder {
  private readonly t0 = performance.now();
  private readonly windows: Window[] = [];
  private cur: Window;
  private readonly waits: Record<'all' | 'hostileOn' | 'hostileOff', Waits> = {
    all: { gaps: [], intervals: [] }, hostileOn: { gaps: [], intervals: [] }, hostileOff: { gaps: [], intervals: [] },
  };
  private hostile: boolean | null = null;
  private hostileOffAt = -Infinity;
  private readonly perTenant: { requests: number; tokens: number; wrong: number; errors: number; maxGapMs: number }[];
  readonly errorMessages: string[] = [];

  private readonly pid: number;
  private readonly baselineS: number;

  constructor(pid: number, tenants: number, baselineS: number) {
    this.pid = pid;
    this.baselineS = baselineS;
    this.perTenant = Array.from({ length: tenants }, () => ({ requests: 0, tokens: 0, wrong: 0, errors: 0, maxGapMs: 0 }));
    this.cur = this.fresh();
  }

  private fresh(): Window {
    return { tS: 0, requests: 0, tokens: 0, wrong: 0, errors: 0, maxGapMs: 0, rssMiB: null, fds: null };
  }

  /** The hostile VM starts or stops launching. */
  setHostile(on: boolean): void {
    if (this.hostile === true && !on) this.hostileOffAt = performance.now();
    this.hostile = on;
  }

  /** A tenant's generation that started at `startMs` (performance.now()), checked against its
   * reference ids. With a hostile VM it counts as beside it when the VM launched at any time during it. */
  gen(tenant: number, g: SoakGen, ref: number[] | undefined, startMs: number): void {
    const wrong = ref !== undefined && g.tokens.join() !== ref.join();
    const t = this.perTenant[tenant]!;
    t.requests++;
    t.tokens += g.tokens.length;
    if (wrong) t.wrong++;
    const gap = g.maxGapMs ?? NaN;
    const side = this.hostile === null ? null : this.hostile || this.hostileOffAt > startMs ? this.waits.hostileOn : this.waits.hostileOff;
    const interval = g.tokens.length > 1 ? g.genMs / (g.tokens.length - 1) : NaN;
    for (const w of side ? [this.waits.all, side] : [this.waits.all]) {
      if (Number.isFinite(gap)) w.gaps.push(gap);
      if (Number.isFinite(interval)) w.intervals.push(interval);
    }
    if (Number.isFinite(gap)) {
      t.maxGapMs = Math.max(t.maxGapMs, gap);
      this.cur.maxGapMs = Math.max(this.cur.maxGapMs, gap);
    }
    this.cur.requests++;
    this.cur.tokens += g.tokens.length;
    if (wrong) this.cur.wrong++;
  }

  error(tenant: number, msg: string): void {
    this.perTenant[tenant]!.errors++;
    this.cur.errors++;
    if (this.errorMessages.length < 20) this.errorMessages.push(msg.slice(0, 2000));
  }

  sample(): void {
    const s = procSample(this.pid);
    this.cur.tS = +((performance.now() - this.t0) / 1000).toFixed(1);
    this.cur.rssMiB = s?.rssMiB ?? null;
    this.cur.fds = s?.fds ?? null;
    if (this.hostile !== null) this.cur.hostileAtSample = this.hostile;
    this.cur.maxGapMs = r1(this.cur.maxGapMs) ?? 0;
    this.windows.push(this.cur);
    this.cur = this.fresh();
  }

  /** The requests that ended after the last sample, in a window of their own (no sample). */
  close(): void {
    if (this.cur.requests === 0 && this.cur.errors === 0) return;
    this.cur.tS = +((performance.now() - this.t0) / 1000).toFixed(1);
    this.cur.maxGapMs = r1(this.cur.maxGapMs) ?? 0;
    this.windows.push(this.cur);
    this.cur = this.fresh();
  }

  summary(goalStallMs: number) {
    const ws = this.windows;
    // like with like: the baseline is a sample with the hostile VM in the state it had at the last
    const last = [...ws].reverse().find((w) => w.rssMiB !== null);
    const base = ws.find((w) => w.tS >= this.baselineS && w.rssMiB !== null && w.hostileAtSample === last?.hostileAtSample);
    const after = ws.filter((w) => base && w.tS >= base.tS && w.rssMiB !== null);
    const total = this.perTenant.reduce((a, t) => ({ requests: a.requests + t.requests, tokens: a.tokens + t.tokens, wrong: a.wrong + t.wrong, errors: a.errors + t.errors }),
      { requests: 0, tokens: 0, wrong: 0, errors: 0 });
    const durS = last?.tS ?? 0;
    const rssGrowthPct = base && last ? +(((last.rssMiB! - base.rssMiB!) / base.rssMiB!) * 100).toFixed(2) : null;
    const fdGrowth = base && last ? last.fds! - base.fds! : null;
    const gaps = this.waits.all.gaps;
    const maxGapMs = gaps.length ? gaps.reduce((a, b) => Math.max(a, b), 0) : null;
    const waits = (w: Waits) => ({
      requests: w.gaps.length,
      medianInterval: r1(median(w.intervals)),
      p99MaxGap: w.gaps.length ? r1(quantile(w.gaps, 0.99)) : null,
      maxGap: w.gaps.length ? r1(w.gaps.reduce((a, b) => Math.max(a, b), 0)) : null,
    });
    return {
      durationS: durS,
      ...total,
      // over the sampled time: the requests that ended after the last sample are left out
      tokensPerS: durS > 0 ? +(ws.filter((w) => w.tS <= durS).reduce((a, w) => a + w.tokens, 0) / durS).toFixed(3) : null,
      memory: {
        baselineAtS: base?.tS ?? null, baselineRssMiB: base?.rssMiB ?? null, lastRssMiB: last?.rssMiB ?? null,
        maxRssAfterBaselineMiB: after.length ? after.reduce((a, w) => Math.max(a, w.rssMiB!), 0) : null, rssGrowthPct,
        baselineFds: base?.fds ?? null, lastFds: last?.fds ?? null, fdGrowth,
      },
      tokenWaitMs: {
        ...waits(this.waits.all),
        ...(this.hostile === null ? {} : { besideHostile: waits(this.waits.hostileOn), hostilePaused: waits(this.waits.hostileOff) }),
      },
      goals: {
        everyStreamVerified: total.requests > 0 && total.wrong === 0 && total.errors === 0,
        rssGrowthUnder5Pct: rssGrowthPct === null ? null : rssGrowthPct < 5,
        noFdGrowth: fdGrowth === null ? null : fdGrowth <= 0,
        longestTokenWaitUnderGoal: maxGapMs === null ? null : maxGapMs <= goalStallMs,
      },
      tenantCount: this.perTenant.length,
      perTenant: this.perTenant.map((t) => ({ ...t, maxGapMs: r1(t.maxGapMs) })),
      errorMessages: this.errorMessages,
      windows: ws,
    };
  }
}
