// Shared helpers for the compute kernels (native/kernels/*.cc). Internal to the kernel library:
// the job pool only sees native/include/kernels.h.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "kernels.h"

namespace vugpu::kern {

// Every kernel entry point has this shape; run_kernel has already checked the buffer count, the
// minimum parameter size and 4-byte alignment of every window (see dispatch.cc).
using KernelFn = int (*)(const KernelCtx&);

// ---- parameter block readers (little-endian; memcpy keeps them alignment-safe) ----
inline uint32_t param_u32(const KernelCtx& c, size_t off) {
  uint32_t v;
  std::memcpy(&v, c.params + off, 4);
  return v;
}
inline uint64_t param_u64(const KernelCtx& c, size_t off) {
  uint64_t v;
  std::memcpy(&v, c.params + off, 8);
  return v;
}
inline float param_f32(const KernelCtx& c, size_t off) {
  float v;
  std::memcpy(&v, c.params + off, 4);
  return v;
}

// ---- size checks: every byte count derived from params goes through these ----
// Largest dimension any kernel accepts: keeps every index product in int64 and within the
// int arguments of cblas, whatever the buffer lengths are.
constexpr uint64_t kMaxDim = 1u << 30;

// a*b*c (elements) * elem (bytes), or false on overflow.
inline bool bytes_of(uint64_t a, uint64_t b, uint64_t elem, uint64_t* out) {
  uint64_t t;
  if (__builtin_mul_overflow(a, b, &t)) return false;
  if (__builtin_mul_overflow(t, elem, out)) return false;
  return true;
}

// Buffer i holds at least a*b elements of elem bytes.
inline bool fits(const KernelCtx& c, int i, uint64_t a, uint64_t b, uint64_t elem) {
  uint64_t need;
  if (!bytes_of(a, b, elem, &need)) return false;
  return need <= c.lens[i];
}

// Byte ranges of windows i and j overlap (an output must not overlap an input it reads from
// other positions; elementwise kernels allow exact aliasing and do not call this).
inline bool overlap(const KernelCtx& c, int i, int j) {
  auto a = reinterpret_cast<uintptr_t>(c.bufs[i]);
  auto b = reinterpret_cast<uintptr_t>(c.bufs[j]);
  if (c.lens[i] == 0 || c.lens[j] == 0) return false;
  return a < b + c.lens[j] && b < a + c.lens[i];
}

inline bool cancelled(const KernelCtx& c) {
  return c.cancel != nullptr && c.cancel->load(std::memory_order_relaxed);
}

template <typename T>
inline T* buf(const KernelCtx& c, int i) {
  return static_cast<T*>(c.bufs[i]);
}

// Elements processed between two cancel polls in streaming kernels: ~1 MiB of traffic, well
// under a millisecond.
constexpr size_t kPollChunk = 1u << 18;

// ---- entry points, one group per file ----
int k_nop(const KernelCtx&);      // basic.cc
int k_loop(const KernelCtx&);
int k_memset(const KernelCtx&);
int k_madd(const KernelCtx&);     // matrix.cc
int k_fmadd(const KernelCtx&);
int k_mmul(const KernelCtx&);
int k_fmmul(const KernelCtx&);
int k_bp_forward(const KernelCtx&);  // backprop.cc
int k_bp_adjust(const KernelCtx&);
int k_bfs(const KernelCtx&);         // bfs.cc
int k_hotspot(const KernelCtx&);     // hotspot.cc
int k_lud_diagonal(const KernelCtx&);   // lud.cc
int k_lud_perimeter(const KernelCtx&);
int k_lud_internal(const KernelCtx&);
int k_srad1(const KernelCtx&);       // srad.cc
int k_srad2(const KernelCtx&);

// C[m×n] = alpha * A[m×k] · B[k×n] + beta * C, row-major with leading dimensions (gemm.cc).
// Uses OpenBLAS when built with it, else the blocked C++ loop. Polls cancel between row panels
// when cancel is non-null; returns 0 or -ECANCELED.
int gemm_f32(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
             float beta, float* c, int ldc, const std::atomic<bool>* cancel);
// The C++ loop alone (C = A·B, dense), whatever the build: lets a benchmark time both paths.
int gemm_f32_fallback(int m, int n, int k, const float* a, const float* b, float* c);
// u32 C[n×n] = A·B mod 2^32 with the same packed loop (K_MMUL).
int gemm_u32(int n, const uint32_t* a, const uint32_t* b, uint32_t* c,
             const std::atomic<bool>* cancel);

}  // namespace vugpu::kern
