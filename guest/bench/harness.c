// SPDX-License-Identifier: MIT
/*
 * vugpu-bench: runs one benchmark (or all of them) and prints one VUGPU-BENCH line per run.
 *
 *   vugpu-bench <name>|all [--size N] [--iters N] [--mb N] [--ms N] [--launches N] [--seed N] [--large]
 *               [--programs DIR]   the kernels as SPIR-V programs (DIR/<kernel>.spv, e.g.
 *                                  /programs/builtins) instead of built-ins by KERNEL_ID
 *               [--repeat N]       N runs of each benchmark in this process (one context each)
 *   vugpu-bench list
 *   vugpu-bench fault        MMU fault check: the error reaches the process, with details
 *   vugpu-bench info         driver counters (kmod: without creating a context)
 *   vugpu-bench b2b [--launches N] [--ms T] [--keep-going]
 *                            back-to-back NOP launches, each synchronized and timed (b2b.c)
 *
 * Exit status 0 when every run verified.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include "bench.h"
#include "vugpu_uapi.h"

static const char *const stage_names[S_COUNT] = {
	"Init", "MemAlloc", "DataInit", "HtoD", "KernConf", "Exec", "DtoH", "DataRead", "Close",
};

static const struct bench *const benches[] = {
	&bench_nop, &bench_loop, &bench_madd, &bench_mmul, &bench_fmadd, &bench_fmmul, &bench_cpy,
	&bench_pincpy, &bench_backprop, &bench_bfs, &bench_hotspot, &bench_lud, &bench_srad, &bench_srad2,
};
#define NBENCH (sizeof(benches) / sizeof(benches[0]))

double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

void stage_begin(struct bench_run *r, enum stage s)
{
	r->cur = (int)s;
	r->t0 = now_us();
}

void stage_end(struct bench_run *r)
{
	if (r->cur >= 0)
		r->stage_us[r->cur] += now_us() - r->t0;
	r->cur = -1;
}

int bench_fail(struct bench_run *r, vgResult e, const char *where)
{
	stage_end(r);
	if (!r->err) {
		r->err = e;
		snprintf(r->err_where, sizeof(r->err_where), "%s", where);
		snprintf(r->err_detail, sizeof(r->err_detail), "%s", r->ctx ? vgGetErrorDetail(r->ctx) : "");
	}
	return -1;
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(2);
	}
	return p;
}

uint32_t rng_u32(uint64_t *s)
{
	/* splitmix64: deterministic and identical on guest and host */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (uint32_t)((z ^ (z >> 31)) >> 32);
}

float rng_unit(uint64_t *s)
{
	return (float)(rng_u32(s) >> 8) * (1.0f / 16777216.0f);
}

/* FNV-1a over every output the run read back (sum_*, digest_bytes): bit-exact comparison of runs
 * (test/integration/hostile.test.ts compares a co-tenant under attack with a solo run). */
static uint32_t out_digest;
static int out_digested;

void digest_bytes(const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	if (!out_digested)
		out_digest = 0x811c9dc5u;
	out_digested = 1;
	for (i = 0; i < n; i++)
		out_digest = (out_digest ^ b[i]) * 0x01000193u;
}

double sum_u32(const uint32_t *p, size_t n)
{
	double s = 0;
	size_t i;

	digest_bytes(p, n * sizeof(*p));
	for (i = 0; i < n; i++)
		s += p[i];
	return s;
}

double sum_f32(const float *p, size_t n)
{
	double s = 0;
	size_t i;

	digest_bytes(p, n * sizeof(*p));
	for (i = 0; i < n; i++)
		s += p[i];
	return s;
}

size_t cmp_u32(const uint32_t *got, const uint32_t *want, size_t n, size_t *first)
{
	size_t i, bad = 0;

	for (i = 0; i < n; i++) {
		if (got[i] != want[i]) {
			if (!bad && first)
				*first = i;
			bad++;
		}
	}
	return bad;
}

size_t cmp_f32(const float *got, const float *want, size_t n, double rel, double abs_tol, size_t *first)
{
	size_t i, bad = 0;

	for (i = 0; i < n; i++) {
		double g = got[i], w = want[i], d = g > w ? g - w : w - g, m = w < 0 ? -w : w;

		if (!(d <= abs_tol || d <= rel * m)) { /* also catches NaN */
			if (!bad && first)
				*first = i;
			bad++;
		}
	}
	return bad;
}

