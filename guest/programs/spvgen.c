// SPDX-License-Identifier: MIT
/* The SPIR-V emitter of spvgen.h: logical layout order of the SPIR-V spec §2.4, ids allocated as
 * they are needed, the header (with the id bound) written last. */
#include "spvgen.h"

#include <string.h>

enum {
	OP_EXTENSION = 10, OP_EXT_INST_IMPORT = 11, OP_MEMORY_MODEL = 14, OP_ENTRY_POINT = 15,
	OP_EXECUTION_MODE = 16, OP_CAPABILITY = 17, OP_TYPE_VOID = 19, OP_TYPE_BOOL = 20, OP_TYPE_INT = 21,
	OP_TYPE_VECTOR = 23, OP_TYPE_ARRAY = 28, OP_TYPE_RUNTIME_ARRAY = 29, OP_TYPE_STRUCT = 30,
	OP_TYPE_POINTER = 32, OP_TYPE_FUNCTION = 33, OP_CONSTANT = 43, OP_FUNCTION = 54, OP_FUNCTION_END = 56,
	OP_VARIABLE = 59, OP_LOAD = 61, OP_STORE = 62, OP_ACCESS_CHAIN = 65, OP_DECORATE = 71,
	OP_MEMBER_DECORATE = 72, OP_COMPOSITE_EXTRACT = 81, OP_IADD = 128, OP_IMUL = 132, OP_INOT_EQUAL = 171,
	OP_BITWISE_XOR = 198, OP_PHI = 245, OP_LOOP_MERGE = 246, OP_LABEL = 248, OP_BRANCH = 249,
	OP_BRANCH_CONDITIONAL = 250, OP_RETURN = 253,
};
enum { DEC_BLOCK = 2, DEC_ARRAY_STRIDE = 6, DEC_BUILTIN = 11, DEC_NON_WRITABLE = 24, DEC_BINDING = 33,
       DEC_DESCRIPTOR_SET = 34, DEC_OFFSET = 35 };
enum { BI_GLOBAL_INVOCATION_ID = 28, BI_LOCAL_INVOCATION_INDEX = 29 };
enum { SC_INPUT = 1, SC_WORKGROUP = 4, SC_PUSH_CONSTANT = 9, SC_STORAGE_BUFFER = 12 };

#define MAX_BINDINGS 32
#define MAX_CONSTS 16

struct em {
	uint32_t *w;
	size_t n, cap;
	uint32_t next_id;
	int overflow;
	uint32_t uint_t, cval[MAX_CONSTS], cid[MAX_CONSTS];
	unsigned int nconst;
};

static void put(struct em *e, uint32_t v)
{
	if (e->n < e->cap)
		e->w[e->n] = v;
	else
		e->overflow = 1;
	e->n++;
}

static void op(struct em *e, uint32_t opcode, unsigned int nargs, const uint32_t *args)
{
	put(e, ((uint32_t)(nargs + 1) << 16) | opcode);
	for (unsigned int i = 0; i < nargs; i++)
		put(e, args[i]);
}

#define OP(e, opcode, ...)                                                  \
	do {                                                                \
		const uint32_t a_[] = { __VA_ARGS__ };                      \
		op((e), (opcode), sizeof(a_) / sizeof(a_[0]), a_);          \
	} while (0)

static uint32_t id(struct em *e)
{
	return e->next_id++;
}

/* An instruction with a literal string among its operands: pre words, the string, post words. */
static void op_str(struct em *e, uint32_t opcode, unsigned int npre, const uint32_t *pre, const char *s,
		   unsigned int npost, const uint32_t *post)
{
	size_t len = strlen(s) + 1, sw = (len + 3) / 4;

	put(e, ((uint32_t)(1 + npre + sw + npost) << 16) | opcode);
	for (unsigned int i = 0; i < npre; i++)
		put(e, pre[i]);
	for (size_t i = 0; i < sw; i++) {
		uint32_t v = 0;

		for (size_t b = 0; b < 4; b++) {
			size_t k = 4 * i + b;

			if (k < len)
				v |= (uint32_t)(unsigned char)s[k] << (8 * b);
		}
		put(e, v);
	}
	for (unsigned int i = 0; i < npost; i++)
		put(e, post[i]);
}

