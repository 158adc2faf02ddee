// Policy behaviour over time, on the simulated non-preemptive device (virtual clock).
import { describe, expect, it } from 'vitest';
import { createPolicy, policyNames } from '../../src/aggregator/scheduler/registry.ts';
import type { PolicyName } from '../../src/aggregator/scheduler/registry.ts';
import type { CreditStateBase } from '../../src/aggregator/scheduler/credit-base.ts';
import { MS, S, Simulation, US, median, unfairness } from './scheduler-sim.ts';

function deviceShare(sim: Simulation, vm: string, other: string, t0: number, t1: number): number {
  const a = sim.deviceTime(vm, t0, t1);
  const b = sim.deviceTime(other, t0, t1);
  return a / (a + b);
}

describe('weights are respected', () => {
  it.each(['credit', 'band', 'weighted'] as const)('%s: 2:1 weights give ~2:1 device time', (name) => {
    const sim = new Simulation(createPolicy(name));
    // Both VMs always have work (two submissions outstanding), 1 ms kernels.
    sim.addVm('heavy', 2, { kernelNs: 1 * MS, thinkNs: 50 * US, depth: 2 });
    sim.addVm('light', 1, { kernelNs: 1 * MS, thinkNs: 50 * US, depth: 2 });
    sim.run(10 * S);
    const ratio = sim.deviceTime('heavy', 1 * S, 10 * S) / sim.deviceTime('light', 1 * S, 10 * S);
    console.log(`${name}: 2:1 weights → device time ratio ${ratio.toFixed(3)}`);
    expect(ratio).toBeGreaterThan(1.8);
    expect(ratio).toBeLessThan(2.2);
    // Work-conserving: the device never idles while work is queued.
    expect(sim.deviceTime('heavy', 0, 10 * S) + sim.deviceTime('light', 0, 10 * S)).toBeGreaterThan(0.99 * 10 * S);
  });

  it.each(['credit', 'band', 'weighted'] as const)('%s: equal weights equalise device time of 5 ms and 1 ms kernels', (name) => {
    const sim = new Simulation(createPolicy(name));
    sim.addVm('big', 1, { kernelNs: 5 * MS, thinkNs: 50 * US, depth: 2 });
    sim.addVm('small', 1, { kernelNs: 1 * MS, thinkNs: 50 * US, depth: 2 });
    sim.run(10 * S);
    const share = deviceShare(sim, 'big', 'small', 1 * S, 10 * S);
    expect(share).toBeGreaterThan(0.45);
    expect(share).toBeLessThan(0.55);
  });

  it('fifo (contrast): the same pair splits device time by kernel length, ~5:1', () => {
    const sim = new Simulation(createPolicy('fifo'));
    sim.addVm('big', 1, { kernelNs: 5 * MS, thinkNs: 50 * US, depth: 2 });
    sim.addVm('small', 1, { kernelNs: 1 * MS, thinkNs: 50 * US, depth: 2 });
    sim.run(10 * S);
    expect(deviceShare(sim, 'big', 'small', 1 * S, 10 * S)).toBeGreaterThan(0.8);
  });
});

describe('a VM alone is never throttled', () => {
  const cases: [string, PolicyName, object][] = [
    ...policyNames.map((n): [string, PolicyName, object] => [n, n, {}]),
    ['weighted (hard cap)', 'weighted', { workConserving: false }],
  ];
  it.each(cases)('%s', (_label, name, config) => {
    const sim = new Simulation(createPolicy(name, config));
    sim.addVm('solo', 1, { kernelNs: 1 * MS, thinkNs: 50 * US });
    sim.policy.addVm('sleeper', { weight: 10 }, 0); // registered, never rings
    sim.run(5 * S);
    // Every doorbell dispatched at once; the device is busy except for the guest's own gaps.
    expect(Math.max(...sim.waits.get('solo')!)).toBe(0);
    expect(sim.deviceTime('solo', 0, 5 * S) / (5 * S)).toBeCloseTo(1 / 1.05, 3);
  });

  it.each(cases)('%s: long kernels alone', (_label, name, config) => {
    const sim = new Simulation(createPolicy(name, config));
    sim.addVm('solo', 1, { kernelNs: 250 * MS, thinkNs: 50 * US });
    sim.run(5 * S);
    expect(Math.max(...sim.waits.get('solo')!)).toBe(0);
  });
});

