// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Contexts: one GPU address space and one channel per context (hw-spec §4, §7), the buffers
 * mapped into it, pushbuffer submission with a fence per submission, and the channel's error
 * state.
 *
 * VRAM layout of a context: instance block (4 KiB; USERD at +0x800 in the same page), page
 * directory (64 KiB) and small-page tables (256 KiB each, on demand), GPFIFO ring (1024 entries,
 * mapped read-only), pushbuffer ring (512 KiB, read-only), a semaphore page (fence word at 0,
 * the parameter block of driver-issued launches at 0x100). Every buffer gets a VA range with an
 * unmapped guard page after it, so an overrun faults instead of reaching the next buffer.
 *
 * Each submission is two GPFIFO entries: the user's segment, then a driver-owned fence segment
 * (SEMAPHORE release of the sequence number). Keeping the fence in its own entry means nothing
 * the user writes (END_PB_SEGMENT, a truncated method) can swallow it.
 *
 * Interrupts on demand: a fence raises an interrupt only if the submitter asked for it
 * (VUGPU_SUBMIT_FENCE_IRQ, for work it is about to wait on, e.g. copies). Otherwise a waiter that
 * has to sleep first calls vg_ctx_arm_irq(), which appends a NON_STALL_INTERRUPT after
 * everything queued; it fires once all of it, the awaited fence included, has executed. A burst
 * of launches followed by one synchronisation then costs one interrupt, not one per launch (each
 * interrupt is several trapped register accesses in a VM). Normal submissions always leave one
 * GPFIFO entry and 8 bytes of pushbuffer free, so an interrupt request always fits.
 *
 * Page-table flushes are deferred to the next doorbell (vg_vm.dirty), except after an unmap
 * (the pages are about to be given back). Buffers allocated VUGPU_MEM_NO_CPU are cleared by the
 * next submission: a third GPFIFO entry ahead of the user's segment holds one MEMSET per such
 * buffer, their parameter blocks right after it in the pushbuffer ring. A run of allocations
 * then costs one flush and no GPU round trip — in a mediated VM one shadow rebuild instead of
 * one per buffer.
 */
#include "vg_priv.h"

#define READ_ERR(c) (*(volatile u32 *)&(c)->err_code)
#define ARM_BYTES 8 /* NON_STALL_INTERRUPT header + data */

/* ---- address space ---- */

/* Make changed mappings visible to the device, if there are any (device lock held). */
static void vm_flush_locked(struct vg_vm *vm)
{
	if (!vm->dirty)
		return;
	vm->dirty = false;
	vm->dev->vm_ops->flush(vm);
}

/*
 * An address space, and `extra` bytes of VRAM in the same allocation right after its PD (page
 * aligned, at *extra_addr): a context's instance block goes there, so in PV a context costs one
 * MEM_ALLOC and one MEM_FREE hypercall fewer.
 */
int vg_vm_init(struct vg_vm *vm, struct vg_dev *d, u64 extra, u64 *extra_addr)
{
	int ret;

	vm->dev = d;
	vm->alloc_bytes = VG_PD_SIZE + VG_ALIGN_UP(extra, VG_PAGE_SIZE);
	ret = vg_ralloc_init(&vm->va, VUGPU_CTX_VA_START, VG_LARGE_VA_START - VUGPU_CTX_VA_START);
	if (!ret)
		ret = vg_ralloc_init(&vm->va_large, VG_LARGE_VA_START, (1ull << VG_VA_BITS) - VG_LARGE_VA_START);
	if (ret)
		return ret;
	vg_lock(d);
	ret = d->vm_ops->space_new ? d->vm_ops->space_new(vm) : -EOPNOTSUPP;
	if (!ret) {
		d->vram_used += vm->alloc_bytes;
	} else if (ret == -EOPNOTSUPP) {
		ret = vg_vram_alloc_locked(d, vm->alloc_bytes, VG_PAGE_SIZE, &vm->pd_addr);
		if (!ret) {
			ret = (d->vm_ops->set_pgd)(vm); /* parenthesised: set_pgd is also an x86 macro */
			if (ret) {
				vg_vram_free_locked(d, vm->pd_addr, vm->alloc_bytes);
				vm->pd_addr = 0;
			}
		}
	}
	if (!ret) {
		d->address_spaces++;
		if (extra_addr)
			*extra_addr = extra ? vm->pd_addr + VG_PD_SIZE : 0;
	}
	vg_unlock(d);
	return ret;
}

void vg_vm_fini(struct vg_vm *vm)
{
	struct vg_dev *d = vm->dev;

	if (!d)
		return;
	vg_lock(d);
	d->vm_ops->fini(vm);
	if (vm->pd_addr) {
		vg_vram_free_locked(d, vm->pd_addr, vm->alloc_bytes);
		d->address_spaces--;
	}
	vg_unlock(d);
	vm->pd_addr = 0;
	vg_ralloc_fini(&vm->va);
	vg_ralloc_fini(&vm->va_large);
}

/* Give bo a VA range and map its pages (addrs per page, or contiguous from base). */
static int bo_map(struct vg_ctx *c, struct vg_bo *bo, const u64 *addrs, u64 base, u64 target)
{
	struct vg_dev *d = c->dev;
	u64 flags = VG_ENTRY_TARGET(target) | ((bo->flags & VUGPU_MEM_READ_ONLY) ? VG_PTE_READ_ONLY : 0);
	u32 page = bo->large ? VG_LARGE_PAGE_SIZE : VG_PAGE_SIZE;
	u32 pages = (u32)(bo->size / page);
	struct vg_ralloc *space = bo->large ? &c->vm.va_large : &c->vm.va;
	int ret;

	bo->va_size = bo->size + page; /* guard page */
	ret = vg_ralloc_alloc(space, bo->va_size, page, &bo->va);
	if (ret)
		return ret;
	vg_lock(d);
	/* flushed before the next doorbell (nothing can use the range before) — unless the map
	 * itself flushed: then the path cleared it (PV ranges, where the flush rides on the call) */
	c->vm.dirty = true;
	ret = d->vm_ops->map(&c->vm, bo->va, pages, addrs, base, flags);
	if (ret) {
		d->vm_ops->unmap(&c->vm, bo->va, pages);
		vm_flush_locked(&c->vm);
	}
	vg_unlock(d);
	if (ret) {
		vg_ralloc_free(space, bo->va, bo->va_size);
		bo->va = 0;
	}
	return ret;
}