/* One OpConstant per value (emitted in the types section, where this is called). */
static uint32_t konst(struct em *e, uint32_t v)
{
	for (unsigned int i = 0; i < e->nconst; i++)
		if (e->cval[i] == v)
			return e->cid[i];
	if (e->nconst == MAX_CONSTS) {
		e->overflow = 1;
		return 0;
	}
	e->cval[e->nconst] = v;
	e->cid[e->nconst] = id(e);
	OP(e, OP_CONSTANT, e->uint_t, e->cid[e->nconst], v);
	return e->cid[e->nconst++];
}

size_t spvgen_emit(const struct spvgen *g, uint32_t *out, size_t cap)
{
	struct em e = { .w = out, .cap = cap, .next_id = 1 };
	uint32_t version = g->version ? g->version : 0x00010300u;
	uint32_t lx = g->local_x ? g->local_x : 64, step = g->step ? g->step : 1;
	unsigned int nb = g->bindings, need = g->body == SPVGEN_OOB ? 2 : 1, i;
	unsigned int ob = g->body == SPVGEN_STORE ? g->out_binding : 0;
	int shared = g->body == SPVGEN_SHARED, loop = g->body == SPVGEN_LOOP;
	uint32_t t_void, t_fn, t_uint, t_bool, t_v3, t_p_in_v3, t_p_in_u = 0, t_rta, t_blk, t_p_sb_blk, t_p_sb_u;
	uint32_t t_pblk = 0, t_p_pc_blk = 0, t_p_pc_u = 0, t_arr = 0, t_p_wg_arr = 0, t_p_wg_u = 0;
	uint32_t v_gid, v_lidx = 0, v_buf[MAX_BINDINGS], v_pc = 0, v_sh = 0, f_main, ext = 0;
	uint32_t c0, iface[2 + MAX_BINDINGS + 2];
	unsigned int niface = 0;

	if (nb < need)
		nb = need;
	if (nb <= ob)
		nb = ob + 1;
	if (nb > MAX_BINDINGS || cap < 5)
		return 0;
	e.n = 5; /* header, written at the end */

	/* ids fixed up front: they appear before their definitions (entry point, decorations) */
	f_main = id(&e);
	v_gid = id(&e);
	if (shared)
		v_lidx = id(&e);
	for (i = 0; i < nb; i++)
		v_buf[i] = id(&e);
	if (loop)
		v_pc = id(&e);
	if (shared)
		v_sh = id(&e);
	t_rta = id(&e);
	t_blk = id(&e);
	if (loop)
		t_pblk = id(&e);

	OP(&e, OP_CAPABILITY, SPV_CAP_SHADER);
	if (g->extra_capability)
		OP(&e, OP_CAPABILITY, g->extra_capability);
	if (version < 0x00010300u)
		op_str(&e, OP_EXTENSION, 0, NULL, "SPV_KHR_storage_buffer_storage_class", 0, NULL);
	if (g->extension)
		op_str(&e, OP_EXTENSION, 0, NULL, g->extension, 0, NULL);
	if (g->ext_import) {
		ext = id(&e);
		op_str(&e, OP_EXT_INST_IMPORT, 1, &ext, g->ext_import, 0, NULL);
	}
	OP(&e, OP_MEMORY_MODEL, 0 /* Logical */, 1 /* GLSL450 */);
	/* interface: Input variables (SPIR-V < 1.4), every global variable (≥ 1.4) */
	iface[niface++] = v_gid;
	if (shared)
		iface[niface++] = v_lidx;
	if (version >= 0x00010400u) {
		for (i = 0; i < nb; i++)
			iface[niface++] = v_buf[i];
		if (loop)
			iface[niface++] = v_pc;
		if (shared)
			iface[niface++] = v_sh;
	}
	{
		uint32_t pre[2] = { 5 /* GLCompute */, f_main };

		op_str(&e, OP_ENTRY_POINT, 2, pre, "main", niface, iface);
	}
	OP(&e, OP_EXECUTION_MODE, f_main, 17 /* LocalSize */, lx, 1, 1);

	OP(&e, OP_DECORATE, v_gid, DEC_BUILTIN, BI_GLOBAL_INVOCATION_ID);
	if (shared)
		OP(&e, OP_DECORATE, v_lidx, DEC_BUILTIN, BI_LOCAL_INVOCATION_INDEX);
	OP(&e, OP_DECORATE, t_rta, DEC_ARRAY_STRIDE, 4);
	OP(&e, OP_MEMBER_DECORATE, t_blk, 0, DEC_OFFSET, 0);
	OP(&e, OP_DECORATE, t_blk, DEC_BLOCK);
	for (i = 0; i < nb; i++) {
		OP(&e, OP_DECORATE, v_buf[i], DEC_DESCRIPTOR_SET, 0);
		OP(&e, OP_DECORATE, v_buf[i], DEC_BINDING, i);
		if (g->nonwritable & (1u << i))
			OP(&e, OP_DECORATE, v_buf[i], DEC_NON_WRITABLE);
	}
	if (loop) {
		OP(&e, OP_MEMBER_DECORATE, t_pblk, 0, DEC_OFFSET, 0);
		OP(&e, OP_DECORATE, t_pblk, DEC_BLOCK);
	}

	/* types, constants, global variables */
	t_void = id(&e);
	OP(&e, OP_TYPE_VOID, t_void);
	t_fn = id(&e);
	OP(&e, OP_TYPE_FUNCTION, t_fn, t_void);
	t_uint = id(&e);
	OP(&e, OP_TYPE_INT, t_uint, 32, 0);
	e.uint_t = t_uint;
	t_bool = id(&e);
	OP(&e, OP_TYPE_BOOL, t_bool);
	t_v3 = id(&e);
	OP(&e, OP_TYPE_VECTOR, t_v3, t_uint, 3);
	t_p_in_v3 = id(&e);
	OP(&e, OP_TYPE_POINTER, t_p_in_v3, SC_INPUT, t_v3);
	if (shared) {
		t_p_in_u = id(&e);
		OP(&e, OP_TYPE_POINTER, t_p_in_u, SC_INPUT, t_uint);
	}
	OP(&e, OP_TYPE_RUNTIME_ARRAY, t_rta, t_uint);
	OP(&e, OP_TYPE_STRUCT, t_blk, t_rta);
	t_p_sb_blk = id(&e);
	OP(&e, OP_TYPE_POINTER, t_p_sb_blk, SC_STORAGE_BUFFER, t_blk);
	t_p_sb_u = id(&e);
	OP(&e, OP_TYPE_POINTER, t_p_sb_u, SC_STORAGE_BUFFER, t_uint);
	if (loop) {
		OP(&e, OP_TYPE_STRUCT, t_pblk, t_uint);
		t_p_pc_blk = id(&e);
		OP(&e, OP_TYPE_POINTER, t_p_pc_blk, SC_PUSH_CONSTANT, t_pblk);
		t_p_pc_u = id(&e);
		OP(&e, OP_TYPE_POINTER, t_p_pc_u, SC_PUSH_CONSTANT, t_uint);
	}
	c0 = konst(&e, 0);
	if (shared) {
		uint32_t len = konst(&e, g->shared_words ? g->shared_words : 1);

		t_arr = id(&e);
		OP(&e, OP_TYPE_ARRAY, t_arr, t_uint, len);
		t_p_wg_arr = id(&e);
		OP(&e, OP_TYPE_POINTER, t_p_wg_arr, SC_WORKGROUP, t_arr);
		t_p_wg_u = id(&e);
		OP(&e, OP_TYPE_POINTER, t_p_wg_u, SC_WORKGROUP, t_uint);
	}
	/* every constant the body uses, here in the types section */
	{
		uint32_t c_k = konst(&e, g->constant), c_a = konst(&e, 1664525u), c_b = konst(&e, 1013904223u);
		uint32_t c_step = konst(&e, step), c_roff = konst(&e, (uint32_t)g->read_offset);
		uint32_t c_woff = konst(&e, (uint32_t)g->write_offset);
		uint32_t gidv, gx, ptr, val, l_entry;

		OP(&e, OP_VARIABLE, t_p_in_v3, v_gid, SC_INPUT);
		if (shared)
			OP(&e, OP_VARIABLE, t_p_in_u, v_lidx, SC_INPUT);
		for (i = 0; i < nb; i++)
			OP(&e, OP_VARIABLE, t_p_sb_blk, v_buf[i], SC_STORAGE_BUFFER);
		if (loop)
			OP(&e, OP_VARIABLE, t_p_pc_blk, v_pc, SC_PUSH_CONSTANT);
		if (shared)
			OP(&e, OP_VARIABLE, t_p_wg_arr, v_sh, SC_WORKGROUP);

		OP(&e, OP_FUNCTION, t_void, f_main, 0, t_fn);
		l_entry = id(&e);
		OP(&e, OP_LABEL, l_entry);
		gidv = id(&e);
		OP(&e, OP_LOAD, t_v3, gidv, v_gid);
		gx = id(&e);
		OP(&e, OP_COMPOSITE_EXTRACT, t_uint, gx, gidv, 0);

		switch (g->body) {
		case SPVGEN_STORE: {
			val = id(&e);
			OP(&e, OP_IADD, t_uint, val, c_k, gx);
			ptr = id(&e);
			OP(&e, OP_ACCESS_CHAIN, t_p_sb_u, ptr, v_buf[ob], c0, gx);
			OP(&e, OP_STORE, ptr, val);
			break;
		}
		case SPVGEN_OOB: {
			uint32_t ri = id(&e), wi = id(&e), rp = id(&e), wp = id(&e), op_ = id(&e);

			OP(&e, OP_IADD, t_uint, ri, gx, c_roff);
			OP(&e, OP_ACCESS_CHAIN, t_p_sb_u, rp, v_buf[0], c0, ri);
			val = id(&e);
			OP(&e, OP_LOAD, t_uint, val, rp);
			OP(&e, OP_ACCESS_CHAIN, t_p_sb_u, op_, v_buf[1], c0, gx);
			OP(&e, OP_STORE, op_, val);
			OP(&e, OP_IADD, t_uint, wi, gx, c_woff);
			OP(&e, OP_ACCESS_CHAIN, t_p_sb_u, wp, v_buf[0], c0, wi);
			OP(&e, OP_STORE, wp, c_k);
			break;
		}
		case SPVGEN_LOOP: {
			uint32_t x0 = id(&e), l_head = id(&e), l_cond = id(&e), l_body = id(&e), l_cont = id(&e);
			uint32_t l_merge = id(&e), pi = id(&e), px = id(&e), inext = id(&e), xnext = id(&e);
			uint32_t m = id(&e), pn = id(&e), n = id(&e), cmp = id(&e);

			OP(&e, OP_BITWISE_XOR, t_uint, x0, c_k, gx);
			OP(&e, OP_BRANCH, l_head);
			OP(&e, OP_LABEL, l_head);
			OP(&e, OP_PHI, t_uint, pi, c0, l_entry, inext, l_cont);
			OP(&e, OP_PHI, t_uint, px, x0, l_entry, xnext, l_cont);
			OP(&e, OP_LOOP_MERGE, l_merge, l_cont, 0);
			OP(&e, OP_BRANCH, l_cond);
			OP(&e, OP_LABEL, l_cond);
			OP(&e, OP_ACCESS_CHAIN, t_p_pc_u, pn, v_pc, c0);
			OP(&e, OP_LOAD, t_uint, n, pn);
			OP(&e, OP_INOT_EQUAL, t_bool, cmp, pi, n);
			OP(&e, OP_BRANCH_CONDITIONAL, cmp, l_body, l_merge);
			OP(&e, OP_LABEL, l_body);
			OP(&e, OP_IMUL, t_uint, m, px, c_a);
			OP(&e, OP_IADD, t_uint, xnext, m, c_b);
			OP(&e, OP_BRANCH, l_cont);
			OP(&e, OP_LABEL, l_cont);
			OP(&e, OP_IADD, t_uint, inext, pi, c_step);
			OP(&e, OP_BRANCH, l_head);
			OP(&e, OP_LABEL, l_merge);
			ptr = id(&e);
			OP(&e, OP_ACCESS_CHAIN, t_p_sb_u, ptr, v_buf[0], c0, gx);
			OP(&e, OP_STORE, ptr, px);
			break;
		}
		case SPVGEN_SHARED: {
			uint32_t li = id(&e), sp = id(&e), sv = id(&e);

			OP(&e, OP_LOAD, t_uint, li, v_lidx);
			OP(&e, OP_ACCESS_CHAIN, t_p_wg_u, sp, v_sh, li);
			OP(&e, OP_STORE, sp, gx);
			OP(&e, OP_LOAD, t_uint, sv, sp);
			val = id(&e);
			OP(&e, OP_IADD, t_uint, val, sv, c_k);
			ptr = id(&e);
			OP(&e, OP_ACCESS_CHAIN, t_p_sb_u, ptr, v_buf[0], c0, gx);
			OP(&e, OP_STORE, ptr, val);
			break;
		}
		}
		OP(&e, OP_RETURN);
		OP(&e, OP_FUNCTION_END);
	}
	if (e.overflow || e.n > cap)
		return 0;
	out[0] = 0x07230203u;
	out[1] = version;
	out[2] = 0;          /* generator */
	out[3] = e.next_id;  /* bound */
	out[4] = 0;          /* schema */
	return e.n;
}
