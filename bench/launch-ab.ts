// Launch-path A/B on a GPU host (bench/results/launch-ab/h200.json): completion polling (jobs.ts;
// 0 µs vs 1000) × command-buffer replay (native/src/vulkan/record.cc; on vs VUGPU_VK_NO_REPLAY=1),
// FMMUL 1024³ and 256³ through the engine on the program device, interleaved rounds, result checked.
//   node bench/launch-ab.ts   (prints one JSON line last)
import { Engine } from '../src/gpu/engine.ts';
import { HostDriver } from '../test/support/host-driver/driver.ts';
import { K } from '../src/gpu/kernels.ts';
import { VulkanBackend } from '../src/gpu/vulkan.ts';
import { jobPool } from '../src/gpu/jobs.ts';
import { native } from '../src/native.ts';
const now = () => process.hrtime.bigint();
const q = (a: number[], p: number) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(p * (s.length - 1))]!; };
const backend = VulkanBackend.open(process.env.VUGPU_VULKAN_DEVICE);
const out: Record<string, unknown> = { device: backend.device, defaultPollUs: backend.completionPollUs };
for (const n of [1024, 256]) {
  const bytes = 4 * n * n;
  const engine = new Engine({ vramSize: 256 << 20, channels: 8, programs: backend, builtinsOnPrograms: true, watchdogMs: 60000 });
  const drv = new HostDriver(engine);
  const ch = drv.createChannel();
  const bufs = [0, 1, 2].map(() => drv.vramBuffer(ch.vm, bytes, { large: true }));
  for (const b of bufs.slice(0, 2)) new Float32Array(b.u8.buffer, b.u8.byteOffset, n * n).fill(1);
  const B = bufs.map((b) => ({ va: b.va, length: bytes }));
  const p = new Uint8Array(new Uint32Array([n]).buffer);
  for (let i = 0; i < 10; i++) await ch.launch(K.FMMUL, B, p);
  const res: Record<string, number[]> = {};
  for (let r = 0; r < 8; r++) for (const poll of [0, 1000]) for (const replay of [true, false]) {
    const key = `poll${poll}-${replay ? 'replay' : 'record'}`; res[key] ??= [];
    jobPool.setCompletionPoll(engine, poll);
    if (replay) delete process.env.VUGPU_VK_NO_REPLAY; else process.env.VUGPU_VK_NO_REPLAY = '1';
    native.vulkanReadTuning();  // launches read the knobs parsed at open, or parsed again here
    await ch.launch(K.FMMUL, B, p);
    for (let i = 0; i < 20; i++) { const t0 = now(); await ch.launch(K.FMMUL, B, p); res[key]!.push(Number(now() - t0) / 1e3); }
  }
  delete process.env.VUGPU_VK_NO_REPLAY;
  native.vulkanReadTuning();
  const c = new Float32Array(bufs[2]!.u8.buffer, bufs[2]!.u8.byteOffset, n * n);
  if (c[0] !== n || c[n * n - 1] !== n) throw new Error(`wrong result ${c[0]}`);
  const g: Record<string, unknown> = {};
  for (const k of Object.keys(res)) {
    g[k] = { p50: q(res[k]!, 0.5), best: Math.min(...res[k]!), p90: q(res[k]!, 0.9) };
    console.log(`FMMUL ${n} ${k}: p50 ${q(res[k]!, 0.5).toFixed(1)} best ${Math.min(...res[k]!).toFixed(1)} p90 ${q(res[k]!, 0.9).toFixed(1)} µs`);
  }
  out[`fmmul${n}`] = g;
  engine.close();
}
console.log(JSON.stringify(out));
