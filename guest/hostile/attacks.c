/* SPDX-License-Identifier: MIT */
#include "attacks.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "report.h"
#include "vugpu_names.h"

#define DST_PAT 0xa5a5a5a5u
#define OWN_PAT 0x0ddba11u
#define UNMAPPED_GPA 0xfffff0000000ull
#define MMU_FAULT_CODES BIT(VG_CERR_MMU_FAULT)
#define NOT_PRESENT_OR_RANGE (BIT(VG_FAULT_PTE_NOT_PRESENT) | BIT(VG_FAULT_VRAM_OUT_OF_RANGE))
/* Every channel error code of hw-spec §8.2. */
#define KNOWN_CODES (BIT(1) | BIT(2) | BIT(3) | BIT(4) | BIT(5) | BIT(6) | BIT(7) | BIT(8) | BIT(9) | \
		     BIT(10) | BIT(16) | BIT(17) | BIT(VG_CERR_BAD_PROGRAM) | BIT(VG_CERR_PROGRAM_LOOP_LIMIT) | \
		     BIT(VG_CERR_CTXSW_TIMEOUT))

uint32_t lcg_steps(uint32_t s, uint64_t n)
{
	while (n--)
		s = s * 1664525u + 1013904223u;
	return s;
}

static uint32_t xorshift(uint32_t *s)
{
	uint32_t v = *s ? *s : 0x9e3779b9u;

	v ^= v << 13;
	v ^= v >> 17;
	v ^= v << 5;
	*s = v;
	return v;
}

unsigned int next_chid(struct ctx *x)
{
	return 1 + x->chid_next++ % (x->g.nchan - 1);
}

/* Slot 0: legit channel; slot SLOTS-1: the pool hog's shared instance block. */
unsigned int next_slot(struct ctx *x)
{
	return 1 + x->slot_next++ % (SLOTS - 2);
}

/*
 * The first guest-physical address above the VM's RAM. /proc/iomem ends "System RAM" below the
 * firmware's reserved top pages, which are still the VM's own (DMA-mapped) memory: round up to
 * 16 MiB, past any RAM size QEMU gives (-m is in MiB and the launcher uses 512).
 */
static uint64_t above_ram(struct ctx *x)
{
	return (x->ram_top + (16ull << 20) - 1) & ~((16ull << 20) - 1);
}

void map_sys(struct ctx *x)
{
	for (size_t i = 0; i < x->sys.pages; i++)
		as_pte(&x->g, L_PT0, (unsigned int)((VA_SYS >> 12) + i), pte_sys(x->sys.gpa[i]));
	as_flush(&x->g);
}

void reset_state(struct ctx *x)
{
	fault_clear(&x->g);
	intr_clear(&x->g);
}

const char *unit_name(unsigned int u)
{
	static const char *names[] = { "HOST", "SEMAPHORE", "COPY", "COMPUTE" };

	return u < 4 ? names[u] : "?";
}

/*
 * Run one case on a fresh channel: submit p (or the raw GPFIFO entry raw[0..1]), then a
 * semaphore release in a second entry, wait, and compare with e. Appends {"what":…} to j.
 */
int run_case(struct ctx *x, struct js *j, const char *what, const struct pb *p, const uint32_t *raw,
	     const struct expect *e)
{
	struct gpu *g = &x->g;
	struct raw_dev *d = &x->d;
	struct chan c;
	struct outcome o;
	struct fault f = { 0 };
	struct pb fu;
	unsigned int first;
	uint64_t sem;
	uint32_t sem_val = 0, reason = 0, unit = 0, write = 0, preason = 0;
	int ok, released;

	reset_state(x);
	if (chan_open(g, &c, next_chid(x), next_slot(x))) {
		js_item(j);
		jsf(j, "{\"what\":\"%s\",\"ok\":false,\"detail\":\"bind failed\"}", what);
		chan_close(g, &c);
		return 0;
	}
	sem = L_SEM + 16ull * c.slot;
	vw32(d, sem, 0);
	first = c.put;
	if (raw)
		chan_submit_raw(g, &c, raw[0], raw[1]);
	else
		chan_submit(g, &c, p);
	if (e->follow_up) {
		pb_reset(&fu);
		pb_sem_release(&fu, sem, 0xc0ffee00u | c.slot);
		chan_submit(g, &c, &fu);
	}
	o = chan_wait(g, &c, x->wait_ms);
	if (o.err == VG_CERR_MMU_FAULT) {
		/* the fault registers are set with the error; read until VALID (bounded) */
		for (int i = 0; i < 20; i++) {
			f = fault_read(g);
			if (f.status & VG_MMU_FAULT_STATUS_VALID)
				break;
			sleep_ms(10);
		}
		reason = VG_FAULT_INFO_REASON(f.info);
		unit = VG_FAULT_INFO_UNIT(f.info);
		write = VG_FAULT_INFO_WRITE(f.info);
	}
	if (o.err == VG_CERR_BAD_PROGRAM)
		preason = rd32(d, VG_PFIFO_CHAN_ERR_REASON(c.chid));
	sleep_ms(5);
	sem_val = vr32(d, sem);
	released = sem_val == (0xc0ffee00u | c.slot);
	if (o.done)
		ok = (e->codes & BIT(0)) != 0;
	else
		ok = o.err < 32 && (e->codes & BIT(o.err)) && (o.state & VG_STATE_ERROR) && !(o.state & VG_STATE_ENABLE) &&
		     o.gp_get == first && !released;
	if (ok && o.err == VG_CERR_MMU_FAULT) {
		ok = (f.status & VG_MMU_FAULT_STATUS_VALID) && f.chid == c.chid && reason < 32 && (e->reasons & BIT(reason)) &&
		     (e->unit < 0 || (unsigned int)e->unit == unit) && (e->write < 0 || (unsigned int)e->write == write) &&
		     (e->va == ANY_VA || e->va == f.addr);
	}
	if (ok && o.err == VG_CERR_BAD_PROGRAM && e->prog_reasons)
		ok = preason < 32 && (e->prog_reasons & BIT(preason));
	js_item(j);
	jsf(j, "{\"what\":\"%s\",\"chid\":%u,\"err\":%u,\"state\":\"0x%x\",\"done\":%d,\"ms\":%.0f", what, c.chid, o.err,
	    o.state, o.done, o.ms);
	if (o.err == VG_CERR_MMU_FAULT)
		jsf(j, ",\"reason\":%u,\"unit\":\"%s\",\"write\":%u,\"fault_va\":\"0x%" PRIx64 "\"", reason, unit_name(unit), write,
		    f.addr);
	else if (o.err)
		jsf(j, ",\"info\":\"0x%x\"", o.err_info);
	if (o.err == VG_CERR_BAD_PROGRAM)
		jsf(j, ",\"reason\":\"%s\"", vg_prog_err_name(preason));
	if (e->follow_up && released)
		jsf(j, ",\"later_entry_ran\":true");
	jsf(j, ",\"ok\":%s}", ok ? "true" : "false");
	chan_close(g, &c);
	reset_state(x);
	return ok;
}

struct expect mmu(uint32_t reasons, int unit, int write, uint64_t va)
{
	struct expect e = { MMU_FAULT_CODES, reasons, unit, write, va, 1, 0 };

	return e;
}

struct expect code(uint32_t codes)
{
	struct expect e = { codes, 0, -1, -1, ANY_VA, 1, 0 };

	return e;
}

/* A legit submission on a fresh channel: completes without error. */
int legit(struct ctx *x, const struct pb *p)
{
	struct chan c;
	struct outcome o;
	int ok;

	if (chan_open(&x->g, &c, next_chid(x), next_slot(x))) {
		chan_close(&x->g, &c);
		return 0;
	}
	chan_submit(&x->g, &c, p);
	o = chan_wait(&x->g, &c, x->wait_ms);
	ok = o.done;
	chan_close(&x->g, &c);
	return ok;
}

static void loop_params(struct ctx *x, uint64_t iterations, uint32_t seed)
{
	vw64(&x->d, L_KPARAM, iterations);
	vw64(&x->d, L_KPARAM + 8, 0);
	vw32(&x->d, L_KPARAM + 16, seed);
	vfill(&x->d, L_KOUT, 0, 64);
}

static void pb_loop(struct pb *p)
{
	uint64_t va = L_KOUT;
	uint32_t len = 24;

	pb_kernel(p, VG_K_LOOP, L_KPARAM, 20, 1, &va, &len);
}

