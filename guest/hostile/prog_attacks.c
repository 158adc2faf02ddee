/* SPDX-License-Identifier: MIT */
/*
 * Program attacks (hw-spec 1.1 §6.3): a guest's own SPIR-V is hostile input. The modules are
 * made here word by word (../programs/spvgen.c: the image has no glslang). One VUGPU-CHECK per
 * attack; "ok" means the device did what §6.3 says: the launch is refused with BAD_PROGRAM and
 * the reason of §6.3.6, or faults as §8.1 says, or runs with every access bounded to its
 * bindings; a loop is stopped (PROGRAM_LOOP_LIMIT, WATCHDOG), never answered with a wrong result
 * reported as success; and the channel works again once rebound.
 *
 * On a device without programs (PROG_VERSION 0) the same checks run and every program launch
 * must come back BAD_PROGRAM/UNSUPPORTED, so the list of checks does not depend on the host.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "attacks.h"
#include "report.h"
#include "spvgen.h"
#include "vugpu_names.h"

#define CANARY 0xc4c4c4c4u
#define SENTINEL 0x5e5e5e5eu
#define WG 64u                      /* spvgen's default LocalSize x */
#define OUT_BYTES (WG * 4u)
#define PBAD BIT(VG_CERR_BAD_PROGRAM)
#define NOT_PRESENT_OR_RANGE_FAULTS (BIT(VG_FAULT_PTE_NOT_PRESENT) | BIT(VG_FAULT_VRAM_OUT_OF_RANGE))
#define R(x) BIT(VG_PROG_ERR_##x)
#define PL(x, reg) gpu_prog(&(x)->g, VG_PPROG_##reg)

static uint32_t words[16384];

static int programs_on(struct ctx *x)
{
	return x->g.prog[0] != 0;
}

/*
 * A case's expectation on a device with programs; on one without, the launch is refused with
 * BAD_PROGRAM/UNSUPPORTED instead (method-level errors the case expects stay allowed).
 */
static struct expect pexp(struct ctx *x, uint32_t codes, uint32_t prog_reasons)
{
	struct expect e = code(codes);

	e.prog_reasons = prog_reasons;
	if (!programs_on(x)) {
		e.codes = (codes & ~(BIT(0) | BIT(VG_CERR_MMU_FAULT) | BIT(VG_CERR_WATCHDOG) | BIT(VG_CERR_PROGRAM_LOOP_LIMIT) |
				 BIT(VG_CERR_CTXSW_TIMEOUT))) | PBAD;
		e.prog_reasons = (codes & PBAD) && prog_reasons ? prog_reasons | R(UNSUPPORTED) : (codes & PBAD) ? 0 : R(UNSUPPORTED);
	}
	return e;
}

static struct expect pmmu(struct ctx *x, uint32_t reasons, int write, uint64_t va)
{
	struct expect e = mmu(reasons, UNIT_COMPUTE, write, va);

	if (!programs_on(x)) {
		e.codes = PBAD;
		e.prog_reasons = R(UNSUPPORTED);
	}
	return e;
}

static void put_words(struct ctx *x, uint64_t a, const uint32_t *w, size_t n)
{
	for (size_t i = 0; i < n; i++)
		vw32(&x->d, a + 4 * i, w[i]);
}

/* Emit a module into VRAM at L_PROG + off; its length in bytes (0 if it did not fit). */
static uint32_t gen_at(struct ctx *x, uint64_t off, struct spvgen g)
{
	size_t n = spvgen_emit(&g, words, sizeof(words) / 4);

	put_words(x, L_PROG + off, words, n);
	return (uint32_t)(n * 4);
}

/* A launch of the module at L_PROG + off: one workgroup, push/spec blocks in L_PPARAM. */
static struct prog_launch launch_of(uint64_t off, uint32_t length)
{
	struct prog_launch l;

	memset(&l, 0, sizeof(l));
	l.module = L_PROG + off;
	l.length = length;
	l.grid[0] = l.grid[1] = l.grid[2] = 1;
	l.params = L_PPARAM;
	l.spec = L_PPARAM + 0x800;
	l.buffer_count = 0xffffffffu;
	return l;
}

static void bind(struct prog_launch *l, unsigned int i, uint64_t va, uint32_t len, uint32_t flags)
{
	l->va[i] = va;
	l->len[i] = len;
	l->flags[i] = flags;
	if (l->nbuf <= i)
		l->nbuf = i + 1;
}

static int case_launch(struct ctx *x, struct js *j, const char *what, const struct prog_launch *l, const struct expect *e)
{
	struct pb p;

	pb_reset(&p);
	pb_program(&p, l);
	return run_case(x, j, what, &p, NULL, e);
}

/* out[0..WG) == constant + g (the STORE body) */
static int store_ok(struct ctx *x, uint64_t out, uint32_t constant)
{
	for (uint32_t g = 0; g < WG; g++)
		if (vr32(&x->d, out + 4 * g) != constant + g)
			return 0;
	return 1;
}

/* ---------------------------------------------------------------- not SPIR-V */

