#version 450
// C = A·B in f32, row-major: A is M×K, B is K×N, C is M×N.
//   binding 0: A (read-only), binding 1: B (read-only), binding 2: C (written)
//   push constants: uint M, N, K
//   workgroup 16×16; grid (ceil(N / 16), ceil(M / 16), 1)
// Classic shared-memory tiling: each workgroup stages a 16×16 tile of A and of B per step of
// k, synchronises, and every invocation accumulates one element of C.
layout(local_size_x = 16, local_size_y = 16) in;

layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) writeonly buffer C { float c[]; };

layout(push_constant) uniform Params { uint M, N, K; } pc;

const uint TILE = 16u;
shared float As[TILE][TILE];
shared float Bs[TILE][TILE + 1u];  // padded: no bank conflicts on the column reads

void main() {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint row = gl_WorkGroupID.y * TILE + ty, col = gl_WorkGroupID.x * TILE + tx;
  float acc = 0.0;
  for (uint k0 = 0u; k0 < pc.K; k0 += TILE) {
    // Out-of-range elements are staged as 0, so edge tiles need no special case below.
    As[ty][tx] = (row < pc.M && k0 + tx < pc.K) ? a[row * pc.K + k0 + tx] : 0.0;
    Bs[ty][tx] = (k0 + ty < pc.K && col < pc.N) ? b[(k0 + ty) * pc.N + col] : 0.0;
    barrier();  // every invocation reaches it: the loop bound is uniform
    for (uint k = 0u; k < TILE; k++) acc += As[ty][k] * Bs[k][tx];
    barrier();  // before the next step overwrites the tiles
  }
  if (row < pc.M && col < pc.N) c[row * pc.N + col] = acc;
}
