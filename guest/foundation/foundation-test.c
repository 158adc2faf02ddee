// SPDX-License-Identifier: MIT
/*
 * foundation-test: guest-side checks of the vugpu foundation (BAR0 registers, BAR1 coherence,
 * DMA both ways, MSI-X delivery) through /dev/vugpu-diag<N> (vugpu_diag.ko).
 *
 * Output: one line per check, `VUGPU-CHECK {"check":"<id>","ok":true|false,...}`; with
 * `--bench N`, one `VUGPU-BENCH {...}` line with BAR0 trapped-access latency (N reads, N writes,
 * each timed with clock_gettime) and BAR1 bandwidth. `VUGPU-PHASE {...}` lines mark long loops
 * (the SIGKILL test kills QEMU in the middle of one). Exit status: number of failed checks.
 *
 * With `--probe S`, S seconds of back-to-back trapped reads as a guest sees a server restart or a
 * live upgrade (one `VUGPU-PAUSE` line per slow access, one `VUGPU-PROBE` summary).
 *
 * Usage: foundation-test [--dev /dev/vugpu-diag0] [--checks] [--bench N] [--probe S]
 *   (no mode option: --checks)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "vugpu_diag.h"

#define BAR1_WINDOW (16u << 20) /* how much of BAR1 the checks and the bench map */
#define MiB (1u << 20)

struct ctx {
	int fd;
	struct vugpu_diag_info info;
	volatile uint32_t *bar0;
	volatile uint8_t *bar1;      /* first bar1_window bytes of BAR1 */
	size_t bar1_window;
	volatile uint8_t *bar1_last; /* last page of BAR1 */
	int failed;
};

/* ------------------------------------------------------------------ output */

static void check(struct ctx *c, const char *id, bool ok, const char *fmt, ...)
{
	char extra[1024] = "";

	if (fmt) {
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(extra, sizeof(extra), fmt, ap);
		va_end(ap);
	}
	printf("VUGPU-CHECK {\"check\":\"%s\",\"ok\":%s%s%s}\n", id, ok ? "true" : "false",
	       extra[0] ? "," : "", extra);
	fflush(stdout);
	if (!ok)
		c->failed++;
}

static void phase(const char *name)
{
	printf("VUGPU-PHASE {\"phase\":\"%s\"}\n", name);
	fflush(stdout);
}

/* ------------------------------------------------------------------ device access */

static uint32_t reg_read(struct ctx *c, uint32_t off)
{
	struct vugpu_diag_reg r = { .offset = off };

	if (ioctl(c->fd, VUGPU_DIAG_IOC_READ32, &r) < 0) {
		fprintf(stderr, "READ32 0x%x: %s\n", off, strerror(errno));
		return 0xdeadbeef;
	}
	return r.value;
}

static void reg_write(struct ctx *c, uint32_t off, uint32_t val)
{
	struct vugpu_diag_reg r = { .offset = off, .value = val };

	if (ioctl(c->fd, VUGPU_DIAG_IOC_WRITE32, &r) < 0)
		fprintf(stderr, "WRITE32 0x%x: %s\n", off, strerror(errno));
}

static bool irq_counts(struct ctx *c, uint64_t out[VUGPU_NUM_VECTORS])
{
	struct vugpu_diag_irq_counts ic;

	if (ioctl(c->fd, VUGPU_DIAG_IOC_IRQ_COUNTS, &ic) < 0)
		return false;
	memcpy(out, ic.count, sizeof(ic.count));
	return true;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000l };

	nanosleep(&ts, NULL);
}

