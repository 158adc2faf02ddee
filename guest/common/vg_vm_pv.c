// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Para-virtual path of the address-space interface (hw-spec §9, GPUvm's BAR4 hypercalls): the
 * host owns the page tables and the VRAM allocator of a mediated VM. The guest declares its page
 * directory with SET_PGD, sends its mappings as {va, pte} entries — one per call (pv=1) or up to
 * 128 per call (pv=2, the "multicall") — flushes with FLUSH and allocates VRAM with MEM_ALLOC.
 * With PV 3 the batched mode allocates and maps a VRAM buffer in one call, and unmaps and frees
 * it in one; with PV 4 it makes a context's address space in one call and frees it, with every
 * such buffer, in one.
 * Calls go through slot 0 of a shared area of coherent system memory; the core is serialised by
 * the platform, so one slot suffices.
 */
#include "vg_priv.h"

static inline volatile u8 *slot(struct vg_dev *d)
{
	return (volatile u8 *)d->pv_area;
}

static inline void put32(struct vg_dev *d, u32 off, u32 v) { *(volatile u32 *)(slot(d) + off) = v; }
static inline void put64(struct vg_dev *d, u32 off, u64 v) { *(volatile u64 *)(slot(d) + off) = v; }
static inline u32 get32(struct vg_dev *d, u32 off) { return *(volatile u32 *)(slot(d) + off); }
static inline u64 get64(struct vg_dev *d, u32 off) { return *(volatile u64 *)(slot(d) + off); }

/* Issue the call prepared in slot 0 (entries already written). Returns the host's result. */
static int pv_call_flags(struct vg_dev *d, u32 op, u64 arg0, u64 arg1, u32 count, u32 flags)
{
	put32(d, VG_PV_SLOT_OP, op);
	put32(d, VG_PV_SLOT_RESULT, (u32)-EINPROGRESS);
	put32(d, VG_PV_SLOT_COUNT, count);
	put32(d, VG_PV_SLOT_FLAGS, flags);
	put64(d, VG_PV_SLOT_ARG0, arg0);
	put64(d, VG_PV_SLOT_ARG1, arg1);
	vg_os_wmb();
	vg_wr(d, VG_PV_CALL, 0);   /* the call is complete when this write returns */
	vg_os_rmb();
	d->pv_calls++;
	return (int)(s32)get32(d, VG_PV_SLOT_RESULT);
}

static int pv_call(struct vg_dev *d, u32 op, u64 arg0, u64 arg1, u32 count)
{
	return pv_call_flags(d, op, arg0, arg1, count, 0);
}

/* PV 2 ranges (hw-spec 1.2) in the batched mode: a whole buffer per call. */
static bool pv_ranges(struct vg_dev *d)
{
	return d->pv_mode == VG_PV_BATCH && d->pv_version >= VG_PV_VERSION_RANGES;
}

/* PTEs one MAP_RANGE call carries: the u64 array runs from ENTRIES through every slot */
static u32 pv_range_max(struct vg_dev *d)
{
	u32 slots = d->pv_area_slots ? d->pv_area_slots : 1;

	return (slots * VG_PV_SLOT_SIZE - VG_PV_SLOT_ENTRIES) / 8;
}

static int pv_range_call(struct vg_vm *vm, u32 op, u64 va, u32 n, u32 flags)
{
	struct vg_dev *d = vm->dev;
	int ret = pv_call_flags(d, op, vm->pd_addr, va, n, flags);

	if (ret)
		vg_warn(d, "PV op %u at 0x%llx: %d after %u of %u pages", op, (unsigned long long)va, ret,
			get32(d, VG_PV_SLOT_COUNT), n);
	return ret;
}

