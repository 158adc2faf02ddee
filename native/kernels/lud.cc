// LU decomposition (Rodinia LUD): blocked, in place, no pivoting (Doolittle: L has a unit
// diagonal and is stored below it, U on and above it). For block step s the block offset is
// o = s·bs and the block size b = min(bs, n − o); the host runs, for s = 0 … S−2 with
// S = ceil(n/bs): diagonal(s), perimeter(s), internal(s); then diagonal(S−1).
//   diagonal:  A11 = L11·U11 (unblocked right-looking LU of the b×b diagonal block)
//   perimeter: U12 = L11⁻¹·A12 (row panel), L21 = A21·U11⁻¹ (column panel)
//   internal:  A22 −= L21·U12 (trailing update: a GEMM, BLAS when available)
// A zero pivot gives Inf/NaN, as on the GPU: inputs are expected to be diagonally dominant.
#include <algorithm>

#include "kernel_common.h"

namespace vugpu::kern {
namespace {

struct LudStep {
  uint64_t n, o, b;  // matrix order, block offset, block size at this step
  float* a;
};

// Buffer: 0 matrix n×n f32. Params: u32 n, u32 bs, u32 step.
bool lud_step(const KernelCtx& c, LudStep* s) {
  const uint64_t n = param_u32(c, 0);
  const uint64_t bs = param_u32(c, 4);
  const uint64_t step = param_u32(c, 8);
  if (n == 0 || n > kMaxDim || bs == 0 || !fits(c, 0, n, n, 4)) return false;
  if (step >= (n + bs - 1) / bs) return false;
  s->n = n;
  s->o = step * bs;
  s->b = std::min(bs, n - s->o);
  s->a = buf<float>(c, 0);
  return true;
}

constexpr uint64_t kColChunk = 512;  // row-panel columns handled together (stay in L2)

}  // namespace

int k_lud_diagonal(const KernelCtx& c) {
  LudStep s;
  if (!lud_step(c, &s)) return -EINVAL;
  float* d = s.a + s.o * s.n + s.o;  // block origin; row stride n
  const uint64_t n = s.n, b = s.b;
  for (uint64_t k = 0; k < b; k++) {
    if (k % 64 == 0 && cancelled(c)) return -ECANCELED;
    const float* __restrict rk = d + k * n;
    const float pivot = rk[k];
    for (uint64_t i = k + 1; i < b; i++) {
      float* __restrict ri = d + i * n;
      const float l = ri[k] / pivot;
      ri[k] = l;
      for (uint64_t j = k + 1; j < b; j++) ri[j] -= l * rk[j];
    }
  }
  return 0;
}

int k_lud_perimeter(const KernelCtx& c) {
  LudStep s;
  if (!lud_step(c, &s)) return -EINVAL;
  const uint64_t n = s.n, b = s.b, o = s.o, rest = o + b;
  float* d = s.a + o * n + o;
  // Row panel A12 (rows o..o+b, columns rest..n): forward substitution with unit-lower L11,
  // row by row so the inner loop runs along contiguous panel rows.
  for (uint64_t j0 = rest; j0 < n; j0 += kColChunk) {
    if (cancelled(c)) return -ECANCELED;
    const uint64_t j1 = std::min(n, j0 + kColChunk);
    for (uint64_t i = 1; i < b; i++) {
      float* __restrict ri = s.a + (o + i) * n;
      for (uint64_t k = 0; k < i; k++) {
        const float l = d[i * n + k];
        const float* __restrict rk = s.a + (o + k) * n;
        for (uint64_t j = j0; j < j1; j++) ri[j] -= l * rk[j];
      }
    }
  }
  // Column panel A21 (rows rest..n, columns o..o+b): solve x·U11 = row for each row.
  for (uint64_t r = rest; r < n; r++) {
    if ((r - rest) % 64 == 0 && cancelled(c)) return -ECANCELED;
    float* __restrict row = s.a + r * n + o;
    for (uint64_t k = 0; k < b; k++) {
      const float* __restrict uk = d + k * n;
      const float x = row[k] / uk[k];
      row[k] = x;
      for (uint64_t j = k + 1; j < b; j++) row[j] -= x * uk[j];
    }
  }
  return 0;
}

int k_lud_internal(const KernelCtx& c) {
  LudStep s;
  if (!lud_step(c, &s)) return -EINVAL;
  const uint64_t n = s.n, b = s.b, o = s.o, rest = o + b;
  if (rest >= n) return 0;
  const int m = static_cast<int>(n - rest), ld = static_cast<int>(n);
  // The three operands are disjoint regions of the one matrix.
  return gemm_f32(m, m, static_cast<int>(b), -1.0f, s.a + rest * n + o, ld, s.a + o * n + rest, ld,
                  1.0f, s.a + rest * n + rest, ld, c.cancel);
}

}  // namespace vugpu::kern