/* Legit work the device must do for this VM: VRAM copy, sysmem both ways, a kernel. */
static int legit_suite(struct ctx *x, struct js *j)
{
	struct raw_dev *d = &x->d;
	struct pb p;
	int ok_vram, ok_sys_in, ok_sys_out, ok_loop;
	uint32_t want;

	vfill(d, L_SRC, HOSTILE_MARK, 0x10000);
	vfill(d, L_DST, DST_PAT, 0x20000);
	pb_reset(&p);
	pb_copy(&p, L_SRC, L_DST, 0x10000);
	ok_vram = legit(x, &p) && vcheck(d, L_DST, HOSTILE_MARK, 0x10000);

	for (size_t i = 0; i < 4 * 4096 / 4; i++)
		((uint32_t *)x->sys.va)[i] = 0x5a5a0000u ^ (uint32_t)i;
	pb_reset(&p);
	pb_copy(&p, VA_SYS, L_DST + 0x10000, 4 * 4096);
	ok_sys_in = legit(x, &p);
	for (size_t i = 0; ok_sys_in && i < 4 * 4096 / 4; i++)
		if (vr32(d, L_DST + 0x10000 + 4 * i) != (0x5a5a0000u ^ (uint32_t)i))
			ok_sys_in = 0;

	memset(x->sys.va + 4 * 4096, 0, 4 * 4096);
	pb_reset(&p);
	pb_copy(&p, L_SRC, VA_SYS + 4 * 4096, 4 * 4096);
	ok_sys_out = legit(x, &p);
	for (size_t i = 0; ok_sys_out && i < 4 * 4096 / 4; i++)
		if (((volatile uint32_t *)(x->sys.va + 4 * 4096))[i] != HOSTILE_MARK)
			ok_sys_out = 0;

	loop_params(x, 100003, 7);
	pb_reset(&p);
	pb_loop(&p);
	want = lcg_steps(7, 100003);
	ok_loop = legit(x, &p) && vr64(d, L_KOUT) == 100003 && vr32(d, L_KOUT + 16) == want;

	jsf(j, "\"vram_copy\":%s,\"sysmem_to_vram\":%s,\"vram_to_sysmem\":%s,\"loop_kernel\":%s", ok_vram ? "true" : "false",
	    ok_sys_in ? "true" : "false", ok_sys_out ? "true" : "false", ok_loop ? "true" : "false");
	return ok_vram && ok_sys_in && ok_sys_out && ok_loop;
}

int attack_baseline(struct ctx *x)
{
	struct js j;
	int ok;

	js_init(&j);
	ok = legit_suite(x, &j);
	return report_check("baseline", ok, j.b);
}

/* ---------------------------------------------------------------- a) PTE into another slice */

struct target {
	const char *name;
	uint64_t addr;
};

static unsigned int vram_targets(struct ctx *x, struct target *t)
{
	uint64_t s = x->g.slice, e = x->engine_vram;
	unsigned int n = 0;

	t[n++] = (struct target){ "slice_end", s };
	t[n++] = (struct target){ "slice_plus_4M", s + (4ull << 20) };
	t[n++] = (struct target){ "two_slices_plus_1M", 2 * s + (1ull << 20) };
	t[n++] = (struct target){ "engine_top_page", e - 4096 };
	t[n++] = (struct target){ "engine_end", e };
	t[n++] = (struct target){ "va_bit39", 1ull << 39 };
	t[n++] = (struct target){ "wraparound", 0xfffffffffffff000ull };
	return n;
}

static int end_check(const char *name, struct js *j, int ok)
{
	return report_check(name, ok, j->b);
}

int attack_other_slice(struct ctx *x)
{
	struct gpu *g = &x->g;
	struct raw_dev *d = &x->d;
	struct target t[8];
	unsigned int n = vram_targets(x, t);
	struct js j;
	struct pb p;
	struct expect e;
	int ok, all = 1;
	char what[96];

	for (unsigned int i = 0; i < n; i++)
		as_pte(g, L_PT1, i, pte_vram(t[i].addr));
	as_flush(g);
	vfill(d, L_SRC, HOSTILE_MARK, 0x10000);

	/* read: nothing may arrive in DST */
	js_init(&j);
	jsf(&j, "\"slice\":%" PRIu64 ",\"cases\":[", g->slice);
	ok = 1;
	for (unsigned int i = 0; i < n; i++) {
		uint64_t va = VA_ATTACK + 4096ull * i;

		vfill(d, L_DST, DST_PAT, 4096);
		pb_reset(&p);
		pb_copy(&p, va, L_DST, 4096);
		e = mmu(NOT_PRESENT_OR_RANGE, UNIT_COPY, 0, va);
		snprintf(what, sizeof(what), "copy_from_%s", t[i].name);
		ok &= run_case(x, &j, what, &p, NULL, &e);
		ok &= vcheck(d, L_DST, DST_PAT, 4096);
	}
	jsf(&j, "],\"dst_untouched\":%s", vcheck(d, L_DST, DST_PAT, 4096) ? "true" : "false");
	all &= end_check("pte-other-slice-read", &j, ok);

	/* write: the copy must fault before moving anything */
	js_init(&j);
	jsf(&j, "\"cases\":[");
	ok = 1;
	for (unsigned int i = 0; i < n; i++) {
		uint64_t va = VA_ATTACK + 4096ull * i;

		pb_reset(&p);
		pb_copy(&p, L_SRC, va, 4096);
		e = mmu(NOT_PRESENT_OR_RANGE, UNIT_COPY, 1, va);
		snprintf(what, sizeof(what), "copy_to_%s", t[i].name);
		ok &= run_case(x, &j, what, &p, NULL, &e);
	}
	jsf(&j, "]");
	all &= end_check("pte-other-slice-write", &j, ok);

	/* an access that starts in the VM's own last page and runs into the next slice */
	{
		uint64_t own = g->slice - 4096, va = VA_ATTACK + 16 * 4096ull;

		as_pte(g, L_PT1, 16, pte_vram(own));
		as_pte(g, L_PT1, 17, pte_vram(g->slice));
		as_flush(g);
		vfill(d, own, OWN_PAT, 4096);
		vfill(d, L_DST, DST_PAT, 8192);
		js_init(&j);
		jsf(&j, "\"cases\":[");
		pb_reset(&p);
		pb_copy(&p, va, L_DST, 8192);
		e = mmu(NOT_PRESENT_OR_RANGE, UNIT_COPY, 0, va + 4096);
		ok = run_case(x, &j, "copy_from_own_last_page_into_next_slice", &p, NULL, &e);
		pb_reset(&p);
		pb_copy(&p, L_SRC, va, 8192);
		e = mmu(NOT_PRESENT_OR_RANGE, UNIT_COPY, 1, va + 4096);
		ok &= run_case(x, &j, "copy_to_own_last_page_into_next_slice", &p, NULL, &e);
		jsf(&j, "],\"dst_untouched\":%s,\"own_page_untouched\":%s", vcheck(d, L_DST, DST_PAT, 8192) ? "true" : "false",
		    vcheck(d, own, OWN_PAT, 4096) ? "true" : "false");
		ok &= vcheck(d, L_DST, DST_PAT, 8192) && vcheck(d, own, OWN_PAT, 4096);
		all &= end_check("pte-other-slice-span", &j, ok);
	}

	/* the other units that translate: semaphores, compute buffers, pushbuffer fetch */
	{
		uint64_t va = VA_ATTACK + 4096ull; /* slice + 4 MiB */
		uint64_t bva[3];
		uint32_t blen[3] = { 4096, 4096, 4096 };
		uint32_t raw[2];

		js_init(&j);
		jsf(&j, "\"cases\":[");
		pb_reset(&p);
		pb_sem_release(&p, va, 0x5e5e5e5eu);
		e = mmu(NOT_PRESENT_OR_RANGE, UNIT_SEMAPHORE, 1, va);
		ok = run_case(x, &j, "semaphore_release_into_next_slice", &p, NULL, &e);

		vw32(d, L_KPARAM, HOSTILE_MARK);
		vw32(d, L_KPARAM + 4, 0);
		vw64(d, L_KPARAM + 8, 1024);
		pb_reset(&p);
		pb_kernel(&p, VG_K_MEMSET, L_KPARAM, 16, 1, &va, blen);
		e = mmu(NOT_PRESENT_OR_RANGE, UNIT_COMPUTE, 1, va);
		ok &= run_case(x, &j, "memset_kernel_into_next_slice", &p, NULL, &e);

		vw32(d, L_KPARAM + 0x100, 32); /* n: 32x32 u32 = 4 KiB */
		bva[0] = va;
		bva[1] = L_SRC;
		bva[2] = L_DST;
		vfill(d, L_DST, DST_PAT, 4096);
		pb_reset(&p);
		pb_kernel(&p, VG_K_MADD, L_KPARAM + 0x100, 4, 3, bva, blen);
		e = mmu(NOT_PRESENT_OR_RANGE, UNIT_COMPUTE, 0, va);
		ok &= run_case(x, &j, "madd_kernel_reading_next_slice", &p, NULL, &e);
		ok &= vcheck(d, L_DST, DST_PAT, 4096);

		raw[0] = VG_GP_ENTRY0(va);
		raw[1] = VG_GP_ENTRY1(va, 64);
		e = mmu(NOT_PRESENT_OR_RANGE, UNIT_HOST, 0, va);
		ok &= run_case(x, &j, "pushbuffer_segment_in_next_slice", NULL, raw, &e);
		jsf(&j, "]");
		all &= end_check("pte-other-slice-units", &j, ok);
	}

	/* large pages (PDE 2): 128 KiB PTEs beyond the slice */
	{
		uint64_t l0 = (g->slice + (4ull << 20)) & ~0x1ffffull, l1 = x->engine_vram - 0x20000, l2 = g->slice;

		as_pte(g, L_LPT2, 0, pte_vram(l0));
		as_pte(g, L_LPT2, 1, pte_vram(l1));
		as_pte(g, L_LPT2, 2, pte_vram(l2));
		as_flush(g);
		js_init(&j);
		jsf(&j, "\"cases\":[");
		ok = 1;
		for (unsigned int i = 0; i < 3; i++) {
			uint64_t va = VA_LATTACK + 0x20000ull * i;

			vfill(d, L_DST, DST_PAT, 4096);
			pb_reset(&p);
			pb_copy(&p, va, L_DST, 4096);
			e = mmu(NOT_PRESENT_OR_RANGE, UNIT_COPY, 0, va);
			snprintf(what, sizeof(what), "large_page_copy_from_%u", i);
			ok &= run_case(x, &j, what, &p, NULL, &e);
			ok &= vcheck(d, L_DST, DST_PAT, 4096);
			pb_reset(&p);
			pb_copy(&p, L_SRC, va + 0x1000, 4096);
			e = mmu(NOT_PRESENT_OR_RANGE, UNIT_COPY, 1, va + 0x1000);
			snprintf(what, sizeof(what), "large_page_copy_to_%u", i);
			ok &= run_case(x, &j, what, &p, NULL, &e);
		}
		jsf(&j, "]");
		all &= end_check("pte-other-slice-large", &j, ok);
	}

	/* page tables outside the slice (PDEs 3–5), one in unmapped sysmem */
	{
		static const uint32_t pde_reasons = BIT(VG_FAULT_PDE_NOT_PRESENT) | BIT(VG_FAULT_BAD_PAGE_TABLE);
		struct target pt[3] = {
			{ "pt_in_next_slice", g->slice + (1ull << 20) },
			{ "pt_at_engine_top", x->engine_vram - 0x40000 },
			{ "pt_in_unmapped_sysmem", UNMAPPED_GPA },
		};

		as_set_pde(g, 3, pt[0].addr | VG_PDE_PRESENT | VG_ENTRY_TARGET(VG_TARGET_VRAM));
		as_set_pde(g, 4, pt[1].addr | VG_PDE_PRESENT | VG_ENTRY_TARGET(VG_TARGET_VRAM));
		as_set_pde(g, 5, pt[2].addr | VG_PDE_PRESENT | VG_ENTRY_TARGET(VG_TARGET_SYSMEM));
		as_flush(g);
		js_init(&j);
		jsf(&j, "\"cases\":[");
		ok = 1;
		for (unsigned int i = 0; i < 3; i++) {
			uint64_t va = (uint64_t)(3 + i) << VG_PD_SHIFT;

			vfill(d, L_DST, DST_PAT, 4096);
			pb_reset(&p);
			pb_copy(&p, va, L_DST, 4096);
			e = mmu(pde_reasons, UNIT_COPY, 0, va);
			snprintf(what, sizeof(what), "copy_via_%s", pt[i].name);
			ok &= run_case(x, &j, what, &p, NULL, &e);
			ok &= vcheck(d, L_DST, DST_PAT, 4096);
			pb_reset(&p);
			pb_copy(&p, L_SRC, va + 0x3000, 4096);
			e = mmu(pde_reasons, UNIT_COPY, 1, va + 0x3000);
			snprintf(what, sizeof(what), "copy_to_%s", pt[i].name);
			ok &= run_case(x, &j, what, &p, NULL, &e);
		}
		jsf(&j, "]");
		for (unsigned int i = 3; i < 6; i++)
			as_set_pde(g, i, 0);
		as_flush(g);
		all &= end_check("pde-outside-slice", &j, ok);
	}
	return all;
}

