#version 450
// A long-running loop for cancel, watchdog and loop-limit tests: every invocation steps a
// 32-bit LCG `iterations` times (a u64; 2^64 − 1 is "forever": centuries) and writes a record.
//   binding 0: out (written): invocation g stores {u64 done, u32 state, u32 g} at 16·g bytes
//   (records past the binding are dropped: a 16-byte binding keeps invocation 0's)
//   push constants: uint iterations_lo, iterations_hi, mul (e.g. 1664525), seed
//   workgroup 64; any grid (one workgroup is enough)
// The multiplier comes from the push constants so no compiler can replace the loop by a
// closed form or drop it: the loop really runs `iterations` back-edges per invocation.
// On a device with a loop cap (PROG_MAX_LOOP_ITERATIONS) a launch past it ends with
// PROGRAM_LOOP_LIMIT.
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) writeonly buffer Out { uvec4 rec[]; };

layout(push_constant) uniform Params { uint iterations_lo, iterations_hi, mul, seed; } pc;

void main() {
  const uint g = gl_GlobalInvocationID.x +
                 gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  uint state = pc.seed + g;
  uint lo = 0u, hi = 0u;
  while (hi < pc.iterations_hi || (hi == pc.iterations_hi && lo < pc.iterations_lo)) {
    state = state * pc.mul + 1013904223u;
    lo++;
    if (lo == 0u) hi++;
  }
  rec[g] = uvec4(lo, hi, state, g);
}
