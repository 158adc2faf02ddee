// npm run bench:engine -- --engine vulkan: the Vulkan engine (a real GPU behind the virtual one)
// against what the same work costs without virtualization. Per GEMM size, FMMUL launched through
// the engine exactly as a guest's launch runs (host driver → pushbuffer → doorbell → command
// processor → MMU → windows → the built-in's SPIR-V on the Vulkan device, operands copied in
// and the result back → fence), with operands in VRAM and in system memory, against
//   (a) the same SPIR-V run directly through Vulkan with the same transfers (pinned host memory
//       → device-local, one dispatch, C back; native/src/vulkan/direct.cc) — goal ≥ 0.95×;
//   (b) cuBLAS SGEMM, TF32 off, with pinned transfers (bench/cublas-sgemm.py's JSON, --cublas,
//       where a CUDA host ran it first) — goal ≥ 1.0×;
//   (c) the CPU engine (native FMMUL on the pool), same inputs, same run;
// plus the engine's copies against the measured PCIe rates and the NOP launch→fence latency.
// Every result is checked (sampled dot products in doubles; engine vs direct vs CPU engine).
//   node bench/engine.ts --engine vulkan [--device NAME] [--sizes 1024,4096,8192] [--reps 5]
//        [--where vram,sysmem] [--cublas FILE] [--out FILE] [--nops 2000]
// Writes bench/results/engine-vulkan/<device>.json and .svg (or --out and its .svg). On a CPU device
// (lavapipe) the sizes default to 128,256,512 so the bench runs anywhere.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { jobPool } from '../src/gpu/jobs.ts';
import { native } from '../src/native.ts';
import { Engine } from '../src/gpu/engine.ts';
import { HostDriver, type HostChannel, type GpuVm } from '../test/support/host-driver/driver.ts';
import { K } from '../src/gpu/kernels.ts';
import { TARGET_SYSMEM } from '../src/gpu/spec.ts';
import { VulkanBackend } from '../src/gpu/vulkan.ts';
import { builtinPlan, builtinSpvPath, setGemmGpuTile, SPIRV_DIR } from '../src/gpu/program/builtins.ts';
import { benchFile, repoRoot, quantile, resultDevice, stamp } from './lib/common.ts';

interface Args {
  device?: string;
  sizes?: number[];
  reps: number;
  where: ('vram' | 'sysmem')[];
  cublas?: string;
  out?: string;
  nops: number;
}

function parse(argv: string[]): Args {
  const a: Args = { reps: 5, where: ['vram', 'sysmem'], nops: 2000 };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i]!, v = argv[i + 1];
    const need = (): string => {
      if (v === undefined) throw new Error(`${k} needs a value`);
      i++;
      return v;
    };
    if (k === '--engine') need();
    else if (k === '--device') a.device = need();
    else if (k === '--sizes') a.sizes = need().split(',').map(Number);
    else if (k === '--reps') a.reps = Number(need());
    else if (k === '--where') a.where = need().split(',') as Args['where'];
    else if (k === '--cublas') a.cublas = need();
    else if (k === '--out') a.out = path.resolve(need());
    else if (k === '--nops') a.nops = Number(need());
    else throw new Error(`unknown argument ${k}`);
  }
  return a;
}

const now = () => process.hrtime.bigint();
const ms = (ns: bigint | number) => Number(ns) / 1e6;

function stats(samplesMs: number[]) {
  return { bestMs: Math.min(...samplesMs), medianMs: quantile(samplesMs, 0.5), samples: samplesMs.length };
}

const rate = (tflops: number) => (tflops >= 1 ? `${tflops.toFixed(2)} TFLOP/s` : `${(tflops * 1e3).toFixed(1)} GFLOP/s`);

function paramsN(n: number): Uint8Array {
  const p = new Uint8Array(4);
  new DataView(p.buffer).setUint32(0, n, true);
  return p;
}

/** Deterministic inputs in [-1, 1) (an LCG: fast enough for 64 Mi elements). */
function fill(f: Float32Array, seed: number): void {
  let s = seed >>> 0;
  for (let i = 0; i < f.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    f[i] = s / 2147483648 - 1;
  }
}

