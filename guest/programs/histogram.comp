#version 450
// Histogram: bins[data[i] % nbins] += 1 for i < n.
//   binding 0: data (read-only, n uints), binding 1: bins (nbins uints, read and updated: zero
//   them before the first launch; launches accumulate)
//   push constants: uint n, nbins (nbins = 0 counts nothing)
//   workgroup 256; grid (min(G, 65535), ceil(G / 65535), 1) with G = ceil(n / 256)
// With nbins ≤ 256 each workgroup counts into shared bins first and then adds its non-zero
// counts to the global bins with one atomicAdd each, so global atomics stay few whatever n is;
// more bins than that are counted with global atomics directly.
layout(local_size_x = 256) in;

layout(set = 0, binding = 0) readonly buffer Data { uint data[]; };
layout(set = 0, binding = 1) buffer Bins { uint bins[]; };

layout(push_constant) uniform Params { uint n, nbins; } pc;

shared uint local_bins[256];

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + lid;
  const bool counted = i < pc.n && pc.nbins != 0u;
  if (pc.nbins > 256u) {  // uniform: the whole workgroup takes this branch or none of it
    if (counted) atomicAdd(bins[data[i] % pc.nbins], 1u);
    return;
  }
  local_bins[lid] = 0u;
  barrier();
  if (counted) atomicAdd(local_bins[data[i] % pc.nbins], 1u);
  barrier();
  const uint count = local_bins[lid];
  if (count != 0u) atomicAdd(bins[lid], count);
}