/* Allocate bo's VRAM and map it in one call where the path can (PV 3); else -EOPNOTSUPP. */
static int bo_alloc_map(struct vg_ctx *c, struct vg_bo *bo)
{
	struct vg_dev *d = c->dev;
	u64 flags = VG_ENTRY_TARGET(VG_TARGET_VRAM) | ((bo->flags & VUGPU_MEM_READ_ONLY) ? VG_PTE_READ_ONLY : 0);
	int ret;

	if (!d->vm_ops->alloc_map || bo->large)
		return -EOPNOTSUPP;
	bo->va_size = bo->size + VG_PAGE_SIZE; /* guard page */
	ret = vg_ralloc_alloc(&c->vm.va, bo->va_size, VG_PAGE_SIZE, &bo->va);
	if (ret)
		return ret;
	vg_lock(d);
	ret = d->vm_ops->alloc_map(&c->vm, bo->va, (u32)(bo->size / VG_PAGE_SIZE), VG_PAGE_SIZE, flags, &bo->vram_addr);
	if (!ret) {
		d->vram_used += bo->size;
		bo->space_owned = true;
	}
	vg_unlock(d);
	if (ret) {
		vg_ralloc_free(&c->vm.va, bo->va, bo->va_size);
		bo->va = 0;
	}
	return ret;
}

/*
 * Unmap bo's VRAM and free it in one call where the path can (PV 3) and no submitted work can
 * still use it (the seq check and a submission are both under the lock); else -EOPNOTSUPP or
 * -EBUSY and nothing changed.
 */
static int bo_unmap_free(struct vg_ctx *c, struct vg_bo *bo)
{
	struct vg_dev *d = c->dev;
	int ret;

	if (!d->vm_ops->unmap_free || bo->sysmem || bo->large || !bo->va)
		return -EOPNOTSUPP;
	vg_lock(d);
	if (c->bound && !vg_ctx_seq_done(c, c->seq)) {
		vg_unlock(d);
		return -EBUSY;
	}
	ret = d->vm_ops->unmap_free(&c->vm, bo->va, (u32)(bo->size / VG_PAGE_SIZE), bo->vram_addr);
	if (!ret)
		d->vram_used -= bo->size;
	vg_unlock(d);
	if (ret)
		return ret;
	vg_ralloc_free(&c->vm.va, bo->va, bo->va_size);
	bo->va = 0;
	c->vram_bytes -= bo->size; /* the caller frees bo itself */
	return 0;
}

static void bo_unmap(struct vg_ctx *c, struct vg_bo *bo)
{
	struct vg_dev *d = c->dev;

	if (!bo->va)
		return;
	vg_lock(d);
	c->vm.dirty = true; /* now: the pages go back once submitted work is done with them */
	d->vm_ops->unmap(&c->vm, bo->va, (u32)(bo->size >> (bo->large ? VG_LARGE_PAGE_SHIFT : VG_PAGE_SHIFT)));
	vm_flush_locked(&c->vm);
	vg_unlock(d);
	vg_ralloc_free(bo->large ? &c->vm.va_large : &c->vm.va, bo->va, bo->va_size);
	bo->va = 0;
}

static void bo_link(struct vg_ctx *c, struct vg_bo *bo)
{
	bo->handle = c->next_handle++;
	if (!c->next_handle)
		c->next_handle = 1;
	bo->next = c->bos;
	c->bos = bo;
}

static void bo_unlink(struct vg_ctx *c, struct vg_bo *bo)
{
	struct vg_bo **pp;

	for (pp = &c->bos; *pp; pp = &(*pp)->next) {
		if (*pp == bo) {
			*pp = bo->next;
			return;
		}
	}
}

/* Give the memory back; the device must no longer be able to reach it. */
static void bo_release(struct vg_ctx *c, struct vg_bo *bo)
{
	struct vg_dev *d = c->dev;

	if (bo->sysmem) {
		if (d->bo_release)
			d->bo_release(d, bo);
	} else {
		vg_vram_free(d, bo->vram_addr, bo->size);
		c->vram_bytes -= bo->size;
	}
	vg_os_free(bo);
}

static int bo_new_vram(struct vg_ctx *c, u64 size, u32 flags, bool internal, struct vg_bo **out)
{
	struct vg_bo *bo;
	int ret;

	if (!size || size > c->dev->vram_size)
		return -EINVAL;
	bo = vg_os_zalloc(sizeof(*bo));
	if (!bo)
		return -ENOMEM;
	/* big buffers in 128 KiB pages where the address-space path has them (hw-spec §7) */
	bo->large = c->dev->vm_ops->large_pages && size >= VG_LARGE_MIN_BYTES;
	bo->size = VG_ALIGN_UP(size, bo->large ? VG_LARGE_PAGE_SIZE : VG_PAGE_SIZE);
	bo->flags = flags;
	bo->internal = internal;
	ret = bo_alloc_map(c, bo);
	if (ret == -EOPNOTSUPP) {
		ret = vg_vram_alloc(c->dev, bo->size, bo->large ? VG_LARGE_PAGE_SIZE : VG_PAGE_SIZE, &bo->vram_addr);
		if (ret) {
			vg_os_free(bo);
			return ret;
		}
		c->vram_bytes += bo->size;
		ret = bo_map(c, bo, NULL, bo->vram_addr, VG_TARGET_VRAM);
		if (ret) {
			bo_release(c, bo);
			return ret;
		}
	} else if (ret) {
		vg_os_free(bo);
		return ret;
	} else {
		c->vram_bytes += bo->size;
	}
	bo_link(c, bo);
	*out = bo;
	return 0;
}