/** Sampled check: C[i][j] within 2e-4·Σ|a·b| + 2e-6 of the double dot product. Worst ratio. */
function check(n: number, a: Float32Array, b: Float32Array, c: Float32Array, samples = 256): number {
  let worst = 0;
  let s = 12345;
  for (let t = 0; t < samples; t++) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    const i = s % n;
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    const j = s % n;
    let dot = 0, mag = 0;
    for (let k = 0; k < n; k++) {
      const p = a[i * n + k]! * b[k * n + j]!;
      dot += p;
      mag += Math.abs(p);
    }
    const r = Math.abs(c[i * n + j]! - dot) / (2e-4 * mag + 2e-6);
    if (!(r <= worst)) worst = Number.isNaN(r) ? Infinity : r;
  }
  return worst;
}

/** Largest |x − y| / (1e-4·(|x| + |y|) + 2e-5·mag + 1e-5) over all elements: two GEMMs agree to
 * rounding, relative to the element or, where the sum cancels, to mag = n·mean|a|·mean|b| (the
 * typical Σ|a·b| of an element; check() allows 2e-4 of the exact one). Summation order differs
 * between them where the engine runs its first panel in slices of k. */
function agree(x: Float32Array, y: Float32Array, a: Float32Array, b: Float32Array, n: number): number {
  let sa = 0, sb = 0;
  for (let i = 0; i < a.length; i++) sa += Math.abs(a[i]!);
  for (let i = 0; i < b.length; i++) sb += Math.abs(b[i]!);
  const mag = n * (sa / a.length) * (sb / b.length);
  let worst = 0;
  for (let i = 0; i < x.length; i++) {
    const r = Math.abs(x[i]! - y[i]!) / (1e-4 * (Math.abs(x[i]!) + Math.abs(y[i]!)) + 2e-5 * mag + 1e-5);
    if (!(r <= worst)) worst = Number.isNaN(r) ? Infinity : r;
  }
  return worst;
}

interface Operands {
  a: Float32Array;
  b: Float32Array;
  c: Float32Array;
  bufs: { va: number; length: number }[];
  free(): void;
}

function operands(drv: HostDriver, vm: GpuVm, n: number, where: 'vram' | 'sysmem'): Operands {
  const bytes = 4 * n * n;
  const views: Float32Array[] = [];
  const bufs: { va: number; length: number }[] = [];
  const frees: (() => void)[] = [];
  for (let i = 0; i < 3; i++) {
    if (where === 'vram') {
      const v = drv.vramBuffer(vm, bytes, { large: true });
      views.push(new Float32Array(v.u8.buffer, v.u8.byteOffset, n * n));
      bufs.push({ va: v.va, length: bytes });
      frees.push(() => drv.freeVram(v.addr, Math.ceil(bytes / (128 << 10)) * (128 << 10)));
    } else {
      const s = drv.allocSysmem(bytes);
      const va = vm.map(s.bus, s.size, { target: TARGET_SYSMEM, large: true });
      views.push(new Float32Array(s.u8.buffer, s.u8.byteOffset, n * n));
      bufs.push({ va, length: bytes });
      frees.push(() => drv.freeSysmem(s));
    }
  }
  return { a: views[0]!, b: views[1]!, c: views[2]!, bufs, free: () => frees.forEach((f) => f()) };
}

async function timeLaunches(ch: HostChannel, kernel: number, bufs: { va: number; length: number }[], p: Uint8Array, reps: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t0 = now();
    await ch.launch(kernel, bufs, p);
    out.push(ms(now() - t0));
  }
  return out;
}

type Phases = ReturnType<typeof native.vulkanStats>['dispatchPhases'];

/** acc[k] += b[k] − a[k] for every numeric field. */
function addDelta<T extends object>(acc: T, a: T, b: T): void {
  for (const k of Object.keys(acc) as (keyof T)[])
    if (typeof acc[k] === 'number') (acc[k] as number) += (b[k] as number) - (a[k] as number);
}

/** Blocks of engine launches and direct runs per size, alternating. */
const ROUNDS = 5;

/** (a)'s reference: the plan's one dispatch straight through Vulkan (native/src/vulkan/direct.cc)
 * on its own pinned copies of the inputs; `run(k)` adds k timed repetitions (each call's first
 * is a warm-up, dropped), C lands in `c`. */
