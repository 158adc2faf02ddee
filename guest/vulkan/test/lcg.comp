#version 450
// o[i] = `iters` steps of an LCG from i ^ SALT: as long as wanted (iters), checkable on the CPU, and
// a distinct program for every SALT (a specialization constant: the device compiles each anew).
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint SALT = 0u;
layout(set = 0, binding = 0) buffer Out { uint v[]; } o;
layout(push_constant) uniform P { uint iters; } pc;
void main() {
  uint i = gl_GlobalInvocationID.x;
  uint x = i ^ SALT;
  for (uint k = 0u; k < pc.iters; k++) x = x * 1664525u + 1013904223u;
  o.v[i] = x;
}
