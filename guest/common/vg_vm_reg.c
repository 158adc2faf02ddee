// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Register path of the address-space interface: the driver owns the page tables. The page
 * directory and the page tables live in VRAM and are written through the BAR1 aperture (PDEs
 * from VG_LARGE_VA_START on hold 128 KiB-page tables of 1024 entries, the others 4 KiB-page
 * tables of 32768);
 * every update is followed by an MMU flush of that page directory (hw-spec §3.6, §7), as a
 * bare-metal driver does. VRAM comes from the driver's own allocator, sized from PFB.
 * All operations run under the device lock (taken by the core).
 */
#include "vg_priv.h"

static int reg_alloc(struct vg_dev *d, u64 size, u64 align, u64 *addr)
{
	return vg_ralloc_alloc(&d->vram, size, align, addr);
}

static void reg_free(struct vg_dev *d, u64 addr, u64 size)
{
	vg_ralloc_free(&d->vram, addr, size);
}

static int reg_set_pgd(struct vg_vm *vm)
{
	vm->pt_addr = vg_os_zalloc(sizeof(u64) * VG_PD_ENTRIES);
	if (!vm->pt_addr)
		return -ENOMEM;
	vg_vram_zero(vm->dev, vm->pd_addr, VG_PD_SIZE);
	return 0;
}

static inline bool large_pde(u32 pde)
{
	return pde >= (u32)(VG_LARGE_VA_START >> VG_PD_SHIFT);
}

static inline u32 table_size(u32 pde)
{
	return large_pde(pde) ? VG_LPT_SIZE : VG_SPT_SIZE;
}

/* The page table covering va, created (zeroed, PDE written) on first use. */
static int reg_table(struct vg_vm *vm, u64 va, u64 *pt)
{
	struct vg_dev *d = vm->dev;
	u32 pde = (u32)(va >> VG_PD_SHIFT);
	u64 addr;
	int ret;

	if (pde >= VG_PD_ENTRIES)
		return -EINVAL;
	if (vm->pt_addr[pde]) {
		*pt = vm->pt_addr[pde];
		return 0;
	}
	ret = vg_vram_alloc_locked(d, table_size(pde), VG_PAGE_SIZE, &addr);
	if (ret)
		return ret;
	vg_vram_zero(d, addr, table_size(pde));
	vg_os_wmb();
	vg_vram_wr64(d, vm->pd_addr + 8ull * pde, addr | VG_ENTRY_TARGET(VG_TARGET_VRAM) | VG_PDE_PRESENT |
		     (large_pde(pde) ? VG_PDE_LARGE : 0));
	vm->pt_addr[pde] = addr;
	vm->pt_count++;
	*pt = addr;
	return 0;
}

/* Byte offset of va's entry in its table (4 KiB or 128 KiB pages by region). */
static inline u64 pte_off(u64 va)
{
	if (large_pde((u32)(va >> VG_PD_SHIFT)))
		return 8 * ((va >> VG_LARGE_PAGE_SHIFT) & (VG_LPT_ENTRIES - 1));
	return 8 * ((va >> VG_PAGE_SHIFT) & (VG_SPT_ENTRIES - 1));
}

static int reg_map(struct vg_vm *vm, u64 va, u32 count, const u64 *addrs, u64 base, u64 flags)
{
	u64 size = va >= VG_LARGE_VA_START ? VG_LARGE_PAGE_SIZE : VG_PAGE_SIZE;
	u64 pt = 0, pt_va = ~0ull;
	u32 i;
	int ret;

	for (i = 0; i < count; i++, va += size) {
		u64 page = addrs ? addrs[i] : base + (u64)i * size;

		if ((va >> VG_PD_SHIFT) != pt_va) {
			ret = reg_table(vm, va, &pt);
			if (ret)
				return ret;
			pt_va = va >> VG_PD_SHIFT;
		}
		vg_vram_wr64(vm->dev, pt + pte_off(va), (page & VG_ENTRY_ADDR_MASK) | flags | VG_PTE_PRESENT);
	}
	return 0;
}

static int reg_unmap(struct vg_vm *vm, u64 va, u32 count)
{
	u64 size = va >= VG_LARGE_VA_START ? VG_LARGE_PAGE_SIZE : VG_PAGE_SIZE;
	u32 i;

	for (i = 0; i < count; i++, va += size) {
		u32 pde = (u32)(va >> VG_PD_SHIFT);

		if (pde < VG_PD_ENTRIES && vm->pt_addr[pde])
			vg_vram_wr64(vm->dev, vm->pt_addr[pde] + pte_off(va), 0);
	}
	return 0;
}

static int reg_flush(struct vg_vm *vm)
{
	struct vg_dev *d = vm->dev;

	/* BAR1 stores must reach VRAM before the device re-walks the tables */
	vg_os_wmb();
	/* the only address space: flushing all of them is the same flush, in one write (a trap
	 * fewer in a VM); with several, only this one (a mediated VM re-shadows what it is told) */
	if (d->address_spaces == 1) {
		vg_wr(d, VG_MMU_FLUSH_TRIGGER, VG_MMU_FLUSH_GO | VG_MMU_FLUSH_ALL_PDB | VG_MMU_FLUSH_ALL_PAGES);
		return 0;
	}
	vg_wr(d, VG_MMU_FLUSH_PDB, (u32)(vm->pd_addr >> 8));
	vg_wr(d, VG_MMU_FLUSH_TRIGGER, VG_MMU_FLUSH_GO | VG_MMU_FLUSH_ALL_PAGES);
	return 0;
}

static void reg_fini(struct vg_vm *vm)
{
	u32 i;

	if (!vm->pt_addr)
		return;
	for (i = 0; i < VG_PD_ENTRIES; i++) {
		if (vm->pt_addr[i])
			vg_vram_free_locked(vm->dev, vm->pt_addr[i], table_size(i));
	}
	vg_os_free(vm->pt_addr);
	vm->pt_addr = NULL;
	vm->pt_count = 0;
}

const struct vg_vm_ops vg_vm_ops_reg = {
	.name = "register",
	.alloc = reg_alloc,
	.free = reg_free,
	.set_pgd = reg_set_pgd,
	.map = reg_map,
	.unmap = reg_unmap,
	.flush = reg_flush,
	.fini = reg_fini,
	.unmap_on_destroy = false,
	.large_pages = true,
};