function directRunner(plan: NonNullable<ReturnType<typeof builtinPlan>>, a: Float32Array, b: Float32Array, n: number) {
  const d = plan.dispatches[0]!;
  const bytes = fs.readFileSync(plan.spv ? new URL(plan.spv, SPIRV_DIR).pathname : builtinSpvPath(K.FMMUL));
  const words = new Uint32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  const c = new Float32Array(n * n).fill(NaN), wall: number[] = [], kern: number[] = [];
  let transferQueue = false;
  const run = (k: number) => {
    const x = native.vulkanDirectRun({ words, buffers: [a, b, c], writable: [false, false, true], push: d.push, grid: d.grid, reps: k + 1 });
    wall.push(...x.wallNs.slice(1).map((v) => v / 1e6));
    kern.push(...x.kernelNs.slice(1).map((v) => v / 1e6));
    transferQueue = x.transferQueue;
  };
  return { c, wall, kern, run, get transferQueue() { return transferQueue; } };
}

/** Where a launch's time went, per launch in µs: the pool thread's dispatch phases (setup = lane,
 * imports, staging, descriptors; record; vkQueueSubmit; wait for the fence; finish =
 * timestamps) and the rest of launch → fence (`outside`: host driver, command processor, MMU
 * and windows, pool hand-offs, completion back to JS). */
function phasesUs(p0: Phases, p1: Phases, wallMs: number[]) {
  const n = wallMs.length, d = p1.dispatches - p0.dispatches;
  const us = (k: keyof Phases) => (p1[k] - p0[k]) / n / 1e3;
  const r = { setup: us('setupNs'), record: us('recordNs'), submit: us('queueSubmitNs'), wait: us('waitNs'), finish: us('finishNs') };
  const inside = r.setup + r.record + r.submit + r.wait + r.finish;
  const wall = (wallMs.reduce((x, y) => x + y, 0) / n) * 1e3;
  return { dispatchesPerLaunch: d / n, meanWall: wall, ...r, outside: wall - inside };
}

/** NOP launch→fence on `ch`, in alternating blocks with the engines' completion polling
 * (jobs.ts: process-wide, the largest wish) and with none: the figure with it, `noPoll` beside. */
async function nopLatency(ch: HostChannel, engines: Engine[], count: number) {
  for (let i = 0; i < Math.min(200, count); i++) await ch.launch(K.NOP, []);
  const lat: number[] = [], off: number[] = [];
  const BLOCK = 100;
  const restore = () => engines.forEach((e) => jobPool.setCompletionPoll(e, e.completionPollUs));
  const pollUs = (restore(), jobPool.completionPollUs);
  for (let done = 0; done < count; done += BLOCK) {
    for (const [on, into] of [[true, lat], [false, off]] as const) {
      if (on) restore();
      else engines.forEach((e) => jobPool.setCompletionPoll(e, 0));
      for (let i = 0; i < BLOCK; i++) {
        const t0 = now();
        await ch.launch(K.NOP, []);
        into.push(Number(now() - t0) / 1e3);
      }
    }
  }
  restore();
  const st = (x: number[]) => ({ launches: x.length, meanUs: x.reduce((a, b) => a + b, 0) / x.length, p50Us: quantile(x, 0.5), p99Us: quantile(x, 0.99) });
  return { completionPollUs: pollUs, ...st(lat), noPoll: st(off) };
}

