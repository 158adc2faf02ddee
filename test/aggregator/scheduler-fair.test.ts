// The `fair` policy on the simulated non-preemptive device (virtual clock), with guests that
// behave like the TCG guests of bench/fairness.ts: doorbell gaps with a tail of stalls, and the
// driver's interrupt-request doorbell (a zero-length submission) after every launch.
import { describe, expect, it } from 'vitest';
import { FairPolicy } from '../../src/aggregator/scheduler/fair.ts';
import type { FairState } from '../../src/aggregator/scheduler/fair.ts';
import { createPolicy } from '../../src/aggregator/scheduler/registry.ts';
import type { PolicyName } from '../../src/aggregator/scheduler/registry.ts';
import { MS, S, Simulation, US, median, tcgGaps, unfairness } from './scheduler-sim.ts';
import type { Workload } from './scheduler-sim.ts';

/** The driver asks for a completion interrupt this long after launching (vgSynchronize). */
const IRQ_AFTER = 30 * US;

interface VmSpec {
  name: string;
  weight: number;
  workload: Workload;
}

interface Outcome {
  /** Per 1 s window: (max − min) / (max + min) of device time per weight (AvA's metric for two equal weights). */
  unfairness: number[];
  /** Per VM, its median share of the device time used in a window. */
  shares: Record<string, number>;
  busy: number;
  sim: Simulation;
}

/** Run the VMs for `seconds`; statistics over 1 s windows after `skip` seconds of start-up. */
function simulate(name: PolicyName, config: object, vms: VmSpec[], seconds = 60, skip = 3): Outcome {
  const sim = new Simulation(createPolicy(name, config));
  for (const vm of vms) sim.addVm(vm.name, vm.weight, vm.workload);
  sim.run(seconds * S);
  const u: number[] = [];
  const shares: Record<string, number[]> = Object.fromEntries(vms.map((v) => [v.name, []]));
  let used = 0;
  for (let k = skip; k < seconds; k++) {
    const t = vms.map((v) => sim.deviceTime(v.name, k * S, (k + 1) * S));
    const total = t.reduce((a, b) => a + b, 0);
    used += total;
    const norm = t.map((x, i) => x / vms[i]!.weight);
    u.push(unfairness(Math.max(...norm), Math.min(...norm)));
    vms.forEach((v, i) => shares[v.name]!.push(total > 0 ? t[i]! / total : 0));
  }
  return {
    unfairness: u,
    shares: Object.fromEntries(Object.entries(shares).map(([k, v]) => [k, median(v)])),
    busy: used / ((seconds - skip) * S),
    sim,
  };
}

/** VM A: 1 ms kernels, VM B: 100 ms kernels, both synchronizing each launch. */
function pair(gapA: Workload['thinkNs'], gapB: Workload['thinkNs'], weights: [number, number] = [1, 1]): VmSpec[] {
  return [
    { name: 'A', weight: weights[0], workload: { kernelNs: 1 * MS, thinkNs: gapA, irqRequestAfterNs: IRQ_AFTER } },
    { name: 'B', weight: weights[1], workload: { kernelNs: 100 * MS, thinkNs: gapB, irqRequestAfterNs: IRQ_AFTER } },
  ];
}

const pct = (x: number) => `${(x * 100).toFixed(1)}%`.padStart(6);

