// Time per benchmark and mode (npm run bench:modes): GPUvm's Fig. 4 and G-KVM's Tables V and VII
// on this implementation. The 14 GPUvm benchmarks in every mode (pt, fv-naive, fv, pv, pv-batch)
// in a QEMU guest, and natively (the native twin: the same benchmark sources built for the host,
// driving a pt server over vfio-user with no VM), at the default and the GPUvm (`--large`) sizes.
//
// Method. The server runs in this process (one Vugpu per guest boot, the mode's VM alone on it).
// One round = one guest boot per mode, each running the whole suite (bench-suite.sh, every
// benchmark in its own process, --repeat R runs each), plus the native twin (R runs of each
// benchmark). Rounds are interleaved and the order of the modes rotates from round to round, so
// a change in host load (the machine is shared) spreads over every mode instead of biasing one.
// Per benchmark and mode: the median total over all runs, the median of each G-KVM stage, and
// ratios to pt and to native computed per round (the same round's medians) — reported as the
// median over rounds with the min–max across rounds as the spread. Every run must verify.
// Guest RAM (-mem-prealloc) and VRAM are faulted in before a guest boots, so that no timed stage
// pays this host's first-touch page faults; the CPU use of each side is taken while QEMU runs.
//
// Writes bench/results/modes/cpu.json and cpu.svg (--out NAME: cpu-NAME.*) (GPUvm Fig. 4: time relative to native per
// benchmark and mode, log scale) and the tables in docs/results.md (between generated-section
// markers).
//   node bench/modes.ts [--sizes default,large] [--modes pt,fv-naive,fv,pv,pv-batch] [--only nop:loop]
//                       [--rounds 3] [--large-rounds 2] [--repeat 1] [--budget-min 20] [--no-native]
//                       [--out modes]
//   node bench/modes.ts --replot [--out modes]
// --budget-min bounds the wall time of each size set: no new round starts once it is spent
// (under TCG on 2 cores the GPUvm sizes take minutes per round); the report says how many rounds ran.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Vugpu, type VmMode } from '../src/server.ts';
import { bootGuest } from '../src/vm/launcher.ts';
import { loadManifest, type Manifest } from '../src/vm/manifest.ts';
import { chooseAccel } from '../src/vm/accel.ts';
import { vfioErrorLines } from '../src/vm/console.ts';
import { buildNativeTwin, runNativeTwin } from '../src/demo/native-twin.ts';
import { BENCHMARKS, STAGES, toBenchRecord, type Stage } from '../src/demo/records.ts';
import { cpuInterval } from './lib/cpu.ts';
import { MODE_COLORS, ratioPlotSvg } from './lib/ratio-plot.ts';
import {
  environment, geomean, lowRatio, mdSection, median, prefault, quantile, benchFile, outVariant, repoRoot, replaceSection, spread, textTable, writeBenchResult,
  SUITE_MODES as MODES, SUITE_SIZES as SIZES, type Cell, type Environment, type LowRatio, type Spread,
} from './lib/common.ts';

type Side = VmMode | 'native';
const SUITE = '/opt/vugpu/bench-suite.sh';
const GUEST_TIMEOUT_MS = 1_500_000;
/** VRAM the guest sees in every mode (BAR1). */
const SLICE = 512 << 20;

/**
 * Published figures. G-KVM (seeds/000) Tables V and VII, ms: matrix addition and multiplication
 * (4096², Nouveau + gdev on a real Fermi GPU), native vs Xen without/with BAR mapping (GPUvm) and
 * G-KVM on KVM. GPUvm (seeds/002) Fig. 4 gives no numbers in our source, only its findings.
 */