export async function main(argv: string[]): Promise<void> {
  const args = parse(argv);
  const backend = VulkanBackend.open(args.device);
  const info = backend.deviceInfo;
  const gpu = info.type !== 'cpu';
  const sizes = args.sizes ?? (gpu ? [1024, 4096, 8192] : [128, 256, 512]);
  const maxN = Math.max(...sizes);
  const vramSize = Math.ceil((3 * 4 * maxN * maxN + (256 << 20)) / (1 << 30)) * (1 << 30);
  console.log(`device: ${info.name} (${info.type}, ${info.driver} ${info.driverInfo}, Vulkan ${info.api}); memory path: ${info.memory}, transfer queues: ${info.transferQueues}`);
  const cublas = args.cublas && fs.existsSync(args.cublas) ? JSON.parse(fs.readFileSync(args.cublas, 'utf8')) : null;
  if (args.cublas && !cublas) console.log(`(no cuBLAS results at ${args.cublas}: column (b) stays empty)`);

  const engine = new Engine({ vramSize, channels: 8, programs: backend, builtinsOnPrograms: true, watchdogMs: 120_000 });
  const drv = new HostDriver(engine);
  const ch = drv.createChannel();
  const cpuEngine = new Engine({ vramSize, channels: 8, watchdogMs: 120_000 });
  const cpuDrv = new HostDriver(cpuEngine);
  const cpuCh = cpuDrv.createChannel();

  const rows: Record<string, unknown>[] = [];
  for (const n of sizes) {
    const flop = 2 * n ** 3;
    const tf = (m: number) => flop / (m / 1e3) / 1e12;
    const p = paramsN(n);
    // Per size: the engine's launches and the direct run alternate in ROUNDS blocks (the ratio
    // is taken from one interleaved run); small sizes take more repetitions (a 1024³ launch is
    // ~0.5 ms and its spread on a shared host is tens of µs). --reps sets the largest sizes'.
    const reps = n >= 8192 ? Math.max(3, Math.min(args.reps, 5)) : n >= 4096 ? Math.max(args.reps, 10) : n >= 2048 ? Math.max(args.reps, 30) : Math.max(args.reps, 100);
    // From 4096³ one block each (engine, then direct): alternating blocks of two launches there
    // slowed both paths on the H100 (engine 9.9 ms best / 16.1 median, direct 14.2 / 16.5, against
    // 6.2 and 8.7 in blocks in the same hour), and a handful of repetitions cannot be split.
    const rounds = n >= 4096 ? 1 : Math.min(ROUNDS, reps);
    const row: Record<string, unknown> = { n };
    let ref: { a: Float32Array; b: Float32Array; c: Float32Array } | null = null;
    const plan = builtinPlan(K.FMMUL, p, [4 * n * n, 4 * n * n, 4 * n * n])!;
    row.shader = plan.spv ?? builtinSpvPath(K.FMMUL).replace(/^.*build\/spirv\//, '');
    row.launchesPerGemm = plan.dispatches.length;
    for (const where of args.where) {
      const o = operands(drv, ch.vm, n, where);
      fill(o.a, n);
      fill(o.b, n + 1);
      o.c.fill(NaN);
      const tw = now();
      await ch.launch(K.FMMUL, o.bufs, p);  // first launch: compile, imports, device buffers
      const firstMs = ms(now() - tw);
      // Direct Vulkan on copies of the inputs (its own pinned buffers), between the engine's blocks.
      const direct = where === args.where[0] && plan.dispatches.length === 1 ? directRunner(plan, o.a.slice(), o.b.slice(), n) : null;
      // Each block starts with an untimed launch, as each direct run starts with an untimed
      // repetition (the first after the other path ran is slower on both). s0 + the blocks'
      // deltas = s1: the timed launches' counters alone (no warm-up launch, no direct run).
      const s0 = native.vulkanStats();
      const s1 = structuredClone(s0);
      const t: number[] = [];
      for (let r = 0; r < rounds; r++) {
        const k = Math.floor(reps / rounds) + (r < reps % rounds ? 1 : 0);
        await ch.launch(K.FMMUL, o.bufs, p);
        const a = native.vulkanStats();
        t.push(...await timeLaunches(ch, K.FMMUL, o.bufs, p, k));
        const b = native.vulkanStats();
        addDelta(s1, a, b);
        addDelta(s1.dispatchPhases, a.dispatchPhases, b.dispatchPhases);
        direct?.run(k);
      }
      const ph = phasesUs(s0.dispatchPhases, s1.dispatchPhases, t);
      const worst = check(n, o.a, o.b, o.c);
      if (!(worst <= 1)) throw new Error(`engine FMMUL ${n} (${where}) is wrong: error ${worst} × tolerance`);
      const st = stats(t);
      row[where] = {
        ...st, tflops: tf(st.bestMs), medianTflops: tf(st.medianMs), firstLaunchMs: firstMs, checkWorst: worst,
        perLaunch: {
          uploadMiB: (s1.uploadBytes - s0.uploadBytes) / reps / 2 ** 20,
          downloadMiB: (s1.downloadBytes - s0.downloadBytes) / reps / 2 ** 20,
          newImports: (s1.imports - s0.imports) / reps, importMs: (s1.importNs - s0.importNs) / reps / 1e6,
          importHits: (s1.importHits - s0.importHits) / reps, panels: (s1.panels - s0.panels) / reps, kSlices: (s1.kSlices - s0.kSlices) / reps,
          bounceMiB: (s1.bounceBytes - s0.bounceBytes) / reps / 2 ** 20,
          // Declared-overwritten bindings (FMMUL's C) cleared on the device instead of uploaded.
          zeroedMiB: (s1.zeroedBytes - s0.zeroedBytes) / reps / 2 ** 20,
          // The rewritten module's dispatch (timestamps): against direct.kernelBestMs, the cost
          // of the loop rewrite's cancel checks.
          kernelMs: (s1.computeNs - s0.computeNs) / reps / 1e6,
        },
        phasesUs: ph,
      };
      console.log(`  per launch µs: ${Object.entries(ph).map(([k, v]) => `${k} ${v.toFixed(1)}`).join(', ')}`);
      if (direct) {
        const agreeDirect = agree(o.c, direct.c, o.a, o.b, n);
        if (!(agreeDirect <= 1)) throw new Error(`direct Vulkan FMMUL ${n} disagrees with the engine: ${agreeDirect}`);
        const st = stats(direct.wall);
        const kern = direct.kern;
        row.direct = {
          ...st, tflops: tf(st.bestMs), transferQueue: direct.transferQueue, agreeWorst: agreeDirect, interleavedRounds: rounds,
          kernelBestMs: kern.length ? Math.min(...kern) : null, kernelTflops: kern.length ? tf(Math.min(...kern)) : null,
        };
        console.log(`GEMM ${n}³ direct Vulkan (interleaved with the engine's launches): ${st.bestMs.toFixed(2)} ms best, median ${st.medianMs.toFixed(2)}, ${rate(tf(st.bestMs))}; kernel only ${kern.length ? rate(tf(Math.min(...kern))) : '?'}`);
      }
      console.log(`GEMM ${n}³ engine (${where}): ${st.bestMs.toFixed(2)} ms best, ${rate(tf(st.bestMs))} (first launch ${firstMs.toFixed(1)} ms; dispatch ${((s1.computeNs - s0.computeNs) / reps / 1e6).toFixed(2)} ms)`);
      // The streaming choice, measured: panels of at least W workgroups (default 512); a W
      // larger than the grid means one panel (copy all, compute, copy back on the copy queues).
      if (where === 'vram' && info.memory === 'device' && n >= 2048) {
        // At most M panels (VUGPU_VK_MAX_PANELS; default 4), panels of ≥ 256 workgroups.
        const sweep: Record<string, number> = {};
        const saved = process.env.VUGPU_VK_MAX_PANELS;
        for (const m of [1, 2, 4, 8, 16]) {
          process.env.VUGPU_VK_MAX_PANELS = String(m);
          native.vulkanReadTuning();  // launches read the knobs parsed at open, or parsed again here
          const p0 = native.vulkanStats().panels;
          const best = Math.min(...await timeLaunches(ch, K.FMMUL, o.bufs, p, 3));
          sweep[m === 1 ? 'onePanel' : `maxPanels${m}`] = best;
          console.log(`  at most ${m} panels: ${best.toFixed(2)} ms (${(native.vulkanStats().panels - p0) / 3} panels)`);
        }
        if (saved === undefined) delete process.env.VUGPU_VK_MAX_PANELS;
        else process.env.VUGPU_VK_MAX_PANELS = saved;
        native.vulkanReadTuning();
        (row[where] as Record<string, unknown>).panelSweepBestMs = sweep;
        // The streaming choices (native/src/vulkan/plan.cc, record.cc), each env switch set to 1: the default (B streamed
        // by rows of k under the first panel's k slices; every zero fill before the first
        // panel), B whole before the first panel (VUGPU_VK_K_SLICES=1), a zero fill and its
        // barrier before each panel, C uploaded instead of zero-filled. Interleaved rounds; best
        // wall and its dispatch span (timestamps, first to last panel).
        const fills: Record<string, { bestMs: number; kernelMs: number }> = {};
        const variants = [['default', null], ['noKSlices', 'VUGPU_VK_K_SLICES'], ['fillEachPanel', 'VUGPU_VK_FILL_EACH_PANEL'], ['uploadC', 'VUGPU_VK_UPLOAD_ALL']] as const;
        for (let round = 0; round < 3; round++) {
          for (const [name, env] of variants) {
            if (env) process.env[env] = '1';
            native.vulkanReadTuning();
            o.c.fill(NaN);
            const s0 = native.vulkanStats().computeNs;
            const t = await timeLaunches(ch, K.FMMUL, o.bufs, p, 2);
            const k = (native.vulkanStats().computeNs - s0) / 2 / 1e6;
            if (env) delete process.env[env];
            native.vulkanReadTuning();
            const bad = check(n, o.a, o.b, o.c, 64);
            if (!(bad <= 1)) throw new Error(`engine FMMUL ${n} (${name}) is wrong: error ${bad} × tolerance`);
            const prev = fills[name];
            if (!prev || Math.min(...t) < prev.bestMs) fills[name] = { bestMs: Math.min(...t), kernelMs: k };
          }
        }
        for (const [name, v] of Object.entries(fills)) console.log(`  ${name}: ${v.bestMs.toFixed(2)} ms best, dispatch span ${v.kernelMs.toFixed(2)} ms`);
        (row[where] as Record<string, unknown>).streamSweep = fills;
      }
      // Small launches: copies on the compute queue in one command buffer (default up to 32 MiB)
      // against the copy queues with semaphores.
      if (where === 'vram' && info.memory === 'device' && n <= 2048 && info.transferQueues > 0) {
        const sweep: Record<string, number> = {};
        const sweepPhases: Record<string, ReturnType<typeof phasesUs>> = {};
        const saved = process.env.VUGPU_VK_ONE_QUEUE_BYTES;
        for (const [name, v] of [['copyQueues', '1'], ['computeQueue', String(1 << 30)]] as const) {
          process.env.VUGPU_VK_ONE_QUEUE_BYTES = v;
          native.vulkanReadTuning();
          const p0 = native.vulkanStats().dispatchPhases;
          const t = await timeLaunches(ch, K.FMMUL, o.bufs, p, Math.max(5, reps));
          sweepPhases[name] = phasesUs(p0, native.vulkanStats().dispatchPhases, t);
          sweep[name] = Math.min(...t);
          console.log(`  copies on the ${name === 'copyQueues' ? 'copy queues' : 'compute queue'}: ${sweep[name]!.toFixed(3)} ms; µs ${Object.entries(sweepPhases[name]!).map(([k, x]) => `${k} ${x.toFixed(1)}`).join(', ')}`);
        }
        (row[where] as Record<string, unknown>).queueSweepPhasesUs = sweepPhases;
        if (saved === undefined) delete process.env.VUGPU_VK_ONE_QUEUE_BYTES;
        else process.env.VUGPU_VK_ONE_QUEUE_BYTES = saved;
        native.vulkanReadTuning();
        (row[where] as Record<string, unknown>).queueSweepBestMs = sweep;
      }
      // FMMUL's tile where the plan may pick 64×64 (fewer than 128 workgroups of 128×128):
      // both forms interleaved, best wall and the dispatch span (timestamps).
      if (where === 'vram' && info.memory === 'device' && n <= 2048) {
        const tiles: Record<string, { bestMs: number; kernelMs: number }> = {};
        for (let round = 0; round < 3; round++) {
          for (const tile of [64, 128] as const) {
            setGemmGpuTile(tile);
            if (round === 0) await ch.launch(K.FMMUL, o.bufs, p);  // compiles the other form
            o.c.fill(NaN);
            const s0 = native.vulkanStats().computeNs;
            const k = Math.max(5, Math.min(reps, 20));
            const t = await timeLaunches(ch, K.FMMUL, o.bufs, p, k);
            const kern = (native.vulkanStats().computeNs - s0) / k / 1e6;
            setGemmGpuTile();
            const bad = check(n, o.a, o.b, o.c, 64);
            if (!(bad <= 1)) throw new Error(`engine FMMUL ${n} (${tile}×${tile} tiles) is wrong: error ${bad} × tolerance`);
            const prev = tiles[`tile${tile}`];
            if (!prev || Math.min(...t) < prev.bestMs) tiles[`tile${tile}`] = { bestMs: Math.min(...t), kernelMs: kern };
          }
        }
        for (const [name, v] of Object.entries(tiles)) console.log(`  ${name}: ${v.bestMs.toFixed(3)} ms best, dispatch ${v.kernelMs.toFixed(3)} ms`);
        (row[where] as Record<string, unknown>).tileSweep = tiles;
      }
      if (!ref) ref = { a: o.a.slice(), b: o.b.slice(), c: o.c.slice() };
      o.free();
    }
    if (!ref) continue;

    // The portable shader (fmmul.comp) on the direct path, kernel time: what the GPU form buys.
    if (plan.dispatches.length === 1) {
      const dc = new Float32Array(n * n);
      if (plan.spv && gpu) {
        const pp = new Uint8Array(16);
        new DataView(pp.buffer).setUint32(0, n, true);
        new DataView(pp.buffer).setUint32(8, n, true);
        const pb = fs.readFileSync(builtinSpvPath(K.FMMUL));
        const pw = new Uint32Array(pb.buffer.slice(pb.byteOffset, pb.byteOffset + pb.byteLength));
        const t = Math.ceil(n / 64);
        const pr = native.vulkanDirectRun({ words: pw, buffers: [ref.a, ref.b, dc], writable: [false, false, true], push: pp, grid: [t, t, 1], reps: 3 });
        const pk = pr.kernelNs.slice(1).map((x) => x / 1e6);
        if (pk.length) row.directPortableKernel = { bestMs: Math.min(...pk), tflops: tf(Math.min(...pk)) };
        if (pk.length) console.log(`GEMM ${n}³ portable shader (fmmul.comp), kernel only: ${rate(tf(Math.min(...pk)))}`);
      }
    }

    // (c) The CPU engine on the same inputs.
    {
      const o = operands(cpuDrv, cpuCh.vm, n, 'vram');
      o.a.set(ref.a);
      o.b.set(ref.b);
      // Large sizes take seconds to minutes on the CPU: one timed launch, no warm-up.
      if (n < 4096) await cpuCh.launch(K.FMMUL, o.bufs, p);
      // Few repetitions: the GPU idles meanwhile (and the CPU engine is not what is compared).
      const t = await timeLaunches(cpuCh, K.FMMUL, o.bufs, p, n >= 4096 ? 1 : Math.min(reps, 5));
      const ag = agree(ref.c, o.c, ref.a, ref.b, n);
      const worst = check(n, ref.a, ref.b, o.c);
      const st = stats(t);
      row.cpuEngine = { ...st, tflops: tf(st.bestMs), checkWorst: worst, agreeWithGpu: ag };
      console.log(`GEMM ${n}³ CPU engine: ${st.bestMs.toFixed(1)} ms, ${rate(tf(st.bestMs))}`);
      o.free();
    }
    const cb = cublas?.sizes?.find((x: { n: number }) => x.n === n);
    if (cb) row.cublas = cb;

    // Ratios (best times) and the copies against PCIe.
    const eng = (row.vram ?? row.sysmem) as { bestMs: number; medianMs: number; perLaunch: { uploadMiB: number; downloadMiB: number } };
    const dir = row.direct as { bestMs: number; medianMs: number; kernelBestMs: number | null } | undefined;
    row.ratios = {
      engineVsDirect: dir ? dir.bestMs / eng.bestMs : null,
      engineVsDirectMedian: dir ? dir.medianMs / eng.medianMs : null,
      engineVsCublasWithTransfers: cb ? cb.withTransfersMs / eng.bestMs : null,
      engineVsCpuEngine: (row.cpuEngine as { bestMs: number }).bestMs / eng.bestMs,
    };
    if (cublas?.pinnedH2DGBs) {
      const up = eng.perLaunch.uploadMiB * 2 ** 20, down = eng.perLaunch.downloadMiB * 2 ** 20;
      const xfer = (up / cublas.pinnedH2DGBs + down / cublas.pinnedD2HGBs) / 1e6;
      row.transfers = {
        atPcieMs: xfer, pcieH2DGBs: cublas.pinnedH2DGBs, pcieD2HGBs: cublas.pinnedD2HGBs,
        // What the engine's time would be with copies, then compute (no overlap) and with perfect overlap.
        serialMs: dir?.kernelBestMs != null ? dir.kernelBestMs + xfer : null,
        overlappedMs: dir?.kernelBestMs != null ? Math.max(dir.kernelBestMs, xfer) : null,
      };
    }
    rows.push(row);
  }

  const nop = await nopLatency(ch, [engine, cpuEngine], args.nops);
  const cpuNop = await nopLatency(cpuCh, [engine, cpuEngine], args.nops);
  console.log(`NOP launch→fence: Vulkan engine p50 ${nop.p50Us.toFixed(1)} µs (p99 ${nop.p99Us.toFixed(1)}; without completion polling ${nop.noPoll.p50Us.toFixed(1)}); CPU engine p50 ${cpuNop.p50Us.toFixed(1)} µs`);
  const vs = native.vulkanStats();
  drv.close();
  engine.close();
  cpuDrv.close();
  cpuEngine.close();
  backend.close();

  const result = {
    date: new Date().toISOString(),
    device: { name: info.name, type: info.type, driver: `${info.driver} ${info.driverInfo}`.trim(), api: info.api,
      memory: info.memory, transferQueues: info.transferQueues },
    host: { cpus: os.cpus().length, model: os.cpus()[0]?.model ?? '?', node: process.version, openblas: native.haveOpenBlas() },
    cublas: cublas ? { device: cublas.device, torch: cublas.torch, cuda: cublas.cuda, allowTf32: cublas.allow_tf32 } : null,
    env: Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith('VUGPU_'))),
    gemm: rows,
    nop: { vulkan: nop, cpu: cpuNop },
    importTotals: { imports: vs.imports, importMs: vs.importNs / 1e6, hits: vs.importHits },
    goals: { engineVsDirect: 0.95, engineVsCublasWithTransfers: 1.0 },
  };
  const out = args.out ?? benchFile('engine-vulkan', resultDevice(info.name));
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, JSON.stringify({ stamp: stamp(resultDevice(info.name)), ...result }, null, 2) + '\n');
  fs.writeFileSync(out.replace(/\.json$/, '') + '.svg', svg(result));
  console.log(`results: ${out}`);
}

