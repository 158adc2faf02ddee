#version 450
// K_FMMUL for a GPU when a launch is staged in row panels that 64×64 tiles would leave short of
// workgroups (1024³ in 4 panels of 256 rows: 64 workgroups each for an H200's 132 SMs, so every
// panel took as long as the whole product; src/gpu/program/builtins.ts picks it, see
// GEMM_GPU_PANEL_TILE). Same contract and same arithmetic as fmmul_gpu64.comp — each output is
// one chain of f32 FMAs over the launch's k in order, so the forms give the same bits — in
// 32×64 tiles (rows × columns): twice the workgroups, each half the work.
//
// One workgroup of 16×16 invocations, 16 deep in k per step; invocation (tx, ty) owns rows
// ty·2 + i (i < 2) of column quad tx: 2 vec4 accumulators, a vec2 and a vec4 shared load per 8
// FMAs. Global loads are vec4 (n % 4 == 0): the first 128 invocations load one of A (4
// consecutive k of one row, stored transposed into As[k][row / 2]), every invocation one of B
// (4 consecutive columns of one k) per step; the next step's are loaded into registers while
// the current one is multiplied.
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

shared vec2 As[16][17];  // [k][row / 2], padded: the transposed stores spread over banks
shared vec4 Bs[16][16];  // [k][col / 4]

void main() {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint t = ty * 16u + tx;
  const uint n = pc.n, n4 = pc.n >> 2u;
  const uint row0 = gl_WorkGroupID.y * 32u, col0 = gl_WorkGroupID.x * 64u;
  // Loader coordinates: A row ar, k quad ak; B k row bk, column quad bc.
  const uint ar = t >> 2u, ak = (t & 3u) * 4u;
  const uint bk = t >> 4u, bc = t & 15u;
  const bool aLoad = t < 128u, aRow = aLoad && row0 + ar < n, bCol = col0 + bc * 4u < n;

  vec4 c0 = vec4(0), c1 = vec4(0);  // rows ty*2+i, column quad tx

  const uint k0 = pc.k0, k1 = pc.k1;
  vec4 va = vec4(0), vb = vec4(0);
  if (aRow && k0 + ak < k1) va = a[(row0 + ar) * n4 + ((k0 + ak) >> 2u)];
  if (bCol && k0 + bk < k1) vb = b[(k0 + bk) * n4 + (col0 >> 2u) + bc];

  // A step past k1 multiplies zeros (the loads are guarded), which adds nothing.
#define STEP(K)                                                              \
    {                                                                        \
      const vec2 a0 = As[K][ty];                                             \
      const vec4 b0 = Bs[K][tx];                                             \
      c0 = fma(vec4(a0.x), b0, c0); c1 = fma(vec4(a0.y), b0, c1);            \
    }
  for (uint kt = k0; kt < k1; kt += 16u) {
    if (aLoad) {
      As[ak + 0u][ar >> 1u][ar & 1u] = va.x;
      As[ak + 1u][ar >> 1u][ar & 1u] = va.y;
      As[ak + 2u][ar >> 1u][ar & 1u] = va.z;
      As[ak + 3u][ar >> 1u][ar & 1u] = va.w;
    }
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

  // Store: 2 rows of one column quad per invocation, each a vec4 (n % 4 == 0: a quad is all in
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
  const uint r0 = row0 + ty * 2u;
  STORE(r0 + 0u, c0) STORE(r0 + 1u, c1)
}
