// Kernel dispatch: one table row per kernel id (native/include/kernels.h) with the checks that
// are common to every kernel, so each kernel only validates its own sizes.
#include <cerrno>

#include "kernel_common.h"

namespace vugpu {
namespace {

struct KernelInfo {
  kern::KernelFn fn;
  int nbufs;           // exact number of buffer windows
  size_t min_params;   // bytes of the parameter block the kernel reads
};

// Indexed by KernelId. Layouts are documented in docs/kernels.md.
constexpr KernelInfo kTable[K_COUNT] = {
    /* K_NOP              */ {kern::k_nop, 0, 0},
    /* K_LOOP             */ {kern::k_loop, 1, 20},
    /* K_MADD             */ {kern::k_madd, 3, 4},
    /* K_FMADD            */ {kern::k_fmadd, 3, 4},
    /* K_MMUL             */ {kern::k_mmul, 3, 4},
    /* K_FMMUL            */ {kern::k_fmmul, 3, 4},
    /* K_BACKPROP_FORWARD */ {kern::k_bp_forward, 3, 8},
    /* K_BACKPROP_ADJUST  */ {kern::k_bp_adjust, 4, 16},
    /* K_BFS              */ {kern::k_bfs, 7, 8},
    /* K_HOTSPOT          */ {kern::k_hotspot, 3, 32},
    /* K_LUD_DIAGONAL     */ {kern::k_lud_diagonal, 1, 12},
    /* K_LUD_PERIMETER    */ {kern::k_lud_perimeter, 1, 12},
    /* K_LUD_INTERNAL     */ {kern::k_lud_internal, 1, 12},
    /* K_SRAD1            */ {kern::k_srad1, 6, 12},
    /* K_SRAD2            */ {kern::k_srad2, 6, 12},
    /* K_MEMSET           */ {kern::k_memset, 1, 16},
};

}  // namespace

int kernel_buffer_count(uint32_t id) {
  if (id >= K_COUNT) return -1;
  return kTable[id].nbufs;
}

int run_kernel(uint32_t id, const KernelCtx& ctx) {
  if (id >= K_COUNT) return -ENOSYS;
  const KernelInfo& k = kTable[id];
  if (ctx.nbufs != k.nbufs) return -EINVAL;
  if (ctx.nparams < k.min_params || (k.min_params > 0 && ctx.params == nullptr)) return -EINVAL;
  if (k.nbufs > 0 && (ctx.bufs == nullptr || ctx.lens == nullptr)) return -EINVAL;
  for (int i = 0; i < k.nbufs; i++) {
    // Every kernel works on 4-byte elements; a window that is null (with a length) or not
    // 4-aligned is a host bug, not something a kernel should tolerate.
    auto addr = reinterpret_cast<uintptr_t>(ctx.bufs[i]);
    if ((addr == 0 && ctx.lens[i] != 0) || (addr & 3) != 0) return -EINVAL;
  }
  if (kern::cancelled(ctx)) return -ECANCELED;
  return k.fn(ctx);
}

}  // namespace vugpu
