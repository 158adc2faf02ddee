// Bounded run of the SPIR-V front-end fuzzer (test/gpu/spirv-fuzz.ts); the long run is
// `npm run fuzz:programs` (bench/fuzz-programs.ts).
import { describe, expect, it } from 'vitest';
import { MUTATIONS, fuzz } from './spirv-fuzz.ts';
import { buildSeeds } from './spirv-helpers.ts';

describe('SPIR-V front-end fuzzer', () => {
  it('20,000 mutated modules: no crash, every accepted rewrite validates and is stoppable', () => {
    const seeds = buildSeeds().map((s) => s.words);
    const stats = fuzz(seeds, { iterations: 20_000, seed: 0x5eed });
    expect(stats.findings).toEqual([]);
    expect(stats.iterations).toBe(20_000);
    // The mutations reach past the validator into the analysis and the rewrite.
    expect(stats.accepted).toBeGreaterThan(500);
    expect(stats.byReason.INVALID).toBeGreaterThan(1000);
    for (const name of Object.keys(MUTATIONS)) expect(stats.byMutation[name]!.runs).toBeGreaterThan(1000);
    expect(Object.keys(stats.byReason).length).toBeGreaterThanOrEqual(8);
  }, 900_000);
});
