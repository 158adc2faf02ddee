// Tiled GEMM core shared by MMUL, FMMUL and LUD_INTERNAL (included, never compiled alone).
//
// One workgroup of 16×16 invocations computes a 64×64 tile of C; invocation (tx, ty) owns the
// 4×4 outputs at rows ty + 16·i and columns tx + 16·j (strided, so the 16 invocations of a row
// read consecutive shared words and store consecutive C elements). A and B are staged through
// shared memory 16 deep; A is stored transposed with one word of padding so the staging writes
// hit distinct banks. The 16 inner steps are written out: one loop back-edge per 16-deep slice
// of k, which keeps a launch far under the CPU device's loop cap (the plan splits k past
// 960,000) and saves the per-back-edge cancel check in the inner loop.
//
// The includer defines, before including:
//   GEMM_T, GEMM_V4, GEMM_ZERO          scalar type, its 4-vector, its zero
//   GEMM_T gemm_a(uint row, uint k)     element of A (called only for row < M, k < k1)
//   GEMM_T gemm_b(uint k, uint col)     element of B (called only for k < k1, col < N)
//   void gemm_store(uint row, uint col, GEMM_T v)   stores the sum (row < M, col < N)
// and calls gemm_tile(M, N, k0, k1) with a workgroup grid of (ceil(N/64), ceil(M/64)) and
// local size (16, 16): C tile += Σ_{k0 ≤ k < k1} A·B, handed to gemm_store.
#ifndef VUGPU_GEMM
#define VUGPU_GEMM

const uint GEMM_BM = 64u, GEMM_BN = 64u, GEMM_BK = 16u;

shared GEMM_T gemm_as[GEMM_BK][GEMM_BM + 1u];  // [k][row]
shared GEMM_T gemm_bs[GEMM_BK][GEMM_BN];       // [k][col]

void gemm_tile(uint M, uint N, uint k0, uint k1) {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint t = ty * 16u + tx;
  const uint row0 = gl_WorkGroupID.y * GEMM_BM, col0 = gl_WorkGroupID.x * GEMM_BN;
  // Staging coordinates: A as 16 consecutive k of one row per 16 invocations, B as 64
  // consecutive columns of one k per 64 invocations (both coalesced reads).
  const uint ak = t & 15u, ar = t >> 4u;
  const uint bc = t & 63u, bk = t >> 6u;

  GEMM_V4 acc0 = GEMM_V4(GEMM_ZERO), acc1 = GEMM_V4(GEMM_ZERO);
  GEMM_V4 acc2 = GEMM_V4(GEMM_ZERO), acc3 = GEMM_V4(GEMM_ZERO);

  for (uint kt = k0; kt < k1; kt += GEMM_BK) {
#define GEMM_LOAD_A(I)                                                  \
    {                                                                   \
      const uint r = ar + 16u * (I), gr = row0 + r, gk = kt + ak;       \
      GEMM_T v = GEMM_ZERO;                                             \
      if (gr < M && gk < k1) v = gemm_a(gr, gk);                        \
      gemm_as[ak][r] = v;                                               \
    }
#define GEMM_LOAD_B(I)                                                  \
    {                                                                   \
      const uint kk = bk + 4u * (I), gk = kt + kk, gc = col0 + bc;      \
      GEMM_T v = GEMM_ZERO;                                             \
      if (gk < k1 && gc < N) v = gemm_b(gk, gc);                        \
      gemm_bs[kk][bc] = v;                                              \
    }
    GEMM_LOAD_A(0u) GEMM_LOAD_A(1u) GEMM_LOAD_A(2u) GEMM_LOAD_A(3u)
    GEMM_LOAD_B(0u) GEMM_LOAD_B(1u) GEMM_LOAD_B(2u) GEMM_LOAD_B(3u)
    barrier();
#define GEMM_STEP(K)                                                                     \
    {                                                                                    \
      const GEMM_V4 bv = GEMM_V4(gemm_bs[K][tx], gemm_bs[K][tx + 16u],                    \
                                 gemm_bs[K][tx + 32u], gemm_bs[K][tx + 48u]);            \
      acc0 += gemm_as[K][ty] * bv;                                                       \
      acc1 += gemm_as[K][ty + 16u] * bv;                                                 \
      acc2 += gemm_as[K][ty + 32u] * bv;                                                 \
      acc3 += gemm_as[K][ty + 48u] * bv;                                                 \
    }
    GEMM_STEP(0) GEMM_STEP(1) GEMM_STEP(2) GEMM_STEP(3)
    GEMM_STEP(4) GEMM_STEP(5) GEMM_STEP(6) GEMM_STEP(7)
    GEMM_STEP(8) GEMM_STEP(9) GEMM_STEP(10) GEMM_STEP(11)
    GEMM_STEP(12) GEMM_STEP(13) GEMM_STEP(14) GEMM_STEP(15)
    barrier();
  }

#define GEMM_STORE_ROW(I, ACC)                                                      \
  {                                                                                 \
    const uint r = row0 + ty + 16u * (I);                                           \
    if (r < M) {                                                                    \
      const uint c = col0 + tx;                                                     \
      if (c < N) gemm_store(r, c, ACC.x);                                           \
      if (c + 16u < N) gemm_store(r, c + 16u, ACC.y);                               \
      if (c + 32u < N) gemm_store(r, c + 32u, ACC.z);                               \
      if (c + 48u < N) gemm_store(r, c + 48u, ACC.w);                               \
    }                                                                               \
  }
  GEMM_STORE_ROW(0u, acc0) GEMM_STORE_ROW(1u, acc1)
  GEMM_STORE_ROW(2u, acc2) GEMM_STORE_ROW(3u, acc3)
}

#endif