/* ---------------------------------------------------------------- b) PTE to unmapped sysmem */

int attack_unmapped_sysmem(struct ctx *x)
{
	struct gpu *g = &x->g;
	struct raw_dev *d = &x->d;
	uint64_t gpa0 = x->sys.gpa[0];
	uint64_t top = above_ram(x);
	struct target t[] = {
		{ "gpa_0xfffff0000000", UNMAPPED_GPA },
		{ "just_above_guest_ram", top },
		{ "guest_ram_plus_256M", top + (256ull << 20) },
		{ "msi_window_0xfee00000", 0xfee00000ull },
		/* the bus address another VM's page would have, (k+1)<<44 | gpa */
		{ "bus_address_of_vm0", (1ull << 44) | gpa0 },
		{ "bus_address_of_vm1", (2ull << 44) | gpa0 },
		{ "bus_address_of_vm2", (3ull << 44) | gpa0 },
		{ "bus_address_of_vm14", (15ull << 44) | gpa0 },
	};
	unsigned int n = sizeof(t) / sizeof(t[0]);
	uint32_t reasons = BIT(VG_FAULT_SYSMEM_UNMAPPED) | BIT(VG_FAULT_PTE_NOT_PRESENT);
	struct js j;
	struct pb p;
	struct expect e;
	char what[96];
	int ok = 1;

	for (unsigned int i = 0; i < n; i++)
		as_pte(g, L_PT1, 32 + i, pte_sys(t[i].addr));
	as_flush(g);
	vfill(d, L_SRC, HOSTILE_MARK, 0x10000);
	js_init(&j);
	jsf(&j, "\"ram_top\":\"0x%" PRIx64 "\",\"cases\":[", x->ram_top);
	for (unsigned int i = 0; i < n; i++) {
		uint64_t va = VA_ATTACK + 4096ull * (32 + i);

		vfill(d, L_DST, DST_PAT, 4096);
		pb_reset(&p);
		pb_copy(&p, va, L_DST, 4096);
		e = mmu(reasons, UNIT_COPY, 0, va);
		snprintf(what, sizeof(what), "copy_from_%s", t[i].name);
		ok &= run_case(x, &j, what, &p, NULL, &e);
		ok &= vcheck(d, L_DST, DST_PAT, 4096);
		pb_reset(&p);
		pb_copy(&p, L_SRC, va, 4096);
		e = mmu(reasons, UNIT_COPY, 1, va);
		snprintf(what, sizeof(what), "copy_to_%s", t[i].name);
		ok &= run_case(x, &j, what, &p, NULL, &e);
	}
	jsf(&j, "]");
	return end_check("pte-unmapped-sysmem", &j, ok);
}

/* ---------------------------------------------------------------- instance blocks naming foreign memory */

/* Bind c as it is now; the bind itself must fail with BAD_INSTANCE, or (accepted) the first
 * submission must fault on the GPFIFO fetch (unit HOST). */
static int bad_bind_case(struct ctx *x, struct js *j, const char *what, struct chan *c, uint32_t chan_value,
			 int fault_ok)
{
	struct gpu *g = &x->g;
	struct raw_dev *d = &x->d;
	uint32_t st, err, reason = 0;
	struct outcome o = { 0 };
	struct pb p;
	int ok;

	reset_state(x);
	wmb_all();
	wr32(d, VG_PFIFO_CHAN(c->chid), chan_value);
	g->runlist[c->chid] = 1;
	runlist_submit(g);
	wr32(d, VG_PFIFO_CHAN_STATE(c->chid), VG_STATE_ENABLE);
	st = rd32(d, VG_PFIFO_CHAN_STATE(c->chid));
	err = rd32(d, VG_PFIFO_CHAN_ERR(c->chid));
	if (err == VG_CERR_BAD_INSTANCE) {
		ok = (st & VG_STATE_ERROR) != 0;
	} else if (fault_ok && err == 0) {
		pb_reset(&p);
		pb_1(&p, 0, VG_HOST_NOP, 0);
		chan_submit(g, c, &p);
		o = chan_wait(g, c, x->wait_ms);
		err = o.err;
		st = o.state;
		reason = VG_FAULT_INFO_REASON(fault_read(g).info);
		ok = (err == VG_CERR_MMU_FAULT || err == VG_CERR_BAD_INSTANCE) && (st & VG_STATE_ERROR);
	} else {
		ok = 0;
	}
	js_item(j);
	jsf(j, "{\"what\":\"%s\",\"chid\":%u,\"err\":%u,\"state\":\"0x%x\"", what, c->chid, err, st);
	if (err == VG_CERR_MMU_FAULT)
		jsf(j, ",\"reason\":%u", reason);
	jsf(j, ",\"ok\":%s}", ok ? "true" : "false");
	chan_close(g, c);
	reset_state(x);
	return ok;
}

