// Breadth-first search (Rodinia BFS), one frontier level per launch over a CSR graph.
// Phase 1 expands every node in the frontier (mask) to its unvisited neighbours, giving them
// cost[node] + 1 and marking them in `updating`; phase 2 turns `updating` into the next frontier
// and marks it visited. `changed` says whether a next frontier exists: the host launches again
// until it reads 0. Both phases of the GPU version are in one launch; results are identical
// because every frontier node has the same cost.
#include <algorithm>

#include "kernel_common.h"

namespace vugpu::kern {
namespace {
enum : int { OFFSETS, EDGES, MASK, UPDATING, VISITED, COST, CHANGED };
}

// Buffers: 0 offsets u32[n+1], 1 edges u32[m], 2 mask u8[n], 3 updating u8[n], 4 visited u8[n],
// 5 cost i32[n], 6 changed u32[1]. Params: u32 n (nodes), u32 m (edges).
// The graph itself is data: an offset or edge id out of range is found while walking it and
// returns -EINVAL (state written so far stays; the graph is malformed anyway).
int k_bfs(const KernelCtx& c) {
  const uint64_t n = param_u32(c, 0);
  const uint64_t m = param_u32(c, 4);
  if (!fits(c, OFFSETS, n + 1, 1, 4) || !fits(c, EDGES, m, 1, 4) || !fits(c, MASK, n, 1, 1) ||
      !fits(c, UPDATING, n, 1, 1) || !fits(c, VISITED, n, 1, 1) || !fits(c, COST, n, 1, 4) ||
      !fits(c, CHANGED, 1, 1, 4))
    return -EINVAL;
  const uint32_t* offsets = buf<uint32_t>(c, OFFSETS);
  const uint32_t* edges = buf<uint32_t>(c, EDGES);
  uint8_t* mask = buf<uint8_t>(c, MASK);
  uint8_t* updating = buf<uint8_t>(c, UPDATING);
  uint8_t* visited = buf<uint8_t>(c, VISITED);
  uint32_t* cost = buf<uint32_t>(c, COST);  // i32 in the contract; unsigned here so +1 wraps

  for (uint64_t v = 0; v < n; v++) {
    if (v % kPollChunk == 0 && cancelled(c)) return -ECANCELED;
    if (!mask[v]) continue;
    mask[v] = 0;
    const uint32_t begin = offsets[v], end = offsets[v + 1];
    if (begin > end || end > m) return -EINVAL;
    const uint32_t next = cost[v] + 1;
    for (uint32_t e = begin; e < end; e++) {
      const uint32_t to = edges[e];
      if (to >= n) return -EINVAL;
      if (!visited[to]) {
        cost[to] = next;
        updating[to] = 1;
      }
    }
  }
  uint32_t changed = 0;
  for (uint64_t v = 0; v < n; v++) {
    if (!updating[v]) continue;
    mask[v] = 1;
    visited[v] = 1;
    updating[v] = 0;
    changed = 1;
  }
  *buf<uint32_t>(c, CHANGED) = changed;
  return 0;
}

}  // namespace vugpu::kern
