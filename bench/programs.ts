// Programs benchmark (npm run bench:programs): what running the guest's own SPIR-V costs next to
// the built-in kernels, on the program device of this host (lavapipe here), in one process and
// one run, interleaved so the ratios hold on a noisy machine.
//   - launch→fence latency of a NOP program vs the built-in NOP (native pool), per mode: the
//     bare engine (pt's path) and through the aggregator (fv, pv-batch); goal ≤ 2×; then, apart,
//     where the gap goes (nopStages: the same launches straight through the native pool, and
//     context switches per launch; bench/vulkan-floor.c measures the device without vugpu),
//     and the two with the built-in on the program device too (nopSameDevice: --engine vulkan);
//   - vector add and SGEMM as programs vs the built-ins FMADD and FMMUL on the same inputs;
//   - the loop rewrite's cost on SGEMM (bench/rewrite-cost.ts: the guest SGEMM sample and the
//     built-in FMMUL run raw and as the engine rewrites them, one Vulkan path); goal ≤ 3 %;
//   - first launch of a new module (validate, rewrite, driver compile, and on a CPU device the
//     warm-up dispatch) vs a cache hit. Mesa's on-disk shader cache is a fresh directory of this
//     run (MESA_SHADER_CACHE_DIR, unless set): on lavapipe it carries each new pipeline's machine
//     code from the warm-up device to the serving one. Modules are new to the driver by a
//     constant (a store of a NOP-sized shader; a never-taken branch of SGEMM): one made new only
//     by its header's generator word would be the same shader to Mesa, a disk-cache read.
// Writes bench/results/programs/<device>.json and <device>.svg (lavapipe, h200, ...).
//   node bench/programs.ts   env: VUGPU_BENCH_NOPS (600), VUGPU_BENCH_NOP_WARM_MS (300), VUGPU_BENCH_VEC (1048576), VUGPU_BENCH_SGEMM (256),
//                            VUGPU_BENCH_REWRITE_ROUNDS (15), VUGPU_BENCH_REWRITE_LARGE (1024: GPUs also run the rewrite cost there)
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Engine } from '../src/gpu/engine.ts';
import { HostDriver, type HostChannel, type ProgramModule } from '../test/support/host-driver/driver.ts';
import { jobPool } from '../src/gpu/jobs.ts';
import { native } from '../src/native.ts';
import { K } from '../src/gpu/kernels.ts';
import { VulkanBackend } from '../src/gpu/vulkan.ts';
import { guest, host } from '../test/aggregator/harness.ts';
import { benchFile, repoRoot, quantile, median, resultDevice, textTable, writeBenchResult } from './lib/common.ts';
import { rewriteCost, type RewriteCase } from './rewrite-cost.ts';

const NOPS = Number(process.env.VUGPU_BENCH_NOPS ?? 600);
const NOP_WARM_MS = Number(process.env.VUGPU_BENCH_NOP_WARM_MS ?? 300);
const VEC = Number(process.env.VUGPU_BENCH_VEC ?? 1 << 20);
const SG = Number(process.env.VUGPU_BENCH_SGEMM ?? 256);
const REWRITE_ROUNDS = Number(process.env.VUGPU_BENCH_REWRITE_ROUNDS ?? 15);
const REWRITE_LARGE = Number(process.env.VUGPU_BENCH_REWRITE_LARGE ?? 1024);
const REPS = 5;
const BLOCK = 25;

const now = () => process.hrtime.bigint();
const us = (ns: bigint) => Number(ns) / 1e3;

function spv(rel: string): Uint8Array {
  const p = path.join(repoRoot, 'build/spirv', rel);
  if (!fs.existsSync(p)) throw new Error(`${p} is missing: run scripts/build-spirv.sh`);
  return new Uint8Array(fs.readFileSync(p));
}

/** Per run: constants no earlier run (or Mesa's disk cache) has seen. */
const runSeed = (process.pid * 0x9e37 + Date.now()) & 0x7fff0000;

/** A NOP-sized shader (one store) whose stored constant makes it a new shader: k → module. */
function markerModules(): (k: number) => Uint8Array {
  const words = glslWords('marker', `#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer O { uint o[]; };
void main() { o[0] = 0x5EED1234u; }`);
  const at = words.indexOf(0x5eed1234);
  if (at < 0) throw new Error('marker constant not found in the module');
  return (k) => {
    const w = Uint32Array.from(words);
    w[at] = k >>> 0;
    return new Uint8Array(w.buffer);
  };
}