int bench_init(struct bench_run *r)
{
	double t = now_us();

	VG(r, vgInit(0));
	r->driver_us = now_us() - t;
	stage_begin(r, S_INIT);
	VG(r, vgCtxCreate(&r->ctx));
	stage_end(r);
	vgGetDeviceInfo(r->ctx, &r->info0);
	return 0;
}

int bench_close(struct bench_run *r)
{
	vgResult e;

	if (!r->ctx)
		return 0;
	vgGetDeviceInfo(r->ctx, &r->info1);
	stage_begin(r, S_CLOSE);
	e = vgCtxDestroy(r->ctx);
	stage_end(r);
	r->ctx = NULL;
	if (e)
		return bench_fail(r, e, "vgCtxDestroy");
	return 0;
}

void json_str(const char *s)
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

static int run_one(const struct bench *b, const struct bench_opts *o)
{
	struct bench_run r;
	double total = 0;
	int i, ok;

	memset(&r, 0, sizeof(r));
	r.o = o;
	r.cur = -1;
	r.verified = -1;
	out_digested = 0;
	b->run(&r);
	stage_end(&r);
	if (r.ctx) {
		/* a failed run still closes its context (not timed as a stage of a good run) */
		vgCtxDestroy(r.ctx);
		r.ctx = NULL;
	}
	ok = !r.err && r.verified == 1;
	for (i = 0; i < S_COUNT; i++)
		total += r.stage_us[i];
	printf("VUGPU-BENCH {\"bench\":\"%s\",\"ok\":%s,\"backend\":\"%s\",\"size\":", b->name, ok ? "true" : "false",
	       r.info0.backend[0] ? r.info0.backend : (getenv("VUGPU_SOCKET") ? "host" : "kmod"));
	json_str(r.size_desc);
	printf(",\"stages_us\":{");
	for (i = 0; i < S_COUNT; i++)
		printf("%s\"%s\":%.1f", i ? "," : "", stage_names[i], r.stage_us[i]);
	printf("},\"total_us\":%.1f,\"driver_us\":%.1f,\"verified\":%s,\"checksum\":%.6g", total, r.driver_us,
	       r.verified == 1 ? "true" : r.verified == 0 ? "false" : "null", r.checksum);
	if (out_digested)
		printf(",\"digest\":\"0x%08x\"", out_digest);
	printf(",\"mmio\":%llu,\"irqs\":%llu,\"pv_calls\":%llu,\"pv\":%u",
	       (unsigned long long)(r.info1.mmio_count - r.info0.mmio_count),
	       (unsigned long long)(r.info1.irq_count[0] + r.info1.irq_count[1] + r.info1.irq_count[2] -
				    r.info0.irq_count[0] - r.info0.irq_count[1] - r.info0.irq_count[2]),
	       (unsigned long long)(r.info1.pv_calls - r.info0.pv_calls), r.info0.pv_mode);
	if (o->programs)
		printf(",\"programs\":true,\"program_load_us\":%.1f,\"program_launches\":%lu", r.prog_load_us,
		       r.prog_launches);
	if (r.err) {
		printf(",\"error\":\"%s\",\"where\":", vgGetErrorName(r.err));
		json_str(r.err_where);
		printf(",\"error_detail\":");
		json_str(r.err_detail);
	}
	printf(",\"detail\":");
	json_str(r.detail);
	printf("}\n");
	fflush(stdout);
	return ok ? 0 : 1;
}

