// Where a GEMM launch's time goes through the engine on the program device (a GPU host:
// bench/results/launch-path/h200.json), beside bench/vulkan-gemm-floor.c's figure for the same
// GEMM without vugpu. Per launch: `pre` (HostDriver.launch → the job pool's submitDispatch: host
// driver, pushbuffer, doorbell, command processor, MMU, windows, the plan), `native` (submitDispatch
// → its completion callback: the pool thread's dispatch — setup, vkQueueSubmit, the wait, finish —
// and the hand-offs), `post` (completion → the launch's promise: fence, interrupt, waiter); and the
// pool's and the dispatch's own phases. Variants in interleaved blocks: the default; the pool
// thread polling the fence for 2 ms before it sleeps (VUGPU_VK_SPIN_US, 100 by default); and C
// written by the host before every launch. FMMUL on all-ones operands, so every element of C
// must be n (checked after a launch over a zeroed C in every block, and after each launch of
// afterWrite).
//   node bench/launch-path.ts [--sizes 1024,2048] [--rounds 8] [--out FILE]
// (on a CPU device the sizes default to 128,256 so it runs anywhere)
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Engine } from '../src/gpu/engine.ts';
import { HostDriver } from '../test/support/host-driver/driver.ts';
import { jobPool } from '../src/gpu/jobs.ts';
import { K } from '../src/gpu/kernels.ts';
import { VulkanBackend } from '../src/gpu/vulkan.ts';
import { native } from '../src/native.ts';
import { benchFile, quantile, repoRoot, resultDevice, stamp } from './lib/common.ts';

const PER_BLOCK = 25;

/** A bad flag: one line and exit 2. */
class UsageError extends Error {}

