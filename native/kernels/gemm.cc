// GEMM for K_FMMUL, the LUD trailing update and the engine benchmark (f32), and for K_MMUL (u32).
// Where OpenBLAS is installed (libopenblas.so.0, opened at the first f32 GEMM) this is
// cblas_sgemm pinned to one thread: the job pool, not BLAS, provides parallelism. It is opened,
// not linked, so that the addon loads without it (a bundle may leave it out). Without it,
// a packed, register-blocked loop (6×16 micro-tile held in 12 AVX registers, K blocked to stay in
// L1/L2) that comes within ~10% of OpenBLAS on one core. The same loop, on u32 lanes, is MMUL.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

#include "kernel_common.h"

namespace vugpu {
namespace kern {
namespace {

// ---------------- portable fallback ----------------
constexpr int MR = 6;     // micro-tile rows
constexpr int NR = 16;    // micro-tile columns (two 8-float vectors)
constexpr int KC = 256;   // depth of one packed block: an MR×KC A panel + KC×NR B panel stay in L1
constexpr int MC = 120;   // rows of A packed at a time (MC×KC floats ≈ 120 KiB, L2)
constexpr int NC = 2048;  // columns of B packed at a time (KC×NC floats = 2 MiB)

// Eight lanes of T (float or uint32_t) in one AVX register; GCC vector extensions keep this
// free of intrinsics while compiling to vfmadd231ps / vpmulld+vpaddd.
template <typename T>
struct Vec8;
template <>
struct Vec8<float> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct Vec8<uint32_t> {
  typedef uint32_t type __attribute__((vector_size(32)));
};
template <typename T>
using vec8 = typename Vec8<T>::type;

template <typename T>
inline vec8<T> splat(T x) {
  return vec8<T>{x, x, x, x, x, x, x, x};
}
template <typename T>
inline vec8<T> load8(const T* p) {
  vec8<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
inline void store8(T* p, vec8<T> v) {
  std::memcpy(p, &v, sizeof v);
}
// c + a·b per lane (overloads: vector types cannot be deduced through the Vec8 trait).
inline vec8<uint32_t> madd8(vec8<uint32_t> a, vec8<uint32_t> b, vec8<uint32_t> c) {
  return a * b + c;  // wraps mod 2^32
}
inline vec8<float> madd8(vec8<float> a, vec8<float> b, vec8<float> c) {
#ifdef __FMA__
  return __builtin_ia32_vfmaddps256(a, b, c);  // explicit: -std=c++20 does not contract a*b+c
#else
  return a * b + c;
#endif
}

// Pack rows [0, mc) × depth [0, kc) of A (scaled by alpha) into MR-row panels, column-major
// inside a panel, zero-padding the last panel.
template <typename T>
void pack_a(int mc, int kc, T alpha, const T* a, int lda, T* ap) {
  for (int i0 = 0; i0 < mc; i0 += MR) {
    const int mr = std::min(MR, mc - i0);
    for (int p = 0; p < kc; p++) {
      for (int r = 0; r < mr; r++) ap[r] = alpha * a[static_cast<size_t>(i0 + r) * lda + p];
      for (int r = mr; r < MR; r++) ap[r] = T(0);
      ap += MR;
    }
  }
}

// Pack depth [0, kc) × columns [0, nc) of B into NR-column panels, row-major inside a panel.
template <typename T>
void pack_b(int kc, int nc, const T* b, int ldb, T* bp) {
  for (int j0 = 0; j0 < nc; j0 += NR) {
    const int nr = std::min(NR, nc - j0);
    for (int p = 0; p < kc; p++) {
      const T* src = b + static_cast<size_t>(p) * ldb + j0;
      if (nr == NR) {
        std::memcpy(bp, src, NR * sizeof(T));
      } else {
        for (int j = 0; j < nr; j++) bp[j] = src[j];
        for (int j = nr; j < NR; j++) bp[j] = T(0);
      }
      bp += NR;
    }
  }
}

// C[mr×nr] += Ap-panel · Bp-panel over kc. Accumulates in registers, touches C once.
template <typename T>
void micro_kernel(int kc, const T* ap, const T* bp, T* c, int ldc, int mr, int nr) {
  vec8<T> acc[MR][2] = {};
  for (int p = 0; p < kc; p++) {
    const vec8<T> b0 = load8(bp), b1 = load8(bp + 8);
    for (int r = 0; r < MR; r++) {
      const vec8<T> a = splat(ap[r]);
      acc[r][0] = madd8(a, b0, acc[r][0]);
      acc[r][1] = madd8(a, b1, acc[r][1]);
    }
    ap += MR;
    bp += NR;
  }
  if (mr == MR && nr == NR) {
    for (int r = 0; r < MR; r++) {
      T* cr = c + static_cast<size_t>(r) * ldc;
      store8(cr, load8(cr) + acc[r][0]);
      store8(cr + 8, load8(cr + 8) + acc[r][1]);
    }
  } else {
    alignas(32) T tile[MR][NR];
    for (int r = 0; r < MR; r++) {
      store8(tile[r], acc[r][0]);
      store8(tile[r] + 8, acc[r][1]);
    }
    for (int r = 0; r < mr; r++)
      for (int j = 0; j < nr; j++) c[static_cast<size_t>(r) * ldc + j] += tile[r][j];
  }
}

template <typename T>
void scale_c(int m, int n, T beta, T* c, int ldc) {
  if (beta == T(1)) return;
  for (int i = 0; i < m; i++) {
    T* row = c + static_cast<size_t>(i) * ldc;
    if (beta == T(0)) {
      std::fill_n(row, n, T(0));  // BLAS semantics: beta = 0 ignores NaN/Inf already in C
    } else {
      for (int j = 0; j < n; j++) row[j] *= beta;
    }
  }
}

template <typename T>
int gemm_packed(int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta,
                T* c, int ldc, const std::atomic<bool>* cancel) {
  scale_c(m, n, beta, c, ldc);
  if (m <= 0 || n <= 0 || k <= 0 || alpha == T(0)) return 0;
  // Packing buffers live per thread (pool threads run one job at a time), one pair per type.
  struct Aligned {
    void operator()(T* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  thread_local std::unique_ptr<T[], Aligned> apack, bpack;
  if (!apack) {
    apack.reset(new (std::align_val_t(64)) T[static_cast<size_t>(MC + MR) * KC]);
    bpack.reset(new (std::align_val_t(64)) T[static_cast<size_t>(KC) * (NC + NR)]);
  }
  for (int jc = 0; jc < n; jc += NC) {
    const int nc = std::min(NC, n - jc);
    for (int pc = 0; pc < k; pc += KC) {
      const int kc = std::min(KC, k - pc);
      pack_b(kc, nc, b + static_cast<size_t>(pc) * ldb + jc, ldb, bpack.get());
      for (int ic = 0; ic < m; ic += MC) {
        // One MC×NC×KC block is ≤ 63 M multiply-adds, a few ms: the cancel granularity.
        if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) return -ECANCELED;
        const int mc = std::min(MC, m - ic);
        pack_a(mc, kc, alpha, a + static_cast<size_t>(ic) * lda + pc, lda, apack.get());
        for (int jr = 0; jr < nc; jr += NR) {
          const T* bp = bpack.get() + static_cast<size_t>(jr) * kc;
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

// The two OpenBLAS entry points used, as the CBLAS ABI defines them (row-major 101, no-trans 111).
using SgemmFn = void (*)(int order, int transA, int transB, int m, int n, int k, float alpha, const float* a,
                         int lda, const float* b, int ldb, float beta, float* c, int ldc);
constexpr int kCblasRowMajor = 101;
constexpr int kCblasNoTrans = 111;

/** cblas_sgemm of libopenblas.so.0, set to one thread; null where OpenBLAS is not installed. */
SgemmFn Blas() {
  static SgemmFn fn = [] () -> SgemmFn {
    void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return nullptr;
    auto sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
    auto threads = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"));
    if (sgemm == nullptr || threads == nullptr) return nullptr;
    threads(1);
    return sgemm;
  }();
  return fn;
}

}  // namespace

int gemm_f32(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
             float beta, float* c, int ldc, const std::atomic<bool>* cancel) {
  if (m <= 0 || n <= 0) return 0;
  const SgemmFn sgemm = Blas();
  if (sgemm == nullptr) return gemm_packed(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, cancel);
  if (k <= 0) {
    scale_c(m, n, beta, c, ldc);
    return 0;
  }
  // cblas_sgemm cannot be interrupted, so a long product is cut into pieces of ~2^28 FLOP
  // (~3 ms) with a cancel poll between them. Cutting along k is free (OpenBLAS blocks k by ~256
  // and repacks per block anyway; later pieces accumulate with beta = 1); cutting rows makes it
  // repack B per piece, which costs ~5% at 256 rows and ~15% at 64, so rows stay ≥ 128.
  constexpr uint64_t kPieceFlop = 1ull << 28;
  int kstep = k, rows = m;
  const uint64_t total = 2ull * static_cast<uint64_t>(m) * n * k;
  if (cancel != nullptr && total > kPieceFlop) {
    kstep = std::min(k, 256);
    const uint64_t per_row = 2ull * static_cast<uint64_t>(n) * kstep;
    rows = static_cast<int>(std::clamp<uint64_t>(kPieceFlop / per_row, std::min(m, 128), m));
  }
  for (int p = 0; p < k; p += kstep) {
    const int kc = std::min(kstep, k - p);
    for (int i = 0; i < m; i += rows) {
      if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) return -ECANCELED;
      const int mr = std::min(rows, m - i);
      sgemm(kCblasRowMajor, kCblasNoTrans, kCblasNoTrans, mr, n, kc, alpha,
            a + static_cast<size_t>(i) * lda + p, lda, b + static_cast<size_t>(p) * ldb, ldb,
            p == 0 ? beta : 1.0f, c + static_cast<size_t>(i) * ldc, ldc);
    }
  }
  return 0;
}

// Exposed for the standalone benchmark harness, so both paths can be timed in one build.
int gemm_f32_fallback(int m, int n, int k, const float* a, const float* b, float* c) {
  return gemm_packed(m, n, k, 1.0f, a, k, b, n, 0.0f, c, n, nullptr);
}

int gemm_u32(int n, const uint32_t* a, const uint32_t* b, uint32_t* c,
             const std::atomic<bool>* cancel) {
  return gemm_packed<uint32_t>(n, n, n, 1u, a, n, b, n, 0u, c, n, cancel);
}

}  // namespace kern

void sgemm_rowmajor(int m, int n, int k, const float* a, const float* b, float* c) {
  kern::gemm_f32(m, n, k, 1.0f, a, std::max(k, 1), b, std::max(n, 1), 0.0f, c, std::max(n, 1),
                 nullptr);
}

bool have_openblas() {
  return kern::Blas() != nullptr;
}

}  // namespace vugpu
