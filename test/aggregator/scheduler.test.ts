// Unit tests of the scheduling policies, driven call by call with explicit times (ns).
import { describe, expect, it } from 'vitest';
import { BandPolicy } from '../../src/aggregator/scheduler/band.ts';
import { Dispatcher, nodeHost } from '../../src/aggregator/scheduler/dispatcher.ts';
import { CreditPolicy } from '../../src/aggregator/scheduler/credit.ts';
import { createPolicy, isPolicyName, policyNames, restorePolicy } from '../../src/aggregator/scheduler/registry.ts';
import type { SchedulerPolicy } from '../../src/aggregator/scheduler/types.ts';
import { isWait } from '../../src/aggregator/scheduler/types.ts';
import { WeightedPolicy } from '../../src/aggregator/scheduler/weighted.ts';
import { MS, S, US } from './scheduler-sim.ts';

/** Pick, assert a VM was chosen, run it for ns, complete. Returns the completion time. */
function runOne(p: SchedulerPolicy, now: number, ns: number, expected?: string): number {
  const pick = p.pickNext(now);
  expect(typeof pick).toBe('string');
  if (expected !== undefined) expect(pick).toBe(expected);
  p.onComplete(pick as string, ns, now + ns);
  return now + ns;
}

describe('registry', () => {
  it('builds every policy by name and rejects unknown names', () => {
    expect([...policyNames].sort()).toEqual(['band', 'credit', 'fair', 'fifo', 'weighted']);
    for (const name of policyNames) {
      expect(isPolicyName(name)).toBe(true);
      expect(createPolicy(name).name).toBe(name);
    }
    expect(isPolicyName('rr')).toBe(false);
    expect(() => createPolicy('rr')).toThrow(/unknown scheduler policy "rr".*fifo/);
    expect(() => createPolicy('band', { periodNs: -1 })).toThrow(RangeError);
    expect(() => createPolicy('band', { windowBuckets: 0 })).toThrow(RangeError);
    expect(() => createPolicy('weighted', { stagesPerPeriod: 0.5 })).toThrow(RangeError);
  });

  it.each(policyNames)('%s: validates input and keeps JSON-serializable state', (name) => {
    const p = createPolicy(name);
    expect(() => p.addVm('a', { weight: 0 }, 0)).toThrow(RangeError);
    expect(() => p.addVm('a', { weight: Number.NaN }, 0)).toThrow(RangeError);
    p.addVm('a', { weight: 1 }, 0);
    p.addVm('b', { weight: 3 }, 0);
    p.addVm('never', { weight: 2 }, 0); // registered, never rings
    expect(() => p.addVm('a', { weight: 1 }, 0)).toThrow(/already registered/);
    expect(() => p.enqueue('nope', 0)).toThrow(/unknown vm nope/);
    expect(() => p.enqueue('__proto__', 0)).toThrow(/unknown vm/);
    p.enqueue('a', 1 * US);
    p.enqueue('b', 2 * US);
    p.enqueue('b', 3 * US);
    expect(p.pending('b')).toBe(2);
    const first = p.pickNext(4 * US) as string;
    expect(p.running).toBe(first);
    expect(p.pickNext(5 * US)).toBeNull(); // busy: no second decision
    expect(() => p.onComplete(first === 'a' ? 'b' : 'a', 1, 6 * US)).toThrow(/not running|is running/);
    // A bad device time is not charged (no NaN); the time the submission held the device is.
    p.onComplete(first, Number.NaN, 1 * MS);
    const st = p.state();
    expect(st.policy).toBe(name);
    expect(JSON.parse(JSON.stringify(st))).toEqual(st);
    expect(JSON.stringify(st)).not.toContain('NaN');
    expect(st.vms[first]!.completed).toBe(1);
    expect(st.vms[first]!.deviceNs).toBe(1 * MS - 4 * US);
    // state() is a copy
    st.vms['a']!.pending = 99;
    expect(p.pending('a')).not.toBe(99);
  });

  it.each(policyNames)('%s: a restored state() snapshot continues exactly like the original', (name) => {
    const config = name === 'band' ? { periodNs: 7 * MS, yieldNs: 300 * US } : {};
    const p = createPolicy(name, config);
    p.addVm('a', { weight: 2 }, 0);
    p.addVm('b', { weight: 1 }, 0);
    // A deterministic mixed workload: kernels of varying length, b sometimes late.
    const step = (q: SchedulerPolicy, i: number, t: number): { t: number; pick: string } => {
      if (q.pending('a') === 0) q.enqueue('a', t);
      if (i % 3 !== 0 && q.pending('b') === 0) q.enqueue('b', t);
      let pick = q.pickNext(t);
      if (isWait(pick)) {
        t = pick.waitUntil;
        pick = q.pickNext(t);
      }
      if (typeof pick !== 'string') return { t: t + 100 * US, pick: String(pick) };
      const ns = ((i * 7919) % 13) * MS + 50 * US;
      q.onComplete(pick, ns, t + ns);
      return { t: t + ns + 20 * US, pick };
    };
    let t = 0;
    for (let i = 0; i < 200; i++) t = step(p, i, t).t;
    const snap = p.state();
    const q = restorePolicy(JSON.parse(JSON.stringify(snap)));
    expect(q.name).toBe(name);
    expect(q.state()).toEqual(snap);
    let tp = t;
    let tq = t;
    for (let i = 200; i < 400; i++) {
      const a = step(p, i, tp);
      const b = step(q, i, tq);
      expect(b.pick).toBe(a.pick);
      tp = a.t;
      tq = b.t;
    }
    expect(q.state()).toEqual(p.state());
    expect(() => createPolicy(name === 'fifo' ? 'band' : 'fifo').load(snap)).toThrow(/cannot load/);
  });

  it.each(policyNames)('%s: removing the running VM drops its pending work and accepts its completion', (name) => {
    const p = createPolicy(name);
    p.addVm('a', { weight: 1 }, 0);
    p.addVm('b', { weight: 1 }, 0);
    p.enqueue('a', 0);
    p.enqueue('a', 0);
    p.enqueue('b', 0);
    const first = p.pickNext(0) as string;
    const other = first === 'a' ? 'b' : 'a';
    p.removeVm(first, 10);
    expect(p.hasVm(first)).toBe(false);
    p.onComplete(first, 1 * MS, 1 * MS);
    expect(p.running).toBeNull();
    expect(p.pickNext(1 * MS)).toBe(other);
    p.onComplete(other, 1 * MS, 2 * MS);
    expect(p.pickNext(2 * MS)).toBeNull();
  });
});

