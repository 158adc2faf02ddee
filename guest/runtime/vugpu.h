/* SPDX-License-Identifier: MIT */
/*
 * vugpu runtime: a small CUDA-driver-like API for the vugpu GPU.
 *
 *   vgInit(0);
 *   vgContext ctx;  vgCtxCreate(&ctx);
 *   vgDevicePtr a;  vgMemAlloc(ctx, &a, bytes);
 *   vgMemcpyHtoD(ctx, a, host, bytes);
 *   vgBuffer bufs[] = {{a, bytes}, ...};
 *   vgLaunch(ctx, VG_KERNEL_MADD, grid, &params, sizeof(params), bufs, 3);
 *   vgSynchronize(ctx);
 *   vgMemcpyDtoH(ctx, host, a, bytes);
 *   vgCtxDestroy(ctx);
 *
 * Backends (chosen by vgInit): "kmod" drives /dev/vugpu<N> of the Linux driver (guest/driver);
 * "host" is a user-space driver that reaches a vugpu server directly as a vfio-user client
 * (the native twin: same benchmarks, no VM). VUGPU_SOCKET=<path> in the environment selects
 * "host"; VUGPU_DEV=<path> names the device node for "kmod" (default /dev/vugpu0).
 *
 * Copies go through the GPU's copy engine (class 0x90b5), as a real driver does: pinned memory
 * (vgMemAllocHost) is copied directly by DMA; pageable memory goes through two pinned staging
 * buffers, pipelined (the CPU fills one while the engine drains the other). See docs/guest.md.
 *
 * Errors are sticky per context once the channel has failed (MMU fault, bad launch, watchdog):
 * every later call returns the same code, and vgGetErrorDetail() describes it.
 */
#ifndef VUGPU_H
#define VUGPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vgResult {
	VG_SUCCESS = 0,
	VG_ERROR_INVALID_VALUE = 1,
	VG_ERROR_OUT_OF_MEMORY = 2,
	VG_ERROR_NOT_INITIALIZED = 3,
	VG_ERROR_NO_DEVICE = 100,
	VG_ERROR_INVALID_CONTEXT = 201,
	VG_ERROR_INVALID_HANDLE = 400,
	VG_ERROR_NOT_READY = 600,
	VG_ERROR_ILLEGAL_ADDRESS = 700,   /* MMU fault */
	VG_ERROR_LAUNCH_TIMEOUT = 702,    /* device watchdog cancelled the job */
	VG_ERROR_LAUNCH_FAILED = 719,     /* any other channel error */
	VG_ERROR_KERNEL = 720,            /* the kernel rejected its parameters/buffers */
	VG_ERROR_TIMEOUT = 800,           /* the host gave up waiting */
	VG_ERROR_OS = 999,                /* unexpected system error (see vgGetErrorDetail) */
} vgResult;

typedef uint64_t vgDevicePtr;           /* GPU virtual address */
typedef struct vgContextRec *vgContext;

typedef struct vgBuffer {
	vgDevicePtr ptr;
	size_t bytes;
} vgBuffer;

/* Kernel ids (docs/kernels.md) */
enum {
	VG_KERNEL_NOP = 0, VG_KERNEL_LOOP = 1, VG_KERNEL_MADD = 2, VG_KERNEL_FMADD = 3,
	VG_KERNEL_MMUL = 4, VG_KERNEL_FMMUL = 5, VG_KERNEL_BACKPROP_FORWARD = 6,
	VG_KERNEL_BACKPROP_ADJUST = 7, VG_KERNEL_BFS = 8, VG_KERNEL_HOTSPOT = 9,
	VG_KERNEL_LUD_DIAGONAL = 10, VG_KERNEL_LUD_PERIMETER = 11, VG_KERNEL_LUD_INTERNAL = 12,
	VG_KERNEL_SRAD1 = 13, VG_KERNEL_SRAD2 = 14, VG_KERNEL_MEMSET = 15,
};

typedef struct vgDeviceInfo {
	char backend[8];          /* "kmod" or "host" */
	uint64_t vram_size;
	uint64_t vram_used;
	uint32_t channels;
	uint32_t pv_mode;
	uint64_t mmio_count;      /* BAR0 accesses by the driver so far */
	uint64_t irq_count[4];
	uint64_t pv_calls;
} vgDeviceInfo;

/* Driver initialisation for this process (host backend: connect and bring the device up). */
vgResult vgInit(unsigned int flags);
vgResult vgCtxCreate(vgContext *ctx);
vgResult vgCtxDestroy(vgContext ctx);
vgResult vgGetDeviceInfo(vgContext ctx, vgDeviceInfo *info);

vgResult vgMemAlloc(vgContext ctx, vgDevicePtr *dptr, size_t bytes);
vgResult vgMemFree(vgContext ctx, vgDevicePtr dptr);
/* Pinned host memory, GPU-accessible (page-locked); copies from/to it need no staging. */
vgResult vgMemAllocHost(vgContext ctx, void **ptr, size_t bytes);
vgResult vgMemFreeHost(vgContext ctx, void *ptr);

vgResult vgMemcpyHtoD(vgContext ctx, vgDevicePtr dst, const void *src, size_t bytes);
vgResult vgMemcpyDtoH(vgContext ctx, void *dst, vgDevicePtr src, size_t bytes);
vgResult vgMemcpyDtoD(vgContext ctx, vgDevicePtr dst, vgDevicePtr src, size_t bytes);

/* Asynchronous: returns once the launch is queued. params: at most 4096 bytes. */
vgResult vgLaunch(vgContext ctx, unsigned int kernel, const unsigned int grid[3], const void *params,
		  size_t param_bytes, const vgBuffer *buffers, unsigned int nbuffers);
vgResult vgSynchronize(vgContext ctx);

const char *vgGetErrorName(vgResult r);
const char *vgGetErrorString(vgResult r);
/* Details of the last error on ctx (fault address, channel error code, errno), or "". */
const char *vgGetErrorDetail(vgContext ctx);

#ifdef __cplusplus
}
#endif

#endif /* VUGPU_H */
