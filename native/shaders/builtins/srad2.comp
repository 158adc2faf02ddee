#version 450
// K_SRAD2: J += (lambda/4)·(c·dN + c[S]·dS + c·dW + c[E]·dE), c[S], c[E] clamped to the image.
// J is updated in place; each invocation reads and writes only its own pixel of J.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
#include "common.glsl"

layout(set = 0, binding = 0) buffer J { float img[]; };
layout(set = 0, binding = 1) readonly buffer DN { float dn[]; };
layout(set = 0, binding = 2) readonly buffer DS { float ds[]; };
layout(set = 0, binding = 3) readonly buffer DW { float dw[]; };
layout(set = 0, binding = 4) readonly buffer DE { float de[]; };
layout(set = 0, binding = 5) readonly buffer Cf { float cf[]; };

layout(push_constant) uniform Params {
  uint rows, cols;  // 0, 4 (the plan guarantees rows·cols < 2^32)
  float lambda;     // 8
} pc;

void main() {
  const uint i = linear_id();
  if (pc.cols == 0u || i >= pc.rows * pc.cols) return;
  const uint r = i / pc.cols, c = i - r * pc.cols;
  const float cc = cf[i];
  const float cs = r + 1u < pc.rows ? cf[i + pc.cols] : cc;
  const float ce = c + 1u < pc.cols ? cf[i + 1u] : cc;
  img[i] += (0.25 * pc.lambda) * (cc * dn[i] + cs * ds[i] + cc * dw[i] + ce * de[i]);
}