static int open_device(struct ctx *c, const char *dev)
{
	void *p;

	c->fd = open(dev, O_RDWR | O_CLOEXEC);
	if (c->fd < 0) {
		check(c, "open-device", false, "\"device\":\"%s\",\"errno\":%d", dev, errno);
		return -1;
	}
	if (ioctl(c->fd, VUGPU_DIAG_IOC_INFO, &c->info) < 0) {
		check(c, "open-device", false, "\"device\":\"%s\",\"errno\":%d", dev, errno);
		return -1;
	}
	p = mmap(NULL, c->info.bar0_size, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, VUGPU_MMAP_BAR0);
	if (p == MAP_FAILED) {
		check(c, "mmap-bar0", false, "\"errno\":%d", errno);
		return -1;
	}
	c->bar0 = p;
	c->bar1_window = c->info.bar1_size < BAR1_WINDOW ? c->info.bar1_size : BAR1_WINDOW;
	p = mmap(NULL, c->bar1_window, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, VUGPU_MMAP_BAR1);
	if (p == MAP_FAILED) {
		check(c, "mmap-bar1", false, "\"errno\":%d", errno);
		return -1;
	}
	c->bar1 = p;
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd,
		 VUGPU_MMAP_BAR1 + c->info.bar1_size - 4096);
	if (p == MAP_FAILED) {
		check(c, "mmap-bar1", false, "\"errno\":%d,\"what\":\"last page\"", errno);
		return -1;
	}
	c->bar1_last = p;
	return 0;
}

/* ------------------------------------------------------------------ checks */

static void check_info(struct ctx *c)
{
	struct vugpu_diag_info *i = &c->info;

	check(c, "driver-info", i->bar0_size == 16 * MiB && i->bar1_size >= BAR1_WINDOW && i->num_vectors == 4,
	      "\"bar0_size\":%llu,\"bar1_size\":%llu,\"vectors\":%u,\"dma_addr\":\"0x%llx\"",
	      (unsigned long long)i->bar0_size, (unsigned long long)i->bar1_size, i->num_vectors,
	      (unsigned long long)i->dma_addr);
}

static void check_id(struct ctx *c)
{
	uint32_t boot0 = reg_read(c, VUGPU_PMC_BOOT_0), magic = reg_read(c, VUGPU_DIAG_MAGIC);
	uint32_t mboot0 = c->bar0[VUGPU_PMC_BOOT_0 / 4], mmagic = c->bar0[VUGPU_DIAG_MAGIC / 4];

	check(c, "id-register", boot0 == VUGPU_PMC_BOOT_0_VALUE, "\"pmc_boot_0\":\"0x%08x\"", boot0);
	check(c, "diag-magic", magic == VUGPU_DIAG_MAGIC_VALUE, "\"value\":\"0x%08x\"", magic);
	check(c, "bar0-mmap-read", mboot0 == VUGPU_PMC_BOOT_0_VALUE && mmagic == VUGPU_DIAG_MAGIC_VALUE,
	      "\"pmc_boot_0\":\"0x%08x\",\"diag_magic\":\"0x%08x\"", mboot0, mmagic);
}

static void check_scratch(struct ctx *c)
{
	static const uint32_t patterns[] = { 0xa5a50000u, 0x5a5affffu, 0x00000000u, 0xffffffffu, 0x12345678u };
	unsigned p, n, bad = 0;
	uint32_t first_off = 0, first_got = 0, first_want = 0;

	for (p = 0; p < sizeof(patterns) / sizeof(patterns[0]); p++) {
		/* Write all registers first, then read back: catches aliasing between them. */
		for (n = 0; n < VUGPU_DIAG_SCRATCH_COUNT; n++) {
			uint32_t v = patterns[p] ^ (n * 0x01010101u);

			if (p & 1) /* alternate the ioctl path and the user mapping */
				c->bar0[VUGPU_DIAG_SCRATCH(n) / 4] = v;
			else
				reg_write(c, VUGPU_DIAG_SCRATCH(n), v);
		}
		for (n = 0; n < VUGPU_DIAG_SCRATCH_COUNT; n++) {
			uint32_t want = patterns[p] ^ (n * 0x01010101u);
			uint32_t got = (p & 1) ? reg_read(c, VUGPU_DIAG_SCRATCH(n)) : c->bar0[VUGPU_DIAG_SCRATCH(n) / 4];

			if (got != want && !bad++) {
				first_off = VUGPU_DIAG_SCRATCH(n);
				first_got = got;
				first_want = want;
			}
		}
	}
	check(c, "scratch", bad == 0, "\"mismatches\":%u,\"first\":{\"offset\":\"0x%x\",\"got\":\"0x%08x\",\"want\":\"0x%08x\"}",
	      bad, first_off, first_got, first_want);
}