describe('fair: 1 ms vs 100 ms kernels (AvA: median unfairness 2.4 % in 1 s windows)', () => {
  // Guests as measured under TCG (bench/results/fairness/cpu.json): A's gap median ~240 µs with a
  // tail of stalls of 1–15 ms (0.8 % of gaps on a quiet host, 3 % with other work running,
  // 8 % up to 30 ms under heavy load); B's gap median ~700 µs.
  const gaps: [string, () => Workload['thinkNs'], () => Workload['thinkNs']][] = [
    ['20 µs (KVM-like)', () => 20 * US, () => 20 * US],
    ['50 µs', () => 50 * US, () => 50 * US],
    ['240 µs fixed', () => 240 * US, () => 240 * US],
    ['TCG, quiet host', () => tcgGaps(1, 240e3, 0.008), () => tcgGaps(99, 700e3, 0.008)],
    ['TCG, quiet host (seed 2)', () => tcgGaps(11, 240e3, 0.008), () => tcgGaps(98, 700e3, 0.008)],
    ['TCG, 3 % stalls', () => tcgGaps(2, 240e3, 0.03), () => tcgGaps(97, 700e3, 0.03)],
    ['TCG, 8 % stalls ≤ 30 ms', () => tcgGaps(3, 240e3, 0.08, 30e6), () => tcgGaps(96, 700e3, 0.08, 30e6)],
  ];

  it('fair keeps the median ≤ 2 % at every gap; greedy policies do not (table in the output)', () => {
    const lines = ['gap                          policy   median   p90     max    A share  device busy'];
    const fair: Record<string, Outcome> = {};
    for (const [label, a, b] of gaps) {
      for (const name of ['fair', 'band'] as const) {
        const r = simulate(name, {}, pair(a(), b()));
        if (name === 'fair') fair[label] = r;
        const sorted = [...r.unfairness].sort((x, y) => x - y);
        lines.push(`${label.padEnd(28)} ${name.padEnd(6)} ${pct(median(r.unfairness))} ${pct(sorted[Math.floor(0.9 * sorted.length)]!)} ` +
          `${pct(sorted.at(-1)!)}   ${r.shares['A']!.toFixed(3)}    ${pct(r.busy)}`);
      }
    }
    console.log(`unfairness per 1 s window, 57 windows after 3 s, two VMs (A: 1 ms kernels, B: 100 ms)\n${lines.join('\n')}`);
    for (const [label, r] of Object.entries(fair)) {
      if (label.startsWith('TCG, 8 %')) continue; // heavy load: reported, not a goal
      expect(median(r.unfairness), label).toBeLessThanOrEqual(0.02);
      expect(r.shares['A']!, label).toBeGreaterThan(0.49);
    }
    expect(median(fair['TCG, 8 % stalls ≤ 30 ms']!.unfairness)).toBeLessThan(0.05);
    // The price: idle device time when the long kernel does not tile the window (4 rounds of
    // 225 ms per second: 80 % busy), never below what a round needs.
    expect(fair['TCG, quiet host']!.busy).toBeGreaterThan(0.75);
    expect(fair['20 µs (KVM-like)']!.busy).toBeGreaterThan(0.95);
  });

  it('greedy least-served-first is not enough: BAND in the same runs stays above 10 % under TCG gaps', () => {
    const r = simulate('band', {}, pair(tcgGaps(1, 240e3, 0.008), tcgGaps(99, 700e3, 0.008)));
    expect(median(r.unfairness)).toBeGreaterThan(0.1);
  });

  it('frames adapt to the round: 4 frames of 250 ms for a 225 ms round, 5 of 200 ms for a 202 ms one', () => {
    const frames = (gap: number) => {
      const r = simulate('fair', {}, pair(gap, gap), 20);
      return (r.sim.policy.state() as FairState).frames;
    };
    expect(frames(240 * US)).toBe(4);
    expect(frames(20 * US)).toBe(5);
  });
});

describe('fair: weights', () => {
  it.each([
    ['1:2', [1, 2] as [number, number]],
    ['2:1', [2, 1] as [number, number]],
  ])('weights %s give shares within 2 points of 1/3 and 2/3', (_label, w) => {
    for (const stalls of [0.008, 0.03]) {
      const r = simulate('fair', {}, pair(tcgGaps(2, 240e3, stalls), tcgGaps(5, 700e3, stalls), w));
      const want = w[0] / (w[0] + w[1]);
      console.log(`weights ${w.join(':')}, ${stalls * 100} % stalls: A share ${r.shares['A']!.toFixed(3)} (want ${want.toFixed(3)}), ` +
        `median unfairness per weight ${pct(median(r.unfairness))}, device busy ${pct(r.busy)}`);
      expect(Math.abs(r.shares['A']! - want)).toBeLessThanOrEqual(0.02);
      expect(Math.abs(r.shares['B']! - (1 - want))).toBeLessThanOrEqual(0.02);
      expect(median(r.unfairness)).toBeLessThanOrEqual(0.02);
    }
  });
});