int attack_instance(struct ctx *x)
{
	struct gpu *g = &x->g;
	struct raw_dev *d = &x->d;
	struct chan c;
	struct js j;
	int ok = 1;
	uint64_t s = g->slice;

	js_init(&j);
	jsf(&j, "\"cases\":[");
	/* the instance block itself beyond the slice */
	chan_prepare(g, &c, next_chid(x), next_slot(x));
	ok &= bad_bind_case(x, &j, "instance_in_next_slice", &c, VG_CHAN_VALID | (uint32_t)(s >> 12), 0);
	chan_prepare(g, &c, next_chid(x), next_slot(x));
	ok &= bad_bind_case(x, &j, "instance_at_engine_top", &c, VG_CHAN_VALID | (uint32_t)((x->engine_vram - 4096) >> 12), 0);
	chan_prepare(g, &c, next_chid(x), next_slot(x));
	ok &= bad_bind_case(x, &j, "instance_at_max_address", &c, VG_CHAN_VALID | VG_CHAN_INST_MASK, 0);

	/* USERD beyond the slice, in unmapped sysmem, misaligned target */
	chan_prepare(g, &c, next_chid(x), next_slot(x));
	vw32(d, c.inst + VG_INST_USERD_LO, (uint32_t)(s + 0x200) | VG_TARGET_VRAM);
	vw32(d, c.inst + VG_INST_USERD_HI, (uint32_t)((s + 0x200) >> 32));
	ok &= bad_bind_case(x, &j, "userd_in_next_slice", &c, VG_CHAN_VALID | (uint32_t)(c.inst >> 12), 0);
	chan_prepare(g, &c, next_chid(x), next_slot(x));
	vw32(d, c.inst + VG_INST_USERD_LO, (uint32_t)UNMAPPED_GPA | VG_TARGET_SYSMEM);
	vw32(d, c.inst + VG_INST_USERD_HI, (uint32_t)(UNMAPPED_GPA >> 32));
	ok &= bad_bind_case(x, &j, "userd_in_unmapped_sysmem", &c, VG_CHAN_VALID | (uint32_t)(c.inst >> 12), 0);
	chan_prepare(g, &c, next_chid(x), next_slot(x));
	vw32(d, c.inst + VG_INST_USERD_LO, (uint32_t)c.userd | 1); /* reserved TARGET */
	ok &= bad_bind_case(x, &j, "userd_reserved_target", &c, VG_CHAN_VALID | (uint32_t)(c.inst >> 12), 0);

	/* page directory beyond the slice / in unmapped sysmem: refused, or every fetch faults */
	chan_prepare(g, &c, next_chid(x), next_slot(x));
	vw32(d, c.inst + VG_INST_PD_LO, (uint32_t)(s + 0x10000) | VG_TARGET_VRAM);
	vw32(d, c.inst + VG_INST_PD_HI, (uint32_t)((s + 0x10000) >> 32));
	ok &= bad_bind_case(x, &j, "pd_in_next_slice", &c, VG_CHAN_VALID | (uint32_t)(c.inst >> 12), 1);
	chan_prepare(g, &c, next_chid(x), next_slot(x));
	vw32(d, c.inst + VG_INST_PD_LO, (uint32_t)UNMAPPED_GPA | VG_TARGET_SYSMEM);
	vw32(d, c.inst + VG_INST_PD_HI, (uint32_t)(UNMAPPED_GPA >> 32));
	ok &= bad_bind_case(x, &j, "pd_in_unmapped_sysmem", &c, VG_CHAN_VALID | (uint32_t)(c.inst >> 12), 1);

	/* GPFIFO ring: size out of range, or at an unmapped VA */
	chan_prepare(g, &c, next_chid(x), next_slot(x));
	vw32(d, c.inst + VG_INST_GP_BASE_HI, 21u << 16);
	ok &= bad_bind_case(x, &j, "gpfifo_2^21_entries", &c, VG_CHAN_VALID | (uint32_t)(c.inst >> 12), 0);
	chan_prepare(g, &c, next_chid(x), next_slot(x));
	vw32(d, c.inst + VG_INST_GP_BASE_LO, (uint32_t)(VA_ATTACK + 0x100000));
	ok &= bad_bind_case(x, &j, "gpfifo_at_unmapped_va", &c, VG_CHAN_VALID | (uint32_t)(c.inst >> 12), 1);
	jsf(&j, "]");
	return end_check("instance-outside-slice", &j, ok);
}

/* ---------------------------------------------------------------- c) foreign channel ids */

/* A copy on a channel that stays bound through the attack: the VM's own device still works. */
static int own_copy(struct ctx *x, struct chan *c)
{
	struct pb p;
	struct outcome o;

	vfill(&x->d, L_DST, DST_PAT, 4096);
	pb_reset(&p);
	pb_copy(&p, L_SRC, L_DST, 4096);
	chan_submit(&x->g, c, &p);
	o = chan_wait(&x->g, c, x->wait_ms);
	return o.done && vcheck(&x->d, L_DST, HOSTILE_MARK, 4096);
}

int attack_foreign_chid(struct ctx *x)
{
	struct gpu *g = &x->g;
	struct raw_dev *d = &x->d;
	struct chan own;
	unsigned int beyond[] = { g->nchan, g->nchan + 1, 100, 127 };
	unsigned int never[] = { g->nchan - 1, g->nchan - 2, g->nchan / 2 };
	int ok = 1, reads_zero = 1, no_error = 1, before, after;
	uint32_t pend = 0;

	vfill(d, L_SRC, HOSTILE_MARK, 0x10000);
	reset_state(x);
	if (chan_open(g, &own, 0, 0))
		return report_check("foreign-chid", 0, "\"detail\":\"own channel 0 did not bind\"");
	before = own_copy(x, &own);

	/* chids at and beyond PFIFO_CHAN_COUNT: the table has no such entries */
	for (unsigned int i = 0; i < sizeof(beyond) / sizeof(beyond[0]); i++) {
		unsigned int c = beyond[i];

		if (c < g->nchan || c > 127)
			continue;
		wr32(d, VG_PFIFO_CHAN(c), VG_CHAN_VALID | (uint32_t)(own.inst >> 12));
		wr32(d, VG_PFIFO_CHAN_STATE(c), VG_STATE_ENABLE);
		wr32(d, VG_DOORBELL, c);
		wr32(d, VG_PFIFO_PREEMPT, c);
		if (rd32(d, VG_PFIFO_CHAN(c)) || rd32(d, VG_PFIFO_CHAN_STATE(c)) || rd32(d, VG_PFIFO_CHAN_ERR(c)) ||
		    rd32(d, VG_PFIFO_CHAN_ERR_INFO(c)) || (rd32(d, VG_PFIFO_PREEMPT) & VG_PFIFO_PREEMPT_PENDING))
			reads_zero = 0;
	}
	/* chids below the count that the VM never bound */
	for (unsigned int i = 0; i < sizeof(never) / sizeof(never[0]); i++) {
		unsigned int c = never[i];

		wr32(d, VG_PFIFO_CHAN_STATE(c), VG_STATE_ENABLE);
		wr32(d, VG_DOORBELL, c);
		wr32(d, VG_PFIFO_PREEMPT, c);
		if (rd32(d, VG_PFIFO_CHAN_ERR(c)) || (rd32(d, VG_PFIFO_CHAN_STATE(c)) & VG_STATE_ERROR) ||
		    (rd32(d, VG_PFIFO_PREEMPT) & VG_PFIFO_PREEMPT_PENDING))
			no_error = 0;
		wr32(d, VG_PFIFO_CHAN_STATE(c), 0);
	}
	/* every chid the doorbell can name, and garbage in the upper bits */
	for (unsigned int c = 0; c < 128; c++)
		wr32(d, VG_DOORBELL, c | 0xffffff80u);
	for (unsigned int c = 0; c < 128; c++)
		wr32(d, VG_PFIFO_PREEMPT, c | 0xffffff80u);
	sleep_ms(50);
	for (int i = 0; i < 4; i++)
		pend |= rd32(d, VG_PFIFO_ERR_PENDING(i));
	after = own_copy(x, &own);
	ok = before && after && reads_zero && no_error && pend == 0;
	chan_close(g, &own);
	{
		char f[256];

		snprintf(f, sizeof(f),
			 "\"nchan\":%u,\"beyond_count_reads_zero\":%s,\"unbound_no_error\":%s,\"err_pending\":\"0x%x\","
			 "\"own_copy_before\":%s,\"own_copy_after\":%s",
			 g->nchan, reads_zero ? "true" : "false", no_error ? "true" : "false", pend, before ? "true" : "false",
			 after ? "true" : "false");
		return report_check("foreign-chid", ok, f);
	}
}