const GKVM = {
  madd: {
    native: { Init: 57.981, MemAlloc: 0.841, DataInit: 88.266, HtoD: 65.069, KernConf: 0.007, Exec: 39.212, DtoH: 32.403, DataRead: 36.094, Close: 3.205, total: 323.079 },
    xenNoMap: { Init: 4682.603, MemAlloc: 89.976, DataInit: 100.294, HtoD: 210.731, KernConf: 0.007, Exec: 40.055, DtoH: 40.86, DataRead: 41.64, Close: 635.351, total: 5841.52 },
    xenMap: { Init: 678.984, MemAlloc: 8.955, DataInit: 101.403, HtoD: 210.658, KernConf: 0.007, Exec: 39.981, DtoH: 40.761, DataRead: 41.626, Close: 595.364, total: 1717.743 },
    kvm: { Init: 1877.854, MemAlloc: 37.949, DataInit: 108.041, HtoD: 226.503, KernConf: 0.007, Exec: 39.509, DtoH: 35.007, DataRead: 42.011, Close: 742.767, total: 3109.652 },
  },
  mmul: {
    native: { Init: 46.382, MemAlloc: 0.941, DataInit: 88.722, HtoD: 64.975, KernConf: 0.007, Exec: 19658.505, DtoH: 32.397, DataRead: 35.112, Close: 3.274, total: 19930.318 },
    xenNoMap: { Init: 4683.922, MemAlloc: 87.753, DataInit: 99.309, HtoD: 210.966, KernConf: 0.007, Exec: 23783.904, DtoH: 42.946, DataRead: 41.645, Close: 636.362, total: 29586.82 },
    xenMap: { Init: 670.877, MemAlloc: 9.348, DataInit: 99.956, HtoD: 239.957, KernConf: 0.007, Exec: 23781.48, DtoH: 41.651, DataRead: 41.66, Close: 601.01, total: 25485.953 },
    kvm: { Init: 1585.75, MemAlloc: 25.745, DataInit: 102.21, HtoD: 217.807, KernConf: 0.008, Exec: 23780.597, DtoH: 35.418, DataRead: 42.441, Close: 727.088, total: 26517.066 },
  },
};
const GPUVM_FIG4 = [
  'FV naive: about 100× native or more in nine of the 14 benchmarks',
  'FV with the optimizations (BAR remap, lazy shadowing): much closer; combined optimizations gain most',
  'PV naive: 3–10× native',
  'PV multicall: often within 2–3× of native, sometimes close to pass-through',
  'PT: about native (madd even faster than native)',
];

interface Run {
  size: string;
  round: number;
  side: Side;
  bench: string;
  ok: boolean;
  totalUs: number;
  stagesUs: Record<Stage, number>;
  mmio: number;
  error?: string;
}

