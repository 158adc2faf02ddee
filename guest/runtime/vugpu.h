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
 *
 * Programs (hw-spec §6.3: SPIR-V compute modules the guest brings, cuModuleLoadData-style):
 *
 *   vgProgram p;  vgProgramLoad(ctx, spirv, bytes, &p);     // copied into VRAM, like a buffer
 *   vgBinding b[] = {{a, bytes, VG_BINDING_READ_ONLY}, {c, bytes, 0}};   // set 0, binding i
 *   vgLaunchProgram(ctx, p, 0, grid, b, 2, &push, sizeof(push), NULL, 0, 0);
 *   vgSynchronize(ctx);   // VG_ERROR_INVALID_PROGRAM etc.; vgGetChannelError() has code + reason
 *
 * The device checks modules and launches (limits: vgProgramLimits); the runtime only checks
 * what the methods cannot express, so a refused launch comes back as the device's error.
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
	VG_ERROR_INVALID_PROGRAM = 200,   /* BAD_PROGRAM: the device refused the module or launch */
	VG_ERROR_INVALID_CONTEXT = 201,
	VG_ERROR_INVALID_HANDLE = 400,
	VG_ERROR_NOT_READY = 600,
	VG_ERROR_ILLEGAL_ADDRESS = 700,   /* MMU fault */
	VG_ERROR_LAUNCH_TIMEOUT = 702,    /* device watchdog cancelled the job */
	VG_ERROR_LAUNCH_FAILED = 719,     /* any other channel error */
	VG_ERROR_KERNEL = 720,            /* the kernel rejected its parameters/buffers */
	VG_ERROR_PROGRAM_LOOP_LIMIT = 721, /* a program reached the device's loop limit and was stopped */
	VG_ERROR_TIMEOUT = 800,           /* the host gave up waiting */
	VG_ERROR_NOT_SUPPORTED = 801,     /* the device runs no programs (PROG_VERSION 0) */
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

/* The channel error behind a sticky VG_ERROR_* (hw-spec §8.2): code 0 when there was none. */
typedef struct vgChannelError {
	uint32_t code;            /* PFIFO_CHAN_ERR (16 MMU_FAULT, 18 BAD_PROGRAM, 19 PROGRAM_LOOP_LIMIT, …) */
	uint32_t reason;          /* PFIFO_CHAN_ERR_REASON for BAD_PROGRAM (hw-spec §6.3.6), else 0 */
	uint32_t info;            /* PFIFO_CHAN_ERR_INFO: gp_get 31:16, subchannel 15:13, method 11:0 */
	uint32_t fault_valid;
	uint64_t fault_va;
	uint32_t fault_info;      /* MMU_FAULT_INFO: reason 7:0, write 8, unit 14:12 */
} vgChannelError;

/* Program limits (hw-spec §3.10 PPROG). version 0: no programs. */
typedef struct vgProgLimits {
	uint32_t version;
	uint32_t max_module_bytes;
	uint32_t max_bindings;
	uint32_t max_push_bytes;
	uint32_t max_spec_constants;
	uint32_t max_wg_invocations;
	uint32_t max_wg_size[3];
	uint32_t max_shared_bytes;
	uint32_t max_grid[3];
	uint32_t max_buffer_bytes;
	uint32_t buffer_align;
	uint32_t subgroup_size;
	uint32_t max_loop_iterations;  /* back-edges per subgroup per launch; 0 = unlimited */
	uint32_t features;             /* bit 0 FLOAT64, 1 INT64, 2 FLOAT16, 3 INT8, 4 INT16, 5 SUBGROUP, 6 INT64_ATOMICS */
} vgProgLimits;

typedef struct vgProgramRec *vgProgram;

