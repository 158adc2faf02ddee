#version 450
// 256-bin histogram of the low byte of n u32 values.
//   binding 0: data (read-only, n uints), binding 1: bins (256 uints, read and updated: zero
//   them before the first launch; launches accumulate)
//   push constants: uint n
//   workgroup 256; grid (min(G, 65535), ceil(G / 65535), 1) with G = ceil(n / 256)
// Each workgroup counts into shared bins first, then adds its non-zero bins to the global
// ones with one atomicAdd each, so the global atomics are few whatever n is.
layout(local_size_x = 256) in;

layout(set = 0, binding = 0) readonly buffer Data { uint data[]; };
layout(set = 0, binding = 1) buffer Bins { uint bins[256]; };

layout(push_constant) uniform Params { uint n; } pc;

shared uint local_bins[256];

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + lid;
  local_bins[lid] = 0u;
  barrier();
  if (i < pc.n) atomicAdd(local_bins[data[i] & 255u], 1u);
  barrier();
  const uint count = local_bins[lid];
  if (count != 0u) atomicAdd(bins[lid], count);
}