describe('fair: four VMs', () => {
  it.each([
    ['1, 1, 100 and 100 ms kernels (two pairs of the AvA experiment)', [1, 1, 100, 100]],
    ['1, 5, 20 and 100 ms kernels', [1, 5, 20, 100]],
  ])('%s get a quarter each', (_label, kernels) => {
    const vms: VmSpec[] = kernels.map((ms, i) => ({
      name: `v${i}-${ms}ms`, weight: 1,
      workload: { kernelNs: ms * MS, thinkNs: tcgGaps(20 + i, 240e3, 0.008), irqRequestAfterNs: IRQ_AFTER },
    }));
    const r = simulate('fair', {}, vms);
    const band = simulate('band', {}, vms);
    const fmt = (o: Outcome) => JSON.stringify(Object.fromEntries(Object.entries(o.shares).map(([k, v]) => [k, +v.toFixed(3)])));
    console.log(`four VMs ${kernels.join('/')} ms: fair shares ${fmt(r)}, median (max − min)/(max + min) ${pct(median(r.unfairness))}, ` +
      `busy ${pct(r.busy)}, frames ${(r.sim.policy.state() as FairState).frames}; band ${fmt(band)}, ${pct(median(band.unfairness))}`);
    // Two pairs tile the window (two 100 ms kernels per 500 ms frame). Four kernel lengths do
    // not: a VM with 20 ms kernels needs a turn per frame too, and the frames cannot suit both
    // it and the 100 ms one (a known limit of one turn per frame), so shares drift by a few
    // points and single windows vary more; still better than BAND.
    if (kernels[1] === 1) {
      for (const share of Object.values(r.shares)) expect(Math.abs(share - 0.25)).toBeLessThanOrEqual(0.02);
      expect(median(r.unfairness)).toBeLessThanOrEqual(0.02);
    } else {
      for (const share of Object.values(r.shares)) expect(Math.abs(share - 0.25)).toBeLessThanOrEqual(0.05);
      expect(median(r.unfairness)).toBeLessThan(median(band.unfairness) * 0.75);
    }
  });

  it('weights 1:1:2:4 over equal 10 ms kernels', () => {
    const w = [1, 1, 2, 4];
    const vms: VmSpec[] = w.map((weight, i) => ({
      name: `w${i}`, weight, workload: { kernelNs: 10 * MS, thinkNs: tcgGaps(30 + i, 240e3, 0.008), irqRequestAfterNs: IRQ_AFTER },
    }));
    const r = simulate('fair', {}, vms);
    vms.forEach((v, i) => expect(Math.abs(r.shares[v.name]! - w[i]! / 8)).toBeLessThanOrEqual(0.02));
  });
});

describe('fair: bounded holds', () => {
  it('a VM that stops submitting stalls the device at most once, for at most the cap', () => {
    const sim = new Simulation(createPolicy('fair'));
    sim.addVm('A', 1, { kernelNs: 1 * MS, thinkNs: 240 * US, irqRequestAfterNs: IRQ_AFTER, stopNs: 5 * S });
    sim.addVm('B', 1, { kernelNs: 100 * MS, thinkNs: 700 * US, irqRequestAfterNs: IRQ_AFTER });
    sim.run(10 * S);
    // After A's last kernel the device idles at most the hold cap (50 ms) plus the rest of a frame.
    const lastA = Math.max(...sim.intervals.filter((i) => i.vm === 'A').map((i) => i.end));
    const firstB = Math.min(...sim.intervals.filter((i) => i.vm === 'B' && i.start >= lastA).map((i) => i.start));
    expect(firstB - lastA).toBeLessThanOrEqual(50 * MS + 250 * MS);
    // From then on B alone has the device but for its own gaps (100 ms kernels, 0.73 ms per launch).
    expect(sim.deviceTime('B', 6 * S, 10 * S) / (4 * S)).toBeGreaterThan(0.985);
  });

  it('a VM whose gaps are long CPU phases does not keep the device idle for it', () => {
    // A: 1 ms kernels with 40 ms of CPU work between them; B: 100 ms kernels.
    const r = simulate('fair', {}, pair(40 * MS, 700 * US));
    const st = r.sim.policy.state() as FairState;
    const a = r.sim.deviceTime('A', 0, 60 * S);
    // Held idle time ≤ holdRatio (2) × A's own device time + one cap.
    expect(st.vms['A']!.heldNs).toBeLessThanOrEqual(2 * a + 50 * MS);
    expect(r.busy).toBeGreaterThan(0.95);
    // A waits at most for the 100 ms kernel on the device (non-preemptive) and a hold.
    expect(Math.max(...r.sim.waits.get('A')!)).toBeLessThanOrEqual(100 * MS + 50 * MS);
  });

  it('a VM abusing holds (ring, then vanish for longer than its budget) costs the others at most twice its device time', () => {
    // A rings a 1 ms kernel, then stays silent for 45 ms: every gap is longer than any budget it can earn.
    const r = simulate('fair', {}, pair(45 * MS, 700 * US));
    const st = r.sim.policy.state() as FairState;
    const a = r.sim.deviceTime('A', 0, 60 * S);
    const b = r.sim.deviceTime('B', 0, 60 * S);
    expect(st.vms['A']!.heldNs).toBeLessThanOrEqual(2 * a + 50 * MS);
    expect(a + b + st.vms['A']!.heldNs).toBeLessThanOrEqual(60 * S);
    expect(b / (60 * S)).toBeGreaterThan(0.9);
  });
});

