// Single-precision GEMM for K_FMMUL, the LUD trailing update and the engine benchmark.
// With OpenBLAS (VUGPU_HAVE_OPENBLAS, set by binding.gyp when libopenblas-dev is installed) this
// is cblas_sgemm pinned to one thread: the job pool, not BLAS, provides parallelism. Without it,
// a packed, register-blocked loop (6×16 micro-tile held in 12 AVX registers, K blocked to stay in
// L1/L2) that reaches a useful fraction of one core's FMA peak.
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

#include "kernel_common.h"

#ifdef VUGPU_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace vugpu {
namespace kern {
namespace {

// ---------------- portable fallback ----------------
constexpr int MR = 6;     // micro-tile rows
constexpr int NR = 16;    // micro-tile columns (two 8-float vectors)
constexpr int KC = 256;   // depth of one packed block: an MR×KC A panel + KC×NR B panel stay in L1
constexpr int MC = 120;   // rows of A packed at a time (MC×KC floats ≈ 120 KiB, L2)
constexpr int NC = 2048;  // columns of B packed at a time (KC×NC floats = 2 MiB)

typedef float v8 __attribute__((vector_size(32)));

inline v8 splat(float x) { return v8{x, x, x, x, x, x, x, x}; }
inline v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, v8 v) { std::memcpy(p, &v, sizeof v); }
inline v8 fma8(v8 a, v8 b, v8 c) {
#ifdef __FMA__
  return __builtin_ia32_vfmaddps256(a, b, c);
#else
  return a * b + c;
#endif
}

// Pack rows [0, mc) × depth [0, kc) of A (scaled by alpha) into MR-row panels, column-major
// inside a panel, zero-padding the last panel.
void pack_a(int mc, int kc, float alpha, const float* a, int lda, float* ap) {
  for (int i0 = 0; i0 < mc; i0 += MR) {
    const int mr = std::min(MR, mc - i0);
    for (int p = 0; p < kc; p++) {
      for (int r = 0; r < mr; r++) ap[r] = alpha * a[static_cast<size_t>(i0 + r) * lda + p];
      for (int r = mr; r < MR; r++) ap[r] = 0.0f;
      ap += MR;
    }
  }
}

// Pack depth [0, kc) × columns [0, nc) of B into NR-column panels, row-major inside a panel.
void pack_b(int kc, int nc, const float* b, int ldb, float* bp) {
  for (int j0 = 0; j0 < nc; j0 += NR) {
    const int nr = std::min(NR, nc - j0);
    for (int p = 0; p < kc; p++) {
      const float* src = b + static_cast<size_t>(p) * ldb + j0;
      if (nr == NR) {
        std::memcpy(bp, src, NR * sizeof(float));
      } else {
        for (int j = 0; j < nr; j++) bp[j] = src[j];
        for (int j = nr; j < NR; j++) bp[j] = 0.0f;
      }
      bp += NR;
    }
  }
}

// C[mr×nr] += Ap-panel · Bp-panel over kc. Accumulates in registers, touches C once.
void micro_kernel(int kc, const float* ap, const float* bp, float* c, int ldc, int mr, int nr) {
  v8 acc[MR][2] = {};
  for (int p = 0; p < kc; p++) {
    const v8 b0 = load8(bp), b1 = load8(bp + 8);
    for (int r = 0; r < MR; r++) {
      const v8 a = splat(ap[r]);
      acc[r][0] = fma8(a, b0, acc[r][0]);
      acc[r][1] = fma8(a, b1, acc[r][1]);
    }
    ap += MR;
    bp += NR;
  }
  if (mr == MR && nr == NR) {
    for (int r = 0; r < MR; r++) {
      float* cr = c + static_cast<size_t>(r) * ldc;
      store8(cr, load8(cr) + acc[r][0]);
      store8(cr + 8, load8(cr + 8) + acc[r][1]);
    }
  } else {
    alignas(32) float tile[MR][NR];
    for (int r = 0; r < MR; r++) {
      store8(tile[r], acc[r][0]);
      store8(tile[r] + 8, acc[r][1]);
    }
    for (int r = 0; r < mr; r++)
      for (int j = 0; j < nr; j++) c[static_cast<size_t>(r) * ldc + j] += tile[r][j];
  }
}

void scale_c(int m, int n, float beta, float* c, int ldc) {
  if (beta == 1.0f) return;
  for (int i = 0; i < m; i++) {
    float* row = c + static_cast<size_t>(i) * ldc;
    if (beta == 0.0f) {
      std::fill_n(row, n, 0.0f);  // BLAS semantics: beta = 0 ignores NaN/Inf already in C
    } else {
      for (int j = 0; j < n; j++) row[j] *= beta;
    }
  }
}

int gemm_fallback(int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                  int ldb, float beta, float* c, int ldc, const std::atomic<bool>* cancel) {
  scale_c(m, n, beta, c, ldc);
  if (k == 0 || alpha == 0.0f) return 0;
  // Packing buffers live per thread: kernels run on pool threads, one job at a time each.
  thread_local std::unique_ptr<float[]> apack, bpack;
  if (!apack) {
    apack.reset(new (std::align_val_t(64)) float[static_cast<size_t>(MC + MR) * KC]);
    bpack.reset(new (std::align_val_t(64)) float[static_cast<size_t>(KC) * (NC + NR)]);
  }
  for (int jc = 0; jc < n; jc += NC) {
    const int nc = std::min(NC, n - jc);
    for (int pc = 0; pc < k; pc += KC) {
      const int kc = std::min(KC, k - pc);
      pack_b(kc, nc, b + static_cast<size_t>(pc) * ldb + jc, ldb, bpack.get());
      for (int ic = 0; ic < m; ic += MC) {
        // One MC×NC×KC block is ≤ 126 MFLOP, a few ms: the cancel granularity.
        if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) return -ECANCELED;
        const int mc = std::min(MC, m - ic);
        pack_a(mc, kc, alpha, a + static_cast<size_t>(ic) * lda + pc, lda, apack.get());
        for (int jr = 0; jr < nc; jr += NR) {
          const float* bp = bpack.get() + static_cast<size_t>(jr) * kc;
          for (int ir = 0; ir < mc; ir += MR) {
            micro_kernel(kc, apack.get() + static_cast<size_t>(ir) * kc, bp,
                         c + static_cast<size_t>(ic + ir) * ldc + jc + jr, ldc,
                         std::min(MR, mc - ir), std::min(NR, nc - jr));
          }
        }
      }
    }
  }
  return 0;
}

