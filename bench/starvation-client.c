// SPDX-License-Identifier: MIT
/*
 * starvation-client: one tenant of bench/starvation.ts, a client of the runtime's host backend
 * (the native twin's driver core over vfio-user, VUGPU_SOCKET). Each operation is waited for
 * before the next, as an application that synchronizes does:
 *   nop   NOP launches back to back (the flood)
 *   copy  device-to-device copies of --mb MiB (the copy-bound neighbour)
 *   loop  LOOP kernels of --kernel-ms ms (the compute-bound neighbour)
 * for --ms milliseconds. Prints "STARVE-READY" once its buffers exist (the server's scheduler
 * decides nothing before then) and one line at the end:
 *   STARVE {"mode":"copy","ops":N,"failures":F,"seconds":S,"error":"…"}
 * Bad arguments: one sentence on stderr and exit 2.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vugpu.h"

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int usage(const char *why)
{
	fprintf(stderr, "starvation-client: %s (usage: starvation-client nop|copy|loop --ms RUN_MS [--mb MIB] [--kernel-ms MS])\n", why);
	return 2;
}

struct loop_params {
	uint64_t iterations, target_ns;
	uint32_t seed;
} __attribute__((packed));

int main(int argc, char **argv)
{
	static const unsigned int grid1[3] = { 1, 1, 1 };
	unsigned long run_ms = 0, mb = 64, kernel_ms = 50, ops = 0, failures = 0;
	const char *mode;
	vgContext ctx = NULL;
	vgDevicePtr a = 0, b = 0;
	struct loop_params lp;
	vgResult e;
	double t0, t;
	int i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		return usage("no mode given");
	mode = argv[1];
	if (strcmp(mode, "nop") && strcmp(mode, "copy") && strcmp(mode, "loop"))
		return usage("the mode must be nop, copy or loop");
	for (i = 2; i < argc; i++) {
		unsigned long *dst = !strcmp(argv[i], "--ms") ? &run_ms : !strcmp(argv[i], "--mb") ? &mb :
				     !strcmp(argv[i], "--kernel-ms") ? &kernel_ms : NULL;
		char *end;

		if (!dst || i + 1 >= argc)
			return usage("unknown option or missing value");
		*dst = strtoul(argv[++i], &end, 10);
		if (*end || !*dst || *dst > 3600000)
			return usage("a value must be a whole number from 1 to 3600000");
	}
	if (!run_ms)
		return usage("--ms is required");
	e = vgInit(0);
	if (!e)
		e = vgCtxCreate(&ctx);
	if (!e && !strcmp(mode, "copy")) {
		e = vgMemAlloc(ctx, &a, mb << 20);
		if (!e)
			e = vgMemAlloc(ctx, &b, mb << 20);
	}
	if (!e && !strcmp(mode, "loop"))
		e = vgMemAlloc(ctx, &a, 24);
	memset(&lp, 0, sizeof(lp));
	lp.target_ns = (uint64_t)kernel_ms * 1000000ull;
	lp.seed = 1;
	if (e) {
		printf("STARVE {\"mode\":\"%s\",\"ops\":0,\"failures\":1,\"seconds\":0,\"error\":\"%s\"}\n", mode, vgGetErrorName(e));
		return 1;
	}
	printf("STARVE-READY\n");
	t0 = now_s();
	for (t = t0; t - t0 < run_ms * 1e-3; t = now_s()) {
		if (!strcmp(mode, "nop")) {
			e = vgLaunch(ctx, VG_KERNEL_NOP, grid1, NULL, 0, NULL, 0);
		} else if (!strcmp(mode, "copy")) {
			e = vgMemcpyDtoD(ctx, (ops & 1) ? a : b, (ops & 1) ? b : a, mb << 20);
		} else {
			vgBuffer buf = { a, 24 };

			e = vgLaunch(ctx, VG_KERNEL_LOOP, grid1, &lp, sizeof(lp), &buf, 1);
		}
		if (!e)
			e = vgSynchronize(ctx);
		if (e) {
			failures++;
			break; /* a sticky context error: every later call would fail the same way */
		}
		ops++;
	}
	printf("STARVE {\"mode\":\"%s\",\"ops\":%lu,\"failures\":%lu,\"seconds\":%.3f,\"error\":\"%s\"}\n", mode, ops, failures,
	       now_s() - t0, e ? vgGetErrorName(e) : "");
	vgCtxDestroy(ctx);
	return failures ? 1 : 0;
}
