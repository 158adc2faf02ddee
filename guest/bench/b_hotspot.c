// SPDX-License-Identifier: MIT
/* HOTSPOT (Rodinia HS): explicit thermal simulation steps on a rows x cols chip grid, ping-pong. */
#include <stdlib.h>
#include <string.h>
#include "bench.h"

struct hs_params {
	uint32_t rows, cols;
	float cap, rx, ry, rz, step, amb;
};

static void hs_constants(struct hs_params *p, unsigned int rows, unsigned int cols)
{
	const double t_chip = 0.0005, chip_h = 0.016, chip_w = 0.016, k_si = 100, spec_heat_si = 1.75e6;
	const double factor_chip = 0.5, max_pd = 3.0e6, precision = 0.001;
	double gh = chip_h / rows, gw = chip_w / cols;

	p->rows = rows;
	p->cols = cols;
	p->cap = (float)(factor_chip * spec_heat_si * t_chip * gw * gh);
	p->rx = (float)(gw / (2.0 * k_si * t_chip * gh));
	p->ry = (float)(gh / (2.0 * k_si * t_chip * gw));
	p->rz = (float)(t_chip / (k_si * gh * gw));
	p->step = (float)(precision / (max_pd / (factor_chip * t_chip * spec_heat_si)));
	p->amb = 80.0f;
}

static void hs_ref_step(const struct hs_params *p, const float *t, const float *pw, float *o)
{
	unsigned int r, c, R = p->rows, C = p->cols;
	float k = p->step / p->cap;

	for (r = 0; r < R; r++) {
		for (c = 0; c < C; c++) {
			float T = t[(size_t)r * C + c];
			float N = t[(size_t)(r ? r - 1 : 0) * C + c], S = t[(size_t)(r + 1 < R ? r + 1 : R - 1) * C + c];
			float W = t[(size_t)r * C + (c ? c - 1 : 0)], E = t[(size_t)r * C + (c + 1 < C ? c + 1 : C - 1)];

			o[(size_t)r * C + c] = T + k * (pw[(size_t)r * C + c] + (N + S - 2.0f * T) / p->ry +
							(E + W - 2.0f * T) / p->rx + (p->amb - T) / p->rz);
		}
	}
}

static int run_hotspot(struct bench_run *r)
{
	unsigned int n = r->o->size ? r->o->size : r->o->large ? 1024 : 256, it = r->o->iters ? r->o->iters : 10, i;
	size_t cells = (size_t)n * n, bytes = cells * 4, bad = 0, f = 0;
	float *temp = xmalloc(bytes), *power = xmalloc(bytes), *res = xmalloc(bytes), *ra = NULL, *rb = NULL;
	vgDevicePtr dt[2], dp;
	struct hs_params p;
	uint64_t s = r->o->seed;
	const unsigned int grid[3] = { (n + 15) / 16, (n + 15) / 16, 1 };
	vgBuffer b[3];

	snprintf(r->size_desc, sizeof(r->size_desc), "%ux%u, %u steps", n, n, it);
	if (bench_init(r))
		goto out;
	stage_begin(r, S_MEMALLOC);
	VGO(r, vgMemAlloc(r->ctx, &dt[0], bytes));
	VGO(r, vgMemAlloc(r->ctx, &dt[1], bytes));
	VGO(r, vgMemAlloc(r->ctx, &dp, bytes));
	stage_end(r);
	stage_begin(r, S_DATAINIT);
	for (i = 0; i < cells; i++) {
		temp[i] = 323.15f + rng_unit(&s) * 20.0f;
		power[i] = rng_unit(&s) * 1e-3f;
	}
	stage_end(r);
	stage_begin(r, S_HTOD);
	VGO(r, vgMemcpyHtoD(r->ctx, dt[0], temp, bytes));
	VGO(r, vgMemcpyHtoD(r->ctx, dp, power, bytes));
	stage_end(r);
	stage_begin(r, S_KERNCONF);
	hs_constants(&p, n, n);
	stage_end(r);
	stage_begin(r, S_EXEC);
	for (i = 0; i < it; i++) {
		b[0] = (vgBuffer){ dt[i & 1], bytes };
		b[1] = (vgBuffer){ dp, bytes };
		b[2] = (vgBuffer){ dt[(i & 1) ^ 1], bytes };
		VGO(r, bench_launch(r, VG_KERNEL_HOTSPOT, grid, &p, sizeof(p), b, 3));
	}
	VGO(r, vgSynchronize(r->ctx));
	stage_end(r);
	stage_begin(r, S_DTOH);
	VGO(r, vgMemcpyDtoH(r->ctx, res, dt[it & 1], bytes));
	stage_end(r);
	stage_begin(r, S_DATAREAD);
	r->checksum = sum_f32(res, cells);
	stage_end(r);
	stage_begin(r, S_CLOSE);
	VGO(r, vgMemFree(r->ctx, dt[0]));
	VGO(r, vgMemFree(r->ctx, dt[1]));
	VGO(r, vgMemFree(r->ctx, dp));
	stage_end(r);
	if (bench_close(r))
		goto out;

	ra = xmalloc(bytes);
	rb = xmalloc(bytes);
	memcpy(ra, temp, bytes);
	for (i = 0; i < it; i++) {
		float *t;

		hs_ref_step(&p, ra, power, rb);
		t = ra;
		ra = rb;
		rb = t;
	}
	bad = cmp_f32(res, ra, cells, 1e-5, 1e-3, &f);
	r->verified = bad == 0;
	snprintf(r->detail, sizeof(r->detail), "%zu of %zu temperatures differ (first %zu: %.5f vs %.5f)", bad, cells, f,
		 (double)res[f], (double)ra[f]);
out:
	free(temp);
	free(power);
	free(res);
	free(ra);
	free(rb);
	return r->err ? -1 : 0;
}

const struct bench bench_hotspot = { "hotspot", "thermal simulation (Rodinia HotSpot)", run_hotspot };
