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

// u32 C = A·B modulo 2^32. i-k-j order over (k, j) blocks that keep the B block in L2; the j loop
// is a vectorised multiply-add over a contiguous C row segment.
constexpr uint64_t kKBlock = 128;
constexpr uint64_t kJBlock = 512;  // 128×512 u32 = 256 KiB of B per block

int mmul_u32(uint64_t n, const uint32_t* __restrict a, const uint32_t* __restrict b,
             uint32_t* __restrict out, const KernelCtx& c) {
  std::fill_n(out, n * n, 0u);
  for (uint64_t j0 = 0; j0 < n; j0 += kJBlock) {
    const uint64_t j1 = std::min(n, j0 + kJBlock);
    for (uint64_t k0 = 0; k0 < n; k0 += kKBlock) {
      const uint64_t k1 = std::min(n, k0 + kKBlock);
      for (uint64_t i = 0; i < n; i++) {
        // ≤ 64 K multiply-adds per row block: polling here is far finer than needed, and cheap.
        if ((i & 15) == 0 && cancelled(c)) return -ECANCELED;
        uint32_t* crow = out + i * n;
        const uint32_t* arow = a + i * n;
        for (uint64_t k = k0; k < k1; k++) {
          const uint32_t aik = arow[k];
          const uint32_t* brow = b + k * n;
          for (uint64_t j = j0; j < j1; j++) crow[j] += aik * brow[j];
        }
      }
    }
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
  return mmul_u32(n, buf<uint32_t>(c, 0), buf<uint32_t>(c, 1), buf<uint32_t>(c, 2), c);
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