/* An MMU fault must come back to the process as VG_ERROR_ILLEGAL_ADDRESS with the faulting VA. */
static int check_fault(void)
{
	vgContext ctx = NULL;
	vgDevicePtr a;
	unsigned int n = 64, grid[3] = { 1, 1, 1 };
	size_t bytes = (size_t)n * n * 4;
	const uint64_t bogus = 0x7000000000ull;
	vgBuffer bufs[3];
	vgResult e1 = VG_ERROR_NOT_INITIALIZED, e2 = VG_ERROR_NOT_INITIALIZED;
	char detail[320] = "", want[32];
	int ok;

	if (!vgInit(0) && !vgCtxCreate(&ctx) && !vgMemAlloc(ctx, &a, bytes)) {
		bufs[0] = (vgBuffer){ a, bytes };
		bufs[1] = (vgBuffer){ a, bytes };
		bufs[2] = (vgBuffer){ bogus, bytes }; /* never mapped */
		e1 = vgLaunch(ctx, VG_KERNEL_MADD, grid, &n, 4, bufs, 3);
		e2 = vgSynchronize(ctx);
		snprintf(detail, sizeof(detail), "%s", vgGetErrorDetail(ctx));
	}
	if (ctx)
		vgCtxDestroy(ctx);
	snprintf(want, sizeof(want), "0x%010llx", (unsigned long long)bogus);
	ok = e1 == VG_SUCCESS && e2 == VG_ERROR_ILLEGAL_ADDRESS && strstr(detail, want) && strstr(detail, "MMU_FAULT");
	printf("VUGPU-CHECK {\"check\":\"fault-reported\",\"ok\":%s,\"launch\":\"%s\",\"sync\":\"%s\",\"detail\":",
	       ok ? "true" : "false", vgGetErrorName(e1), vgGetErrorName(e2));
	json_str(detail);
	printf("}\n");
	return ok ? 0 : 1;
}

/*
 * ENGINE_LOST recovery inside one context (hw-spec §8.2, issue 9): a LOOP kernel of `ms`
 * milliseconds runs while the host restarts vugpu under the VM (VUGPU-PHASE "recover-armed" is
 * its cue); the wait must fail with channel error 20, reported once; then the same context must
 * run a LOOP launch again and get its exact result, without any help (the driver rebinds).
 */
static int check_recover(unsigned int ms)
{
	struct { uint64_t iterations, target_ns; uint32_t seed; } __attribute__((packed)) p;
	const unsigned int grid[3] = { 1, 1, 1 };
	vgContext ctx = NULL;
	vgDevicePtr d;
	unsigned char out[24];
	uint64_t done = 0;
	vgResult e1 = VG_ERROR_NOT_INITIALIZED, e2 = VG_ERROR_NOT_INITIALIZED, e3 = VG_ERROR_NOT_INITIALIZED;
	char detail[320] = "";
	vgBuffer b;
	int ok;

	if (!vgInit(0) && !vgCtxCreate(&ctx) && !vgMemAlloc(ctx, &d, sizeof(out))) {
		b = (vgBuffer){ d, sizeof(out) };
		memset(&p, 0, sizeof(p));
		p.target_ns = (uint64_t)(ms ? ms : 6000) * 1000000ull;
		p.seed = 1;
		e1 = vgLaunch(ctx, VG_KERNEL_LOOP, grid, &p, sizeof(p), &b, 1);
		if (!e1)
			e1 = vgFlush(ctx); /* the loop must be running when the host restarts vugpu */
		printf("VUGPU-PHASE {\"phase\":\"recover-armed\"}\n");
		fflush(stdout);
		if (!e1)
			e1 = vgSynchronize(ctx);
		snprintf(detail, sizeof(detail), "%s", vgGetErrorDetail(ctx));
		/* the same context, again: a short exact run */
		p.target_ns = 0;
		p.iterations = 100000;
		e2 = vgLaunch(ctx, VG_KERNEL_LOOP, grid, &p, sizeof(p), &b, 1);
		if (!e2)
			e2 = vgSynchronize(ctx);
		if (!e2)
			e3 = vgMemcpyDtoH(ctx, out, d, sizeof(out));
		memcpy(&done, out, 8);
	}
	if (ctx)
		vgCtxDestroy(ctx);
	ok = e1 != VG_SUCCESS && strstr(detail, "channel error 20 (ENGINE_LOST)") && e2 == VG_SUCCESS && e3 == VG_SUCCESS &&
	     done == 100000;
	printf("VUGPU-CHECK {\"check\":\"engine-lost-recovered\",\"ok\":%s,\"lost\":\"%s\",\"again\":\"%s\",\"copy\":\"%s\","
	       "\"done\":%llu,\"detail\":",
	       ok ? "true" : "false", vgGetErrorName(e1), vgGetErrorName(e2), vgGetErrorName(e3), (unsigned long long)done);
	json_str(detail);
	printf("}\n");
	return ok ? 0 : 1;
}

