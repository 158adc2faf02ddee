#version 450
// A program that never ends, as a hostile or buggy tenant writes one: a `for (;;)` whose only
// exits are `continue`s, with an atomicAdd on a binding so that no compiler may drop the loop
// (it has a side effect every other pass). Launched over many workgroups (the neighbour
// scenario uses 256) it keeps every lane of the device busy until the device stops it: the
// watchdog (WATCHDOG) through the loop rewrite's cancel word, or on a device with a loop cap
// PROGRAM_LOOP_LIMIT (hw-spec §6.3.5). Never a result.
//   binding 0: counter (read-write, one uint; the passes that took the atomic)
//   push constants: uint stride (any non-zero value; 1 makes every pass take the atomic)
//   workgroup 64; any grid
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) buffer Counter { uint passes; } counter;

layout(push_constant) uniform Params { uint stride; } pc;

void main() {
  uint i = gl_LocalInvocationID.x;
  for (;;) {
    i += 1u;
    if (pc.stride != 0u && i % pc.stride != 0u) continue;
    atomicAdd(counter.passes, 1u);
  }
}
