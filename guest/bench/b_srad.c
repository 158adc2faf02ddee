// SPDX-License-Identifier: MIT
/*
 * SRAD and SRAD2 (Rodinia SRAD v1/v2, GPUvm's SRAD and SRAD2): speckle-reducing anisotropic
 * diffusion. Per iteration the host computes q0sqr from the region of interest of the current
 * image, launches SRAD1 and SRAD2, and reads the image back (as Rodinia's srad_v2 does).
 * SRAD: a synthetic speckled image, the whole image as ROI. SRAD2: random pseudo-inputs, a
 * corner of the image as ROI.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"

#define LAMBDA 0.5f

struct roi {
	unsigned int r1, r2, c1, c2; /* inclusive */
};

static float q0sqr_of(const float *J, unsigned int cols, const struct roi *roi)
{
	double sum = 0, sum2 = 0, size = (double)(roi->r2 - roi->r1 + 1) * (roi->c2 - roi->c1 + 1), mean, var;
	unsigned int i, j;

	for (i = roi->r1; i <= roi->r2; i++)
		for (j = roi->c1; j <= roi->c2; j++) {
			double t = J[(size_t)i * cols + j];

			sum += t;
			sum2 += t * t;
		}
	mean = sum / size;
	var = sum2 / size - mean * mean;
	return (float)(var / (mean * mean));
}

/* One iteration on the CPU, with the formulas of docs/kernels.md §13-14. */
static void srad_ref(float *J, float *dN, float *dS, float *dW, float *dE, float *c, unsigned int R, unsigned int C,
		     float q0sqr)
{
	unsigned int r, k;

	for (r = 0; r < R; r++)
		for (k = 0; k < C; k++) {
			size_t i = (size_t)r * C + k;
			float Jc = J[i];
			float n = J[(size_t)(r ? r - 1 : 0) * C + k], s = J[(size_t)(r + 1 < R ? r + 1 : R - 1) * C + k];
			float w = J[(size_t)r * C + (k ? k - 1 : 0)], e = J[(size_t)r * C + (k + 1 < C ? k + 1 : C - 1)];
			float G2, L, num, den, q2, cc;

			dN[i] = n - Jc;
			dS[i] = s - Jc;
			dW[i] = w - Jc;
			dE[i] = e - Jc;
			G2 = (dN[i] * dN[i] + dS[i] * dS[i] + dW[i] * dW[i] + dE[i] * dE[i]) / (Jc * Jc);
			L = (dN[i] + dS[i] + dW[i] + dE[i]) / Jc;
			num = 0.5f * G2 - L * L / 16.0f;
			den = (1.0f + 0.25f * L) * (1.0f + 0.25f * L);
			q2 = num / den;
			cc = 1.0f / (1.0f + (q2 - q0sqr) / (q0sqr * (1.0f + q0sqr)));
			c[i] = cc < 0 ? 0 : cc > 1 ? 1 : cc;
		}
	for (r = 0; r < R; r++)
		for (k = 0; k < C; k++) {
			size_t i = (size_t)r * C + k;
			float cS = c[(size_t)(r + 1 < R ? r + 1 : R - 1) * C + k], cE = c[(size_t)r * C + (k + 1 < C ? k + 1 : C - 1)];

			J[i] += 0.25f * LAMBDA * (c[i] * dN[i] + cS * dS[i] + c[i] * dW[i] + cE * dE[i]);
		}
}

