#version 450
// K_MEMSET: dst[i] = pattern for i < count.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
#include "common.glsl"

layout(set = 0, binding = 0) buffer Dst { uint dst[]; };

layout(push_constant) uniform Params {
  uint pattern;   // 0
  uint reserved;  // 4
  uint count_lo;  // 8: u64 count; the plan guarantees count < 2^32
  uint count_hi;  // 12
} pc;

void main() {
  const uint i = linear_id();
  if (i < pc.count_lo) dst[i] = pc.pattern;
}
