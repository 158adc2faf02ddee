// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Device level of the core: identification, bring-up (quiesce what a previous driver left,
 * size VRAM from PFB, choose the address-space path), the runlist, and interrupt service for
 * the three sources the driver enables (fences, MMU faults, channel errors; hw-spec §2).
 */
#include "vg_priv.h"
#include "vugpu_names.h"

#define VG_PREEMPT_TIMEOUT_MS 15000 /* longer than the engine's default job watchdog (10 s) */

int vg_vram_alloc_locked(struct vg_dev *d, u64 size, u64 align, u64 *addr)
{
	int ret;

	size = VG_ALIGN_UP(size, VG_PAGE_SIZE);
	ret = d->vm_ops->alloc(d, size, align < VG_PAGE_SIZE ? VG_PAGE_SIZE : align, addr);
	if (!ret)
		d->vram_used += size;
	return ret;
}

void vg_vram_free_locked(struct vg_dev *d, u64 addr, u64 size)
{
	size = VG_ALIGN_UP(size, VG_PAGE_SIZE);
	d->vm_ops->free(d, addr, size);
	d->vram_used -= size;
}

int vg_vram_alloc(struct vg_dev *d, u64 size, u64 align, u64 *addr)
{
	int ret;

	vg_lock(d);
	ret = vg_vram_alloc_locked(d, size, align, addr);
	vg_unlock(d);
	return ret;
}

void vg_vram_free(struct vg_dev *d, u64 addr, u64 size)
{
	vg_lock(d);
	vg_vram_free_locked(d, addr, size);
	vg_unlock(d);
}

static u32 pending_words(struct vg_dev *d)
{
	return (d->chan_count + 31) / 32;
}

/*
 * Stop a channel: disable, preempt, wait until no job of it is in flight (hw-spec §3.4). The
 * PREEMPT register reports on the last chid written, so each poll re-issues the request under
 * the device lock; the lock is dropped while sleeping (a running job may take seconds).
 */
int vg_chan_stop(struct vg_dev *d, u32 chid)
{
	u32 waited = 0, st;

	vg_lock(d);
	vg_wr(d, VG_PFIFO_CHAN_STATE(chid), 0);
	for (;;) {
		vg_wr(d, VG_PFIFO_PREEMPT, chid);
		st = vg_rd(d, VG_PFIFO_PREEMPT);
		vg_unlock(d);
		if (st == VG_DEAD_READ) {
			/* reads of a vanished device (server gone) return all ones: nothing runs any more */
			vg_err(d, "channel %u: device not responding during preempt", chid);
			return -ENODEV;
		}
		if (!(st & VG_PFIFO_PREEMPT_PENDING))
			return 0;
		if (waited >= VG_PREEMPT_TIMEOUT_MS) {
			vg_err(d, "channel %u: preempt still pending after %u ms", chid, waited);
			return -ETIMEDOUT;
		}
		vg_os_msleep(waited < 100 ? 1 : 10);
		waited += waited < 100 ? 1 : 10;
		vg_lock(d);
	}
}

/* Write the list of bound channels into the spare runlist buffer and submit it. */
int vg_runlist_update(struct vg_dev *d)
{
	int next = d->runlist_cur ^ 1;
	u64 base = d->runlist_addr[next];
	u32 n = 0, chid;

	for (chid = 0; chid < d->chan_count; chid++) {
		struct vg_ctx *c = d->chans[chid];

		if (!c || !c->bound)
			continue;
		vg_vram_wr32(d, base + 8 * n, chid);
		vg_vram_wr32(d, base + 8 * n + 4, 0x4); /* ignored; what nouveau writes */
		n++;
	}
	vg_os_wmb();
	vg_wr(d, VG_PFIFO_RUNLIST_BASE, (u32)(base >> 12));
	vg_wr(d, VG_PFIFO_RUNLIST_SUBMIT, n);
	d->runlist_cur = next;
	d->channels_active = n;
	return 0;
}

static void ack_all(struct vg_dev *d)
{
	u32 i;

	vg_wr(d, VG_MMU_FAULT_STATUS, VG_MMU_FAULT_STATUS_VALID | VG_MMU_FAULT_STATUS_OVERFLOW);
	for (i = 0; i < pending_words(d); i++) {
		vg_wr(d, VG_PFIFO_FENCE_PENDING(i), 0xffffffffu);
		vg_wr(d, VG_PFIFO_ERR_PENDING(i), 0xffffffffu);
	}
	vg_wr(d, VG_PFIFO_INTR, VG_PFIFO_INTR_FENCE | VG_PFIFO_INTR_CHAN_ERROR | VG_PFIFO_INTR_RUNLIST_ERROR);
	vg_wr(d, VG_PMC_INTR, 0xf);
}