static int pv_map_range(struct vg_vm *vm, u64 va, u32 count, const u64 *addrs, u64 base, u64 flags)
{
	struct vg_dev *d = vm->dev;
	u32 max = pv_range_max(d), n, i;
	int ret;

	/* The last call of a map carries FLUSH: the flush costs no call of its own, and the core
	 * then has nothing left to flush at its next doorbell (vm->dirty, vg_ctx.c). */
	if (!addrs) { /* contiguous (VRAM): one PTE describes the whole buffer */
		put64(d, VG_PV_SLOT_ENTRIES, (base & VG_ENTRY_ADDR_MASK) | flags | VG_PTE_PRESENT);
		ret = pv_range_call(vm, VG_PV_OP_MAP_RANGE, va, count, VG_PV_RANGE_CONTIGUOUS | VG_PV_RANGE_FLUSH);
		if (!ret)
			vm->dirty = false;
		return ret;
	}
	for (; count; count -= n, addrs += n, va += (u64)n * VG_PAGE_SIZE) {
		n = count < max ? count : max;
		for (i = 0; i < n; i++)
			put64(d, VG_PV_SLOT_ENTRIES + 8 * i, (addrs[i] & VG_ENTRY_ADDR_MASK) | flags | VG_PTE_PRESENT);
		ret = pv_range_call(vm, VG_PV_OP_MAP_RANGE, va, n, n == count ? VG_PV_RANGE_FLUSH : 0);
		if (ret)
			return ret;
	}
	vm->dirty = false;
	return 0;
}

static int pv_alloc(struct vg_dev *d, u64 size, u64 align, u64 *addr)
{
	int ret;

	if (align < VG_PAGE_SIZE)
		align = VG_PAGE_SIZE;
	ret = pv_call(d, VG_PV_OP_MEM_ALLOC, size, align, 0);
	if (ret)
		return ret;
	*addr = get64(d, VG_PV_SLOT_RET0);
	return 0;
}

static void pv_free(struct vg_dev *d, u64 addr, u64 size)
{
	int ret = pv_call(d, VG_PV_OP_MEM_FREE, addr, 0, 0);

	(void)size;
	if (ret)
		vg_warn(d, "PV MEM_FREE 0x%llx failed: %d", (unsigned long long)addr, ret);
}

static int pv_set_pgd(struct vg_vm *vm)
{
	return pv_call(vm->dev, VG_PV_OP_SET_PGD, vm->pd_addr, 0, 0);
}

/* PV 3: allocate-and-map / unmap-and-free a VRAM buffer in one call each (batched mode). */
static bool pv_alloc_ranges(struct vg_dev *d)
{
	return d->pv_mode == VG_PV_BATCH && d->pv_version >= VG_PV_VERSION_ALLOC;
}

static int pv_alloc_map(struct vg_vm *vm, u64 va, u32 count, u64 align, u64 flags, u64 *addr)
{
	struct vg_dev *d = vm->dev;
	int ret;

	if (!pv_alloc_ranges(d))
		return -EOPNOTSUPP;
	put64(d, VG_PV_SLOT_ARG2, align < VG_PAGE_SIZE ? VG_PAGE_SIZE : align);
	put64(d, VG_PV_SLOT_ENTRIES, flags | VG_PTE_PRESENT); /* address 0: the host picks it */
	ret = pv_range_call(vm, VG_PV_OP_MAP_RANGE, va, count,
			    VG_PV_RANGE_CONTIGUOUS | VG_PV_RANGE_ALLOC | VG_PV_RANGE_FLUSH);
	if (!ret)
		*addr = get64(d, VG_PV_SLOT_RET0);
	return ret;
}

static int pv_unmap_free(struct vg_vm *vm, u64 va, u32 count, u64 addr)
{
	struct vg_dev *d = vm->dev;

	if (!pv_alloc_ranges(d))
		return -EOPNOTSUPP;
	put64(d, VG_PV_SLOT_ARG2, addr);
	return pv_range_call(vm, VG_PV_OP_UNMAP_RANGE, va, count, VG_PV_RANGE_FLUSH | VG_PV_RANGE_FREE);
}

/* PV 4: an address space in one call each way (batched mode). */
static bool pv_spaces(struct vg_dev *d)
{
	return d->pv_mode == VG_PV_BATCH && d->pv_version >= VG_PV_VERSION_SPACE;
}

static int pv_space_new(struct vg_vm *vm)
{
	struct vg_dev *d = vm->dev;
	int ret;

	if (!pv_spaces(d))
		return -EOPNOTSUPP;
	ret = pv_call(d, VG_PV_OP_SPACE_NEW, vm->alloc_bytes, VG_PAGE_SIZE, 0);
	if (!ret)
		vm->pd_addr = get64(d, VG_PV_SLOT_RET0);
	return ret;
}

static int pv_space_free(struct vg_vm *vm)
{
	struct vg_dev *d = vm->dev;
	int ret;

	if (!pv_spaces(d))
		return -EOPNOTSUPP;
	ret = pv_call(d, VG_PV_OP_SPACE_FREE, vm->pd_addr, 0, 0);
	if (ret)
		vg_warn(d, "PV SPACE_FREE 0x%llx: %d", (unsigned long long)vm->pd_addr, ret);
	return ret;
}

