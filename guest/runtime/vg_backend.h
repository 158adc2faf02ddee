/* SPDX-License-Identifier: MIT */
/*
 * What the runtime needs from a driver: one context (address space + channel), VRAM buffers
 * with a CPU mapping through BAR1, pinned host buffers, pushbuffer submission with a fence per
 * submission, and fence waits that report channel failures. Two implementations: the Linux
 * driver's ioctls (kmod) and the in-process user-space driver over vfio-user (host).
 * All functions return 0 or a negative errno.
 */
#ifndef VG_BACKEND_H
#define VG_BACKEND_H

#include <stdint.h>
#include <stddef.h>
#include "vugpu_uapi.h"

struct vg_backend_ctx;

struct vg_backend {
	const char *name;
	/* driver bring-up for the process (vgInit); the Linux driver did it at module load */
	int (*init)(void);
	int (*open)(struct vg_backend_ctx **out);
	void (*close)(struct vg_backend_ctx *b);
	int (*info)(struct vg_backend_ctx *b, struct vugpu_info *info);
	/* PPROG limits read by the driver at probe; version 0 when the device (or an older driver)
	 * runs no programs */
	int (*prog_info)(struct vg_backend_ctx *b, struct vugpu_prog_info *info);
	/* VRAM: with cpu_access, *cpu is a BAR1 mapping of the buffer (write-combining), NULL if not
	 * mappable; without, the buffer is GPU-only (VUGPU_MEM_NO_CPU: the driver may clear it with
	 * the next submission instead of at once) and *cpu is NULL */
	int (*vram_alloc)(struct vg_backend_ctx *b, uint64_t size, int cpu_access, uint32_t *handle, uint64_t *va,
			  void **cpu);
	/* pinned host memory, mapped into the GPU VA as system memory */
	int (*host_alloc)(struct vg_backend_ctx *b, uint64_t size, uint32_t *handle, uint64_t *va, void **cpu);
	int (*mem_free)(struct vg_backend_ctx *b, uint32_t handle, void *cpu, uint64_t size, int host);
	/* drop the CPU mapping of a buffer whose GPU side goes away with close (b may be NULL) */
	void (*unmap_cpu)(struct vg_backend_ctx *b, void *cpu, uint64_t size, int host);
	/* flags: VUGPU_SUBMIT_FENCE_IRQ for work the caller will wait on right away */
	int (*submit)(struct vg_backend_ctx *b, const uint32_t *words, uint32_t count, uint32_t flags, uint64_t *seq);
	/* 0 when the fence passed; -ETIMEDOUT, -EFAULT (MMU fault), -EIO (channel error); err always filled */
	int (*wait)(struct vg_backend_ctx *b, uint64_t seq, uint32_t timeout_ms, struct vugpu_error *err);
};

extern const struct vg_backend vg_backend_kmod;
extern const struct vg_backend vg_backend_host;

#endif /* VG_BACKEND_H */