int attack_runlist(struct ctx *x)
{
	struct gpu *g = &x->g;
	struct raw_dev *d = &x->d;
	struct chan own;
	uint32_t rnd = x->seed * 7919u + 1;
	int garbage_accepted, too_long, huge, beyond, after, ok;
	uint32_t intr;

	vfill(d, L_SRC, HOSTILE_MARK, 0x10000);
	reset_state(x);
	if (chan_open(g, &own, 0, 0))
		return report_check("runlist-garbage", 0, "\"detail\":\"own channel 0 did not bind\"");
	/* random words: chids the VM does not own, ≥ the count, duplicates */
	for (unsigned int i = 0; i < g->nchan; i++) {
		vw32(d, L_RUNLIST + 8 * i, xorshift(&rnd));
		vw32(d, L_RUNLIST + 8 * i + 4, xorshift(&rnd));
	}
	wmb_all();
	wr32(d, VG_PFIFO_RUNLIST_BASE, (uint32_t)(L_RUNLIST >> 12));
	wr32(d, VG_PFIFO_RUNLIST_SUBMIT, g->nchan);
	garbage_accepted = !(rd32(d, VG_PFIFO_INTR) & VG_PFIFO_INTR_RUNLIST_ERROR);
	/* longer than the channel count: rejected */
	wr32(d, VG_PFIFO_RUNLIST_SUBMIT, g->nchan + 1);
	too_long = (rd32(d, VG_PFIFO_INTR) & VG_PFIFO_INTR_RUNLIST_ERROR) != 0;
	wr32(d, VG_PFIFO_INTR, VG_PFIFO_INTR_RUNLIST_ERROR);
	wr32(d, VG_PFIFO_RUNLIST_SUBMIT, 0xfff);
	huge = (rd32(d, VG_PFIFO_INTR) & VG_PFIFO_INTR_RUNLIST_ERROR) != 0;
	wr32(d, VG_PFIFO_INTR, VG_PFIFO_INTR_RUNLIST_ERROR);
	/* a runlist beyond the slice (it would be read from the next VM's VRAM) */
	wr32(d, VG_PFIFO_RUNLIST_BASE, (uint32_t)(g->slice >> 12));
	wr32(d, VG_PFIFO_RUNLIST_SUBMIT, 1);
	beyond = (rd32(d, VG_PFIFO_INTR) & VG_PFIFO_INTR_RUNLIST_ERROR) != 0;
	wr32(d, VG_PFIFO_INTR, VG_PFIFO_INTR_RUNLIST_ERROR);
	intr = rd32(d, VG_PMC_INTR);
	/* back to a sane runlist (own channel only): the device still serves this VM */
	runlist_submit(g);
	after = own_copy(x, &own);
	chan_close(g, &own);
	reset_state(x);
	ok = garbage_accepted && too_long && huge && beyond && after;
	{
		char f[256];

		snprintf(f, sizeof(f),
			 "\"garbage_filtered\":%s,\"too_long_rejected\":%s,\"4095_rejected\":%s,\"beyond_slice_rejected\":%s,"
			 "\"pmc_intr\":\"0x%x\",\"own_copy_after\":%s",
			 garbage_accepted ? "true" : "false", too_long ? "true" : "false", huge ? "true" : "false",
			 beyond ? "true" : "false", intr, after ? "true" : "false");
		return report_check("runlist-garbage", ok, f);
	}
}

/*
 * Bind every channel the VM has, all at once, and hold them: the physical channel pool is shared
 * by all VMs, so this must not starve the others (they run meanwhile; the test checks them).
 * Each bind either succeeds or is refused on this VM's own channel (BAD_INSTANCE).
 */
int attack_chid_pool(struct ctx *x)
{
	struct gpu *g = &x->g;
	struct raw_dev *d = &x->d;
	struct chan shared;
	unsigned int bound = 0, refused = 0, other = 0;
	double t0;
	int ok;

	reset_state(x);
	chan_prepare(g, &shared, 0, SLOTS - 1);
	wmb_all();
	for (unsigned int c = 0; c < g->nchan; c++)
		wr32(d, VG_PFIFO_CHAN(c), VG_CHAN_VALID | (uint32_t)(shared.inst >> 12));
	for (unsigned int c = 0; c < g->nchan; c++) {
		uint32_t st = rd32(d, VG_PFIFO_CHAN_STATE(c)), err = rd32(d, VG_PFIFO_CHAN_ERR(c));

		if (!(st & VG_STATE_ERROR) && !err)
			bound++;
		else if ((st & VG_STATE_ERROR) && err == VG_CERR_BAD_INSTANCE)
			refused++;
		else
			other++;
		g->runlist[c] = 1;
	}
	runlist_submit(g);
	for (unsigned int c = 0; c < g->nchan; c++) {
		wr32(d, VG_PFIFO_CHAN_STATE(c), VG_STATE_ENABLE);
		wr32(d, VG_DOORBELL, c);
	}
	report_phase("chid-pool-held");
	t0 = now_ms();
	while (now_ms() - t0 < x->hold_ms)
		sleep_ms(100);
	for (unsigned int c = 0; c < g->nchan; c++) {
		wr32(d, VG_PFIFO_CHAN_STATE(c), 0);
		wr32(d, VG_PFIFO_CHAN(c), 0);
		g->runlist[c] = 0;
	}
	runlist_submit(g);
	reset_state(x);
	ok = other == 0 && bound + refused == g->nchan && bound > 0;
	{
		char f[160];

		snprintf(f, sizeof(f), "\"nchan\":%u,\"bound\":%u,\"refused\":%u,\"other\":%u,\"held_ms\":%u", g->nchan, bound,
			 refused, other, x->hold_ms);
		return report_check("chid-pool-hog", ok, f);
	}
}

/* ---------------------------------------------------------------- d) garbage */

int attack_bad_gpfifo(struct ctx *x)
{
	struct gpu *g = &x->g;
	struct raw_dev *d = &x->d;
	struct js j;
	struct expect e;
	uint32_t raw[2];
	uint64_t seg = L_PB + (uint64_t)PB_SIZE * (SLOTS - 2); /* a valid segment address */
	int ok = 1;

	js_init(&j);
	jsf(&j, "\"cases\":[");
	e = code(BIT(VG_CERR_BAD_GPFIFO_ENTRY));
	raw[0] = VG_GP_ENTRY0(seg);
	raw[1] = VG_GP_ENTRY1(seg, 0);
	ok &= run_case(x, &j, "length_0", NULL, raw, &e);
	raw[1] = VG_GP_ENTRY1(seg, VG_GPFIFO_MAX_DWORDS + 1);
	ok &= run_case(x, &j, "length_262145", NULL, raw, &e);
	raw[0] = (uint32_t)seg | 2;
	raw[1] = VG_GP_ENTRY1(seg, 4);
	ok &= run_case(x, &j, "misaligned_address", NULL, raw, &e);
	raw[0] = VG_GP_ENTRY0(VA_ATTACK + 0x200000);
	raw[1] = VG_GP_ENTRY1(VA_ATTACK + 0x200000, 16);
	e = mmu(BIT(VG_FAULT_PTE_NOT_PRESENT), UNIT_HOST, 0, VA_ATTACK + 0x200000);
	ok &= run_case(x, &j, "segment_at_unmapped_va", NULL, raw, &e);
	raw[0] = 0xfffff000u;
	raw[1] = 0xffu | (4096u << 10); /* VA 0xff_ffff_f000 + 16 KiB runs past 2^40 */
	e = mmu(BIT(VG_FAULT_VA_OUT_OF_RANGE) | BIT(VG_FAULT_PDE_NOT_PRESENT), UNIT_HOST, 0, ANY_VA);
	ok &= run_case(x, &j, "segment_past_2^40", NULL, raw, &e);

	/* GP_PUT at or beyond the ring size */
	{
		struct chan c;
		struct outcome o;
		int cok = 0;

		reset_state(x);
		if (!chan_open(g, &c, next_chid(x), next_slot(x))) {
			vw32(d, c.userd + VG_USERD_GP_PUT, GP_ENTRIES + 3);
			wmb_all();
			wr32(d, VG_DOORBELL, c.chid);
			c.put = GP_ENTRIES + 3; /* never reached: the wait ends on the error */
			o = chan_wait(g, &c, x->wait_ms);
			cok = o.err == VG_CERR_BAD_GPFIFO_ENTRY && (o.state & VG_STATE_ERROR);
			js_item(&j);
			jsf(&j, "{\"what\":\"gp_put_beyond_ring\",\"chid\":%u,\"err\":%u,\"state\":\"0x%x\",\"ok\":%s}", c.chid, o.err,
			    o.state, cok ? "true" : "false");
		}
		chan_close(g, &c);
		reset_state(x);
		ok &= cok;
	}
	jsf(&j, "]");
	return end_check("bad-gpfifo-entry", &j, ok);
}