function args() {
  let v;
  try {
    v = parseArgs({ options: { sizes: { type: 'string' }, rounds: { type: 'string', default: '8' }, out: { type: 'string' } } }).values;
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const rounds = Number(v.rounds);
  if (!Number.isInteger(rounds) || rounds < 1 || rounds > 100) throw new UsageError(`--rounds must be 1..100, got ${v.rounds}`);
  const sizes = v.sizes?.split(',').map(Number);
  if (sizes && !sizes.every((n) => Number.isInteger(n) && n >= 64 && n <= 8192 && n % 64 === 0)) throw new UsageError(`--sizes must be multiples of 64 in 64..8192, got ${v.sizes}`);
  return { sizes, rounds, out: v.out === undefined ? undefined : path.resolve(v.out) };
}

const mean = (x: number[]) => x.reduce((u, v) => u + v, 0) / x.length;

async function main(): Promise<void> {
  const a = args();
  const backend = VulkanBackend.open(process.env.VUGPU_VULKAN_DEVICE);
  const info = backend.deviceInfo;
  const sizes = a.sizes ?? (info.type === 'cpu' ? [128, 256] : [1024, 2048]);
  // The hand-off to the pool and back, timed at the seam the engine calls (jobs.ts).
  let tSubmit = 0n, tDone = 0n;
  const submit = jobPool.submitDispatch.bind(jobPool);
  jobPool.submitDispatch = (job, wd, done) => {
    tSubmit = process.hrtime.bigint();
    return submit(job, wd, (r) => {
      tDone = process.hrtime.bigint();
      done(r);
    });
  };
  // [name, VUGPU_VK_SPIN_US, write C from the host before each launch (as a guest writes its
  // buffers before it launches: the launch then starts with the host's caches cold)]
  const variants: [string, string, boolean][] = [['default', '100', false], ['spin2000', '2000', false], ['afterWrite', '100', true]];
  const result: Record<string, unknown> = { what: 'bench/launch-path.ts: FMMUL launch→fence through the engine, split at the job pool', date: new Date().toISOString(), device: info.name, driver: `${info.driver} ${info.driverInfo}`.trim(), memory: info.memory, perBlock: PER_BLOCK, rounds: a.rounds, sizes: {} as Record<string, unknown> };
  for (const n of sizes) {
    const bytes = 4 * n * n;
    const engine = new Engine({ vramSize: Math.ceil((3 * bytes + (64 << 20)) / (1 << 20)) * (1 << 20), channels: 8, programs: backend, builtinsOnPrograms: true, watchdogMs: 60_000 });
    const drv = new HostDriver(engine);
    const ch = drv.createChannel();
    const bufs = [0, 1, 2].map(() => drv.vramBuffer(ch.vm, bytes, { large: true }));
    for (const b of bufs.slice(0, 2)) new Float32Array(b.u8.buffer, b.u8.byteOffset, n * n).fill(1);
    const c = new Float32Array(bufs[2]!.u8.buffer, bufs[2]!.u8.byteOffset, n * n);
    const B = bufs.map((b) => ({ va: b.va, length: bytes }));
    const p = new Uint8Array(new Uint32Array([n]).buffer);
    for (let i = 0; i < 10; i++) await ch.launch(K.FMMUL, B, p);
    type Acc = { wall: number[]; pre: number[]; native: number[]; post: number[]; pool: Record<string, number>; dispatch: Record<string, number> };
    const acc = new Map<string, Acc>();
    for (let r = 0; r < a.rounds; r++) {
      for (const [name, spin, write] of variants) {
        process.env.VUGPU_VK_SPIN_US = spin;
        native.vulkanReadTuning();  // launches read the knobs parsed at open, or parsed again here
        let x = acc.get(name);
        if (!x) acc.set(name, (x = { wall: [], pre: [], native: [], post: [], pool: { queueNs: 0, runNs: 0, afterNs: 0, deliverNs: 0 }, dispatch: { setupNs: 0, recordNs: 0, queueSubmitNs: 0, waitNs: 0, finishNs: 0 } }));
        const check = () => {
          if (c[0] !== n || c[n * n - 1] !== n) throw new Error(`FMMUL ${n}³ gave C[0] = ${c[0]}, C[last] = ${c[n * n - 1]} (want ${n})`);
        };
        c.fill(0);
        await ch.launch(K.FMMUL, B, p);
        check();
        const s0 = native.poolStats().task, d0 = native.vulkanStats().dispatchPhases;
        for (let i = 0; i < PER_BLOCK; i++) {
          if (write) c.fill(0);
          const t0 = process.hrtime.bigint();
          await ch.launch(K.FMMUL, B, p);
          const t1 = process.hrtime.bigint();
          if (write) check();
          x.wall.push(Number(t1 - t0) / 1e3);
          x.pre.push(Number(tSubmit - t0) / 1e3);
          x.native.push(Number(tDone - tSubmit) / 1e3);
          x.post.push(Number(t1 - tDone) / 1e3);
        }
        check();
        const s1 = native.poolStats().task, d1 = native.vulkanStats().dispatchPhases;
        for (const k of Object.keys(x.pool)) x.pool[k]! += (s1[k as keyof typeof s1] - s0[k as keyof typeof s0]) / 1e3;
        for (const k of Object.keys(x.dispatch)) x.dispatch[k]! += (d1[k as keyof typeof d1] - d0[k as keyof typeof d0]) / 1e3;
      }
    }
    delete process.env.VUGPU_VK_SPIN_US;
    native.vulkanReadTuning();
    const rows: Record<string, unknown> = {};
    for (const [name, x] of acc) {
      const count = x.wall.length;
      const per = (o: Record<string, number>) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k.replace(/Ns$/, 'Us'), v / count]));
      rows[name] = {
        launches: count, wallBestUs: Math.min(...x.wall), wallP50Us: quantile(x.wall, 0.5), wallMeanUs: mean(x.wall),
        preP50Us: quantile(x.pre, 0.5), nativeP50Us: quantile(x.native, 0.5), postP50Us: quantile(x.post, 0.5),
        preMeanUs: mean(x.pre), nativeMeanUs: mean(x.native), postMeanUs: mean(x.post),
        poolMeanUs: per(x.pool), dispatchMeanUs: per(x.dispatch),
      };
      console.log(`FMMUL ${n}³ ${name}: launch p50 ${quantile(x.wall, 0.5).toFixed(1)} µs (best ${Math.min(...x.wall).toFixed(1)}) = pre ${quantile(x.pre, 0.5).toFixed(1)} + native ${quantile(x.native, 0.5).toFixed(1)} + post ${quantile(x.post, 0.5).toFixed(1)} (p50s); pool thread's wait ${(x.dispatch.waitNs! / count).toFixed(1)}, vkQueueSubmit ${(x.dispatch.queueSubmitNs! / count).toFixed(1)} µs mean`);
    }
    (result.sizes as Record<string, unknown>)[String(n)] = rows;
    engine.close();
  }
  backend.close();
  const device = resultDevice(info.name);
  const out = a.out ?? benchFile('launch-path', device);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, JSON.stringify({ stamp: stamp(device), ...result }, null, 1) + '\n');
  console.log(`wrote ${out}`);
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    console.error(`launch-path: ${(e as Error).message}`);
    process.exit(e instanceof UsageError ? 2 : 1);
  },
);