describe('fair: no starvation, no burst on return', () => {
  it('every doorbell is dispatched within a window plus one kernel, whatever the others do', () => {
    // An aggressive VM with two submissions always queued, a 100 ms VM, a bursty VM and a slow one.
    const vms: VmSpec[] = [
      { name: 'hog', weight: 4, workload: { kernelNs: 2 * MS, thinkNs: 10 * US, depth: 2 } },
      { name: 'long', weight: 1, workload: { kernelNs: 100 * MS, thinkNs: tcgGaps(7), irqRequestAfterNs: IRQ_AFTER } },
      { name: 'bursty', weight: 1, workload: { kernelNs: (i) => (i % 50 < 5 ? 30 * MS : 1 * MS), thinkNs: tcgGaps(8, 240e3, 0.03), irqRequestAfterNs: IRQ_AFTER } },
      { name: 'slow', weight: 0.5, workload: { kernelNs: 1 * MS, thinkNs: 20 * MS } },
    ];
    const r = simulate('fair', {}, vms);
    for (const v of vms) {
      const waits = r.sim.waits.get(v.name)!;
      expect(waits.length, v.name).toBeGreaterThan(40);
      expect(Math.max(...waits), v.name).toBeLessThanOrEqual(1 * S + 100 * MS);
    }
  });

  it('a VM returning after 5 s idle gets its share, not a burst', () => {
    const sim = new Simulation(createPolicy('fair'));
    sim.addVm('busy', 1, { kernelNs: 1 * MS, thinkNs: 50 * US, depth: 2 });
    sim.addVm('returner', 1, { kernelNs: 1 * MS, thinkNs: 50 * US, depth: 2, startNs: 5 * S });
    sim.run(7 * S);
    const share = (t0: number, t1: number) => {
      const a = sim.deviceTime('returner', t0, t1);
      return a / (a + sim.deviceTime('busy', t0, t1));
    };
    for (let t = 5 * S; t < 6 * S; t += 100 * MS) expect(share(t, t + 100 * MS)).toBeLessThan(0.6);
    expect(share(5 * S, 6 * S)).toBeGreaterThan(0.45);
  });
});