int attack_bad_methods(struct ctx *x)
{
	struct raw_dev *d = &x->d;
	struct js j;
	struct pb p;
	struct expect e;
	int ok = 1;
	uint64_t va = L_KOUT;
	uint32_t len = 24;

	js_init(&j);
	jsf(&j, "\"cases\":[");
#define CASE(name, codes, build)                                 \
	do {                                                     \
		pb_reset(&p);                                    \
		build;                                           \
		e = code(codes);                                 \
		ok &= run_case(x, &j, name, &p, NULL, &e);       \
	} while (0)
	CASE("sec_op_0", BIT(VG_CERR_BAD_OPCODE), (p.w[p.n++] = 0x00010002u, p.w[p.n++] = 0));
	CASE("sec_op_2", BIT(VG_CERR_BAD_OPCODE), (p.w[p.n++] = 0x40010002u, p.w[p.n++] = 0));
	CASE("sec_op_6", BIT(VG_CERR_BAD_OPCODE), (p.w[p.n++] = 0xc0010002u, p.w[p.n++] = 0));
	CASE("unknown_host_method_0x4", BIT(VG_CERR_BAD_METHOD), pb_1(&p, 0, 0x0004, 1));
	CASE("set_object_bad_class", BIT(VG_CERR_BAD_CLASS), pb_1(&p, 3, VG_HOST_SET_OBJECT, 0x1234));
	CASE("class_method_without_object", BIT(VG_CERR_NO_OBJECT), pb_1(&p, 2, 0x0300, 0));
	CASE("copy_unknown_method", BIT(VG_CERR_BAD_METHOD),
	     (pb_1(&p, VG_SUBCH_COPY, VG_HOST_SET_OBJECT, VG_CLASS_COPY), pb_1(&p, VG_SUBCH_COPY, 0x0500, 1)));
	{
		uint32_t s[4] = { 0, (uint32_t)L_SEM, 1, 7 };

		CASE("semaphore_op_7", BIT(VG_CERR_BAD_METHOD_DATA), pb_mthd(&p, 0, VG_HOST_SEMAPHORE_A, 4, s));
	}
	CASE("copy_line_count_2", BIT(VG_CERR_BAD_METHOD_DATA),
	     (pb_copy(&p, L_SRC, L_DST, 64), p.n -= 2, pb_1(&p, VG_SUBCH_COPY, VG_COPY_LINE_COUNT, 2),
	      pb_1(&p, VG_SUBCH_COPY, VG_COPY_LAUNCH_DMA, VG_LAUNCH_TRANSFER_NON_PIPELINED)));
	CASE("copy_length_0", BIT(VG_CERR_BAD_METHOD_DATA), pb_copy(&p, L_SRC, L_DST, 0));
	CASE("copy_remap_flag", BIT(VG_CERR_BAD_METHOD_DATA),
	     (pb_copy(&p, L_SRC, L_DST, 64), p.n -= 2,
	      pb_1(&p, VG_SUBCH_COPY, VG_COPY_LAUNCH_DMA, VG_LAUNCH_TRANSFER_NON_PIPELINED | (1u << 10))));
	CASE("kernel_id_99", BIT(VG_CERR_BAD_LAUNCH), pb_kernel(&p, 99, L_KPARAM, 0, 0, NULL, NULL));
	CASE("kernel_buffer_count_mismatch", BIT(VG_CERR_BAD_LAUNCH), pb_kernel(&p, VG_K_MADD, L_KPARAM, 4, 1, &va, &len));
	CASE("param_length_5000", BIT(VG_CERR_BAD_LAUNCH) | BIT(VG_CERR_BAD_METHOD_DATA),
	     pb_kernel(&p, VG_K_LOOP, L_KPARAM, 5000, 1, &va, &len));
	CASE("grid_x_0", BIT(VG_CERR_BAD_METHOD_DATA),
	     (pb_1(&p, VG_SUBCH_COMPUTE, VG_HOST_SET_OBJECT, VG_CLASS_COMPUTE), pb_1(&p, VG_SUBCH_COMPUTE, VG_COMPUTE_GRID_X, 0)));
	CASE("pushbuffer_truncated", BIT(VG_CERR_PB_TRUNCATED), (p.w[p.n++] = VG_MTHD(VG_OP_INC, 0, VG_HOST_NOP, 5), p.w[p.n++] = 0));
	vw64(d, L_KPARAM, 0);
	vw64(d, L_KPARAM + 8, 0);
	vw32(d, L_KPARAM + 16, 1);
	CASE("loop_without_limits", BIT(VG_CERR_KERNEL_ERROR), pb_loop(&p));
#undef CASE
	jsf(&j, "]");
	return end_check("bad-methods", &j, ok);
}

/* Seeded random pushbuffers and GPFIFO entries: each stops its channel with an error of §8.2
 * (a stream that happens to be valid may complete; either way nothing leaves the VM). */
int attack_garbage(struct ctx *x)
{
	struct js j;
	struct pb p;
	struct expect e = code(KNOWN_CODES | BIT(0));
	unsigned int errors = 0, completed = 0;
	int ok = 1;
	char what[64];

	e.follow_up = 0; /* random methods may legitimately end the segment early */
	js_init(&j);
	jsf(&j, "\"seed\":%u,\"cases\":[", x->seed);
	for (unsigned int s = 0; s < x->garbage_runs; s++) {
		uint32_t rnd = x->seed * 1000003u + s * 7919u + 1;
		int r;

		pb_reset(&p);
		for (unsigned int i = 0; i < 256; i++)
			p.w[p.n++] = xorshift(&rnd);
		snprintf(what, sizeof(what), "random_pushbuffer_%u", s);
		r = run_case(x, &j, what, &p, NULL, &e);
		ok &= r;
	}
	for (unsigned int s = 0; s < x->garbage_runs; s++) {
		uint32_t rnd = x->seed * 2000003u + s * 104729u + 1;
		uint32_t raw[2];

		raw[0] = xorshift(&rnd);
		raw[1] = xorshift(&rnd);
		snprintf(what, sizeof(what), "random_gpfifo_entry_%u", s);
		ok &= run_case(x, &j, what, NULL, raw, &e);
	}
	/* count outcomes from the record (run_case leaves the channel closed) */
	for (const char *q = j.b; (q = strstr(q, "\"done\":")); q += 7) {
		if (q[7] == '1')
			completed++;
		else
			errors++;
	}
	jsf(&j, "],\"errors\":%u,\"completed\":%u", errors, completed);
	/* the garbage may have rewritten this VM's own page tables: rebuild them */
	as_build(&x->g);
	map_sys(x);
	return end_check("garbage-pushbuffer", &j, ok && errors > 0);
}

/* ---------------------------------------------------------------- e) endless kernel */

int attack_endless(struct ctx *x)
{
	struct raw_dev *d = &x->d;
	struct chan c;
	struct pb p;
	struct outcome o;
	uint64_t t0, t1, done;
	int ok;
	char f[256];

	reset_state(x);
	loop_params(x, 1ull << 62, 12345);
	if (chan_open(&x->g, &c, next_chid(x), next_slot(x)))
		return report_check("endless-kernel", 0, "\"detail\":\"bind failed\"");
	pb_reset(&p);
	pb_loop(&p);
	t0 = ptimer_ns(&x->g);
	chan_submit(&x->g, &c, &p);
	report_phase("endless-kernel-submitted");
	o = chan_wait(&x->g, &c, x->endless_ms);
	t1 = ptimer_ns(&x->g);
	sleep_ms(20);
	done = vr64(d, L_KOUT);
	ok = o.err == VG_CERR_WATCHDOG && (o.state & VG_STATE_ERROR) && !(o.state & VG_STATE_ENABLE);
	snprintf(f, sizeof(f),
		 "\"err\":%u,\"state\":\"0x%x\",\"waited_ms\":%.0f,\"device_ms\":%.0f,\"loop_steps_done\":%" PRIu64
		 ",\"loop_state_consistent\":%s",
		 o.err, o.state, o.ms, (double)(t1 - t0) / 1e6, done,
		 done && done < (1ull << 40) && vr32(d, L_KOUT + 16) == lcg_steps(12345, done) ? "true" : "false");
	chan_close(&x->g, &c);
	reset_state(x);
	return report_check("endless-kernel", ok, f);
}

