// A real VK_ERROR_DEVICE_LOST under running work, on a GPU (npm run bench:device-lost): each
// round makes the GPU fault for real — a test-hook dispatch writes through a buffer reference
// to an address nothing maps (build/spirv/native/shaders/test/fault.spv; NVIDIA: Xid 31) — while
// one channel runs an endless LOOP, another has a burst of GEMMs queued and a third has a
// finished result. The engine has to find the loss on its own paths and recover: the checks of
// test/gpu/device-loss-scenario.ts (which CI runs on lavapipe with the loss simulated, since a
// CPU device cannot fault without crashing the process). Also times how soon the running launch
// fails and how soon a launch completes on the rebuilt device.
// Writes bench/results/device-lost/<device>.json; exits 1 if a round failed, 2 without a GPU.
//   node bench/device-lost.ts   env: VUGPU_BENCH_LOSS_ROUNDS (3), VUGPU_TEST_VULKAN_DEVICE (first GPU)
import fs from 'node:fs';
import path from 'node:path';
import { native } from '../src/native.ts';
import { VulkanBackend } from '../src/gpu/vulkan.ts';
import { rig } from '../test/gpu/helpers.ts';
import { lossRig, lossRound, refVsCpu, type LossRound } from '../test/gpu/device-loss-scenario.ts';
import { repoRoot, median, resultDevice, writeBenchResult } from './lib/common.ts';

process.env.VUGPU_TEST_HOOKS = '1';  // before the device opens: it enables buffer device address
const ROUNDS = Number(process.env.VUGPU_BENCH_LOSS_ROUNDS ?? 3);
const N = 256;

function fail(msg: string): never {
  console.error(`bench:device-lost: ${msg}`);
  process.exit(2);
}

const spvPath = path.join(repoRoot, 'build/spirv/native/shaders/test/fault.spv');
if (!fs.existsSync(spvPath)) fail(`${spvPath} is missing: run scripts/build-spirv.sh`);
const b = fs.readFileSync(spvPath);
const faultWords = new Uint32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));

let backend: VulkanBackend;
try {
  backend = VulkanBackend.open(process.env.VUGPU_TEST_VULKAN_DEVICE || undefined);
} catch (e) {
  fail(`no Vulkan device: ${(e as Error).message}`);
}
const info = backend.deviceInfo;
if (info.type === 'cpu' || !info.faultInjection)
  fail(`${info.name} cannot take a real fault (${info.type === 'cpu' ? 'a CPU device: the fault would be this process\'s own segfault' : 'no buffer device address'}); test/gpu/vulkan-device-memory.test.ts runs the same round with the loss simulated`);

const r = rig({ programs: backend, builtinsOnPrograms: true, vramSize: 256 << 20 });
const L = await lossRig(r, N);
{
  const bad = refVsCpu(L);  // the device's GEMM against the CPU's, once
  if (bad >= 0) fail(`the device's GEMM differs from the CPU's at element ${bad}`);
}

// Addresses in turn until one faults (the first is in the page no driver maps).
const addresses = [0x1000n, 0xdead_0000_0000n];
const lose = () => {
  let res = '';
  for (const a of addresses) if ((res = native.vulkanInjectFault(faultWords, a)) !== 'VK_SUCCESS') break;
  return res;
};

const rounds: LossRound[] = [];
for (let i = 0; i < ROUNDS; i++) {
  const res = await lossRound(L, lose);
  rounds.push(res);
  console.log(`round ${i + 1}: ${res.pass ? 'PASS' : 'FAIL'} lose=${res.lose} B failed after ${res.bFailedMs.toFixed(1)} ms, recovered after ${res.recoveredMs.toFixed(1)} ms; C ok ${res.c.ok} lost ${res.c.engineLost} other [${res.c.otherErrors}] wrong ${res.c.wrong}; ${res.lastLoss}${res.problems.length ? `; problems: ${res.problems.join('; ')}` : ''}`);
}
r.close();
backend.close();

const out = {
  date: new Date().toISOString(),
  device: info.name,
  driver: `${info.driver} ${info.driverInfo}`.trim(),
  what: `A real device loss per round (a GPU page fault injected by the test hook) under three channels' work: A finished a ${N}³ FMMUL, B runs an endless LOOP, C has ${16} FMMULs queued. Checks (test/gpu/device-loss-scenario.ts): B fails ENGINE_LOST, A's result stays, each of C's launches finishes with the reference bits or fails with a channel error, one loss and one rebuild counted (the log line is printed with the count), and A, B, C run again on the rebuilt device with the same bits. bFailedMs: the injection's return → B's failure; recoveredMs: the injection's return → A's next GEMM done (device rebuilt, FMMUL recompiled).`,
  deviceFault: info.deviceFault,
  allPass: rounds.every((x) => x.pass),
  bFailedMsMedian: median(rounds.map((x) => x.bFailedMs)),
  recoveredMsMedian: median(rounds.map((x) => x.recoveredMs)),
  rounds,
};
console.log(`wrote ${writeBenchResult('device-lost', resultDevice(info.name), out)}; all pass: ${out.allPass}`);
process.exit(out.allPass ? 0 : 1);