/* BAR1 offsets exercised by the coherence checks (the last one is the last word of BAR1). */
static size_t bar1_offsets(struct ctx *c, uint64_t *out)
{
	size_t n = 0;

	out[n++] = 0;
	out[n++] = 4;
	out[n++] = 0x1000;
	out[n++] = MiB + 12;
	out[n++] = c->bar1_window - 4;
	out[n++] = c->info.bar1_size - 4;
	return n;
}

static volatile uint32_t *bar1_word(struct ctx *c, uint64_t off)
{
	if (off + 4 <= c->bar1_window)
		return (volatile uint32_t *)(c->bar1 + off);
	return (volatile uint32_t *)(c->bar1_last + (off - (c->info.bar1_size - 4096)));
}

static void check_bar1(struct ctx *c)
{
	uint64_t offs[8];
	size_t n = bar1_offsets(c, offs), i;
	unsigned bad_peek = 0, bad_poke = 0;
	char detail[256] = "";

	/* Guest writes through BAR1, the device reads its VRAM (DIAG_VRAM_PEEK). */
	for (i = 0; i < n; i++) {
		uint32_t v = 0xcafe0000u | (uint32_t)i << 8 | 0x5a, got;

		*bar1_word(c, offs[i]) = v;
		__sync_synchronize(); /* drain write-combining before the device looks */
		reg_write(c, VUGPU_DIAG_VRAM_OFF, (uint32_t)offs[i]);
		got = reg_read(c, VUGPU_DIAG_VRAM_PEEK);
		if (got != v && !bad_peek++)
			snprintf(detail, sizeof(detail), ",\"first\":{\"offset\":\"0x%llx\",\"got\":\"0x%08x\",\"want\":\"0x%08x\"}",
				 (unsigned long long)offs[i], got, v);
	}
	check(c, "bar1-guest-write", bad_peek == 0, "\"offsets\":%zu,\"mismatches\":%u%s", n, bad_peek, detail);

	/* The device writes its VRAM (DIAG_VRAM_POKE), the guest reads through BAR1. */
	detail[0] = 0;
	for (i = 0; i < n; i++) {
		uint32_t v = 0xf00d0000u | (uint32_t)i << 8 | 0xa5, got;

		reg_write(c, VUGPU_DIAG_VRAM_OFF, (uint32_t)offs[i]);
		reg_write(c, VUGPU_DIAG_VRAM_POKE, v);
		(void)reg_read(c, VUGPU_DIAG_VRAM_OFF); /* the posted POKE is done once this read returns */
		got = *bar1_word(c, offs[i]);
		if (got != v && !bad_poke++)
			snprintf(detail, sizeof(detail), ",\"first\":{\"offset\":\"0x%llx\",\"got\":\"0x%08x\",\"want\":\"0x%08x\"}",
				 (unsigned long long)offs[i], got, v);
	}
	check(c, "bar1-device-write", bad_poke == 0, "\"offsets\":%zu,\"mismatches\":%u%s", n, bad_poke, detail);
}

static bool dma(struct ctx *c, struct vugpu_diag_dma *a)
{
	if (ioctl(c->fd, VUGPU_DIAG_IOC_DMA, a) < 0) {
		fprintf(stderr, "DMA ioctl: %s\n", strerror(errno));
		return false;
	}
	return true;
}

