#version 450
// K_LUD_PERIMETER: with L11/U11 from the diagonal block of step s (o = s·bs,
// b = min(bs, n − o), rest = o + b):
//   row panel a[o..o+b)[rest..n) ← L11⁻¹·A12: one invocation per column, forward substitution
//   column panel a[rest..n)[o..o+b) ← A21·U11⁻¹: one invocation per row
// Invocations 0 … n−rest−1 take the columns, the next n−rest the rows. Both walk the block's
// pivot index p (row i of the substitution, column k of the solve) in order, so the plan can cut
// [0, b) into launches [p0, p1) that each stay under the CPU device's loop cap.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
#include "common.glsl"

layout(set = 0, binding = 0) buffer Matrix { float a[]; };

layout(push_constant) uniform Params {
  uint n, bs, step;  // docs/kernels.md: u32 n, bs, step at 0, 4, 8 (the plan checks them)
  uint p0, p1;       // 12, 16: pivot indices of this launch
} pc;

void main() {
  const uint n = pc.n, o = pc.step * pc.bs, b = min(pc.bs, n - o), rest = o + b;
  const uint cnt = n - rest, t = linear_id();
  if (t < cnt) {
    const uint j = rest + t;
    for (uint i = max(pc.p0, 1u); i < pc.p1; i++) {
      const uint li = (o + i) * n + o;  // row i of L11
      float s = a[(o + i) * n + j];
      for (uint k = 0u; k < i; k++) s -= a[li + k] * a[(o + k) * n + j];
      a[(o + i) * n + j] = s;
    }
  } else if (t - cnt < cnt) {
    const uint row = (rest + t - cnt) * n + o;
    for (uint k = pc.p0; k < pc.p1; k++) {
      const uint uk = (o + k) * n + o;  // row k of U11
      const float x = a[row + k] / a[uk + k];
      a[row + k] = x;
      for (uint j = k + 1u; j < b; j++) a[row + j] -= x * a[uk + j];
    }
  }
}