/* ---- submission and fences ---- */

static inline u32 userd_get(struct vg_ctx *c)
{
	return vg_vram_rd32(c->dev, c->userd_addr + VG_USERD_GP_GET) % VG_GPFIFO_ENTRIES;
}

static void gp_write(struct vg_ctx *c, u32 slot, u64 va, u32 dwords)
{
	u64 e = c->gpfifo_addr + (u64)slot * VG_GPFIFO_ENTRY_SIZE;

	vg_vram_wr32(c->dev, e, VG_GP_ENTRY0(va));
	vg_vram_wr32(c->dev, e + 4, VG_GP_ENTRY1(va, dwords));
}

/* Pushbuffer offset for `bytes`, or -1 when the ring is too full right now. */
static s64 pb_place(struct vg_ctx *c, u32 get, u32 in_flight, u32 bytes)
{
	u32 head = c->pb_put, tail;

	if (in_flight == 0)
		return 0; /* idle: the whole ring is free */
	tail = c->gp_pb_start[get];
	if (head >= tail) {
		if (VG_PB_SIZE - head >= bytes)
			return head;
		if (tail > bytes)
			return 0;
		return -1;
	}
	return tail - head > bytes ? (s64)head : -1;
}

/*
 * Ring space for a segment of `bytes` in `slots` GPFIFO entries, leaving `keep_slots` entries
 * and `keep_bytes` bytes free after it; the pushbuffer offset, or -1. At most N-1 entries are
 * ever in flight (GP_PUT == GP_GET means empty).
 */
static s64 ring_place(struct vg_ctx *c, u32 slots, u32 bytes, u32 keep_slots, u32 keep_bytes, u32 *get)
{
	u32 in_flight;

	*get = userd_get(c);
	in_flight = (c->gp_put - *get + VG_GPFIFO_ENTRIES) % VG_GPFIFO_ENTRIES;
	if (in_flight + slots + keep_slots > VG_GPFIFO_ENTRIES - 1)
		return -1;
	return pb_place(c, *get, in_flight, bytes + keep_bytes);
}

/* Publish GP_PUT and ring the doorbell (the segments and entries are written; lock held). */
static void ring_kick(struct vg_ctx *c)
{
	/* mappings made since the last flush: the work may use them */
	vm_flush_locked(&c->vm);
	/* segments and entries must be in VRAM before GP_PUT, GP_PUT before the doorbell */
	vg_os_wmb();
	vg_vram_wr32(c->dev, c->userd_addr + VG_USERD_GP_PUT, c->gp_put);
	vg_os_wmb();
	vg_os_doorbell32(&c->dev->os, VG_DOORBELL, (u32)c->chid);
}

#define CLEAR_WORDS 17       /* one MEMSET launch */
#define CLEAR_PARAM_BYTES 16 /* its parameter block: pattern, reserved, count (u64) */

/* The methods of a MEMSET of zeros over [va, va + size), parameter block at param_va. */
static u32 clear_methods(u32 *pb, u64 va, u64 size, u64 param_va)
{
	u32 n = 0;

	pb[n++] = VG_MTHD(VG_OP_INC, VG_SUBCH_COMPUTE, VG_COMPUTE_KERNEL_ID, 7);
	pb[n++] = VG_K_MEMSET;
	pb[n++] = 1;
	pb[n++] = 1;
	pb[n++] = 1;
	pb[n++] = VG_HI32(param_va) & 0xff;
	pb[n++] = VG_LO32(param_va);
	pb[n++] = CLEAR_PARAM_BYTES;
	pb[n++] = VG_MTHD(VG_OP_INC, VG_SUBCH_COMPUTE, VG_COMPUTE_BUFFER_COUNT, 1);
	pb[n++] = 1;
	pb[n++] = VG_MTHD(VG_OP_INC, VG_SUBCH_COMPUTE, VG_COMPUTE_BUFFER(0), 4);
	pb[n++] = VG_HI32(va) & 0xff;
	pb[n++] = VG_LO32(va);
	pb[n++] = (u32)size;
	pb[n++] = 0;
	pb[n++] = VG_MTHD(VG_OP_INC, VG_SUBCH_COMPUTE, VG_COMPUTE_LAUNCH, 1);
	pb[n++] = 0;
	return n;
}

#define CLEAR_BIND_WORDS 2 /* SET_OBJECT compute, ahead of the clears */
#define BIND_WORDS 4       /* SET_OBJECT compute and copy, ahead of a context's first methods */

/* Bytes of the clear segment for n buffers (methods, then parameter blocks). */
static inline u32 clears_bytes(u32 n)
{
	return n ? (CLEAR_BIND_WORDS + n * CLEAR_WORDS) * 4 + n * CLEAR_PARAM_BYTES : 0;
}

/*
 * Write the deferred clears into the ring at pushbuffer offset off (lock held): the compute
 * class bind (the segment must not depend on what ran before it: after an ENGINE_LOST rebind
 * the clears go out ahead of the class binds), the MEMSET methods, then their parameter blocks
 * (outside the entry's length, kept alive by the ring until the entry has executed). Returns
 * the methods' length in dwords.
 */
