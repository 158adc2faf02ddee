#version 450
// K_BACKPROP_FORWARD: y[j] = sigmoid(w[0][j] + Σ_{i<n_in} x[i]·w[i+1][j]).
// A workgroup owns 16 outputs (x: j, consecutive for coalesced rows of w) and splits the sum
// over 16 lanes of i (y), reduced in shared memory. The contract gives no scratch buffer, so
// a sum longer than one launch may take (960,000 terms: 60,000 back-edges per lane) is carried
// in y itself between launches: the first launch starts from the bias row, later ones add to
// y, the last applies the sigmoid. Each j belongs to one workgroup, so no launch races.
// Workgroups are numbered over a 2-D grid (more than 65535 groups of 16 outputs).
layout(local_size_x = 16, local_size_y = 16) in;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer W { float w[]; };
layout(set = 0, binding = 2) buffer Y { float y[]; };

layout(push_constant) uniform Params {
  uint n_in, n_out;  // docs/kernels.md: u32 n_in, n_out at 0, 4
  uint i0, i1;       // 8, 12: the inputs this launch sums
  uint first;        // 16: start from the bias row (else from y)
  uint last;         // 20: apply the sigmoid
} pc;

shared float part[16][17];  // [i lane][j], padded

void main() {
  const uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
  const uint j = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 16u + lx;
  float s = 0.0;
  if (j < pc.n_out)
    for (uint i = pc.i0 + ly; i < pc.i1; i += 16u) s += x[i] * w[(i + 1u) * pc.n_out + j];
  part[ly][lx] = s;
  barrier();
  if (ly < 8u) part[ly][lx] += part[ly + 8u][lx];
  barrier();
  if (ly < 4u) part[ly][lx] += part[ly + 4u][lx];
  barrier();
  if (ly < 2u) part[ly][lx] += part[ly + 2u][lx];
  barrier();
  if (ly == 0u && j < pc.n_out) {
    float v = (pc.first != 0u ? w[j] : y[j]) + (part[0][lx] + part[1][lx]);
    if (pc.last != 0u) v = 1.0 / (1.0 + exp(-v));
    y[j] = v;
  }
}
