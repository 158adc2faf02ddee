/* SPDX-License-Identifier: MIT */
/*
 * vugpu-hostile: a malicious guest "driver" for the isolation tests (test/integration/hostile.test.ts).
 *
 *   vugpu-hostile attack [--seed N] [--engine-vram-mib N] [--hold-ms N] [--garbage N]
 *                        [--wait-ms N] [--endless-ms N] [--flood N] [--only a:b:c]
 *       Take the device from any driver, program it directly from docs/hw-spec.md and try to
 *       escape the VM: PTEs into other slices and unmapped guest-physical memory, instance
 *       blocks naming foreign memory, foreign channel ids, runlist garbage, a channel-pool hog,
 *       bad GPFIFO entries and methods, random pushbuffers, an endless kernel, PRAMIN/PDIAG
 *       outside the slice, PV garbage, hostile SPIR-V programs (prog_attacks.c; --flood: how
 *       many distinct modules the flood loads). One VUGPU-CHECK line per attack ("ok": contained as the
 *       spec says), then a legit workload that must still work. Exit status: failed checks.
 *   vugpu-hostile flood-bursts [--flood N] [--bursts N] [--control 1] [--seed N] [--wait-ms N]
 *       Not an isolation check: the attacker of bench/flood.ts. Bursts of N distinct program modules,
 *       each followed by as long an idle period (and with --control 1 a control burst of one cached
 *       module as long, and its idle period): see attack_flood_bursts in prog_attacks.c.
 *   vugpu-hostile scan
 *       Map BAR1 and check that the VM's VRAM is all zeros (a fresh slice, or one scrubbed after
 *       its previous client) and holds no word of the attacker's pattern.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attacks.h"
#include "report.h"

struct attack {
	const char *name;
	int (*fn)(struct ctx *x);
};

static const struct attack attacks[] = {
	{ "baseline", attack_baseline },
	{ "other-slice", attack_other_slice },
	{ "unmapped-sysmem", attack_unmapped_sysmem },
	{ "instance", attack_instance },
	{ "foreign-chid", attack_foreign_chid },
	{ "runlist", attack_runlist },
	{ "chid-pool", attack_chid_pool },
	{ "pramin", attack_pramin },
	{ "diag", attack_diag },
	{ "pv", attack_pv },
	{ "bad-gpfifo", attack_bad_gpfifo },
	{ "bad-methods", attack_bad_methods },
	{ "garbage", attack_garbage },
	{ "endless", attack_endless },
	{ "acquire", attack_acquire_forever },
	{ "programs", attack_programs },
	{ "legit-after", attack_legit_after },
};

static int selected(const char *only, const char *name)
{
	size_t n = strlen(name);

	if (!only)
		return 1;
	for (const char *p = only; (p = strstr(p, name)); p += n)
		if ((p == only || p[-1] == ':') && (p[n] == 0 || p[n] == ':'))
			return 1;
	return 0;
}

static int scan(void)
{
	struct raw_dev d;
	uint64_t nonzero = 0, marks = 0, first = ~0ull;
	char f[200];
	int ok;

	if (raw_open(&d))
		return report_check("vram-clean", 0, "\"detail\":\"no device\""), 1;
	for (size_t a = 0; a < d.bar1_size; a += 8) {
		uint64_t v = vr64(&d, a);

		if (!v)
			continue;
		if (first == ~0ull)
			first = a;
		nonzero++;
		if ((uint32_t)v == HOSTILE_MARK)
			marks++;
		if ((uint32_t)(v >> 32) == HOSTILE_MARK)
			marks++;
	}
	ok = nonzero == 0;
	snprintf(f, sizeof(f), "\"bar1_bytes\":%zu,\"nonzero_qwords\":%" PRIu64 ",\"first_nonzero\":\"0x%" PRIx64
		 "\",\"attacker_words\":%" PRIu64, d.bar1_size, nonzero, first == ~0ull ? 0 : first, marks);
	report_check("vram-clean", ok, f);
	raw_close(&d);
	return !ok;
}

static int usage(void)
{
	fprintf(stderr, "usage: vugpu-hostile attack [--seed N] [--engine-vram-mib N] [--hold-ms N] [--garbage N] "
			"[--wait-ms N] [--endless-ms N] [--flood N] [--only a:b:c]\n"
			"       vugpu-hostile flood-bursts [--flood N] [--bursts N] [--control 1] [--seed N] [--wait-ms N]\n"
			"       vugpu-hostile scan\nattacks:");
	for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++)
		fprintf(stderr, " %s", attacks[i].name);
	fprintf(stderr, "\n");
	return 2;
}

int main(int argc, char **argv)
{
	static struct ctx x;
	const char *only = NULL;
	int e, bursts;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		return usage();
	if (!strcmp(argv[1], "scan"))
		return scan();
	bursts = !strcmp(argv[1], "flood-bursts");
	if (strcmp(argv[1], "attack") && !bursts)
		return usage();
	x.seed = 1;
	x.engine_vram = 1ull << 30;
	x.hold_ms = 3000;
	x.garbage_runs = 8;
	x.wait_ms = 15000;
	x.endless_ms = 120000;
	for (int a = 2; a < argc; a++) {
		const char *v = a + 1 < argc ? argv[a + 1] : NULL;

		if (!v)
			return usage();
		if (!strcmp(argv[a], "--seed"))
			x.seed = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(argv[a], "--engine-vram-mib"))
			x.engine_vram = strtoull(v, NULL, 0) << 20;
		else if (!strcmp(argv[a], "--hold-ms"))
			x.hold_ms = (unsigned int)strtoul(v, NULL, 0);
		else if (!strcmp(argv[a], "--garbage"))
			x.garbage_runs = (unsigned int)strtoul(v, NULL, 0);
		else if (!strcmp(argv[a], "--wait-ms"))
			x.wait_ms = (unsigned int)strtoul(v, NULL, 0);
		else if (!strcmp(argv[a], "--endless-ms"))
			x.endless_ms = (unsigned int)strtoul(v, NULL, 0);
		else if (!strcmp(argv[a], "--flood"))
			x.flood = (unsigned int)strtoul(v, NULL, 0);
		else if (!strcmp(argv[a], "--only"))
			only = v;
		else if (!strcmp(argv[a], "--bursts"))
			x.bursts = (unsigned int)strtoul(v, NULL, 0);
		else if (!strcmp(argv[a], "--control"))
			x.flood_control = strtoul(v, NULL, 0) != 0;
		else
			return usage();
		a++;
	}

	if (raw_open(&x.d)) {
		report_check("device-taken", 0, "\"detail\":\"raw_open failed (see stderr)\"");
		return 1;
	}
	if (gpu_init(&x.g, &x.d)) {
		report_check("device-taken", 0, "\"detail\":\"not a vugpu device, or slice/channels too small\"");
		return 1;
	}
	if ((e = sysbuf_alloc(&x.sys, SYS_PAGES))) {
		char f[96];

		snprintf(f, sizeof(f), "\"detail\":\"locked sysmem / pagemap: %s\"", strerror(-e));
		report_check("device-taken", 0, f);
		return 1;
	}
	x.ram_top = ram_top();
	printf("VUGPU-INFO {\"bdf\":\"%s\",\"slice\":%" PRIu64 ",\"bar1\":%zu,\"channels\":%u,\"pv\":%s,\"ram_top\":\"0x%" PRIx64
	       "\",\"engine_vram\":%" PRIu64 ",\"seed\":%u,\"sys_gpa0\":\"0x%" PRIx64 "\"}\n",
	       x.d.bdf, x.g.slice, x.d.bar1_size, x.g.nchan, x.g.pv ? "true" : "false", x.ram_top, x.engine_vram, x.seed,
	       x.sys.gpa[0]);
	if (bursts) {
		e = !attack_flood_bursts(&x);
		sysbuf_free(&x.sys);
		raw_close(&x.d);
		return e;
	}
	as_build(&x.g);
	map_sys(&x);
	report_phase("attacks-start");
	for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++) {
		if (!selected(only, attacks[i].name))
			continue;
		if (!attacks[i].fn(&x))
			x.failed++;
	}
	report_phase("attacks-done");
	printf("VUGPU-INFO {\"failed_checks\":%d,\"bar0_accesses\":%" PRIu64 "}\n", x.failed, x.d.mmio);
	sysbuf_free(&x.sys);
	raw_close(&x.d);
	return x.failed;
}
