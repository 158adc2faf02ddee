// The tests' PRNGs. The fuzzers' (test/device-model/fuzz-lib.ts, test/gpu/spirv-fuzz.ts) is one
// generator, so a (seed, iteration) printed by either replays the same input; the kernel and
// scheduler tests draw their inputs from one small generator, so a seed names the same data in each.

/** Deterministic pseudo-random numbers in [0, 1) (mulberry32). */
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** n floats uniform in [lo, hi). */
export function randF32(n: number, seed: number, lo = -1, hi = 1): Float32Array {
  const r = rng(seed);
  return Float32Array.from({ length: n }, () => lo + (hi - lo) * r());
}

/** n uniform 32-bit words. */
export function randU32(n: number, seed: number): Uint32Array {
  const r = rng(seed);
  return Uint32Array.from({ length: n }, () => Math.floor(r() * 4294967296) >>> 0);
}


/** sfc32 seeded through splitmix32: fast, 32-bit, good enough for fuzzing, reproducible. */
export class Prng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: number) {
    let s = seed >>> 0;
    const next = (): number => {
      s = (s + 0x9e3779b9) >>> 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next();
    for (let i = 0; i < 12; i++) this.u32();
  }

  u32(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0;
    this.d = (this.d + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return t >>> 0;
  }

  /** Integer in [0, n), n ≤ 2^32. */
  int(n: number): number {
    return Math.floor((this.u32() / 0x1_0000_0000) * n);
  }

  /** Integer in [lo, hi]. */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }

  chance(p: number): boolean {
    return this.u32() < p * 0x1_0000_0000;
  }

  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }

  bytes(n: number): Uint8Array {
    const b = new Uint8Array(n);
    for (let i = 0; i < n; i += 4) {
      const v = this.u32();
      b[i] = v;
      if (i + 1 < n) b[i + 1] = v >>> 8;
      if (i + 2 < n) b[i + 2] = v >>> 16;
      if (i + 3 < n) b[i + 3] = v >>> 24;
    }
    return b;
  }
}