static u32 pv_batch(struct vg_dev *d)
{
	return d->pv_mode == VG_PV_BATCH ? VG_PV_BATCH_MAX : 1;
}

/* Send entries [0, n) of the slot; on a partial failure report how far the host got. */
static int pv_send(struct vg_vm *vm, u32 op, u32 n)
{
	struct vg_dev *d = vm->dev;
	int ret = pv_call(d, op, vm->pd_addr, 0, n);

	if (ret)
		vg_warn(d, "PV op %u: %d after %u of %u entries", op, ret, get32(d, VG_PV_SLOT_COUNT), n);
	return ret;
}

static int pv_map(struct vg_vm *vm, u64 va, u32 count, const u64 *addrs, u64 base, u64 flags)
{
	struct vg_dev *d = vm->dev;
	u32 max = pv_batch(d), n = 0, i;
	int ret;

	if (pv_ranges(d))
		return pv_map_range(vm, va, count, addrs, base, flags);
	for (i = 0; i < count; i++, va += VG_PAGE_SIZE) {
		u64 page = addrs ? addrs[i] : base + (u64)i * VG_PAGE_SIZE;

		put64(d, VG_PV_SLOT_ENTRIES + 16 * n, va);
		put64(d, VG_PV_SLOT_ENTRIES + 16 * n + 8, (page & VG_ENTRY_ADDR_MASK) | flags | VG_PTE_PRESENT);
		if (++n == max) {
			ret = pv_send(vm, VG_PV_OP_MAP_BATCH, n);
			if (ret)
				return ret;
			n = 0;
		}
	}
	return n ? pv_send(vm, VG_PV_OP_MAP_BATCH, n) : 0;
}

static int pv_unmap(struct vg_vm *vm, u64 va, u32 count)
{
	struct vg_dev *d = vm->dev;
	u32 max = pv_batch(d), n = 0, i;
	int ret;

	if (pv_ranges(d)) {
		/* an unmap is always followed by a flush (the pages go back): one call does both */
		ret = pv_range_call(vm, VG_PV_OP_UNMAP_RANGE, va, count, VG_PV_RANGE_FLUSH);
		if (!ret)
			vm->dirty = false;
		return ret;
	}
	for (i = 0; i < count; i++, va += VG_PAGE_SIZE) {
		put64(d, VG_PV_SLOT_ENTRIES + 16 * n, va);
		put64(d, VG_PV_SLOT_ENTRIES + 16 * n + 8, 0);
		if (++n == max) {
			ret = pv_send(vm, VG_PV_OP_UNMAP_BATCH, n);
			if (ret)
				return ret;
			n = 0;
		}
	}
	return n ? pv_send(vm, VG_PV_OP_UNMAP_BATCH, n) : 0;
}

static int pv_flush(struct vg_vm *vm)
{
	return pv_call(vm->dev, VG_PV_OP_FLUSH, vm->pd_addr, 0, 0);
}

static void pv_fini(struct vg_vm *vm)
{
	(void)vm; /* the host owns the tables; the core unmapped every mapping */
}

/* Register the shared area; 0 when the host accepted it. */
int vg_pv_register(struct vg_dev *d)
{
	u32 status;

	if (!d->pv_area || (d->pv_area_bus & (VG_PV_SLOT_SIZE - 1)))
		return -EINVAL;
	vg_wr(d, VG_PV_AREA_LO, VG_LO32(d->pv_area_bus));
	vg_wr(d, VG_PV_AREA_HI, VG_HI32(d->pv_area_bus));
	vg_wr(d, VG_PV_AREA_SLOTS, d->pv_area_slots ? d->pv_area_slots : 1);
	status = vg_rd(d, VG_PV_STATUS);
	return status ? -(int)status : 0;
}

const struct vg_vm_ops vg_vm_ops_pv = {
	.name = "pv",
	.alloc = pv_alloc,
	.free = pv_free,
	.set_pgd = pv_set_pgd,
	.map = pv_map,
	.unmap = pv_unmap,
	.flush = pv_flush,
	.alloc_map = pv_alloc_map,
	.unmap_free = pv_unmap_free,
	.space_new = pv_space_new,
	.space_free = pv_space_free,
	.fini = pv_fini,
	.unmap_on_destroy = true,
};
