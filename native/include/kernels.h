// Contract between the job pool (native/src) and the compute kernels (native/kernels).
// Kernels are trusted code: they touch only bufs[i][0 .. lens[i]) and must check that every
// size derived from params fits those lengths before touching memory (return -EINVAL if not).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace vugpu {

struct KernelCtx {
  void* const* bufs;          // buffer windows in argument order (host addresses)
  const size_t* lens;         // byte length of each window
  int nbufs;
  const uint8_t* params;      // parameter block (little-endian, layout per kernel in docs/kernels.md)
  size_t nparams;
  const std::atomic<bool>* cancel;  // poll in outer loops; return -ECANCELED when set
};

// Kernel ids are part of the hardware contract (docs/hw-spec.md, compute class).
enum KernelId : uint32_t {
  K_NOP = 0, K_LOOP = 1, K_MADD = 2, K_FMADD = 3, K_MMUL = 4, K_FMMUL = 5,
  K_BACKPROP_FORWARD = 6, K_BACKPROP_ADJUST = 7, K_BFS = 8, K_HOTSPOT = 9,
  K_LUD_DIAGONAL = 10, K_LUD_PERIMETER = 11, K_LUD_INTERNAL = 12,
  K_SRAD1 = 13, K_SRAD2 = 14, K_MEMSET = 15,
  K_COUNT = 16
};

// Returns 0, -EINVAL (bad params or buffers too small), -ENOSYS (unknown id), -ECANCELED.
int run_kernel(uint32_t id, const KernelCtx& ctx);

// Number of buffers a kernel takes, or -1 for an unknown id (lets the engine validate early).
int kernel_buffer_count(uint32_t id);

// Direct BLAS entry (or the blocked C++ fallback) shared by K_FMMUL and the engine benchmark.
void sgemm_rowmajor(int m, int n, int k, const float* a, const float* b, float* c);
bool have_openblas();

}  // namespace vugpu
