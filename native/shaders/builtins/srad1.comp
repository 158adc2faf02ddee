#version 450
// K_SRAD1: per pixel of J (neighbours clamped), the four differences and the diffusion
// coefficient:
//   G2 = (dN² + dS² + dW² + dE²)/J²;  L = (dN + dS + dW + dE)/J
//   q2 = (G2/2 − L²/16)/(1 + L/4)²;   c = clamp(1/(1 + (q2 − q0sqr)/(q0sqr·(1 + q0sqr))), 0, 1)
// (the clamp as comparisons, so a NaN passes through as in the native kernel).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
#include "common.glsl"

layout(set = 0, binding = 0) readonly buffer J { float img[]; };
layout(set = 0, binding = 1) buffer DN { float dn[]; };
layout(set = 0, binding = 2) buffer DS { float ds[]; };
layout(set = 0, binding = 3) buffer DW { float dw[]; };
layout(set = 0, binding = 4) buffer DE { float de[]; };
layout(set = 0, binding = 5) buffer Cf { float cf[]; };

layout(push_constant) uniform Params {
  uint rows, cols;  // 0, 4 (the plan guarantees rows·cols < 2^32)
  float q0sqr;      // 8
} pc;

void main() {
  const uint i = linear_id();
  if (pc.cols == 0u || i >= pc.rows * pc.cols) return;
  const uint r = i / pc.cols, c = i - r * pc.cols;
  const float jc = img[i];
  const float n = (r > 0u ? img[i - pc.cols] : jc) - jc;
  const float s = (r + 1u < pc.rows ? img[i + pc.cols] : jc) - jc;
  const float w = (c > 0u ? img[i - 1u] : jc) - jc;
  const float e = (c + 1u < pc.cols ? img[i + 1u] : jc) - jc;
  dn[i] = n;
  ds[i] = s;
  dw[i] = w;
  de[i] = e;
  const float g2 = (n * n + s * s + w * w + e * e) / (jc * jc);
  const float l = (n + s + w + e) / jc;
  const float num = 0.5 * g2 - (1.0 / 16.0) * (l * l);
  const float den0 = 1.0 + 0.25 * l;
  const float qsqr = num / (den0 * den0);
  const float den = (qsqr - pc.q0sqr) / (pc.q0sqr * (1.0 + pc.q0sqr));
  const float cv = 1.0 / (1.0 + den);
  cf[i] = cv < 0.0 ? 0.0 : (cv > 1.0 ? 1.0 : cv);
}