/* A semaphore acquire that is never satisfied blocks only its own channel. */
int attack_acquire_forever(struct ctx *x)
{
	struct gpu *g = &x->g;
	struct raw_dev *d = &x->d;
	struct chan blocked;
	struct pb p;
	uint64_t sem = L_SEM + 0x800;
	uint32_t acq[4] = { 0, (uint32_t)sem, 0xdeadbeefu, VG_SEM_ACQUIRE };
	uint32_t st = 0, pending;
	int waiting = 0, other, ok;
	char f[200];

	reset_state(x);
	vw32(d, sem, 0);
	if (chan_open(g, &blocked, next_chid(x), next_slot(x)))
		return report_check("acquire-forever", 0, "\"detail\":\"bind failed\"");
	pb_reset(&p);
	pb_mthd(&p, 0, VG_HOST_SEMAPHORE_A, 4, acq);
	chan_submit(g, &blocked, &p);
	for (int i = 0; i < 200 && !waiting; i++) {
		st = rd32(d, VG_PFIFO_CHAN_STATE(blocked.chid));
		waiting = (st & VG_STATE_ACQUIRE_WAIT) != 0;
		if (!waiting)
			sleep_ms(10);
	}
	/* the device keeps serving this VM's other channels meanwhile */
	vfill(d, L_SRC, HOSTILE_MARK, 4096);
	vfill(d, L_DST, DST_PAT, 4096);
	pb_reset(&p);
	pb_copy(&p, L_SRC, L_DST, 4096);
	other = legit(x, &p) && vcheck(d, L_DST, HOSTILE_MARK, 4096);
	/* stop it the spec's way: disable, preempt, wait for PENDING = 0, unbind */
	wr32(d, VG_PFIFO_CHAN_STATE(blocked.chid), 0);
	wr32(d, VG_PFIFO_PREEMPT, blocked.chid);
	sleep_ms(20);
	pending = rd32(d, VG_PFIFO_PREEMPT) & VG_PFIFO_PREEMPT_PENDING;
	chan_close(g, &blocked);
	reset_state(x);
	ok = waiting && other && !pending;
	snprintf(f, sizeof(f), "\"acquire_wait\":%s,\"state\":\"0x%x\",\"other_channel_copy\":%s,\"preempt_pending\":%s",
		 waiting ? "true" : "false", st, other ? "true" : "false", pending ? "true" : "false");
	return report_check("acquire-forever", ok, f);
}

/* ---------------------------------------------------------------- f) extras */

int attack_pramin(struct ctx *x)
{
	struct gpu *g = &x->g;
	struct raw_dev *d = &x->d;
	uint64_t s = g->slice;
	int beyond_zero, straddle_in, straddle_out_zero, top_zero, ok;
	uint32_t v;
	char f[256];

	/* window entirely beyond the slice */
	wr32(d, H_PRAMIN_BASE, (uint32_t)(s >> 16));
	wr32(d, H_PRAMIN_WINDOW, HOSTILE_MARK);
	wr32(d, H_PRAMIN_WINDOW + 0xffffc, HOSTILE_MARK);
	beyond_zero = rd32(d, H_PRAMIN_WINDOW) == 0 && rd32(d, H_PRAMIN_WINDOW + 0xffffc) == 0;
	/* window straddling the end: the first 64 KiB are the VM's own */
	vw32(d, s - 0x10000, 0);
	wr32(d, H_PRAMIN_BASE, (uint32_t)((s - 0x10000) >> 16));
	wr32(d, H_PRAMIN_WINDOW, OWN_PAT);
	wr32(d, H_PRAMIN_WINDOW + 0x10000, HOSTILE_MARK);
	wr32(d, H_PRAMIN_WINDOW + 0x80000, HOSTILE_MARK);
	v = vr32(d, s - 0x10000);
	straddle_in = rd32(d, H_PRAMIN_WINDOW) == OWN_PAT && v == OWN_PAT;
	straddle_out_zero = rd32(d, H_PRAMIN_WINDOW + 0x10000) == 0 && rd32(d, H_PRAMIN_WINDOW + 0x80000) == 0;
	/* the highest base the register takes */
	wr32(d, H_PRAMIN_BASE, 0xffffffu);
	wr32(d, H_PRAMIN_WINDOW + 0x10, HOSTILE_MARK);
	top_zero = rd32(d, H_PRAMIN_WINDOW + 0x10) == 0 && (rd32(d, H_PRAMIN_BASE) & 0xff000000u) == 0;
	wr32(d, H_PRAMIN_BASE, 0);
	ok = beyond_zero && straddle_in && straddle_out_zero && top_zero;
	snprintf(f, sizeof(f),
		 "\"beyond_slice_reads_zero\":%s,\"own_part_works\":%s,\"past_end_reads_zero\":%s,\"max_base_reads_zero\":%s",
		 beyond_zero ? "true" : "false", straddle_in ? "true" : "false", straddle_out_zero ? "true" : "false",
		 top_zero ? "true" : "false");
	return report_check("pramin-beyond-slice", ok, f);
}

/* One DIAG DMA; returns STATUS | ERROR << 8. */
static uint32_t diag_dma(struct raw_dev *d, uint64_t gpa, uint32_t len, uint32_t off, uint32_t ctrl)
{
	wr32(d, H_DIAG_DMA_ADDR_LO, (uint32_t)gpa);
	wr32(d, H_DIAG_DMA_ADDR_HI, (uint32_t)(gpa >> 32));
	wr32(d, H_DIAG_DMA_LEN, len);
	wr32(d, H_DIAG_DMA_VRAM_OFF, off);
	wr32(d, H_DIAG_DMA_CTRL, ctrl);
	return rd32(d, H_DIAG_DMA_STATUS) | rd32(d, H_DIAG_DMA_ERROR) << 8;
}

int attack_diag(struct ctx *x)
{
	struct raw_dev *d = &x->d;
	uint32_t s = (uint32_t)x->g.slice;
	uint64_t top = above_ram(x);
	struct js j;
	int ok = 1;
	struct {
		const char *what;
		uint64_t gpa;
		uint32_t len, off, ctrl, want; /* want: STATUS | ERROR << 8 */
	} c[] = {
		{ "legit_sysmem_to_vram", x->sys.gpa[0], 4096, (uint32_t)L_DST, 1, 1 },
		{ "unmapped_gpa_to_vram", UNMAPPED_GPA, 4096, (uint32_t)L_DST, 1, 2 | 14 << 8 },
		{ "vram_to_unmapped_gpa", UNMAPPED_GPA, 4096, (uint32_t)L_DST, 2, 2 | 14 << 8 },
		{ "above_guest_ram_to_vram", top, 4096, (uint32_t)L_DST, 1, 2 | 14 << 8 },
		{ "bus_address_of_vm0", (1ull << 44) | x->sys.gpa[0], 4096, (uint32_t)L_DST, 1, 2 | 14 << 8 },
		{ "vram_offset_past_slice", x->sys.gpa[0], 4096, s - 2048, 1, 2 | 22 << 8 },
		{ "vram_offset_in_next_slice", x->sys.gpa[0], 4096, s + 4096, 2, 2 | 22 << 8 },
		{ "length_0", x->sys.gpa[0], 0, (uint32_t)L_DST, 1, 2 | 22 << 8 },
		{ "length_2M", x->sys.gpa[0], 2u << 20, (uint32_t)L_DST, 1, 2 | 22 << 8 },
		{ "ctrl_3", x->sys.gpa[0], 4096, (uint32_t)L_DST, 3, 2 | 22 << 8 },
	};
	int peek, poke;

	memset(x->sys.va, 0x3c, 4096);
	js_init(&j);
	jsf(&j, "\"cases\":[");
	for (unsigned int i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		uint32_t r;
		int cok;

		vfill(d, L_DST, DST_PAT, 4096);
		r = diag_dma(d, c[i].gpa, c[i].len, c[i].off, c[i].ctrl);
		cok = r == c[i].want;
		/* a failed sysmem → VRAM transfer leaves VRAM untouched */
		if (c[i].ctrl == 1 && c[i].want != 1 && c[i].off == L_DST)
			cok &= vcheck(d, L_DST, DST_PAT, 4096);
		if (c[i].want == 1)
			cok &= vcheck(d, L_DST, 0x3c3c3c3cu, 4096);
		js_item(&j);
		jsf(&j, "{\"what\":\"%s\",\"status\":%u,\"errno\":%u,\"ok\":%s}", c[i].what, r & 0xff, r >> 8, cok ? "true" : "false");
		ok &= cok;
	}
	/* PEEK/POKE: outside the slice reads 0 and does nothing */
	wr32(d, H_DIAG_VRAM_OFF, s);
	wr32(d, H_DIAG_VRAM_POKE, HOSTILE_MARK);
	peek = rd32(d, H_DIAG_VRAM_PEEK) == 0;
	wr32(d, H_DIAG_VRAM_OFF, s - 4);
	wr32(d, H_DIAG_VRAM_POKE, OWN_PAT);
	poke = vr32(d, s - 4) == OWN_PAT && rd32(d, H_DIAG_VRAM_PEEK) == OWN_PAT;
	jsf(&j, "],\"peek_beyond_slice_zero\":%s,\"poke_own_last_word\":%s", peek ? "true" : "false", poke ? "true" : "false");
	ok &= peek && poke;
	return end_check("diag-outside", &j, ok);
}