/* Driver counters. kmod: straight from the device node, so no context of ours is counted. */
static int show_info(void)
{
	const char *dev = getenv("VUGPU_DEV");
	struct vugpu_info i;
	int fd;

	if (getenv("VUGPU_SOCKET")) {
		fprintf(stderr, "info: only for the kmod backend\n");
		return 2;
	}
	fd = open(dev && *dev ? dev : "/dev/vugpu0", O_RDWR | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, VUGPU_IOC_INFO, &i) < 0) {
		printf("VUGPU-INFO {\"ok\":false,\"error\":");
		json_str(strerror(errno));
		printf("}\n");
		if (fd >= 0)
			close(fd);
		return 1;
	}
	close(fd);
	printf("VUGPU-INFO {\"ok\":true,\"vram_size\":%llu,\"vram_used\":%llu,\"channels\":%u,\"channels_active\":%u,"
	       "\"contexts\":%u,\"pv\":%u,\"mmio\":%llu,\"irq\":[%llu,%llu,%llu,%llu],\"pv_calls\":%llu,\"faults\":%llu,"
	       "\"chan_errors\":%llu}\n",
	       (unsigned long long)i.vram_size, (unsigned long long)i.vram_used, i.chan_count, i.channels_active, i.contexts,
	       i.pv_mode, (unsigned long long)i.mmio_count, (unsigned long long)i.irq_count[0],
	       (unsigned long long)i.irq_count[1], (unsigned long long)i.irq_count[2], (unsigned long long)i.irq_count[3],
	       (unsigned long long)i.pv_calls, (unsigned long long)i.faults, (unsigned long long)i.chan_errors);
	return 0;
}

static int usage(void)
{
	size_t i;

	fprintf(stderr, "usage: vugpu-bench <bench>|all|list|fault|recover|info|init|b2b [--size N] [--iters N] [--mb N] [--ms N] "
			"[--launches N] [--seed N] [--large] [--programs DIR] [--repeat N] [--keep-going]\nbenchmarks:");
	for (i = 0; i < NBENCH; i++)
		fprintf(stderr, " %s", benches[i]->name);
	fprintf(stderr, "\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct bench_opts o = { .seed = 1 };
	const char *name;
	size_t i;
	int a, rc = 0, found = 0, keep_going = 0;
	unsigned int repeat = 1, k;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		return usage();
	name = argv[1];
	for (a = 2; a < argc; a++) {
		unsigned int *dst = NULL;

		if (!strcmp(argv[a], "--large")) {
			o.large = 1;
			continue;
		}
		if (!strcmp(argv[a], "--keep-going")) {
			keep_going = 1;
			continue;
		}
		if (!strcmp(argv[a], "--programs")) {
			if (a + 1 >= argc)
				return usage();
			o.programs = argv[++a];
			continue;
		}
		if (!strcmp(argv[a], "--size"))
			dst = &o.size;
		else if (!strcmp(argv[a], "--iters"))
			dst = &o.iters;
		else if (!strcmp(argv[a], "--mb"))
			dst = &o.mb;
		else if (!strcmp(argv[a], "--ms"))
			dst = &o.ms;
		else if (!strcmp(argv[a], "--launches"))
			dst = &o.launches;
		else if (!strcmp(argv[a], "--seed"))
			dst = &o.seed;
		else if (!strcmp(argv[a], "--repeat")) /* runs of each benchmark in this process (one client, as a guest's runs are) */
			dst = &repeat;
		if (!dst || a + 1 >= argc)
			return usage();
		*dst = (unsigned int)strtoul(argv[++a], NULL, 0);
	}
	if (!strcmp(name, "list")) {
		for (i = 0; i < NBENCH; i++)
			printf("%-9s %s\n", benches[i]->name, benches[i]->what);
		return 0;
	}
	if (!strcmp(name, "fault"))
		return check_fault();
	if (!strcmp(name, "recover"))
		return check_recover(o.ms);
	if (!strcmp(name, "info"))
		return show_info();
	if (!strcmp(name, "b2b"))
		return run_b2b(o.launches, o.ms, keep_going);
	if (!strcmp(name, "init")) /* driver bring-up only: what a twin process pays before any benchmark */
		return vgInit(0) == VG_SUCCESS ? 0 : 1;
	for (i = 0; i < NBENCH; i++) {
		if (strcmp(name, "all") && strcmp(name, benches[i]->name))
			continue;
		found = 1;
		for (k = 0; k < (repeat ? repeat : 1); k++)
			rc |= run_one(benches[i], &o);
	}
	return found ? rc : usage();
}
