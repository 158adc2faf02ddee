// SPDX-License-Identifier: MIT
/* MADD, MMUL (u32, wrapping) and FMADD, FMMUL (f32): n x n matrices. docs/kernels.md §2-5. */
#include <stdlib.h>
#include <string.h>
#include "bench.h"

enum { OP_ADD, OP_MUL };

static void ref_row_u32(const uint32_t *a, const uint32_t *b, uint32_t *c, unsigned int n, unsigned int i, int op)
{
	unsigned int j, k;

	for (j = 0; j < n; j++) {
		if (op == OP_ADD) {
			c[j] = a[(size_t)i * n + j] + b[(size_t)i * n + j];
		} else {
			uint32_t s = 0;

			for (k = 0; k < n; k++)
				s += a[(size_t)i * n + k] * b[(size_t)k * n + j];
			c[j] = s;
		}
	}
}

static void ref_row_f32(const float *a, const float *b, float *c, unsigned int n, unsigned int i, int op)
{
	unsigned int j, k;

	for (j = 0; j < n; j++) {
		if (op == OP_ADD) {
			c[j] = a[(size_t)i * n + j] + b[(size_t)i * n + j];
		} else {
			double s = 0;

			for (k = 0; k < n; k++)
				s += (double)a[(size_t)i * n + k] * b[(size_t)k * n + j];
			c[j] = (float)s;
		}
	}
}

static int run_matrix(struct bench_run *r, unsigned int kernel, int is_float, int op)
{
	unsigned int n = r->o->size ? r->o->size : r->o->large ? 1024 : 256;
	size_t elems = (size_t)n * n, bytes = elems * 4, bad = 0, first = 0, checked = 0;
	uint32_t *a, *b, *c, *want;
	vgDevicePtr da, db, dc;
	uint64_t s = r->o->seed;
	unsigned int i, step, grid[3] = { (n + 15) / 16, (n + 15) / 16, 1 };
	uint32_t param;
	vgBuffer bufs[3];

	snprintf(r->size_desc, sizeof(r->size_desc), "%ux%u", n, n);
	a = xmalloc(bytes);
	b = xmalloc(bytes);
	c = xmalloc(bytes);
	if (bench_init(r))
		goto out;
	stage_begin(r, S_MEMALLOC);
	VGO(r, vgMemAlloc(r->ctx, &da, bytes));
	VGO(r, vgMemAlloc(r->ctx, &db, bytes));
	VGO(r, vgMemAlloc(r->ctx, &dc, bytes));
	stage_end(r);
	stage_begin(r, S_DATAINIT);
	for (i = 0; i < elems; i++) {
		if (is_float) {
			((float *)a)[i] = rng_unit(&s) * 2.0f - 1.0f;
			((float *)b)[i] = rng_unit(&s) * 2.0f - 1.0f;
		} else {
			a[i] = rng_u32(&s);
			b[i] = rng_u32(&s);
		}
	}
	stage_end(r);
	stage_begin(r, S_HTOD);
	VGO(r, vgMemcpyHtoD(r->ctx, da, a, bytes));
	VGO(r, vgMemcpyHtoD(r->ctx, db, b, bytes));
	stage_end(r);
	stage_begin(r, S_KERNCONF);
	param = n;
	bufs[0] = (vgBuffer){ da, bytes };
	bufs[1] = (vgBuffer){ db, bytes };
	bufs[2] = (vgBuffer){ dc, bytes };
	stage_end(r);
	stage_begin(r, S_EXEC);
	VGO(r, bench_launch(r, kernel, grid, &param, sizeof(param), bufs, 3));
	VGO(r, vgSynchronize(r->ctx));
	stage_end(r);
	stage_begin(r, S_DTOH);
	VGO(r, vgMemcpyDtoH(r->ctx, c, dc, bytes));
	stage_end(r);
	stage_begin(r, S_DATAREAD);
	r->checksum = is_float ? sum_f32((float *)c, elems) : sum_u32(c, elems);
	stage_end(r);
	stage_begin(r, S_CLOSE);
	VGO(r, vgMemFree(r->ctx, da));
	VGO(r, vgMemFree(r->ctx, db));
	VGO(r, vgMemFree(r->ctx, dc));
	stage_end(r);
	if (bench_close(r))
		goto out;

	/* CPU reference: every row up to 256x256 (or for additions), else 64 rows spread over C */
	want = xmalloc((size_t)n * 4);
	step = (op == OP_MUL && n > 256) ? n / 64 : 1;
	for (i = 0; i < n; i += step) {
		size_t f = 0, nb;

		if (is_float) {
			ref_row_f32((float *)a, (float *)b, (float *)want, n, i, op);
			nb = cmp_f32((float *)c + (size_t)i * n, (float *)want, n, 1e-4, op == OP_MUL ? 1e-5 * n : 1e-6, &f);
		} else {
			ref_row_u32(a, b, want, n, i, op);
			nb = cmp_u32(c + (size_t)i * n, want, n, &f);
		}
		if (nb && !bad)
			first = (size_t)i * n + f;
		bad += nb;
		checked += n;
	}
	free(want);
	r->verified = bad == 0;
	snprintf(r->detail, sizeof(r->detail), "%zu of %zu checked elements differ%s", bad, checked,
		 bad ? "" : " (none)");
	if (bad)
		snprintf(r->detail + strlen(r->detail), sizeof(r->detail) - strlen(r->detail), ", first at %zu", first);
out:
	free(a);
	free(b);
	free(c);
	return r->err ? -1 : 0;
}

static int run_madd(struct bench_run *r) { return run_matrix(r, VG_KERNEL_MADD, 0, OP_ADD); }
static int run_mmul(struct bench_run *r) { return run_matrix(r, VG_KERNEL_MMUL, 0, OP_MUL); }
static int run_fmadd(struct bench_run *r) { return run_matrix(r, VG_KERNEL_FMADD, 1, OP_ADD); }
static int run_fmmul(struct bench_run *r) { return run_matrix(r, VG_KERNEL_FMMUL, 1, OP_MUL); }

const struct bench bench_madd = { "madd", "n x n u32 matrix addition", run_madd };
const struct bench bench_mmul = { "mmul", "n x n u32 matrix multiplication", run_mmul };
const struct bench bench_fmadd = { "fmadd", "n x n f32 matrix addition", run_fmadd };
const struct bench bench_fmmul = { "fmmul", "n x n f32 matrix multiplication (GEMM)", run_fmmul };