static u32 emit_clears(struct vg_ctx *c, u32 off, u64 seq)
{
	struct vg_dev *d = c->dev;
	u32 words = CLEAR_BIND_WORDS + c->nclears * CLEAR_WORDS, m[CLEAR_WORDS], p[4], i = 0;
	u64 prm = (u64)off + (u64)words * 4;
	struct vg_bo *bo;

	m[0] = VG_MTHD(VG_OP_INC, VG_SUBCH_COMPUTE, VG_HOST_SET_OBJECT, 1);
	m[1] = VG_CLASS_COMPUTE;
	vg_vram_write(d, c->pb_addr + off, m, CLEAR_BIND_WORDS * 4);
	off += CLEAR_BIND_WORDS * 4;

	for (bo = c->clears; bo; bo = bo->clear_next, i++) {
		u64 n = bo->size / 4;

		p[0] = 0; /* pattern */
		p[1] = 0;
		p[2] = VG_LO32(n);
		p[3] = VG_HI32(n);
		vg_vram_write(d, c->pb_addr + prm + CLEAR_PARAM_BYTES * i, p, sizeof(p));
		clear_methods(m, bo->va, bo->size, c->pb_va + prm + CLEAR_PARAM_BYTES * i);
		vg_vram_write(d, c->pb_addr + off + (u64)i * CLEAR_WORDS * 4, m, sizeof(m));
		bo->clear_pending = false;
		bo->clear_seq = seq;
	}
	c->clears = NULL;
	c->nclears = 0;
	return words;
}

static int ctx_recover(struct vg_ctx *c);

/* SET_OBJECT of both classes on their conventional subchannels (hw-spec §6) */
static const u32 class_binds[BIND_WORDS] = {
	VG_MTHD(VG_OP_INC, VG_SUBCH_COMPUTE, VG_HOST_SET_OBJECT, 1), VG_CLASS_COMPUTE,
	VG_MTHD(VG_OP_INC, VG_SUBCH_COPY, VG_HOST_SET_OBJECT, 1), VG_CLASS_COPY,
};

int vg_ctx_submit(struct vg_ctx *c, const u32 *words, u32 count, u32 flags, u64 *seq)
{
	struct vg_dev *d = c->dev;
	u32 fence[VG_FENCE_DWORDS];
	u32 get, bytes, s0, s1, clr_bytes, clr_words = 0, bind;
	s64 off;
	int ret;

	if (READ_ERR(c) == VG_CERR_ENGINE_LOST) {
		/* reported to whoever it cost work (once), or it cost nothing: carry on on a rebound channel */
		ret = vg_ctx_status(c, NULL);
		if (!ret)
			ret = ctx_recover(c);
		if (ret)
			return ret;
	}
	ret = vg_ctx_status(c, NULL);
	if (ret)
		return ret;
	if (!c->bound)
		return -ENODEV;
	if (count == 0 || count > VUGPU_SUBMIT_MAX_DWORDS || (flags & ~VUGPU_SUBMIT_FENCE_IRQ))
		return -EINVAL;
	vg_lock(d); /* the ring is shared with vg_ctx_arm_irq, which waiters call */
	bind = c->bind_classes ? BIND_WORDS : 0;
	bytes = (bind + count + VG_FENCE_DWORDS) * 4;
	clr_bytes = clears_bytes(c->nclears);
	off = ring_place(c, c->nclears ? 3 : 2, clr_bytes + bytes, 1, ARM_BYTES, &get);
	if (off < 0) {
		*seq = c->gp_seq[get];
		vg_unlock(d);
		return -EBUSY;
	}

	c->seq++;
	fence[0] = VG_MTHD(VG_OP_INC, 0, VG_HOST_SEMAPHORE_A, 4);
	fence[1] = VG_HI32(c->sem_va) & 0xff;
	fence[2] = VG_LO32(c->sem_va);
	fence[3] = (u32)c->seq;
	fence[4] = VG_SEM_RELEASE | ((flags & VUGPU_SUBMIT_FENCE_IRQ) ? VG_SEM_RELEASE_INTERRUPT : 0);
	if (flags & VUGPU_SUBMIT_FENCE_IRQ)
		c->irq_armed_seq = c->seq;
	s0 = c->gp_put;
	if (c->nclears) {
		/* the clears run first: nothing of this submission may see a buffer's old bytes */
		clr_words = emit_clears(c, (u32)off, c->seq);
		gp_write(c, s0, c->pb_va + (u64)off, clr_words);
		c->gp_pb_start[s0] = (u32)off;
		c->gp_seq[s0] = c->seq;
		s0 = (s0 + 1) % VG_GPFIFO_ENTRIES;
		off += clr_bytes;
	}
	if (bind) /* ahead of the user's methods, in the same entry */
		vg_vram_write(d, c->pb_addr + (u64)off, class_binds, sizeof(class_binds));
	if (words)
		vg_vram_write(d, c->pb_addr + (u64)off + (u64)bind * 4, words, (size_t)count * 4);
	vg_vram_write(d, c->pb_addr + (u64)off + (u64)(bind + count) * 4, fence, sizeof(fence));
	c->bind_classes = false;

	s1 = (s0 + 1) % VG_GPFIFO_ENTRIES;
	gp_write(c, s0, c->pb_va + (u64)off, bind + count);
	gp_write(c, s1, c->pb_va + (u64)off + (u64)(bind + count) * 4, VG_FENCE_DWORDS);
	/* the ring's tail for both entries is where this submission began (clears included) */
	c->gp_pb_start[s0] = c->gp_pb_start[s1] = (u32)(off - clr_bytes);
	c->gp_seq[s0] = c->gp_seq[s1] = c->seq;
	c->gp_put = (s1 + 1) % VG_GPFIFO_ENTRIES;
	c->pb_put = (u32)off + bytes;
	ring_kick(c);
	*seq = c->seq;
	vg_unlock(d);
	return 0;
}

