// Helpers shared by the guest benchmarks (bench/fairness.ts, bench/counts.ts): where results go,
// the environment record, order statistics and table rendering (plain text and Markdown).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { AccelChoice } from '../../src/vm/accel.ts';
import type { Manifest } from '../../src/vm/manifest.ts';
import type { VmMode } from '../../src/server.ts';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const resultsDir = path.join(repoRoot, 'bench', 'results');

/**
 * GPUvm's five configurations as the guest benchmark suite runs them: the VM's mode and the
 * suite's --pv level (0: none, 1: a hypercall per mapping, 2: batched).
 */
export const SUITE_MODES: { mode: VmMode; pv: number }[] = [
  { mode: 'pt', pv: 0 },
  { mode: 'fv-naive', pv: 0 },
  { mode: 'fv', pv: 0 },
  { mode: 'pv', pv: 1 },
  { mode: 'pv-batch', pv: 2 },
];

/** The suite's problem sizes by --sizes name: what each means and the suite's arguments for it. */
export const SUITE_SIZES: Record<string, { label: string; args: string[] }> = {
  default: { label: 'default sizes (256² matrices, 8 MiB copies, 16384-node BFS: the suite\'s TCG-friendly defaults)', args: [] },
  large: { label: 'GPUvm sizes (`--large`: 1024² matrices, 64 MiB copies, 2^20-node BFS, 65536-input backprop)', args: ['--large'] },
};

export interface Environment {
  accel: string;
  accelReason: string;
  qemu: string;
  guestKernel: string;
  node: string;
  host: string;
  cpu: string;
  cpus: number;
  /** 1, 5 and 15 minute load averages when the benchmark started (the machine is shared). */
  loadAvgAtStart: number[];
}

export function environment(manifest: Manifest, accel: AccelChoice): Environment {
  return {
    accel: accel.accel,
    accelReason: accel.reason,
    qemu: manifest.qemu.version,
    guestKernel: manifest.kernelRelease,
    node: process.version,
    host: `${os.type()} ${os.release()}`,
    cpu: os.cpus()[0]?.model ?? 'unknown',
    cpus: os.cpus().length,
    loadAvgAtStart: os.loadavg().map((x) => Math.round(x * 100) / 100),
  };
}

/** Who measured a result: the commit (and whether the tree had changes), the host and the date. */
export interface Stamp {
  commit: string;
  dirty: boolean;
  host: string;
  cpu: string;
  cpus: number;
  /** The device the result is for ("lavapipe", "cpu", "h200", ...): the file's name. */
  device: string;
  date: string;
}

export function stamp(device: string): Stamp {
  const git = (args: string[]): string => {
    const r = spawnSync('git', args, { cwd: repoRoot, encoding: 'utf8' });
    return r.status === 0 ? r.stdout.trim() : '';
  };
  return {
    commit: git(['rev-parse', 'HEAD']) || 'unknown',
    dirty: git(['status', '--porcelain', '--untracked-files=no']) !== '',
    host: os.hostname(),
    cpu: os.cpus()[0]?.model ?? 'unknown',
    cpus: os.cpus().length,
    device,
    date: new Date().toISOString(),
  };
}

/**
 * The current result of benchmark `bench` on `device`: bench/results/<bench>/<device>.json, stamped.
 * One file per benchmark and device; a new run replaces it (git keeps the old ones). A named
 * experiment of the same benchmark (other flags, kept beside the default run because the docs
 * draw on it) is `variant`: <device>-<variant>.json. Data that already carries a stamp (a replot
 * of an old result) keeps it.
 */
export function writeBenchResult(bench: string, device: string, data: object, variant?: string): string {
  const file = benchFile(bench, device, variant);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, `${JSON.stringify({ stamp: { ...stamp(device), ...(variant ? { variant } : {}) }, ...data }, null, 2)}\n`);
  return file;
}

/** bench/results/<bench>/<device>[-<variant>].<ext>: where a result (or its plot) lives. */
export function benchFile(bench: string, device: string, variant?: string, ext = 'json'): string {
  const name = variant ? `${device}-${variant}` : device;
  if (!/^[a-z0-9][a-z0-9-]*$/.test(bench) || !/^[a-z0-9][a-z0-9-]*$/.test(name)) {
    throw new Error(`bad result name ${bench}/${name}: lower-case letters, digits and '-' only`);
  }
  return path.join(resultsDir, bench, `${name}.${ext}`);
}

/**
 * A benchmark's --out NAME as a variant: its own name (the default) is no variant, and
 * "<bench>-x" or "x" is variant x (so the commands quoted in docs/results.md still work).
 */
export function outVariant(bench: string, out: string | undefined): string | undefined {
  if (!out || out === bench) return undefined;
  return out.startsWith(`${bench}-`) ? out.slice(bench.length + 1) : out;
}

/** A result file's device name for a Vulkan device: "lavapipe", "h200", ... ("cpu" for none). */
export function resultDevice(vulkanName: string | null | undefined): string {
  if (!vulkanName) return 'cpu';
  if (/llvmpipe|lavapipe/i.test(vulkanName)) return 'lavapipe';
  const m = /\b([A-Z]\d{2,4}[A-Z]?)\b/.exec(vulkanName); // "NVIDIA H200" → h200
  return (m ? m[1]! : vulkanName).toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '') || 'gpu';
}

