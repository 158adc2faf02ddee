/* SPDX-License-Identifier: MIT */
#include "gpu.h"

#include <string.h>

int gpu_init(struct gpu *g, struct raw_dev *d)
{
	uint32_t boot;

	memset(g, 0, sizeof(*g));
	g->d = d;
	boot = rd32(d, VG_PMC_BOOT_0);
	if (VG_PMC_BOOT_0_FAMILY(boot) != 0xc0)
		return -1;
	g->slice = (uint64_t)rd32(d, VG_PFB_PART_COUNT) * rd32(d, VG_PFB_PART_SIZE_MB) << 20;
	if (g->slice > d->bar1_size)
		g->slice = d->bar1_size;
	g->nchan = rd32(d, VG_PFIFO_CHAN_COUNT);
	if (g->nchan > VG_MAX_CHANNELS)
		g->nchan = VG_MAX_CHANNELS;
	g->pv = rd32(d, VG_PV_MAGIC) == VG_PV_MAGIC_VALUE;
	for (unsigned int i = 0; i < VG_PPROG_COUNT; i++)
		g->prog[i] = rd32(d, VG_PPROG_FIRST + 4 * i);
	if (g->slice < 2 * L_IDENTITY || g->nchan < 2)
		return -1;
	wr32(d, VG_PMC_ENABLE, rd32(d, VG_PMC_ENABLE) | VG_PMC_ENABLE_PFIFO);
	for (unsigned int c = 0; c < g->nchan; c++)
		wr32(d, VG_PFIFO_CHAN(c), 0);
	runlist_submit(g);
	intr_clear(g);
	fault_clear(g);
	return 0;
}

void as_set_pde(struct gpu *g, unsigned int pdi, uint64_t pde)
{
	vw64(g->d, L_PD + 8ull * pdi, pde);
}

void as_pte(struct gpu *g, uint64_t pt, unsigned int index, uint64_t pte)
{
	vw64(g->d, pt + 8ull * index, pte);
}

void as_build(struct gpu *g)
{
	struct raw_dev *d = g->d;

	vfill(d, L_PD, 0, VG_PD_SIZE);
	vfill(d, L_PT0, 0, VG_SPT_SIZE);
	vfill(d, L_PT1, 0, VG_SPT_SIZE);
	vfill(d, L_LPT2, 0, 1024 * 8);
	as_set_pde(g, 0, L_PT0 | VG_PDE_PRESENT | VG_ENTRY_TARGET(VG_TARGET_VRAM));
	as_set_pde(g, 1, L_PT1 | VG_PDE_PRESENT | VG_ENTRY_TARGET(VG_TARGET_VRAM));
	as_set_pde(g, 2, L_LPT2 | VG_PDE_PRESENT | VG_PDE_LARGE | VG_ENTRY_TARGET(VG_TARGET_VRAM));
	for (uint64_t a = 0; a < L_IDENTITY; a += VG_PAGE_SIZE)
		as_pte(g, L_PT0, (unsigned int)(a >> VG_PAGE_SHIFT), pte_vram(a));
	as_flush(g);
}

void as_flush(struct gpu *g)
{
	wmb_all();
	wr32(g->d, VG_MMU_FLUSH_PDB, (uint32_t)(L_PD >> 8));
	wr32(g->d, VG_MMU_FLUSH_TRIGGER, VG_MMU_FLUSH_GO | VG_MMU_FLUSH_ALL_PAGES);
}

void runlist_submit(struct gpu *g)
{
	unsigned int n = 0;

	for (unsigned int c = 0; c < g->nchan; c++) {
		if (!g->runlist[c])
			continue;
		vw32(g->d, L_RUNLIST + 8 * n, c);
		vw32(g->d, L_RUNLIST + 8 * n + 4, 4);
		n++;
	}
	wmb_all();
	wr32(g->d, VG_PFIFO_RUNLIST_BASE, (uint32_t)(L_RUNLIST >> 12));
	wr32(g->d, VG_PFIFO_RUNLIST_SUBMIT, n);
}

