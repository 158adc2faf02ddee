#version 450
// Sum reduction: partial[g] = Σ of the 512 inputs of workgroup g (f32).
//   binding 0: in (read-only, n floats), binding 1: partial (written, one float per workgroup)
//   push constants: uint n
//   workgroup 256; grid (min(G, 65535), ceil(G / 65535), 1) with G = ceil(n / 512)
// Launch again on the partials (n = G) until one value is left. Each invocation adds two
// inputs, then a tree in shared memory halves the active invocations per step; no subgroup
// operations, so it runs on any device.
layout(local_size_x = 256) in;

layout(set = 0, binding = 0) readonly buffer In { float data[]; };
layout(set = 0, binding = 1) writeonly buffer Out { float partial[]; };

layout(push_constant) uniform Params { uint n; } pc;

shared float sums[256];

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint i = group * 512u + lid;
  float s = i < pc.n ? data[i] : 0.0;
  if (i + 256u < pc.n) s += data[i + 256u];
  sums[lid] = s;
  barrier();
  for (uint stride = 128u; stride > 0u; stride >>= 1u) {
    if (lid < stride) sums[lid] += sums[lid + stride];
    barrier();  // uniform loop: every invocation reaches it
  }
  if (lid == 0u) partial[group] = sums[0];
}
