#version 450
// c[i] = a[i] + b[i] for i < n (f32).
//   binding 0: a (read-only), binding 1: b (read-only), binding 2: c (written)
//   push constants: uint n
//   workgroup 256; grid (min(G, 65535), ceil(G / 65535), 1) with G = ceil(n / 256)
layout(local_size_x = 256) in;

layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) writeonly buffer C { float c[]; };

layout(push_constant) uniform Params { uint n; } pc;

void main() {
  // Linear index over a 2-D grid, so n may exceed 65535 workgroups × 256.
  const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u +
                 gl_LocalInvocationID.x;
  if (i < pc.n) c[i] = a[i] + b[i];
}
