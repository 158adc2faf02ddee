#version 450
// K_BFS: one BFS level over a CSR graph, as three kinds of launch on the same bindings
// (phase in the push constants; the plan runs 0, 1 [, 1 …], 2):
//   0 clear:  changed = 0 (one invocation)
//   1 expand: every frontier node v (mask[v]) gives each unvisited neighbour u cost[v] + 1 and
//             updating[u] = 1. Only edges with ids in [e_lo, e_hi) are walked, so that a graph
//             whose edges would take one launch past the CPU device's loop cap is walked in
//             several launches (the plan splits m).
//   2 commit: mask[u] = updating[u]; where set, visited[u] = 1, updating[u] = 0 and changed |= 1.
// The result equals the native kernel's: mask ends as the set of nodes updated in this level
// (the native kernel clears the frontier's mask in phase 1 and sets the new one in phase 2).
// A malformed graph (offsets[v] > offsets[v+1], offsets[v+1] > m or an edge id ≥ n at a frontier
// node) sets bit 1 of changed; commit then changes nothing, and the engine reports -EINVAL.
//
// Work split in expand: an invocation walks its own node's edges when they are few
// (≤ SMALL); a node with more is queued in shared memory and its edges are walked by the
// whole workgroup together, so one high-degree node neither serialises its subgroup nor runs
// it into the loop cap.
//
// Flags are bytes: 8-bit storage (StorageBuffer8BitAccess), never 8-bit arithmetic.
#extension GL_EXT_shader_8bit_storage : require
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
#include "common.glsl"

layout(set = 0, binding = 0) readonly buffer Offsets { uint offsets[]; };
layout(set = 0, binding = 1) readonly buffer Edges { uint edges[]; };
layout(set = 0, binding = 2) buffer Mask { uint8_t mask[]; };
layout(set = 0, binding = 3) buffer Updating { uint8_t updating[]; };
layout(set = 0, binding = 4) buffer Visited { uint8_t visited[]; };
layout(set = 0, binding = 5) buffer Cost { int cost[]; };
layout(set = 0, binding = 6) buffer Changed { uint changed[]; };

layout(push_constant) uniform Params {
  uint n, m;        // docs/kernels.md: u32 n at 0, u32 m at 4
  uint phase;       // 8: 0 clear, 1 expand, 2 commit
  uint e_lo, e_hi;  // 12, 16: expand walks edge ids in [e_lo, e_hi)
} pc;

const uint ERR = 2u;     // bit of changed: the graph is malformed
const uint SMALL = 32u;  // edges an invocation walks alone

shared uint big_count;
shared uint big_lo[256], big_hi[256], big_next[256];
shared uint wg_flag;

void visit(uint u, uint next) {
  if (u >= pc.n) {
    atomicOr(changed[0], ERR);
  } else if (uint(visited[u]) == 0u) {
    cost[u] = int(next);
    updating[u] = uint8_t(1);
  }
}

void expand(uint v, uint lid) {
  if (lid == 0u) big_count = 0u;
  barrier();
  uint lo = 0u, hi = 0u, next = 0u;
  if (v < pc.n && uint(mask[v]) != 0u) {
    const uint begin = offsets[v], end = offsets[v + 1u];
    if (begin > end || end > pc.m) {
      atomicOr(changed[0], ERR);
    } else {
      lo = max(begin, pc.e_lo);
      hi = min(end, pc.e_hi);
      next = uint(cost[v]) + 1u;  // i32 in the contract; wraps as the native kernel's
    }
  }
  if (hi > lo) {
    if (hi - lo <= SMALL) {
      for (uint e = lo; e < hi; e++) visit(edges[e], next);
    } else {
      const uint k = atomicAdd(big_count, 1u);
      big_lo[k] = lo;
      big_hi[k] = hi;
      big_next[k] = next;
    }
  }
  barrier();
  const uint nb = big_count;
  for (uint k = 0u; k < nb; k++)
    for (uint e = big_lo[k] + lid; e < big_hi[k]; e += 256u) visit(edges[e], big_next[k]);
}

void commit(uint v, uint lid) {
  // Phase 1 has finished: the error bit is settled. Read it atomically (other workgroups are
  // setting bit 0 meanwhile).
  if (lid == 0u) wg_flag = atomicOr(changed[0], 0u) & ERR;
  barrier();
  const bool failed = wg_flag != 0u;
  barrier();
  if (lid == 0u) wg_flag = 0u;
  barrier();
  if (!failed && v < pc.n) {
    if (uint(updating[v]) != 0u) {
      mask[v] = uint8_t(1);
      visited[v] = uint8_t(1);
      updating[v] = uint8_t(0);
      wg_flag = 1u;
    } else if (uint(mask[v]) != 0u) {
      mask[v] = uint8_t(0);
    }
  }
  barrier();
  if (lid == 0u && wg_flag != 0u) atomicOr(changed[0], 1u);
}

void main() {
  const uint v = linear_id(), lid = gl_LocalInvocationID.x;
  if (pc.phase == 0u) {
    if (v == 0u) changed[0] = 0u;
  } else if (pc.phase == 1u) {
    expand(v, lid);
  } else {
    commit(v, lid);
  }
}
