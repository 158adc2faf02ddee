#version 450
// K_FMADD: C = A + B elementwise over n×n floats. C may be exactly A or B: each
// invocation reads and writes only its own element.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
#include "common.glsl"

layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) buffer C { float c[]; };

layout(push_constant) uniform Params {
  uint n;  // the plan guarantees n*n < 2^32
} pc;

void main() {
  uint i = linear_id();
  if (i < pc.n * pc.n) c[i] = a[i] + b[i];
}