describe('fifo', () => {
  it('runs submissions in arrival order across VMs', () => {
    const p = createPolicy('fifo');
    for (const vm of ['a', 'b', 'c']) p.addVm(vm, { weight: 1 }, 0);
    const arrivals = ['a', 'b', 'a', 'c', 'c', 'b', 'a'];
    arrivals.forEach((vm, i) => p.enqueue(vm, i));
    const order: string[] = [];
    let t = 100;
    for (;;) {
      const pick = p.pickNext(t);
      if (pick === null) break;
      order.push(pick as string);
      t += 1 * MS;
      p.onComplete(pick as string, 1 * MS, t);
    }
    expect(order).toEqual(arrivals);
  });
});

describe('credit', () => {
  it('keeps the first VM while its credit lasts, then moves it to the tail', () => {
    const p = new CreditPolicy({ periodNs: 10 * MS });
    p.addVm('a', { weight: 1 }, 0);
    p.addVm('b', { weight: 1 }, 0);
    for (let i = 0; i < 20; i++) {
      p.enqueue('a', 0);
      p.enqueue('b', 0);
    }
    // Period 10 ms, two active VMs: 5 ms of credit each per period. a goes first and keeps the
    // device until one submission drives its credit negative; then b takes over.
    let t = 0;
    const seq: string[] = [];
    for (let i = 0; i < 12; i++) {
      const pick = p.pickNext(t) as string;
      seq.push(pick);
      t += 2 * MS;
      p.onComplete(pick, 2 * MS, t);
    }
    expect(seq[0]).toBe('a');
    const switches = seq.filter((v, i) => i > 0 && v !== seq[i - 1]).length;
    expect(switches).toBeGreaterThanOrEqual(3);
    // Neither VM runs more than (cap + one period's allotment) / kernel = 4 in a row.
    let run = 1;
    for (let i = 1; i < seq.length; i++) {
      run = seq[i] === seq[i - 1] ? run + 1 : 1;
      expect(run).toBeLessThanOrEqual(4);
    }
    const st = p.state();
    expect(st.vms['a']!.credit).toBeLessThanOrEqual(st.params.capNs);
  });

  it('forgives debt beyond the limit and clamps or resets surplus per the configured rule', () => {
    for (const surplus of ['clamp', 'reset'] as const) {
      const p = new CreditPolicy({ periodNs: 10 * MS, surplus });
      p.addVm('a', { weight: 1 }, 0);
      p.addVm('b', { weight: 1 }, 0);
      p.enqueue('a', 0);
      p.enqueue('b', 0);
      // a runs a 100 ms kernel while b waits.
      expect(p.pickNext(0)).toBe('a');
      p.onComplete('a', 100 * MS, 100 * MS);
      const st = p.state();
      // Debt beyond 10 ms was forgiven at each period boundary, so a is within one period.
      expect(st.vms['a']!.credit).toBeGreaterThanOrEqual(-10 * MS);
      // b earned 5 ms per period for 10 periods: clamped to the cap, or reset to 0 (Gdev).
      if (surplus === 'clamp') expect(st.vms['b']!.credit).toBe(10 * MS);
      else expect(st.vms['b']!.credit).toBeLessThanOrEqual(10 * MS);
      expect(p.pickNext(100 * MS)).toBe('b');
    }
  });
});

