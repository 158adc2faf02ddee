#version 450
// K_BACKPROP_ADJUST: for r ≤ n_in, j < n_out, x'[0] = 1, x'[r] = x[r−1]:
//   d = eta·delta[j]·x'[r] + momentum·oldw[r][j]; w[r][j] += d; oldw[r][j] = d
// One invocation per weight.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
#include "common.glsl"

layout(set = 0, binding = 0) readonly buffer Delta { float delta[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 2) buffer W { float w[]; };
layout(set = 0, binding = 3) buffer OldW { float oldw[]; };

layout(push_constant) uniform Params {
  uint n_in, n_out;     // 0, 4 (the plan guarantees (n_in+1)·n_out < 2^32)
  float eta, momentum;  // 8, 12
} pc;

void main() {
  const uint i = linear_id();
  if (pc.n_out == 0u || i >= (pc.n_in + 1u) * pc.n_out) return;
  const uint r = i / pc.n_out, j = i - r * pc.n_out;
  const float xr = r == 0u ? 1.0 : x[r - 1u];
  const float d = pc.eta * delta[j] * xr + pc.momentum * oldw[i];
  w[i] += d;
  oldw[i] = d;
}