static int invalid_spirv(struct ctx *x)
{
	struct js j;
	struct prog_launch l;
	struct expect e = pexp(x, PBAD, R(INVALID));
	uint32_t rnd = x->seed * 747796405u + 1, n;
	int ok = 1;

	js_init(&j);
	jsf(&j, "\"cases\":[");
	for (unsigned int i = 0; i < 64; i++) {
		rnd ^= rnd << 13;
		rnd ^= rnd >> 17;
		rnd ^= rnd << 5;
		words[i] = rnd;
	}
	put_words(x, L_PROG, words, 64);
	l = launch_of(0, 256);
	bind(&l, 0, L_PBUF, OUT_BYTES, 0);
	ok &= case_launch(x, &j, "random_words", &l, &e);

	vw32(&x->d, L_PROG, 0x07230203u);
	ok &= case_launch(x, &j, "magic_then_noise", &l, &e);

	vfill(&x->d, L_PROG, 0, 256);
	ok &= case_launch(x, &j, "all_zero", &l, &e);

	n = gen_at(x, 0, (struct spvgen){ .constant = 1 });
	l = launch_of(0, (n / 2) & ~3u);
	bind(&l, 0, L_PBUF, OUT_BYTES, 0);
	ok &= case_launch(x, &j, "truncated_module", &l, &e);

	n = gen_at(x, 0, (struct spvgen){ .constant = 1 });
	vw32(&x->d, L_PROG + 12, 0); /* id bound 0: every id is out of bounds */
	l = launch_of(0, n);
	bind(&l, 0, L_PBUF, OUT_BYTES, 0);
	ok &= case_launch(x, &j, "id_bound_zero", &l, &e);

	n = gen_at(x, 0, (struct spvgen){ .constant = 1 });
	vw32(&x->d, L_PROG + 4, 0x00020000u); /* SPIR-V 2.0 */
	ok &= case_launch(x, &j, "unknown_version", &l, &e);

	n = gen_at(x, 0, (struct spvgen){ .constant = 1 });
	vw32(&x->d, L_PROG + n - 8, 0x00ff00fdu); /* OpReturn → an instruction of 255 words */
	ok &= case_launch(x, &j, "instruction_past_end", &l, &e);
	jsf(&j, "]");
	return report_check("program-invalid-spirv", ok, j.b);
}

static int module_size(struct ctx *x)
{
	struct js j;
	struct prog_launch l;
	struct expect e = pexp(x, PBAD, R(MODULE_SIZE));
	uint32_t n = gen_at(x, 0, (struct spvgen){ .constant = 1 }), max = PL(x, MAX_MODULE_BYTES);
	int ok = 1;
	const struct {
		const char *what;
		uint64_t off;
		uint32_t len;
	} cases[] = {
		{ "length_0", 0, 0 }, { "length_16", 0, 16 }, { "length_not_multiple_of_4", 0, n - 2 },
		{ "va_not_4_aligned", 2, n }, { "length_max_plus_4", 0, max + 4 }, { "length_4GiB_minus_4", 0, 0xfffffffcu },
	};

	js_init(&j);
	jsf(&j, "\"max_module_bytes\":%u,\"cases\":[", max);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		l = launch_of(cases[i].off, cases[i].len);
		bind(&l, 0, L_PBUF, OUT_BYTES, 0);
		ok &= case_launch(x, &j, cases[i].what, &l, &e);
	}
	jsf(&j, "]");
	return report_check("program-module-size", ok, j.b);
}

/* ---------------------------------------------------------------- capabilities and extensions */

static int capability(struct ctx *x)
{
	struct js j;
	struct prog_launch l;
	struct expect e;
	uint32_t feat = PL(x, FEATURES), n;
	int ok = 1;
	char what[96];
	const struct {
		const char *name;
		uint32_t cap;
		int validator_refuses; /* may be INVALID before it is CAPABILITY */
		uint32_t feature;      /* allowed when this PROG_FEATURES bit is set */
	} caps[] = {
		{ "VariablePointers", SPV_CAP_VARIABLE_POINTERS, 0, 0 },
		{ "VariablePointersStorageBuffer", SPV_CAP_VARIABLE_POINTERS_STORAGE_BUFFER, 0, 0 },
		{ "ImageQuery", SPV_CAP_IMAGE_QUERY, 0, 0 },
		{ "Geometry", 2, 0, 0 },
		{ "SampledBuffer", 46, 0, 0 },
		{ "Kernel", SPV_CAP_KERNEL, 1, 0 },
		{ "Linkage", SPV_CAP_LINKAGE, 1, 0 },
		{ "Addresses", SPV_CAP_ADDRESSES, 1, 0 },
		{ "PhysicalStorageBufferAddresses", SPV_CAP_PHYSICAL_STORAGE_BUFFER_ADDRESSES, 1, 0 },
		{ "Float64", 10, 0, VG_PROG_FEAT_FLOAT64 },
		{ "Int64", SPV_CAP_INT64, 0, VG_PROG_FEAT_INT64 },
		{ "Float16", 9, 0, VG_PROG_FEAT_FLOAT16 },
		{ "Int8", 39, 0, VG_PROG_FEAT_INT8 },
		{ "Int16", 22, 0, VG_PROG_FEAT_INT16 },
	};
	const struct {
		const char *name;
		const char *ext, *import;
		int allowed;
	} exts[] = {
		{ "extension_variable_pointers", "SPV_KHR_variable_pointers", NULL, 0 },
		{ "extension_physical_storage_buffer", "SPV_KHR_physical_storage_buffer", NULL, 0 },
		{ "import_OpenCL.std", NULL, "OpenCL.std", 0 },
		{ "import_GLSL.std.450", NULL, "GLSL.std.450", 1 },
		{ "extension_8bit_storage", "SPV_KHR_8bit_storage", NULL, 1 },
	};

	js_init(&j);
	jsf(&j, "\"features\":\"0x%x\",\"cases\":[", feat);
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		n = gen_at(x, 0, (struct spvgen){ .constant = 0x100 + (uint32_t)i, .extra_capability = caps[i].cap });
		l = launch_of(0, n);
		bind(&l, 0, L_PBUF, OUT_BYTES, 0);
		vfill(&x->d, L_PBUF, SENTINEL, OUT_BYTES);
		if (caps[i].feature && (feat & caps[i].feature))
			e = pexp(x, BIT(0), 0);
		else
			e = pexp(x, PBAD, R(CAPABILITY) | (caps[i].validator_refuses ? R(INVALID) : 0));
		snprintf(what, sizeof(what), "capability_%s", caps[i].name);
		ok &= case_launch(x, &j, what, &l, &e);
		/* refused: nothing ran */
		if (!(e.codes & BIT(0)))
			ok &= vcheck(&x->d, L_PBUF, SENTINEL, OUT_BYTES);
	}
	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
		n = gen_at(x, 0, (struct spvgen){ .constant = 0x200 + (uint32_t)i, .extension = exts[i].ext, .ext_import = exts[i].import });
		l = launch_of(0, n);
		bind(&l, 0, L_PBUF, OUT_BYTES, 0);
		e = exts[i].allowed ? pexp(x, BIT(0), 0) : pexp(x, PBAD, R(EXTENSION) | R(INVALID));
		ok &= case_launch(x, &j, exts[i].name, &l, &e);
		if (exts[i].allowed && programs_on(x))
			ok &= store_ok(x, L_PBUF, 0x200 + (uint32_t)i);
	}
	jsf(&j, "]");
	return report_check("program-capability", ok, j.b);
}

