// Dense n×n matrix kernels of GPUvm's micro-benchmarks: MADD/FMADD (C = A + B) and MMUL/FMMUL
// (C = A·B). Buffers: A, B, C, each n*n elements, row-major. Params: u32 n.
#include <algorithm>

#include "kernel_common.h"

namespace vugpu::kern {
namespace {

// n from the params and the element count n*n, after checking all three buffers hold it.
bool square_dims(const KernelCtx& c, uint64_t* n_out) {
  const uint64_t n = param_u32(c, 0);
  if (n > kMaxDim) return false;
  for (int i = 0; i < 3; i++)
    if (!fits(c, i, n, n, 4)) return false;
  *n_out = n;
  return true;
}

// Elementwise: exact aliasing (C == A) is fine, so no restrict; the compiler vectorises after
// its own runtime overlap check.
template <typename T>
int add_kernel(const KernelCtx& c) {
  uint64_t n;
  if (!square_dims(c, &n)) return -EINVAL;
  const T* a = buf<T>(c, 0);
  const T* b = buf<T>(c, 1);
  T* out = buf<T>(c, 2);
  const uint64_t total = n * n;
  for (uint64_t i0 = 0; i0 < total; i0 += kPollChunk) {
    if (cancelled(c)) return -ECANCELED;
    const uint64_t end = std::min<uint64_t>(total, i0 + kPollChunk);
    for (uint64_t i = i0; i < end; i++) out[i] = a[i] + b[i];  // u32 wraps (unsigned)
  }
  return 0;
}

}  // namespace

int k_madd(const KernelCtx& c) { return add_kernel<uint32_t>(c); }
int k_fmadd(const KernelCtx& c) { return add_kernel<float>(c); }

int k_mmul(const KernelCtx& c) {
  uint64_t n;
  if (!square_dims(c, &n)) return -EINVAL;
  if (overlap(c, 2, 0) || overlap(c, 2, 1)) return -EINVAL;  // C is written while A, B are read
  // The packed GEMM loop on u32 lanes (gemm.cc): same blocking as the f32 fallback.
  return gemm_u32(static_cast<int>(n), buf<uint32_t>(c, 0), buf<uint32_t>(c, 1),
                  buf<uint32_t>(c, 2), c.cancel);
}

int k_fmmul(const KernelCtx& c) {
  uint64_t n;
  if (!square_dims(c, &n)) return -EINVAL;
  if (overlap(c, 2, 0) || overlap(c, 2, 1)) return -EINVAL;
  if (n == 0) return 0;
  const int ni = static_cast<int>(n);
  return gemm_f32(ni, ni, ni, 1.0f, buf<float>(c, 0), ni, buf<float>(c, 1), ni, 0.0f,
                  buf<float>(c, 2), ni, c.cancel);
}

}  // namespace vugpu::kern
