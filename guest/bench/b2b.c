// SPDX-License-Identifier: MIT
/*
 * vugpu-bench b2b: back-to-back NOP launches, each followed by vgSynchronize, every one timed
 * (launch → synchronize). The launch latency's tail is what a lost interrupt shows as (a wait
 * that ends on its timeout instead of its fence), so every launch counts, not a mean.
 *
 *   vugpu-bench b2b [--launches N] [--ms T] [--keep-going]
 *
 * Stops after N launches (default 100000) or T ms, whichever comes first. With --keep-going a
 * failed launch does not end the run: the client carries on as an application would — the same
 * context first (the driver core rebinds a channel that met ENGINE_LOST), a new one if the old
 * context keeps failing — and each failure is reported (VUGPU-B2B-ERROR). One VUGPU-PHASE
 * progress line per second tells a host-side test the client is moving. The result is one
 * VUGPU-B2B line: count, failures, contexts made, and p50 / p99.9 / max of the launches that
 * completed, in µs, plus how many took over 100 ms and the five longest with their index.
 * SIGTERM ends the run after the launch in flight, with the result line.
 */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define TOP 5
#define GIVE_UP 50 /* consecutive failures, new contexts included, before the client stops */

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static int by_value(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

int run_b2b(unsigned int launches, unsigned int ms, int keep_going)
{
	static const unsigned int grid[3] = { 1, 1, 1 };
	uint32_t *us, top_us[TOP] = { 0 };
	unsigned long top_at[TOP] = { 0 };
	unsigned long n = 0, fails = 0, run = 0, over100 = 0, attempts = 0, cap, i;
	unsigned int contexts = 0, streak = 0;
	double start, next_phase, t0, dt;
	vgContext ctx = NULL;
	vgResult e = vgInit(0);
	char detail[256] = "";
	int j, k;

	if (!launches)
		launches = 100000;
	signal(SIGTERM, on_term);
	cap = launches < 65536 ? launches : 65536; /* grown as needed: a run may be cut short by --ms */
	us = xmalloc(sizeof(*us) * cap);
	if (!e) {
		e = vgCtxCreate(&ctx);
		contexts += !e;
	}
	start = now_us();
	next_phase = start + 1e6;
	while (!e || keep_going) {
		if (stop || n >= launches || (ms && now_us() - start >= ms * 1e3))
			break;
		if (!ctx) { /* the last context was given up: a fresh one, as an application would */
			e = vgCtxCreate(&ctx);
			if (e)
				ctx = NULL;
			else
				contexts++;
		}
		attempts++;
		t0 = now_us();
		if (ctx) {
			e = vgLaunch(ctx, VG_KERNEL_NOP, grid, NULL, 0, NULL, 0);
			if (!e)
				e = vgSynchronize(ctx);
		}
		dt = now_us() - t0;
		if (!e) {
			uint32_t v = dt > 4e9 ? 0xffffffffu : (uint32_t)dt;

			if (n == cap) {
				cap = cap * 2 < launches ? cap * 2 : launches;
				us = realloc(us, sizeof(*us) * cap);
				if (!us) {
					fprintf(stderr, "out of memory\n");
					exit(2);
				}
			}
			us[n++] = v;
			streak = 0;
			if (v > 100000)
				over100++;
			for (j = 0; j < TOP && top_us[j] >= v; j++)
				;
			if (j < TOP) {
				for (k = TOP - 1; k > j; k--) {
					top_us[k] = top_us[k - 1];
					top_at[k] = top_at[k - 1];
				}
				top_us[j] = v;
				top_at[j] = n - 1;
			}
		} else {
			fails++;
			streak++;
			snprintf(detail, sizeof(detail), "%s", ctx ? vgGetErrorDetail(ctx) : "no context");
			printf("VUGPU-B2B-ERROR {\"at\":%lu,\"after_ms\":%.1f,\"took_ms\":%.1f,\"error\":\"%s\",\"streak\":%u,\"detail\":",
			       n, (t0 - start) / 1e3, dt / 1e3, vgGetErrorName(e), streak);
			json_str(detail);
			printf("}\n");
			if (streak >= GIVE_UP)
				break;
			/* a context that fails again right after its one reported error is given up */
			if (ctx && streak >= 3) {
				vgCtxDestroy(ctx);
				ctx = NULL;
			}
		}
		if (t0 >= next_phase) {
			printf("VUGPU-PHASE {\"phase\":\"b2b\",\"done\":%lu,\"failed\":%lu}\n", n, fails);
			fflush(stdout);
			next_phase = t0 + 1e6;
		}
	}
	run = (unsigned long)((now_us() - start) / 1e3);
	if (ctx)
		vgCtxDestroy(ctx);
	qsort(us, n, sizeof(*us), by_value);
	printf("VUGPU-B2B {\"ok\":%s,\"launches\":%lu,\"attempts\":%lu,\"failed\":%lu,\"contexts\":%u,\"ms\":%lu,"
	       "\"p50_us\":%u,\"p999_us\":%u,\"max_us\":%u,\"over_100ms\":%lu,\"longest\":[",
	       streak == 0 && n > 0 ? "true" : "false", n, attempts, fails, contexts, run, n ? us[n / 2] : 0,
	       n ? us[n - 1 - n / 1000] : 0, n ? us[n - 1] : 0, over100);
	for (i = 0; i < TOP && top_us[i]; i++)
		printf("%s{\"at\":%lu,\"us\":%u}", i ? "," : "", top_at[i], top_us[i]);
	printf("],\"last_error\":\"%s\"}\n", fails ? vgGetErrorName(e) : "");
	free(us);
	return streak == 0 && n > 0 ? 0 : 1;
}