/* ---------------------------------------------------------------- bounds */

/*
 * Reads and writes outside a binding: the binding is [in, in + len) in the middle of three pages
 * of canary words, its length not a page multiple; reads outside must return 0, writes outside
 * must change nothing (hw-spec §6.3.1 step 4, §6.3.4: the binding is never widened to pages).
 */
static int oob_access(struct ctx *x)
{
	struct js j;
	struct prog_launch l;
	struct expect e = pexp(x, BIT(0), 0);
	const uint64_t region = L_PBUF, in = L_PBUF + 4096 + 16, out = L_PBUF + 0x10000;
	const uint32_t len = 4096 + 32, words_in = len / 4;
	int ok = 1, reads_zero = 1, outside_untouched = 1, inside_untouched = 1;
	char what[96];
	const struct {
		const char *name;
		int32_t r, w;
	} cases[] = {
		{ "read_and_write_past_the_end", (int32_t)words_in, (int32_t)words_in + 3 },
		{ "read_and_write_before_the_start", -(int32_t)WG - 4, -(int32_t)WG - 1 },
		{ "read_and_write_far_away", 0x3fffffff, 0x40000000 },
		{ "write_just_past_the_end_only", (int32_t)words_in, (int32_t)words_in },
	};

	js_init(&j);
	jsf(&j, "\"binding_bytes\":%u,\"cases\":[", len);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint32_t n = gen_at(x, 0, (struct spvgen){ .body = SPVGEN_OOB, .constant = HOSTILE_MARK, .read_offset = cases[i].r,
							 .write_offset = cases[i].w });

		vfill(&x->d, region, CANARY, 3 * 4096);
		for (uint32_t k = 0; k < words_in; k++)
			vw32(&x->d, in + 4 * k, 0x1000u + k);
		vfill(&x->d, out, SENTINEL, OUT_BYTES);
		l = launch_of(0, n);
		bind(&l, 0, in, len, 0);
		bind(&l, 1, out, OUT_BYTES, 0);
		snprintf(what, sizeof(what), "%s", cases[i].name);
		ok &= case_launch(x, &j, what, &l, &e);
		{
			int rz = 1, out_ok = 1, in_ok = 1;

			if (programs_on(x)) {
				for (uint32_t g = 0; g < WG; g++) {
					uint32_t v = vr32(&x->d, out + 4 * g);
					uint64_t ri = ((uint64_t)g + (uint32_t)cases[i].r) % (1ull << 32);

					/* an index that wraps around 2^32 to inside reads the data; every other is outside: 0 */
					if (ri < words_in ? v != 0x1000u + (uint32_t)ri : v != 0)
						rz = 0;
				}
			} else if (!vcheck(&x->d, out, SENTINEL, OUT_BYTES)) {
				rz = 0; /* nothing may run */
			}
			for (uint64_t a = region; a < region + 3 * 4096; a += 4) {
				if (a >= in && a < in + len) {
					if (vr32(&x->d, a) != 0x1000u + (uint32_t)((a - in) / 4))
						in_ok = 0;
				} else if (vr32(&x->d, a) != CANARY) {
					out_ok = 0;
				}
			}
			/* per case, after its launch record */
			jsf(&j, ",{\"what\":\"%s_result\",\"oob_reads_zero\":%s,\"canaries_untouched\":%s,\"binding_untouched\":%s}",
			    cases[i].name, rz ? "true" : "false", out_ok ? "true" : "false", in_ok ? "true" : "false");
			reads_zero &= rz;
			outside_untouched &= out_ok;
			inside_untouched &= in_ok;
		}
	}
	ok &= reads_zero && outside_untouched && inside_untouched;
	jsf(&j, "],\"oob_reads_zero\":%s,\"canaries_untouched\":%s,\"binding_untouched\":%s", reads_zero ? "true" : "false",
	    outside_untouched ? "true" : "false", inside_untouched ? "true" : "false");
	return report_check("program-oob-access", ok, j.b);
}

