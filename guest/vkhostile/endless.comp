#version 450
// An endless compute shader, as a hostile application writes one: a for(;;) whose only exits are
// continues, with an atomicAdd so no compiler may drop the loop. Only the device can end it.
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
