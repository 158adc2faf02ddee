// A tenant's hang is that tenant's alone (issue 34): two VMs (channels of two owners, as the
// aggregator sets them) on one engine whose built-ins and programs run on the Vulkan device
// (`--engine vulkan`; lavapipe here). VM a launches a program whose loop never ends — a
// `for(;;)` with `continue` and an atomicAdd on a binding, 256 workgroups — and VM b launches
// built-ins back to back the whole time, checking each result. The watchdog must stop a's launch
// (WATCHDOG on a's channel) and nothing of b's: every launch of b succeeds, is correct, and none
// waits anywhere near the watchdog period behind a's.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { Engine, type EngineOptions } from '../../src/gpu/engine.ts';
import { GpuError, HostDriver, type HostChannel, type ProgramModule, type VramBuffer } from '../support/host-driver/driver.ts';
import { VulkanBackend } from '../../src/gpu/vulkan.ts';
import { CHAN_ERR } from '../../src/gpu/spec.ts';
import { K } from '../../src/gpu/kernels.ts';
import { glsl, params } from './helpers.ts';

const haveBackend = typeof (native as { vulkanOpen?: unknown }).vulkanOpen === 'function';
let haveGlslang = true;
try {
  execFileSync('glslangValidator', ['--version'], { stdio: 'ignore' });
} catch {
  haveGlslang = false;
}

// The attacker's shape from issue 34.
const ENDLESS = `#version 450
  layout(local_size_x = 64) in;
  layout(set = 0, binding = 0) buffer B { uint n[]; };
  void main() {
    uint i = 0u;
    for (;;) {
      atomicAdd(n[0], 1u);
      i++;
      if ((i & 1u) == 0u) continue;
    }
  }`;

// The watchdog period: long enough that a neighbour stuck behind the attacker shows as a stall of
// about this length, short enough for a test. The neighbour's bound is a fraction of it that a
// loaded 2-core host meets while the attacker's program spins on every core it is given.
const WATCHDOG_MS = 3000;
const NEIGHBOUR_BOUND_MS = 1000;

/** VM a's endless program (the attacker's shape, 256 workgroups) on `counter`: its outcome (null
 * or the error) and the ms from the launch to its end (-1 until it ends). */
function launchEndless(a: HostChannel, endless: ProgramModule, counter: VramBuffer): { result: Promise<unknown>; ended: () => number } {
  const t0 = performance.now();
  let ended = -1;
  const result = a.launchProgram(endless, { grid: [256, 1, 1], buffers: [{ va: counter.va, length: 4096 }] }).then(
    () => null,
    (e: unknown) => e,
  ).finally(() => {
    ended = performance.now() - t0;
  });
  return { result, ended: () => ended };
}

/** An engine whose built-ins and programs run on the Vulkan device (`--engine vulkan`). */
function vulkanEngine(extra: Partial<EngineOptions> = {}): Engine {
  execFileSync('bash', [path.join(new URL('../../', import.meta.url).pathname, 'scripts/build-spirv.sh')], { stdio: 'inherit' });
  const programs = VulkanBackend.open(process.env.VUGPU_TEST_VULKAN_DEVICE || undefined);
  return new Engine({ vramSize: 64 << 20, channels: 8, programs, builtinsOnPrograms: true, watchdogMs: WATCHDOG_MS, ...extra });
}