/*
 * PPROG (hw-spec §3.10): read-only limits, read once. Only PROG_VERSION when the device runs no
 * programs (every BAR0 access is a trap in a VM); struct vugpu_prog_info mirrors the register
 * order, so the rest is one loop.
 */
_Static_assert(offsetof(struct vugpu_prog_info, features) == 4 * (VG_PPROG_COUNT - 1),
	       "struct vugpu_prog_info must mirror the PPROG registers");

static void read_prog_limits(struct vg_dev *d)
{
	u32 *w = (u32 *)&d->prog;
	u32 i;

	memset(&d->prog, 0, sizeof(d->prog));
	d->prog.version = vg_rd(d, VG_PPROG_VERSION);
	if (!d->prog.version || d->prog.version == VG_DEAD_READ) {
		d->prog.version = 0;
		return;
	}
	for (i = 1; i < VG_PPROG_COUNT; i++)
		w[i] = vg_rd(d, VG_PPROG_FIRST + 4 * i);
	if (d->prog.version >> 16 != VG_PPROG_VERSION_1_0 >> 16)
		vg_warn(d, "programs version 0x%08x (driver knows 1.x): limits reported as read", d->prog.version);
}

static void choose_vm_path(struct vg_dev *d)
{
	d->pv_mode = VG_PV_OFF;
	d->vm_ops = &vg_vm_ops_reg;
	if (d->pv_request == VG_PV_OFF)
		return;
	if (vg_rd(d, VG_PV_MAGIC) != VG_PV_MAGIC_VALUE) {
		vg_warn(d, "pv=%d requested but the device has no PV page (not mediated): register path",
			d->pv_request);
		return;
	}
	if (vg_pv_register(d)) {
		vg_warn(d, "PV area registration refused (status %u): register path", vg_rd(d, VG_PV_STATUS));
		return;
	}
	d->pv_mode = d->pv_request;
	d->vm_ops = &vg_vm_ops_pv;
	/* PV 2 (hw-spec 1.2): whole ranges per call; the batched path uses them */
	d->pv_version = vg_rd(d, VG_PV_VERSION);
}

int vg_dev_init(struct vg_dev *d)
{
	u32 parts, mb, chid, en;
	int ret;

	d->boot0 = vg_rd(d, VG_PMC_BOOT_0);
	if (VG_PMC_BOOT_0_FAMILY(d->boot0) != 0xc0) {
		vg_err(d, "unexpected PMC_BOOT_0 0x%08x", d->boot0);
		return -ENODEV;
	}
	parts = vg_rd(d, VG_PFB_PART_COUNT);
	mb = vg_rd(d, VG_PFB_PART_SIZE_MB);
	d->vram_size = (u64)parts * mb << 20;
	d->chan_count = vg_rd(d, VG_PFIFO_CHAN_COUNT);
	if (d->chan_count > VG_MAX_CHANNELS)
		d->chan_count = VG_MAX_CHANNELS;
	if (!d->vram_size || !d->chan_count) {
		vg_err(d, "device reports %u x %u MiB VRAM, %u channels", parts, mb, d->chan_count);
		return -ENODEV;
	}

	/* Quiesce: a previous driver instance (or a crashed one) may have left channels bound. */
	vg_wr(d, VG_PMC_INTR_EN, 0);
	for (chid = 0; chid < d->chan_count; chid++) {
		if (vg_rd(d, VG_PFIFO_CHAN(chid)) & VG_CHAN_VALID) {
			vg_chan_stop(d, chid);
			vg_wr(d, VG_PFIFO_CHAN(chid), 0);
		}
	}
	vg_wr(d, VG_PFIFO_RUNLIST_SUBMIT, 0);
	ack_all(d);
	en = vg_rd(d, VG_PMC_ENABLE);
	if (!(en & VG_PMC_ENABLE_PFIFO))
		vg_wr(d, VG_PMC_ENABLE, en | VG_PMC_ENABLE_PFIFO);

	read_prog_limits(d);
	choose_vm_path(d);
	if (d->vm_ops == &vg_vm_ops_reg) {
		ret = vg_ralloc_init(&d->vram, 0, d->vram_size);
		if (ret)
			return ret;
	}
	ret = vg_vram_alloc(d, VG_PAGE_SIZE, VG_PAGE_SIZE, &d->runlist_addr[0]);
	if (!ret)
		ret = vg_vram_alloc(d, VG_PAGE_SIZE, VG_PAGE_SIZE, &d->runlist_addr[1]);
	if (ret) {
		vg_dev_fini(d);
		return ret;
	}

	vg_wr(d, VG_PFIFO_INTR_EN, VG_PFIFO_INTR_FENCE | VG_PFIFO_INTR_CHAN_ERROR | VG_PFIFO_INTR_RUNLIST_ERROR);
	vg_wr(d, VG_PMC_INTR_EN, (1u << VG_IRQ_FIFO) | (1u << VG_IRQ_MMU_FAULT) | (1u << VG_IRQ_CHAN_ERROR));
	vg_info(d, "vugpu: boot0 0x%08x, %llu MiB VRAM, %u channels, address-space path %s%s, programs 0x%08x",
		d->boot0, (unsigned long long)(d->vram_size >> 20), d->chan_count, d->vm_ops->name,
		d->pv_mode == VG_PV_BATCH ? " (batched)" : "", d->prog.version);
	return 0;
}