static void check_dma(struct ctx *c)
{
	static const uint32_t lens[] = { 1, 4097, 65536, VUGPU_DMA_MAX_LEN };
	uint8_t *want = malloc(VUGPU_DMA_MAX_LEN), *got = malloc(VUGPU_DMA_MAX_LEN);
	char to_detail[1024] = "", from_detail[1024] = "";
	size_t tl = 0, fl = 0;
	bool to_ok = true, from_ok = true;
	unsigned i;

	if (!want || !got) {
		check(c, "dma-to-vram", false, "\"error\":\"out of memory\"");
		return;
	}
	for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		uint32_t len = lens[i] > c->info.dma_size ? c->info.dma_size : lens[i];
		uint32_t off = 2 * MiB + i * 1237; /* unaligned on purpose */
		struct vugpu_diag_dma a = { .direction = VUGPU_DMA_TO_VRAM, .len = len, .vram_offset = off,
					    .seed = 0x1000 + i };
		uint32_t k, vram_bad = 0, fnv;
		bool ok;

		/* sysmem -> VRAM: the device's hash matches, and VRAM (read back through BAR1) holds the bytes. */
		ok = dma(c, &a);
		vugpu_pattern(want, len, a.seed);
		fnv = vugpu_fnv1a(want, len);
		memcpy(got, (const void *)(c->bar1 + off), len);
		for (k = 0; k < len; k++)
			vram_bad += got[k] != want[k];
		ok = ok && a.status == VUGPU_DMA_STATUS_DONE && a.error == 0 && a.device_fnv == fnv &&
		     a.buffer_fnv == fnv && vram_bad == 0;
		to_ok = to_ok && ok;
		tl += snprintf(to_detail + tl, sizeof(to_detail) - tl,
			       "%s{\"len\":%u,\"ok\":%s,\"status\":%u,\"error\":%u,\"fnv\":\"0x%08x\",\"device_fnv\":\"0x%08x\",\"vram_mismatches\":%u}",
			       i ? "," : "", len, ok ? "true" : "false", a.status, a.error, fnv, a.device_fnv, vram_bad);

		/* VRAM -> sysmem: a different pattern is put into VRAM through BAR1 first, so this
		 * direction does not depend on the one above. */
		off = 6 * MiB + i * 1237;
		memset(&a, 0, sizeof(a));
		a.direction = VUGPU_DMA_FROM_VRAM;
		a.len = len;
		a.vram_offset = off;
		a.seed = 0x2000 + i;
		vugpu_pattern(want, len, a.seed);
		fnv = vugpu_fnv1a(want, len);
		memcpy((void *)(c->bar1 + off), want, len);
		__sync_synchronize();
		ok = dma(c, &a);
		ok = ok && a.status == VUGPU_DMA_STATUS_DONE && a.error == 0 && a.mismatches == 0 &&
		     a.device_fnv == fnv && a.buffer_fnv == fnv;
		from_ok = from_ok && ok;
		fl += snprintf(from_detail + fl, sizeof(from_detail) - fl,
			       "%s{\"len\":%u,\"ok\":%s,\"status\":%u,\"error\":%u,\"fnv\":\"0x%08x\",\"device_fnv\":\"0x%08x\",\"mismatches\":%u}",
			       i ? "," : "", len, ok ? "true" : "false", a.status, a.error, fnv, a.device_fnv, a.mismatches);
	}
	check(c, "dma-to-vram", to_ok, "\"transfers\":[%s]", to_detail);
	check(c, "dma-from-vram", from_ok, "\"transfers\":[%s]", from_detail);
	free(want);
	free(got);
}

static void sleep_us(unsigned us)
{
	struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000l };

	nanosleep(&ts, NULL);
}

/*
 * MSI-X: fire each vector a different number of times through DIAG_IRQ_FIRE and require exact
 * per-vector counts. Each fire waits for the previous interrupt to be handled: MSI is edge-
 * triggered, and two messages for a vector that is still pending coalesce (in the eventfd
 * between server and QEMU as in a real APIC's IRR), so a burst legitimately yields fewer.
 */