int vg_ctx_arm_irq(struct vg_ctx *c, u64 seq)
{
	struct vg_dev *d = c->dev;
	u32 words[2] = { VG_MTHD(VG_OP_INC, 0, VG_HOST_NON_STALL_INTERRUPT, 1), 0 };
	u32 get, slot;
	s64 off;
	int ret = 0;

	vg_lock(d);
	if (!c->bound || READ_ERR(c) || seq <= c->irq_armed_seq || vg_ctx_seq_done(c, seq))
		goto out;
	off = ring_place(c, 1, ARM_BYTES, 0, 0, &get);
	if (off < 0) {
		ret = -EBUSY; /* cannot happen: submissions keep room for this */
		goto out;
	}
	vg_vram_write(d, c->pb_addr + (u64)off, words, sizeof(words));
	slot = c->gp_put;
	gp_write(c, slot, c->pb_va + (u64)off, 2);
	c->gp_pb_start[slot] = (u32)off;
	c->gp_seq[slot] = c->seq;
	c->gp_put = (slot + 1) % VG_GPFIFO_ENTRIES;
	c->pb_put = (u32)off + ARM_BYTES;
	c->irq_armed_seq = c->seq;
	ring_kick(c);
out:
	vg_unlock(d);
	return ret;
}

bool vg_ctx_seq_done(struct vg_ctx *c, u64 seq)
{
	u32 sem = vg_vram_rd32(c->dev, c->sem_addr);

	vg_os_rmb();
	return (s32)(sem - (u32)seq) >= 0;
}

u64 vg_ctx_seq_completed(struct vg_ctx *c)
{
	u32 sem = vg_vram_rd32(c->dev, c->sem_addr);

	return c->seq - (u32)((u32)c->seq - sem);
}

static int ctx_status(struct vg_ctx *c, struct vugpu_error *err, bool report)
{
	vg_irqflags_t fl;
	u32 code;

	vg_os_lock(&c->dev->os, fl);
	code = c->err_code;
	if (err) {
		err->code = code;
		err->info = c->err_info;
		err->reason = c->err_reason;
		err->pad = 0;
		err->fault_va = c->fault_va;
		err->fault_info = c->fault_info;
		err->fault_valid = c->fault_valid;
	}
	vg_os_unlock(&c->dev->os, fl);
	if (err)
		err->seq_done = c->sem_addr ? vg_ctx_seq_completed(c) : 0;
	if (!code)
		return 0;
	/* ENGINE_LOST is reported once; after that the lost fences count as passed (their results are
	 * undefined) and the next submission rebinds the channel. Met with every fence passed, it
	 * cost this channel nothing (the device restarted while it was idle; VRAM survived): nothing
	 * to report, the next submission rebinds. */
	if (code == VG_CERR_ENGINE_LOST && (c->err_reported || (c->sem_addr && vg_ctx_seq_completed(c) == c->seq)))
		return 0;
	if (report)
		c->err_reported = true;
	return code == VG_CERR_MMU_FAULT ? -EFAULT : -EIO;
}

int vg_ctx_status(struct vg_ctx *c, struct vugpu_error *err)
{
	return ctx_status(c, err, true);
}

int vg_ctx_error(struct vg_ctx *c, struct vugpu_error *err)
{
	return ctx_status(c, err, false);
}

int vg_ctx_poll_error(struct vg_ctx *c)
{
	struct vg_dev *d = c->dev;
	vg_irqflags_t fl;
	u32 st, code, info, reason = 0;

	if (c->chid < 0 || !c->bound)
		return vg_ctx_status(c, NULL);
	st = vg_rd(d, VG_PFIFO_CHAN_STATE(c->chid));
	if (st & VG_STATE_ERROR) {
		code = st == VG_DEAD_READ ? VG_CERR_DEVICE_LOST : vg_rd(d, VG_PFIFO_CHAN_ERR(c->chid));
		info = st == VG_DEAD_READ ? 0 : vg_rd(d, VG_PFIFO_CHAN_ERR_INFO(c->chid));
		if (code == VG_CERR_BAD_PROGRAM)
			reason = vg_rd(d, VG_PFIFO_CHAN_ERR_REASON(c->chid));
		vg_os_lock(&d->os, fl);
		if (!c->err_code) {
			c->err_code = code ? code : VG_CERR_DEVICE_LOST;
			c->err_info = info;
			c->err_reason = reason;
		}
		vg_os_unlock(&d->os, fl);
	}
	return vg_ctx_status(c, NULL);
}

/*
 * Fill a new VRAM buffer with zeros on the GPU (MEMSET kernel, hw-spec §6.2), as real drivers
 * clear new buffer objects: VRAM freed by one process must not leak into another, and writing
 * it through BAR1 would cost one trapped access per word where BAR1 is trapped (fv-naive).
 */
