// Engine benchmark (npm run bench:engine): what the software GPU costs compared with running
// the same work directly in the same process.
//   - GEMM: FMMUL n×n launched through the engine (host driver → pushbuffer → doorbell →
//     command processor → MMU → map windows → native pool → fence interrupt) vs
//     native.sgemmDirect on plain buffers. Goal ≥ 0.9×.
//   - Copy engine: VRAM ↔ system memory (memfd behind the bus resolver) vs native.memcpyDirect
//     between the same two mappings. Goal ≥ 0.7×.
//   - Launch-to-completion latency of a NOP kernel (mean/p50/p99 over many launches).
// Writes bench/results/engine/cpu.json and cpu.svg and prints a table.
//   node bench/engine.ts        env: VUGPU_BENCH_GEMM_N (1024), VUGPU_BENCH_COPY_MIB (64,256),
//                                    VUGPU_BENCH_NOPS (2000)
//   node bench/engine.ts --engine vulkan [...]   the Vulkan engine instead: bench/engine-vulkan.ts
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { native } from '../src/native.ts';
import { Engine } from '../src/gpu/engine.ts';
import { HostDriver, type GpuVm, type HostChannel } from '../test/support/host-driver/driver.ts';
import { K } from '../src/gpu/kernels.ts';
import { TARGET_SYSMEM } from '../src/gpu/spec.ts';
import { benchFile, repoRoot, writeBenchResult } from './lib/common.ts';

const N = Number(process.env.VUGPU_BENCH_GEMM_N ?? 1024);
const COPY_MIB = (process.env.VUGPU_BENCH_COPY_MIB ?? '64,256').split(',').map(Number);
const NOPS = Number(process.env.VUGPU_BENCH_NOPS ?? 2000);
const REPS = 5;

const now = () => process.hrtime.bigint();
const sec = (ns: bigint) => Number(ns) / 1e9;

function paramsN(n: number): Uint8Array {
  const p = new Uint8Array(4);
  new DataView(p.buffer).setUint32(0, n, true);
  return p;
}

/** Best of `reps` runs of an async or sync body, in seconds. */
async function best(reps: number, body: () => unknown): Promise<number> {
  let b = Infinity;
  for (let i = 0; i < reps; i++) {
    const t0 = now();
    await body();
    b = Math.min(b, sec(now() - t0));
  }
  return b;
}