void vg_dev_fini(struct vg_dev *d)
{
	int i;

	vg_wr(d, VG_PMC_INTR_EN, 0);
	vg_wr(d, VG_PFIFO_RUNLIST_SUBMIT, 0);
	for (i = 0; i < 2; i++) {
		if (d->runlist_addr[i])
			vg_vram_free(d, d->runlist_addr[i], VG_PAGE_SIZE);
		d->runlist_addr[i] = 0;
	}
	if (d->vm_ops == &vg_vm_ops_reg)
		vg_ralloc_fini(&d->vram);
}

void vg_dev_info(struct vg_dev *d, struct vugpu_info *out)
{
	int i;

	memset(out, 0, sizeof(*out));
	out->version = VUGPU_UAPI_VERSION;
	out->boot0 = d->boot0;
	out->vram_size = d->vram_size;
	out->vram_used = d->vram_used;
	out->chan_count = d->chan_count;
	out->channels_active = d->channels_active;
	out->contexts = d->contexts;
	out->pv_mode = (u32)d->pv_mode;
	for (i = 0; i < VG_NUM_VECTORS; i++)
		out->irq_count[i] = d->irq_count[i];
	out->mmio_count = vg_os_mmio_count(&d->os);
	out->pv_calls = d->pv_calls;
	out->faults = d->faults;
	out->chan_errors = d->chan_errors;
}

void vg_dev_prog_info(struct vg_dev *d, struct vugpu_prog_info *out)
{
	*out = d->prog;
}

/* ---- interrupts ---- */

static void wake_chid(struct vg_dev *d, u32 chid)
{
	struct vg_ctx *c = chid < d->chan_count ? d->chans[chid] : NULL;

	if (c && d->wake)
		d->wake(c);
}

/*
 * A fence interrupt. Waiters compare their fence semaphore in memory, so the handler needs no
 * register: it wakes every context and each re-checks its own fence. FENCE_PENDING, PFIFO_INTR
 * and PMC_INTR bit 0 are left pending: delivery is one message per event (hw-spec §2), so the
 * next fence interrupts again. In a VM that makes a fence interrupt cost no trapped access
 * (it was five: two pending words read, three acknowledgements).
 */
static void fifo_irq(struct vg_dev *d)
{
	vg_irqflags_t fl;
	u32 chid;

	vg_os_lock(&d->os, fl);
	for (chid = 0; chid < d->chan_count; chid++)
		if (d->chans[chid])
			wake_chid(d, chid);
	vg_os_unlock(&d->os, fl);
}