/* ---------------------------------------------------------------- loops */

/*
 * for (i = 0; i != n; i += 2) with n odd never ends. The device stops it (WATCHDOG; on a device
 * with a loop cap, PROGRAM_LOOP_LIMIT first); then the same channel, rebound, runs a program.
 */
static int endless_loop(struct ctx *x)
{
	struct gpu *g = &x->g;
	struct chan c;
	struct pb p;
	struct prog_launch l;
	struct outcome o, o2;
	uint32_t n, n2, loop_limit = PL(x, MAX_LOOP_ITERATIONS);
	unsigned int chid = next_chid(x), slot = next_slot(x);
	int ok, stopped, again = 0;
	uint64_t t0, t1;
	char f[512];

	reset_state(x);
	n = gen_at(x, 0, (struct spvgen){ .body = SPVGEN_LOOP, .step = 2, .constant = 5 });
	vw32(&x->d, L_PPARAM, 1); /* n = 1: odd */
	vfill(&x->d, L_PBUF, SENTINEL, OUT_BYTES);
	l = launch_of(0, n);
	l.plen = 4;
	bind(&l, 0, L_PBUF, OUT_BYTES, 0);
	if (chan_open(g, &c, chid, slot))
		return report_check("program-endless-loop", 0, "\"detail\":\"bind failed\"");
	pb_reset(&p);
	pb_program(&p, &l);
	t0 = ptimer_ns(g);
	chan_submit(g, &c, &p);
	report_phase("program-endless-loop-submitted");
	o = chan_wait(g, &c, x->endless_ms);
	t1 = ptimer_ns(g);
	if (!programs_on(x))
		stopped = o.err == VG_CERR_BAD_PROGRAM && rd32(&x->d, VG_PFIFO_CHAN_ERR_REASON(chid)) == VG_PROG_ERR_UNSUPPORTED;
	else
		/* CTXSW_TIMEOUT: on a GPU, a co-tenant's work waited and the engine cut it (ctxsw.ts) */
		stopped = (o.err == VG_CERR_WATCHDOG || o.err == VG_CERR_CTXSW_TIMEOUT ||
			   (loop_limit && o.err == VG_CERR_PROGRAM_LOOP_LIMIT)) &&
			  (o.state & VG_STATE_ERROR) && !(o.state & VG_STATE_ENABLE);

	/* rebind the same channel: the error clears, the next launch runs */
	chan_close(g, &c);
	reset_state(x);
	if (!chan_open(g, &c, chid, slot)) {
		pb_reset(&p);
		if (programs_on(x)) {
			n2 = gen_at(x, 0x10000, (struct spvgen){ .constant = 0xabc000 });
			l = launch_of(0x10000, n2);
			bind(&l, 0, L_PBUF + 0x1000, OUT_BYTES, 0);
			pb_program(&p, &l);
		} else {
			vfill(&x->d, L_SRC, HOSTILE_MARK, 4096);
			pb_copy(&p, L_SRC, L_DST, 4096);
		}
		chan_submit(g, &c, &p);
		o2 = chan_wait(g, &c, x->wait_ms);
		again = o2.done && (programs_on(x) ? store_ok(x, L_PBUF + 0x1000, 0xabc000) : vcheck(&x->d, L_DST, HOSTILE_MARK, 4096));
		chan_close(g, &c);
	}
	reset_state(x);
	ok = stopped && again;
	snprintf(f, sizeof(f),
		 "\"chid\":%u,\"err\":%u,\"err_name\":\"%s\",\"state\":\"0x%x\",\"waited_ms\":%.0f,\"device_ms\":%.0f,"
		 "\"loop_limit\":%u,\"rebound_channel_works\":%s",
		 chid, o.err, vg_chan_err_name(o.err), o.state, o.ms, (double)(t1 - t0) / 1e6, loop_limit, again ? "true" : "false");
	return report_check("program-endless-loop", ok, f);
}

/*
 * A long loop: at PROG_MAX_LOOP_ITERATIONS the channel stops with PROGRAM_LOOP_LIMIT (never a
 * completion with a cut-short result); below it, or on a device without a cap, the result is the
 * CPU's.
 */
static int loop_limit(struct ctx *x)
{
	struct js j;
	struct prog_launch l;
	struct expect e;
	uint32_t lim = PL(x, MAX_LOOP_ITERATIONS), n, iters[2];
	unsigned int ncases = 0;
	int ok = 1, right = 1;

	js_init(&j);
	jsf(&j, "\"loop_limit\":%u,\"cases\":[", lim);
	if (lim) {
		iters[ncases++] = lim / 2;
		iters[ncases++] = lim + 1000;
	} else {
		iters[ncases++] = 100000;
	}
	n = gen_at(x, 0, (struct spvgen){ .body = SPVGEN_LOOP, .constant = 77 });
	for (unsigned int i = 0; i < ncases; i++) {
		int over = lim && iters[i] >= lim;
		char what[64];

		vw32(&x->d, L_PPARAM, iters[i]);
		vfill(&x->d, L_PBUF, SENTINEL, OUT_BYTES);
		l = launch_of(0, n);
		l.plen = 4;
		bind(&l, 0, L_PBUF, OUT_BYTES, 0);
		e = over ? pexp(x, BIT(VG_CERR_PROGRAM_LOOP_LIMIT), 0) : pexp(x, BIT(0), 0);
		snprintf(what, sizeof(what), "%u_iterations", iters[i]);
		ok &= case_launch(x, &j, what, &l, &e);
		if (!over && programs_on(x)) {
			for (uint32_t g = 0; g < WG; g++)
				if (vr32(&x->d, L_PBUF + 4 * g) != lcg_steps(77u ^ g, iters[i]))
					right = 0;
		}
	}
	ok &= right;
	jsf(&j, "],\"results_right\":%s", right ? "true" : "false");
	return report_check("program-loop-limit", ok, j.b);
}