/** The guest SGEMM sample with a never-taken branch on a constant (M is never k): new shaders,
 * the same work. Compiled per k with glslangValidator. */
function sgemmModules(): (k: number) => Uint8Array {
  const src = fs.readFileSync(path.join(repoRoot, 'guest/programs/sgemm.comp'), 'utf8');
  const end = src.lastIndexOf('}');
  return (k) => new Uint8Array(glslWords(`sgemm-${k}`, `${src.slice(0, end)}  if (pc.M == ${k >>> 0}u) c[0] = 1.0;\n}\n`).buffer);
}

function glslWords(name: string, source: string): Uint32Array {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-bench-glsl-'));
  try {
    fs.writeFileSync(path.join(dir, `${name}.comp`), source);
    execFileSync('glslangValidator', ['-V', '--target-env', 'vulkan1.1', '-o', path.join(dir, 'out.spv'), path.join(dir, `${name}.comp`)], { stdio: 'pipe' });
    const b = fs.readFileSync(path.join(dir, 'out.spv'));
    return new Uint32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function u32s(...v: number[]): Uint8Array {
  return new Uint8Array(new Uint32Array(v).buffer);
}

interface Lat { meanUs: number; p50Us: number; p99Us: number; n: number }
function lat(samples: number[]): Lat {
  return {
    meanUs: samples.reduce((a, b) => a + b, 0) / samples.length,
    p50Us: quantile(samples, 0.5), p99Us: quantile(samples, 0.99), n: samples.length,
  };
}

/** NOP program vs built-in NOP on one channel, alternating blocks (interleaved). */
async function nopLatency(ch: HostChannel, nopProg: ProgramModule): Promise<{ builtin: Lat; program: Lat; ratioP50: number; ratioMean: number }> {
  await ch.launch(K.NOP, []);
  await ch.launchProgram(nopProg, { buffers: [] }); // compile (first launch) out of the way
  // Both kinds for NOP_WARM_MS first: a GPU's clocks and the host's cores ramp up under load
  // (H200 host, without it: the first mode measured, bare, read a NOP program p50 of 93 µs;
  // the same path measured later in the run, nopStages, 69 µs).
  for (const t0 = Date.now(); Date.now() - t0 < NOP_WARM_MS;) {
    await ch.launch(K.NOP, []);
    await ch.launchProgram(nopProg, { buffers: [] });
  }
  const a: number[] = [], b: number[] = [];
  for (let done = 0; done < NOPS; done += BLOCK) {
    for (let i = 0; i < BLOCK; i++) {
      const t0 = now();
      await ch.launch(K.NOP, []);
      a.push(us(now() - t0));
    }
    for (let i = 0; i < BLOCK; i++) {
      const t0 = now();
      await ch.launchProgram(nopProg, { buffers: [] });
      b.push(us(now() - t0));
    }
  }
  const builtin = lat(a), program = lat(b);
  return { builtin, program, ratioP50: program.p50Us / builtin.p50Us, ratioMean: program.meanUs / builtin.meanUs };
}

async function best(body: () => Promise<unknown>): Promise<number> {
  let t = Infinity;
  for (let i = 0; i < REPS; i++) {
    const t0 = now();
    await body();
    t = Math.min(t, Number(now() - t0) / 1e6);
  }
  return t;
}

async function main(): Promise<void> {
  // Before the device opens (Mesa reads it then): see firstLaunch above.
  const ownCache = !process.env.MESA_SHADER_CACHE_DIR && !process.env.MESA_SHADER_CACHE_DISABLE;
  if (ownCache) process.env.MESA_SHADER_CACHE_DIR = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-bench-mesa-'));
  process.on('exit', () => { if (ownCache) fs.rmSync(process.env.MESA_SHADER_CACHE_DIR!, { recursive: true, force: true }); });
  const backend = VulkanBackend.open(process.env.VUGPU_VULKAN_DEVICE);
  const device = backend.device;
  console.log(`program device: ${device}`);
  const nopSpv = spv('native/shaders/builtins/nop.spv');
  const result: Record<string, unknown> = {
    date: new Date().toISOString(), device, driver: backend.driver, limits: backend.limits,
    host: { cpu: os.cpus()[0]?.model, cpus: os.cpus().length, loadAvgAtStart: os.loadavg() },
    mesaShaderCache: process.env.MESA_SHADER_CACHE_DISABLE ? `disabled (${process.env.MESA_SHADER_CACHE_DISABLE})` : ownCache ? 'fresh directory of this run' : process.env.MESA_SHADER_CACHE_DIR,
    warmUp: backend.deviceInfo.warmUp,
    nopWarmMs: NOP_WARM_MS, completionPollUs: backend.completionPollUs,
  };

  // ---- NOP latency per mode ----
  const modes: Record<string, unknown> = {};
  {
    const engine = new Engine({ vramSize: 256 << 20, channels: 8, programs: backend });
    const drv = new HostDriver(engine);
    const ch = drv.createChannel();
    modes.bare = await nopLatency(ch, drv.programBuffer(ch.vm, nopSpv));
    engine.close();
  }
  for (const mode of ['fv', 'pv-batch'] as const) {
    const h = host({ vramSize: 256 << 20, channels: 16, programs: backend });
    const g = guest(h.agg, { name: 'a', mode, slice: 64 << 20 });
    modes[mode] = await nopLatency(g.ch, g.drv.programBuffer(g.gvm, nopSpv));
    g.close();
    h.close();
  }
  result.nop = modes;
  result.nopStages = await nopStages(backend, nopSpv);
  // The same comparison with the built-ins on the program device too (`serve --engine vulkan`):
  // both launches then pay the device's own dispatch, and the ratio is the program path's cost.
  {
    const engine = new Engine({ vramSize: 256 << 20, channels: 8, programs: backend, builtinsOnPrograms: true });
    const drv = new HostDriver(engine);
    const ch = drv.createChannel();
    result.nopSameDevice = { what: 'bare engine, built-ins as SPIR-V on the program device (serve --engine vulkan)', ...await nopLatency(ch, drv.programBuffer(ch.vm, nopSpv)) };
    engine.close();
  }
  result.flood = await floodLatency(backend, nopSpv);

  // ---- vector add and SGEMM: programs vs built-ins, same inputs ----
  const engine = new Engine({ vramSize: 512 << 20, channels: 8, programs: backend });
  const drv = new HostDriver(engine);
  const ch = drv.createChannel();
  const vm = ch.vm;
  {
    const bytes = VEC * 4;
    const [a, b, c1, c2] = [0, 1, 2, 3].map(() => drv.vramBuffer(vm, bytes, { large: true }));
    const fa = new Float32Array(a!.u8.buffer, a!.u8.byteOffset, VEC), fb = new Float32Array(b!.u8.buffer, b!.u8.byteOffset, VEC);
    for (let i = 0; i < VEC; i++) { fa[i] = (i % 97) * 0.5; fb[i] = (i % 89) * 0.25; }
    const prog = drv.programBuffer(vm, spv('guest/programs/vecadd.spv'));
    const rows = Math.ceil(VEC / 1024);
    const runProg = () => ch.launchProgram(prog, {
      grid: [Math.ceil(VEC / 256), 1, 1], push: u32s(VEC),
      buffers: [{ va: a!.va, length: bytes, readOnly: true }, { va: b!.va, length: bytes, readOnly: true }, { va: c2!.va, length: bytes }],
    });
    const side = Math.round(Math.sqrt(VEC)); // FMADD adds n×n matrices (docs/kernels.md)
    if (side * side !== VEC) throw new Error('VUGPU_BENCH_VEC must be a square');
    const fmaddParams = u32s(side);
    const runBuiltin = () => ch.launch(K.FMADD, [{ va: a!.va, length: bytes }, { va: b!.va, length: bytes }, { va: c1!.va, length: bytes }], fmaddParams);
    await runProg();
    await runBuiltin();
    const builtinOk = true;
    let tp = Infinity, tb = Infinity;
    for (let r = 0; r < REPS; r++) {
      tp = Math.min(tp, await best(runProg));
      if (builtinOk) tb = Math.min(tb, await best(runBuiltin));
    }
    const f2 = new Float32Array(c2!.u8.buffer, c2!.u8.byteOffset, VEC);
    for (const i of [0, 7, VEC - 1]) if (f2[i] !== fa[i]! + fb[i]!) throw new Error(`vecadd mismatch at ${i}`);
    result.vecadd = { n: VEC, rows, programMs: tp, builtinMs: builtinOk ? tb : null, programGBs: (3 * bytes) / tp / 1e6, ratio: builtinOk ? tp / tb : null };
  }
  {
    const n = SG, bytes = 4 * n * n;
    const [a, b, c1, c2] = [0, 1, 2, 3].map(() => drv.vramBuffer(vm, bytes, { large: true }));
    const fa = new Float32Array(a!.u8.buffer, a!.u8.byteOffset, n * n), fb = new Float32Array(b!.u8.buffer, b!.u8.byteOffset, n * n);
    for (let i = 0; i < n * n; i++) { fa[i] = ((i * 7) % 13) / 13 - 0.5; fb[i] = ((i * 5) % 11) / 11 - 0.5; }
    const sgemm = spv('guest/programs/sgemm.spv');
    const prog = drv.programBuffer(vm, sgemm);
    const launch = (p: ProgramModule) => ch.launchProgram(p, {
      grid: [Math.ceil(n / 16), Math.ceil(n / 16), 1], push: u32s(n, n, n),
      buffers: [{ va: a!.va, length: bytes, readOnly: true }, { va: b!.va, length: bytes, readOnly: true }, { va: c2!.va, length: bytes }],
    });
    const builtin = () => ch.launch(K.FMMUL, [{ va: a!.va, length: bytes }, { va: b!.va, length: bytes }, { va: c1!.va, length: bytes }], u32s(n));
    await launch(prog);
    await builtin();
    let tp = Infinity, tb = Infinity;
    for (let r = 0; r < REPS; r++) {
      tp = Math.min(tp, await best(() => launch(prog)));
      tb = Math.min(tb, await best(builtin));
    }
    const c = new Float32Array(c2!.u8.buffer, c2!.u8.byteOffset, n * n), ref = new Float32Array(c1!.u8.buffer, c1!.u8.byteOffset, n * n);
    for (const i of [0, n + 3, n * n - 1]) if (Math.abs(c[i]! - ref[i]!) > 1e-3 * (1 + Math.abs(ref[i]!))) throw new Error(`sgemm mismatch at ${i}: ${c[i]} vs ${ref[i]}`);
    const flop = 2 * n ** 3;
    result.sgemm = { n, programMs: tp, builtinMs: tb, programGflops: flop / tp / 1e6, builtinGflops: flop / tb / 1e6, ratio: tp / tb };

    // ---- the rewrite's cost: the same modules raw and rewritten, one Vulkan path ----
    const cases = rewriteCost(repoRoot, backend.limits, { n: SG, rounds: REWRITE_ROUNDS, reps: 3 });
    // On a GPU a 256³ SGEMM is a ~12 µs kernel, where the rewrite's fixed code at entry and exit
    // weighs most; the same cases at REWRITE_LARGE³ are the cost on work the size of a GEMM
    // people run there (both kept: the small one is the size lavapipe can run).
    if (backend.deviceInfo.type !== 'cpu' && REWRITE_LARGE > SG)
      cases.push(...rewriteCost(repoRoot, backend.limits, { n: REWRITE_LARGE, rounds: REWRITE_ROUNDS, reps: 3 }));
    result.rewrite = {
      what: 'dispatch time of the module as the engine hands it to the driver (loop rewrite for this device + index clamps) / the raw module; vulkanDirectRun, modules alternated repetition by repetition, fastest of each call, median of per-round ratios',
      goal: 1.03, loopLimit: backend.limits.loopLimit, cases,
    };

    // ---- first launch of a new module (validate, rewrite, driver compile, warm-up) vs a cache
    // hit: a NOP-sized module and the SGEMM sample, each new to the driver (see the top) ----
    const firstLaunch: Record<string, unknown> = {
      what: 'nop: a one-store shader made new by its constant; sgemm: the guest sample made new by a never-taken branch on a constant',
    };
    const marker = markerModules();
    const sgemmNew = sgemmModules();
    const scratch = drv.vramBuffer(vm, 4096);
    for (const [name, make, run] of [
      ['nop', marker, (p: ProgramModule) => ch.launchProgram(p, { buffers: [{ va: scratch.va, length: 4096 }] })],
      ['sgemm', sgemmNew, launch],
    ] as const) {
      const first: number[] = [], hit: number[] = [], extra: number[] = [];
      for (let i = 0; i < 8; i++) {
        const p = drv.programBuffer(vm, make(runSeed + 0x100 + i)); // new to the driver
        let t0 = now();
        await run(p);
        const f = Number(now() - t0) / 1e6;
        // A hit: the median of the next three launches (the first after a compile is often
        // slower on lavapipe).
        const h: number[] = [];
        for (let j = 0; j < 3; j++) {
          t0 = now();
          await run(p);
          h.push(Number(now() - t0) / 1e6);
        }
        first.push(f);
        hit.push(median(h));
        extra.push(f - median(h));
        drv.freeVram(p.buffer.addr, p.buffer.size);
      }
      // For SGEMM the dispatch (tens of ms, noisy) dominates both: compileMs, the per-sample
      // difference, is the number to read.
      firstLaunch[name] = { newModuleMs: median(first), cacheHitMs: median(hit), compileMs: median(extra), samples: { first, hit } };
    }
    result.firstLaunch = firstLaunch;
  }
  engine.close();
  backend.close();

  const file = writeBenchResult('programs', resultDevice(device), result);
  fs.writeFileSync(benchFile('programs', resultDevice(device), undefined, 'svg'), svg(result));
  const n = result.nop as Record<string, { builtin: Lat; program: Lat; ratioP50: number }>;
  console.log(textTable(['what', 'program', 'built-in', 'ratio'], [
    ...Object.entries(n).map(([m, v]) => [`NOP p50 µs (${m})`, v.program.p50Us.toFixed(1), v.builtin.p50Us.toFixed(1), `${v.ratioP50.toFixed(2)}×`]),
    ...(() => {
      const st = result.nopStages as Record<string, { p50Us: number; switchesPerLaunch: number }>;
      const sd = result.nopSameDevice as { builtin: Lat; program: Lat; ratioP50: number };
      return [['NOP p50 µs, built-ins on the device too', sd.program.p50Us.toFixed(1), sd.builtin.p50Us.toFixed(1), `${sd.ratioP50.toFixed(2)}×`],
        ['NOP p50 µs, engine (bare)', st.program!.p50Us.toFixed(1), st.builtin!.p50Us.toFixed(1), `switches/launch ${st.program!.switchesPerLaunch.toFixed(1)} / ${st.builtin!.switchesPerLaunch.toFixed(1)}`],
        ['NOP p50 µs, native pool only', st.poolDispatch!.p50Us.toFixed(1), st.poolKernel!.p50Us.toFixed(1), `switches/launch ${st.poolDispatch!.switchesPerLaunch.toFixed(1)} / ${st.poolKernel!.switchesPerLaunch.toFixed(1)}`],
        ['NOP program dispatch µs (pool thread)', Object.entries((st.program as { dispatchPhasesMeanUs?: Record<string, number> }).dispatchPhasesMeanUs ?? {})
          .map(([k, v]) => `${k.replace(/Us$/, '')} ${v.toFixed(1)}`).join(', '), '', ''],
        ...(['poolDispatch', 'poolKernel'] as const).map((k) => {
          const x = st[k] as { poolPhasesMeanUs?: Record<string, number>; submitCallMeanUs?: number };
          return [`NOP ${k} µs (native pool)`, [['submit', x.submitCallMeanUs ?? 0], ...Object.entries(x.poolPhasesMeanUs ?? {})]
            .map(([a, v]) => `${String(a).replace(/Us$/, '')} ${(v as number).toFixed(1)}`).join(', '), '', ''];
        })];
    })(),
    ['vecadd ms', fmt((result.vecadd as { programMs: number }).programMs), fmt((result.vecadd as { builtinMs: number | null }).builtinMs), ''],
    ['canary NOP p50 µs, flood/solo', ((result.flood as { canaryDuringFlood: Lat }).canaryDuringFlood.p50Us).toFixed(1), ((result.flood as { canarySolo: Lat }).canarySolo.p50Us).toFixed(1), `${(result.flood as { ratioP50: number }).ratioP50.toFixed(2)}×`],
    ['sgemm ms', fmt((result.sgemm as { programMs: number }).programMs), fmt((result.sgemm as { builtinMs: number }).builtinMs), ''],
    ...((result.rewrite as { cases: RewriteCase[] }).cases.map((c) => [`${c.module} ${c.n}³ ms, rewritten/raw`, fmt(c.rewrittenMs), fmt(c.rawMs), `${c.ratio.toFixed(3)}× (best/best ${c.ratioBest.toFixed(3)}×; early load ${c.earlyLoadRatio.toFixed(3)}×)`])),
    ...Object.entries(result.firstLaunch as Record<string, { newModuleMs: number; cacheHitMs: number; compileMs: number }>)
      .filter(([, v]) => typeof v === 'object').map(([k, v]) => [`${k}: first launch / hit ms`, fmt(v.newModuleMs), fmt(v.cacheHitMs), `+${fmt(v.compileMs)} ms`]),
  ]));
  console.log(`wrote ${file}`);
}

/** Context switches of every thread of this process so far (voluntary + involuntary). */
function switches(): number {
  let n = 0;
  for (const t of fs.readdirSync('/proc/self/task')) {
    try {
      const st = fs.readFileSync(`/proc/self/task/${t}/status`, 'utf8');
      for (const m of st.matchAll(/^(?:non)?voluntary_ctxt_switches:\s+(\d+)/gm)) n += Number(m[1]);
    } catch { /* the thread ended */ }
  }
  return n;
}

/**
 * Where the NOP program's extra latency goes (bare engine, separate from the measurement above,
 * which it does not change): the same two launches through the engine, and the same two jobs
 * handed straight to the native pool (no engine, no channel: jobPool.submitKernel /
 * submitDispatch with the engine's watchdog), interleaved in blocks. pool dispatch − pool kernel
 * is what the Vulkan device adds to a launch (lavapipe: its submit thread, its compute threads,
 * the fence); engine − pool is the engine's own path. Context switches per launch count every
 * thread of the process (Linux /proc), the hand-offs each path makes.
 */
async function nopStages(backend: VulkanBackend, nopSpv: Uint8Array): Promise<unknown> {
  const engine = new Engine({ vramSize: 64 << 20, channels: 8, programs: backend });
  const drv = new HostDriver(engine);
  const ch = drv.createChannel();
  const prog = drv.programBuffer(ch.vm, nopSpv);
  const cache = engine.programs!;
  const owner = 0x7fff_0001; // a cache owner of its own for the pool-level dispatches
  const slot = await new Promise<number>((resolve, reject) => {
    const w = new Uint32Array(nopSpv.buffer.slice(nopSpv.byteOffset, nopSpv.byteOffset + nopSpv.byteLength));
    const p = cache.lookup(owner, 'bench-nop-stages', () => w, 0, new Uint32Array(0), (q) => (cache.ready(q) ? resolve(q.slot) : reject(new Error('NOP refused'))));
    if (cache.ready(p)) resolve(p.slot);
  });
  const wd = engine.watchdogMs;
  const none = new Uint8Array(0);
  // The pool paths also time the submit call itself (argument parsing in the addon).
  const submitNs: Record<string, number> = { poolKernel: 0, poolDispatch: 0 };
  const job = (k: string, submit: (done: () => void) => void) => () => new Promise<void>((resolve) => {
    const t = now();
    submit(resolve);
    submitNs[k]! += Number(now() - t);
  });
  const paths: Record<string, () => Promise<unknown>> = {
    builtin: () => ch.launch(K.NOP, []),
    program: () => ch.launchProgram(prog, { buffers: [] }),
    poolKernel: job('poolKernel', (done) => jobPool.submitKernel({ kernel: K.NOP, windows: [], lengths: [], params: none }, wd, done)),
    poolDispatch: job('poolDispatch', (done) => jobPool.submitDispatch({ slot, windows: [], lengths: [], params: none, grid: [1, 1, 1] }, wd, done)),
  };
  for (const f of Object.values(paths)) await f();
  const samples: Record<string, number[]> = {}, sw: Record<string, number> = {};
  // The pool thread's time per Vulkan dispatch by phase (vulkanStats().dispatchPhases), summed
  // over the blocks of each path that dispatches.
  type Phases = ReturnType<typeof native.vulkanStats>['dispatchPhases'];
  const phaseSum: Record<string, Phases> = {};
  const zero = (): Phases => ({ dispatches: 0, setupNs: 0, recordNs: 0, queueSubmitNs: 0, waitNs: 0, finishNs: 0 });
  // The native pool's own phases per job (poolStats: queued, run, after, deliver), per path.
  type PoolPh = ReturnType<typeof native.poolStats>['cpu'];
  const poolSum: Record<string, PoolPh> = {};
  const pzero = (): PoolPh => ({ jobs: 0, queueNs: 0, runNs: 0, afterNs: 0, deliverNs: 0 });
  const both = (): PoolPh => { const st = native.poolStats(); const o = pzero(); for (const x of Object.keys(o) as (keyof PoolPh)[]) o[x] = st.cpu[x] + st.task[x]; return o; };
  for (const k of Object.keys(paths)) { samples[k] = []; sw[k] = 0; phaseSum[k] = zero(); poolSum[k] = pzero(); }
  for (let done = 0; done < NOPS; done += BLOCK) {
    for (const [k, f] of Object.entries(paths)) {
      const s0 = switches();
      const p0 = native.vulkanStats().dispatchPhases;
      const q0 = both();
      for (let i = 0; i < BLOCK; i++) {
        const t0 = now();
        await f();
        samples[k]!.push(us(now() - t0));
      }
      sw[k]! += switches() - s0;
      const p1 = native.vulkanStats().dispatchPhases;
      for (const x of Object.keys(p1) as (keyof Phases)[]) phaseSum[k]![x] += p1[x] - p0[x];
      const q1 = both();
      for (const x of Object.keys(q1) as (keyof PoolPh)[]) poolSum[k]![x] += q1[x] - q0[x];
    }
  }
  cache.dropOwner(owner);
  engine.close();
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(paths)) {
    const ph = phaseSum[k]!;
    const perDispatch = ph.dispatches > 0
      ? { setupUs: ph.setupNs / ph.dispatches / 1e3, recordUs: ph.recordNs / ph.dispatches / 1e3, queueSubmitUs: ph.queueSubmitNs / ph.dispatches / 1e3,
          waitUs: ph.waitNs / ph.dispatches / 1e3, finishUs: ph.finishNs / ph.dispatches / 1e3 }
      : undefined;
    const q = poolSum[k]!;
    const poolPhasesMeanUs = q.jobs > 0
      ? { queuedUs: q.queueNs / q.jobs / 1e3, runUs: q.runNs / q.jobs / 1e3, afterUs: q.afterNs / q.jobs / 1e3, deliverUs: q.deliverNs / q.jobs / 1e3 }
      : undefined;
    out[k] = {
      ...lat(samples[k]!), switchesPerLaunch: sw[k]! / samples[k]!.length, ...(perDispatch ? { dispatchPhasesMeanUs: perDispatch } : {}),
      ...(poolPhasesMeanUs ? { poolPhasesMeanUs } : {}), ...(k in submitNs ? { submitCallMeanUs: submitNs[k]! / 1e3 / samples[k]!.length } : {}),
    };
  }
  const p50 = (k: string) => quantile(samples[k]!, 0.5);
  return {
    what: 'NOP launch→fence p50 through the engine (builtin, program) and straight through the native pool (poolKernel, poolDispatch), bare engine, interleaved blocks; dispatchPhasesMeanUs: the pool thread\'s time per Vulkan dispatch (setup = lane, imports, staging, descriptors; record; vkQueueSubmit; wait for the fence; finish = timestamps, write-back); poolPhasesMeanUs: the native pool, per job (queued: submitted → a thread takes it; run; after: run end → handed to JS; deliver: → the JS callback); submitCallMeanUs: the submit call itself (pool paths)',
    ...out,
    deviceAddsUs: p50('poolDispatch') - p50('poolKernel'),
    engineBuiltinUs: p50('builtin') - p50('poolKernel'),
    engineProgramUs: p50('program') - p50('poolDispatch'),
    ratioP50: p50('program') / p50('builtin'),
  };
}

/**
 * A canary VM's launch latency (its NOP program, cached) alone and while another VM floods the
 * device with distinct modules (each a new compile), same run, alternating phases. Both VMs are
 * fv guests of one aggregator (in-process).
 */
async function floodLatency(backend: VulkanBackend, nopSpv: Uint8Array): Promise<unknown> {
  const h = host({ vramSize: 256 << 20, channels: 16, programs: backend });
  const canary = guest(h.agg, { name: 'canary', mode: 'fv', slice: 64 << 20 });
  const attacker = guest(h.agg, { name: 'attacker', mode: 'fv', slice: 64 << 20 });
  const prog = canary.drv.programBuffer(canary.gvm, nopSpv);
  await canary.ch.launchProgram(prog, { buffers: [] });
  const marker = markerModules();
  let flooding = false;
  let modules = 0;
  const flood = async (): Promise<void> => {
    while (flooding) {
      const m = attacker.drv.programBuffer(attacker.gvm, marker(runSeed + modules++)); // new to the driver too
      const buf = attacker.drv.vramBuffer(attacker.gvm, 4096);
      await attacker.ch.launchProgram(m, { grid: [1, 1, 1], buffers: [{ va: buf.va, length: 4096 }] }).catch(() => {});
      attacker.drv.freeVram(m.buffer.addr, m.buffer.size);
      attacker.drv.freeVram(buf.addr, buf.size);
    }
  };
  const solo: number[] = [], during: number[] = [];
  const sample = async (into: number[]) => {
    for (let i = 0; i < BLOCK; i++) {
      const t0 = now();
      await canary.ch.launchProgram(prog, { buffers: [] });
      into.push(us(now() - t0));
    }
  };
  for (let round = 0; round < Math.max(4, Math.floor(NOPS / BLOCK / 2)); round++) {
    await sample(solo);
    flooding = true;
    const f = flood();
    await sample(during);
    flooding = false;
    await f;
  }
  const cache = h.engine.programs!.ownerStats(attacker.vm.index + 1);
  canary.close();
  attacker.close();
  h.close();
  const s = lat(solo), d = lat(during);
  return { canarySolo: s, canaryDuringFlood: d, ratioP50: d.p50Us / s.p50Us, ratioMean: d.meanUs / s.meanUs, modulesCompiled: modules, attackerCache: cache };
}

function fmt(v: number | null): string {
  return v === null ? '—' : v.toFixed(2);
}

function svg(r: Record<string, unknown>): string {
  const n = r.nop as Record<string, { ratioP50: number }>;
  const bars: { label: string; v: number; goal: number | null }[] = [
    ...Object.entries(n).map(([m, v]) => ({ label: `NOP program/built-in, ${m}`, v: v.ratioP50, goal: 2 })),
  ];
  const va = r.vecadd as { ratio: number | null };
  if (va.ratio !== null) bars.push({ label: 'vecadd program/FMADD', v: va.ratio, goal: null });
  bars.push({ label: 'canary NOP, module flood/solo', v: (r.flood as { ratioP50: number }).ratioP50, goal: 1.1 });
  bars.push({ label: 'SGEMM program/FMMUL', v: (r.sgemm as { ratio: number }).ratio, goal: null });
  for (const c of (r.rewrite as { cases: RewriteCase[] }).cases) bars.push({ label: `${c.module.split(' ')[0]} ${c.n}³ rewritten/raw`, v: c.ratio, goal: 1.03 });
  const W = 620, bh = 24, x0 = 230, scale = 60;
  const items = bars.map((b, i) => {
    const y = 30 + i * (bh + 10);
    const wv = Math.max(1, Math.min(6, b.v) * scale);
    const ok = b.goal === null || b.v <= b.goal;
    return `<text x="${x0 - 8}" y="${y + 17}" text-anchor="end" font-size="12">${b.label}</text>` +
      `<rect x="${x0}" y="${y}" width="${wv.toFixed(1)}" height="${bh}" fill="${ok ? '#4c9a2a' : '#c0392b'}"/>` +
      (b.goal !== null ? `<line x1="${x0 + b.goal * scale}" x2="${x0 + b.goal * scale}" y1="${y - 3}" y2="${y + bh + 3}" stroke="#000" stroke-dasharray="3,2"/>` : '') +
      `<text x="${(x0 + wv + 6).toFixed(1)}" y="${y + 17}" font-size="12">${b.v.toFixed(2)}×</text>`;
  }).join('\n');
  const fl = (r.firstLaunch as Record<string, { newModuleMs: number; cacheHitMs: number; compileMs: number }>).nop!;
  const H = 80 + bars.length * (bh + 10);
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif">
<text x="10" y="18" font-size="13" font-weight="bold">vugpu programs on ${String(r.device)} (time ratios; dashed: goal)</text>
${items}
<line x1="${x0 + scale}" x2="${x0 + scale}" y1="25" y2="${H - 40}" stroke="#888"/><text x="${x0 + scale}" y="${H - 28}" font-size="11" text-anchor="middle">1.0×</text>
<text x="10" y="${H - 8}" font-size="12">NOP program: first launch of a new module ${fl.newModuleMs.toFixed(1)} ms (driver compile included), cache hit ${fl.cacheHitMs.toFixed(2)} ms</text>
</svg>
`;
}

await main();
