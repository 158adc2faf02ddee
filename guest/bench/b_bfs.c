// SPDX-License-Identifier: MIT
/*
 * BFS (Rodinia): breadth-first search over a random graph in CSR form, one BFS kernel launch per
 * level, the host reading the `changed` flag after each (as Rodinia's CUDA version does).
 */
#include <stdlib.h>
#include <string.h>
#include "bench.h"

static int run_bfs(struct bench_run *r)
{
	unsigned int n = r->o->size ? r->o->size : r->o->large ? 1u << 20 : 16384, v, levels = 0, changed;
	uint64_t s = r->o->seed;
	uint32_t *off = xmalloc(((size_t)n + 1) * 4), *edges = NULL, m = 0, i;
	uint8_t *mask = xmalloc(n), *upd = xmalloc(n), *vis = xmalloc(n);
	int32_t *cost = xmalloc((size_t)n * 4), *ref = xmalloc((size_t)n * 4);
	uint32_t *queue = NULL;
	vgDevicePtr doff, dedg, dmask, dupd, dvis, dcost, dchg;
	const unsigned int grid[3] = { (n + 255) / 256, 1, 1 };
	struct { uint32_t n, m; } p;
	vgBuffer b[7];
	size_t bad;

	snprintf(r->size_desc, sizeof(r->size_desc), "%u nodes", n);
	if (bench_init(r))
		goto out;
	/* the graph: 1-6 random out-edges per node (Rodinia's generator draws from the same range) */
	stage_begin(r, S_DATAINIT);
	edges = xmalloc((size_t)n * 6 * 4);
	for (v = 0; v < n; v++) {
		unsigned int deg = 1 + rng_u32(&s) % 6, k;

		off[v] = m;
		for (k = 0; k < deg; k++)
			edges[m++] = rng_u32(&s) % n;
	}
	off[n] = m;
	memset(mask, 0, n);
	memset(upd, 0, n);
	memset(vis, 0, n);
	for (v = 0; v < n; v++)
		cost[v] = -1;
	mask[0] = vis[0] = 1;
	cost[0] = 0;
	stage_end(r);
	stage_begin(r, S_MEMALLOC);
	VGO(r, vgMemAlloc(r->ctx, &doff, ((size_t)n + 1) * 4));
	VGO(r, vgMemAlloc(r->ctx, &dedg, (size_t)m * 4));
	VGO(r, vgMemAlloc(r->ctx, &dmask, n));
	VGO(r, vgMemAlloc(r->ctx, &dupd, n));
	VGO(r, vgMemAlloc(r->ctx, &dvis, n));
	VGO(r, vgMemAlloc(r->ctx, &dcost, (size_t)n * 4));
	VGO(r, vgMemAlloc(r->ctx, &dchg, 4));
	stage_end(r);
	stage_begin(r, S_HTOD);
	VGO(r, vgMemcpyHtoD(r->ctx, doff, off, ((size_t)n + 1) * 4));
	VGO(r, vgMemcpyHtoD(r->ctx, dedg, edges, (size_t)m * 4));
	VGO(r, vgMemcpyHtoD(r->ctx, dmask, mask, n));
	VGO(r, vgMemcpyHtoD(r->ctx, dupd, upd, n));
	VGO(r, vgMemcpyHtoD(r->ctx, dvis, vis, n));
	VGO(r, vgMemcpyHtoD(r->ctx, dcost, cost, (size_t)n * 4));
	stage_end(r);
	stage_begin(r, S_KERNCONF);
	p.n = n;
	p.m = m;
	b[0] = (vgBuffer){ doff, ((size_t)n + 1) * 4 };
	b[1] = (vgBuffer){ dedg, (size_t)m * 4 };
	b[2] = (vgBuffer){ dmask, n };
	b[3] = (vgBuffer){ dupd, n };
	b[4] = (vgBuffer){ dvis, n };
	b[5] = (vgBuffer){ dcost, (size_t)n * 4 };
	b[6] = (vgBuffer){ dchg, 4 };
	stage_end(r);
	stage_begin(r, S_EXEC);
	do {
		VGO(r, bench_launch(r, VG_KERNEL_BFS, grid, &p, sizeof(p), b, 7));
		VGO(r, vgMemcpyDtoH(r->ctx, &changed, dchg, 4));
		levels++;
	} while (changed && levels <= n);
	stage_end(r);
	stage_begin(r, S_DTOH);
	VGO(r, vgMemcpyDtoH(r->ctx, cost, dcost, (size_t)n * 4));
	stage_end(r);
	stage_begin(r, S_DATAREAD);
	r->checksum = 0;
	for (v = 0; v < n; v++)
		r->checksum += cost[v];
	digest_bytes(cost, (size_t)n * sizeof(*cost));
	stage_end(r);
	stage_begin(r, S_CLOSE);
	VGO(r, vgMemFree(r->ctx, doff));
	VGO(r, vgMemFree(r->ctx, dedg));
	VGO(r, vgMemFree(r->ctx, dmask));
	VGO(r, vgMemFree(r->ctx, dupd));
	VGO(r, vgMemFree(r->ctx, dvis));
	VGO(r, vgMemFree(r->ctx, dcost));
	VGO(r, vgMemFree(r->ctx, dchg));
	stage_end(r);
	if (bench_close(r))
		goto out;

	/* CPU BFS */
	queue = xmalloc((size_t)n * 4);
	for (v = 0; v < n; v++)
		ref[v] = -1;
	ref[0] = 0;
	{
		size_t head = 0, tail = 0;

		queue[tail++] = 0;
		while (head < tail) {
			uint32_t u = queue[head++];

			for (i = off[u]; i < off[u + 1]; i++) {
				if (ref[edges[i]] < 0) {
					ref[edges[i]] = ref[u] + 1;
					queue[tail++] = edges[i];
				}
			}
		}
	}
	bad = cmp_u32((uint32_t *)cost, (uint32_t *)ref, n, NULL);
	r->verified = bad == 0;
	snprintf(r->detail, sizeof(r->detail), "%u edges, %u levels, %zu costs differ", m, levels, bad);
out:
	free(off);
	free(edges);
	free(mask);
	free(upd);
	free(vis);
	free(cost);
	free(ref);
	free(queue);
	return r->err ? -1 : 0;
}

const struct bench bench_bfs = { "bfs", "breadth-first search (Rodinia BFS)", run_bfs };
