// SPDX-License-Identifier: MIT
/*
 * bench_launch: every benchmark's kernel launch. By default the built-in kernel by id
 * (vgLaunch); with --programs DIR its SPIR-V form instead: DIR/<file>.spv loaded once per
 * context (vgProgramLoad) and the launches of its plan (plan.c, the mirror of the engine's
 * src/gpu/program/builtins.ts) through vgLaunchProgram on the same buffers. Asynchronous like
 * vgLaunch, except where the plan needs the clock (LOOP with --ms) or must record it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "plan.h"
#include "vugpu_hw.h"

static vgResult program_for(struct bench_run *r, unsigned int kernel, vgProgram *out)
{
	char path[512];
	const char *file = builtin_file(kernel);
	FILE *f;
	long n;
	void *w;
	double t0;
	vgResult e;

	if (!file)
		return VG_ERROR_INVALID_VALUE;
	if (r->progs[kernel]) {
		*out = r->progs[kernel];
		return VG_SUCCESS;
	}
	snprintf(path, sizeof(path), "%s/%s.spv", r->o->programs, file);
	f = fopen(path, "rb");
	if (!f || fseek(f, 0, SEEK_END) || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET)) {
		if (f)
			fclose(f);
		snprintf(r->detail, sizeof(r->detail), "cannot read %.200s", path);
		return VG_ERROR_INVALID_VALUE;
	}
	w = xmalloc((size_t)n);
	if (fread(w, 1, (size_t)n, f) != (size_t)n) {
		fclose(f);
		free(w);
		snprintf(r->detail, sizeof(r->detail), "cannot read %.200s", path);
		return VG_ERROR_INVALID_VALUE;
	}
	fclose(f);
	t0 = now_us();
	e = vgProgramLoad(r->ctx, w, (size_t)n, &r->progs[kernel]);
	r->prog_load_us += now_us() - t0;
	free(w);
	if (!e)
		*out = r->progs[kernel];
	return e;
}

vgResult bench_launch(struct bench_run *r, unsigned int kernel, const unsigned int grid[3], const void *params,
		      size_t param_bytes, const vgBuffer *buffers, unsigned int nbuffers)
{
	static struct plan pl;
	vgBinding b[VG_COMPUTE_MAX_BUFFERS];
	uint64_t len[VG_COMPUTE_MAX_BUFFERS];
	uint32_t writes = builtin_writes(kernel);
	double t0;
	vgProgram prog;
	vgResult e;
	unsigned int i;
	int ret;

	/* BFS's error word (a malformed graph) is not read back here: b_bfs reads `changed` after
	 * every level anyway, and an error bit there fails its verification */
	if (!r->o->programs)
		return vgLaunch(r->ctx, kernel, grid, params, param_bytes, buffers, nbuffers);
	if (nbuffers > VG_COMPUTE_MAX_BUFFERS)
		return VG_ERROR_INVALID_VALUE;
	for (i = 0; i < nbuffers; i++)
		len[i] = buffers[i].bytes;
	ret = builtin_plan(kernel, params, param_bytes, len, nbuffers, &pl);
	if (ret) {
		/* what the native kernel does with such parameters: the launch fails (KERNEL_ERROR) */
		snprintf(r->detail, sizeof(r->detail), "kernel %u: no plan for these parameters (%s)", kernel,
			 ret == -E2BIG ? "too many launches" : ret == -ENOSYS ? "unknown kernel" : "-EINVAL");
		return VG_ERROR_KERNEL;
	}
	e = program_for(r, kernel, &prog);
	if (e)
		return e;
	for (i = 0; i < nbuffers; i++)
		b[i] = (vgBinding){ buffers[i].ptr, buffers[i].bytes, (writes >> i) & 1 ? 0 : VG_BINDING_READ_ONLY };
	t0 = now_us();
	for (unsigned int k = 0; k < pl.n; k++) {
		const struct plan_dispatch *d = &pl.d[k];

		for (uint64_t rep = 0; rep < d->repeat; rep++) {
			e = vgLaunchProgram(r->ctx, prog, 0, d->grid, b, nbuffers, d->push, d->push_bytes, NULL, 0, 0);
			r->prog_launches++;
			if (e)
				return e;
			/* LOOP's target_ns: stop after the launch during which it passed */
			if (pl.time_limit_ns) {
				e = vgSynchronize(r->ctx);
				if (e)
					return e;
				if ((now_us() - t0) * 1e3 >= (double)pl.time_limit_ns)
					goto done;
			}
		}
	}
done:
	if (pl.elapsed_binding >= 0) {
		uint64_t ns;

		e = vgSynchronize(r->ctx);
		ns = (uint64_t)((now_us() - t0) * 1e3);
		if (!e)
			e = vgMemcpyHtoD(r->ctx, buffers[pl.elapsed_binding].ptr + pl.elapsed_offset, &ns, sizeof(ns));
		if (e)
			return e;
	}
	(void)grid; /* the plan sizes its own grids */
	return VG_SUCCESS;
}