static int bo_clear(struct vg_ctx *c, struct vg_bo *bo)
{
	struct vg_dev *d = c->dev;
	u64 words = bo->size / 4;
	u32 pb[CLEAR_WORDS], n;
	u64 seq;
	int ret, tries;

	vg_vram_wr32(d, c->sem_addr + VG_SEM_PARAM_OFFSET, 0);        /* pattern */
	vg_vram_wr32(d, c->sem_addr + VG_SEM_PARAM_OFFSET + 4, 0);    /* reserved */
	vg_vram_wr64(d, c->sem_addr + VG_SEM_PARAM_OFFSET + 8, words); /* count */
	n = clear_methods(pb, bo->va, bo->size, c->sem_va + VG_SEM_PARAM_OFFSET);
	vg_os_wmb();
	for (tries = 0;; tries++) {
		for (;;) {
			ret = vg_ctx_submit(c, pb, n, VUGPU_SUBMIT_FENCE_IRQ, &seq);
			if (ret != -EBUSY)
				break;
			ret = d->wait(c, seq, VG_WAIT_RETIRE_MS);
			if (ret)
				break;
		}
		if (!ret)
			ret = d->wait(c, seq, VG_WAIT_RETIRE_MS);
		/* the device restarted under the clear (ENGINE_LOST): clear again on the rebound
		 * channel — a new buffer must never show someone else's bytes */
		if (ret == -EIO && READ_ERR(c) == VG_CERR_ENGINE_LOST && tries == 0)
			continue;
		return ret;
	}
}

/* ---- buffers ---- */

int vg_ctx_vram_alloc(struct vg_ctx *c, u64 size, u32 flags, struct vg_bo **out)
{
	struct vg_bo *bo;
	int ret;

	if (flags & ~(VUGPU_MEM_READ_ONLY | VUGPU_MEM_NO_CPU))
		return -EINVAL;
	if (size > 0xfffe0000ull) /* BUFFER_LENGTH, LINE_LENGTH_IN are 32-bit, even rounded to 128 KiB */
		return -E2BIG;
	ret = vg_ctx_status(c, NULL);
	if (ret)
		return ret;
	ret = bo_new_vram(c, size, flags, false, &bo);
	if (ret)
		return ret;
	/* GPU-only (and GPU-writable): the next submission clears it, ahead of its work */
	if ((flags & (VUGPU_MEM_NO_CPU | VUGPU_MEM_READ_ONLY)) == VUGPU_MEM_NO_CPU &&
	    c->nclears < VG_MAX_DEFERRED_CLEARS) {
		vg_lock(c->dev);
		bo->clear_pending = true;
		bo->clear_next = c->clears;
		c->clears = bo;
		c->nclears++;
		vg_unlock(c->dev);
		*out = bo;
		return 0;
	}
	ret = bo_clear(c, bo);
	if (ret) {
		/* the clear may still be running: retire the buffer with the context */
		bo->internal = true;
		return ret;
	}
	*out = bo;
	return 0;
}

int vg_ctx_sys_map(struct vg_ctx *c, const u64 *bus, u32 pages, u32 flags, void *os_priv,
		   struct vg_bo **out)
{
	struct vg_bo *bo;
	int ret;

	if (!pages || (flags & ~VUGPU_MEM_READ_ONLY))
		return -EINVAL;
	bo = vg_os_zalloc(sizeof(*bo));
	if (!bo)
		return -ENOMEM;
	bo->sysmem = true;
	bo->flags = flags;
	bo->size = (u64)pages << VG_PAGE_SHIFT;
	bo->os_priv = os_priv;
	ret = bo_map(c, bo, bus, 0, VG_TARGET_SYSMEM);
	if (ret) {
		vg_os_free(bo); /* the caller still owns os_priv */
		return ret;
	}
	bo_link(c, bo);
	*out = bo;
	return 0;
}

struct vg_bo *vg_ctx_bo_find(struct vg_ctx *c, u32 handle)
{
	struct vg_bo *bo;

	for (bo = c->bos; bo; bo = bo->next)
		if (bo->handle == handle && !bo->internal)
			return bo;
	return NULL;
}

struct vg_bo *vg_ctx_bo_find_vram(struct vg_ctx *c, u64 vram_addr, u64 size)
{
	struct vg_bo *bo;

	for (bo = c->bos; bo; bo = bo->next)
		if (!bo->internal && !bo->sysmem && vram_addr >= bo->vram_addr &&
		    vram_addr - bo->vram_addr <= bo->size && size <= bo->size - (vram_addr - bo->vram_addr))
			return bo;
	return NULL;
}

/* Wait until everything submitted so far has run; a failed channel is stopped instead. */
static int retire_submitted(struct vg_ctx *c)
{
	struct vg_dev *d = c->dev;
	int ret;

	if (!c->bound || vg_ctx_seq_done(c, c->seq))
		return 0;
	ret = d->wait(c, c->seq, VG_WAIT_RETIRE_MS);
	if (ret == -EFAULT || ret == -EIO)
		ret = vg_chan_stop(d, (u32)c->chid); /* make sure nothing of it runs any more */
	return ret;
}

int vg_ctx_bo_free(struct vg_ctx *c, struct vg_bo *bo)
{
	struct vg_dev *d = c->dev;
	struct vg_bo **pp;
	u64 seq;
	int ret;

	if (bo->clear_pending) { /* never submitted: nothing saw it, nothing needs clearing */
		vg_lock(d);
		for (pp = &c->clears; *pp; pp = &(*pp)->clear_next) {
			if (*pp == bo) {
				*pp = bo->clear_next;
				c->nclears--;
				break;
			}
		}
		bo->clear_pending = false;
		vg_unlock(d);
	}
	/*
	 * Work submitted before the free may still use the buffer through its mapping — the
	 * driver's own clear of it among that work, queued behind whatever the channel is busy
	 * with even when its user never touched the buffer: it must run before the unmap (unmapped
	 * first, that clear faulted, PTE not present). So wait first, then unmap.
	 */
	seq = c->seq;
	ret = retire_submitted(c);
	if (!ret && bo_unmap_free(c, bo) == 0) { /* idle: one call (PV 3) */
		bo_unlink(c, bo);
		vg_os_free(bo);
		return 0;
	}
	bo_unmap(c, bo);
	/* the pages go back once nothing can reach them: work another thread submitted meanwhile
	 * (kernel driver) faults from now on, and is waited for too */
	if (!ret && c->seq != seq)
		ret = retire_submitted(c);
	if (ret) {
		bo->internal = true; /* retired with the context */
		return ret;
	}
	bo_unlink(c, bo);
	bo_release(c, bo);
	return 0;
}