static void check_msix(struct ctx *c)
{
	uint64_t before[VUGPU_NUM_VECTORS], now[VUGPU_NUM_VECTORS], after[VUGPU_NUM_VECTORS];
	unsigned fires[VUGPU_NUM_VECTORS], v, k, total = 0, lost = 0;
	uint64_t lat_sum_ns = 0, lat_max_ns = 0;
	uint32_t dev_before, dev_after;
	bool ok = true;
	char detail[256];
	size_t dl = 0;

	if (!irq_counts(c, before)) {
		check(c, "msix", false, "\"error\":\"IRQ_COUNTS ioctl failed\"");
		return;
	}
	dev_before = reg_read(c, VUGPU_DIAG_IRQ_COUNT);
	/* A different count per vector: a misrouted vector cannot produce the right totals. */
	for (v = 0; v < VUGPU_NUM_VECTORS; v++) {
		fires[v] = 3 + 2 * v;
		for (k = 0; k < fires[v]; k++) {
			uint64_t want, t0 = now_ns(), dt;

			irq_counts(c, now);
			want = now[v] + 1;
			reg_write(c, VUGPU_DIAG_IRQ_FIRE, v);
			while (now[v] < want && now_ns() - t0 < 2000000000ull) {
				sleep_us(100);
				irq_counts(c, now);
			}
			dt = now_ns() - t0;
			if (now[v] < want)
				lost++;
			lat_sum_ns += dt;
			if (dt > lat_max_ns)
				lat_max_ns = dt;
		}
		total += fires[v];
	}
	/* A little longer, so that extra (spurious or duplicated) interrupts would show. */
	sleep_ms(200);
	irq_counts(c, after);
	dev_after = reg_read(c, VUGPU_DIAG_IRQ_COUNT);
	for (v = 0; v < VUGPU_NUM_VECTORS; v++) {
		uint64_t got = after[v] - before[v];

		ok = ok && got == fires[v];
		dl += snprintf(detail + dl, sizeof(detail) - dl, "%s{\"vector\":%u,\"fired\":%u,\"received\":%llu}",
			       v ? "," : "", v, fires[v], (unsigned long long)got);
	}
	ok = ok && lost == 0 && dev_after - dev_before == total;
	check(c, "msix", ok, "\"vectors\":[%s],\"device_count_delta\":%u,\"timeouts\":%u,"
	      "\"fire_to_handler_us\":{\"mean\":%.1f,\"max\":%.1f}",
	      detail, dev_after - dev_before, lost, lat_sum_ns / 1000.0 / total, lat_max_ns / 1000.0);
}

/* ------------------------------------------------------------------ bench */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct stats {
	double mean_us, p50_us, p99_us, min_us, max_us;
};

static struct stats summarize(uint64_t *ns, unsigned n)
{
	struct stats s;
	double sum = 0;
	unsigned i;

	for (i = 0; i < n; i++)
		sum += (double)ns[i];
	qsort(ns, n, sizeof(*ns), cmp_u64);
	s.mean_us = sum / n / 1000.0;
	s.p50_us = ns[n / 2] / 1000.0;
	s.p99_us = ns[(size_t)n * 99 / 100] / 1000.0;
	s.min_us = ns[0] / 1000.0;
	s.max_us = ns[n - 1] / 1000.0;
	return s;
}

static void print_stats(const char *name, struct stats s, bool comma)
{
	printf("\"%s\":{\"mean\":%.3f,\"p50\":%.3f,\"p99\":%.3f,\"min\":%.3f,\"max\":%.3f}%s", name, s.mean_us,
	       s.p50_us, s.p99_us, s.min_us, s.max_us, comma ? "," : "");
}

static double bandwidth_mbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / ((double)ns / 1e9) / 1e6 : 0;
}