describe.skipIf(!haveBackend || !haveGlslang)('an endless program of one VM beside another VM (Vulkan engine)', () => {
  let engine: Engine;
  let drv: HostDriver;
  beforeAll(() => {
    engine = vulkanEngine();
    drv = new HostDriver(engine);
  });
  afterAll(() => {
    drv?.close();
    engine?.close();
  });

  it("stops only the attacker's launch; the neighbour's launches all succeed, correct and never stuck behind it", async () => {
    const a = drv.createChannel();
    const b = drv.createChannel();
    engine.setChannelOwner(a.chid, 1);
    engine.setChannelOwner(b.chid, 2);
    const counter = drv.vramBuffer(a.vm, 4096);
    const words = 1024;
    const dst = drv.vramBuffer(b.vm, 4 * words);
    const dst32 = new Uint32Array(dst.u8.buffer, dst.u8.byteOffset, words);
    const memset = async (v: number) => {
      await b.launch(K.MEMSET, [{ va: dst.va, length: 4 * words }], params(['u32', v], ['u32', 0], ['u64', BigInt(words)]));
      for (let i = 0; i < words; i++) if (dst32[i] !== v) expect({ i, got: dst32[i], want: v }).toBeNull();
    };
    // Both VMs' programs compiled and warm before the clock starts.
    const endless = drv.programBuffer(a.vm, glsl(ENDLESS));
    await b.launch(K.NOP, []);
    await memset(1);

    const t0 = performance.now();
    const attack = launchEndless(a, endless, counter);
    const aResult = attack.result;
    // Let a's program start spinning (its compile is quick: JIT of a small module).
    await new Promise((r) => setTimeout(r, 200));
    const counterBefore = new Uint32Array(counter.u8.buffer, counter.u8.byteOffset, 1)[0]!;

    const times: number[] = [];
    const failures: string[] = [];
    let v = 2;
    // Until a's launch ends and a little after (the neighbour also runs once the attacker is gone).
    while (attack.ended() < 0 || performance.now() - t0 < attack.ended() + 200) {
      const s = performance.now();
      try {
        if (v % 2) await b.launch(K.NOP, []);
        else await memset(v);
      } catch (e) {
        failures.push(String(e));
        if (e instanceof GpuError) b.bind();
      }
      times.push(performance.now() - s);
      v++;
      if (performance.now() - t0 > 4 * WATCHDOG_MS) break;
    }
    const err = await aResult;
    const longest = Math.max(...times);
    const report = { launches: times.length, longestMs: Math.round(longest), attackerEndedMs: Math.round(attack.ended()), failures: failures.slice(0, 3) };
    // The attacker's program really ran (its atomicAdd counted) and was stopped by the watchdog.
    expect(counterBefore, JSON.stringify(report)).toBeGreaterThan(0);
    expect(err).toBeInstanceOf(GpuError);
    expect((err as GpuError).code, JSON.stringify(report)).toBe(CHAN_ERR.WATCHDOG);
    // The cancel word ends it promptly once the watchdog fires (not at the loop limiter's cut).
    expect(attack.ended(), JSON.stringify(report)).toBeLessThan(WATCHDOG_MS + NEIGHBOUR_BOUND_MS);
    expect(failures, JSON.stringify(report)).toEqual([]);
    expect(engine.channel(b.chid)?.error ?? 0).toBe(0);
    expect(longest, JSON.stringify(report)).toBeLessThan(NEIGHBOUR_BOUND_MS);
    expect(times.length).toBeGreaterThan(20);
    console.log('tenant isolation:', JSON.stringify(report));
  }, 6 * WATCHDOG_MS + 30_000);
});

