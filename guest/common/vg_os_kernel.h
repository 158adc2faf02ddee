/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* Platform layer for the Linux driver: BAR0/BAR1 are ioremapped PCI BARs. */
#ifndef VG_OS_KERNEL_H
#define VG_OS_KERNEL_H

#include <linux/types.h>
#include <linux/kernel.h>
#include <linux/io.h>
#include <linux/slab.h>
#include <linux/delay.h>
#include <linux/spinlock.h>
#include <linux/device.h>
#include <linux/errno.h>
#include <linux/string.h>
#include <linux/atomic.h>
#include <linux/mutex.h>

struct vg_os {
	void __iomem *bar0;
	void __iomem *bar1;      /* the whole VRAM aperture, write-combining */
	struct device *dev;
	spinlock_t lock;         /* taken by the interrupt path */
	struct mutex dlock;      /* device-global state: allocator, channel table, runlist, PV slot */
	atomic64_t mmio;         /* BAR0 accesses (diagnostics) */
};

static inline u32 vg_os_rd32(struct vg_os *os, u32 off)
{
	atomic64_inc(&os->mmio);
	return ioread32(os->bar0 + off);
}

static inline void vg_os_wr32(struct vg_os *os, u32 off, u32 v)
{
	atomic64_inc(&os->mmio);
	iowrite32(v, os->bar0 + off);
}

/* The doorbell: an MMIO write is posted on PCIe anyway. */
static inline void vg_os_doorbell32(struct vg_os *os, u32 off, u32 v)
{
	vg_os_wr32(os, off, v);
}

static inline u64 vg_os_mmio_count(struct vg_os *os) { return atomic64_read(&os->mmio); }

static inline u32 vg_os_vram_rd32(struct vg_os *os, u64 addr)
{
	return readl(os->bar1 + addr);
}

static inline void vg_os_vram_wr32(struct vg_os *os, u64 addr, u32 v)
{
	writel(v, os->bar1 + addr);
}

static inline void vg_os_vram_wr64(struct vg_os *os, u64 addr, u64 v)
{
	writeq(v, os->bar1 + addr);
}

static inline void vg_os_vram_write(struct vg_os *os, u64 addr, const void *src, size_t len)
{
	memcpy_toio(os->bar1 + addr, src, len);
}

/* 8-byte stores: one access each even where BAR1 is trapped (fv-naive). */
static inline void vg_os_vram_zero(struct vg_os *os, u64 addr, size_t len)
{
	size_t i;

	for (i = 0; i + 8 <= len; i += 8)
		writeq(0, os->bar1 + addr + i);
	for (; i < len; i += 4)
		writel(0, os->bar1 + addr + i);
}

static inline void *vg_os_zalloc(size_t n) { return kvzalloc(n, GFP_KERNEL); }
static inline void vg_os_free(void *p) { kvfree(p); }
static inline void vg_os_msleep(unsigned int ms) { msleep(ms); }
static inline void vg_os_wmb(void) { wmb(); }
static inline void vg_os_rmb(void) { rmb(); }
static inline void vg_os_mb(void) { mb(); }

#define vg_os_lock(os, flags) spin_lock_irqsave(&(os)->lock, flags)
#define vg_os_unlock(os, flags) spin_unlock_irqrestore(&(os)->lock, flags)
typedef unsigned long vg_irqflags_t;
#define vg_os_dev_lock(os) mutex_lock(&(os)->dlock)
#define vg_os_dev_unlock(os) mutex_unlock(&(os)->dlock)

#define vg_os_info(os, fmt, ...) dev_info((os)->dev, fmt, ##__VA_ARGS__)
#define vg_os_warn(os, fmt, ...) dev_warn((os)->dev, fmt, ##__VA_ARGS__)
#define vg_os_err(os, fmt, ...) dev_err((os)->dev, fmt, ##__VA_ARGS__)
#define vg_os_dbg(os, fmt, ...) dev_dbg((os)->dev, fmt, ##__VA_ARGS__)

#endif /* VG_OS_KERNEL_H */
