#version 450
// A long-running loop for cancel, watchdog and loop-limit tests: invocation g steps the LCG
// state = state·1664525 + 1013904223 (mod 2^32) `iterations` times from seed ^ g and stores the
// state in out[g].
//   binding 0: out (written, one uint per invocation; records past the binding are dropped)
//   push constants: uint iterations, seed
//   workgroup 64; any grid (one workgroup is enough)
// One loop back-edge per iteration, so on a device with a loop cap (PROG_MAX_LOOP_ITERATIONS)
// a launch past it ends with PROGRAM_LOOP_LIMIT; iterations = 0xffffffff runs for seconds on a
// GPU and far past any watchdog on a CPU device. The chain of dependent multiply-adds has no
// closed form, so no compiler can drop the loop.
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) writeonly buffer Out { uint states[]; };

layout(push_constant) uniform Params { uint iterations, seed; } pc;

void main() {
  const uint g = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u +
                 gl_LocalInvocationID.x;
  uint state = pc.seed ^ g;
  for (uint i = 0u; i < pc.iterations; i++) state = state * 1664525u + 1013904223u;
  states[g] = state;
}
