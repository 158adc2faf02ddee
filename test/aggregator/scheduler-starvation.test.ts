// No policy starves a VM (issue 34): a VM of tiny launches resubmitted at once beside a VM of
// long jobs (a copy-bound and a compute-bound neighbour), equal weights, on the simulated
// device. Device time is the time a VM's submissions held the device (dispatch to completion),
// which is what its neighbour waits for; a tiny launch holds it far longer than the engine's
// job runs, so the flood's engine-reported ns is a small part of its hold (`reportedNs`).
// Each policy is held to what `--policy`'s help says it promises (POLICY_SHARES).
import { describe, expect, it } from 'vitest';
import { POLICY_SHARES, createPolicy, policyNames } from '../../src/aggregator/scheduler/registry.ts';
import type { PolicyName } from '../../src/aggregator/scheduler/registry.ts';
import { MS, S, Simulation, US, median } from './scheduler-sim.ts';

const SECONDS = 10;

/** NOPs back to back: each holds the device 30 µs, the engine reports 1 µs, 10 µs to the next doorbell. */
function flood(depth: number, thinkNs = 10 * US) {
  return { kernelNs: 30 * US, reportedNs: 1 * US, thinkNs, depth };
}

const NEIGHBOURS = {
  copy: { kernelNs: 5 * MS, thinkNs: 20 * US }, // a 64 MiB device-to-device copy at ~12 GB/s
  compute: { kernelNs: 50 * MS, thinkNs: 20 * US },
} as const;

interface Shares {
  flood: number[];
  neighbour: number[];
  /** The neighbour's device time per window over the window's length. */
  neighbourBusy: number[];
}

function run(policy: PolicyName, f: ReturnType<typeof flood>, neighbour: keyof typeof NEIGHBOURS): Shares {
  const sim = new Simulation(createPolicy(policy));
  sim.addVm('flood', 1, f);
  sim.addVm('neighbour', 1, NEIGHBOURS[neighbour]);
  sim.run(SECONDS * S);
  const out: Shares = { flood: [], neighbour: [], neighbourBusy: [] };
  for (let k = 1; k < SECONDS; k++) { // the first second is start-up
    const a = sim.deviceTime('flood', k * S, (k + 1) * S);
    const b = sim.deviceTime('neighbour', k * S, (k + 1) * S);
    out.flood.push(a / (a + b));
    out.neighbour.push(b / (a + b));
    out.neighbourBusy.push(b / S);
  }
  return out;
}

const fmt = (xs: number[]) => `min ${Math.min(...xs).toFixed(3)} median ${median(xs).toFixed(3)}`;

describe('a tiny-launch flood beside a long-job neighbour: device-time shares per 1 s window', () => {
  // Policies that promise every busy VM its share: both VMs ≥ 40 % in every window, whether the
  // flood waits for each launch (depth 1) or keeps one queued (depth 2).
  const sharing: PolicyName[] = ['band', 'fair'];
  // Work-conserving policies: they share only among VMs that keep work queued.
  const queuedOnly: PolicyName[] = ['credit', 'weighted'];

  it('every policy the CLI offers is covered here and in --policy\'s help', () => {
    expect([...sharing, ...queuedOnly, 'fifo'].sort()).toEqual([...policyNames].sort());
    for (const p of policyNames) expect(POLICY_SHARES).toContain(p);
  });

  for (const neighbour of Object.keys(NEIGHBOURS) as (keyof typeof NEIGHBOURS)[]) {
    it.each(sharing)(`%s: flood and ${neighbour}-bound neighbour each get ≥ 40 %`, (policy) => {
      for (const depth of [1, 2]) {
        const r = run(policy, flood(depth), neighbour);
        console.log(`${policy} depth ${depth} vs ${neighbour}: flood ${fmt(r.flood)}, neighbour ${fmt(r.neighbour)}`);
        expect(Math.min(...r.flood)).toBeGreaterThanOrEqual(0.4);
        expect(Math.min(...r.neighbour)).toBeGreaterThanOrEqual(0.4);
      }
    });

    it.each(queuedOnly)(`%s: ≥ 40 % each when the flood keeps work queued; the ${neighbour}-bound neighbour never starves`, (policy) => {
      const queued = run(policy, flood(2), neighbour);
      console.log(`${policy} depth 2 vs ${neighbour}: flood ${fmt(queued.flood)}, neighbour ${fmt(queued.neighbour)}`);
      expect(Math.min(...queued.flood)).toBeGreaterThanOrEqual(0.4);
      expect(Math.min(...queued.neighbour)).toBeGreaterThanOrEqual(0.4);
      // Depth 1: the flood gets one launch per neighbour job (what --help says); the neighbour
      // keeps the device.
      const one = run(policy, flood(1), neighbour);
      expect(Math.min(...one.neighbour)).toBeGreaterThanOrEqual(0.4);
      expect(median(one.flood)).toBeLessThan(0.05);
    });
  }

  it('fifo (contrast, "promises no share"): the long jobs take ~all device time', () => {
    const r = run('fifo', flood(2), 'copy');
    expect(median(r.flood)).toBeLessThan(0.05);
  });

  it.each(sharing)('%s: a flood whose gaps are longer than its launches cannot idle the device for its neighbour', (policy) => {
    // 30 µs launches, 200 µs to the next doorbell: waiting for every one of them would leave
    // the device idle most of the time while the neighbour has work.
    for (const neighbour of Object.keys(NEIGHBOURS) as (keyof typeof NEIGHBOURS)[]) {
      const r = run(policy, flood(1, 200 * US), neighbour);
      console.log(`${policy} long gaps vs ${neighbour}: neighbour ${fmt(r.neighbour)}, its device time per second ${fmt(r.neighbourBusy)}`);
      expect(Math.min(...r.neighbourBusy)).toBeGreaterThanOrEqual(0.4);
      expect(Math.min(...r.flood)).toBeGreaterThan(0); // and the flood still runs
    }
  });
});
