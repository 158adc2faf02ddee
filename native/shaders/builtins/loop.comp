#version 450
// K_LOOP: the 32-bit LCG chain, state = state * 1664525 + 1013904223 (mod 2^32), stepped in
// chunks: each launch takes at most CHUNK steps and keeps its progress in the result record, so
// the plan repeats one identical launch until the iteration count is reached (or the engine's
// clock says target_ns). 64 steps per loop back-edge keep a launch far under the CPU device's
// loop cap (≤ 15,063 back-edges) and make the cancel check the loop rewrite adds at every
// back-edge cheap next to the work (on an H100 it costs about as much as 16 steps).
// The multiplier and increment come in push constants so no compiler can fold steps into one
// affine map: the chain stays dependent, time ∝ steps, as in the native kernel.
layout(local_size_x = 1) in;

layout(set = 0, binding = 0) buffer Record {
  uint rec[];  // u64 done (0,1), u64 elapsed_ns (2,3: the engine's), u32 state (4), 0 (5)
};

layout(push_constant) uniform Params {
  uint iter_lo, iter_hi;      // docs/kernels.md: u64 iterations at 0 (0 = no limit)
  uint target_lo, target_hi;  // u64 target_ns at 8 (the engine enforces it between launches)
  uint seed;                  // u32 seed at 16
  uint first;                 // 20: 1 = start from seed, 0 = continue from the record
  uint mul, inc;              // 24, 28: 1664525, 1013904223
} pc;

const uint UNROLL = 64u;
const uint CHUNK = 960000u;  // steps per launch (src/gpu/program/builtins.ts LOOP_CHUNK): 15,000 back-edges

void main() {
  uint done_lo = 0u, done_hi = 0u, state = pc.seed;
  if (pc.first == 0u) {
    done_lo = rec[0];
    done_hi = rec[1];
    state = rec[4];
  }
  uint n = CHUNK;
  if (pc.iter_lo != 0u || pc.iter_hi != 0u) {
    uint borrow;
    uint rem_lo = usubBorrow(pc.iter_lo, done_lo, borrow);
    uint rem_hi = pc.iter_hi - done_hi - borrow;
    if (rem_hi == 0u && rem_lo < n) n = rem_lo;
  }
  const uint a = pc.mul, c = pc.inc;
#define STEP4 state = state * a + c; state = state * a + c; state = state * a + c; state = state * a + c;
#define STEP16 STEP4 STEP4 STEP4 STEP4
  for (uint i = n / UNROLL; i > 0u; i--) {
    STEP16 STEP16 STEP16 STEP16
  }
  for (uint i = n % UNROLL; i > 0u; i--) state = state * a + c;
  uint carry;
  done_lo = uaddCarry(done_lo, n, carry);
  done_hi += carry;
  rec[0] = done_lo;
  rec[1] = done_hi;
  if (pc.first != 0u) {  // elapsed_ns is the engine's to fill; start it at 0
    rec[2] = 0u;
    rec[3] = 0u;
  }
  rec[4] = state;
  rec[5] = 0u;
}