/* Storage buffer `i` of a program launch = descriptor set 0, binding i. */
typedef struct vgBinding {
	vgDevicePtr ptr;          /* a multiple of buffer_align */
	size_t bytes;             /* ≥ 1, ≤ max_buffer_bytes */
	unsigned int flags;       /* VG_BINDING_READ_ONLY */
} vgBinding;
/* translated for reading only; the module must declare the binding NonWritable */
#define VG_BINDING_READ_ONLY 0x1u
/* the device may keep the buffer's VRAM on the GPU between launches (hw-spec §6.3, programs
 * v1.1): its CPU writes through BAR1 may then go unseen; write it through the GPU (vgMemcpy*) */
#define VG_BINDING_DEVICE_CACHED 0x2u

/* VkSpecializationInfo entry: OpSpecConstant with SpecId `id` takes `value` (its 32 bits). */
typedef struct vgSpecConstant {
	uint32_t id;
	uint32_t value;
} vgSpecConstant;

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
/* Hand queued launches to the device now (they are otherwise submitted together, at the next
 * copy, vgSynchronize, free, or when the queue is full); does not wait. */
vgResult vgFlush(vgContext ctx);

vgResult vgProgramLimits(vgContext ctx, vgProgLimits *limits);
/* Copy a SPIR-V module (words, little-endian) into GPU memory. The device checks it at launch. */
vgResult vgProgramLoad(vgContext ctx, const void *spirv, size_t bytes, vgProgram *prog);
/* Waits until no submitted launch can still read it, then frees it. */
vgResult vgProgramUnload(vgContext ctx, vgProgram prog);
/*
 * Asynchronous, like vgLaunch: run entry point `entry` (index among the module's GLCompute entry
 * points) over grid[0]×grid[1]×grid[2] workgroups (NULL: 1×1×1). push: the push-constant block
 * (offset 0); spec: specialization constants. Errors of the launch come back from a later
 * vgSynchronize (VG_ERROR_INVALID_PROGRAM, VG_ERROR_PROGRAM_LOOP_LIMIT, VG_ERROR_LAUNCH_TIMEOUT,
 * VG_ERROR_ILLEGAL_ADDRESS), with details in vgGetErrorDetail / vgGetChannelError.
 * flags: 0 (reserved). push + spec: at most 4096 bytes together.
 */
vgResult vgLaunchProgram(vgContext ctx, vgProgram prog, unsigned int entry, const unsigned int grid[3],
			 const vgBinding *bindings, unsigned int nbindings, const void *push, size_t push_bytes,
			 const vgSpecConstant *spec, unsigned int nspec, unsigned int flags);

/* The channel error recorded with the context's sticky error (all zero if none). */
vgResult vgGetChannelError(vgContext ctx, vgChannelError *err);

const char *vgGetErrorName(vgResult r);
const char *vgGetErrorString(vgResult r);
/* Details of the last error on ctx (fault address, channel error code, errno), or "". */
const char *vgGetErrorDetail(vgContext ctx);


/*
 * Asynchronous work for drivers layered on the runtime (the Vulkan driver in guest/vulkan): a
 * command buffer's launches and copies queue together and reach the device as one submission.
 */
/* The GPU VA of pinned host memory from vgMemAllocHost (cuMemHostGetDevicePointer). */
vgResult vgMemHostGetDevicePointer(vgContext ctx, vgDevicePtr *dptr, void *host);
/* Queue a copy engine copy between two GPU VAs of this context's allocations (VRAM or pinned
 * host memory) behind the queued launches; like vgLaunch it returns once queued, in order with them. */
vgResult vgMemcpyAsync(vgContext ctx, vgDevicePtr dst, vgDevicePtr src, size_t bytes);
/* Submit what is queued (one doorbell) and return a fence that passes once everything queued or
 * submitted so far has completed. */
vgResult vgFlushFence(vgContext ctx, uint64_t *fence);
/* Wait up to timeout_ms (0: only look) for a fence of vgFlushFence: VG_SUCCESS once it passed,
 * VG_ERROR_TIMEOUT (not sticky) while it has not, or the context's channel error. */
vgResult vgFenceWait(vgContext ctx, uint64_t fence, unsigned int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* VUGPU_H */
