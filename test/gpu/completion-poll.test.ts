// Completion polling (src/gpu/jobs.ts): with a poll budget the JS thread turns the loop while
// jobs run and stops when they are done or when the budget is spent; without one it never
// polls. Counted, not timed: which way each poll ended, never how fast it was.
import { afterEach, describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import { jobPool } from '../../src/gpu/jobs.ts';
import { readFileSync } from 'node:fs';
import { native } from '../../src/native.ts';
import { VulkanBackend } from '../../src/gpu/vulkan.ts';
import { params, rig, buf, type Rig } from './helpers.ts';

const loop = (targetMs: number) => params(['u64', 0n], ['u64', BigInt(targetMs * 1e6)], ['u32', 7]);

describe('completion polling', () => {
  let r: Rig | null = null;
  afterEach(() => {
    r?.close();
    r = null;
  });

  it('polls while a short job runs and stops when it completes', async () => {
    r = rig({ completionPollUs: 10_000_000 }); // a budget no NOP reaches
    expect(jobPool.completionPollUs).toBe(10_000_000);
    const c0 = { ...jobPool.pollCounts };
    for (let i = 0; i < 20; i++) await r.ch.launch(K.NOP, []);
    const c1 = jobPool.pollCounts;
    expect(c1.started - c0.started).toBeGreaterThanOrEqual(1);
    expect(c1.expired - c0.expired).toBe(0);
    // Every poll that began has ended by now (a completion left nothing in flight).
    await new Promise((res) => setImmediate(res));
    expect(c1.completed - c0.completed).toBe(c1.started - c0.started);
  });

  it('stops at its budget under a long job, and the job still completes', async () => {
    r = rig({ completionPollUs: 1000 });
    const out = r.vram(4096);
    const c0 = { ...jobPool.pollCounts };
    await r.ch.launch(K.LOOP, [buf(out)], loop(200)); // 200 ms ≫ 1 ms of polling
    const c1 = jobPool.pollCounts;
    expect(c1.expired - c0.expired).toBeGreaterThanOrEqual(1);
    expect(new DataView(out.u8.buffer, out.u8.byteOffset).getBigUint64(8, true)).toBeGreaterThanOrEqual(200_000_000n);
  });

  it('never polls without a budget, and an engine closed gives its wish back', async () => {
    r = rig({ completionPollUs: 500 });
    r.close();
    r = rig(); // no program device: no suggestion
    expect(r.engine.completionPollUs).toBe(0);
    expect(jobPool.completionPollUs).toBe(0);
    const c0 = { ...jobPool.pollCounts };
    for (let i = 0; i < 5; i++) await r.ch.launch(K.NOP, []);
    expect(jobPool.pollCounts.started).toBe(c0.started);
  });
});

// The pool's side of it (native/src/pool.cc, poolSetPoll): a pool thread that just ran a device
// task polls for the next job within the same budget, so the next launch wakes no thread.
const haveBackend = typeof (native as { vulkanOpen?: unknown }).vulkanOpen === 'function';

describe.skipIf(!haveBackend)('pool polling after device tasks', () => {
  let r: Rig | null = null;
  afterEach(() => {
    r?.close();
    r = null;
  });
  const nopModule = (rr: Rig) => rr.drv.programBuffer(rr.vm, new Uint8Array(readFileSync(new URL('../../build/spirv/native/shaders/builtins/nop.spv', import.meta.url))));
  const pool = () => jobPool.poolPollCounts;

  it('polls after program launches, finds back-to-back launches, and never polls after CPU kernels', async () => {
    r = rig({ programs: VulkanBackend.open(process.env.VUGPU_TEST_VULKAN_DEVICE || undefined), completionPollUs: 10_000 });
    const nop = nopModule(r);
    await r.ch.launchProgram(nop, { buffers: [] }); // compiled
    const p0 = pool();
    for (let i = 0; i < 20; i++) await r.ch.launchProgram(nop, { buffers: [] });
    const p1 = pool();
    // One poll after each device task; the next launch comes within the 10 ms budget (a JS
    // turn-around of ~0.1 ms; counted loosely, for a loaded host).
    expect(p1.hits + p1.misses - p0.hits - p0.misses).toBeGreaterThanOrEqual(19);
    expect(p1.hits - p0.hits).toBeGreaterThanOrEqual(10);
    await new Promise((res) => setTimeout(res, 30)); // the last poll ends at its budget
    const p2 = pool();
    for (let i = 0; i < 20; i++) await r.ch.launch(K.NOP, []);
    expect(pool()).toEqual(p2);
  });

  it('loses no job when launches of two channels meet a polling thread', async () => {
    r = rig({ programs: VulkanBackend.open(process.env.VUGPU_TEST_VULKAN_DEVICE || undefined), completionPollUs: 10_000 });
    const other = r.drv.createChannel(r.vm);
    const nop = nopModule(r);
    const out = r.vram(4096);
    for (let round = 0; round < 10; round++) {
      out.u32.fill(0);
      // Program launches on one channel while built-in copies and programs queue on the other:
      // each job enqueued while a thread polls must still run (a lost wake would hang here).
      await Promise.all([
        (async () => { for (let i = 0; i < 4; i++) await r!.ch.launchProgram(nop, { buffers: [] }); })(),
        (async () => { for (let i = 0; i < 4; i++) await other.launch(K.NOP, []); })(),
        other.launchProgram(nop, { buffers: [] }),
        r!.ch.launch(K.MEMSET, [buf(out)], params(['u32', round + 1], ['u32', 0], ['u64', 1024n])),
      ]);
      expect(out.u32[1023]).toBe(round + 1);
    }
  });
});