/* ---- context ---- */

static void write_instance(struct vg_ctx *c)
{
	struct vg_dev *d = c->dev;
	u64 i = c->inst_addr;
	u32 log2 = 0;

	while ((1u << log2) < VG_GPFIFO_ENTRIES)
		log2++;
	vg_vram_zero(d, i, VG_INST_SIZE);
	vg_vram_wr32(d, i + VG_INST_USERD_LO, (VG_LO32(c->userd_addr) & ~0x1ffu) | VG_TARGET_VRAM);
	vg_vram_wr32(d, i + VG_INST_USERD_HI, VG_HI32(c->userd_addr));
	vg_vram_wr32(d, i + VG_INST_MAGIC, 0xface);
	vg_vram_wr32(d, i + VG_INST_GP_BASE_LO, VG_LO32(c->gpfifo_va) & ~7u);
	vg_vram_wr32(d, i + VG_INST_GP_BASE_HI, (VG_HI32(c->gpfifo_va) & 0xff) | (log2 << 16));
	vg_vram_wr32(d, i + VG_INST_PD_LO, (VG_LO32(c->vm.pd_addr) & ~0xfffu) | VG_TARGET_VRAM);
	vg_vram_wr32(d, i + VG_INST_PD_HI, VG_HI32(c->vm.pd_addr));
	vg_vram_wr32(d, i + VG_INST_LIMIT_LO, 0); /* no limit below 2^40 */
	vg_vram_wr32(d, i + VG_INST_LIMIT_HI, 0);
}

static int chid_alloc(struct vg_ctx *c)
{
	struct vg_dev *d = c->dev;
	vg_irqflags_t fl;
	u32 chid;

	for (chid = 0; chid < d->chan_count; chid++) {
		if (!d->chans[chid]) {
			vg_os_lock(&d->os, fl);
			d->chans[chid] = c;
			vg_os_unlock(&d->os, fl);
			c->chid = (int)chid;
			return 0;
		}
	}
	return -EBUSY;
}

/* Bind the channel to its instance block, put it on the runlist, enable it. */
static int chan_bind(struct vg_ctx *c)
{
	struct vg_dev *d = c->dev;
	u32 chid, st;
	int ret;

	vg_lock(d);
	ret = chid_alloc(c);
	if (ret) {
		vg_unlock(d);
		return ret;
	}
	chid = (u32)c->chid;
	vg_os_wmb();
	vg_wr(d, VG_PFIFO_CHAN(chid), VG_CHAN_VALID | (u32)(c->inst_addr >> 12));
	st = vg_rd(d, VG_PFIFO_CHAN_STATE(chid));
	if (st & VG_STATE_ERROR) {
		u32 code = vg_rd(d, VG_PFIFO_CHAN_ERR(chid));

		vg_err(d, "channel %u: bind rejected, error %u", chid, code);
		vg_wr(d, VG_PFIFO_CHAN(chid), 0);
		vg_unlock(d);
		return -EIO;
	}
	c->bound = true;
	vg_runlist_update(d);
	vg_wr(d, VG_PFIFO_CHAN_STATE(chid), VG_STATE_ENABLE);
	vg_unlock(d);
	return 0;
}

/*
 * ENGINE_LOST (hw-spec §8.2): the device restarted (vugpu was restarted or upgraded under the
 * VM) while this channel had work; that work is gone, its results undefined. The error is
 * returned once (to the WAIT or SUBMIT that meets it); the next submission lands here: rebind
 * the channel (which clears the error and resets GP_GET), start again from an empty ring, count
 * the lost fences as passed, bind the classes again. A long-lived context thus survives a
 * restart without its user's help.
 */
static int ctx_recover(struct vg_ctx *c)
{
	struct vg_dev *d = c->dev;
	vg_irqflags_t fl;
	struct vg_bo *bo;
	u32 chid, st, i;

	if (c->chid < 0 || !c->bound)
		return -ENODEV;
	chid = (u32)c->chid;
	vg_lock(d);
	/* GP_PUT back to 0 first: rebinding resets GP_GET to 0, and the old GP_PUT would make the
	 * device run the old ring's entries again once the channel is enabled */
	vg_vram_wr32(d, c->userd_addr + VG_USERD_GP_PUT, 0);
	vg_os_wmb();
	vg_wr(d, VG_PFIFO_CHAN(chid), VG_CHAN_VALID | (u32)(c->inst_addr >> 12));
	st = vg_rd(d, VG_PFIFO_CHAN_STATE(chid));
	if (st & VG_STATE_ERROR) {
		vg_unlock(d);
		vg_err(d, "channel %u: rebind after ENGINE_LOST rejected", chid);
		return -EIO;
	}
	/* clears that went down with the lost work: again, with the next submission */
	for (bo = c->bos; bo; bo = bo->next) {
		if (bo->clear_seq && !bo->clear_pending && !vg_ctx_seq_done(c, bo->clear_seq)) {
			bo->clear_pending = true;
			bo->clear_next = c->clears;
			c->clears = bo;
			c->nclears++;
		}
	}
	c->gp_put = 0;
	c->pb_put = 0;
	for (i = 0; i < VG_GPFIFO_ENTRIES; i++) {
		c->gp_pb_start[i] = 0;
		c->gp_seq[i] = 0;
	}
	vg_vram_wr32(d, c->sem_addr, (u32)c->seq); /* every fence before now counts as passed */
	c->irq_armed_seq = c->seq;
	vg_os_lock(&d->os, fl);
	c->err_code = 0;
	c->err_info = 0;
	c->err_reason = 0;
	c->fault_valid = false;
	c->err_reported = false;
	vg_os_unlock(&d->os, fl);
	c->bind_classes = true; /* with the submission that brought us here */
	vg_wr(d, VG_PFIFO_CHAN_STATE(chid), VG_STATE_ENABLE);
	vg_unlock(d);
	vg_warn(d, "channel %u: recovered from ENGINE_LOST (rebound; the lost work is not redone)", chid);
	return 0;
}

