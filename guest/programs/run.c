// SPDX-License-Identifier: MIT
/*
 * vugpu-programs: guest programs (hw-spec §6.3) through the driver and the runtime's program API.
 *
 *   vugpu-programs [--dir DIR] [--only a:b] [--seed N] [--size N] [--repeat N | --loop]
 *   vugpu-programs --check-limits [--dir DIR]
 *   vugpu-programs --spin N [--dir DIR]
 *   vugpu-programs --latency MS [--window-ms N] [--dir DIR]
 *   vugpu-programs --endless N [--dir DIR]
 *   vugpu-programs --neighbour MS [--nop] [--window-ms N] [--seed N] [--dir DIR]
 *
 * Default: loads each sample module DIR/<name>.spv (DIR default /programs; built on the host by
 * scripts/build-spirv.sh from guest/programs/<name>.comp), runs it on deterministic inputs
 * (splitmix64 from --seed), verifies every output element against a CPU reference and prints one
 * `VUGPU-CHECK {"check":"program-<name>",...}` line per sample with the output digest (FNV-1a of
 * the output bytes, as vugpu-bench's "digest"), so two VMs' runs can be compared bit for bit.
 * Each sample launches twice: `first_us` includes the device's check and compile, `us` is the
 * cached relaunch.
 *
 * --check-limits: the PPROG limits as the driver read them (one "program-limits" check: version
 * 1.0 or 1.1, every limit within vugpu's envelope), then probes, each on a fresh context: launches one
 * step past a limit must come back as VG_ERROR_INVALID_PROGRAM with the BAD_PROGRAM reason of
 * hw-spec §6.3.6 ("limit-<what>"), a launch exactly at the limits must succeed.
 * --spin N: the spin sample with N loop iterations per invocation ("program-spin-run", with
 * "iterations", "expect" and "outcome"): success (verified) while N is
 * below PROG_MAX_LOOP_ITERATIONS, PROGRAM_LOOP_LIMIT at or above it; with no loop limit,
 * success or WATCHDOG — never a wrong result.
 * --repeat N / --loop: the selected mode N times / until killed ("round" in every record, a
 * VUGPU-PHASE line with the round's digest after each round).
 * --latency MS: the launch-latency canary (bench/flood.ts). For MS milliseconds, launches the
 * built-in NOP program (DIR/builtins/nop.spv, cached after its first launch) back to back, each
 * launch → vgSynchronize timed on the guest clock, and every --window-ms (default 250) prints
 * `VUGPU-LAT {"window":i,"n":..,"p50_us":..,"mean_us":..,"p99_us":..,"max_us":..,"ok":..}`.
 * A NOP has no output, so each window ends with one small vecadd (fresh inputs, checked bit for
 * bit against the CPU, not timed into the window): "ok" = every NOP launch succeeded and the
 * vecadd was right, so a device that stopped computing cannot pass as a fast one.
 * --endless N / --neighbour MS: the two tenants of the isolation scenario (issue 34;
 * test/integration/neighbour.test.ts, bench/neighbour.ts): a program that never ends, launched N
 * times over 256 workgroups, and a neighbour that times back-to-back launches and checks each
 * result (see run_endless and run_neighbour).
 *
 * Sample interfaces (guest/programs/README.md; descriptor set 0; push constants at offset 0):
 *   vecadd     f32  c[i] = a[i] + b[i]         bindings a (ro), b (ro), c; push {uint n}
 *   sgemm      f32  C = A·B, row-major, M×K·K×N  bindings A (ro), B (ro), C; push {uint M, N, K};
 *                   one C element per invocation, x = column, y = row
 *   reduce     u32  out[0] = Σ in[i] (mod 2^32)  bindings in (ro), out; push {uint n}; out zeroed
 *   histogram  u32  bins[data[i] % nbins]++      bindings data (ro), bins; push {uint n, nbins}
 *   spin       u32  out[g] = LCG^iterations(seed ^ g)   binding out; push {uint iterations, seed}
 * The workgroup size comes from the module (its LocalSize), the grid covers the problem.
 *
 * Exit status: number of failed checks (at most 125).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "spvgen.h"
#include "vugpu.h"
#include "vugpu_hw.h"
#include "vugpu_names.h"

#define LCG_A 1664525u
#define LCG_C 1013904223u

struct opts {
	const char *dir;
	const char *only;
	unsigned int seed;
	unsigned int size;   /* 0: each sample's default */
	unsigned int repeat;
	int loop;
	int check_limits;
	int spin;
	uint32_t spin_n;
	unsigned int latency_ms;
	unsigned int window_ms;
	unsigned int endless;  /* --endless N: launches of the endless program */
	int neighbour;         /* --neighbour MS */
	unsigned int nb_ms;
	int nb_nop;
};

/* One check's record, printed as VUGPU-CHECK. */
struct rec {
	char name[48];
	int ok;
	int skipped;
	uint32_t digest;
	int digested;
	double first_us, us;
	vgResult err;
	char err_where[48];
	vgChannelError ce;
	char fields[1024]; /* extra JSON members, each starting with ',' */
	char detail[320];
};

static struct opts g_opt;
static vgProgLimits g_lim;
static unsigned int g_round;
static uint32_t g_round_digest;
static int g_failures;

/* ---------------------------------------------------------------- helpers */

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static uint64_t g_rng;

static uint32_t rng_u32(void)
{
	uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull); /* splitmix64, as vugpu-bench */

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (uint32_t)((z ^ (z >> 31)) >> 32);
}

static float rng_unit(void)
{
	return (float)(rng_u32() >> 8) * (1.0f / 16777216.0f);
}

static uint32_t lcg(uint32_t x, uint32_t n)
{
	while (n--)
		x = x * LCG_A + LCG_C;
	return x;
}

static void digest(struct rec *r, const void *p, size_t n)
{
	const unsigned char *b = p;

	if (!r->digested)
		r->digest = 0x811c9dc5u;
	r->digested = 1;
	for (size_t i = 0; i < n; i++)
		r->digest = (r->digest ^ b[i]) * 0x01000193u;
}