void chan_prepare(struct gpu *g, struct chan *c, unsigned int chid, unsigned int slot)
{
	struct raw_dev *d = g->d;

	memset(c, 0, sizeof(*c));
	c->chid = chid;
	c->slot = slot;
	c->inst = L_INST + 4096ull * slot;
	c->userd = L_USERD + (uint64_t)VG_USERD_SIZE * slot;
	c->gpfifo = L_GPFIFO + 4096ull * slot;
	c->pb = L_PB + (uint64_t)PB_SIZE * slot;
	vfill(d, c->inst, 0, VG_INST_SIZE);
	vfill(d, c->userd, 0, VG_USERD_SIZE);
	vfill(d, c->gpfifo, 0, GP_ENTRIES * VG_GPFIFO_ENTRY_SIZE);
	vw32(d, c->inst + VG_INST_USERD_LO, (uint32_t)c->userd | VG_TARGET_VRAM);
	vw32(d, c->inst + VG_INST_USERD_HI, 0);
	vw32(d, c->inst + VG_INST_MAGIC, 0xface);
	vw32(d, c->inst + VG_INST_GP_BASE_LO, (uint32_t)c->gpfifo);
	vw32(d, c->inst + VG_INST_GP_BASE_HI, 9u << 16); /* log2(GP_ENTRIES) */
	vw32(d, c->inst + VG_INST_PD_LO, (uint32_t)L_PD | VG_TARGET_VRAM);
	vw32(d, c->inst + VG_INST_PD_HI, 0);
	vw32(d, c->inst + VG_INST_LIMIT_LO, 0);
	vw32(d, c->inst + VG_INST_LIMIT_HI, 0);
}

void chan_bind(struct gpu *g, struct chan *c)
{
	wmb_all();
	wr32(g->d, VG_PFIFO_CHAN(c->chid), VG_CHAN_VALID | (uint32_t)(c->inst >> 12));
}

int chan_open(struct gpu *g, struct chan *c, unsigned int chid, unsigned int slot)
{
	chan_prepare(g, c, chid, slot);
	chan_bind(g, c);
	if (rd32(g->d, VG_PFIFO_CHAN_STATE(chid)) & VG_STATE_ERROR)
		return -1;
	if (chid < g->nchan && !g->runlist[chid]) {
		g->runlist[chid] = 1;
		runlist_submit(g);
	}
	wr32(g->d, VG_PFIFO_CHAN_STATE(chid), VG_STATE_ENABLE);
	return 0;
}

void chan_close(struct gpu *g, struct chan *c)
{
	struct raw_dev *d = g->d;

	wr32(d, VG_PFIFO_CHAN_STATE(c->chid), 0);
	wr32(d, VG_PFIFO_PREEMPT, c->chid);
	for (int i = 0; i < 200 && (rd32(d, VG_PFIFO_PREEMPT) & VG_PFIFO_PREEMPT_PENDING); i++)
		sleep_ms(5);
	wr32(d, VG_PFIFO_CHAN(c->chid), 0);
	if (c->chid < g->nchan && g->runlist[c->chid]) {
		g->runlist[c->chid] = 0;
		runlist_submit(g);
	}
}

void pb_reset(struct pb *p)
{
	p->n = 0;
}

void pb_mthd(struct pb *p, unsigned int subc, unsigned int mthd, unsigned int n, const uint32_t *data)
{
	p->w[p->n++] = VG_MTHD(VG_OP_INC, subc, mthd, n);
	for (unsigned int i = 0; i < n; i++)
		p->w[p->n++] = data[i];
}

void pb_1(struct pb *p, unsigned int subc, unsigned int mthd, uint32_t v)
{
	pb_mthd(p, subc, mthd, 1, &v);
}