/* Record the error state of every channel with an ERR_PENDING bit; wake its waiters. */
static void scan_errors(struct vg_dev *d)
{
	vg_irqflags_t fl;
	u32 i, p, b;

	for (i = 0; i < pending_words(d); i++) {
		p = vg_rd(d, VG_PFIFO_ERR_PENDING(i));
		if (!p)
			continue;
		vg_wr(d, VG_PFIFO_ERR_PENDING(i), p);
		for (b = 0; b < 32; b++) {
			u32 chid = 32 * i + b, code, info, reason = 0;
			struct vg_ctx *c;

			if (!(p & (1u << b)) || chid >= d->chan_count)
				continue;
			code = vg_rd(d, VG_PFIFO_CHAN_ERR(chid));
			/*
			 * No code: the chid was bound again since its error (binding clears the code,
			 * not ERR_PENDING, which is the driver's to acknowledge). The error was its
			 * previous context's — one that saw it by polling (the twin's waits do) and
			 * is gone, or recovered — so it is not this context's, unless the channel is
			 * in the error state right now.
			 */
			if (!code && !(vg_rd(d, VG_PFIFO_CHAN_STATE(chid)) & VG_STATE_ERROR))
				continue;
			info = vg_rd(d, VG_PFIFO_CHAN_ERR_INFO(chid));
			/* the sub-reason exists only for BAD_PROGRAM: no extra trap for other errors */
			if (code == VG_CERR_BAD_PROGRAM)
				reason = vg_rd(d, VG_PFIFO_CHAN_ERR_REASON(chid));
			d->chan_errors++;
			vg_warn(d, "channel %u: error %u (%s%s%s), info 0x%08x (gp_get %u, subch %u, method 0x%03x)",
				chid, code, vg_chan_err_name(code), reason ? "/" : "", reason ? vg_prog_err_name(reason) : "",
				info, info >> 16, (info >> 13) & 7, (info & 0xfff) << 2);
			vg_os_lock(&d->os, fl);
			c = d->chans[chid];
			if (c && !c->err_code) {
				c->err_code = code && code != VG_DEAD_READ ? code : VG_CERR_DEVICE_LOST;
				c->err_info = info;
				c->err_reason = reason;
			}
			wake_chid(d, chid);
			vg_os_unlock(&d->os, fl);
		}
	}
}

static void fault_irq(struct vg_dev *d)
{
	u32 st = vg_rd(d, VG_MMU_FAULT_STATUS);
	vg_irqflags_t fl;

	if (st & VG_MMU_FAULT_STATUS_VALID) {
		u32 lo = vg_rd(d, VG_MMU_FAULT_ADDR_LO);
		u32 hi = vg_rd(d, VG_MMU_FAULT_ADDR_HI);
		u32 chid = vg_rd(d, VG_MMU_FAULT_CHID);
		u32 info = vg_rd(d, VG_MMU_FAULT_INFO);
		u64 va = ((u64)hi << 32) | lo;
		struct vg_ctx *c;

		d->faults++;
		vg_warn(d, "MMU fault: channel %u, VA 0x%010llx, %s on %s by %s%s", chid,
			(unsigned long long)va, vg_fault_name(VG_FAULT_INFO_REASON(info)),
			VG_FAULT_INFO_WRITE(info) ? "write" : "read", vg_unit_name(VG_FAULT_INFO_UNIT(info)),
			(st & VG_MMU_FAULT_STATUS_OVERFLOW) ? " (+ unrecorded faults)" : "");
		vg_os_lock(&d->os, fl);
		c = chid < d->chan_count ? d->chans[chid] : NULL;
		if (c && !c->fault_valid) {
			c->fault_va = va;
			c->fault_info = info;
			c->fault_valid = true;
		}
		vg_os_unlock(&d->os, fl);
	}
	if (st)
		vg_wr(d, VG_MMU_FAULT_STATUS, st & (VG_MMU_FAULT_STATUS_VALID | VG_MMU_FAULT_STATUS_OVERFLOW));
	scan_errors(d);
	vg_wr(d, VG_PMC_INTR, 1u << VG_IRQ_MMU_FAULT);
}

static void error_irq(struct vg_dev *d)
{
	u32 intr = vg_rd(d, VG_PFIFO_INTR) & (VG_PFIFO_INTR_CHAN_ERROR | VG_PFIFO_INTR_RUNLIST_ERROR);

	if (intr)
		vg_wr(d, VG_PFIFO_INTR, intr);
	if (intr & VG_PFIFO_INTR_RUNLIST_ERROR)
		vg_err(d, "runlist submit rejected by the device");
	scan_errors(d);
	vg_wr(d, VG_PMC_INTR, 1u << VG_IRQ_CHAN_ERROR);
}

void vg_irq(struct vg_dev *d, unsigned int vector)
{
	if (vector >= VG_NUM_VECTORS)
		return;
	d->irq_count[vector]++;
	switch (vector) {
	case VG_IRQ_FIFO:
		fifo_irq(d);
		break;
	case VG_IRQ_MMU_FAULT:
		fault_irq(d);
		break;
	case VG_IRQ_CHAN_ERROR:
		error_irq(d);
		break;
	default:
		vg_wr(d, VG_PMC_INTR, 1u << vector);
		break;
	}
}
