// HotSpot (Rodinia HS): one explicit time step of the chip thermal RC model on a rows×cols grid.
//   out = T + (step/cap)·(P + (T_N + T_S − 2T)/ry + (T_E + T_W − 2T)/rx + (amb − T)/rz)
// Neighbours outside the grid are clamped to the cell itself (the GPU version's boundary), so
// edge cells see no lateral flow across the border. The host derives cap, rx, ry, rz and step
// from the chip size as HotSpot does and ping-pongs temp_in/temp_out between launches.
#include "kernel_common.h"

namespace vugpu::kern {
namespace {

struct HsConst {
  float sdc, rx1, ry1, rz1, amb;  // step/cap and reciprocal resistances, as the GPU code uses
};

inline float hs_cell(const HsConst& k, float t, float p, float n, float s, float e, float w) {
  return t + k.sdc * (p + (s + n - 2.0f * t) * k.ry1 + (e + w - 2.0f * t) * k.rx1 +
                      (k.amb - t) * k.rz1);
}

}  // namespace

// Buffers: 0 temp_in, 1 power, 2 temp_out (rows×cols f32 each).
// Params: u32 rows, u32 cols, f32 cap, f32 rx, f32 ry, f32 rz, f32 step, f32 amb.
int k_hotspot(const KernelCtx& c) {
  const uint64_t rows = param_u32(c, 0);
  const uint64_t cols = param_u32(c, 4);
  if (rows > kMaxDim || cols > kMaxDim) return -EINVAL;
  for (int i = 0; i < 3; i++)
    if (!fits(c, i, rows, cols, 4)) return -EINVAL;
  if (overlap(c, 2, 0) || overlap(c, 2, 1)) return -EINVAL;
  const HsConst k{param_f32(c, 24) / param_f32(c, 8), 1.0f / param_f32(c, 12),
                  1.0f / param_f32(c, 16), 1.0f / param_f32(c, 20), param_f32(c, 28)};
  const float* __restrict tin = buf<float>(c, 0);
  const float* __restrict pw = buf<float>(c, 1);
  float* __restrict tout = buf<float>(c, 2);

  for (uint64_t r = 0; r < rows; r++) {
    if (r % 64 == 0 && cancelled(c)) return -ECANCELED;
    const float* t = tin + r * cols;
    const float* tn = tin + (r > 0 ? r - 1 : r) * cols;
    const float* ts = tin + (r + 1 < rows ? r + 1 : r) * cols;
    const float* p = pw + r * cols;
    float* o = tout + r * cols;
    if (cols == 1) {
      o[0] = hs_cell(k, t[0], p[0], tn[0], ts[0], t[0], t[0]);
      continue;
    }
    if (cols == 0) continue;
    o[0] = hs_cell(k, t[0], p[0], tn[0], ts[0], t[1], t[0]);
    for (uint64_t j = 1; j + 1 < cols; j++)  // interior: contiguous, vectorised
      o[j] = hs_cell(k, t[j], p[j], tn[j], ts[j], t[j + 1], t[j - 1]);
    const uint64_t l = cols - 1;
    o[l] = hs_cell(k, t[l], p[l], tn[l], ts[l], t[l], t[l - 1]);
  }
  return 0;
}

}  // namespace vugpu::kern
