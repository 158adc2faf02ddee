// SRAD, speckle-reducing anisotropic diffusion (Rodinia SRAD v1), two kernels per iteration on a
// rows×cols image J (the host computes q0sqr = var/mean² over the region of interest first).
// srad1, per pixel, with neighbours clamped to the image:
//   dN = J[N] − J, dS, dW, dE likewise
//   G2 = (dN² + dS² + dW² + dE²) / J²;   L = (dN + dS + dW + dE) / J
//   q² = (G2/2 − L²/16) / (1 + L/4)²
//   c  = clamp(1 / (1 + (q² − q0sqr) / (q0sqr·(1 + q0sqr))), 0, 1)
// srad2:  J += (lambda/4)·(c·dN + c[S]·dS + c·dW + c[E]·dE)
// J must stay positive (SRAD runs on exp(image)); J = 0 gives Inf/NaN as on the GPU.
#include <algorithm>

#include "kernel_common.h"

namespace vugpu::kern {
namespace {

enum : int { J_IMG, D_N, D_S, D_W, D_E, C_DIFF, N_BUFS };

bool image_dims(const KernelCtx& c, uint64_t* rows, uint64_t* cols) {
  *rows = param_u32(c, 0);
  *cols = param_u32(c, 4);
  if (*rows > kMaxDim || *cols > kMaxDim) return false;
  for (int i = 0; i < N_BUFS; i++)
    if (!fits(c, i, *rows, *cols, 4)) return false;
  for (int i = 0; i < N_BUFS; i++)  // all six are accessed through restrict pointers
    for (int j = i + 1; j < N_BUFS; j++)
      if (overlap(c, i, j)) return false;
  return true;
}

// Diffusion coefficient from the centre value and the four differences.
inline float srad_c(float jc, float n, float s, float w, float e, float q0sqr) {
  const float g2 = (n * n + s * s + w * w + e * e) / (jc * jc);
  const float l = (n + s + w + e) / jc;
  const float num = 0.5f * g2 - (1.0f / 16.0f) * (l * l);
  const float den0 = 1.0f + 0.25f * l;
  const float qsqr = num / (den0 * den0);
  const float den = (qsqr - q0sqr) / (q0sqr * (1.0f + q0sqr));
  const float cv = 1.0f / (1.0f + den);
  return cv < 0.0f ? 0.0f : (cv > 1.0f ? 1.0f : cv);
}

// One image row given its north and south rows (clamped by the caller). Column j's west and
// east neighbours are wi(j) and ei(j); the interior loop spells them out so it vectorises.
void srad1_row(uint64_t cols, const float* __restrict jr, const float* __restrict jn,
               const float* __restrict js, float q0, float* __restrict dn, float* __restrict ds,
               float* __restrict dw, float* __restrict de, float* __restrict cc) {
  const uint64_t last = cols - 1;
  for (uint64_t j : {uint64_t{0}, last}) {  // edge columns (the same one when cols == 1)
    const uint64_t wi = j > 0 ? j - 1 : j, ei = j < last ? j + 1 : j;
    const float jc = jr[j];
    dn[j] = jn[j] - jc;
    ds[j] = js[j] - jc;
    dw[j] = jr[wi] - jc;
    de[j] = jr[ei] - jc;
    cc[j] = srad_c(jc, dn[j], ds[j], dw[j], de[j], q0);
  }
  for (uint64_t j = 1; j < last; j++) {
    const float jc = jr[j];
    const float n = jn[j] - jc, s = js[j] - jc, w = jr[j - 1] - jc, e = jr[j + 1] - jc;
    dn[j] = n;
    ds[j] = s;
    dw[j] = w;
    de[j] = e;
    cc[j] = srad_c(jc, n, s, w, e, q0);
  }
}

}  // namespace

// Buffers: 0 J, 1 dN, 2 dS, 3 dW, 4 dE, 5 c (rows×cols f32 each; J read, the others written).
// Params: u32 rows, u32 cols, f32 q0sqr.
int k_srad1(const KernelCtx& c) {
  uint64_t rows, cols;
  if (!image_dims(c, &rows, &cols)) return -EINVAL;
  const float q0 = param_f32(c, 8);
  const float* __restrict img = buf<float>(c, J_IMG);
  for (uint64_t r = 0; r < rows; r++) {
    if (r % 64 == 0 && cancelled(c)) return -ECANCELED;
    if (cols == 0) continue;
    const uint64_t base = r * cols;
    const float* jr = img + base;
    const float* jn = img + (r > 0 ? r - 1 : r) * cols;
    const float* js = img + (r + 1 < rows ? r + 1 : r) * cols;
    srad1_row(cols, jr, jn, js, q0, buf<float>(c, D_N) + base, buf<float>(c, D_S) + base,
              buf<float>(c, D_W) + base, buf<float>(c, D_E) + base, buf<float>(c, C_DIFF) + base);
  }
  return 0;
}

// Same buffers (J updated in place; dN..c read). Params: u32 rows, u32 cols, f32 lambda.
int k_srad2(const KernelCtx& c) {
  uint64_t rows, cols;
  if (!image_dims(c, &rows, &cols)) return -EINVAL;
  const float k = 0.25f * param_f32(c, 8);
  float* __restrict img = buf<float>(c, J_IMG);
  const float* __restrict dn = buf<float>(c, D_N);
  const float* __restrict ds = buf<float>(c, D_S);
  const float* __restrict dw = buf<float>(c, D_W);
  const float* __restrict de = buf<float>(c, D_E);
  const float* __restrict cf = buf<float>(c, C_DIFF);
  for (uint64_t r = 0; r < rows; r++) {
    if (r % 64 == 0 && cancelled(c)) return -ECANCELED;
    const uint64_t b = r * cols;
    const uint64_t bs = (r + 1 < rows ? r + 1 : r) * cols;  // south row of c
    if (cols == 0) continue;
    for (uint64_t j = 0; j + 1 < cols; j++) {  // east neighbour j+1 exists
      const uint64_t i = b + j;
      img[i] += k * (cf[i] * dn[i] + cf[bs + j] * ds[i] + cf[i] * dw[i] + cf[i + 1] * de[i]);
    }
    const uint64_t i = b + cols - 1;  // last column: east clamps to itself
    img[i] += k * (cf[i] * dn[i] + cf[bs + cols - 1] * ds[i] + cf[i] * dw[i] + cf[i] * de[i]);
  }
  return 0;
}

}  // namespace vugpu::kern
