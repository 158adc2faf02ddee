#version 450
// Sum reduction of n u32 values (mod 2^32) into out[0].
//   binding 0: in (read-only, n uints), binding 1: out (read and updated: zero out[0] before
//   the launch; the launch adds to it)
//   push constants: uint n
//   workgroup 256; grid (min(G, 65535), ceil(G / 65535), 1) with G = ceil(n / 256)
// Each workgroup reduces its 256 inputs with a tree in shared memory (no subgroup operations,
// so it runs on any device) and adds its one partial sum to out[0] with a single atomicAdd.
// Integer addition is associative: the result is exact, whatever order workgroups finish in.
layout(local_size_x = 256) in;

layout(set = 0, binding = 0) readonly buffer In { uint data[]; };
layout(set = 0, binding = 1) buffer Out { uint total[]; };

layout(push_constant) uniform Params { uint n; } pc;

shared uint sums[256];

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + lid;
  sums[lid] = i < pc.n ? data[i] : 0u;
  barrier();
  for (uint stride = 128u; stride > 0u; stride >>= 1u) {
    if (lid < stride) sums[lid] += sums[lid + stride];
    barrier();  // the loop bound is uniform: every invocation reaches it
  }
  if (lid == 0u && sums[0] != 0u) atomicAdd(total[0], sums[0]);
}