export function writeResult(name: string, data: unknown): string {
  fs.mkdirSync(resultsDir, { recursive: true });
  const file = path.join(resultsDir, name);
  fs.writeFileSync(file, typeof data === 'string' ? data : `${JSON.stringify(data, null, 2)}\n`);
  return file;
}

/** The q-quantile (0..1) of a list, linear interpolation between order statistics; NaN if empty. */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const pos = (s.length - 1) * Math.min(1, Math.max(0, q));
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return s[lo]! + (s[hi]! - s[lo]!) * (pos - lo);
}

export function median(values: readonly number[]): number {
  return quantile(values, 0.5);
}

/** Per-round ratios summarised: their median and min–max, and how many rounds had one. */
export interface Spread { median: number; min: number; max: number; rounds: number }

/** The Spread of the finite values of xs, or null if there are none. */
export function spread(xs: readonly number[]): Spread | null {
  const v = xs.filter((x) => Number.isFinite(x));
  if (v.length === 0) return null;
  return { median: median(v), min: Math.min(...v), max: Math.max(...v), rounds: v.length };
}

/**
 * A ratio of low quantiles — quantile(a, q) / quantile(b, q) — with a bootstrap interval (the
 * 5th and 95th percentiles of the ratio over resamples of both lists, a fixed seed so a replot
 * gives the same numbers). The estimator for "time of a benchmark" on a shared host, where
 * interference only ever adds time and comes in bursts (the same kernel 67 or 105 ms run to run):
 * a low quantile sees through it where the median does not (Chen and Revels, "Robust
 * benchmarking in noisy environments", 2016, argue the minimum; q = 0.1 rather than one run).
 */
export interface LowRatio { q: number; ratio: number; lo: number; hi: number; runs: [number, number] }

export function lowRatio(a: readonly number[], b: readonly number[], q = 0.1, resamples = 1000): LowRatio | null {
  const x = a.filter((v) => Number.isFinite(v) && v > 0);
  const y = b.filter((v) => Number.isFinite(v) && v > 0);
  if (x.length === 0 || y.length === 0) return null;
  let seed = 0x9e3779b9;
  const rand = () => { // mulberry32
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const pick = (v: number[]) => v.map(() => v[Math.floor(rand() * v.length)]!);
  const rs: number[] = [];
  for (let i = 0; i < resamples; i++) rs.push(quantile(pick(x), q) / quantile(pick(y), q));
  return { q, ratio: quantile(x, q) / quantile(y, q), lo: quantile(rs, 0.05), hi: quantile(rs, 0.95), runs: [x.length, y.length] };
}

export const geomean = (xs: readonly number[]): number =>
  (xs.length ? Math.exp(xs.reduce((a, x) => a + Math.log(x), 0) / xs.length) : NaN);

/** Fault in every page of a mapping by rewriting one byte of it (contents unchanged). */
export function prefault(u8: Uint8Array): void {
  for (let i = 0; i < u8.length; i += 4096) u8[i] = u8[i]!;
}

export type Cell = string | number | null | undefined;

function cellText(c: Cell): string {
  if (c === null || c === undefined) return '—';
  if (typeof c === 'number') return Number.isInteger(c) ? String(c) : c.toFixed(2);
  return c;
}

/** Columns padded to their widest cell; numbers right-aligned. */
export function textTable(head: string[], rows: Cell[][]): string {
  const cells = [head, ...rows.map((r) => r.map(cellText))];
  const w = head.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  const right = head.map((_, i) => rows.some((r) => typeof r[i] === 'number'));
  return cells
    .map((r) => r.map((c, i) => (right[i] ? c.padStart(w[i]!) : c.padEnd(w[i]!))).join('  ').trimEnd())
    .join('\n');
}

/** A Markdown table under its caption, as report lines: blank, caption, blank, table. */
export function mdSection(caption: string, t: { head: string[]; rows: Cell[][] }): string[] {
  return ['', caption, '', mdTable(t.head, t.rows)];
}

export function mdTable(head: string[], rows: Cell[][]): string {
  const right = head.map((_, i) => rows.some((r) => typeof r[i] === 'number'));
  const esc = (s: string) => s.replace(/\|/g, '\\|');
  return [
    `| ${head.map(esc).join(' | ')} |`,
    `|${right.map((r) => (r ? '---:' : '---')).join('|')}|`,
    ...rows.map((r) => `| ${r.map((c) => esc(cellText(c))).join(' | ')} |`),
  ].join('\n');
}

/**
 * Replace the text between `<!-- name:begin -->` and `<!-- name:end -->` in a Markdown file (the
 * generated part of a hand-written document); the markers are appended when missing.
 */
export function replaceSection(file: string, name: string, body: string): void {
  const begin = `<!-- ${name}:begin (generated by bench/${name}.ts) -->`;
  const end = `<!-- ${name}:end -->`;
  const text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
  const re = new RegExp(`<!-- ${name}:begin[^>]*-->[\\s\\S]*?<!-- ${name}:end -->`);
  const block = `${begin}\n${body.trim()}\n${end}`;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, re.test(text) ? text.replace(re, () => block) : `${text.trimEnd()}\n\n${block}\n`);
}

/** A TCP port on 127.0.0.1 that was free a moment ago (for a server's metrics listener). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}
