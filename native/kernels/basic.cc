// nop, loop and memset: the kernels with no real data (GPUvm's NOP and LOOP) and a fill.
#include <algorithm>
#include <chrono>

#include "kernel_common.h"

namespace vugpu::kern {

int k_nop(const KernelCtx&) { return 0; }

// LOOP: spin on a 32-bit LCG (state = state * 1664525 + 1013904223) until `iterations` steps are
// done or `target_ns` elapsed, whichever comes first (0 = no limit; both 0 is rejected). The
// dependent multiply-add chain cannot be vectorised or folded, so time ∝ iterations. Progress is
// written to the buffer even when cancelled, so the host can see how far it got.
namespace {
constexpr size_t kLoopOutBytes = 24;
constexpr uint64_t kLoopChunk = 1u << 16;  // ~100 µs of dependent mul-adds between polls

void loop_store(const KernelCtx& c, uint64_t done, uint64_t ns, uint32_t state) {
  uint8_t out[kLoopOutBytes] = {};
  std::memcpy(out, &done, 8);
  std::memcpy(out + 8, &ns, 8);
  std::memcpy(out + 16, &state, 4);
  std::memcpy(c.bufs[0], out, kLoopOutBytes);
}
}  // namespace

int k_loop(const KernelCtx& c) {
  const uint64_t iterations = param_u64(c, 0);
  const uint64_t target_ns = param_u64(c, 8);
  uint32_t state = param_u32(c, 16);
  if (c.lens[0] < kLoopOutBytes) return -EINVAL;
  if (iterations == 0 && target_ns == 0) return -EINVAL;

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  uint64_t done = 0;
  uint64_t ns = 0;
  for (;;) {
    uint64_t n = kLoopChunk;
    if (iterations != 0) n = std::min<uint64_t>(n, iterations - done);
    for (uint64_t i = 0; i < n; i++) {
      state = state * 1664525u + 1013904223u;
      asm volatile("" : "+r"(state));  // opaque to the optimiser: no closed form, no unrolled folding
    }
    done += n;
    ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0).count());
    if (iterations != 0 && done >= iterations) break;
    if (target_ns != 0 && ns >= target_ns) break;
    if (cancelled(c)) {
      loop_store(c, done, ns, state);
      return -ECANCELED;
    }
  }
  loop_store(c, done, ns, state);
  return 0;
}

// MEMSET: buffer[0 .. count) = pattern (u32 words).
int k_memset(const KernelCtx& c) {
  const uint32_t pattern = param_u32(c, 0);
  const uint64_t count = param_u64(c, 8);
  if (!fits(c, 0, count, 1, 4)) return -EINVAL;
  uint32_t* p = buf<uint32_t>(c, 0);
  for (uint64_t i = 0; i < count; i += kPollChunk) {
    if (cancelled(c)) return -ECANCELED;
    std::fill_n(p + i, std::min<uint64_t>(kPollChunk, count - i), pattern);
  }
  return 0;
}

}  // namespace vugpu::kern
