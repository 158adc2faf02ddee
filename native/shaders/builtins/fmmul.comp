#version 450
// K_FMMUL: C = A·B for n×n float matrices, tiled (gemm.glsl). C must not
// overlap A or B (the engine checks, as the native kernel does). The plan splits k into slices
// of at most 960,000 (never, for any n a binding can hold); later slices add into C.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 16, local_size_y = 16) in;

layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) buffer C { float c[]; };

layout(push_constant) uniform Params {
  uint n;           // docs/kernels.md: u32 n at 0 (the plan guarantees n*n < 2^32)
  uint k0, k1;      // 4, 8: the slice of k this launch sums
  uint accumulate;  // 12: 0 = C = sum, 1 = C += sum
} pc;

#define GEMM_T float
#define GEMM_V4 vec4
#define GEMM_ZERO 0.0
float gemm_a(uint row, uint k) { return a[row * pc.n + k]; }
float gemm_b(uint k, uint col) { return b[k * pc.n + col]; }
void gemm_store(uint row, uint col, float v) {
  const uint i = row * pc.n + col;
  if (pc.accumulate != 0u) v += c[i];
  c[i] = v;
}
#include "gemm.glsl"

void main() { gemm_tile(pc.n, pc.n, pc.k0, pc.k1); }