describe('band', () => {
  /**
   * Two VMs where `hog` has just used far more than its share and `light` (a loop of 1 ms
   * kernels that rings again 50 µs after each completion) is under it; light just completed.
   */
  function contended(yieldNs?: number): { p: BandPolicy; t: number } {
    const p = new BandPolicy(yieldNs === undefined ? {} : { yieldNs });
    p.addVm('light', { weight: 1 }, 0);
    p.addVm('hog', { weight: 1 }, 0);
    p.enqueue('light', 0);
    p.enqueue('hog', 0);
    let t = runOne(p, 0, 1 * MS, 'light');
    p.enqueue('hog', t); // hog keeps a submission queued from now on
    expect(p.pickNext(t)).toBe('hog');
    p.enqueue('light', t + 50 * US);
    t += 100 * MS;
    p.onComplete('hog', 100 * MS, t);
    t = runOne(p, t, 1 * MS, 'light');
    return { p, t };
  }

  it('yield window: waits for the under-share VM that just completed, and it gets the device back', () => {
    const { p, t } = contended();
    expect(p.utilisation('hog', t)).toBeGreaterThan(p.share('hog', t));
    const pick = p.pickNext(t);
    expect(isWait(pick) && pick.waitUntil).toBe(t + 500 * US);
    // Still waiting a bit later; then light rings again within the window and is chosen.
    expect(p.pickNext(t + 100 * US)).toEqual({ waitUntil: t + 500 * US });
    p.enqueue('light', t + 200 * US);
    expect(p.pickNext(t + 200 * US)).toBe('light');
  });

  it('yield window: gives the device away when it expires, and only once per completion', () => {
    const { p, t } = contended();
    expect(p.pickNext(t)).toEqual({ waitUntil: t + 500 * US });
    expect(p.pickNext(t + 500 * US)).toBe('hog');
    p.onComplete('hog', 1 * MS, t + 1.5 * MS);
    // hog completed; hog is over its share, so no yield for it: light (pending) runs at once.
    p.enqueue('light', t + 1.5 * MS);
    expect(p.pickNext(t + 1.5 * MS)).toBe('light');
  });

  it('yield window length is configurable and 0 disables it', () => {
    const a = contended(2 * MS);
    expect(a.p.pickNext(a.t)).toEqual({ waitUntil: a.t + 2 * MS });
    const b = contended(0);
    expect(b.p.pickNext(b.t)).toBe('hog');
  });

  it('does not wait for a VM that is itself over its share', () => {
    const p = new BandPolicy();
    p.addVm('a', { weight: 1 }, 0);
    p.addVm('b', { weight: 1 }, 0);
    p.enqueue('a', 0);
    p.enqueue('b', 0);
    let t = runOne(p, 0, 50 * MS, 'a');
    t = runOne(p, t, 1 * MS, 'b');
    p.enqueue('a', t);
    // b completed under its share but a (the candidate) is over: yield for b…
    expect(isWait(p.pickNext(t))).toBe(true);
    t = runOne(p, t + 500 * US, 1 * MS, 'a');
    // …a completed over its share: b is pending and runs at once, no waiting for a.
    p.enqueue('b', t);
    expect(p.pickNext(t)).toBe('b');
  });

  it('never throttles a VM running alone, even after using far more than its weight', () => {
    const p = new BandPolicy();
    p.addVm('solo', { weight: 1 }, 0);
    p.addVm('idle', { weight: 100 }, 0); // registered but never rings
    let t = 0;
    for (let i = 0; i < 2000; i++) {
      p.enqueue('solo', t);
      const pick = p.pickNext(t);
      expect(pick).toBe('solo');
      t += 1 * MS;
      p.onComplete('solo', 1 * MS, t);
      t += 20 * US;
    }
    expect(p.share('solo', t)).toBe(1);
  });
});

