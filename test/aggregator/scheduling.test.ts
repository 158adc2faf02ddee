// The doorbell as the scheduling point, end to end: two backlogged VMs submit time-bounded LOOP
// kernels through their vGPUs; the dispatcher hands one submission at a time to the engine and
// charges the device ns of the channel-idle events. A weighted policy splits device time by
// weight, FIFO does not.
import { describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import { closedAfterEach, type Guest, type Host } from './harness.ts';
import { params } from '../gpu/helpers.ts';
import { Pushbuffer } from '../support/host-driver/pushbuf.ts';

const { host, guest } = closedAfterEach();
let h: Host | null = null;

/** Keep two channels of g busy with ~jobMs kernels until `until`. */
async function backlog(g: Guest, until: number, jobMs: number): Promise<number> {
  const second = g.drv.createChannel(g.gvm, { pushbufferSize: 64 << 10 });
  const out = g.vram(4096);
  let jobs = 0;
  const loop = async (ch: typeof second, off: number) => {
    while (Date.now() < until) {
      await ch.launch(K.LOOP, [{ va: out.va + off, length: 64 }], params(['u64', 0n], ['u64', BigInt(jobMs * 1e6)], ['u32', 1]));
      jobs++;
    }
  };
  await Promise.all([loop(g.ch, 0), loop(second, 64)]);
  return jobs;
}

async function split(policy: string, config: object, weights: [number, number]): Promise<{ ratio: number; jobs: [number, number]; overlap: boolean }> {
  h = host({}, { policy, policyConfig: config });
  const a = guest(h.agg, { name: 'a', mode: 'fv', slice: 16 << 20, weight: weights[0] });
  const b = guest(h.agg, { name: 'b', mode: 'fv', slice: 16 << 20, weight: weights[1] });
  // One submission on the device at a time: track overlap of the two VMs' dispatches.
  let overlap = false;
  const inFlight = () => (h!.engine.stats().jobsInFlight);
  const probe = setInterval(() => {
    if (inFlight() > 1) overlap = true;
  }, 1);
  // 2 s: the start's transient weighs half as much. On this 2-core host with one core busy
  // beside, weighted 2:1 measured 1.51–1.57 over 1 s and 1.64–1.70 over 2 s; the clean-clone CI
  // (QEMU guests beside) once measured 1.27 over 1 s.
  const until = Date.now() + 2000;
  const jobs = await Promise.all([backlog(a, until, 3), backlog(b, until, 3)]);
  clearInterval(probe);
  const ratio = a.vm.counters.deviceNs / b.vm.counters.deviceNs;
  return { ratio, jobs, overlap };
}

describe('scheduling through the doorbell', () => {
  it('weighted 2:1 gives the heavier VM about twice the device time; one job at a time', async () => {
    const r = await split('weighted', { sliceNs: 20e6, stagesPerPeriod: 5 }, [2, 1]);
    console.log(`weighted 2:1 → device-time ratio ${r.ratio.toFixed(2)}, jobs ${r.jobs.join('/')}`);
    // Loose bounds: the machine is shared (2 cores); FIFO's ~1.0 is well outside them.
    expect(r.ratio).toBeGreaterThan(1.3);
    expect(r.ratio).toBeLessThan(3);
    expect(r.overlap).toBe(false);
  });

  it('fifo ignores weights: about 1:1', async () => {
    const r = await split('fifo', {}, [2, 1]);
    console.log(`fifo (weights 2:1 ignored) → device-time ratio ${r.ratio.toFixed(2)}, jobs ${r.jobs.join('/')}`);
    expect(r.ratio).toBeGreaterThan(0.6);
    expect(r.ratio).toBeLessThan(1.6);
  });

  it('a channel blocked on a semaphore acquire frees the device and resumes when released', async () => {
    h = host();
    const a = guest(h.agg, { name: 'a', mode: 'fv', slice: 16 << 20 });
    const b = guest(h.agg, { name: 'b', mode: 'fv', slice: 16 << 20 });
    const waiter = a.ch;
    const releaser = a.drv.createChannel(a.gvm, { pushbufferSize: 64 << 10 });
    const sem = a.vram(4096);
    // The waiter blocks until the semaphore is 1, then signals its fence.
    waiter.submit(new Pushbuffer().semaphoreAcquire(sem.va, 1).words().slice());
    let released = false;
    const waited = waiter.fence().then(() => (released = true));
    // Meanwhile the device serves others: b's kernel and a's other channel.
    const out = b.vram(64);
    await b.ch.launch(K.LOOP, [{ va: out.va, length: 64 }], params(['u64', 1000n], ['u64', 0n], ['u32', 1]));
    await releaser.launch(K.NOP, []);
    expect(released).toBe(false);
    expect(h.agg.policy.running).toBe(null);
    releaser.submit(new Pushbuffer().semaphoreRelease({ va: sem.va, payload: 1 }).words().slice());
    await waited;
    expect(sem.u32[0]).toBe(1);
  });
});
