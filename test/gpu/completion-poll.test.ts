// Completion polling (src/gpu/jobs.ts): with a poll budget the JS thread turns the loop while
// jobs run and stops when they are done or when the budget is spent; without one it never
// polls. Counted, not timed: which way each poll ended, never how fast it was.
import { afterEach, describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import { jobPool } from '../../src/gpu/jobs.ts';
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