#ifdef VUGPU_HAVE_OPENBLAS
void blas_single_thread() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}
#endif

}  // namespace

int gemm_f32(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
             float beta, float* c, int ldc, const std::atomic<bool>* cancel) {
  if (m <= 0 || n <= 0) return 0;
#ifdef VUGPU_HAVE_OPENBLAS
  if (k <= 0) {
    scale_c(m, n, beta, c, ldc);
    return 0;
  }
  blas_single_thread();
  // cblas_sgemm cannot be interrupted, so split C into row panels of ~2^27 FLOP (a couple of ms
  // at OpenBLAS speed) and poll between them; ≥ 32 rows keeps BLAS efficient.
  int rows = m;
  if (cancel != nullptr) {
    const uint64_t per_row = 2ull * static_cast<uint64_t>(n) * static_cast<uint64_t>(k);
    rows = static_cast<int>(std::clamp<uint64_t>((1ull << 27) / per_row, 32, m));
  }
  for (int i = 0; i < m; i += rows) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) return -ECANCELED;
    const int mr = std::min(rows, m - i);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mr, n, k, alpha,
                a + static_cast<size_t>(i) * lda, lda, b, ldb, beta,
                c + static_cast<size_t>(i) * ldc, ldc);
  }
  return 0;
#else
  return gemm_fallback(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, cancel);
#endif
}

// Exposed for the standalone benchmark harness, so both paths can be timed in one build.
int gemm_f32_fallback(int m, int n, int k, const float* a, const float* b, float* c) {
  return gemm_fallback(m, n, k, 1.0f, a, k, b, n, 0.0f, c, n, nullptr);
}

}  // namespace kern

void sgemm_rowmajor(int m, int n, int k, const float* a, const float* b, float* c) {
  kern::gemm_f32(m, n, k, 1.0f, a, std::max(k, 1), b, std::max(n, 1), 0.0f, c, std::max(n, 1),
                 nullptr);
}

bool have_openblas() {
#ifdef VUGPU_HAVE_OPENBLAS
  return true;
#else
  return false;
#endif
}

}  // namespace vugpu