/* ---------------------------------------------------------------- launch limits */

static int huge_grid(struct ctx *x)
{
	struct js j;
	struct prog_launch l;
	struct expect e = pexp(x, PBAD, R(GRID));
	uint32_t n = gen_at(x, 0, (struct spvgen){ .constant = 3 });
	uint32_t mx[3] = { PL(x, MAX_GRID_X), PL(x, MAX_GRID_Y), PL(x, MAX_GRID_Z) };
	int ok = 1;
	char what[64];

	js_init(&j);
	jsf(&j, "\"max_grid\":[%u,%u,%u],\"cases\":[", mx[0], mx[1], mx[2]);
	for (unsigned int d = 0; d < 3; d++) {
		uint32_t v[2] = { mx[d] + 1, 0xffffffffu };

		for (unsigned int k = 0; k < 2; k++) {
			l = launch_of(0, n);
			l.grid[d] = v[k];
			bind(&l, 0, L_PBUF, OUT_BYTES, 0);
			snprintf(what, sizeof(what), "grid_%c_%u", "xyz"[d], v[k]);
			ok &= case_launch(x, &j, what, &l, &e);
		}
	}
	/* GRID 0 is refused by the method itself (§8.2 BAD_METHOD_DATA) */
	l = launch_of(0, n);
	l.grid[1] = 0;
	bind(&l, 0, L_PBUF, OUT_BYTES, 0);
	e = code(BIT(VG_CERR_BAD_METHOD_DATA));
	ok &= case_launch(x, &j, "grid_y_0", &l, &e);
	jsf(&j, "]");
	return report_check("program-huge-grid", ok, j.b);
}

static int shared_memory(struct ctx *x)
{
	struct js j;
	struct prog_launch l;
	struct expect e;
	uint32_t max = PL(x, MAX_SHARED_BYTES), n;
	int ok = 1;
	char what[64];
	const uint32_t over[] = { max / 4 + 1, 65536, 0x4000000 };

	js_init(&j);
	jsf(&j, "\"max_shared_bytes\":%u,\"cases\":[", max);
	e = pexp(x, PBAD, R(SHARED_MEMORY));
	for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
		n = gen_at(x, 0, (struct spvgen){ .body = SPVGEN_SHARED, .shared_words = over[i], .constant = 9 });
		l = launch_of(0, n);
		bind(&l, 0, L_PBUF, OUT_BYTES, 0);
		snprintf(what, sizeof(what), "shared_%u_bytes", over[i] * 4);
		ok &= case_launch(x, &j, what, &l, &e);
	}
	/* exactly at the limit: runs */
	if (max >= 4 * WG) {
		n = gen_at(x, 0, (struct spvgen){ .body = SPVGEN_SHARED, .shared_words = max / 4, .constant = 9 });
		l = launch_of(0, n);
		bind(&l, 0, L_PBUF, OUT_BYTES, 0);
		vfill(&x->d, L_PBUF, SENTINEL, OUT_BYTES);
		e = pexp(x, BIT(0), 0);
		snprintf(what, sizeof(what), "shared_%u_bytes_at_limit", max);
		ok &= case_launch(x, &j, what, &l, &e);
		if (programs_on(x))
			ok &= store_ok(x, L_PBUF, 9);
	}
	jsf(&j, "]");
	return report_check("program-shared-memory", ok, j.b);
}