void pb_copy(struct pb *p, uint64_t src, uint64_t dst, uint32_t len)
{
	uint32_t off[4] = { (uint32_t)(src >> 32), (uint32_t)src, (uint32_t)(dst >> 32), (uint32_t)dst };
	uint32_t line[2] = { len, 1 };

	pb_1(p, VG_SUBCH_COPY, VG_HOST_SET_OBJECT, VG_CLASS_COPY);
	pb_mthd(p, VG_SUBCH_COPY, VG_COPY_OFFSET_IN_UPPER, 4, off);
	pb_mthd(p, VG_SUBCH_COPY, VG_COPY_LINE_LENGTH_IN, 2, line);
	pb_1(p, VG_SUBCH_COPY, VG_COPY_LAUNCH_DMA, VG_LAUNCH_TRANSFER_NON_PIPELINED);
}

void pb_sem_release(struct pb *p, uint64_t va, uint32_t payload)
{
	uint32_t s[4] = { (uint32_t)(va >> 32) & 0xff, (uint32_t)va, payload, VG_SEM_RELEASE };

	pb_mthd(p, 0, VG_HOST_SEMAPHORE_A, 4, s);
}

void pb_kernel(struct pb *p, uint32_t id, uint64_t params, uint32_t plen, unsigned int nbuf, const uint64_t *va, const uint32_t *len)
{
	uint32_t k[7] = { id, 1, 1, 1, (uint32_t)(params >> 32), (uint32_t)params, plen };

	pb_1(p, VG_SUBCH_COMPUTE, VG_HOST_SET_OBJECT, VG_CLASS_COMPUTE);
	pb_mthd(p, VG_SUBCH_COMPUTE, VG_COMPUTE_KERNEL_ID, 7, k);
	pb_1(p, VG_SUBCH_COMPUTE, VG_COMPUTE_BUFFER_COUNT, nbuf);
	for (unsigned int i = 0; i < nbuf; i++) {
		uint32_t b[4] = { (uint32_t)(va[i] >> 32), (uint32_t)va[i], len[i], 0 };

		pb_mthd(p, VG_SUBCH_COMPUTE, VG_COMPUTE_BUFFER(i), 4, b);
	}
	pb_1(p, VG_SUBCH_COMPUTE, VG_COMPUTE_LAUNCH, 0);
}

void pb_program(struct pb *p, const struct prog_launch *l)
{
	uint32_t cfg[6] = { l->grid[0], l->grid[1], l->grid[2], (uint32_t)(l->params >> 32) & 0xff, (uint32_t)l->params, l->plen };
	uint32_t prog[4] = { (uint32_t)(l->module >> 32) & 0xff, (uint32_t)l->module, l->length, l->entry };
	uint32_t spec[3] = { (uint32_t)(l->spec >> 32) & 0xff, (uint32_t)l->spec, l->nspec };

	pb_1(p, VG_SUBCH_COMPUTE, VG_HOST_SET_OBJECT, VG_CLASS_COMPUTE);
	pb_mthd(p, VG_SUBCH_COMPUTE, VG_COMPUTE_GRID_X, 6, cfg);
	pb_mthd(p, VG_SUBCH_COMPUTE, VG_COMPUTE_PROGRAM_VA_UPPER, 4, prog);
	pb_1(p, VG_SUBCH_COMPUTE, VG_COMPUTE_BUFFER_COUNT, l->buffer_count == 0xffffffffu ? l->nbuf : l->buffer_count);
	pb_mthd(p, VG_SUBCH_COMPUTE, VG_COMPUTE_SPEC_VA_UPPER, 3, spec);
	for (unsigned int i = 0; i < l->nbuf && i < VG_COMPUTE_MAX_BUFFERS; i++) {
		uint32_t b[4] = { (uint32_t)(l->va[i] >> 32) & 0xff, (uint32_t)l->va[i], l->len[i], l->flags[i] };

		pb_mthd(p, VG_SUBCH_COMPUTE, VG_COMPUTE_BUFFER(i), 4, b);
	}
	pb_1(p, VG_SUBCH_COMPUTE, VG_COMPUTE_LAUNCH, VG_LAUNCH_PROGRAM);
}

