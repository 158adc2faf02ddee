// SPDX-License-Identifier: MIT
/* NOP (pure launch overhead) and LOOP (long compute without data). docs/kernels.md §0, §1. */
#include <stdlib.h>
#include <string.h>
#include "bench.h"

static const unsigned int grid1[3] = { 1, 1, 1 };

static int run_nop(struct bench_run *r)
{
	if (bench_init(r))
		return -1;
	snprintf(r->size_desc, sizeof(r->size_desc), "1 launch");
	stage_begin(r, S_KERNCONF);
	stage_end(r);
	stage_begin(r, S_EXEC);
	VG(r, bench_launch(r, VG_KERNEL_NOP, grid1, NULL, 0, NULL, 0));
	VG(r, vgSynchronize(r->ctx));
	stage_end(r);
	if (bench_close(r))
		return -1;
	r->verified = 1; /* the launch completed without a channel error */
	return 0;
}

struct loop_params {
	uint64_t iterations, target_ns;
	uint32_t seed;
} __attribute__((packed));

static int run_loop(struct bench_run *r)
{
	struct loop_params p;
	unsigned char out[24];
	uint64_t done, elapsed, i, want_iters;
	uint32_t state, ref;
	vgDevicePtr d;
	unsigned int launches = r->o->launches ? r->o->launches : 1;

	want_iters = r->o->ms ? 0 : r->o->iters ? r->o->iters : r->o->large ? 100000000ull : 10000000ull;
	if (r->o->ms)
		snprintf(r->size_desc, sizeof(r->size_desc), "%u ms", r->o->ms);
	else
		snprintf(r->size_desc, sizeof(r->size_desc), "%llu steps", (unsigned long long)want_iters);
	if (launches > 1)
		snprintf(r->size_desc + strlen(r->size_desc), sizeof(r->size_desc) - strlen(r->size_desc), " x %u launches",
			 launches);
	if (bench_init(r))
		return -1;
	stage_begin(r, S_MEMALLOC);
	VG(r, vgMemAlloc(r->ctx, &d, sizeof(out)));
	stage_end(r);
	stage_begin(r, S_KERNCONF);
	memset(&p, 0, sizeof(p));
	p.iterations = want_iters;
	p.target_ns = (uint64_t)r->o->ms * 1000000ull;
	p.seed = r->o->seed;
	stage_end(r);
	printf("VUGPU-PHASE {\"phase\":\"exec\",\"bench\":\"loop\"}\n");
	fflush(stdout);
	stage_begin(r, S_EXEC);
	{
		vgBuffer b = { d, sizeof(out) };
		unsigned int k;

		/* --launches: a stream of kernels, each waited for (bench/fairness.ts); the last one is verified */
		for (k = 0; k < launches; k++) {
			VG(r, bench_launch(r, VG_KERNEL_LOOP, grid1, &p, sizeof(p), &b, 1));
			VG(r, vgSynchronize(r->ctx));
		}
	}
	stage_end(r);
	stage_begin(r, S_DTOH);
	VG(r, vgMemcpyDtoH(r->ctx, out, d, sizeof(out)));
	stage_end(r);
	stage_begin(r, S_DATAREAD);
	memcpy(&done, out, 8);
	memcpy(&elapsed, out + 8, 8);
	memcpy(&state, out + 16, 4);
	r->checksum = (double)state;
	digest_bytes(&done, sizeof(done));
	digest_bytes(&state, sizeof(state));
	stage_end(r);
	stage_begin(r, S_CLOSE);
	VG(r, vgMemFree(r->ctx, d));
	stage_end(r);
	if (bench_close(r))
		return -1;

	/* reference: the LCG applied `done` times */
	if (want_iters && done != want_iters) {
		r->verified = 0;
		snprintf(r->detail, sizeof(r->detail), "done %llu steps, want %llu", (unsigned long long)done,
			 (unsigned long long)want_iters);
		return 0;
	}
	if (done > 400000000ull) {
		r->verified = elapsed >= p.target_ns;
		snprintf(r->detail, sizeof(r->detail), "%llu steps in %llu ns (state not recomputed)",
			 (unsigned long long)done, (unsigned long long)elapsed);
		return 0;
	}
	ref = r->o->seed;
	for (i = 0; i < done; i++)
		ref = ref * 1664525u + 1013904223u;
	r->verified = ref == state && done > 0;
	snprintf(r->detail, sizeof(r->detail), "%llu steps in %llu ns, state 0x%08x (ref 0x%08x)", (unsigned long long)done,
		 (unsigned long long)elapsed, state, ref);
	return 0;
}

const struct bench bench_nop = { "nop", "no GPU operation: one empty launch", run_nop };
const struct bench bench_loop = { "loop", "long-loop compute without data (LCG chain)", run_loop };