describe('weighted (GVT-g time slices)', () => {
  it('allots 100 ms × weight/Σweight per stage, carries debt within the period, resets at period start', () => {
    const p = new WeightedPolicy();
    p.addVm('a', { weight: 3 }, 0);
    p.addVm('b', { weight: 1 }, 0);
    p.enqueue('a', 0);
    p.enqueue('b', 0);
    // First call fixes the clock origin; both active now.
    expect(p.pickNext(0)).toBe('a');
    // a runs a 350 ms kernel: provisional charges at each 100 ms stage boundary.
    p.onComplete('a', 350 * MS, 350 * MS);
    let st = p.state();
    expect(st.stage).toBe(3);
    // Allotments among the active VMs: 75 ms and 25 ms per stage.
    expect(st.vms['a']!.allottedNs).toBeCloseTo(75 * MS, 0);
    expect(st.vms['b']!.allottedNs).toBeCloseTo(25 * MS, 0);
    // a: 0 + 75×4 (stages 0..3) − 350 = −50 ms of debt carried within the period.
    expect(st.vms['a']!.leftNs).toBeCloseTo(-50 * MS, 0);
    // b has time left and pending work: it goes next even though a rang again.
    p.enqueue('a', 350 * MS);
    expect(p.pickNext(350 * MS)).toBe('b');
    p.onComplete('b', 1 * MS, 351 * MS);
    // At the period start (1 s) a's debt is dropped: left = allotted (the whole slice now: b
    // has been idle longer than the grace time, so a is the only active VM).
    p.replenish(1 * S);
    st = p.state();
    expect(st.stage).toBe(0);
    expect(st.vms['a']!.allottedNs).toBeCloseTo(100 * MS, 0);
    expect(st.vms['a']!.leftNs).toBe(st.vms['a']!.allottedNs);
  });

  it('picks in LRU order among VMs with time left', () => {
    const p = new WeightedPolicy();
    for (const vm of ['a', 'b', 'c']) p.addVm(vm, { weight: 1 }, 0);
    let t = 0;
    const seq: string[] = [];
    for (let i = 0; i < 6; i++) {
      for (const vm of ['a', 'b', 'c']) if (p.pending(vm) === 0) p.enqueue(vm, t);
      const pick = p.pickNext(t) as string;
      seq.push(pick);
      t += 100 * US;
      p.onComplete(pick, 100 * US, t);
    }
    expect(seq).toEqual(['a', 'b', 'c', 'a', 'b', 'c']);
  });

  it('hard cap (workConserving: false) waits for the next stage unless the VM is alone', () => {
    const p = new WeightedPolicy({ workConserving: false });
    p.addVm('a', { weight: 1 }, 0);
    p.addVm('b', { weight: 1 }, 0);
    p.enqueue('a', 0);
    p.enqueue('b', 0);
    expect(p.pickNext(0)).toBe('a'); // allotted 50 ms each
    p.onComplete('a', 60 * MS, 60 * MS); // a: 50 − 60 = −10
    p.enqueue('a', 60 * MS);
    expect(p.pickNext(60 * MS)).toBe('b');
    // b runs 60..120 ms; stage 1 at 100 ms adds 50 to both; b charged 60 in all.
    p.onComplete('b', 60 * MS, 120 * MS);
    p.enqueue('b', 120 * MS);
    let st = p.state();
    expect(st.vms['a']!.leftNs).toBeCloseTo(40 * MS, 0);
    expect(st.vms['b']!.leftNs).toBeCloseTo(40 * MS, 0);
    expect(p.pickNext(120 * MS)).toBe('a'); // LRU: a ran longer ago
    p.onComplete('a', 80 * MS, 200 * MS); // a: 40 − 80 + 50 (stage 2) = 10; b: 90
    expect(p.pickNext(200 * MS)).toBe('b');
    p.onComplete('b', 90 * MS, 290 * MS); // b: 90 − 90 = 0: out of time
    p.enqueue('b', 290 * MS);
    st = p.state();
    expect(st.vms['b']!.leftNs).toBeCloseTo(0, 0);
    // a (still active, 90 ms after its completion) has no work; b has no time: wait for stage 3.
    expect(p.pickNext(290 * MS)).toEqual({ waitUntil: 300 * MS });
    expect(p.pickNext(300 * MS)).toBe('b');
  });

  it('hard cap never holds back a VM that is alone, even in debt', () => {
    const p = new WeightedPolicy({ workConserving: false, activeGraceNs: 10 * MS });
    p.addVm('a', { weight: 1 }, 0);
    p.addVm('b', { weight: 1 }, 0);
    p.enqueue('a', 0);
    p.enqueue('b', 0);
    expect(p.pickNext(0)).toBe('a');
    p.onComplete('a', 80 * MS, 80 * MS); // a: 50 − 80 = −30
    p.enqueue('a', 80 * MS);
    expect(p.pickNext(80 * MS)).toBe('b');
    p.onComplete('b', 1 * MS, 81 * MS); // b stops ringing
    expect(p.state().vms['a']!.leftNs).toBeLessThan(0);
    expect(p.pickNext(81 * MS)).toEqual({ waitUntil: 100 * MS }); // b still active
    expect(p.pickNext(95 * MS)).toBe('a'); // b idle past the grace time: a is alone
  });
});