// The CPU engine (built-ins as native kernels on the job pool): VM a keeps two channels busy with
// kernels that never end by themselves (LOOP of 2^62 passes, until the watchdog) — as many as the
// pool used to have threads for everyone. VM b's launches run on threads of its own way.
describe('endless kernels of one VM beside another VM (CPU engine)', () => {
  let engine: Engine;
  let drv: HostDriver;
  beforeAll(() => {
    engine = new Engine({ vramSize: 64 << 20, channels: 8, watchdogMs: WATCHDOG_MS });
    drv = new HostDriver(engine);
  });
  afterAll(() => {
    drv?.close();
    engine?.close();
  });

  it("the watchdog stops a's kernels; b's launches all succeed, correct and never stuck behind them", async () => {
    const a1 = drv.createChannel();
    const a2 = drv.createChannel(a1.vm);
    const b = drv.createChannel();
    for (const c of [a1, a2]) engine.setChannelOwner(c.chid, 1);
    engine.setChannelOwner(b.chid, 2);
    const words = 1024;
    const dst = drv.vramBuffer(b.vm, 4 * words);
    const dst32 = new Uint32Array(dst.u8.buffer, dst.u8.byteOffset, words);
    const memset = async (v: number) => {
      await b.launch(K.MEMSET, [{ va: dst.va, length: 4 * words }], params(['u32', v], ['u32', 0], ['u64', BigInt(words)]));
      for (let i = 0; i < words; i++) if (dst32[i] !== v) expect({ i, got: dst32[i], want: v }).toBeNull();
    };
    await memset(1);
    const outs = [drv.vramBuffer(a1.vm, 64), drv.vramBuffer(a1.vm, 64)];
    const t0 = performance.now();
    let aDone = 0;
    const aResults = [a1, a2].map((c, i) =>
      c.launch(K.LOOP, [{ va: outs[i]!.va, length: 64 }], params(['u64', 1n << 62n], ['u64', 0n], ['u32', 1])).then(
        () => null,
        (e: unknown) => e,
      ).finally(() => aDone++));
    await new Promise((r) => setTimeout(r, 100));
    const times: number[] = [];
    const failures: string[] = [];
    let v = 2;
    let aEnd = -1;
    while (aEnd < 0 || performance.now() - t0 < aEnd + 200) {
      const s = performance.now();
      try {
        if (v % 2) await b.launch(K.NOP, []);
        else await memset(v);
      } catch (e) {
        failures.push(String(e));
        if (e instanceof GpuError) b.bind();
      }
      times.push(performance.now() - s);
      v++;
      if (aEnd < 0 && aDone === 2) aEnd = performance.now() - t0;
      if (performance.now() - t0 > 4 * WATCHDOG_MS) break;
    }
    const errs = await Promise.all(aResults);
    const longest = Math.max(...times);
    const report = { launches: times.length, longestMs: Math.round(longest), attackerEndedMs: Math.round(aEnd), failures: failures.slice(0, 3) };
    for (const e of errs) expect((e as GpuError).code, JSON.stringify(report)).toBe(CHAN_ERR.WATCHDOG);
    expect(failures, JSON.stringify(report)).toEqual([]);
    expect(longest, JSON.stringify(report)).toBeLessThan(NEIGHBOUR_BOUND_MS);
    expect(times.length).toBeGreaterThan(20);
    console.log('tenant isolation (CPU engine):', JSON.stringify(report));
  }, 6 * WATCHDOG_MS + 30_000);
});

/** VM `ownerA` launches the endless program while VM `ownerB` launches NOPs back to back: the
 * program must be cut with CTXSW_TIMEOUT after its timeslice, long before the watchdog, and none
 * of b's launches fail or wait anywhere near it. */
async function cutWhileNeighbourWaits(engine: Engine, drv: HostDriver, ownerA: number, ownerB: number): Promise<void> {
  const a = drv.createChannel();
  const b = drv.createChannel();
  engine.setChannelOwner(a.chid, ownerA);
  engine.setChannelOwner(b.chid, ownerB);
  const counter = drv.vramBuffer(a.vm, 4096);
  const endless = drv.programBuffer(a.vm, glsl(ENDLESS));
  await b.launch(K.NOP, []);
  const cutsBefore = engine.cp.ctxsw!.cuts;
  const t0 = performance.now();
  const attack = launchEndless(a, endless, counter);
  const aResult = attack.result;
  const times: number[] = [];
  const failures: string[] = [];
  while (attack.ended() < 0 || performance.now() - t0 < attack.ended() + 100) {
    const s = performance.now();
    try {
      await b.launch(K.NOP, []);
    } catch (e) {
      failures.push(String(e));
      if (e instanceof GpuError) b.bind();
    }
    times.push(performance.now() - s);
    if (performance.now() - t0 > 2 * WATCHDOG_MS) break;
  }
  const err = await aResult;
  const report = { ownerA, ownerB, launches: times.length, longestMs: Math.round(Math.max(...times)), attackerEndedMs: Math.round(attack.ended()), failures: failures.slice(0, 3) };
  console.log('context switch:', JSON.stringify(report));
  expect((err as GpuError).code, JSON.stringify(report)).toBe(CHAN_ERR.CTXSW_TIMEOUT);
  expect(engine.cp.ctxsw!.cuts - cutsBefore).toBe(1);
  // Cut well before the watchdog: its timeslice after it started, plus its compile and the cut.
  expect(attack.ended(), JSON.stringify(report)).toBeLessThan(WATCHDOG_MS / 2);
  expect(failures, JSON.stringify(report)).toEqual([]);
  expect(Math.max(...times), JSON.stringify(report)).toBeLessThan(NEIGHBOUR_BOUND_MS);
  // The rebound channel runs again.
  a.bind();
  await a.launch(K.NOP, []);
}

