// Back-propagation (Rodinia BP): one fully connected layer of a two-layer perceptron.
//   forward: y[j] = sigmoid(w[0][j] + Σ_i x[i]·w[i+1][j])           (row 0 of w is the bias)
//   adjust:  d = eta·delta[j]·x'[r] + momentum·oldw[r][j];  w[r][j] += d;  oldw[r][j] = d
//            with x'[0] = 1 (bias) and x'[r] = x[r-1]
// w and oldw are (n_in + 1) × n_out, row-major. Loops run over rows of w so every access is a
// contiguous, vectorisable row.
#include <algorithm>
#include <cmath>

#include "kernel_common.h"

namespace vugpu::kern {
namespace {

constexpr uint64_t kRowsPerPoll = 1024;

bool layer_dims(const KernelCtx& c, uint64_t* n_in, uint64_t* n_out) {
  *n_in = param_u32(c, 0);
  *n_out = param_u32(c, 4);
  return *n_in < kMaxDim && *n_out <= kMaxDim;
}

}  // namespace

// Buffers: 0 x[n_in], 1 w[(n_in+1)×n_out], 2 y[n_out]. Params: u32 n_in, u32 n_out.
int k_bp_forward(const KernelCtx& c) {
  uint64_t n_in, n_out;
  if (!layer_dims(c, &n_in, &n_out)) return -EINVAL;
  if (!fits(c, 0, n_in, 1, 4) || !fits(c, 1, n_in + 1, n_out, 4) || !fits(c, 2, n_out, 1, 4))
    return -EINVAL;
  if (overlap(c, 2, 0) || overlap(c, 2, 1)) return -EINVAL;
  const float* __restrict x = buf<float>(c, 0);
  const float* __restrict w = buf<float>(c, 1);
  float* __restrict y = buf<float>(c, 2);

  std::copy_n(w, n_out, y);  // bias row
  for (uint64_t i = 0; i < n_in; i++) {
    if (i % kRowsPerPoll == 0 && cancelled(c)) return -ECANCELED;
    const float xi = x[i];
    const float* row = w + (i + 1) * n_out;
    for (uint64_t j = 0; j < n_out; j++) y[j] += xi * row[j];
  }
  for (uint64_t j = 0; j < n_out; j++) y[j] = 1.0f / (1.0f + std::exp(-y[j]));
  return 0;
}

// Buffers: 0 delta[n_out], 1 x[n_in], 2 w[(n_in+1)×n_out], 3 oldw[(n_in+1)×n_out].
// Params: u32 n_in, u32 n_out, f32 eta, f32 momentum.
int k_bp_adjust(const KernelCtx& c) {
  uint64_t n_in, n_out;
  if (!layer_dims(c, &n_in, &n_out)) return -EINVAL;
  const float eta = param_f32(c, 8);
  const float momentum = param_f32(c, 12);
  if (!fits(c, 0, n_out, 1, 4) || !fits(c, 1, n_in, 1, 4) || !fits(c, 2, n_in + 1, n_out, 4) ||
      !fits(c, 3, n_in + 1, n_out, 4))
    return -EINVAL;
  for (int out = 2; out <= 3; out++)
    for (int other = 0; other <= 3; other++)
      if (other != out && overlap(c, out, other)) return -EINVAL;
  const float* __restrict delta = buf<float>(c, 0);
  const float* __restrict x = buf<float>(c, 1);
  float* __restrict w = buf<float>(c, 2);
  float* __restrict oldw = buf<float>(c, 3);

  for (uint64_t r = 0; r <= n_in; r++) {
    if (r % kRowsPerPoll == 0 && cancelled(c)) return -ECANCELED;
    const float xr = r == 0 ? 1.0f : x[r - 1];
    float* wr = w + r * n_out;
    float* owr = oldw + r * n_out;
    for (uint64_t j = 0; j < n_out; j++) {
      const float d = eta * delta[j] * xr + momentum * owr[j];
      wr[j] += d;
      owr[j] = d;
    }
  }
  return 0;
}

}  // namespace vugpu::kern