static int bench(struct ctx *c, unsigned n)
{
	uint64_t *ns = calloc(n, sizeof(*ns)), t0, t1;
	volatile uint32_t *r = &c->bar0[VUGPU_DIAG_SCRATCH(0) / 4];
	volatile uint32_t *w = &c->bar0[VUGPU_DIAG_SCRATCH(1) / 4];
	size_t bytes = c->bar1_window < 4 * MiB ? c->bar1_window : 4 * MiB;
	unsigned i, reps = 4, words = 1u << 20;
	struct stats clk, rd, wr;
	double bar1_w, bar1_r, word_r_ns, word_w_ns;
	uint8_t *buf = malloc(bytes);
	uint32_t sink = 0;

	if (!ns || !buf)
		return 1;
	memset(buf, 0x5a, bytes);

	/* Cost of the timing itself (reported, not subtracted). */
	for (i = 0; i < n; i++) {
		t0 = now_ns();
		t1 = now_ns();
		ns[i] = t1 - t0;
	}
	clk = summarize(ns, n);

	phase("bar0-read");
	for (i = 0; i < n; i++) {
		t0 = now_ns();
		sink += *r;
		t1 = now_ns();
		ns[i] = t1 - t0;
	}
	rd = summarize(ns, n);

	phase("bar0-write");
	for (i = 0; i < n; i++) {
		t0 = now_ns();
		*w = i;
		t1 = now_ns();
		ns[i] = t1 - t0;
	}
	wr = summarize(ns, n);

	phase("bar1");
	t0 = now_ns();
	for (i = 0; i < reps; i++)
		memcpy((void *)c->bar1, buf, bytes);
	__sync_synchronize();
	bar1_w = bandwidth_mbps((uint64_t)bytes * reps, now_ns() - t0);
	t0 = now_ns();
	for (i = 0; i < reps; i++)
		memcpy(buf, (const void *)c->bar1, bytes);
	bar1_r = bandwidth_mbps((uint64_t)bytes * reps, now_ns() - t0);
	/* Single 32-bit accesses (the aperture is mapped memory: no trap expected). */
	t0 = now_ns();
	for (i = 0; i < words; i++)
		sink += ((volatile uint32_t *)c->bar1)[i & ((bytes / 4) - 1)];
	word_r_ns = (double)(now_ns() - t0) / words;
	t0 = now_ns();
	for (i = 0; i < words; i++)
		((volatile uint32_t *)c->bar1)[i & ((bytes / 4) - 1)] = i;
	word_w_ns = (double)(now_ns() - t0) / words;

	printf("VUGPU-BENCH {\"n\":%u,", n);
	print_stats("clock_gettime_us", clk, true);
	print_stats("bar0_read_us", rd, true);
	print_stats("bar0_write_us", wr, true);
	printf("\"bar1_bytes\":%zu,\"bar1_reps\":%u,\"bar1_write_MBps\":%.1f,\"bar1_read_MBps\":%.1f,"
	       "\"bar1_read32_ns\":%.2f,\"bar1_write32_ns\":%.2f,\"sink\":%u}\n",
	       bytes, reps, bar1_w, bar1_r, word_r_ns, word_w_ns, sink & 1);
	fflush(stdout);
	free(ns);
	free(buf);
	return 0;
}

/* ------------------------------------------------------------------ probe */

#define PROBE_VALUE 0x600df00du
#define PROBE_SLOW_NS 5000000ull /* an access slower than 5 ms is a pause */
#define PROBE_SAMPLES (1u << 18)
#define PROBE_STOP 0x504f5453u /* 'STOP' in the first word of BAR1: the host ends the probe early */

/*
 * --probe S: trapped BAR0 reads of scratch 0 back to back for S seconds. A server restart or
 * upgrade shows up as one access that takes as long as the guest is paused: every access over
 * 5 ms is one VUGPU-PAUSE line (its length, when it began, whether it read the value written
 * before: a failed access reads all-ones). At the end one VUGPU-PROBE line: accesses, pauses,
 * bad reads, and latency percentiles of the last PROBE_SAMPLES normal accesses. The host may
 * end it early by writing PROBE_STOP into the first word of BAR1 (the VM's VRAM).
 */
