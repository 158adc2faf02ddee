#version 450
// A dispatch that takes a while and whose result is checkable on the CPU: each invocation iterates
// an LCG `iters` times from its index, stores it, and counts itself once at the end (so a
// command buffer run twice shows a double count).
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer Out { uint v[]; } o;
layout(set = 0, binding = 1) buffer Counter { uint n; } counter;
layout(push_constant) uniform Params { uint iters; } pc;
void main() {
  uint i = gl_GlobalInvocationID.x;
  uint x = i;
  for (uint k = 0u; k < pc.iters; k++) x = x * 1664525u + 1013904223u;
  o.v[i] = x;
  atomicAdd(counter.n, 1u);
}