describe('an idle VM cannot hoard credit', () => {
  it.each(['credit', 'band', 'weighted'] as const)('%s: a VM returning after 5 s idle gets its share, not a burst', (name) => {
    const policy = createPolicy(name);
    const sim = new Simulation(policy);
    sim.addVm('busy', 1, { kernelNs: 1 * MS, thinkNs: 50 * US, depth: 2 });
    sim.addVm('returner', 1, { kernelNs: 1 * MS, thinkNs: 50 * US, depth: 2, startNs: 5 * S });
    // Sample the returner's credit every 10 ms while it is idle and after it returns.
    let maxCredit = -Infinity;
    const sample = (t: number): void => {
      sim.at(t, () => {
        const st = policy.state() as unknown as CreditStateBase;
        if (st.params) maxCredit = Math.max(maxCredit, st.vms['returner']!.credit);
        if (t < 7 * S) sample(t + 10 * MS);
      });
    };
    sample(0);
    sim.run(7 * S);
    if (name !== 'weighted') {
      const st = policy.state() as unknown as CreditStateBase;
      expect(maxCredit).toBeLessThanOrEqual(st.params.capNs);
    }
    // After the return the busy VM keeps getting the device: no window of 100 ms in which the
    // returner takes more than 75 %, and the first second after the return is split evenly.
    for (let t = 5 * S; t < 6 * S; t += 100 * MS) {
      expect(deviceShare(sim, 'returner', 'busy', t, t + 100 * MS)).toBeLessThan(0.75);
    }
    const share = deviceShare(sim, 'returner', 'busy', 5 * S, 6 * S);
    expect(share).toBeGreaterThan(0.4);
    expect(share).toBeLessThan(0.6);
  });
});

describe('long idle gaps', () => {
  it.each(policyNames)('%s: an hour of idle time costs nothing and the next doorbell runs at once', (name) => {
    const sim = new Simulation(createPolicy(name));
    sim.addVm('a', 1, { kernelNs: 1 * MS, thinkNs: 50 * US, stopNs: 1 * MS });
    sim.addVm('b', 1, { kernelNs: 1 * MS, thinkNs: 50 * US, stopNs: 1 * MS });
    sim.at(3600 * S, () => {
      sim.setStop('a', 3600 * S + 2 * MS);
      sim.doorbell('a');
    });
    const t0 = performance.now();
    sim.run(3600 * S + 10 * MS);
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(sim.waits.get('a')!.at(-1)).toBe(0);
  });
});

describe('two VMs running loop kernels of 1 ms and 100 ms', () => {
  // AvA's metric: unfairness = |t1 − t2| / (t1 + t2) of the device time each VM used in a 1 s
  // window (0 = even split, 1 = one VM only). Share of the 1 ms VM = (1 − unfairness) / 2.
  // AvA measured a median of 2.4 % (WFQ + feedback control, real kernels of 1–100 ms).
  function simulate(name: PolicyName, config: object, thinkNs: number, seconds = 60) {
    const sim = new Simulation(createPolicy(name, config));
    sim.addVm('short', 1, { kernelNs: 1 * MS, thinkNs });
    sim.addVm('long', 1, { kernelNs: 100 * MS, thinkNs });
    sim.run(seconds * S);
    const u: number[] = [];
    const shortShares: number[] = [];
    for (let k = 1; k < seconds; k++) { // skip the first second (start-up)
      const a = sim.deviceTime('short', k * S, (k + 1) * S);
      const b = sim.deviceTime('long', k * S, (k + 1) * S);
      u.push(unfairness(a, b));
      shortShares.push(a / (a + b));
    }
    const busy = (sim.deviceTime('short', S, seconds * S) + sim.deviceTime('long', S, seconds * S)) / ((seconds - 1) * S);
    return { median: median(u), max: Math.max(...u), shortShare: median(shortShares), busy };
  }

  const rows: [string, PolicyName, object][] = [
    ['fifo', 'fifo', {}],
    ['credit', 'credit', {}],
    ['weighted', 'weighted', {}],
    ['weighted (hard cap)', 'weighted', { workConserving: false }],
    ['band, no yield window', 'band', { yieldNs: 0 }],
    ['band (Gdev surplus reset)', 'band', { surplus: 'reset' }],
    ['band', 'band', {}],
  ];

  it('BAND keeps the split near even; FIFO gives the 100 ms VM ~99 % (table in the output)', () => {
    const results: Record<string, ReturnType<typeof simulate>> = {};
    const lines = ['policy                       gap   median   max    1ms-VM share  device busy'];
    for (const thinkNs of [20 * US, 50 * US, 200 * US]) {
      for (const [label, name, config] of rows) {
        const r = simulate(name, config, thinkNs);
        results[`${label}@${thinkNs / US}`] = r;
        lines.push(
          `${label.padEnd(28)} ${String(thinkNs / US).padStart(3)}µs ${(r.median * 100).toFixed(1).padStart(5)}% ` +
            `${(r.max * 100).toFixed(1).padStart(5)}%   ${r.shortShare.toFixed(3).padStart(6)}        ${(r.busy * 100).toFixed(1)}%`,
        );
      }
    }
    console.log(`unfairness per 1 s window, 59 windows of a 60 s run (gap = guest doorbell latency)\n${lines.join('\n')}`);
    const band = results['band@50']!;
    expect(band.median).toBeLessThan(0.05);
    expect(results['band@20']!.median).toBeLessThan(0.03);
    expect(results['band@200']!.median).toBeLessThan(0.1);
    expect(results['band (Gdev surplus reset)@50']!.median).toBeLessThan(0.05);
    // Without the yield window the 100 ms VM wins every gap, as under FIFO.
    expect(results['band, no yield window@50']!.median).toBeGreaterThan(0.9);
    expect(results['fifo@50']!.median).toBeGreaterThan(0.9);
    expect(results['fifo@50']!.shortShare).toBeLessThan(0.02);
  });
});