describe('dispatcher on Node timers', () => {
  function yieldingSetup(): { d: Dispatcher; submitted: string[] } {
    const p = new BandPolicy({ yieldNs: 3 * MS });
    const submitted: string[] = [];
    const d = new Dispatcher(p, nodeHost((vm) => submitted.push(vm)));
    p.addVm('light', { weight: 1 }, 0);
    p.addVm('hog', { weight: 1 }, 0);
    d.doorbell('light');
    d.doorbell('hog');
    d.doorbell('hog');
    expect(submitted).toEqual(['light']);
    d.complete('light', 1 * MS);
    expect(submitted).toEqual(['light', 'hog']);
    d.doorbell('light');
    expect(d.busy).toBe(true);
    d.complete('hog', 100 * MS); // reported device time: hog is now far over its share
    expect(submitted.at(-1)).toBe('light');
    d.complete('light', 1 * MS); // light is under its share: the device waits for it
    expect(d.busy).toBe(false);
    expect(submitted.at(-1)).toBe('light');
    return { d, submitted };
  }

  it('a yield wait ends by its timer and the device goes to the waiting VM', async () => {
    const { d, submitted } = yieldingSetup();
    await new Promise((r) => setTimeout(r, 30));
    expect(submitted.at(-1)).toBe('hog');
    expect(d.busy).toBe(true);
    d.close();
  });

  it('a doorbell during the yield wait takes the device at once', () => {
    const { d, submitted } = yieldingSetup();
    d.doorbell('light');
    expect(submitted.slice(-2)).toEqual(['light', 'light']);
    expect(d.busy).toBe(true);
    d.close();
  });
});
