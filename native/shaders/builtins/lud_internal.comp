#version 450
// K_LUD_INTERNAL: trailing update of blocked LU step s, a[rest..n)[rest..n) −= L21·U12, with
// o = s·bs, b = min(bs, n − o), rest = o + b; L21 = a[rest..n)[o..o+b), U12 = a[o..o+b)[rest..n).
// The three regions of the one matrix are disjoint. A GEMM with k = b (gemm.glsl); the plan
// splits k past 960,000 and each slice subtracts its part.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 16, local_size_y = 16) in;

layout(set = 0, binding = 0) buffer Matrix { float a[]; };

layout(push_constant) uniform Params {
  uint n, bs, step;  // docs/kernels.md: u32 n, bs, step at 0, 4, 8 (the plan checks them)
  uint k0, k1;       // 12, 16: the slice of the block's k this launch subtracts
} pc;

uint g_o, g_rest;

#define GEMM_T float
#define GEMM_V4 vec4
#define GEMM_ZERO 0.0
float gemm_a(uint row, uint k) { return a[(g_rest + row) * pc.n + g_o + k]; }
float gemm_b(uint k, uint col) { return a[(g_o + k) * pc.n + g_rest + col]; }
void gemm_store(uint row, uint col, float v) { a[(g_rest + row) * pc.n + g_rest + col] -= v; }
#include "gemm.glsl"

void main() {
  g_o = pc.step * pc.bs;
  g_rest = g_o + min(pc.bs, pc.n - g_o);
  const uint m = pc.n - g_rest;
  gemm_tile(m, m, pc.k0, pc.k1);
}