describe('fair: state', () => {
  it('validates its configuration', () => {
    expect(() => new FairPolicy({ windowNs: 0 })).toThrow(RangeError);
    expect(() => new FairPolicy({ slackNs: -1 })).toThrow(RangeError);
    expect(() => new FairPolicy({ holdRatio: Number.NaN })).toThrow(RangeError);
    expect(() => new FairPolicy({ frames: 0 })).toThrow(RangeError);
    expect(() => new FairPolicy({ frames: 300, maxFrames: 200 })).toThrow(RangeError);
  });

  it.each([
    ['a zero-length turn (the interrupt request) is given back', 0],
    ['a turn that used the device is not', 1 * MS],
  ])('%s', (_label, turnNs) => {
    const p = new FairPolicy({ activeGraceNs: 1 * S }); // 10 frames of 100 ms to start with
    p.addVm('a', { weight: 1 }, 0);
    p.addVm('b', { weight: 1 }, 0);
    p.enqueue('b', 0);
    expect(p.pickNext(0)).toBe('b'); // alone with work
    p.onComplete('b', 100 * MS, 100 * MS);
    p.enqueue('a', 100 * MS);
    expect(p.pickNext(100 * MS)).toBe('a');
    p.onComplete('a', 105 * MS, 205 * MS);
    // a (vt 105 ms, in its gap) and b (vt 100 ms, 100 ms kernels) would each end up ahead of the
    // other: b, the least served, gets its frame's turn (frame 2 of 100 ms: 200–300 ms).
    p.enqueue('b', 205 * MS);
    expect(p.pickNext(205 * MS)).toBe('b');
    expect((p.state() as FairState).vms['b']!.turnFrame).toBe(2);
    p.onComplete('b', turnNs, 205 * MS + turnNs);
    const b = (p.state() as FairState).vms['b']!;
    expect(b.turnFrame).toBe(turnNs === 0 ? -1 : 2);
    expect(b.turns).toBe(turnNs === 0 ? 0 : 1);
    expect(b.estNs).toBe(turnNs === 0 ? 100 * MS : turnNs); // the last non-empty submission
  });

  it('waits for the next frame when the least-served VM has used its turn', () => {
    const p = new FairPolicy({ activeGraceNs: 1 * S });
    p.addVm('a', { weight: 1 }, 0);
    p.addVm('b', { weight: 1 }, 0);
    p.enqueue('b', 0);
    p.pickNext(0);
    p.onComplete('b', 100 * MS, 100 * MS);
    p.enqueue('a', 100 * MS);
    p.pickNext(100 * MS);
    p.onComplete('a', 105 * MS, 205 * MS);
    p.enqueue('b', 205 * MS);
    expect(p.pickNext(205 * MS)).toBe('b'); // the turn of frame 2
    p.onComplete('b', 90 * MS, 295 * MS);
    // b: vt 190, next kernel 90 ms; a: vt 105, in its gap until 255 ms; at 296 ms a has rung.
    p.enqueue('a', 296 * MS);
    expect(p.pickNext(296 * MS)).toBe('a'); // a is behind and eligible
    p.onComplete('a', 80 * MS, 376 * MS); // a: vt 185 (frame 3 now: 300–400 ms)
    p.enqueue('b', 377 * MS);
    p.enqueue('a', 377 * MS);
    // a (185 + 80 > 190 + slack) and b (190 + 90 > 185) are both ineligible; a is least served
    // and gets frame 3's turn; then nobody may start and a's turn is used: wait for frame 4.
    expect(p.pickNext(377 * MS)).toBe('a');
    p.onComplete('a', 80 * MS, 457 * MS); // frame 4 (400–500) started meanwhile: a turn is free again
    p.enqueue('a', 458 * MS);
    expect(p.pickNext(458 * MS)).toBe('b'); // b (190) is least served now: frame 4's turn
    p.onComplete('b', 90 * MS, 548 * MS); // frame 5
    p.enqueue('b', 549 * MS);
    expect(p.pickNext(549 * MS)).toBe('a'); // a 265 + 80 − 5 ≤ b 280: eligible
    p.onComplete('a', 80 * MS, 629 * MS); // a 345, frame 6
    expect(p.pickNext(629 * MS)).toBe('b'); // b 280 least, frame 6's turn
    p.onComplete('b', 90 * MS, 640 * MS); // b 370 (the kernel was shorter than the clock says: fine)
    p.enqueue('b', 641 * MS);
    // a (345, in its gap until 679 ms) is least served and would be eligible if it rang: hold for it.
    expect(p.pickNext(641 * MS)).toEqual({ waitUntil: 679 * MS });
    p.enqueue('a', 650 * MS);
    expect(p.pickNext(650 * MS)).toBe('a'); // 345 + 80 − 5 = 420 > 370: a's turn (frame 6, unused by a)
    p.onComplete('a', 80 * MS, 660 * MS); // a 425
    p.enqueue('a', 661 * MS);
    // b (370) least, its frame-6 turn used; a (425) ineligible: wait for frame 7 at 700 ms.
    expect(p.pickNext(661 * MS)).toEqual({ waitUntil: 700 * MS });
    expect(p.pickNext(700 * MS)).toBe('b');
  });
});