static int probe(struct ctx *c, unsigned secs)
{
	volatile uint32_t *r = &c->bar0[VUGPU_DIAG_SCRATCH(0) / 4];
	volatile uint32_t *stop = (volatile uint32_t *)c->bar1;
	uint64_t *ns = calloc(PROBE_SAMPLES, sizeof(*ns));
	uint64_t start, end, t0, t1, d, count = 0, kept = 0;
	unsigned pauses = 0, bad = 0;
	double worst_ms = 0;
	struct stats s;
	uint32_t v;

	if (!ns)
		return 1;
	*r = PROBE_VALUE;
	*stop = 0;
	phase("probe");
	start = now_ns();
	end = start + (uint64_t)secs * 1000000000ull;
	while ((t0 = now_ns()) < end) {
		if ((count & 255) == 0 && *stop == PROBE_STOP)
			break;
		v = *r;
		t1 = now_ns();
		d = t1 - t0;
		count++;
		if (v != PROBE_VALUE)
			bad++;
		if (d > PROBE_SLOW_NS) {
			pauses++;
			if (d / 1e6 > worst_ms)
				worst_ms = d / 1e6;
			printf("VUGPU-PAUSE {\"ms\":%.3f,\"at_s\":%.3f,\"value_ok\":%s}\n", d / 1e6, (t0 - start) / 1e9,
			       v == PROBE_VALUE ? "true" : "false");
			fflush(stdout);
			if (v != PROBE_VALUE)
				*r = PROBE_VALUE;
		} else {
			ns[kept++ % PROBE_SAMPLES] = d;
		}
	}
	s = summarize(ns, kept < PROBE_SAMPLES ? (unsigned)kept : PROBE_SAMPLES);
	printf("VUGPU-PROBE {\"seconds\":%u,\"accesses\":%llu,\"pauses\":%u,\"bad_reads\":%u,\"worst_ms\":%.3f,",
	       secs, (unsigned long long)count, pauses, bad, worst_ms);
	print_stats("read_us", s, false);
	printf("}\n");
	fflush(stdout);
	free(ns);
	return 0;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
	struct ctx c = { .fd = -1 };
	const char *dev = "/dev/vugpu-diag0";
	bool checks = false;
	long bench_n = 0, probe_s = 0;
	int i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--dev") && i + 1 < argc) {
			dev = argv[++i];
		} else if (!strcmp(argv[i], "--checks")) {
			checks = true;
		} else if (!strcmp(argv[i], "--bench") && i + 1 < argc) {
			bench_n = strtol(argv[++i], NULL, 0);
			if (bench_n < 100 || bench_n > 10000000) {
				fprintf(stderr, "--bench N: 100 <= N <= 10000000\n");
				return 2;
			}
		} else if (!strcmp(argv[i], "--probe") && i + 1 < argc) {
			probe_s = strtol(argv[++i], NULL, 0);
			if (probe_s < 1 || probe_s > 86400) {
				fprintf(stderr, "--probe S: 1 <= S <= 86400\n");
				return 2;
			}
		} else {
			fprintf(stderr, "usage: %s [--dev PATH] [--checks] [--bench N] [--probe S]\n", argv[0]);
			return 2;
		}
	}
	if (!bench_n && !probe_s)
		checks = true;
	if (open_device(&c, dev) < 0)
		return 1;
	if (checks) {
		check_info(&c);
		check_id(&c);
		check_scratch(&c);
		check_bar1(&c);
		check_dma(&c);
		check_msix(&c);
	}
	if (bench_n && bench(&c, (unsigned)bench_n))
		c.failed++;
	if (probe_s && probe(&c, (unsigned)probe_s))
		c.failed++;
	return c.failed > 125 ? 125 : c.failed;
}