static int bindings(struct ctx *x)
{
	struct js j;
	struct prog_launch l;
	struct expect e;
	uint32_t maxb = PL(x, MAX_BINDINGS), maxbytes = PL(x, MAX_BUFFER_BYTES), align = PL(x, BUFFER_ALIGN), n;
	int ok = 1;

	js_init(&j);
	jsf(&j, "\"max_bindings\":%u,\"cases\":[", maxb);
	n = gen_at(x, 0, (struct spvgen){ .constant = 4 });
	/* BUFFER_COUNT past the limit (16 BUFFER(i) methods written); 17 and up may already be
	 * refused by the method (its range is 0…16) */
	l = launch_of(0, n);
	for (unsigned int i = 0; i < VG_COMPUTE_MAX_BUFFERS; i++)
		bind(&l, i, L_PBUF + 4096ull * i, OUT_BYTES, 0);
	l.buffer_count = maxb + 1;
	e = pexp(x, PBAD | (maxb + 1 > VG_COMPUTE_MAX_BUFFERS ? BIT(VG_CERR_BAD_METHOD_DATA) : 0), R(BUFFER));
	ok &= case_launch(x, &j, "buffer_count_max_plus_1", &l, &e);
	l.buffer_count = 0xffffffffu - 1;
	e = pexp(x, PBAD | BIT(VG_CERR_BAD_METHOD_DATA), R(BUFFER));
	ok &= case_launch(x, &j, "buffer_count_huge", &l, &e);

	/* the module uses binding 3, the launch binds 2 */
	n = gen_at(x, 0, (struct spvgen){ .bindings = 4, .out_binding = 3, .constant = 4 });
	l = launch_of(0, n);
	bind(&l, 0, L_PBUF, OUT_BYTES, 0);
	bind(&l, 1, L_PBUF + 4096, OUT_BYTES, 0);
	e = pexp(x, PBAD, R(BINDING));
	ok &= case_launch(x, &j, "module_binding_beyond_buffer_count", &l, &e);

	/* every binding the device allows: runs */
	n = gen_at(x, 0, (struct spvgen){ .bindings = maxb ? maxb : 1, .out_binding = maxb ? maxb - 1 : 0, .constant = 44 });
	l = launch_of(0, n);
	for (unsigned int i = 0; i < (maxb ? maxb : 1) && i < VG_COMPUTE_MAX_BUFFERS; i++)
		bind(&l, i, L_PBUF + 4096ull * i, OUT_BYTES, 0);
	vfill(&x->d, L_PBUF + 4096ull * (maxb ? maxb - 1 : 0), SENTINEL, OUT_BYTES);
	e = pexp(x, BIT(0), 0);
	ok &= case_launch(x, &j, "all_bindings", &l, &e);
	if (programs_on(x))
		ok &= store_ok(x, L_PBUF + 4096ull * (maxb ? maxb - 1 : 0), 44);

	/* binding length and alignment */
	n = gen_at(x, 0, (struct spvgen){ .constant = 4 });
	l = launch_of(0, n);
	bind(&l, 0, L_PBUF, maxbytes + 16, 0);
	e = pexp(x, PBAD, R(BUFFER));
	ok &= case_launch(x, &j, "binding_longer_than_max", &l, &e);
	l = launch_of(0, n);
	bind(&l, 0, L_PBUF, 0, 0);
	e = pexp(x, PBAD | BIT(VG_CERR_BAD_METHOD_DATA), R(BUFFER));
	ok &= case_launch(x, &j, "binding_length_0", &l, &e);
	if (align > 4) {
		l = launch_of(0, n);
		bind(&l, 0, L_PBUF + 4, OUT_BYTES, 0);
		e = pexp(x, PBAD, R(BUFFER));
		ok &= case_launch(x, &j, "binding_va_misaligned", &l, &e);
	}
	/* bit 1 is DEVICE_CACHED since hw-spec 1.6 (PROG_VERSION 0x00010001): the first bit still
	 * reserved is 2 */
	l = launch_of(0, n);
	bind(&l, 0, L_PBUF, OUT_BYTES, 0x4);
	e = pexp(x, BIT(VG_CERR_BAD_METHOD_DATA) | PBAD, 0);
	ok &= case_launch(x, &j, "buffer_flags_reserved_bit", &l, &e);
	jsf(&j, "]");
	return report_check("program-bindings", ok, j.b);
}

/* READ_ONLY buffers (hw-spec 1.1): a written binding flagged READ_ONLY is refused; a binding on a
 * read-only page faults on write; a NonWritable binding flagged READ_ONLY runs. */
static int readonly(struct ctx *x)
{
	struct gpu *g = &x->g;
	struct js j;
	struct prog_launch l;
	struct expect e;
	uint32_t n = gen_at(x, 0, (struct spvgen){ .constant = 6 });
	uint64_t ro_va = VA_ATTACK + 32 * 4096ull;
	int ok = 1;

	js_init(&j);
	jsf(&j, "\"cases\":[");
	l = launch_of(0, n);
	bind(&l, 0, L_PBUF, OUT_BYTES, VG_BUFFER_FLAG_READ_ONLY);
	e = pexp(x, PBAD, R(BINDING_WRITABLE));
	ok &= case_launch(x, &j, "written_binding_flagged_read_only", &l, &e);

	as_pte(g, L_PT1, 32, pte_vram(L_PBUF + 0x20000) | VG_PTE_READ_ONLY);
	as_flush(g);
	vfill(&x->d, L_PBUF + 0x20000, SENTINEL, 4096);
	l = launch_of(0, n);
	bind(&l, 0, ro_va, OUT_BYTES, 0);
	e = pmmu(x, BIT(VG_FAULT_WRITE_TO_READ_ONLY), 1, ro_va);
	ok &= case_launch(x, &j, "binding_on_read_only_page", &l, &e);
	ok &= vcheck(&x->d, L_PBUF + 0x20000, SENTINEL, 4096);

	n = gen_at(x, 0, (struct spvgen){ .bindings = 2, .nonwritable = 2, .constant = 66 });
	l = launch_of(0, n);
	bind(&l, 0, L_PBUF, OUT_BYTES, 0);
	bind(&l, 1, ro_va, OUT_BYTES, VG_BUFFER_FLAG_READ_ONLY);
	e = pexp(x, BIT(0), 0);
	ok &= case_launch(x, &j, "nonwritable_binding_on_read_only_page", &l, &e);
	if (programs_on(x))
		ok &= store_ok(x, L_PBUF, 66);
	as_pte(g, L_PT1, 32, 0);
	as_flush(g);
	jsf(&j, "]");
	return report_check("program-readonly", ok, j.b);
}