interface SideRun {
  size: string;
  round: number;
  side: Side;
  wallS: number;
  problems: string[];
  /** CPU use over the run, in cores: this benchmark (server, engine, QEMU/twin) / everyone else. */
  cpuCores: { ours: number; others: number };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function record(size: string, round: number, side: Side, data: Record<string, unknown>, problems: string[]): Run | null {
  const b = toBenchRecord(data);
  if (typeof b === 'string') {
    problems.push(`bad record: ${b}`);
    return null;
  }
  if (!b.ok) problems.push(`${b.bench}: failed (${b.error ?? 'not verified'}${b.where ? ` at ${b.where}` : ''})`);
  return {
    size, round, side, bench: b.bench, ok: b.ok, totalUs: b.total_us, stagesUs: b.stages_us, mmio: b.mmio,
    ...(b.error ? { error: b.error } : {}),
  };
}

async function runGuestMode(manifest: Manifest, dir: string, size: string, round: number, m: { mode: VmMode; pv: number },
                            benches: string[], repeat: number): Promise<{ runs: Run[]; side: SideRun }> {
  const socket = path.join(dir, `${m.mode}-${round}.sock`);
  // The guest sees the same BAR1 (512 MiB) in every mode: pt gets a 512 MiB device, the
  // mediated modes a 512 MiB slice of a 1 GiB one. (With pt on the whole 1 GiB, TCG ran even the
  // guest's CPU-only stages 20–40 % slower in pt than in fv: the layout, not the device path.)
  const server = new Vugpu({
    vramSize: m.mode === 'pt' ? SLICE : 1 << 30, channels: 64, watchdogMs: 60_000, policy: 'fifo',
    vms: [{ name: `modes-${m.mode}`, socket, mode: m.mode, slice: m.mode === 'pt' ? undefined : SLICE }],
  });
  // No mode pays first-touch page faults inside a timed stage (on this VM host 16-50 us per
  // 4 KiB page, ~100x a warm write): VRAM is faulted in here — in the mediated modes the attach
  // scrub did the slice, not the host-reserved area the shadow tables come from — and the
  // guest's RAM by -mem-prealloc below (without it the first benchmark of every boot ran
  // 30-55 ms slower at --large, in every mode: hotspot first, 3 rounds).
  prefault(server.engine.vram.u8);
  const problems: string[] = [];
  const runs: Run[] = [];
  const t0 = performance.now();
  let endCpu: (() => ReturnType<ReturnType<typeof cpuInterval>>) | null = null;
  let use: ReturnType<ReturnType<typeof cpuInterval>> | null = null;
  try {
    const g = bootGuest({
      manifest, sockets: [socket], run: SUITE, timeoutMs: GUEST_TIMEOUT_MS, memoryMiB: 768, qemuArgs: ['-mem-prealloc'],
      args: ['--pv', String(m.pv), '--only', benches.join(':'), '--repeat', String(repeat), ...(SIZES[size]!.args.length ? ['--', ...SIZES[size]!.args] : [])],
      onLine: (_l, rec) => {
        if (rec?.kind === 'BENCH') {
          const r = record(size, round, m.mode, rec.data, problems);
          if (r) runs.push(r);
        }
        // End the CPU interval while QEMU still runs: a process that has exited no longer
        // counts as ours (its CPU showed up as "others").
        if (rec?.kind === 'EXIT' && endCpu && !use) use = endCpu();
      },
    });
    endCpu = cpuInterval(() => (g.child.pid ? [g.child.pid] : []));
    const res = await g.done;
    for (const r of res.records) if (r.kind === 'ERROR' || r.kind === 'PARSE_ERROR') problems.push(`guest: ${JSON.stringify(r.data)}`);
    if (res.timedOut) problems.push('guest timed out');
    if (res.guestExit !== 0) problems.push(`guest suite exit ${res.guestExit}`);
    problems.push(...vfioErrorLines(res.stderr).map((l) => `qemu: ${l}`));
  } finally {
    server.close();
  }
  use ??= endCpu!();
  const expected = benches.length * repeat;
  if (runs.length !== expected) problems.push(`${runs.length} of ${expected} runs reported`);
  return {
    runs,
    side: {
      size, round, side: m.mode, wallS: Math.round((performance.now() - t0) / 100) / 10, problems,
      cpuCores: { ours: Math.round(use.ours * use.cpus * 100) / 100, others: Math.round(use.others * use.cpus * 100) / 100 },
    },
  };
}

async function runNative(binary: string, dir: string, size: string, round: number, benches: string[], repeat: number): Promise<{ runs: Run[]; side: SideRun }> {
  const socket = path.join(dir, `native-${round}.sock`);
  const server = new Vugpu({ vramSize: SLICE, channels: 64, watchdogMs: 60_000, vms: [{ name: 'native', socket, mode: 'pt' }] });
  prefault(server.engine.vram.u8); // as for the guest modes (runGuestMode)
  const problems: string[] = [];
  const runs: Run[] = [];
  const t0 = performance.now();
  const endCpu = cpuInterval(() => []);
  try {
    await sleep(50);
    for (const b of benches) {
      for (let i = 0; i < repeat; i++) {
        const r = await runNativeTwin(binary, socket, [b, ...SIZES[size]!.args], 600_000);
        problems.push(...r.problems.map((p) => `${b}: ${p}`));
        if (r.records.length === 0) problems.push(`${b}: no record (exit ${r.code ?? r.signal}): ${r.output.slice(-3).join(' | ')}`);
        for (const rec of r.records) {
          if (!rec.ok) problems.push(`${b}: failed (${rec.error ?? 'not verified'})`);
          runs.push({ size, round, side: 'native', bench: rec.bench, ok: rec.ok, totalUs: rec.total_us, stagesUs: rec.stages_us, mmio: rec.mmio });
        }
      }
    }
  } finally {
    server.close();
  }
  const use = endCpu();
  return {
    runs,
    side: {
      size, round, side: 'native', wallS: Math.round((performance.now() - t0) / 100) / 10, problems,
      cpuCores: { ours: Math.round(use.ours * use.cpus * 100) / 100, others: Math.round(use.others * use.cpus * 100) / 100 },
    },
  };
}

// ---- statistics ----

interface Cellstat {
  bench: string;
  side: Side;
  runs: number;
  /** Median, quartiles of the total over every run, ms. */
  totalMs: number;
  q25Ms: number;
  q75Ms: number;
  stagesMs: Record<Stage, number>;
  /** Per-round ratios of medians (same round), median and min–max over rounds. */
  vsPt: Spread | null;
  /** The 10th percentiles of all runs' totals, this side over pt, with a bootstrap interval
   * (common.ts lowRatio: the estimator that sees through this host's interference). */
  vsPtLow: LowRatio | null;
  vsNative: Spread | null;
  /**
   * The same without DataInit and DataRead, the benchmark's own CPU loops over host buffers:
   * they take the same guest instructions in every mode and, under TCG, vary with the guest's
   * memory layout rather than with the device path (see docs/results.md).
   */
  devicePathVsPt: Spread | null;
  devicePathVsPtLow: LowRatio | null;
  stagesVsPt: Record<Stage, Spread | null>;
  stagesVsNative: Record<Stage, Spread | null>;
}

/** Below this a stage is empty (no ratio). */
const EMPTY_US = 1;

function stats(runs: Run[], size: string, benches: string[], sides: Side[]): Cellstat[] {
  const rs = runs.filter((r) => r.size === size && r.ok);
  const rounds = [...new Set(rs.map((r) => r.round))];
  const of = (bench: string, side: Side, round?: number) => rs.filter((r) => r.bench === bench && r.side === side && (round === undefined || r.round === round));
  const med = (xs: Run[], f: (r: Run) => number) => (xs.length ? median(xs.map(f)) : NaN);
  const ratioPerRound = (bench: string, side: Side, ref: Side, f: (r: Run) => number) => rounds.map((k) => {
    const a = med(of(bench, side, k), f);
    const b = med(of(bench, ref, k), f);
    return a >= EMPTY_US && b >= EMPTY_US ? a / b : NaN;
  });
  const out: Cellstat[] = [];
  for (const bench of benches) {
    for (const side of sides) {
      const all = of(bench, side);
      if (all.length === 0) continue;
      const totals = all.map((r) => r.totalUs / 1000);
      const stagesMs = {} as Record<Stage, number>;
      const stagesVsPt = {} as Record<Stage, Spread | null>;
      const stagesVsNative = {} as Record<Stage, Spread | null>;
      for (const st of STAGES) {
        stagesMs[st] = med(all, (r) => r.stagesUs[st]) / 1000;
        stagesVsPt[st] = spread(ratioPerRound(bench, side, 'pt', (r) => r.stagesUs[st]));
        stagesVsNative[st] = spread(ratioPerRound(bench, side, 'native', (r) => r.stagesUs[st]));
      }
      out.push({
        bench, side, runs: all.length, totalMs: median(totals), q25Ms: quantile(totals, 0.25), q75Ms: quantile(totals, 0.75), stagesMs,
        vsPt: spread(ratioPerRound(bench, side, 'pt', (r) => r.totalUs)),
        vsPtLow: side === 'pt' ? null : lowRatio(all.map((r) => r.totalUs), of(bench, 'pt').map((r) => r.totalUs)),
        devicePathVsPtLow: side === 'pt' ? null : lowRatio(all.map(devicePathUs), of(bench, 'pt').map(devicePathUs)),
        devicePathVsPt: spread(ratioPerRound(bench, side, 'pt', devicePathUs)),
        vsNative: spread(ratioPerRound(bench, side, 'native', (r) => r.totalUs)),
        stagesVsPt, stagesVsNative,
      });
    }
  }
  return out;
}

/** Total without the CPU stages over host buffers (DataInit, DataRead). */
const devicePathUs = (r: Run) => r.totalUs - r.stagesUs.DataInit - r.stagesUs.DataRead;

// ---- plot (GPUvm Fig. 4: time relative to native, log scale) ----


function svg(result: Result): string {
  const W = 980, ph = 260, top = 50, left = 60, right = 20, gapY = 70;
  const pw = W - left - right;
  const sets = result.sizes;
  const H = top + sets.length * (ph + gapY) + 20;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="10" y="18" font-size="13" font-weight="bold">Execution time relative to native per benchmark and mode (log scale; GPUvm Fig. 4 style), ${result.environment.accel.toUpperCase()} guests</text>`,
    `<text x="10" y="36" fill="#555">${result.sides.filter((s) => s !== 'native').map((s) => `<tspan fill="${MODE_COLORS[s]}" font-weight="bold">■ ${s}</tspan>`).join('  ')}   bar = median over runs, whisker = min–max of the per-round ratios; 1 = native twin (no VM)</text>`,
  ];
  sets.forEach((set, si) => {
    const y0 = top + si * (ph + gapY) + 16;
    const cells = set.stats.filter((c) => c.side !== 'native' && c.vsNative);
    const vals = cells.flatMap((c) => [c.vsNative!.min, c.vsNative!.max]).filter((v) => v > 0);
    const lo = Math.min(0.5, ...vals);
    const hi = Math.max(2, ...vals);
    const l0 = Math.floor(Math.log10(lo));
    const l1 = Math.ceil(Math.log10(hi));
    const y = (v: number) => y0 + ph - ((Math.log10(v) - l0) / (l1 - l0)) * ph;
    parts.push(`<text x="${left}" y="${y0 - 6}" font-weight="bold">${SIZES[set.size]?.label ?? set.size}: ${set.rounds} round(s), ${set.wallS} s</text>`);
    parts.push(`<rect x="${left}" y="${y0}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
    for (let e = l0; e <= l1; e++) {
      for (const m of [1, 2, 5]) {
        const v = m * 10 ** e;
        if (v < 10 ** l0 || v > 10 ** l1) continue;
        parts.push(`<line x1="${left}" x2="${left + pw}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" stroke="${m === 1 ? '#bbb' : '#eee'}"${v === 1 ? ' stroke-width="1.5"' : ''}/>`);
        parts.push(`<text x="${left - 5}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${v}×</text>`);
      }
    }
    const modes = result.sides.filter((s) => s !== 'native');
    const gw = pw / set.benches.length;
    const bw = (gw * 0.8) / modes.length;
    set.benches.forEach((b, bi) => {
      const gx = left + bi * gw + gw * 0.1;
      parts.push(`<text x="${(left + bi * gw + gw / 2).toFixed(1)}" y="${y0 + ph + 14}" text-anchor="middle">${b}</text>`);
      modes.forEach((m, mi) => {
        const c = cells.find((x) => x.bench === b && x.side === m);
        if (!c) return;
        const x0 = gx + mi * bw;
        const base = y(Math.max(10 ** l0, 1e-9));
        const top1 = y(c.vsNative!.median);
        parts.push(`<rect x="${x0.toFixed(1)}" y="${Math.min(top1, base).toFixed(1)}" width="${(bw * 0.9).toFixed(1)}" height="${Math.abs(base - top1).toFixed(1)}" fill="${MODE_COLORS[m]}"><title>${b} ${m}: ${c.vsNative!.median.toFixed(2)}× native, ${c.vsPt ? `${c.vsPt.median.toFixed(2)}× pt` : ''}</title></rect>`);
        const cx = x0 + bw * 0.45;
        parts.push(`<line x1="${cx.toFixed(1)}" x2="${cx.toFixed(1)}" y1="${y(c.vsNative!.min).toFixed(1)}" y2="${y(c.vsNative!.max).toFixed(1)}" stroke="#000"/>`);
      });
    });
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

/** Without the native side (--no-native): time relative to pt, linear, the 1.05× goal dashed. */
function svgVsPt(result: Result): string {
  const modes: Side[] = result.sides.filter((s) => s !== 'native' && s !== 'pt');
  return ratioPlotSvg(`Execution time relative to pt per benchmark and mode, ${result.environment.accel.toUpperCase()} guests`, modes,
    result.sizes.map((set) => ({
      label: `${SIZES[set.size]?.label ?? set.size}: ${set.rounds} round(s), ${set.wallS} s`,
      benches: set.benches,
      bars: set.stats.filter((c) => modes.includes(c.side) && c.vsPt).map((c) => ({
        bench: c.bench, mode: c.side, median: c.vsPt!.median, min: c.vsPt!.min, max: c.vsPt!.max, low: c.vsPtLow?.ratio,
      })),
    })), 1.05);
}

// ---- tables ----

const x2 = (v: number | undefined | null) => (v === undefined || v === null || !Number.isFinite(v) ? '—' : v < 10 ? `${v.toFixed(2)}×` : `${v.toFixed(1)}×`);
const sp = (s: Spread | null) => (s ? `${x2(s.median)} (${x2(s.min)}–${x2(s.max)})` : '—');
const ms = (v: number) => (!Number.isFinite(v) ? '—' : v < 1 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0));

function tables(set: SizeSet, sides: Side[]) {
  const modes = sides.filter((s) => s !== 'native');
  const cell = (b: string, s: Side) => set.stats.find((c) => c.bench === b && c.side === s);
  const totals = {
    head: ['benchmark', ...sides.map((s) => `${s} ms`)],
    rows: set.benches.map((b): Cell[] => [b, ...sides.map((s) => {
      const c = cell(b, s);
      return c ? `${ms(c.totalMs)} (${ms(c.q25Ms)}–${ms(c.q75Ms)})` : null;
    })]),
  };
  const gm = (s: Side, k: 'vsPt' | 'vsNative' | 'devicePathVsPt') => geomean(set.benches.map((b) => cell(b, s)?.[k]?.median ?? NaN).filter((v) => Number.isFinite(v) && v > 0));
  const vsPt = {
    head: ['benchmark', ...modes.filter((m) => m !== 'pt').map((m) => `${m} / pt`)],
    rows: [
      ...set.benches.map((b): Cell[] => [b, ...modes.filter((m) => m !== 'pt').map((m) => sp(cell(b, m)?.vsPt ?? null))]),
      ['geometric mean', ...modes.filter((m) => m !== 'pt').map((m) => x2(gm(m, 'vsPt')))],
    ],
  };
  const lr = (r: LowRatio | null | undefined) => (r ? `${x2(r.ratio)} (${x2(r.lo)}–${x2(r.hi)})` : '—');
  const others = modes.filter((m) => m !== 'pt');
  const lowTable = (k: 'vsPtLow' | 'devicePathVsPtLow') => {
    const lows = (m: Side) => set.benches.map((b) => cell(b, m)?.[k]?.ratio ?? NaN).filter((v) => Number.isFinite(v) && v > 0);
    return {
      head: ['benchmark', ...others.map((m) => `${m} / pt`)],
      rows: [
        ...set.benches.map((b): Cell[] => [b, ...others.map((m) => lr(cell(b, m)?.[k]))]),
        ['geometric mean', ...others.map((m) => x2(geomean(lows(m))))],
        ['≤ 1.05×', ...others.map((m) => `${lows(m).filter((v) => v <= 1.05).length} of ${lows(m).length}`)],
      ],
    };
  };
  const vsPtLow = lowTable('vsPtLow');
  const devicePathLow = lowTable('devicePathVsPtLow');
  const devicePath = {
    head: ['benchmark', ...modes.filter((m) => m !== 'pt').map((m) => `${m} / pt`)],
    rows: [
      ...set.benches.map((b): Cell[] => [b, ...modes.filter((m) => m !== 'pt').map((m) => sp(cell(b, m)?.devicePathVsPt ?? null))]),
      ['geometric mean', ...modes.filter((m) => m !== 'pt').map((m) => x2(gm(m, 'devicePathVsPt')))],
    ],
  };
  const vsNative = {
    head: ['benchmark', ...modes.map((m) => `${m} / native`)],
    rows: [
      ...set.benches.map((b): Cell[] => [b, ...modes.map((m) => sp(cell(b, m)?.vsNative ?? null))]),
      ['geometric mean', ...modes.map((m) => x2(gm(m, 'vsNative')))],
    ],
  };
  // G-KVM's stage tables for madd and mmul, ours beside theirs.
  const stageTables = (['madd', 'mmul'] as const).filter((b) => set.benches.includes(b)).map((b) => ({
    bench: b,
    head: ['stage', ...sides.map((s) => `${s} ms`), 'fv / pt', 'fv-naive / pt', 'G-KVM native', 'Xen w/o map', 'Xen w/ map', 'G-KVM (KVM)', 'G-KVM KVM / native'],
    rows: [...STAGES, 'total' as const].map((st): Cell[] => {
      const g = GKVM[b];
      const ours = (s: Side) => {
        const c = cell(b, s);
        if (!c) return null;
        return ms(st === 'total' ? c.totalMs : c.stagesMs[st]);
      };
      const r = (m: Side) => {
        const c = cell(b, m);
        return c ? (st === 'total' ? sp(c.vsPt) : sp(c.stagesVsPt[st])) : null;
      };
      return [st, ...sides.map(ours), r('fv'), r('fv-naive'), g.native[st], g.xenNoMap[st], g.xenMap[st], g.kvm[st], x2(g.kvm[st] / g.native[st])];
    }),
  }));
  // Where the mediated modes lose time against pt: each stage's median difference, summed over benchmarks.
  const lossHead = ['mode', ...STAGES.map((s) => `${s} ms`), 'total ms'];
  const lossRows: Cell[][] = modes.filter((m) => m !== 'pt').map((m) => {
    const d = STAGES.map((st) => set.benches.reduce((a, b) => a + ((cell(b, m)?.stagesMs[st] ?? NaN) - (cell(b, 'pt')?.stagesMs[st] ?? NaN)), 0));
    const t = set.benches.reduce((a, b) => a + ((cell(b, m)?.totalMs ?? NaN) - (cell(b, 'pt')?.totalMs ?? NaN)), 0);
    return [m, ...d.map((v) => (Number.isFinite(v) ? v.toFixed(1) : '—')), Number.isFinite(t) ? t.toFixed(1) : '—'];
  });
  return { totals, vsPt, vsPtLow, devicePath, devicePathLow, vsNative, stageTables, loss: { head: lossHead, rows: lossRows } };
}

interface SizeSet {
  size: string;
  benches: string[];
  rounds: number;
  wallS: number;
  budgetHit: boolean;
  stats: Cellstat[];
}

interface Result {
  date: string;
  environment: Environment & { loadAvgAtEnd: number[] };
  method: string;
  repeat: number;
  sides: Side[];
  wallS: number;
  sizes: SizeSet[];
  sideRuns: SideRun[];
  runs: Run[];
  published: { gkvmTables5and7: typeof GKVM; gpuvmFig4: string[] };
  problems: string[];
}

function markdown(result: Result): string {
  const env = result.environment;
  const parts = [
    `Measured ${result.date.slice(0, 10)} (${env.accel.toUpperCase()}, QEMU ${env.qemu.replace(/^QEMU emulator version /, '')}, guest kernel ${env.guestKernel}; ` +
      `host load average ${env.loadAvgAtStart[0]} at start, ${env.loadAvgAtEnd[0]} at the end; ${result.wallS} s in all; ${result.repeat} run(s) of each benchmark per guest boot). ` +
      'Raw data: `bench/results/modes/cpu.json`; plot: `bench/results/modes/cpu.svg`.' +
      (result.problems.length ? ` **Problems:** ${result.problems.join('; ')}` : ' Every run verified.'),
  ];
  for (const set of result.sizes) {
    const t = tables(set, result.sides);
    const cores = result.sideRuns.filter((r) => r.size === set.size);
    const others = median(cores.map((r) => r.cpuCores.others));
    parts.push(
      '', `#### ${SIZES[set.size]?.label ?? set.size}: ${set.rounds} round(s), ${set.wallS} s${set.budgetHit ? ' (the wall-time budget stopped further rounds)' : ''}; others' CPU load median ${others.toFixed(2)} cores`,
      ...mdSection('Time per mode relative to pt (median of the per-round ratios, min–max over rounds in parentheses):', t.vsPt),
      ...mdSection('Time relative to pt from the 10th percentile of all runs of a cell (this side\'s over pt\'s; 90 % bootstrap interval in parentheses): interference on this shared host only adds time, in bursts, which a low quantile sees through and a median does not:', t.vsPtLow),
      ...mdSection('The same without DataInit and DataRead (the benchmark\'s CPU loops over host buffers, identical guest work in every mode; under TCG they vary with the guest\'s memory layout, not with the device path):', t.devicePath),
      ...mdSection('And from the 10th percentiles:', t.devicePathLow),
      ...mdSection('Relative to native (the native twin: same benchmark sources on the host, no VM, no TCG; GPUvm Fig. 4\'s axis):', t.vsNative),
      ...mdSection('Where the time goes: per stage, Σ over the benchmarks of (mode − pt) median ms:', t.loss),
      ...t.stageTables.flatMap((st) => mdSection(`${st.bench}: G-KVM stages, ms (G-KVM Table ${st.bench === 'madd' ? 'V' : 'VII'} beside: 4096² on a Fermi GPU):`, st)),
      ...mdSection('<details><summary>Total ms per benchmark and mode (median, quartiles over runs)</summary>', t.totals),
      '', '</details>',
    );
  }
  return parts.join('\n');
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      sizes: { type: 'string', default: 'default,large' },
      modes: { type: 'string' },
      only: { type: 'string' },
      rounds: { type: 'string', default: '3' },
      'large-rounds': { type: 'string', default: '2' },
      repeat: { type: 'string', default: '1' },
      'budget-min': { type: 'string', default: '20' },
      'no-native': { type: 'boolean', default: false },
      out: { type: 'string', default: 'modes' },
      replot: { type: 'boolean', default: false },
    },
  });
  const out = values.out!;
  if (values.replot) {
    const result = JSON.parse(fs.readFileSync(benchFile('modes', 'cpu', outVariant('modes', out)), 'utf8')) as Result;
    report(result, out);
    writeBenchResult('modes', 'cpu', result, outVariant('modes', out)); // with the statistics as computed now (its stamp kept)
    return;
  }
  const modes = values.modes ? MODES.filter((m) => values.modes!.split(',').includes(m.mode)) : MODES;
  const benches = values.only ? values.only.split(':') : [...BENCHMARKS];
  for (const b of benches) if (!(BENCHMARKS as readonly string[]).includes(b)) throw new Error(`unknown benchmark ${b}`);
  const sizes = values.sizes!.split(',');
  for (const z of sizes) if (!SIZES[z]) throw new Error(`unknown --sizes ${z} (default, large)`);
  const repeat = Number(values.repeat);
  const budgetMs = Number(values['budget-min']) * 60_000;
  const native = !values['no-native'];
  const manifest = loadManifest();
  for (const f of ['/opt/vugpu/vugpu-bench', SUITE, '/opt/vugpu/vugpu.ko']) {
    if (!manifest.guestFiles.includes(f)) throw new Error(`the guest image has no ${f}: run \`npm run setup\``);
  }
  const accel = chooseAccel();
  const env = environment(manifest, accel);
  const problems: string[] = [];
  let twin: string | null = null;
  if (native) {
    try {
      twin = buildNativeTwin();
    } catch (e) {
      const existing = path.join(repoRoot, 'build/native-twin/vugpu-bench-host');
      if (!fs.existsSync(existing)) throw e;
      twin = existing;
      problems.push(`the native twin did not rebuild (${(e as Error).message.split('\n')[0]}); used the existing build/native-twin binary`);
    }
  }
  const sides: Side[] = [...modes.map((m) => m.mode), ...(native ? ['native' as const] : [])];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-modes-'));
  const runs: Run[] = [];
  const sideRuns: SideRun[] = [];
  const sets: SizeSet[] = [];
  const t0 = performance.now();
  try {
    for (const size of sizes) {
      const t1 = performance.now();
      const maxRounds = Number(size === 'large' ? values['large-rounds'] : values.rounds);
      let rounds = 0;
      let budgetHit = false;
      for (let k = 1; k <= maxRounds; k++) {
        if (k > 1 && performance.now() - t1 > budgetMs) {
          budgetHit = true;
          break;
        }
        // Rotate the order each round: a drift in host load spreads over every mode.
        const order = sides.map((_, i) => sides[(i + k - 1) % sides.length]!);
        for (const side of order) {
          process.stderr.write(`[modes] ${size} round ${k}/${maxRounds}: ${side}\n`);
          const r = side === 'native'
            ? await runNative(twin!, dir, size, k, benches, repeat)
            : await runGuestMode(manifest, dir, size, k, modes.find((m) => m.mode === side)!, benches, repeat);
          runs.push(...r.runs);
          sideRuns.push(r.side);
          problems.push(...r.side.problems.map((p) => `${size}/${side} #${k}: ${p}`));
          process.stderr.write(`[modes] ${size} round ${k} ${side}: ${r.runs.length} runs, ${r.side.wallS} s${r.side.problems.length ? `, ${r.side.problems.length} problem(s)` : ''}\n`);
        }
        rounds = k;
      }
      sets.push({ size, benches, rounds, wallS: Math.round((performance.now() - t1) / 100) / 10, budgetHit, stats: stats(runs, size, benches, sides) });
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const result: Result = {
    date: new Date().toISOString(),
    environment: { ...env, loadAvgAtEnd: os.loadavg().map((x) => Math.round(x * 100) / 100) },
    method: 'in-process server, one guest boot per mode and round running the whole suite (--repeat runs of each benchmark), ' +
      'the native twin against a pt server; rounds interleaved with the mode order rotated each round; ratios per round (same round\'s medians), ' +
      'reported as the median over rounds with the min–max',
    repeat,
    sides,
    wallS: Math.round((performance.now() - t0) / 100) / 10,
    sizes: sets,
    sideRuns,
    runs,
    published: { gkvmTables5and7: GKVM, gpuvmFig4: GPUVM_FIG4 },
    problems,
  };
  writeBenchResult('modes', 'cpu', result, outVariant('modes', out));
  report(result, out);
}

function report(result: Result, out: string): void {
  // Statistics from the raw runs (so --replot picks up changes to them).
  for (const set of result.sizes) set.stats = stats(result.runs, set.size, set.benches, result.sides);
  const file = (ext: string) => benchFile('modes', 'cpu', outVariant('modes', out), ext);
  fs.writeFileSync(file('svg'), result.sides.includes('native') ? svg(result) : svgVsPt(result));
  if (out === 'modes') replaceSection(path.join(repoRoot, 'docs', 'results.md'), 'modes', markdown(result));
  const lines = [`vugpu time per mode — ${result.environment.accel.toUpperCase()}, ${result.wallS} s`];
  for (const set of result.sizes) {
    const t = tables(set, result.sides);
    lines.push('', `=== ${set.size} sizes: ${set.rounds} round(s), ${set.wallS} s${set.budgetHit ? ' (budget reached)' : ''}`,
      '', 'relative to pt', textTable(t.vsPt.head, t.vsPt.rows),
      '', 'relative to pt, 10th percentiles of all runs (90 % bootstrap interval)', textTable(t.vsPtLow.head, t.vsPtLow.rows),
      '', 'relative to pt without DataInit/DataRead', textTable(t.devicePath.head, t.devicePath.rows),
      '', 'relative to pt without DataInit/DataRead, 10th percentiles', textTable(t.devicePathLow.head, t.devicePathLow.rows),
      '', 'relative to native', textTable(t.vsNative.head, t.vsNative.rows),
      '', 'Σ (mode − pt) per stage, ms', textTable(t.loss.head, t.loss.rows));
  }
  lines.push('', result.problems.length ? `PROBLEMS:\n  ${result.problems.join('\n  ')}` : 'every run verified',
    `written ${path.relative(repoRoot, file('json'))}, ${path.relative(repoRoot, file('svg'))}${out === 'modes' ? ' and docs/results.md' : ''}`);
  process.stdout.write(`${lines.join('\n')}\n`);
  if (result.problems.length) process.exitCode = 1;
}

main().catch((err: Error) => {
  process.stderr.write(`[modes] ${err.stack ?? err.message}\n`);
  process.exit(1);
});