static void ring(struct gpu *g, struct chan *c, uint32_t w0, uint32_t w1)
{
	struct raw_dev *d = g->d;
	uint64_t e = c->gpfifo + (uint64_t)c->put * VG_GPFIFO_ENTRY_SIZE;

	vw32(d, e, w0);
	vw32(d, e + 4, w1);
	c->put = (c->put + 1) % GP_ENTRIES;
	wmb_all();
	vw32(d, c->userd + VG_USERD_GP_PUT, c->put);
	wmb_all();
	wr32(d, VG_DOORBELL, c->chid);
}

void chan_submit(struct gpu *g, struct chan *c, const struct pb *p)
{
	uint32_t bytes = p->n * 4;
	uint64_t seg;

	if (c->pb_off + bytes > PB_SIZE)
		c->pb_off = 0;
	seg = c->pb + c->pb_off;
	for (unsigned int i = 0; i < p->n; i++)
		vw32(g->d, seg + 4ull * i, p->w[i]);
	c->pb_off = (c->pb_off + bytes + 7) & ~7u;
	ring(g, c, VG_GP_ENTRY0(seg), VG_GP_ENTRY1(seg, p->n));
}

void chan_submit_raw(struct gpu *g, struct chan *c, uint32_t w0, uint32_t w1)
{
	ring(g, c, w0, w1);
}

struct outcome chan_wait(struct gpu *g, struct chan *c, unsigned int timeout_ms)
{
	struct raw_dev *d = g->d;
	struct outcome o = { 0 };
	double t0 = now_ms();
	unsigned int nap = 1;

	for (;;) {
		o.err = rd32(d, VG_PFIFO_CHAN_ERR(c->chid));
		o.gp_get = vr32(d, c->userd + VG_USERD_GP_GET);
		o.ms = now_ms() - t0;
		if (o.err || o.gp_get == c->put || o.ms > timeout_ms)
			break;
		sleep_ms(nap);
		if (nap < 8)
			nap *= 2;
	}
	o.done = !o.err && o.gp_get == c->put;
	o.err_info = rd32(d, VG_PFIFO_CHAN_ERR_INFO(c->chid));
	o.state = rd32(d, VG_PFIFO_CHAN_STATE(c->chid));
	return o;
}

void fault_clear(struct gpu *g)
{
	wr32(g->d, VG_MMU_FAULT_STATUS, VG_MMU_FAULT_STATUS_VALID | VG_MMU_FAULT_STATUS_OVERFLOW);
}

struct fault fault_read(struct gpu *g)
{
	struct fault f;

	f.status = rd32(g->d, VG_MMU_FAULT_STATUS);
	f.info = rd32(g->d, VG_MMU_FAULT_INFO);
	f.chid = rd32(g->d, VG_MMU_FAULT_CHID);
	f.addr = rd32(g->d, VG_MMU_FAULT_ADDR_LO) | (uint64_t)rd32(g->d, VG_MMU_FAULT_ADDR_HI) << 32;
	return f;
}

void intr_clear(struct gpu *g)
{
	struct raw_dev *d = g->d;

	for (int i = 0; i < 4; i++) {
		wr32(d, VG_PFIFO_FENCE_PENDING(i), 0xffffffffu);
		wr32(d, VG_PFIFO_ERR_PENDING(i), 0xffffffffu);
	}
	wr32(d, VG_PFIFO_INTR, 7);
	wr32(d, VG_PMC_INTR, 0xf);
}

uint64_t ptimer_ns(struct gpu *g)
{
	uint32_t lo = rd32(g->d, VG_PTIMER_TIME_0);

	return lo | (uint64_t)rd32(g->d, VG_PTIMER_TIME_1) << 32;
}
