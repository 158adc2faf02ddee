#version 450
// K_LUD_DIAGONAL: right-looking LU of the b×b diagonal block of blocked-LU step s in place
// (o = s·bs, b = min(bs, n − o)): for k, for i > k: a[i][k] /= a[k][k], then
// a[i][j] −= a[i][k]·a[k][j] for j > k. One workgroup; each k is two barrier-separated sweeps.
// The plan gives each launch a range [k0, k1) of k sized to stay under the CPU device's loop
// cap (one launch for blocks up to ~300); a single k too large for one launch (b > ~3900) is
// cut by rows [r0, r1) (rows below the pivot are independent within one k).
layout(local_size_x = 16, local_size_y = 16) in;

layout(set = 0, binding = 0) buffer Matrix { float a[]; };

layout(push_constant) uniform Params {
  uint n, bs, step;  // docs/kernels.md: u32 n, bs, step at 0, 4, 8 (the plan checks them)
  uint k0, k1;       // 12, 16: pivots of this launch
  uint r0, r1;       // 20, 24: rows of the block this launch updates (0, b unless cut)
} pc;

void main() {
  const uint n = pc.n, o = pc.step * pc.bs, b = min(pc.bs, n - o);
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, t = ty * 16u + tx;
  for (uint k = pc.k0; k < pc.k1; k++) {
    const uint rk = (o + k) * n + o;  // row k of the block
    const float pivot = a[rk + k];
    const uint ilo = max(k + 1u, pc.r0), ihi = min(b, pc.r1);
    for (uint i = ilo + t; i < ihi; i += 256u) a[(o + i) * n + o + k] /= pivot;
    groupMemoryBarrier();
    barrier();
    for (uint i = ilo + ty; i < ihi; i += 16u) {
      const uint ri = (o + i) * n + o;
      const float l = a[ri + k];
      for (uint j = k + 1u + tx; j < b; j += 16u) a[ri + j] -= l * a[rk + j];
    }
    groupMemoryBarrier();
    barrier();
  }
}
