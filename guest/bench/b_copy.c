// SPDX-License-Identifier: MIT
/*
 * CPY: HtoD then DtoH of a buffer from pageable memory (staged through the runtime's pinned
 * buffers). PINCPY: the same from pinned host memory (vgMemAllocHost), copied by DMA directly.
 * Default 8 MiB (TCG guests are slow); --large or --mb 64 for GPUvm's 64 MiB.
 */
#include <stdlib.h>
#include <string.h>
#include "bench.h"

static void fill(uint32_t *p, size_t words, uint64_t seed)
{
	size_t i;

	for (i = 0; i < words; i++)
		p[i] = rng_u32(&seed);
}

static int run_copy(struct bench_run *r, int pinned)
{
	size_t mb = r->o->mb ? r->o->mb : r->o->large ? 64 : 8, bytes = mb << 20, words = bytes / 4, i, bad = 0;
	uint32_t *src = NULL, *dst = NULL, *want = NULL;
	vgDevicePtr d;

	snprintf(r->size_desc, sizeof(r->size_desc), "%zu MiB", mb);
	if (!pinned) {
		src = xmalloc(bytes);
		dst = xmalloc(bytes);
	}
	if (bench_init(r))
		goto out;
	stage_begin(r, S_MEMALLOC);
	VGO(r, vgMemAlloc(r->ctx, &d, bytes));
	if (pinned) {
		VGO(r, vgMemAllocHost(r->ctx, (void **)&src, bytes));
		VGO(r, vgMemAllocHost(r->ctx, (void **)&dst, bytes));
	}
	stage_end(r);
	stage_begin(r, S_DATAINIT);
	fill(src, words, r->o->seed);
	memset(dst, 0, bytes); /* so a copy that did not happen cannot pass */
	stage_end(r);
	stage_begin(r, S_HTOD);
	VGO(r, vgMemcpyHtoD(r->ctx, d, src, bytes));
	stage_end(r);
	stage_begin(r, S_KERNCONF);
	stage_end(r);
	stage_begin(r, S_EXEC);
	stage_end(r);
	stage_begin(r, S_DTOH);
	VGO(r, vgMemcpyDtoH(r->ctx, dst, d, bytes));
	stage_end(r);
	stage_begin(r, S_DATAREAD);
	r->checksum = sum_u32(dst, words);
	stage_end(r);
	/* verify before the pinned buffers go away with the context */
	want = xmalloc(bytes);
	fill(want, words, r->o->seed);
	for (i = 0; i < words; i++)
		bad += dst[i] != want[i];
	stage_begin(r, S_CLOSE);
	if (pinned) {
		VGO(r, vgMemFreeHost(r->ctx, src));
		VGO(r, vgMemFreeHost(r->ctx, dst));
		src = dst = NULL;
	}
	VGO(r, vgMemFree(r->ctx, d));
	stage_end(r);
	if (bench_close(r))
		goto out;
	r->verified = bad == 0;
	snprintf(r->detail, sizeof(r->detail), "%zu of %zu words differ after HtoD+DtoH", bad, words);
out:
	free(want);
	if (!pinned) {
		free(src);
		free(dst);
	}
	return r->err ? -1 : 0;
}

static int run_cpy(struct bench_run *r) { return run_copy(r, 0); }
static int run_pincpy(struct bench_run *r) { return run_copy(r, 1); }

const struct bench bench_cpy = { "cpy", "HtoD + DtoH from pageable memory (8 MiB; GPUvm: 64 MiB)", run_cpy };
const struct bench bench_pincpy = { "pincpy", "CPY using pinned host memory", run_pincpy };