/* Module, push, spec and binding addresses in memory the VM does not own: MMU faults, unit COMPUTE. */
static int foreign_memory(struct ctx *x)
{
	struct gpu *g = &x->g;
	struct js j;
	struct prog_launch l;
	struct expect e;
	uint64_t foreign = VA_ATTACK + 40 * 4096ull, foreign2 = foreign + 4096, unmapped = 0x7000000000ull;
	uint32_t n = gen_at(x, 0, (struct spvgen){ .constant = 8 });
	int ok = 1;

	as_pte(g, L_PT1, 40, pte_vram(g->slice));
	as_pte(g, L_PT1, 41, pte_vram(g->slice + (4ull << 20)));
	as_flush(g);
	js_init(&j);
	jsf(&j, "\"cases\":[");
	l = launch_of(0, n);
	l.module = foreign2;
	bind(&l, 0, L_PBUF, OUT_BYTES, 0);
	e = pmmu(x, NOT_PRESENT_OR_RANGE_FAULTS, 0, foreign2);
	ok &= case_launch(x, &j, "module_in_next_slice", &l, &e);

	l = launch_of(0, n);
	bind(&l, 0, foreign, OUT_BYTES, 0);
	e = pmmu(x, NOT_PRESENT_OR_RANGE_FAULTS, 1, foreign);
	ok &= case_launch(x, &j, "binding_at_slice_end", &l, &e);

	l = launch_of(0, n);
	bind(&l, 0, L_PBUF, OUT_BYTES, 0);
	bind(&l, 1, unmapped, OUT_BYTES, VG_BUFFER_FLAG_READ_ONLY);
	e = pmmu(x, BIT(VG_FAULT_PDE_NOT_PRESENT), 0, unmapped);
	ok &= case_launch(x, &j, "read_only_binding_unmapped", &l, &e);

	l = launch_of(0, n);
	l.params = foreign;
	l.plen = 16;
	bind(&l, 0, L_PBUF, OUT_BYTES, 0);
	e = pmmu(x, NOT_PRESENT_OR_RANGE_FAULTS, 0, foreign);
	ok &= case_launch(x, &j, "push_block_in_foreign_memory", &l, &e);

	l = launch_of(0, n);
	l.spec = foreign2;
	l.nspec = 2;
	bind(&l, 0, L_PBUF, OUT_BYTES, 0);
	e = pmmu(x, NOT_PRESENT_OR_RANGE_FAULTS, 0, foreign2);
	ok &= case_launch(x, &j, "spec_block_in_foreign_memory", &l, &e);
	as_pte(g, L_PT1, 40, 0);
	as_pte(g, L_PT1, 41, 0);
	as_flush(g);
	jsf(&j, "]");
	return report_check("program-foreign-memory", ok, j.b);
}

/* One flood: `count` modules launched in one channel, then the first again. */
struct flood {
	int ok;
	unsigned int modules, verified, err;
	double ms, first_again_ms;
};

/*
 * count modules with constants base + 0x100·k (distinct: each a new compile), or with `same` all
 * the one module of constant base (compiled once, then cache hits: the control of bench/flood.ts).
 */
static struct flood flood_once(struct ctx *x, unsigned int count, uint32_t base, int same)
{
	struct gpu *g = &x->g;
	unsigned int chid = next_chid(x), slot = next_slot(x);
	uint32_t len[256];
	struct chan c;
	struct pb p;
	struct prog_launch l;
	struct outcome o;
	struct flood r = { 0 };

	if (count > 256)
		count = 256;
	r.modules = count;
	reset_state(x);
	for (unsigned int k = 0; k < count; k++) {
		len[k] = gen_at(x, 2048ull * k, (struct spvgen){ .constant = same ? base : base + 0x100 * k });
		vfill(&x->d, L_PBUF + (uint64_t)OUT_BYTES * k, SENTINEL, OUT_BYTES);
	}
	if (chan_open(g, &c, chid, slot)) {
		r.err = ~0u;
		chan_close(g, &c);
		return r;
	}
	/* in batches: a pushbuffer holds 2048 words */
	for (unsigned int k = 0; k < count;) {
		pb_reset(&p);
		for (unsigned int b = 0; b < 32 && k < count; b++, k++) {
			l = launch_of(2048ull * k, len[k]);
			bind(&l, 0, L_PBUF + (uint64_t)OUT_BYTES * k, OUT_BYTES, 0);
			pb_program(&p, &l);
		}
		chan_submit(g, &c, &p);
	}
	o = chan_wait(g, &c, 4 * x->wait_ms);
	r.ms = o.ms;
	r.err = o.err;
	if (o.done)
		for (unsigned int k = 0; k < count; k++)
			r.verified += store_ok(x, L_PBUF + (uint64_t)OUT_BYTES * k, same ? base : base + 0x100 * k);
	/* the first module again */
	vfill(&x->d, L_PBUF, SENTINEL, OUT_BYTES);
	pb_reset(&p);
	l = launch_of(0, len[0]);
	bind(&l, 0, L_PBUF, OUT_BYTES, 0);
	pb_program(&p, &l);
	if (o.done) {
		chan_submit(g, &c, &p);
		o = chan_wait(g, &c, x->wait_ms);
	}
	r.first_again_ms = o.ms;
	if (programs_on(x)) {
		r.ok = o.done && r.verified == count && store_ok(x, L_PBUF, base);
	} else {
		r.ok = o.err == VG_CERR_BAD_PROGRAM && rd32(&x->d, VG_PFIFO_CHAN_ERR_REASON(chid)) == VG_PROG_ERR_UNSUPPORTED &&
		       vcheck(&x->d, L_PBUF, SENTINEL, OUT_BYTES);
	}
	if (!r.err)
		r.err = o.err;
	chan_close(g, &c);
	reset_state(x);
	return r;
}