/* PV hypercall page: absent in fv (writes ignored); garbage calls when present. */
int attack_pv(struct ctx *x)
{
	struct gpu *g = &x->g;
	struct raw_dev *d = &x->d;
	struct js j;
	int ok = 1;

	js_init(&j);
	if (!g->pv) {
		wr32(d, VG_PV_AREA_LO, (uint32_t)x->sys.gpa[0]);
		wr32(d, VG_PV_AREA_HI, (uint32_t)(x->sys.gpa[0] >> 32));
		wr32(d, VG_PV_AREA_SLOTS, 1);
		wr32(d, VG_PV_CALL, 0);
		ok = rd32(d, VG_PV_MAGIC) == 0 && rd32(d, VG_PV_STATUS) == 0 && rd32(d, VG_PV_AREA_LO) == 0;
		jsf(&j, "\"present\":false,\"writes_ignored\":%s", ok ? "true" : "false");
		return end_check("pv-garbage", &j, ok);
	}
	jsf(&j, "\"present\":true,\"cases\":[");
	{
		volatile uint8_t *slot = x->sys.va + 8 * 4096; /* one page: slot 0 */
		uint64_t area = x->sys.gpa[8];
		struct {
			const char *what;
			uint64_t gpa;
			uint32_t slots, want;
		} reg[] = {
			{ "area_unmapped", UNMAPPED_GPA, 1, 14 },
			{ "area_misaligned", area + 8, 1, 22 },
			{ "slots_0", area, 0, 22 },
			{ "slots_65", area, 65, 22 },
			{ "area_ok", area, 1, 0 },
		};
		/* range ops (PV 2): the first u64 at ENTRIES (the `va` column) is the first PTE */
		struct {
			const char *what;
			uint32_t op, count;
			uint64_t a0, a1, va, pte;
			int32_t want;
			uint32_t flags;
		} call[] = {
			{ "op_99", 99, 0, 0, 0, 0, 0, -38, 0 },
			{ "set_pgd_beyond_slice", VG_PV_OP_SET_PGD, 0, g->slice, 0, 0, 0, -22, 0 },
			{ "set_pgd_ok", VG_PV_OP_SET_PGD, 0, 0x800000, 0, 0, 0, 0, 0 },
			{ "map_vram_beyond_slice", VG_PV_OP_MAP_BATCH, 1, 0x800000, 0, 0x1000, pte_vram(g->slice + 4096), -14, 0 },
			{ "map_unmapped_sysmem", VG_PV_OP_MAP_BATCH, 1, 0x800000, 0, 0x1000, pte_sys(UNMAPPED_GPA), -14, 0 },
			{ "map_bus_address_of_vm0", VG_PV_OP_MAP_BATCH, 1, 0x800000, 0, 0x1000, pte_sys((1ull << 44) | x->sys.gpa[0]), -14, 0 },
			{ "map_count_1000", VG_PV_OP_MAP_BATCH, 1000, 0x800000, 0, 0x1000, pte_vram(0), -22, 0 },
			{ "map_unaligned_va", VG_PV_OP_MAP_BATCH, 1, 0x800000, 0, 0x1234, pte_vram(0), -22, 0 },
			{ "map_pd_not_pv", VG_PV_OP_MAP_BATCH, 1, 0x900000, 0, 0x1000, pte_vram(0), -22, 0 },
			{ "mem_free_bogus", VG_PV_OP_MEM_FREE, 0, 0x123000, 0, 0, 0, -22, 0 },
			{ "mem_alloc_huge", VG_PV_OP_MEM_ALLOC, 0, 1ull << 40, 4096, 0, 0, -12, 0 },
			{ "mem_alloc_bad_align", VG_PV_OP_MEM_ALLOC, 0, 4096, 3, 0, 0, -22, 0 },
			{ "range_runs_past_slice", VG_PV_OP_MAP_RANGE, 2, 0x800000, 0x2000, pte_vram(g->slice - 4096), 0, -14,
			  VG_PV_RANGE_CONTIGUOUS },
			{ "range_unmapped_sysmem", VG_PV_OP_MAP_RANGE, 1, 0x800000, 0x2000, pte_sys(UNMAPPED_GPA), 0, -14, 0 },
			{ "range_ptes_past_area", VG_PV_OP_MAP_RANGE, 600, 0x800000, 0x2000, pte_vram(0), 0, -22, 0 },
			{ "range_count_huge", VG_PV_OP_MAP_RANGE, 0x7fffffffu, 0x800000, 0x2000, pte_vram(0), 0, -22,
			  VG_PV_RANGE_CONTIGUOUS },
			{ "range_past_va_space", VG_PV_OP_MAP_RANGE, 2, 0x800000, (1ull << 40) - 4096, pte_vram(0), 0, -22,
			  VG_PV_RANGE_CONTIGUOUS },
			{ "range_bad_flags", VG_PV_OP_MAP_RANGE, 1, 0x800000, 0x2000, pte_vram(0), 0, -22, 0x80 },
			{ "range_pd_not_pv", VG_PV_OP_MAP_RANGE, 1, 0x900000, 0x2000, pte_vram(0), 0, -22, VG_PV_RANGE_CONTIGUOUS },
			{ "unmap_range_past_va_space", VG_PV_OP_UNMAP_RANGE, 0x100000, 0x800000, (1ull << 40) - 4096, 0, 0, -22, 0 },
			{ "unmap_range_count_huge", VG_PV_OP_UNMAP_RANGE, 0xffffffffu, 0x800000, 0, 0, 0, -22, 0 },
			/* PV 4 */
			{ "space_new_below_pd_size", VG_PV_OP_SPACE_NEW, 0, 4096, 4096, 0, 0, -22, 0 },
			{ "space_new_bad_align", VG_PV_OP_SPACE_NEW, 0, 1u << 16, 3, 0, 0, -22, 0 },
			{ "space_new_huge", VG_PV_OP_SPACE_NEW, 0, 1ull << 40, 4096, 0, 0, -12, 0 },
			{ "space_free_not_pv", VG_PV_OP_SPACE_FREE, 0, 0x900000, 0, 0, 0, -22, 0 },
			{ "space_free_misaligned", VG_PV_OP_SPACE_FREE, 0, 0x800008, 0, 0, 0, -22, 0 },
			{ "space_free_ok", VG_PV_OP_SPACE_FREE, 0, 0x800000, 0, 0, 0, 0, 0 },
			{ "map_after_space_free", VG_PV_OP_MAP_BATCH, 1, 0x800000, 0, 0x1000, pte_vram(0), -22, 0 },
			{ "space_free_twice", VG_PV_OP_SPACE_FREE, 0, 0x800000, 0, 0, 0, -22, 0 },
		};

		for (unsigned int i = 0; i < sizeof(reg) / sizeof(reg[0]); i++) {
			uint32_t st;

			wr32(d, VG_PV_AREA_LO, (uint32_t)reg[i].gpa);
			wr32(d, VG_PV_AREA_HI, (uint32_t)(reg[i].gpa >> 32));
			wr32(d, VG_PV_AREA_SLOTS, reg[i].slots);
			st = rd32(d, VG_PV_STATUS);
			js_item(&j);
			jsf(&j, "{\"what\":\"%s\",\"status\":%u,\"ok\":%s}", reg[i].what, st, st == reg[i].want ? "true" : "false");
			ok &= st == reg[i].want;
		}
		for (unsigned int i = 0; i < sizeof(call) / sizeof(call[0]); i++) {
			int32_t res;

			memset((void *)slot, 0, 4096);
			*(volatile uint32_t *)(slot + VG_PV_SLOT_OP) = call[i].op;
			*(volatile uint32_t *)(slot + VG_PV_SLOT_COUNT) = call[i].count;
			*(volatile uint32_t *)(slot + VG_PV_SLOT_FLAGS) = call[i].flags;
			*(volatile uint64_t *)(slot + VG_PV_SLOT_ARG0) = call[i].a0;
			*(volatile uint64_t *)(slot + VG_PV_SLOT_ARG1) = call[i].a1;
			*(volatile uint64_t *)(slot + VG_PV_SLOT_ENTRIES) = call[i].va;
			*(volatile uint64_t *)(slot + VG_PV_SLOT_ENTRIES + 8) = call[i].pte;
			wmb_all();
			wr32(d, VG_PV_CALL, 0);
			res = *(volatile int32_t *)(slot + VG_PV_SLOT_RESULT);
			js_item(&j);
			jsf(&j, "{\"what\":\"%s\",\"result\":%d,\"ok\":%s}", call[i].what, res, res == call[i].want ? "true" : "false");
			ok &= res == call[i].want;
		}
		/* a slot index beyond the area: no answer, nothing breaks */
		wr32(d, VG_PV_CALL, 5);
		wr32(d, VG_PV_CALL, 0xffffffffu);
	}
	jsf(&j, "]");
	return end_check("pv-garbage", &j, ok);
}

int attack_legit_after(struct ctx *x)
{
	struct js j;
	int ok;

	as_build(&x->g);
	map_sys(x);
	js_init(&j);
	ok = legit_suite(x, &j);
	return report_check("legit-after-attacks", ok, j.b);
}
