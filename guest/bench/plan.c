// SPDX-License-Identifier: MIT
/* Built-in kernel plans: a line-by-line mirror of src/gpu/program/builtins.ts (see plan.h). */
#include "plan.h"

#include <errno.h>
#include <string.h>

#include "vugpu_hw.h"

#define LOOP_BUDGET 60000u                   /* back-edges per launch (the engine's cap: 65,000) */
#define MAX_DIM (1ull << 30)
#define MAX_ELEMS (1ull << 31)
#define MAX_GRID 65535u
#define WG 256u
#define LOOP_CHUNK (16ull * LOOP_BUDGET)       /* LCG steps per LOOP launch */
#define GEMM_K_SLICE (16u * LOOP_BUDGET)       /* depth of k per GEMM launch */
#define BP_I_SLICE (16u * LOOP_BUDGET)         /* inputs per BACKPROP_FORWARD launch */
#define BFS_EDGE_WINDOW ((LOOP_BUDGET - 2000u) * 256u)
#define LCG_MUL 1664525u
#define LCG_INC 1013904223u

static const struct {
	const char *file;
	int buffers;
	uint32_t writes;
	uint32_t min_params;
} rows[] = {
	[VG_K_NOP] = { "nop", 0, 0, 0 },
	[VG_K_LOOP] = { "loop", 1, 0x1, 20 },
	[VG_K_MADD] = { "madd", 3, 0x4, 4 },
	[VG_K_FMADD] = { "fmadd", 3, 0x4, 4 },
	[VG_K_MMUL] = { "mmul", 3, 0x4, 4 },
	[VG_K_FMMUL] = { "fmmul", 3, 0x4, 4 },
	[VG_K_BACKPROP_FORWARD] = { "backprop_forward", 3, 0x4, 8 },
	[VG_K_BACKPROP_ADJUST] = { "backprop_adjust", 4, 0xc, 16 },
	[VG_K_BFS] = { "bfs", 7, 0x7c, 8 },
	[VG_K_HOTSPOT] = { "hotspot", 3, 0x4, 32 },
	[VG_K_LUD_DIAGONAL] = { "lud_diagonal", 1, 0x1, 12 },
	[VG_K_LUD_PERIMETER] = { "lud_perimeter", 1, 0x1, 12 },
	[VG_K_LUD_INTERNAL] = { "lud_internal", 1, 0x1, 12 },
	[VG_K_SRAD1] = { "srad1", 6, 0x3e, 12 },
	[VG_K_SRAD2] = { "srad2", 6, 0x1, 12 },
	[VG_K_MEMSET] = { "memset", 1, 0x1, 16 },
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

const char *builtin_file(unsigned int k)
{
	return k < NROWS ? rows[k].file : NULL;
}

int builtin_buffers(unsigned int k)
{
	return k < NROWS ? rows[k].buffers : -1;
}

uint32_t builtin_writes(unsigned int k)
{
	return k < NROWS ? rows[k].writes : 0;
}

/* ---- helpers (builtins.ts: u32, u64, fits, push, grid2d, elementwise, sizes) ---- */

struct pctx {
	const uint8_t *p;
	size_t plen;
	const uint64_t *len;
	struct plan *out;
	int overflow;
};

static uint32_t u32at(const struct pctx *c, size_t off)
{
	uint32_t v;

	memcpy(&v, c->p + off, 4); /* little-endian guest, as the device */
	return v;
}

static uint64_t u64at(const struct pctx *c, size_t off)
{
	return (uint64_t)u32at(c, off) | (uint64_t)u32at(c, off + 4) << 32;
}

static uint64_t cdiv(uint64_t a, uint64_t b)
{
	return (a + b - 1) / b;
}

static uint64_t min64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* buffer i holds a·b elements of `elem` bytes (exact: 128-bit product) */
static int fits(const struct pctx *c, unsigned int i, uint64_t a, uint64_t b, uint64_t elem)
{
	return (unsigned __int128)a * b * elem <= c->len[i];
}

static void grid2d(uint32_t g[3], uint64_t groups)
{
	uint64_t x = min64(groups, MAX_GRID);

	g[0] = (uint32_t)x;
	g[1] = (uint32_t)cdiv(groups, x);
	g[2] = 1;
}

/* Append a dispatch: push = the first `keep` parameter bytes, then `nextra` u32 words. */
static struct plan_dispatch *add(struct pctx *c, const uint32_t grid[3], size_t keep, const uint32_t *extra,
				 unsigned int nextra, uint64_t repeat)
{
	struct plan_dispatch *d;

	if (c->out->n == PLAN_MAX_DISPATCHES) {
		c->overflow = 1;
		return NULL;
	}
	d = &c->out->d[c->out->n++];
	memset(d, 0, sizeof(*d));
	memcpy(d->grid, grid, sizeof(d->grid));
	memcpy(d->push, c->p, keep);
	memcpy(d->push + keep, extra, 4 * (size_t)nextra);
	d->push_bytes = (uint32_t)(keep + 4 * (size_t)nextra);
	d->repeat = repeat;
	return d;
}

static const uint32_t ONE[3] = { 1, 1, 1 };

static int elementwise(struct pctx *c, uint64_t count, size_t keep)
{
	uint32_t g[3];

	if (count) {
		grid2d(g, cdiv(count, WG));
		add(c, g, keep, NULL, 0, 1);
	}
	return 0;
}

/* ---- per kernel ---- */

static int plan_nop(struct pctx *c)
{
	add(c, ONE, 0, NULL, 0, 1);
	return 0;
}

static int plan_loop(struct pctx *c)
{
	uint64_t iterations = u64at(c, 0), target = u64at(c, 8), more;
	uint32_t first[3] = { 1, LCG_MUL, LCG_INC }, next[3] = { 0, LCG_MUL, LCG_INC };

	if (c->len[0] < 24)
		return -EINVAL;
	if (!iterations && !target)
		return -EINVAL;
	add(c, ONE, 20, first, 3, 1);
	more = iterations ? cdiv(iterations, LOOP_CHUNK) - 1 : PLAN_REPEAT_UNTIL_TIME;
	c->out->elapsed_binding = 0;
	c->out->elapsed_offset = 8;
	if (more > 0)
		add(c, ONE, 20, next, 3, more);
	c->out->time_limit_ns = target;
	return 0;
}

static int64_t square_n(const struct pctx *c)
{
	uint64_t n = u32at(c, 0);

	if (n > MAX_DIM)
		return -1;
	for (unsigned int i = 0; i < 3; i++)
		if (!fits(c, i, n, n, 4))
			return -1;
	if (n * n >= MAX_ELEMS)
		return -1;
	return (int64_t)n;
}

static int plan_add(struct pctx *c)
{
	int64_t n = square_n(c);

	return n < 0 ? -EINVAL : elementwise(c, (uint64_t)n * (uint64_t)n, 4);
}

/* GEMM launches over an m×m tile grid summing k in [0, depth): slices of GEMM_K_SLICE; the push
 * is `keep` parameter bytes, then k0, k1 and (accumulate_word) 1 for every launch after the first. */
static void gemm(struct pctx *c, uint64_t m, uint64_t depth, size_t keep, int accumulate_word)
{
	uint32_t tiles = (uint32_t)cdiv(m, 64), g[3] = { tiles, tiles, 1 }, w[3];
	uint64_t k0 = 0, k1;
	unsigned int i = 0;

	if (!m)
		return;
	do {
		k1 = min64(depth, k0 + GEMM_K_SLICE);
		w[0] = (uint32_t)k0;
		w[1] = (uint32_t)k1;
		w[2] = i > 0;
		add(c, g, keep, w, accumulate_word ? 3 : 2, 1);
		k0 = k1;
		i++;
	} while (k0 < depth);
}

static int plan_mul(struct pctx *c)
{
	int64_t n = square_n(c);

	if (n < 0)
		return -EINVAL;
	gemm(c, (uint64_t)n, (uint64_t)n, 4, 1);
	return 0;
}

static int layer_dims(const struct pctx *c, uint64_t *nin, uint64_t *nout)
{
	*nin = u32at(c, 0);
	*nout = u32at(c, 4);
	return *nin < MAX_DIM && *nout <= MAX_DIM;
}

static int plan_bp_forward(struct pctx *c)
{
	uint64_t nin, nout, i0 = 0, i1;
	uint32_t g[3], w[4];

	if (!layer_dims(c, &nin, &nout))
		return -EINVAL;
	if (!fits(c, 0, nin, 1, 4) || !fits(c, 1, nin + 1, nout, 4) || !fits(c, 2, nout, 1, 4))
		return -EINVAL;
	if ((nin + 1) * nout >= MAX_ELEMS)
		return -EINVAL;
	if (!nout)
		return 0;
	grid2d(g, cdiv(nout, 16));
	do { /* n_in = 0 still takes one launch: y = sigmoid(bias) */
		i1 = min64(nin, i0 + BP_I_SLICE);
		w[0] = (uint32_t)i0;
		w[1] = (uint32_t)i1;
		w[2] = i0 == 0;
		w[3] = i1 == nin;
		add(c, g, 8, w, 4, 1);
		i0 = i1;
	} while (i0 < nin);
	return 0;
}

static int plan_bp_adjust(struct pctx *c)
{
	uint64_t nin, nout, total;

	if (!layer_dims(c, &nin, &nout))
		return -EINVAL;
	if (!fits(c, 0, nout, 1, 4) || !fits(c, 1, nin, 1, 4) || !fits(c, 2, nin + 1, nout, 4) || !fits(c, 3, nin + 1, nout, 4))
		return -EINVAL;
	total = (nin + 1) * nout;
	if (total >= MAX_ELEMS)
		return -EINVAL;
	return elementwise(c, total, 16);
}

static int plan_bfs(struct pctx *c)
{
	uint64_t n = u32at(c, 0), m = u32at(c, 4), lo = 0, hi;
	uint32_t g[3], w[3] = { 0, 0, 0 };

	if (!fits(c, 0, n + 1, 1, 4) || !fits(c, 1, m, 1, 4) || !fits(c, 2, n, 1, 1) || !fits(c, 3, n, 1, 1) ||
	    !fits(c, 4, n, 1, 1) || !fits(c, 5, n, 1, 4) || !fits(c, 6, 1, 1, 4))
		return -EINVAL;
	if (n + 1 >= MAX_ELEMS || m >= MAX_ELEMS)
		return -EINVAL;
	add(c, ONE, 8, w, 3, 1); /* phase 0: clear `changed` */
	c->out->error_binding = 6;
	c->out->error_offset = 0;
	c->out->error_mask = 2;
	if (!n)
		return 0;
	grid2d(g, cdiv(n, WG));
	do { /* m = 0 still expands once: a frontier node's offsets are checked */
		hi = min64(m, lo + BFS_EDGE_WINDOW);
		w[0] = 1;
		w[1] = (uint32_t)lo;
		w[2] = (uint32_t)hi;
		add(c, g, 8, w, 3, 1);
		lo = hi;
	} while (lo < m);
	w[0] = 2;
	w[1] = w[2] = 0;
	add(c, g, 8, w, 3, 1);
	return 0;
}

static int plan_hotspot(struct pctx *c)
{
	uint64_t rows_ = u32at(c, 0), cols = u32at(c, 4);

	if (rows_ > MAX_DIM || cols > MAX_DIM)
		return -EINVAL;
	for (unsigned int i = 0; i < 3; i++)
		if (!fits(c, i, rows_, cols, 4))
			return -EINVAL;
	if (rows_ * cols >= MAX_ELEMS)
		return -EINVAL;
	return elementwise(c, rows_ * cols, 32);
}

struct lud_step {
	uint64_t n, o, b, rest;
};

static int lud_step(const struct pctx *c, struct lud_step *s)
{
	uint64_t n = u32at(c, 0), bs = u32at(c, 4), step = u32at(c, 8);

	if (!n || n > MAX_DIM || !bs || !fits(c, 0, n, n, 4))
		return -EINVAL;
	if (step >= cdiv(n, bs))
		return -EINVAL;
	if (n * n >= MAX_ELEMS)
		return -EINVAL;
	s->n = n;
	s->o = step * bs;
	s->b = min64(bs, n - s->o);
	s->rest = s->o + s->b;
	return 0;
}

/* back-edges of lud_diagonal.comp for pivot k over `rows` rows below it (a subgroup's worst) */
static uint64_t lud_diag_cost(uint64_t b, uint64_t k, uint64_t rows_)
{
	uint64_t r = cdiv(rows_, 16), cc = cdiv(b - k - 1, 16);

	return 1 + cdiv(rows_, 256) + r + r * cc;
}

static void lud_diag_launch(struct pctx *c, uint64_t k0, uint64_t k1, uint64_t r0, uint64_t r1)
{
	uint32_t w[4] = { (uint32_t)k0, (uint32_t)k1, (uint32_t)r0, (uint32_t)r1 };

	add(c, ONE, 12, w, 4, 1);
}

static int plan_lud_diagonal(struct pctx *c)
{
	struct lud_step s;
	uint64_t b, k0 = 0, used = 0, k;

	if (lud_step(c, &s))
		return -EINVAL;
	b = s.b;
	for (k = 0; k < b; k++) {
		uint64_t cost = lud_diag_cost(b, k, b - k - 1), cc, rows_per, r0;
		int64_t q;

		if (cost <= LOOP_BUDGET - used) {
			used += cost;
			continue;
		}
		if (k > k0)
			lud_diag_launch(c, k0, k, 0, b);
		k0 = k;
		used = 0;
		if (cost <= LOOP_BUDGET) {
			used = cost;
			continue;
		}
		/* one pivot too big for a launch: its rows are independent, cut them */
		cc = cdiv(b - k - 1, 16);
		q = (int64_t)((LOOP_BUDGET - 1 - LOOP_BUDGET / 16) / (1 + cc));
		rows_per = 16 * (uint64_t)(q > 1 ? q : 1);
		while (rows_per > 16 && lud_diag_cost(b, k, rows_per) > LOOP_BUDGET)
			rows_per -= 16;
		for (r0 = k + 1; r0 < b; r0 += rows_per)
			lud_diag_launch(c, k, k + 1, r0, min64(b, r0 + rows_per));
		k0 = k + 1;
	}
	if (b > k0)
		lud_diag_launch(c, k0, b, 0, b);
	return 0;
}

static int plan_lud_perimeter(struct pctx *c)
{
	struct lud_step s;
	uint64_t per, p0;
	uint32_t g[3], w[2];

	if (lud_step(c, &s))
		return -EINVAL;
	if (s.rest >= s.n)
		return 0;
	/* a subgroup may hold column and row tasks: pivot p costs (1 + p) + (1 + b − p − 1) = b + 1 */
	per = LOOP_BUDGET / (s.b + 1);
	if (!per)
		per = 1;
	grid2d(g, cdiv(2 * (s.n - s.rest), WG));
	for (p0 = 0; p0 < s.b; p0 += per) {
		w[0] = (uint32_t)p0;
		w[1] = (uint32_t)min64(s.b, p0 + per);
		add(c, g, 12, w, 2, 1);
	}
	return 0;
}

static int plan_lud_internal(struct pctx *c)
{
	struct lud_step s;

	if (lud_step(c, &s))
		return -EINVAL;
	if (s.rest >= s.n)
		return 0;
	gemm(c, s.n - s.rest, s.b, 12, 0);
	return 0;
}

static int plan_srad(struct pctx *c)
{
	uint64_t rows_ = u32at(c, 0), cols = u32at(c, 4);

	if (rows_ > MAX_DIM || cols > MAX_DIM)
		return -EINVAL;
	for (unsigned int i = 0; i < 6; i++)
		if (!fits(c, i, rows_, cols, 4))
			return -EINVAL;
	if (rows_ * cols >= MAX_ELEMS)
		return -EINVAL;
	return elementwise(c, rows_ * cols, 12);
}

static int plan_memset(struct pctx *c)
{
	uint64_t count = u64at(c, 8);

	if ((unsigned __int128)count * 4 > c->len[0])
		return -EINVAL;
	if (count >= MAX_ELEMS)
		return -EINVAL;
	return elementwise(c, count, 16);
}

int builtin_plan(unsigned int kernel, const void *params, size_t param_bytes, const uint64_t *lengths,
		 unsigned int nbuf, struct plan *out)
{
	static int (*const fns[])(struct pctx *) = {
		[VG_K_NOP] = plan_nop, [VG_K_LOOP] = plan_loop, [VG_K_MADD] = plan_add, [VG_K_FMADD] = plan_add,
		[VG_K_MMUL] = plan_mul, [VG_K_FMMUL] = plan_mul, [VG_K_BACKPROP_FORWARD] = plan_bp_forward,
		[VG_K_BACKPROP_ADJUST] = plan_bp_adjust, [VG_K_BFS] = plan_bfs, [VG_K_HOTSPOT] = plan_hotspot,
		[VG_K_LUD_DIAGONAL] = plan_lud_diagonal, [VG_K_LUD_PERIMETER] = plan_lud_perimeter,
		[VG_K_LUD_INTERNAL] = plan_lud_internal, [VG_K_SRAD1] = plan_srad, [VG_K_SRAD2] = plan_srad,
		[VG_K_MEMSET] = plan_memset,
	};
	struct pctx c = { params, param_bytes, lengths, out, 0 };
	int ret;

	memset(out, 0, sizeof(*out));
	out->elapsed_binding = -1;
	out->error_binding = -1;
	if (kernel >= NROWS)
		return -ENOSYS;
	/* dispatch.cc's common checks (buffer count, parameter size), then the kernel's own */
	if ((int)nbuf != rows[kernel].buffers || param_bytes < rows[kernel].min_params)
		return -EINVAL;
	ret = fns[kernel](&c);
	if (!ret && c.overflow)
		ret = -E2BIG;
	return ret;
}
