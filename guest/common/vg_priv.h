/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* Helpers shared by the core's source files (not part of its interface). */
#ifndef VG_PRIV_H
#define VG_PRIV_H

#include "vg_core.h"

#define vg_rd(d, off) vg_os_rd32(&(d)->os, (off))
#define vg_wr(d, off, v) vg_os_wr32(&(d)->os, (off), (v))
#define vg_vram_rd32(d, a) vg_os_vram_rd32(&(d)->os, (a))
#define vg_vram_wr32(d, a, v) vg_os_vram_wr32(&(d)->os, (a), (v))
#define vg_vram_wr64(d, a, v) vg_os_vram_wr64(&(d)->os, (a), (v))
#define vg_vram_write(d, a, s, n) vg_os_vram_write(&(d)->os, (a), (s), (n))
#define vg_vram_zero(d, a, n) vg_os_vram_zero(&(d)->os, (a), (n))
#define vg_info(d, ...) vg_os_info(&(d)->os, __VA_ARGS__)
#define vg_warn(d, ...) vg_os_warn(&(d)->os, __VA_ARGS__)
#define vg_err(d, ...) vg_os_err(&(d)->os, __VA_ARGS__)
#define vg_dbg(d, ...) vg_os_dbg(&(d)->os, __VA_ARGS__)

#define VG_ALIGN_UP(x, a) (((x) + (a) - 1) & ~((u64)(a) - 1))
#define VG_LO32(x) ((u32)((u64)(x) & 0xffffffffu))
#define VG_HI32(x) ((u32)((u64)(x) >> 32))

#define vg_lock(d) vg_os_dev_lock(&(d)->os)
#define vg_unlock(d) vg_os_dev_unlock(&(d)->os)

/* VRAM through the device's allocator (register path or PV), with accounting. The _locked
 * variants expect the device lock held. */
int vg_vram_alloc_locked(struct vg_dev *d, u64 size, u64 align, u64 *addr);
void vg_vram_free_locked(struct vg_dev *d, u64 addr, u64 size);
int vg_vram_alloc(struct vg_dev *d, u64 size, u64 align, u64 *addr);
void vg_vram_free(struct vg_dev *d, u64 addr, u64 size);

/* channel control (vg_dev.c) */
/* takes the device lock per register sequence */
int vg_chan_stop(struct vg_dev *d, u32 chid);
/* device lock held */
int vg_runlist_update(struct vg_dev *d);

/* PV (vg_vm_pv.c): register the shared area; 0 when the host accepted it */
int vg_pv_register(struct vg_dev *d);

/* VA space of a context and mappings (vg_ctx.c) */
int vg_vm_init(struct vg_vm *vm, struct vg_dev *d, u64 extra, u64 *extra_addr);
void vg_vm_fini(struct vg_vm *vm);

#endif /* VG_PRIV_H */