function pct(sorted: Float64Array, q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** VRAM ↔ sysmem copies of `mib` MiB through the engine vs memcpyDirect between the same mappings. */
async function copyBench(engine: Engine, drv: HostDriver, vm: GpuVm, ch: HostChannel, mib: number) {
  const len = mib << 20;
  const v = drv.vramBuffer(vm, len, { large: true });
  const s = drv.allocSysmem(len);
  const sva = vm.map(s.bus, len, { target: TARGET_SYSMEM, large: true });
  v.u8.fill(1); // touch every page on both sides first
  s.u8.fill(2);
  await ch.copy(sva, v.va, len);
  await ch.copy(v.va, sva, len);
  const tToSys = await best(REPS, () => ch.copy(sva, v.va, len));
  const tToVram = await best(REPS, () => ch.copy(v.va, sva, len));
  const vramView = engine.vram.u8.subarray(v.addr, v.addr + len);
  const tMemcpy = await best(REPS, () => native.memcpyDirect(s.u8, vramView, len));
  const tMemcpyBack = await best(REPS, () => native.memcpyDirect(vramView, s.u8, len));
  drv.freeSysmem(s);
  drv.freeVram(v.addr, Math.ceil(len / (128 << 10)) * (128 << 10));
  const gbs = (t: number) => len / t / 1e9;
  return {
    mib,
    vramToSysGBs: gbs(tToSys),
    sysToVramGBs: gbs(tToVram),
    memcpyGBs: gbs(tMemcpy),
    memcpyBackGBs: gbs(tMemcpyBack),
    ratioToSys: tMemcpy / tToSys,
    ratioToVram: tMemcpyBack / tToVram,
  };
}

async function main(): Promise<void> {
  const engine = new Engine({ vramSize: 1 << 30, channels: 8 });
  const drv = new HostDriver(engine);
  const ch = drv.createChannel();
  const vm = ch.vm;

  // ---- GEMM ----
  const bytes = 4 * N * N;
  const a = drv.vramBuffer(vm, bytes, { large: true });
  const b = drv.vramBuffer(vm, bytes, { large: true });
  const c = drv.vramBuffer(vm, bytes, { large: true });
  const fa = new Float32Array(a.u8.buffer, a.u8.byteOffset, N * N);
  const fb = new Float32Array(b.u8.buffer, b.u8.byteOffset, N * N);
  for (let i = 0; i < N * N; i++) {
    fa[i] = ((i * 7) % 13) / 13 - 0.5;
    fb[i] = ((i * 5) % 11) / 11 - 0.5;
  }
  const bufs = [a, b, c].map((x) => ({ va: x.va, length: bytes }));
  await ch.launch(K.FMMUL, bufs, paramsN(N)); // warm-up (page faults of the windows, BLAS init)
  const tEngine = await best(REPS, () => ch.launch(K.FMMUL, bufs, paramsN(N)));
  const ha = Float32Array.from(fa), hb = Float32Array.from(fb), hc = new Float32Array(N * N);
  native.sgemmDirect(N, N, N, ha, hb, hc);
  const tDirect = await best(REPS, () => native.sgemmDirect(N, N, N, ha, hb, hc));
  // Same answer both ways (spot check; the kernel tests check accuracy).
  const fc = new Float32Array(c.u8.buffer, c.u8.byteOffset, N * N);
  for (const i of [0, 12345 % (N * N), N * N - 1]) {
    if (Math.abs(fc[i]! - hc[i]!) > 1e-3 * (1 + Math.abs(hc[i]!))) throw new Error(`GEMM mismatch at ${i}: ${fc[i]} vs ${hc[i]}`);
  }
  const flop = 2 * N ** 3;
  const gemm = {
    n: N,
    openblas: native.haveOpenBlas(),
    engineGflops: flop / tEngine / 1e9,
    directGflops: flop / tDirect / 1e9,
    engineMs: tEngine * 1e3,
    directMs: tDirect * 1e3,
    ratio: tDirect / tEngine,
  };
  drv.freeVram(a.addr, bytes);
  drv.freeVram(b.addr, bytes);
  drv.freeVram(c.addr, bytes);

  // ---- copy engine ----
  const copies = [];
  for (const mib of COPY_MIB) copies.push(await copyBench(engine, drv, vm, ch, mib));

  // ---- NOP launch latency ----
  for (let i = 0; i < 100; i++) await ch.launch(K.NOP, []);
  const lat = new Float64Array(NOPS);
  let deviceNs = 0;
  const dev0 = engine.channel(ch.chid)!.deviceNs;
  for (let i = 0; i < NOPS; i++) {
    const t0 = now();
    await ch.launch(K.NOP, []);
    lat[i] = Number(now() - t0) / 1e3;
  }
  deviceNs = engine.channel(ch.chid)!.deviceNs - dev0;
  const sorted = Float64Array.from(lat).sort();
  const nop = {
    launches: NOPS,
    meanUs: lat.reduce((x, y) => x + y, 0) / NOPS,
    p50Us: pct(sorted, 0.5),
    p99Us: pct(sorted, 0.99),
    minUs: sorted[0]!,
    deviceUsPerLaunch: deviceNs / NOPS / 1e3,
  };

  drv.close();
  engine.close();

  const result = {
    date: new Date().toISOString(),
    host: { cpus: os.cpus().length, model: os.cpus()[0]?.model ?? '?', node: process.version },
    poolThreads: Number(process.env.VUGPU_POOL_THREADS ?? 2),
    gemm, copy: copies, nop,
    goals: { gemmRatio: 0.9, copyRatio: 0.7 },
  };
  const file = writeBenchResult('engine', 'cpu', result);
  fs.writeFileSync(benchFile('engine', 'cpu', undefined, 'svg'), svg(result));

  const f = (x: number, d = 2) => x.toFixed(d);
  const rows: [string, string, string, string][] = [
    [`GEMM ${N}³ (GFLOP/s)`, f(gemm.engineGflops, 1), f(gemm.directGflops, 1), `${f(gemm.ratio)}× (goal ≥ 0.9)`],
    ...copies.flatMap((c): [string, string, string, string][] => [
      [`copy VRAM→sysmem ${c.mib} MiB (GB/s)`, f(c.vramToSysGBs), f(c.memcpyGBs), `${f(c.ratioToSys)}× (goal ≥ 0.7)`],
      [`copy sysmem→VRAM ${c.mib} MiB (GB/s)`, f(c.sysToVramGBs), f(c.memcpyBackGBs), `${f(c.ratioToVram)}× (goal ≥ 0.7)`],
    ]),
    [`NOP launch→fence (µs) mean/p50/p99`, `${f(nop.meanUs, 1)}/${f(nop.p50Us, 1)}/${f(nop.p99Us, 1)}`, '—', `${NOPS} launches`],
  ];
  const w = [0, 1, 2, 3].map((i) => Math.max(...[['', 'engine', 'direct', 'ratio'][i]!, ...rows.map((r) => r[i]!)].map((x) => x.length)));
  const line = (r: string[]) => r.map((x, i) => x.padEnd(w[i]!)).join('  ');
  console.log(line(['', 'engine', 'direct', 'ratio']));
  for (const r of rows) console.log(line(r));
  console.log(`(OpenBLAS: ${gemm.openblas}; results in ${path.relative(repoRoot, file)})`);
}

/** A small bar chart of the two ratios against their goals. */
function svg(r: { gemm: { ratio: number }; copy: { mib: number; ratioToSys: number; ratioToVram: number }[]; nop: { p50Us: number } }): string {
  const bars = [
    { label: 'GEMM engine/direct', v: r.gemm.ratio, goal: 0.9 },
    ...r.copy.flatMap((c) => [
      { label: `copy ${c.mib} MiB VRAM→sys`, v: c.ratioToSys, goal: 0.7 },
      { label: `copy ${c.mib} MiB sys→VRAM`, v: c.ratioToVram, goal: 0.7 },
    ]),
  ];
  const W = 520, bh = 28, x0 = 190, scale = 250;
  const items = bars.map((b, i) => {
    const y = 30 + i * (bh + 12);
    const wv = Math.max(1, Math.min(1.5, b.v) * scale);
    return `<text x="${x0 - 8}" y="${y + 19}" text-anchor="end" font-size="12">${b.label}</text>` +
      `<rect x="${x0}" y="${y}" width="${wv.toFixed(1)}" height="${bh}" fill="${b.v >= b.goal ? '#4c9a2a' : '#c0392b'}"/>` +
      `<line x1="${x0 + b.goal * scale}" x2="${x0 + b.goal * scale}" y1="${y - 3}" y2="${y + bh + 3}" stroke="#000" stroke-dasharray="3,2"/>` +
      `<text x="${(x0 + wv + 6).toFixed(1)}" y="${y + 19}" font-size="12">${b.v.toFixed(2)}×</text>`;
  }).join('\n');
  const H = 60 + bars.length * (bh + 12);
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif">
<text x="10" y="18" font-size="13" font-weight="bold">vugpu engine vs direct (dashed: goal); NOP p50 ${r.nop.p50Us.toFixed(1)} µs</text>
${items}
<line x1="${x0 + scale}" x2="${x0 + scale}" y1="25" y2="${H - 25}" stroke="#888"/><text x="${x0 + scale}" y="${H - 10}" font-size="11" text-anchor="middle">1.0×</text>
</svg>
`;
}

// --engine vulkan: the GPU engine's benchmark (bench/engine-vulkan.ts) instead.
const ei = process.argv.indexOf('--engine');
if (ei >= 0 && process.argv[ei + 1] === 'vulkan') await (await import('./engine-vulkan.ts')).main(process.argv.slice(2));
else if (ei >= 0 && process.argv[ei + 1] !== 'cpu') throw new Error(`--engine takes cpu or vulkan, not ${process.argv[ei + 1]}`);
else await main();
