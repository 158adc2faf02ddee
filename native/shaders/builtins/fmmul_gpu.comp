#version 450
// K_FMMUL for a GPU (the plan picks it on a GPU device when n % 4 == 0; fmmul.comp otherwise):
// C = A·B for n×n float matrices in plain f32 FMAs — no tensor cores/cooperative matrices, whose
// inputs are TF32 or f16 and would change FMMUL's results.
//
// One workgroup of 16×16 invocations computes a 128×128 tile of C, 8 deep in k per step.
// Register blocking: invocation (tx, ty) owns an 8×8 block of outputs — rows ty·4 + i and
// 64 + ty·4 + i, columns tx·4 + j and 64 + tx·4 + j (i, j < 4) — as 16 vec4 accumulators, so
// each k step is 4 vec4 shared loads for 64 FMAs. Global loads are vec4 (n % 4 == 0): A as 4
// consecutive k of one row (stored transposed, As[k][row], padded so the stores hit distinct
// banks), B as 4 consecutive columns of one k. The next step's tile is loaded into registers
// while the current one is multiplied (one barrier pair per step).
// Loops: one back-edge per 16 k (the inner steps are written out), far under the CPU device's
// loop cap; the plan (src/gpu/program/builtins.ts, GEMM_GPU_K_SLICE) splits k beyond it.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 16, local_size_y = 16) in;

layout(set = 0, binding = 0) readonly buffer A { vec4 a[]; };
layout(set = 0, binding = 1) readonly buffer B { vec4 b[]; };
layout(set = 0, binding = 2) buffer C { vec4 c[]; };

layout(push_constant) uniform Params {
  uint n;           // docs/kernels.md: u32 n at 0 (n % 4 == 0, n*n < 2^31)
  uint k0, k1;      // 4, 8: the slice of k this launch sums (multiples of 4)
  uint accumulate;  // 12: 0 = C = sum, 1 = C += sum
} pc;

shared vec4 As[8][33];  // [k][row / 4], 132 floats a row: the transposed stores spread over banks
shared vec4 Bs[8][32];  // [k][col / 4]

void main() {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint t = ty * 16u + tx;
  const uint n = pc.n, n4 = pc.n >> 2u;
  const uint row0 = gl_WorkGroupID.y * 128u, col0 = gl_WorkGroupID.x * 128u;
  // Loader coordinates: A row ar, k quad ak; B k row bk, column quad bc.
  const uint ar = t >> 1u, ak = (t & 1u) * 4u;
  const uint bk = t >> 5u, bc = t & 31u;
  const bool aRow = row0 + ar < n, bCol = col0 + bc * 4u < n;

  vec4 c00 = vec4(0), c01 = vec4(0), c02 = vec4(0), c03 = vec4(0);  // rows ty*4+i, cols tx*4
  vec4 c10 = vec4(0), c11 = vec4(0), c12 = vec4(0), c13 = vec4(0);  // rows ty*4+i, cols 64+tx*4
  vec4 c20 = vec4(0), c21 = vec4(0), c22 = vec4(0), c23 = vec4(0);  // rows 64+ty*4+i, cols tx*4
  vec4 c30 = vec4(0), c31 = vec4(0), c32 = vec4(0), c33 = vec4(0);  // rows 64+ty*4+i, cols 64+tx*4

  const uint k0 = pc.k0, k1 = pc.k1;
  vec4 va = vec4(0), vb = vec4(0);
  if (aRow && k0 + ak < k1) va = a[(row0 + ar) * n4 + ((k0 + ak) >> 2u)];
  if (bCol && k0 + bk < k1) vb = b[(k0 + bk) * n4 + (col0 >> 2u) + bc];

  // Two 8-deep steps per loop iteration: one back-edge (and one of the rewrite's cancel checks)
  // per 16 k. A step past k1 multiplies zeros (the loads are guarded), which adds nothing.
#define STEP(K)                                                              \
    {                                                                        \
      const vec4 a0 = As[K][ty], a1 = As[K][16u + ty];                       \
      const vec4 b0 = Bs[K][tx], b1 = Bs[K][16u + tx];                       \
      c00 = fma(vec4(a0.x), b0, c00); c01 = fma(vec4(a0.y), b0, c01);        \
      c02 = fma(vec4(a0.z), b0, c02); c03 = fma(vec4(a0.w), b0, c03);        \
      c10 = fma(vec4(a0.x), b1, c10); c11 = fma(vec4(a0.y), b1, c11);        \
      c12 = fma(vec4(a0.z), b1, c12); c13 = fma(vec4(a0.w), b1, c13);        \
      c20 = fma(vec4(a1.x), b0, c20); c21 = fma(vec4(a1.y), b0, c21);        \
      c22 = fma(vec4(a1.z), b0, c22); c23 = fma(vec4(a1.w), b0, c23);        \
      c30 = fma(vec4(a1.x), b1, c30); c31 = fma(vec4(a1.y), b1, c31);        \
      c32 = fma(vec4(a1.z), b1, c32); c33 = fma(vec4(a1.w), b1, c33);        \
    }
  // Stage the registers' tile, prefetch the one at KN, multiply the staged one.
#define TILE(KN)                                                             \
    {                                                                        \
      As[ak + 0u][ar >> 2u][ar & 3u] = va.x;                                 \
      As[ak + 1u][ar >> 2u][ar & 3u] = va.y;                                 \
      As[ak + 2u][ar >> 2u][ar & 3u] = va.z;                                 \
      As[ak + 3u][ar >> 2u][ar & 3u] = va.w;                                 \
      Bs[bk][bc] = vb;                                                       \
      barrier();                                                             \
      const uint kn = (KN);                                                  \
      va = vec4(0);                                                          \
      vb = vec4(0);                                                          \
      if (aRow && kn + ak < k1) va = a[(row0 + ar) * n4 + ((kn + ak) >> 2u)]; \
      if (bCol && kn + bk < k1) vb = b[(kn + bk) * n4 + (col0 >> 2u) + bc];  \
      STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7)        \
      barrier();                                                             \
    }
  for (uint kt = k0; kt < k1; kt += 16u) {
    TILE(kt + 8u)
    TILE(kt + 16u)
  }

  // Store: 8 rows × 2 column quads per invocation, each a vec4 (n % 4 == 0: a quad is all in
  // or all out).
  const bool accumulate = pc.accumulate != 0u;
#define STORE(ROW, COLQ, V)                                                  \
  {                                                                          \
    const uint r = (ROW), q = (COLQ);                                        \
    if (r < n && q * 4u < n) {                                               \
      const uint i = r * n4 + q;                                             \
      vec4 v = (V);                                                          \
      if (accumulate) v += c[i];                                             \
      c[i] = v;                                                              \
    }                                                                        \
  }
  const uint rA = row0 + ty * 4u, rB = row0 + 64u + ty * 4u;
  const uint qA = (col0 >> 2u) + tx, qB = (col0 >> 2u) + 16u + tx;
  STORE(rA + 0u, qA, c00) STORE(rA + 1u, qA, c01) STORE(rA + 2u, qA, c02) STORE(rA + 3u, qA, c03)
  STORE(rA + 0u, qB, c10) STORE(rA + 1u, qB, c11) STORE(rA + 2u, qB, c12) STORE(rA + 3u, qB, c13)
  STORE(rB + 0u, qA, c20) STORE(rB + 1u, qA, c21) STORE(rB + 2u, qA, c22) STORE(rB + 3u, qA, c23)
  STORE(rB + 0u, qB, c30) STORE(rB + 1u, qB, c31) STORE(rB + 2u, qB, c32) STORE(rB + 3u, qB, c33)
}
