#version 450
// K_FMMUL for a GPU at sizes whose 128×128 tiles would leave most of the device idle (the plan,
// src/gpu/program/builtins.ts, picks it when fmmul_gpu.comp's grid has fewer than
// GEMM_GPU_SMALL_GRID workgroups: 1024³ is 64 of them on an H100's 132 SMs). Same contract and
// same arithmetic as fmmul_gpu.comp — each output is one chain of f32 FMAs over k in order, so
// both forms give the same bits — in 64×64 tiles: four times the workgroups.
//
// One workgroup of 16×16 invocations, 16 deep in k per step; invocation (tx, ty) owns rows
// ty·4 + i (i < 4) of column quad tx: 4 vec4 accumulators, 2 vec4 shared loads per 16 FMAs.
// Global loads are vec4 (n % 4 == 0), one of A (4 consecutive k of one row, stored transposed
// into As[k][row / 4]) and one of B (4 consecutive columns of one k) per invocation and step; the
// next step's are loaded into registers while the current one is multiplied.
// Loops: one back-edge per 16 k, as fmmul_gpu.comp (the plan's k slices assume it).
layout(local_size_x = 16, local_size_y = 16) in;

layout(set = 0, binding = 0) readonly buffer A { vec4 a[]; };
layout(set = 0, binding = 1) readonly buffer B { vec4 b[]; };
layout(set = 0, binding = 2) buffer C { vec4 c[]; };

layout(push_constant) uniform Params {
  uint n;           // docs/kernels.md: u32 n at 0 (n % 4 == 0, n*n < 2^31)
  uint k0, k1;      // 4, 8: the slice of k this launch sums (multiples of 4)
  uint accumulate;  // 12: 0 = C = sum, 1 = C += sum
} pc;

shared vec4 As[16][17];  // [k][row / 4], padded: the transposed stores spread over banks
shared vec4 Bs[16][16];  // [k][col / 4]

void main() {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint t = ty * 16u + tx;
  const uint n = pc.n, n4 = pc.n >> 2u;
  const uint row0 = gl_WorkGroupID.y * 64u, col0 = gl_WorkGroupID.x * 64u;
  // Loader coordinates: A row ar, k quad ak; B k row bk, column quad bc.
  const uint ar = t >> 2u, ak = (t & 3u) * 4u;
  const uint bk = t >> 4u, bc = t & 15u;
  const bool aRow = row0 + ar < n, bCol = col0 + bc * 4u < n;

  vec4 c0 = vec4(0), c1 = vec4(0), c2 = vec4(0), c3 = vec4(0);  // rows ty*4+i, column quad tx

  const uint k0 = pc.k0, k1 = pc.k1;
  vec4 va = vec4(0), vb = vec4(0);
  if (aRow && k0 + ak < k1) va = a[(row0 + ar) * n4 + ((k0 + ak) >> 2u)];
  if (bCol && k0 + bk < k1) vb = b[(k0 + bk) * n4 + (col0 >> 2u) + bc];

  // A step past k1 multiplies zeros (the loads are guarded), which adds nothing.
#define STEP(K)                                                              \
    {                                                                        \
      const vec4 a0 = As[K][ty], b0 = Bs[K][tx];                             \
      c0 = fma(vec4(a0.x), b0, c0); c1 = fma(vec4(a0.y), b0, c1);            \
      c2 = fma(vec4(a0.z), b0, c2); c3 = fma(vec4(a0.w), b0, c3);            \
    }
  for (uint kt = k0; kt < k1; kt += 16u) {
    As[ak + 0u][ar >> 2u][ar & 3u] = va.x;
    As[ak + 1u][ar >> 2u][ar & 3u] = va.y;
    As[ak + 2u][ar >> 2u][ar & 3u] = va.z;
    As[ak + 3u][ar >> 2u][ar & 3u] = va.w;
    Bs[bk][bc] = vb;
    barrier();
    const uint kn = kt + 16u;
    va = vec4(0);
    vb = vec4(0);
    if (aRow && kn + ak < k1) va = a[(row0 + ar) * n4 + ((kn + ak) >> 2u)];
    if (bCol && kn + bk < k1) vb = b[(kn + bk) * n4 + (col0 >> 2u) + bc];
    STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7)
    STEP(8) STEP(9) STEP(10) STEP(11) STEP(12) STEP(13) STEP(14) STEP(15)
    barrier();
  }

  // Store: 4 rows of one column quad per invocation, each a vec4 (n % 4 == 0: a quad is all in
  // or all out).
  const bool accumulate = pc.accumulate != 0u;
#define STORE(ROW, V)                                                        \
  {                                                                          \
    const uint r = (ROW), q = (col0 >> 2u) + tx;                             \
    if (r < n && q * 4u < n) {                                               \
      const uint i = r * n4 + q;                                             \
      vec4 v = (V);                                                          \
      if (accumulate) v += c[i];                                             \
      c[i] = v;                                                              \
    }                                                                        \
  }
  const uint r0 = row0 + ty * 4u;
  STORE(r0 + 0u, c0) STORE(r0 + 1u, c1) STORE(r0 + 2u, c2) STORE(r0 + 3u, c3)
}