// The engine's context switch (src/gpu/ctxsw.ts), which a GPU needs because its driver does not
// switch a program that never ends out for another context: forced on lavapipe here
// (timesliceAlways), where the device would time-slice the ways itself. With VM b waiting, VM a's
// endless program is cut after its timeslice with CTXSW_TIMEOUT — long before the watchdog — and
// b's launches never overlap it on the device; with nobody waiting the program runs on until the
// watchdog, as without the switch.
const TIMESLICE_MS = 20;
describe.skipIf(!haveBackend || !haveGlslang)("the engine's context switch (a GPU's, forced on lavapipe)", () => {
  let engine: Engine;
  let drv: HostDriver;
  beforeAll(() => {
    engine = vulkanEngine({ timesliceMs: TIMESLICE_MS, timesliceAlways: true });
    drv = new HostDriver(engine);
  });
  afterAll(() => {
    drv?.close();
    engine?.close();
  });

  it('cuts the endless program of VM a after its timeslice while VM b waits; b never fails', async () => {
    expect(engine.cp.ctxsw?.timesliceMs).toBe(TIMESLICE_MS);
    await cutWhileNeighbourWaits(engine, drv, 1, 2);
  }, 4 * WATCHDOG_MS + 30_000);

  it('lets the endless program run on until the watchdog while nobody waits', async () => {
    const a = drv.createChannel();
    engine.setChannelOwner(a.chid, 1);
    const counter = drv.vramBuffer(a.vm, 4096);
    const endless = drv.programBuffer(a.vm, glsl(ENDLESS));
    const cutsBefore = engine.cp.ctxsw!.cuts;
    const t0 = performance.now();
    const err = await a.launchProgram(endless, { grid: [256, 1, 1], buffers: [{ va: counter.va, length: 4096 }] }).then(() => null, (e: unknown) => e);
    const ms = performance.now() - t0;
    expect((err as GpuError).code).toBe(CHAN_ERR.WATCHDOG);
    expect(ms).toBeGreaterThanOrEqual(WATCHDOG_MS - 50);
    expect(engine.cp.ctxsw!.cuts).toBe(cutsBefore);
  }, 4 * WATCHDOG_MS + 30_000);
});

// Owners beyond a CPU device's ways share one (owner % ways: one lavapipe instance, whose threads
// an endless program holds). Without --timeslice-always the engine switches only between the
// owners of one way: VM a (owner 1) and VM b (owner 1 + ways) share way 1, so a's endless program
// is cut for b; owners on ways of their own (the first describe: owners 1 and 2) are not.
describe.skipIf(!haveBackend || !haveGlslang)("two VMs on one way of a CPU device (the engine's switch per way)", () => {
  let engine: Engine;
  let drv: HostDriver;
  let ways = 0;
  beforeAll(() => {
    engine = vulkanEngine({ timesliceMs: TIMESLICE_MS });
    drv = new HostDriver(engine);
    const backend = engine.programs?.backend as VulkanBackend | undefined;
    ways = backend?.timesliced ? backend.ways : 0;
  });
  afterAll(() => {
    drv?.close();
    engine?.close();
  });

  it("cuts the endless program of one VM while the other VM of its way waits; that VM never fails", async (ctx) => {
    if (ways === 0) ctx.skip(); // a GPU: the engine switches between all VMs (the describe above)
    expect(engine.cp.ctxsw?.wholeDevice).toBe(false);
    await cutWhileNeighbourWaits(engine, drv, 1, 1 + ways);
  }, 4 * WATCHDOG_MS + 30_000);
});