export function svg(r: { device: { name: string }; gemm: Record<string, unknown>[]; nop: { vulkan: { p50Us: number } } }): string {
  // Grouped bars: TFLOP/s per size for engine (VRAM), engine (sysmem), direct, cuBLAS with transfers, CPU engine.
  const series: [string, string, (row: Record<string, unknown>) => number | undefined][] = [
    ['engine, VRAM', '#2e7d32', (x) => (x.vram as { tflops?: number } | undefined)?.tflops],
    ['engine, sysmem', '#81c784', (x) => (x.sysmem as { tflops?: number } | undefined)?.tflops],
    ['direct Vulkan', '#1565c0', (x) => (x.direct as { tflops?: number } | undefined)?.tflops],
    ['cuBLAS + transfers', '#ef6c00', (x) => (x.cublas as { withTransfersTflops?: number } | undefined)?.withTransfersTflops],
    ['CPU engine', '#757575', (x) => (x.cpuEngine as { tflops?: number } | undefined)?.tflops],
  ];
  const vals = r.gemm.flatMap((row) => series.map((s) => s[2](row) ?? 0));
  const max = Math.max(1e-9, ...vals);
  const W = 640, H = 340, x0 = 60, y0 = 40, ph = 220, gw = (W - x0 - 20) / Math.max(1, r.gemm.length), bw = gw / (series.length + 1);
  const bars = r.gemm.map((row, gi) => series.map(([, color, get], si) => {
    const v = get(row) ?? 0;
    const h = (v / max) * ph, x = x0 + gi * gw + si * bw + bw / 2, y = y0 + ph - h;
    return `<rect x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${(bw * 0.9).toFixed(1)}" height="${h.toFixed(1)}" fill="${color}"/>` +
      `<text x="${(x + bw * 0.45).toFixed(1)}" y="${(y - 3).toFixed(1)}" font-size="9" text-anchor="middle">${v >= 10 ? v.toFixed(1) : v.toFixed(2)}</text>`;
  }).join('') + `<text x="${(x0 + gi * gw + gw / 2).toFixed(1)}" y="${y0 + ph + 16}" font-size="12" text-anchor="middle">${row.n}³</text>`).join('\n');
  const legend = series.map(([name, color], i) => `<rect x="${x0 + i * 116}" y="${H - 30}" width="10" height="10" fill="${color}"/><text x="${x0 + i * 116 + 14}" y="${H - 21}" font-size="11">${name}</text>`).join('');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif">
<text x="10" y="18" font-size="13" font-weight="bold">FMMUL TFLOP/s (launch→fence, transfers included) — ${r.device.name.replace(/[<&]/g, '')}</text>
<text x="10" y="33" font-size="11">NOP launch→fence p50 ${r.nop.vulkan.p50Us.toFixed(1)} µs</text>
<line x1="${x0}" x2="${W - 20}" y1="${y0 + ph}" y2="${y0 + ph}" stroke="#000"/>
${bars}
${legend}
</svg>
`;
}
