/* SPDX-License-Identifier: MIT */
/*
 * Platform layer for the user-space host backend (the native twin): BAR0 is reached with
 * vfio-user REGION_READ/REGION_WRITE messages, BAR1 is the server's VRAM fd mmapped into this
 * process, and there is no concurrency (interrupts are handled in the waiting thread).
 */
#ifndef VG_OS_USER_H
#define VG_OS_USER_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <errno.h>
#include <time.h>

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int32_t s32;
typedef int64_t s64;

struct vfu_client;
uint32_t vfu_bar0_rd32(struct vfu_client *c, uint32_t off);
void vfu_bar0_wr32(struct vfu_client *c, uint32_t off, uint32_t v);
void vfu_bar0_post32(struct vfu_client *c, uint32_t off, uint32_t v);

struct vg_os {
	struct vfu_client *vfu;
	volatile uint8_t *bar1;  /* mmap of the server's VRAM fd */
	uint64_t mmio;           /* BAR0 accesses (diagnostics) */
	int verbose;
};

static inline u32 vg_os_rd32(struct vg_os *os, u32 off)
{
	os->mmio++;
	return vfu_bar0_rd32(os->vfu, off);
}

static inline void vg_os_wr32(struct vg_os *os, u32 off, u32 v)
{
	os->mmio++;
	vfu_bar0_wr32(os->vfu, off, v);
}

/* The doorbell: posted, as a guest's BAR writes are through QEMU (vfu_bar0_post32). */
static inline void vg_os_doorbell32(struct vg_os *os, u32 off, u32 v)
{
	os->mmio++;
	vfu_bar0_post32(os->vfu, off, v);
}

static inline u64 vg_os_mmio_count(struct vg_os *os) { return os->mmio; }

static inline u32 vg_os_vram_rd32(struct vg_os *os, u64 addr)
{
	return *(volatile u32 *)(os->bar1 + addr);
}

static inline void vg_os_vram_wr32(struct vg_os *os, u64 addr, u32 v)
{
	*(volatile u32 *)(os->bar1 + addr) = v;
}

static inline void vg_os_vram_wr64(struct vg_os *os, u64 addr, u64 v)
{
	*(volatile u64 *)(os->bar1 + addr) = v;
}

static inline void vg_os_vram_write(struct vg_os *os, u64 addr, const void *src, size_t len)
{
	memcpy((void *)(os->bar1 + addr), src, len);
}

static inline void vg_os_vram_zero(struct vg_os *os, u64 addr, size_t len)
{
	memset((void *)(os->bar1 + addr), 0, len);
}

static inline void *vg_os_zalloc(size_t n) { return calloc(1, n); }
static inline void vg_os_free(void *p) { free(p); }
static inline void vg_os_msleep(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}
static inline void vg_os_wmb(void) { __atomic_thread_fence(__ATOMIC_RELEASE); }
static inline void vg_os_rmb(void) { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
static inline void vg_os_mb(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* Single-threaded: the "interrupt path" runs in the thread that waits. */
typedef int vg_irqflags_t;
#define vg_os_lock(os, flags) ((void)(os), (void)(flags))
#define vg_os_unlock(os, flags) ((void)(os), (void)(flags))
#define vg_os_dev_lock(os) ((void)(os))
#define vg_os_dev_unlock(os) ((void)(os))

#define vg_os_info(os, fmt, ...) \
	do { if ((os)->verbose) fprintf(stderr, "vugpu-host: " fmt "\n", ##__VA_ARGS__); } while (0)
#define vg_os_warn(os, fmt, ...) fprintf(stderr, "vugpu-host: warning: " fmt "\n", ##__VA_ARGS__)
#define vg_os_err(os, fmt, ...) fprintf(stderr, "vugpu-host: error: " fmt "\n", ##__VA_ARGS__)
#define vg_os_dbg(os, fmt, ...) \
	do { if ((os)->verbose > 1) fprintf(stderr, "vugpu-host: " fmt "\n", ##__VA_ARGS__); } while (0)

#endif /* VG_OS_USER_H */