/*
 * Many distinct modules (a constant varied per module): each one compiled on this VM's own time
 * (§6.3.4) and run correctly; the first again at the end (it may have left the per-VM cache).
 */
static int module_flood(struct ctx *x)
{
	struct flood r = flood_once(x, x->flood ? x->flood : 32, x->seed * 0x10000u, 0);
	char f[400];

	if (r.err == ~0u)
		return report_check("program-module-flood", 0, "\"detail\":\"bind failed\"");
	snprintf(f, sizeof(f),
		 "\"modules\":%u,\"verified\":%u,\"err\":%u,\"err_name\":\"%s\",\"ms\":%.0f,\"ms_per_module\":%.1f,"
		 "\"first_again_ms\":%.0f",
		 r.modules, r.verified, r.err, vg_chan_err_name(r.err), r.ms, r.ms / r.modules, r.first_again_ms);
	return report_check("program-module-flood", r.ok, f);
}

/*
 * vugpu-hostile flood-bursts (bench/flood.ts): --bursts flood bursts of --flood distinct modules
 * each (new constants every burst, so nothing is ever cached), each followed by an idle period as
 * long as the burst. With --control 1 every flood burst is followed by a control burst as long
 * (the same module generation, VRAM writes, launches and polling, but all of one module, so one
 * compile and then cache hits) and its own idle period: what the flood costs a co-tenant beyond
 * what any busy guest costs. Markers: VUGPU-PHASE burst-start / burst-end (then idle until the
 * next burst-start), one VUGPU-CHECK "flood-burst" per burst.
 */
int attack_flood_bursts(struct ctx *x)
{
	unsigned int count = x->flood ? x->flood : 32, n = x->bursts ? x->bursts : 1, failed = 0;
	double last_flood_ms = 0;

	as_build(&x->g);
	map_sys(x);
	for (unsigned int i = 0; i < (x->flood_control ? 2 * n : n); i++) {
		int control = x->flood_control && (i & 1);
		unsigned int rounds = 0, launches = 0, verified = 0, err = 0;
		double t0 = now_ms(), ms, device_ms = 0;
		int ok = 1;
		char f[400];
		struct flood r;

		printf("VUGPU-PHASE {\"phase\":\"burst-start\",\"burst\":%u,\"kind\":\"%s\"}\n", i, control ? "control" : "flood");
		fflush(stdout);
		do {
			/* flood burst i: constants (seed + i)·2^16 + 0x100·k, never seen before */
			r = flood_once(x, count, control ? 0xc0de0000u : (x->seed + i) * 0x10000u, control);
			rounds++;
			launches += r.modules + 1;
			verified += r.verified;
			device_ms += r.ms;
			ok &= r.ok;
			if (!err)
				err = r.err;
		} while (control && ok && now_ms() - t0 < last_flood_ms);
		ms = now_ms() - t0;
		if (!control)
			last_flood_ms = ms;
		snprintf(f, sizeof(f),
			 "\"burst\":%u,\"kind\":\"%s\",\"rounds\":%u,\"launches\":%u,\"distinct_modules\":%u,\"verified\":%u,"
			 "\"modules\":%u,\"err\":%u,\"err_name\":\"%s\",\"ms\":%.0f,\"wait_ms\":%.0f",
			 i, control ? "control" : "flood", rounds, launches, control ? 1 : count, verified, rounds * count, err,
			 err == ~0u ? "bind failed" : vg_chan_err_name(err), ms, device_ms);
		failed += !report_check("flood-burst", ok, f);
		printf("VUGPU-PHASE {\"phase\":\"burst-end\",\"burst\":%u,\"kind\":\"%s\",\"ms\":%.0f}\n", i,
		       control ? "control" : "flood", ms);
		fflush(stdout);
		sleep_ms((unsigned int)ms); /* idle as long as the burst: the canary's solo windows */
	}
	report_phase("bursts-done");
	return failed == 0;
}

int attack_programs(struct ctx *x)
{
	int ok = 1;
	char f[256];

	/* the other attacks may have rewritten this VM's page tables */
	as_build(&x->g);
	map_sys(x);
	snprintf(f, sizeof(f),
		 "\"version\":\"0x%08x\",\"loop_limit\":%u,\"max_grid_x\":%u,\"max_shared_bytes\":%u,\"max_bindings\":%u,"
		 "\"max_module_bytes\":%u",
		 x->g.prog[0], PL(x, MAX_LOOP_ITERATIONS), PL(x, MAX_GRID_X), PL(x, MAX_SHARED_BYTES), PL(x, MAX_BINDINGS),
		 PL(x, MAX_MODULE_BYTES));
	printf("VUGPU-INFO {\"programs\":{%s}}\n", f);
	report_phase("program-attacks-start");
	ok &= invalid_spirv(x);
	ok &= module_size(x);
	ok &= capability(x);
	ok &= oob_access(x);
	ok &= endless_loop(x);
	ok &= loop_limit(x);
	ok &= huge_grid(x);
	ok &= shared_memory(x);
	ok &= bindings(x);
	ok &= readonly(x);
	ok &= foreign_memory(x);
	ok &= module_flood(x);
	return ok;
}