static void addf(struct rec *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void addf(struct rec *r, const char *fmt, ...)
{
	size_t n = strlen(r->fields);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->fields + n, sizeof(r->fields) - n, fmt, ap);
	va_end(ap);
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

static int report(struct rec *r)
{
	printf("VUGPU-CHECK {\"check\":\"%s\",\"ok\":%s", r->name, r->ok ? "true" : "false");
	if (g_opt.repeat > 1 || g_opt.loop)
		printf(",\"round\":%u", g_round);
	if (r->skipped)
		printf(",\"skipped\":true");
	if (r->digested) {
		printf(",\"digest\":\"0x%08x\"", r->digest);
		g_round_digest = (g_round_digest ^ r->digest) * 0x01000193u;
	}
	if (r->first_us > 0)
		printf(",\"first_us\":%.1f,\"us\":%.1f", r->first_us, r->us);
	if (r->err) {
		printf(",\"error\":\"%s\",\"where\":", vgGetErrorName(r->err));
		json_str(r->err_where);
	}
	if (r->ce.code) {
		printf(",\"code\":%u,\"code_name\":\"%s\"", r->ce.code, vg_chan_err_name(r->ce.code));
		if (r->ce.code == VG_CERR_BAD_PROGRAM)
			printf(",\"reason\":%u,\"reason_name\":\"%s\"", r->ce.reason, vg_prog_err_name(r->ce.reason));
	}
	printf("%s,\"detail\":", r->fields);
	json_str(r->detail);
	printf("}\n");
	fflush(stdout);
	if (!r->ok)
		g_failures++;
	return r->ok;
}

static void rec_init(struct rec *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rec_init(struct rec *r, const char *fmt, ...)
{
	va_list ap;

	memset(r, 0, sizeof(*r));
	va_start(ap, fmt);
	vsnprintf(r->name, sizeof(r->name), fmt, ap);
	va_end(ap);
}

/* Record the first failing runtime call with the channel error behind it. */
static int fail(struct rec *r, vgContext ctx, vgResult e, const char *where)
{
	if (!r->err) {
		r->err = e;
		snprintf(r->err_where, sizeof(r->err_where), "%s", where);
		if (ctx) {
			vgGetChannelError(ctx, &r->ce);
			snprintf(r->detail, sizeof(r->detail), "%s", vgGetErrorDetail(ctx));
		}
	}
	return -1;
}

#define TRY(r, ctx, call)                                         \
	do {                                                      \
		vgResult e_ = (call);                              \
		if (e_) {                                          \
			fail((r), (ctx), e_, #call);               \
			goto out;                                  \
		}                                                  \
	} while (0)

static void *xmalloc(size_t n)
{
	void *p = calloc(1, n ? n : 1);

	if (!p) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(125);
	}
	return p;
}

/* A module from DIR/<name>.spv; NULL (and errno) if unreadable. */
static uint32_t *load_module(const char *name, size_t *bytes)
{
	char path[512];
	struct stat st;
	uint32_t *w;
	int fd;

	snprintf(path, sizeof(path), "%s/%s.spv", g_opt.dir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || st.st_size <= 0 || st.st_size > (64 << 20)) {
		close(fd);
		errno = EINVAL;
		return NULL;
	}
	w = xmalloc((size_t)st.st_size + 4);
	if (read(fd, w, (size_t)st.st_size) != st.st_size) {
		close(fd);
		free(w);
		errno = EIO;
		return NULL;
	}
	close(fd);
	*bytes = (size_t)st.st_size;
	return w;
}

/* LocalSize of the module's (first) entry point: OpExecutionMode %e LocalSize x y z. */
static void local_size(const uint32_t *w, size_t words, uint32_t wg[3])
{
	size_t i = 5;

	wg[0] = wg[1] = wg[2] = 1;
	while (i < words) {
		uint32_t n = w[i] >> 16, opc = w[i] & 0xffff;

		if (!n)
			break;
		if (opc == 16 && n >= 6 && w[i + 2] == 17) {
			wg[0] = w[i + 3];
			wg[1] = w[i + 4];
			wg[2] = w[i + 5];
			return;
		}
		if (opc == 54) /* OpFunction: past the execution modes */
			break;
		i += n;
	}
}

static unsigned int div_up(uint64_t a, uint32_t b)
{
	return (unsigned int)((a + b - 1) / (b ? b : 1));
}

/* The 1-D samples read a linear workgroup number y·GRID_X + x: G workgroups as
 * (min(G, 65535), ceil(G / 65535), 1) (guest/programs/README.md). */
static void grid1d(unsigned int grid[3], uint64_t n, uint32_t wg)
{
	unsigned int g = div_up(n, wg);

	grid[0] = g < 65535 ? g : 65535;
	grid[1] = div_up(g, 65535);
	grid[2] = 1;
}

/* Launch, synchronise, time it. */
static vgResult launch_sync(vgContext ctx, vgProgram p, const unsigned int grid[3], const vgBinding *b, unsigned int nb,
			    const void *push, size_t pbytes, const vgSpecConstant *spec, unsigned int nspec, double *us)
{
	double t0 = now_us();
	vgResult e = vgLaunchProgram(ctx, p, 0, grid, b, nb, push, pbytes, spec, nspec, 0);

	if (!e)
		e = vgSynchronize(ctx);
	*us = now_us() - t0;
	return e;
}

/* ---------------------------------------------------------------- samples */

struct sample_ctx {
	struct rec *r;
	vgContext ctx;
	vgProgram prog;
	uint32_t *words;
	size_t bytes;
	uint32_t wg[3];
};

/* Open a context and load the sample module. */
static int sample_open(struct sample_ctx *s, struct rec *r, const char *name)
{
	memset(s, 0, sizeof(*s));
	s->r = r;
	s->words = load_module(name, &s->bytes);
	if (!s->words) {
		snprintf(r->detail, sizeof(r->detail), "%s/%s.spv: %s", g_opt.dir, name, strerror(errno));
		return -1;
	}
	local_size(s->words, s->bytes / 4, s->wg);
	addf(r, ",\"program\":\"%s\",\"module_bytes\":%zu,\"wg\":[%u,%u,%u]", name, s->bytes, s->wg[0], s->wg[1], s->wg[2]);
	if (vgCtxCreate(&s->ctx) != VG_SUCCESS) {
		fail(r, NULL, VG_ERROR_NO_DEVICE, "vgCtxCreate");
		return -1;
	}
	{
		vgResult e = vgProgramLoad(s->ctx, s->words, s->bytes, &s->prog);

		if (e)
			return fail(r, s->ctx, e, "vgProgramLoad");
	}
	return 0;
}

static void sample_close(struct sample_ctx *s)
{
	if (s->ctx)
		vgCtxDestroy(s->ctx);
	free(s->words);
	s->ctx = NULL;
	s->words = NULL;
}

/* Two launches (the first compiles), then verify what the second left. */
static vgResult twice(struct sample_ctx *s, const unsigned int grid[3], const vgBinding *b, unsigned int nb, const void *push,
		      size_t pbytes)
{
	double us;
	vgResult e = launch_sync(s->ctx, s->prog, grid, b, nb, push, pbytes, NULL, 0, &s->r->first_us);

	if (!e)
		e = launch_sync(s->ctx, s->prog, grid, b, nb, push, pbytes, NULL, 0, &us);
	if (!e)
		s->r->us = us;
	addf(s->r, ",\"grid\":[%u,%u,%u]", grid[0], grid[1], grid[2]);
	return e;
}

static int run_vecadd(struct rec *r)
{
	struct sample_ctx s;
	unsigned int n = g_opt.size ? g_opt.size : 1u << 16, grid[3], i;
	size_t bytes = (size_t)n * 4, bad = 0, first = 0;
	float *a = xmalloc(bytes), *b = xmalloc(bytes), *c = xmalloc(bytes);
	vgDevicePtr da = 0, db = 0, dc = 0;
	vgBinding bind[3];

	for (i = 0; i < n; i++) {
		a[i] = rng_unit() * 2.0f - 1.0f;
		b[i] = rng_unit() * 2.0f - 1.0f;
	}
	addf(r, ",\"n\":%u", n);
	if (sample_open(&s, r, "vecadd"))
		goto out;
	TRY(r, s.ctx, vgMemAlloc(s.ctx, &da, bytes));
	TRY(r, s.ctx, vgMemAlloc(s.ctx, &db, bytes));
	TRY(r, s.ctx, vgMemAlloc(s.ctx, &dc, bytes));
	TRY(r, s.ctx, vgMemcpyHtoD(s.ctx, da, a, bytes));
	TRY(r, s.ctx, vgMemcpyHtoD(s.ctx, db, b, bytes));
	bind[0] = (vgBinding){ da, bytes, VG_BINDING_READ_ONLY };
	bind[1] = (vgBinding){ db, bytes, VG_BINDING_READ_ONLY };
	bind[2] = (vgBinding){ dc, bytes, 0 };
	grid1d(grid, n, s.wg[0]);
	TRY(r, s.ctx, twice(&s, grid, bind, 3, &n, 4));
	TRY(r, s.ctx, vgMemcpyDtoH(s.ctx, c, dc, bytes));
	digest(r, c, bytes);
	for (i = 0; i < n; i++) { /* one IEEE addition: bit-exact */
		float w = a[i] + b[i];

		if (memcmp(&w, &c[i], 4)) {
			if (!bad)
				first = i;
			bad++;
		}
	}
	r->ok = bad == 0;
	snprintf(r->detail, sizeof(r->detail), "%zu of %u elements differ", bad, n);
	if (bad)
		snprintf(r->detail + strlen(r->detail), sizeof(r->detail) - strlen(r->detail), ", first at %zu: %g, want %g", first,
			 (double)c[first], (double)(a[first] + b[first]));
out:
	sample_close(&s);
	free(a);
	free(b);
	free(c);
	return r->ok;
}

static int run_sgemm(struct rec *r)
{
	struct sample_ctx s;
	unsigned int n = g_opt.size ? g_opt.size : 128, grid[3], i, j, k;
	uint32_t push[3] = { n, n, n }; /* M, N, K */
	size_t elems = (size_t)n * n, bytes = elems * 4, bad = 0, first = 0;
	float *a = xmalloc(bytes), *b = xmalloc(bytes), *c = xmalloc(bytes);
	vgDevicePtr da = 0, db = 0, dc = 0;
	vgBinding bind[3];

	for (i = 0; i < elems; i++) {
		a[i] = rng_unit() * 2.0f - 1.0f;
		b[i] = rng_unit() * 2.0f - 1.0f;
	}
	addf(r, ",\"n\":%u", n);
	if (sample_open(&s, r, "sgemm"))
		goto out;
	TRY(r, s.ctx, vgMemAlloc(s.ctx, &da, bytes));
	TRY(r, s.ctx, vgMemAlloc(s.ctx, &db, bytes));
	TRY(r, s.ctx, vgMemAlloc(s.ctx, &dc, bytes));
	TRY(r, s.ctx, vgMemcpyHtoD(s.ctx, da, a, bytes));
	TRY(r, s.ctx, vgMemcpyHtoD(s.ctx, db, b, bytes));
	bind[0] = (vgBinding){ da, bytes, VG_BINDING_READ_ONLY };
	bind[1] = (vgBinding){ db, bytes, VG_BINDING_READ_ONLY };
	bind[2] = (vgBinding){ dc, bytes, 0 };
	grid[0] = div_up(n, s.wg[0]);
	grid[1] = div_up(n, s.wg[1]);
	grid[2] = 1;
	TRY(r, s.ctx, twice(&s, grid, bind, 3, push, sizeof(push)));
	TRY(r, s.ctx, vgMemcpyDtoH(s.ctx, c, dc, bytes));
	digest(r, c, bytes);
	/* summation order differs from the CPU's: relative tolerance against a double reference */
	for (i = 0; i < n; i++) {
		for (j = 0; j < n; j++) {
			double w = 0, d;

			for (k = 0; k < n; k++)
				w += (double)a[(size_t)i * n + k] * b[(size_t)k * n + j];
			d = fabs(w - c[(size_t)i * n + j]);
			if (!(d <= 1e-5 * n || d <= 1e-4 * fabs(w))) {
				if (!bad)
					first = (size_t)i * n + j;
				bad++;
			}
		}
	}
	r->ok = bad == 0;
	snprintf(r->detail, sizeof(r->detail), "%zu of %zu elements differ%s", bad, elems, bad ? "" : " (tolerance 1e-5*n)");
	if (bad)
		snprintf(r->detail + strlen(r->detail), sizeof(r->detail) - strlen(r->detail), ", first at %zu", first);
out:
	sample_close(&s);
	free(a);
	free(b);
	free(c);
	return r->ok;
}

static int run_reduce(struct rec *r)
{
	struct sample_ctx s;
	unsigned int n = g_opt.size ? g_opt.size : 1u << 18, grid[3], i;
	size_t bytes = (size_t)n * 4;
	uint32_t *in = xmalloc(bytes), want = 0, got[2] = { 0, 0 }, zero[2] = { 0, 0 };
	vgDevicePtr din = 0, dout = 0;
	vgBinding bind[2];
	double us;

	for (i = 0; i < n; i++) {
		in[i] = rng_u32();
		want += in[i];
	}
	addf(r, ",\"n\":%u", n);
	if (sample_open(&s, r, "reduce"))
		goto out;
	TRY(r, s.ctx, vgMemAlloc(s.ctx, &din, bytes));
	TRY(r, s.ctx, vgMemAlloc(s.ctx, &dout, 16));
	TRY(r, s.ctx, vgMemcpyHtoD(s.ctx, din, in, bytes));
	bind[0] = (vgBinding){ din, bytes, VG_BINDING_READ_ONLY };
	bind[1] = (vgBinding){ dout, 16, 0 };
	grid1d(grid, n, s.wg[0]);
	/* accumulates: zero the result before each of the two launches */
	TRY(r, s.ctx, vgMemcpyHtoD(s.ctx, dout, zero, sizeof(zero)));
	TRY(r, s.ctx, launch_sync(s.ctx, s.prog, grid, bind, 2, &n, 4, NULL, 0, &r->first_us));
	TRY(r, s.ctx, vgMemcpyHtoD(s.ctx, dout, zero, sizeof(zero)));
	TRY(r, s.ctx, launch_sync(s.ctx, s.prog, grid, bind, 2, &n, 4, NULL, 0, &us));
	r->us = us;
	addf(r, ",\"grid\":[%u,%u,%u]", grid[0], grid[1], grid[2]);
	TRY(r, s.ctx, vgMemcpyDtoH(s.ctx, got, dout, sizeof(got)));
	digest(r, got, 4);
	r->ok = got[0] == want;
	snprintf(r->detail, sizeof(r->detail), "sum 0x%08x, want 0x%08x", got[0], want);
out:
	sample_close(&s);
	free(in);
	return r->ok;
}

static int run_histogram(struct rec *r)
{
	struct sample_ctx s;
	unsigned int n = g_opt.size ? g_opt.size : 1u << 18, grid[3], i;
	uint32_t push[2] = { n, 256 }, nbins = 256;
	size_t bytes = (size_t)n * 4, bad = 0;
	uint32_t *data = xmalloc(bytes), *bins = xmalloc(nbins * 4), *want = xmalloc(nbins * 4);
	vgDevicePtr dd = 0, db = 0;
	vgBinding bind[2];
	double us;

	for (i = 0; i < n; i++) {
		/* skewed, so that bins differ a lot (and atomics contend) */
		uint32_t v = rng_u32();

		data[i] = (v & 1) ? v : v % 17;
		want[data[i] % nbins]++;
	}
	addf(r, ",\"n\":%u,\"bins\":%u", n, nbins);
	if (sample_open(&s, r, "histogram"))
		goto out;
	TRY(r, s.ctx, vgMemAlloc(s.ctx, &dd, bytes));
	TRY(r, s.ctx, vgMemAlloc(s.ctx, &db, nbins * 4));
	TRY(r, s.ctx, vgMemcpyHtoD(s.ctx, dd, data, bytes));
	bind[0] = (vgBinding){ dd, bytes, VG_BINDING_READ_ONLY };
	bind[1] = (vgBinding){ db, nbins * 4, 0 };
	grid1d(grid, n, s.wg[0]);
	memset(bins, 0, nbins * 4);
	TRY(r, s.ctx, vgMemcpyHtoD(s.ctx, db, bins, nbins * 4));
	TRY(r, s.ctx, launch_sync(s.ctx, s.prog, grid, bind, 2, push, sizeof(push), NULL, 0, &r->first_us));
	TRY(r, s.ctx, vgMemcpyHtoD(s.ctx, db, bins, nbins * 4));
	TRY(r, s.ctx, launch_sync(s.ctx, s.prog, grid, bind, 2, push, sizeof(push), NULL, 0, &us));
	r->us = us;
	addf(r, ",\"grid\":[%u,%u,%u]", grid[0], grid[1], grid[2]);
	TRY(r, s.ctx, vgMemcpyDtoH(s.ctx, bins, db, nbins * 4));
	digest(r, bins, nbins * 4);
	for (i = 0; i < nbins; i++)
		bad += bins[i] != want[i];
	r->ok = bad == 0;
	snprintf(r->detail, sizeof(r->detail), "%zu of %u bins differ (bin 0: %u, want %u)", bad, nbins, bins[0], want[0]);
out:
	sample_close(&s);
	free(data);
	free(bins);
	free(want);
	return r->ok;
}

/* Outcomes a spin of n iterations may have on this device (hw-spec §6.3.5). */
enum { SPIN_OK = 1, SPIN_LOOP_LIMIT = 2, SPIN_WATCHDOG = 4 };

static unsigned int spin_expect(uint32_t n32)
{
	uint64_t lim = g_lim.max_loop_iterations, n = n32; /* 64-bit: n + 2 must not wrap */

	if (!lim)
		return SPIN_OK | SPIN_WATCHDOG; /* no cap: only the watchdog can stop it */
	/* one back-edge per iteration, give or take the loop's form, and the device's probe of the
	 * cap takes up to 5 more (docs/programs.md): both outcomes near the limit */
	if (n + 8 < lim)
		return SPIN_OK;
	if (n > lim + 2)
		return SPIN_LOOP_LIMIT;
	return SPIN_OK | SPIN_LOOP_LIMIT;
}

static int run_spin_n(struct rec *r, uint32_t iters)
{
	struct sample_ctx s;
	unsigned int grid[3] = { 1, 1, 1 }, expect = spin_expect(iters), got = 0, i, nout;
	uint32_t push[2] = { iters, g_opt.seed * 2654435761u }, *out = NULL;
	vgDevicePtr dout = 0;
	vgBinding bind[1];
	vgResult e;
	size_t bad = 0;

	addf(r, ",\"iterations\":%u,\"loop_limit\":%u,\"expect\":\"%s%s%s\"", iters, g_lim.max_loop_iterations,
	     expect & SPIN_OK ? "ok " : "", expect & SPIN_LOOP_LIMIT ? "PROGRAM_LOOP_LIMIT " : "",
	     expect & SPIN_WATCHDOG ? "WATCHDOG" : "");
	if (sample_open(&s, r, "spin"))
		goto out;
	nout = s.wg[0] * s.wg[1] * s.wg[2];
	out = xmalloc((size_t)nout * 4);
	TRY(r, s.ctx, vgMemAlloc(s.ctx, &dout, (size_t)nout * 4));
	bind[0] = (vgBinding){ dout, (size_t)nout * 4, 0 };
	e = launch_sync(s.ctx, s.prog, grid, bind, 1, push, sizeof(push), NULL, 0, &r->first_us);
	r->us = r->first_us;
	if (e == VG_ERROR_PROGRAM_LOOP_LIMIT)
		got = SPIN_LOOP_LIMIT;
	else if (e == VG_ERROR_LAUNCH_TIMEOUT)
		got = SPIN_WATCHDOG;
	else if (e == VG_SUCCESS)
		got = SPIN_OK;
	if (e) {
		fail(r, s.ctx, e, "spin launch");
		r->ok = (got & expect) != 0;
		addf(r, ",\"outcome\":\"%s\"", vg_chan_err_name(r->ce.code));
		goto out;
	}
	TRY(r, s.ctx, vgMemcpyDtoH(s.ctx, out, dout, (size_t)nout * 4));
	digest(r, out, (size_t)nout * 4);
	for (i = 0; i < nout; i++)
		bad += out[i] != lcg(push[1] ^ i, iters);
	addf(r, ",\"outcome\":\"ok\"");
	/* a result, when it comes, must be the right one whatever was expected */
	r->ok = bad == 0 && (expect & SPIN_OK);
	snprintf(r->detail, sizeof(r->detail), "%zu of %u invocations wrong", bad, nout);
out:
	sample_close(&s);
	free(out);
	return r->ok;
}

static int run_spin(struct rec *r)
{
	uint32_t n = 1000;

	if (g_lim.max_loop_iterations && g_lim.max_loop_iterations / 2 < n)
		n = g_lim.max_loop_iterations / 2;
	return run_spin_n(r, n);
}

static const struct sample {
	const char *name;
	int (*run)(struct rec *r);
} samples[] = {
	{ "vecadd", run_vecadd }, { "sgemm", run_sgemm }, { "reduce", run_reduce },
	{ "histogram", run_histogram }, { "spin", run_spin },
};

/* ---------------------------------------------------------------- latency canary */

#define LAT_MAX_SAMPLES 65536u
#define LAT_CHECK_N 256u

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank quantile of a sorted array. */
static double sorted_q(const double *v, size_t n, double q)
{
	size_t i = (size_t)(q * (double)n);

	return n ? v[i < n ? i : n - 1] : 0;
}

/* One vecadd of LAT_CHECK_N fresh elements, checked bit for bit: 1 if right. */
static int lat_check(vgContext ctx, vgProgram prog, const vgDevicePtr d[3], unsigned int wg, struct rec *r)
{
	float a[LAT_CHECK_N], b[LAT_CHECK_N], c[LAT_CHECK_N];
	unsigned int n = LAT_CHECK_N, grid[3], i;
	vgBinding bind[3];
	double us;

	for (i = 0; i < n; i++) {
		a[i] = rng_unit() * 2.0f - 1.0f;
		b[i] = rng_unit() * 2.0f - 1.0f;
		c[i] = -1.0f;
	}
	bind[0] = (vgBinding){ d[0], sizeof(a), VG_BINDING_READ_ONLY };
	bind[1] = (vgBinding){ d[1], sizeof(b), VG_BINDING_READ_ONLY };
	bind[2] = (vgBinding){ d[2], sizeof(c), 0 };
	grid1d(grid, n, wg);
	TRY(r, ctx, vgMemcpyHtoD(ctx, d[0], a, sizeof(a)));
	TRY(r, ctx, vgMemcpyHtoD(ctx, d[1], b, sizeof(b)));
	TRY(r, ctx, vgMemcpyHtoD(ctx, d[2], c, sizeof(c))); /* a stale result must not pass */
	TRY(r, ctx, launch_sync(ctx, prog, grid, bind, 3, &n, 4, NULL, 0, &us));
	TRY(r, ctx, vgMemcpyDtoH(ctx, c, d[2], sizeof(c)));
	for (i = 0; i < n; i++) {
		float w = a[i] + b[i];

		if (memcmp(&w, &c[i], 4)) {
			snprintf(r->detail, sizeof(r->detail), "vecadd element %u: %g, want %g", i, (double)c[i], (double)w);
			return 0;
		}
	}
	return 1;
out:
	return 0;
}

static int run_latency(void)
{
	struct rec r;
	struct sample_ctx nop, va;
	vgDevicePtr d[3] = { 0, 0, 0 };
	unsigned int grid[3] = { 1, 1, 1 }, window = 0, bad_windows = 0;
	double *lat = xmalloc(LAT_MAX_SAMPLES * sizeof(double)), t_start, us;
	int ok = 0;

	rec_init(&r, "program-latency");
	memset(&va, 0, sizeof(va));
	if (sample_open(&nop, &r, "builtins/nop"))
		goto done;
	/* vecadd in the canary's own context: its checks travel the same channel as the NOPs */
	va.words = load_module("vecadd", &va.bytes);
	if (!va.words) {
		snprintf(r.detail, sizeof(r.detail), "%s/vecadd.spv: %s", g_opt.dir, strerror(errno));
		goto done;
	}
	local_size(va.words, va.bytes / 4, va.wg);
	TRY(&r, nop.ctx, vgProgramLoad(nop.ctx, va.words, va.bytes, &va.prog));
	for (int i = 0; i < 3; i++)
		TRY(&r, nop.ctx, vgMemAlloc(nop.ctx, &d[i], LAT_CHECK_N * 4));
	/* both compiled (and checked once) before the first window */
	TRY(&r, nop.ctx, launch_sync(nop.ctx, nop.prog, grid, NULL, 0, NULL, 0, NULL, 0, &r.first_us));
	if (!lat_check(nop.ctx, va.prog, d, va.wg[0], &r))
		goto out;
	printf("VUGPU-PHASE {\"phase\":\"latency-start\",\"ms\":%u,\"window_ms\":%u,\"first_us\":%.1f}\n", g_opt.latency_ms,
	       g_opt.window_ms, r.first_us);
	fflush(stdout);
	t_start = now_us();
	while (now_us() - t_start < g_opt.latency_ms * 1e3) {
		double t_w = now_us(), sum = 0, end = t_w + g_opt.window_ms * 1e3;
		size_t n = 0;
		vgResult e = VG_SUCCESS;
		int wok;

		while (n < LAT_MAX_SAMPLES && now_us() < end) {
			e = launch_sync(nop.ctx, nop.prog, grid, NULL, 0, NULL, 0, NULL, 0, &us);
			if (e)
				break;
			lat[n++] = us;
			sum += us;
		}
		if (e)
			fail(&r, nop.ctx, e, "NOP launch");
		wok = !e && n > 0 && lat_check(nop.ctx, va.prog, d, va.wg[0], &r);
		bad_windows += !wok;
		qsort(lat, n, sizeof(lat[0]), cmp_double);
		printf("VUGPU-LAT {\"window\":%u,\"t_ms\":%.1f,\"n\":%zu,\"p50_us\":%.1f,\"mean_us\":%.1f,\"p99_us\":%.1f,"
		       "\"max_us\":%.1f,\"ok\":%s}\n",
		       window++, (t_w - t_start) / 1e3, n, sorted_q(lat, n, 0.5), n ? sum / (double)n : 0, sorted_q(lat, n, 0.99),
		       n ? lat[n - 1] : 0, wok ? "true" : "false");
		fflush(stdout);
		if (e)
			break; /* a broken channel stays broken: the record says why */
	}
	ok = window > 0 && bad_windows == 0;
	snprintf(r.detail + strlen(r.detail), sizeof(r.detail) - strlen(r.detail), "%s%u windows, %u not ok",
		 r.detail[0] ? "; " : "", window, bad_windows);
out:
	r.ok = ok;
	addf(&r, ",\"windows\":%u,\"bad_windows\":%u", window, bad_windows);
done:
	free(va.words);
	sample_close(&nop);
	free(lat);
	return report(&r);
}

/* ---------------------------------------------------------------- neighbour scenario (issue 34) */

static volatile sig_atomic_t g_stop;

static void on_stop(int sig)
{
	(void)sig;
	g_stop = 1;
}

/* --endless N: the endless program (endless.spv) over ENDLESS_GRID workgroups, N launches, each
 * on a fresh context (the error that stops one is sticky for its context). The device must stop
 * each one: WATCHDOG, or PROGRAM_LOOP_LIMIT on a device with a loop cap; success is impossible. */
#define ENDLESS_GRID 256u

static int run_endless(unsigned int launches)
{
	int ok_all = 1;

	for (unsigned int k = 1; k <= launches && !g_stop; k++) {
		struct rec r;
		struct sample_ctx s;
		unsigned int grid[3] = { ENDLESS_GRID, 1, 1 };
		uint32_t stride = 2; /* every other pass takes the `continue` */
		vgDevicePtr dc = 0;
		vgBinding bind[1];
		vgResult e;

		rec_init(&r, "program-endless");
		addf(&r, ",\"launch\":%u,\"grid\":%u", k, ENDLESS_GRID);
		if (sample_open(&s, &r, "endless"))
			goto next;
		TRY(&r, s.ctx, vgMemAlloc(s.ctx, &dc, 4));
		TRY(&r, s.ctx, vgMemcpyHtoD(s.ctx, dc, &(uint32_t){ 0 }, 4));
		bind[0] = (vgBinding){ dc, 4, 0 };
		printf("VUGPU-PHASE {\"phase\":\"endless-start\",\"launch\":%u}\n", k);
		fflush(stdout);
		e = launch_sync(s.ctx, s.prog, grid, bind, 1, &stride, 4, NULL, 0, &r.first_us);
		r.us = r.first_us;
		printf("VUGPU-PHASE {\"phase\":\"endless-end\",\"launch\":%u,\"ms\":%.1f}\n", k, r.first_us / 1e3);
		fflush(stdout);
		if (e == VG_SUCCESS) {
			snprintf(r.detail, sizeof(r.detail), "an endless program ended with success");
			goto next;
		}
		fail(&r, s.ctx, e, "endless launch");
		r.ok = e == VG_ERROR_LAUNCH_TIMEOUT || e == VG_ERROR_PROGRAM_LOOP_LIMIT;
		addf(&r, ",\"outcome\":\"%s\"", vg_chan_err_name(r.ce.code));
		goto next;
out:
		addf(&r, ",\"outcome\":\"setup failed\"");
next:
		sample_close(&s);
		ok_all &= report(&r);
	}
	return ok_all;
}

/* --neighbour MS: the co-tenant's side. Launches back to back for MS ms (0: until SIGTERM/SIGINT),
 * each launch → vgSynchronize timed. Default: the spin sample (one workgroup, a few iterations,
 * a fresh seed per launch) and every result read back and checked, so a stale or wrong result
 * counts; --nop: the built-in NOP program, nothing to check. A failed launch is counted and the
 * context replaced (its error is sticky), so one failure does not hide the next ones. Every
 * --window-ms: VUGPU-NB {"window","t_ms","n","fails","wrong","p50_us","max_us"}; at the end one
 * "program-neighbour" check with the totals and the quantiles of all launches. */
#define NB_SPIN_ITERS 16u

static void nb_window(unsigned int *window, double t_ms, const double *lat, size_t k, double *ws, int failed,
		      unsigned long long wrong)
{
	if (!k)
		return;
	memcpy(ws, lat, k * sizeof(double));
	qsort(ws, k, sizeof(double), cmp_double);
	printf("VUGPU-NB {\"window\":%u,\"t_ms\":%.1f,\"n\":%zu,\"fails\":%d,\"wrong\":%llu,\"p50_us\":%.1f,\"max_us\":%.1f}\n",
	       (*window)++, t_ms, k, failed, wrong, sorted_q(ws, k, 0.5), ws[k - 1]);
	fflush(stdout);
}

static int run_neighbour(void)
{
	struct rec r;
	struct sample_ctx s;
	const char *name = g_opt.nb_nop ? "builtins/nop" : "spin";
	unsigned int grid[3] = { 1, 1, 1 }, window = 0, nout = 0, opened = 0;
	size_t cap = 1u << 16, n = 0, w0 = 0, fails = 0, wrong = 0;
	double *lat = xmalloc(cap * sizeof(double)), *ws = xmalloc(cap * sizeof(double)), t_start = 0, t_w = 0;
	uint32_t out[64], push[2] = { NB_SPIN_ITERS, 0 }, seed = g_opt.seed * 2654435761u;
	unsigned long long wwrong = 0;
	vgDevicePtr dout = 0;
	vgBinding bind[1];
	char first_err[320] = "";
	int open_failed = 0;

	rec_init(&r, "program-neighbour");
	addf(&r, ",\"program\":\"%s\"", name);
	memset(&s, 0, sizeof(s));
	signal(SIGTERM, on_stop);
	signal(SIGINT, on_stop);
	while (!g_stop && (!opened || !g_opt.nb_ms || now_us() - t_start < g_opt.nb_ms * 1e3)) {
		/* (re)open: at the start and after each failed launch */
		struct rec o;

		rec_init(&o, "open");
		if (!sample_open(&s, &o, name) && !g_opt.nb_nop) {
			vgResult e = vgMemAlloc(s.ctx, &dout, sizeof(out));

			if (e)
				fail(&o, s.ctx, e, "vgMemAlloc");
			bind[0] = (vgBinding){ dout, sizeof(out), 0 };
		}
		if (o.err || !s.prog) {
			snprintf(first_err + strlen(first_err), sizeof(first_err) - strlen(first_err),
				 "%sopening a %s context failed: %s %.100s", first_err[0] ? "; " : "", name,
				 o.err ? vgGetErrorName(o.err) : "", o.detail);
			open_failed = 1;
			break;
		}
		nout = s.wg[0] < 64 ? s.wg[0] : 64;
		if (!opened++) {
			printf("VUGPU-PHASE {\"phase\":\"neighbour-start\",\"program\":\"%s\",\"ms\":%u,\"window_ms\":%u}\n", name,
			       g_opt.nb_ms, g_opt.window_ms);
			fflush(stdout);
			t_start = t_w = now_us();
		}
		while (!g_stop && (!g_opt.nb_ms || now_us() - t_start < g_opt.nb_ms * 1e3)) {
			double us;
			vgResult e;

			push[1] = seed++;
			e = g_opt.nb_nop ? launch_sync(s.ctx, s.prog, grid, NULL, 0, NULL, 0, NULL, 0, &us)
					 : launch_sync(s.ctx, s.prog, grid, bind, 1, push, sizeof(push), NULL, 0, &us);
			if (!e && !g_opt.nb_nop) {
				e = vgMemcpyDtoH(s.ctx, out, dout, nout * 4);
				for (unsigned int i = 0; !e && i < nout; i++)
					if (out[i] != lcg(push[1] ^ i, NB_SPIN_ITERS)) {
						wrong++, wwrong++;
						break;
					}
			}
			if (n == cap) {
				cap *= 2;
				lat = realloc(lat, cap * sizeof(double));
				ws = realloc(ws, cap * sizeof(double));
				if (!lat || !ws) {
					fprintf(stderr, "out of memory\n");
					exit(125);
				}
			}
			lat[n++] = us; /* a failed launch's time counts too: how long the neighbour waited */
			if (e || now_us() - t_w >= g_opt.window_ms * 1e3) {
				nb_window(&window, (t_w - t_start) / 1e3, lat + w0, n - w0, ws, e != 0, wwrong);
				w0 = n;
				wwrong = 0;
				t_w = now_us();
			}
			if (e) {
				struct rec f;

				rec_init(&f, "failed");
				fail(&f, s.ctx, e, "neighbour launch");
				if (!fails++)
					snprintf(first_err, sizeof(first_err), "%s (channel error %s) at launch %zu: %.160s",
						 vgGetErrorName(e), vg_chan_err_name(f.ce.code), n, f.detail);
				break;
			}
		}
		sample_close(&s);
	}
	nb_window(&window, (t_w - t_start) / 1e3, lat + w0, n - w0, ws, 0, wwrong);
	qsort(lat, n, sizeof(double), cmp_double);
	r.ok = n > 0 && fails == 0 && wrong == 0 && !open_failed;
	addf(&r, ",\"launches\":%zu,\"failures\":%zu,\"wrong\":%zu,\"p50_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f,\"ms\":%.1f",
	     n, fails, wrong, sorted_q(lat, n, 0.5), sorted_q(lat, n, 0.999), n ? lat[n - 1] : 0,
	     opened ? (now_us() - t_start) / 1e3 : 0);
	snprintf(r.detail, sizeof(r.detail), "%s", first_err);
	sample_close(&s);
	free(lat);
	free(ws);
	return report(&r);
}

/* ---------------------------------------------------------------- limits */

static int limits_check(void)
{
	struct rec r;
	const vgProgLimits *l = &g_lim;
	const uint32_t env[] = { 1u << 20, 16, 128, 64, 1024, 1024, 1024, 64, 32768, 65535, 65535, 65535, 128u << 20 };
	const uint32_t got[] = { l->max_module_bytes, l->max_bindings, l->max_push_bytes, l->max_spec_constants,
				 l->max_wg_invocations, l->max_wg_size[0], l->max_wg_size[1], l->max_wg_size[2],
				 l->max_shared_bytes, l->max_grid[0], l->max_grid[1], l->max_grid[2], l->max_buffer_bytes };
	/* programs v1.0, or v1.1 (hw-spec 1.6: BUFFER_FLAGS.DEVICE_CACHED) */
	int ok = l->version == VG_PPROG_VERSION_1_0 || l->version == VG_PPROG_VERSION_1_1, bad_field = -1;

	rec_init(&r, "program-limits");
	for (size_t i = 0; i < sizeof(got) / sizeof(got[0]); i++) {
		if (!got[i] || got[i] > env[i]) {
			ok = 0;
			if (bad_field < 0)
				bad_field = (int)i;
		}
	}
	/* alignment and subgroup size: powers of two; features: only the bits §3.10 defines */
	if (l->buffer_align < 4 || (l->buffer_align & (l->buffer_align - 1)) ||
	    (l->subgroup_size & (l->subgroup_size - 1)) || (l->features & ~0x7fu))
		ok = 0;
	r.ok = ok;
	addf(&r,
	     ",\"version\":\"0x%08x\",\"max_module_bytes\":%u,\"max_bindings\":%u,\"max_push_bytes\":%u,"
	     "\"max_spec_constants\":%u,\"max_wg_invocations\":%u,\"max_wg_size\":[%u,%u,%u],\"max_shared_bytes\":%u,"
	     "\"max_grid\":[%u,%u,%u],\"max_buffer_bytes\":%u,\"buffer_align\":%u,\"subgroup_size\":%u,"
	     "\"max_loop_iterations\":%u,\"features\":\"0x%x\"",
	     l->version, l->max_module_bytes, l->max_bindings, l->max_push_bytes, l->max_spec_constants,
	     l->max_wg_invocations, l->max_wg_size[0], l->max_wg_size[1], l->max_wg_size[2], l->max_shared_bytes,
	     l->max_grid[0], l->max_grid[1], l->max_grid[2], l->max_buffer_bytes, l->buffer_align, l->subgroup_size,
	     l->max_loop_iterations, l->features);
	snprintf(r.detail, sizeof(r.detail), "%s", ok ? "within vugpu's envelope (hw-spec §3.10)"
					: bad_field >= 0 ? "a limit is 0 or above the envelope" : "version, alignment, subgroup or features out of spec");
	return report(&r);
}

/* One probe: a launch of `words` (or the vecadd sample) set up by the caller's fields. */
struct probe {
	const char *name;
	const uint32_t *words;   /* NULL: vecadd.spv from DIR */
	size_t words_bytes;      /* bytes at words */
	size_t bytes;            /* bytes to load, 0 = words_bytes (more: zero padding, less: cut) */
	unsigned int entry;
	unsigned int grid[3];
	unsigned int nbind;
	int bind_misalign;       /* add this to binding 0's VA */
	size_t bind0_bytes;      /* 0: the buffer's size */
	unsigned int ro_mask;    /* READ_ONLY bindings */
	size_t push_bytes;
	unsigned int nspec;
	int want_reason;         /* 0: the launch must succeed */
};

#define PROBE_BUF (64u << 10)

static int run_probe(const struct probe *p, const uint32_t *vecadd, size_t vecadd_bytes)
{
	static uint8_t push[4096];
	static vgSpecConstant spec[512];
	struct rec r;
	vgContext ctx = NULL;
	vgProgram prog;
	vgDevicePtr buf[16];
	vgBinding bind[16];
	const uint32_t *words = p->words ? p->words : vecadd;
	size_t have = p->words ? p->words_bytes : vecadd_bytes, mbytes = p->bytes ? p->bytes : have;
	uint32_t n = 16; /* vecadd: only the first elements matter */
	double us;
	vgResult e;
	unsigned int i;

	rec_init(&r, "limit-%s", p->name);
	memset(push, 0, sizeof(push));
	memcpy(push, &n, 4);
	for (i = 0; i < p->nspec && i < 512; i++)
		spec[i] = (vgSpecConstant){ 1000 + i, i }; /* ids the module does not have: ignored */
	addf(&r, ",\"expect\":\"%s\",\"grid\":[%u,%u,%u],\"bindings\":%u,\"push_bytes\":%zu,\"spec\":%u,\"module_bytes\":%zu",
	     p->want_reason ? vg_prog_err_name((unsigned int)p->want_reason) : "ok", p->grid[0], p->grid[1], p->grid[2],
	     p->nbind, p->push_bytes, p->nspec, mbytes);
	if (!words) {
		snprintf(r.detail, sizeof(r.detail), "no module (vecadd.spv missing in %s)", g_opt.dir);
		return report(&r);
	}
	if (vgCtxCreate(&ctx)) {
		fail(&r, NULL, VG_ERROR_NO_DEVICE, "vgCtxCreate");
		return report(&r);
	}
	/* a module longer than its words: zero padding (only its size is judged), shorter: cut */
	if (mbytes > have) {
		uint8_t *big = xmalloc(mbytes);

		memcpy(big, words, have);
		e = vgProgramLoad(ctx, big, mbytes, &prog);
		free(big);
	} else {
		e = vgProgramLoad(ctx, words, mbytes, &prog);
	}
	if (e) {
		fail(&r, ctx, e, "vgProgramLoad");
		goto out;
	}
	for (i = 0; i < p->nbind; i++) {
		e = vgMemAlloc(ctx, &buf[i], PROBE_BUF);
		if (e) {
			fail(&r, ctx, e, "vgMemAlloc");
			goto out;
		}
		bind[i] = (vgBinding){ buf[i], PROBE_BUF, (p->ro_mask >> i) & 1 ? VG_BINDING_READ_ONLY : 0 };
	}
	if (p->nbind) {
		bind[0].ptr += (vgDevicePtr)p->bind_misalign;
		if (p->bind_misalign)
			bind[0].bytes -= 64;
		if (p->bind0_bytes)
			bind[0].bytes = p->bind0_bytes;
	}
	e = vgLaunchProgram(ctx, prog, p->entry, p->grid, bind, p->nbind, push, p->push_bytes, spec, p->nspec, 0);
	if (!e) {
		double t0 = now_us();

		e = vgSynchronize(ctx);
		us = now_us() - t0;
		addf(&r, ",\"sync_us\":%.1f", us);
	}
	if (e)
		fail(&r, ctx, e, "launch");
	if (!p->want_reason) {
		r.ok = e == VG_SUCCESS;
		if (r.ok && p->nbind >= 3) {
			float c[16];

			/* vecadd of zeroed buffers: zeros (the buffers are cleared on allocation) */
			e = vgMemcpyDtoH(ctx, c, buf[2], sizeof(c));
			r.ok = !e;
			for (i = 0; r.ok && i < 16; i++)
				r.ok = c[i] == 0.0f;
		}
		if (!r.detail[0])
			snprintf(r.detail, sizeof(r.detail), "%s", r.ok ? "accepted at the limit" : "refused at the limit");
	} else {
		r.ok = e == VG_ERROR_INVALID_PROGRAM && r.ce.code == VG_CERR_BAD_PROGRAM &&
		       r.ce.reason == (uint32_t)p->want_reason;
	}
out:
	vgCtxDestroy(ctx);
	return report(&r);
}

static void limits_probes(void)
{
	static uint32_t gen[4096];
	size_t vb = 0, gw;
	uint32_t *vecadd = load_module("vecadd", &vb);
	const vgProgLimits *l = &g_lim;
	struct spvgen sg;
	struct probe p;

#define BASE(nm, reason)                                                   \
	do {                                                               \
		memset(&p, 0, sizeof(p));                                  \
		p.name = (nm);                                             \
		p.grid[0] = p.grid[1] = p.grid[2] = 1;                     \
		p.nbind = 3;                                               \
		p.ro_mask = 3;                                             \
		p.push_bytes = 4;                                          \
		p.want_reason = (reason);                                  \
	} while (0)

	/* exactly at the limits: accepted */
	BASE("at-limits", 0);
	p.grid[0] = l->max_grid[0];
	p.push_bytes = l->max_push_bytes;
	p.nspec = l->max_spec_constants;
	run_probe(&p, vecadd, vb);

	BASE("grid-x", VG_PROG_ERR_GRID);
	p.grid[0] = l->max_grid[0] + 1;
	run_probe(&p, vecadd, vb);
	BASE("grid-z", VG_PROG_ERR_GRID);
	p.grid[2] = l->max_grid[2] + 1;
	run_probe(&p, vecadd, vb);
	BASE("push-bytes", VG_PROG_ERR_PUSH_CONSTANTS);
	p.push_bytes = l->max_push_bytes + 4;
	run_probe(&p, vecadd, vb);
	BASE("spec-count", VG_PROG_ERR_SPEC_CONSTANTS);
	p.nspec = l->max_spec_constants + 1;
	run_probe(&p, vecadd, vb);
	if (l->buffer_align > 4) {
		BASE("buffer-align", VG_PROG_ERR_BUFFER);
		p.bind_misalign = 4;
		run_probe(&p, vecadd, vb);
	}
	BASE("buffer-bytes", VG_PROG_ERR_BUFFER);
	p.bind0_bytes = (size_t)l->max_buffer_bytes + 16;
	run_probe(&p, vecadd, vb);
	if (l->max_bindings < VG_COMPUTE_MAX_BUFFERS) {
		BASE("binding-count", VG_PROG_ERR_BUFFER);
		p.nbind = l->max_bindings + 1;
		run_probe(&p, vecadd, vb);
	}
	BASE("binding-missing", VG_PROG_ERR_BINDING); /* vecadd's c is binding 2 ≥ BUFFER_COUNT 2 */
	p.nbind = 2;
	run_probe(&p, vecadd, vb);
	BASE("readonly-written", VG_PROG_ERR_BINDING_WRITABLE);
	p.ro_mask = 7;
	run_probe(&p, vecadd, vb);
	BASE("entry-point", VG_PROG_ERR_ENTRY_POINT);
	p.entry = 1;
	run_probe(&p, vecadd, vb);
	BASE("module-unaligned-length", VG_PROG_ERR_MODULE_SIZE);
	p.bytes = vb - 2;
	run_probe(&p, vecadd, vb);
	BASE("module-tiny", VG_PROG_ERR_MODULE_SIZE);
	p.bytes = 16;
	run_probe(&p, vecadd, vb);
	BASE("module-bytes", VG_PROG_ERR_MODULE_SIZE);
	p.bytes = (size_t)l->max_module_bytes + 4;
	run_probe(&p, vecadd, vb);

	/* generated modules (spvgen): one binding, STORE unless said otherwise */
#define GEN(nm, reason, ...)                                               \
	do {                                                               \
		sg = (struct spvgen){ __VA_ARGS__ }; /* body 0: STORE */ \
		gw = spvgen_emit(&sg, gen, sizeof(gen) / 4);               \
		BASE(nm, reason);                                          \
		p.words = gen;                                             \
		p.words_bytes = gw * 4;                                    \
		p.nbind = 1;                                               \
		p.ro_mask = 0;                                             \
		p.push_bytes = 0;                                          \
		run_probe(&p, vecadd, vb);                                 \
	} while (0)
	GEN("generated-ok", 0, .constant = 1);
	GEN("shared-memory", VG_PROG_ERR_SHARED_MEMORY, .body = SPVGEN_SHARED, .local_x = 64,
	    .shared_words = l->max_shared_bytes / 4 + 1);
	GEN("workgroup-size", VG_PROG_ERR_WORKGROUP_SIZE, .local_x = l->max_wg_size[0] + 1);
	GEN("capability", VG_PROG_ERR_CAPABILITY, .extra_capability = SPV_CAP_VARIABLE_POINTERS);
	GEN("extension", VG_PROG_ERR_EXTENSION, .extension = "SPV_KHR_variable_pointers");
	/* not a module: the magic, then noise */
	{
		uint32_t x = 0x12345678u;

		gen[0] = 0x07230203u;
		for (size_t i = 1; i < 64; i++) {
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			gen[i] = x;
		}
		BASE("invalid", VG_PROG_ERR_INVALID);
		p.words = gen;
		p.words_bytes = 256;
		p.nbind = 1;
		p.ro_mask = 0;
		p.push_bytes = 0;
		run_probe(&p, vecadd, vb);
	}
#undef GEN
#undef BASE
	free(vecadd);
}

/* ---------------------------------------------------------------- main */

static int selected(const char *name)
{
	const char *o = g_opt.only;
	size_t n = strlen(name);

	if (!o)
		return 1;
	for (const char *p = o; (p = strstr(p, name)); p += n)
		if ((p == o || p[-1] == ':' || p[-1] == ',') && (p[n] == 0 || p[n] == ':' || p[n] == ','))
			return 1;
	return 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: vugpu-programs [--dir DIR] [--only a:b] [--seed N] [--size N] [--repeat N | --loop]\n"
			"       vugpu-programs --check-limits [--dir DIR]\n"
			"       vugpu-programs --spin N [--dir DIR]\n"
			"       vugpu-programs --latency MS [--window-ms N] [--dir DIR]\n"
			"       vugpu-programs --endless N [--dir DIR]\n"
			"       vugpu-programs --neighbour MS [--nop] [--window-ms N] [--seed N] [--dir DIR]\nsamples:");
	for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++)
		fprintf(stderr, " %s", samples[i].name);
	fprintf(stderr, "\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct rec r;
	vgContext ctx;
	vgResult e;

	setvbuf(stdout, NULL, _IOLBF, 0);
	g_opt.dir = "/programs";
	g_opt.seed = 1;
	g_opt.repeat = 1;
	g_opt.window_ms = 250;
	for (int a = 1; a < argc; a++) {
		const char *v = a + 1 < argc ? argv[a + 1] : NULL;

		if (!strcmp(argv[a], "--check-limits")) {
			g_opt.check_limits = 1;
			continue;
		}
		if (!strcmp(argv[a], "--loop")) {
			g_opt.loop = 1;
			continue;
		}
		if (!strcmp(argv[a], "--nop")) {
			g_opt.nb_nop = 1;
			continue;
		}
		if (!v)
			return usage();
		if (!strcmp(argv[a], "--dir"))
			g_opt.dir = v;
		else if (!strcmp(argv[a], "--only"))
			g_opt.only = v;
		else if (!strcmp(argv[a], "--seed"))
			g_opt.seed = (unsigned int)strtoul(v, NULL, 0);
		else if (!strcmp(argv[a], "--size"))
			g_opt.size = (unsigned int)strtoul(v, NULL, 0);
		else if (!strcmp(argv[a], "--repeat"))
			g_opt.repeat = (unsigned int)strtoul(v, NULL, 0);
		else if (!strcmp(argv[a], "--spin")) {
			g_opt.spin = 1;
			g_opt.spin_n = (uint32_t)strtoul(v, NULL, 0);
		} else if (!strcmp(argv[a], "--latency"))
			g_opt.latency_ms = (unsigned int)strtoul(v, NULL, 0);
		else if (!strcmp(argv[a], "--endless"))
			g_opt.endless = (unsigned int)strtoul(v, NULL, 0);
		else if (!strcmp(argv[a], "--neighbour")) {
			g_opt.neighbour = 1;
			g_opt.nb_ms = (unsigned int)strtoul(v, NULL, 0);
		} else if (!strcmp(argv[a], "--window-ms"))
			g_opt.window_ms = (unsigned int)strtoul(v, NULL, 0);
		else
			return usage();
		a++;
	}
	if (!g_opt.repeat)
		g_opt.repeat = 1;
	if (!g_opt.window_ms)
		g_opt.window_ms = 250;

	/* the limits, through the driver (one context, then each check opens its own) */
	e = vgInit(0);
	if (!e)
		e = vgCtxCreate(&ctx);
	if (!e) {
		e = vgProgramLimits(ctx, &g_lim);
		vgCtxDestroy(ctx);
	}
	if (e) {
		rec_init(&r, "programs-device");
		fail(&r, NULL, e, "vgInit/vgCtxCreate/vgProgramLimits");
		snprintf(r.detail, sizeof(r.detail), "%s", vgGetErrorString(e));
		report(&r);
		return 1;
	}
	if (!g_lim.version) {
		rec_init(&r, "programs-device");
		snprintf(r.detail, sizeof(r.detail), "the device runs no programs (PROG_VERSION 0)");
		report(&r);
		return 1;
	}

	for (g_round = 1; g_opt.loop || g_round <= g_opt.repeat; g_round++) {
		g_round_digest = 0x811c9dc5u;
		g_rng = g_opt.seed;
		if (g_opt.check_limits) {
			limits_check();
			limits_probes();
		} else if (g_opt.latency_ms) {
			run_latency();
		} else if (g_opt.endless) {
			run_endless(g_opt.endless);
		} else if (g_opt.neighbour) {
			run_neighbour();
		} else if (g_opt.spin) {
			rec_init(&r, "program-spin-run");
			run_spin_n(&r, g_opt.spin_n);
			report(&r);
		} else {
			for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
				if (!selected(samples[i].name))
					continue;
				g_rng = g_opt.seed * 0x100000001b3ull + i; /* per sample: --only does not shift inputs */
				rec_init(&r, "program-%s", samples[i].name);
				samples[i].run(&r);
				report(&r);
			}
		}
		printf("VUGPU-PHASE {\"phase\":\"programs-round\",\"round\":%u,\"failures\":%d,\"digest\":\"0x%08x\"}\n", g_round,
		       g_failures, g_round_digest);
		fflush(stdout);
	}
	return g_failures > 125 ? 125 : g_failures;
}