static int run_srad_common(struct bench_run *r, int random_inputs)
{
	unsigned int n = r->o->size ? r->o->size : r->o->large ? 1024 : 256, it = r->o->iters ? r->o->iters : 10, i, j, k;
	size_t cells = (size_t)n * n, bytes = cells * 4, bad = 0, f = 0;
	float *J = xmalloc(bytes), *J0 = xmalloc(bytes), *w[5] = { NULL };
	vgDevicePtr d[6];
	uint64_t s = r->o->seed;
	struct roi roi = { 0, n - 1, 0, n - 1 };
	const unsigned int grid[3] = { (n + 15) / 16, (n + 15) / 16, 1 };
	struct { uint32_t rows, cols; float v; } p1, p2;
	vgBuffer b[6];

	if (random_inputs) {
		roi.r2 = n / 8 ? n / 8 - 1 : 0;
		roi.c2 = roi.r2;
	}
	snprintf(r->size_desc, sizeof(r->size_desc), "%ux%u, %u iterations", n, n, it);
	if (bench_init(r))
		goto out;
	stage_begin(r, S_MEMALLOC);
	for (k = 0; k < 6; k++)
		VGO(r, vgMemAlloc(r->ctx, &d[k], bytes));
	stage_end(r);
	stage_begin(r, S_DATAINIT);
	for (i = 0; i < n; i++)
		for (j = 0; j < n; j++) {
			float v;

			if (random_inputs) {
				v = expf(rng_unit(&s));
			} else {
				/* a smooth "organ" pattern with multiplicative speckle, as an ultrasound image */
				float img = 100.0f + 60.0f * sinf((float)i / 19.0f) * cosf((float)j / 23.0f);

				img *= 0.75f + 0.5f * rng_unit(&s);
				v = expf(img / 255.0f);
			}
			J[(size_t)i * n + j] = v;
		}
	memcpy(J0, J, bytes);
	stage_end(r);
	stage_begin(r, S_HTOD);
	VGO(r, vgMemcpyHtoD(r->ctx, d[0], J, bytes));
	stage_end(r);
	stage_begin(r, S_KERNCONF);
	p1.rows = p2.rows = n;
	p1.cols = p2.cols = n;
	p2.v = LAMBDA;
	for (k = 0; k < 6; k++)
		b[k] = (vgBuffer){ d[k], bytes };
	stage_end(r);
	stage_begin(r, S_EXEC);
	for (i = 0; i < it; i++) {
		p1.v = q0sqr_of(J, n, &roi);
		VGO(r, bench_launch(r, VG_KERNEL_SRAD1, grid, &p1, sizeof(p1), b, 6));
		VGO(r, bench_launch(r, VG_KERNEL_SRAD2, grid, &p2, sizeof(p2), b, 6));
		if (i + 1 < it)
			VGO(r, vgMemcpyDtoH(r->ctx, J, d[0], bytes));
	}
	VGO(r, vgSynchronize(r->ctx));
	stage_end(r);
	stage_begin(r, S_DTOH);
	VGO(r, vgMemcpyDtoH(r->ctx, J, d[0], bytes));
	stage_end(r);
	stage_begin(r, S_DATAREAD);
	r->checksum = sum_f32(J, cells);
	stage_end(r);
	stage_begin(r, S_CLOSE);
	for (k = 0; k < 6; k++)
		VGO(r, vgMemFree(r->ctx, d[k]));
	stage_end(r);
	if (bench_close(r))
		goto out;

	for (k = 0; k < 5; k++)
		w[k] = xmalloc(bytes);
	for (i = 0; i < it; i++)
		srad_ref(J0, w[0], w[1], w[2], w[3], w[4], n, n, q0sqr_of(J0, n, &roi));
	bad = cmp_f32(J, J0, cells, 1e-3, 1e-5, &f);
	r->verified = bad == 0;
	snprintf(r->detail, sizeof(r->detail), "ROI %ux%u, %zu of %zu pixels differ (first %zu: %.6f vs %.6f)",
		 roi.r2 - roi.r1 + 1, roi.c2 - roi.c1 + 1, bad, cells, f, (double)J[f], (double)J0[f]);
out:
	free(J);
	free(J0);
	for (k = 0; k < 5; k++)
		free(w[k]);
	return r->err ? -1 : 0;
}

static int run_srad(struct bench_run *r) { return run_srad_common(r, 0); }
static int run_srad2(struct bench_run *r) { return run_srad_common(r, 1); }

const struct bench bench_srad = { "srad", "speckle-reducing anisotropic diffusion (Rodinia SRAD)", run_srad };
const struct bench bench_srad2 = { "srad2", "SRAD with random pseudo-inputs", run_srad2 };