int vg_ctx_create(struct vg_dev *d, void *os_priv, struct vg_ctx **out)
{
	struct vg_ctx *c;
	struct vg_bo *ring, *sem;
	int ret;

	c = vg_os_zalloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->dev = d;
	c->os_priv = os_priv;
	c->chid = -1;
	c->next_handle = 1;
	c->gp_pb_start = vg_os_zalloc(sizeof(u32) * VG_GPFIFO_ENTRIES);
	c->gp_seq = vg_os_zalloc(sizeof(u64) * VG_GPFIFO_ENTRIES);
	if (!c->gp_pb_start || !c->gp_seq) {
		ret = -ENOMEM;
		goto fail;
	}
	/* the instance block shares the PD's allocation; the GPFIFO ring and the pushbuffer (both
	 * read-only to the device) are one buffer: in PV two hypercalls fewer each way per context */
	ret = vg_vm_init(&c->vm, d, VG_INST_SIZE, &c->inst_addr);
	if (ret)
		goto fail;
	c->vram_bytes += VG_INST_SIZE;
	c->userd_addr = c->inst_addr + VG_USERD_OFFSET;

	ret = bo_new_vram(c, VG_GPFIFO_BYTES + VG_PB_SIZE, VUGPU_MEM_READ_ONLY, true, &ring);
	if (!ret)
		ret = bo_new_vram(c, VG_PAGE_SIZE, 0, true, &sem);
	if (ret)
		goto fail;
	c->gpfifo_addr = ring->vram_addr;
	c->gpfifo_va = ring->va;
	c->pb_addr = ring->vram_addr + VG_GPFIFO_BYTES;
	c->pb_va = ring->va + VG_GPFIFO_BYTES;
	c->sem_addr = sem->vram_addr;
	c->sem_va = sem->va;
	vg_vram_zero(d, c->sem_addr, VG_PAGE_SIZE);
	write_instance(c);
	vg_lock(d);
	vm_flush_locked(&c->vm); /* the ring's mappings, before the device first reads them */
	vg_unlock(d);

	/* The classes are bound by the context's first submission, ahead of its methods: a context
	 * costs no doorbell before its user's work (in a mediated VM no shadow rebuild either:
	 * the runtime maps its parameter ring right after this, and one flush then covers both). */
	c->bind_classes = true;
	ret = chan_bind(c);
	if (ret)
		goto fail;
	d->contexts++;
	*out = c;
	return 0;
fail:
	vg_ctx_destroy(c);
	return ret;
}

/*
 * PV 4: free the context's address space in one call, with its PD allocation and the buffers
 * alloc_map made in it (their memory accounted here); the caller then only releases the rest.
 * The channel must be unbound. Non-zero where the path cannot: free buffer by buffer then.
 */
static int vm_space_free(struct vg_ctx *c)
{
	struct vg_dev *d = c->dev;
	struct vg_vm *vm = &c->vm;
	struct vg_bo *bo;
	int ret;

	if (!d->vm_ops->space_free || !vm->pd_addr || c->bound)
		return -EOPNOTSUPP;
	vg_lock(d);
	ret = d->vm_ops->space_free(vm);
	if (!ret) {
		for (bo = c->bos; bo; bo = bo->next)
			if (bo->space_owned)
				d->vram_used -= bo->size;
		d->vram_used -= vm->alloc_bytes;
		d->address_spaces--;
		vm->pd_addr = 0; /* vg_vm_fini has no PD left to free */
	}
	vg_unlock(d);
	return ret;
}

void vg_ctx_destroy(struct vg_ctx *c)
{
	struct vg_dev *d = c->dev;
	vg_irqflags_t fl;
	struct vg_bo *bo;
	bool space_gone, unmap;

	if (c->chid >= 0) {
		u32 chid = (u32)c->chid;

		if (c->bound) {
			vg_chan_stop(d, chid);
			d->contexts--;
		}
		vg_lock(d);
		vg_os_lock(&d->os, fl);
		d->chans[chid] = NULL;
		vg_os_unlock(&d->os, fl);
		if (c->bound) {
			vg_runlist_update(d);
			vg_wr(d, VG_PFIFO_CHAN(chid), 0);
			c->bound = false;
		}
		vg_unlock(d);
		c->chid = -1;
	}
	/* the channel can no longer run: give everything back */
	c->clears = NULL;
	c->nclears = 0;
	/* PV 4: one call freed the space, its PD and every buffer alloc_map made in it; what is
	 * left is released without unmapping (the mappings went with the space) */
	space_gone = vm_space_free(c) == 0;
	unmap = d->vm_ops->unmap_on_destroy && !space_gone;
	while ((bo = c->bos)) {
		c->bos = bo->next;
		if (space_gone && bo->space_owned) {
			c->vram_bytes -= bo->size;
			vg_os_free(bo);
			continue;
		}
		if (unmap && bo_unmap_free(c, bo) == 0) {
			vg_os_free(bo);
			continue;
		}
		if (unmap)
			bo_unmap(c, bo);
		bo_release(c, bo);
	}
	vg_vm_fini(&c->vm); /* the instance block with it */
	vg_os_free(c->gp_pb_start);
	vg_os_free(c->gp_seq);
	vg_os_free(c);
}
