// SPDX-License-Identifier: MIT
/*
 * LUD (Rodinia): blocked LU decomposition in place without pivoting: per block step a diagonal,
 * a perimeter and an internal kernel (docs/kernels.md §10-12). Verified by L*U = A.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"

static int run_lud(struct bench_run *r)
{
	unsigned int n = r->o->size ? r->o->size : r->o->large ? 1024 : 256, bs = 16, steps = (n + bs - 1) / bs, st, i, j, k;
	size_t bytes = (size_t)n * n * 4, bad = 0, checked = 0;
	float *a = xmalloc(bytes), *lu = xmalloc(bytes);
	double maxa = 0, maxerr = 0;
	vgDevicePtr da;
	uint64_t s = r->o->seed;
	const unsigned int grid[3] = { 1, 1, 1 };
	struct { uint32_t n, bs, step; } p;
	vgBuffer b;

	snprintf(r->size_desc, sizeof(r->size_desc), "%ux%u, block %u", n, n, bs);
	if (bench_init(r))
		goto out;
	stage_begin(r, S_MEMALLOC);
	VGO(r, vgMemAlloc(r->ctx, &da, bytes));
	stage_end(r);
	stage_begin(r, S_DATAINIT);
	for (i = 0; i < n; i++)
		for (j = 0; j < n; j++)
			a[(size_t)i * n + j] = rng_unit(&s) + (i == j ? (float)n : 0.0f); /* diagonally dominant */
	stage_end(r);
	stage_begin(r, S_HTOD);
	VGO(r, vgMemcpyHtoD(r->ctx, da, a, bytes));
	stage_end(r);
	stage_begin(r, S_KERNCONF);
	p.n = n;
	p.bs = bs;
	b = (vgBuffer){ da, bytes };
	stage_end(r);
	stage_begin(r, S_EXEC);
	for (st = 0; st < steps; st++) {
		p.step = st;
		VGO(r, bench_launch(r, VG_KERNEL_LUD_DIAGONAL, grid, &p, sizeof(p), &b, 1));
		if (st + 1 == steps)
			break;
		VGO(r, bench_launch(r, VG_KERNEL_LUD_PERIMETER, grid, &p, sizeof(p), &b, 1));
		VGO(r, bench_launch(r, VG_KERNEL_LUD_INTERNAL, grid, &p, sizeof(p), &b, 1));
	}
	VGO(r, vgSynchronize(r->ctx));
	stage_end(r);
	stage_begin(r, S_DTOH);
	VGO(r, vgMemcpyDtoH(r->ctx, lu, da, bytes));
	stage_end(r);
	stage_begin(r, S_DATAREAD);
	r->checksum = sum_f32(lu, (size_t)n * n);
	stage_end(r);
	stage_begin(r, S_CLOSE);
	VGO(r, vgMemFree(r->ctx, da));
	stage_end(r);
	if (bench_close(r))
		goto out;

	/* (L*U)[i][j] = sum_{k <= min(i,j)} L[i][k] U[k][j], L unit lower, U upper */
	for (i = 0; i < (size_t)n * n; i++)
		maxa = fmax(maxa, fabs(a[i]));
	for (i = 0; i < n; i += n > 256 ? n / 32 : 1) {
		for (j = 0; j < n; j++) {
			unsigned int m = i < j ? i : j;
			double sum = 0, err;

			for (k = 0; k <= m; k++) {
				double l = k == i ? 1.0 : lu[(size_t)i * n + k];

				sum += l * lu[(size_t)k * n + j];
			}
			err = fabs(sum - a[(size_t)i * n + j]);
			if (!(err <= 1e-4 * maxa))
				bad++;
			maxerr = fmax(maxerr, err);
			checked++;
		}
	}
	r->verified = bad == 0;
	snprintf(r->detail, sizeof(r->detail), "max |LU-A| = %.3g (|A| max %.3g), %zu of %zu checked entries off", maxerr,
		 maxa, bad, checked);
out:
	free(a);
	free(lu);
	return r->err ? -1 : 0;
}

const struct bench bench_lud = { "lud", "blocked LU decomposition (Rodinia LUD)", run_lud };
