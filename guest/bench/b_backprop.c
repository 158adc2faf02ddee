// SPDX-License-Identifier: MIT
/*
 * BACKPROP (Rodinia BP): one training step of a 3-layer network n_in -> 16 -> 1. The GPU does
 * the wide input->hidden layer (BACKPROP_FORWARD) and its weight update (BACKPROP_ADJUST); the
 * CPU does the hidden->output layer and the error terms, as in Rodinia's CUDA version.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"

#define HID 16
#define ETA 0.3f
#define MOMENTUM 0.3f

static float squash(double x) { return (float)(1.0 / (1.0 + exp(-x))); }

/* hidden->output forward, output delta, hidden deltas (CPU part, same on both sides) */
static void cpu_middle(const float *hidden, const float *w2, float target, float *hdelta, float *out)
{
	double s = w2[0], od;
	int j;

	for (j = 0; j < HID; j++)
		s += (double)hidden[j] * w2[j + 1];
	*out = squash(s);
	od = (double)*out * (1.0 - *out) * (target - *out);
	for (j = 0; j < HID; j++)
		hdelta[j] = (float)((double)hidden[j] * (1.0 - hidden[j]) * od * w2[j + 1]);
}

static int run_backprop(struct bench_run *r)
{
	unsigned int n = r->o->size ? r->o->size : r->o->large ? 65536 : 16384, i, j;
	size_t wn = (size_t)(n + 1) * HID, bad = 0, f = 0;
	float *x = xmalloc((size_t)n * 4), *w1 = xmalloc(wn * 4), *w1out = xmalloc(wn * 4), *w2 = xmalloc((HID + 1) * 4);
	float *oldw = xmalloc(wn * 4), hidden[HID], hdelta[HID], out, target = 0.1f;
	float rh[HID], rdelta[HID], rout, *rw = NULL;
	vgDevicePtr dx, dw, dold, dh, dd;
	uint64_t s = r->o->seed;
	const unsigned int grid[3] = { (n + 15) / 16, 1, 1 };
	struct { uint32_t n_in, n_out; } fp;
	struct { uint32_t n_in, n_out; float eta, momentum; } ap;
	vgBuffer fb[3], ab[4];

	snprintf(r->size_desc, sizeof(r->size_desc), "%u-%u-1", n, HID);
	if (bench_init(r))
		goto out;
	stage_begin(r, S_MEMALLOC);
	VGO(r, vgMemAlloc(r->ctx, &dx, (size_t)n * 4));
	VGO(r, vgMemAlloc(r->ctx, &dw, wn * 4));
	VGO(r, vgMemAlloc(r->ctx, &dold, wn * 4));
	VGO(r, vgMemAlloc(r->ctx, &dh, HID * 4));
	VGO(r, vgMemAlloc(r->ctx, &dd, HID * 4));
	stage_end(r);
	stage_begin(r, S_DATAINIT);
	for (i = 0; i < n; i++)
		x[i] = rng_unit(&s);
	for (i = 0; i < wn; i++)
		w1[i] = (rng_unit(&s) - 0.5f) * 0.02f;
	for (i = 0; i < HID + 1; i++)
		w2[i] = rng_unit(&s) - 0.5f;
	memset(oldw, 0, wn * 4);
	stage_end(r);
	stage_begin(r, S_HTOD);
	VGO(r, vgMemcpyHtoD(r->ctx, dx, x, (size_t)n * 4));
	VGO(r, vgMemcpyHtoD(r->ctx, dw, w1, wn * 4));
	VGO(r, vgMemcpyHtoD(r->ctx, dold, oldw, wn * 4));
	stage_end(r);
	stage_begin(r, S_KERNCONF);
	fp.n_in = n;
	fp.n_out = HID;
	ap.n_in = n;
	ap.n_out = HID;
	ap.eta = ETA;
	ap.momentum = MOMENTUM;
	fb[0] = (vgBuffer){ dx, (size_t)n * 4 };
	fb[1] = (vgBuffer){ dw, wn * 4 };
	fb[2] = (vgBuffer){ dh, HID * 4 };
	ab[0] = (vgBuffer){ dd, HID * 4 };
	ab[1] = (vgBuffer){ dx, (size_t)n * 4 };
	ab[2] = (vgBuffer){ dw, wn * 4 };
	ab[3] = (vgBuffer){ dold, wn * 4 };
	stage_end(r);
	stage_begin(r, S_EXEC);
	VGO(r, bench_launch(r, VG_KERNEL_BACKPROP_FORWARD, grid, &fp, sizeof(fp), fb, 3));
	VGO(r, vgMemcpyDtoH(r->ctx, hidden, dh, sizeof(hidden)));
	cpu_middle(hidden, w2, target, hdelta, &out);
	VGO(r, vgMemcpyHtoD(r->ctx, dd, hdelta, sizeof(hdelta)));
	VGO(r, bench_launch(r, VG_KERNEL_BACKPROP_ADJUST, grid, &ap, sizeof(ap), ab, 4));
	VGO(r, vgSynchronize(r->ctx));
	stage_end(r);
	stage_begin(r, S_DTOH);
	VGO(r, vgMemcpyDtoH(r->ctx, w1out, dw, wn * 4));
	stage_end(r);
	stage_begin(r, S_DATAREAD);
	r->checksum = sum_f32(w1out, wn);
	stage_end(r);
	stage_begin(r, S_CLOSE);
	VGO(r, vgMemFree(r->ctx, dx));
	VGO(r, vgMemFree(r->ctx, dw));
	VGO(r, vgMemFree(r->ctx, dold));
	VGO(r, vgMemFree(r->ctx, dh));
	VGO(r, vgMemFree(r->ctx, dd));
	stage_end(r);
	if (bench_close(r))
		goto out;

	/* CPU reference of the whole step */
	for (j = 0; j < HID; j++) {
		double acc = w1[j];

		for (i = 0; i < n; i++)
			acc += (double)x[i] * w1[(size_t)(i + 1) * HID + j];
		rh[j] = squash(acc);
	}
	bad += cmp_f32(hidden, rh, HID, 1e-4, 1e-6, &f);
	cpu_middle(rh, w2, target, rdelta, &rout);
	rw = xmalloc(wn * 4);
	for (i = 0; i <= n; i++) {
		float xi = i == 0 ? 1.0f : x[i - 1];

		for (j = 0; j < HID; j++) {
			size_t k = (size_t)i * HID + j;
			float d = ETA * rdelta[j] * xi + MOMENTUM * oldw[k];

			rw[k] = w1[k] + d;
		}
	}
	bad += cmp_f32(w1out, rw, wn, 1e-3, 1e-6, &f);
	r->verified = bad == 0;
	snprintf(r->detail, sizeof(r->detail), "output %.6f (ref %.6f), %zu mismatching hidden/weight values", out, rout,
		 bad);
out:
	free(x);
	free(w1);
	free(w1out);
	free(w2);
	free(oldw);
	free(rw);
	return r->err ? -1 : 0;
}

const struct bench bench_backprop = { "backprop", "back propagation, one training step (Rodinia BP)", run_backprop };
