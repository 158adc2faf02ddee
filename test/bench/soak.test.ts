// The soak's record (bench/lib/soak.ts) and the profile summary (bench/lib/cpuprofile.ts): what
// bench:llama --soak-s and --profile-serve conclude from what they saw.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { SoakRecorder } from '../../bench/lib/soak.ts';
import { summarizeProfile } from '../../bench/lib/cpuprofile.ts';

const gen = (tokens: number[], maxGapMs: number) => ({ tokens, genMs: 10 * (tokens.length - 1), maxGapMs });

describe('SoakRecorder', () => {
  it('counts wrong streams and errors per tenant, and this process\'s memory as the server\'s', () => {
    const rec = new SoakRecorder(process.pid, 2, 0);
    rec.gen(0, gen([1, 2, 3], 12), [1, 2, 3], performance.now());
    rec.gen(1, gen([1, 2, 4], 15), [1, 2, 3], performance.now());
    rec.error(1, 'worker died');
    rec.sample();
    const s = rec.summary(50);
    expect(s.requests).toBe(2);
    expect(s.wrong).toBe(1);
    expect(s.errors).toBe(1);
    expect(s.perTenant[1]).toMatchObject({ requests: 1, wrong: 1, errors: 1, maxGapMs: 15 });
    expect(s.goals.everyStreamVerified).toBe(false);
    expect(s.memory.baselineRssMiB).toBeGreaterThan(1);
    expect(s.memory.fdGrowth).toBe(0);
    expect(s.errorMessages).toEqual(['worker died']);
  });

  it('splits token waits by whether the hostile VM launched during the request', () => {
    const rec = new SoakRecorder(process.pid, 1, 0);
    rec.setHostile(false);
    const before = performance.now();
    rec.gen(0, gen([1, 2], 20), undefined, before);
    rec.setHostile(true);
    rec.gen(0, gen([1, 2], 300), undefined, performance.now());
    rec.setHostile(false);
    // started while the hostile VM still launched, ended after it stopped: beside it
    rec.gen(0, gen([1, 2], 250), undefined, before);
    rec.gen(0, gen([1, 2], 30), undefined, performance.now() + 1);
    rec.sample();
    const w = rec.summary(50).tokenWaitMs;
    expect(w.besideHostile).toMatchObject({ requests: 2, maxGap: 300 });
    expect(w.hostilePaused).toMatchObject({ requests: 2, maxGap: 30 });
    expect(w.maxGap).toBe(300);
  });

  it('takes the growth baseline from a sample in the hostile state of the last one', () => {
    const rec = new SoakRecorder(process.pid, 1, 0);
    rec.setHostile(true);
    rec.sample();
    rec.setHostile(false);
    rec.sample();
    rec.setHostile(true);
    rec.sample();
    const s = rec.summary(50);
    expect(s.memory.baselineAtS).toBe(s.windows[0]!.tS);
    expect(s.windows.map((x) => x.hostileAtSample)).toEqual([true, false, true]);
  });
});

describe('summarizeProfile', () => {
  it('charges a sample to its function and, inclusively, to the named functions on its stack', () => {
    const frame = (functionName: string) => ({ functionName, url: 'file:///x/cp.ts', lineNumber: 0 });
    const profile = {
      nodes: [
        { id: 1, callFrame: frame('(root)'), children: [2, 4] },
        { id: 2, callFrame: frame('decode'), children: [3] },
        { id: 3, callFrame: frame('translate') },
        { id: 4, callFrame: frame('(idle)') },
      ],
      startTime: 0, endTime: 2_000_000,
      // 1.5 s in translate under decode, then 0.5 s idle; each delta is the time since the last sample
      samples: [3, 3, 3, 4, 4], timeDeltas: [0, 500_000, 500_000, 500_000, 500_000],
    };
    const f = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-prof-')), 'p.cpuprofile');
    fs.writeFileSync(f, JSON.stringify(profile));
    const s = summarizeProfile(f, ['translate'], 'decode', 400);
    expect(s.top[0]).toEqual({ function: 'translate cp.ts:1', selfMs: 1500 });
    expect(s.idleMs).toBe(500);
    // samples at 0, 0.5, 1.0, 1.5 and 2.0 s, each lasting until the next: second 0 is 1 s of
    // translate under decode, second 1 0.5 s of it and 0.5 s idle, second 2 nothing (not steady)
    expect(s.steadyState.seconds).toBe(2);
    expect(s.steadyState.msPerSecond.translate).toBe(750);
    expect(s.steadyState.msPerSecond.idle).toBe(250);
  });
});
