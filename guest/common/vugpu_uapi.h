/* SPDX-License-Identifier: MIT */
/*
 * User-space interface of the vugpu Linux driver (/dev/vugpu<N>), shared with the runtime.
 *
 * Model (as in nouveau/Gdev): each open file owns at most one context = one GPU address space +
 * one channel. User space allocates VRAM buffers (mapped into the context's GPU VA and mmappable
 * through BAR1), pins its own pages as system-memory buffers (mapped with TARGET sysmem), builds
 * pushbuffers itself and hands them to SUBMIT, which copies them into the channel's ring,
 * appends a fence (semaphore release + interrupt) and rings the doorbell. WAIT sleeps until a
 * fence has passed or the channel has failed; a channel failure is sticky and reported by every
 * later SUBMIT/WAIT (EFAULT for an MMU fault, EIO for any other channel error), with the
 * details in struct vugpu_error.
 */
#ifndef VUGPU_UAPI_H
#define VUGPU_UAPI_H

#ifdef __KERNEL__
#include <linux/types.h>
#include <linux/ioctl.h>
#else
#include <linux/types.h>
#include <sys/ioctl.h>
#endif

/*
 * 2: PROG_INFO (program limits), struct vugpu_error.reason (WAIT grew by 8 bytes; the driver
 *    still answers version 1's smaller WAIT, VUGPU_IOC_WAIT_V1).
 * 3: VUGPU_MEM_NO_CPU (a buffer only the GPU uses: cleared with the next submission, not at
 *    allocation; not mmappable).
 */
#define VUGPU_UAPI_VERSION 3

struct vugpu_info {
	__u32 version;        /* VUGPU_UAPI_VERSION */
	__u32 boot0;          /* PMC_BOOT_0 */
	__u64 vram_size;      /* from PFB_PART_COUNT * PFB_PART_SIZE_MB */
	__u64 vram_used;      /* bytes allocated (driver structures + buffers), all contexts */
	__u32 chan_count;     /* PFIFO_CHAN_COUNT */
	__u32 channels_active;
	__u32 contexts;       /* open contexts */
	__u32 pv_mode;        /* 0 register path, 1 PV single, 2 PV batched */
	__u64 irq_count[4];   /* interrupts handled per MSI-X vector */
	__u64 mmio_count;     /* BAR0 accesses made by the driver */
	__u64 pv_calls;       /* hypercalls made (PV modes) */
	__u64 faults;         /* MMU faults seen */
	__u64 chan_errors;    /* channels that entered the error state */
};

/*
 * Program limits (hw-spec §3.10 PPROG), read by the driver once at probe, in register order.
 * version 0: the device runs no programs (every other field is then 0).
 */
struct vugpu_prog_info {
	__u32 version;             /* PROG_VERSION, 0x00010000 = programs v1.0 */
	__u32 max_module_bytes;
	__u32 max_bindings;
	__u32 max_push_bytes;
	__u32 max_spec_constants;
	__u32 max_wg_invocations;
	__u32 max_wg_size[3];
	__u32 max_shared_bytes;
	__u32 max_grid[3];
	__u32 max_buffer_bytes;
	__u32 buffer_align;
	__u32 subgroup_size;
	__u32 max_loop_iterations; /* 0 = unlimited */
	__u32 features;            /* VG_PROG_FEAT_* */
	__u32 reserved[6];         /* 0: room for later PPROG registers under the same ioctl */
};

#define VUGPU_CTX_VA_START 0x100000000ull /* first VA handed out (4 GiB) */

struct vugpu_ctx_create {
	__u32 flags;   /* 0 */
	__u32 chid;    /* out: the channel's id (diagnostics) */
	__u64 pd_addr; /* out: page-directory VRAM address (diagnostics) */
};

#define VUGPU_MEM_VRAM 0x0          /* device memory */
#define VUGPU_MEM_READ_ONLY 0x1     /* GPU may not write (PTE READ_ONLY) */
/*
 * uapi 3: the buffer is never mapped by the CPU (mmap refuses it), so the driver may defer its
 * zeroing to the context's next submission, ahead of the submitted work: allocating costs no
 * GPU round trip, and a run of allocations one submission (VRAM buffers only).
 */
#define VUGPU_MEM_NO_CPU 0x2

struct vugpu_mem_alloc {
	__u64 size;        /* in: bytes; out: the size allocated (rounded up to 4 KiB) */
	__u32 flags;       /* VUGPU_MEM_* */
	__u32 handle;      /* out */
	__u64 va;          /* out: GPU virtual address */
	__u64 mmap_offset; /* out: pass to mmap() to map the buffer through BAR1 */
};

struct vugpu_mem_free {
	__u32 handle;
	__u32 pad;
};

/* Pin user pages (page-aligned range) and map them into the context's GPU VA as system memory. */
struct vugpu_host_register {
	__u64 uaddr;
	__u64 size;
	__u32 flags;   /* VUGPU_MEM_READ_ONLY */
	__u32 handle;  /* out; freed with MEM_FREE */
	__u64 va;      /* out */
};

#define VUGPU_SUBMIT_MAX_DWORDS 16384 /* 64 KiB per submission */
/*
 * Raise an interrupt when this submission's fence passes: for work the caller is about to wait
 * on. Without it the fence is silent, and WAIT requests an interrupt only if it has to sleep
 * (one interrupt for a burst of launches instead of one per launch).
 */
#define VUGPU_SUBMIT_FENCE_IRQ 0x1

struct vugpu_submit {
	__u64 words;   /* user pointer to the pushbuffer (u32 array) */
	__u32 count;   /* dwords, 1 … VUGPU_SUBMIT_MAX_DWORDS */
	__u32 flags;   /* VUGPU_SUBMIT_* */
	__u64 seq;     /* out: fence sequence number of this submission */
};

/* Channel failure details (hw-spec §8). */
struct vugpu_error {
	__u32 code;        /* PFIFO_CHAN_ERR code, 0 = no error */
	__u32 info;        /* PFIFO_CHAN_ERR_INFO */
	__u64 fault_va;    /* MMU_FAULT_ADDR when fault_valid */
	__u32 fault_info;  /* MMU_FAULT_INFO (reason, access, unit) */
	__u32 fault_valid;
	__u64 seq_done;    /* last fence that passed */
	__u32 reason;      /* PFIFO_CHAN_ERR_REASON for BAD_PROGRAM (§6.3.6), else 0 (uapi 2) */
	__u32 pad;
};

struct vugpu_wait {
	__u64 seq;          /* wait until this fence has passed */
	__u32 timeout_ms;   /* 0 = poll */
	__u32 pad;
	struct vugpu_error err; /* out, always filled */
};

#define VUGPU_IOC_MAGIC 'V'
#define VUGPU_IOC_INFO _IOR(VUGPU_IOC_MAGIC, 0x00, struct vugpu_info)
#define VUGPU_IOC_CTX_CREATE _IOWR(VUGPU_IOC_MAGIC, 0x01, struct vugpu_ctx_create)
#define VUGPU_IOC_MEM_ALLOC _IOWR(VUGPU_IOC_MAGIC, 0x02, struct vugpu_mem_alloc)
#define VUGPU_IOC_MEM_FREE _IOW(VUGPU_IOC_MAGIC, 0x03, struct vugpu_mem_free)
#define VUGPU_IOC_HOST_REGISTER _IOWR(VUGPU_IOC_MAGIC, 0x04, struct vugpu_host_register)
#define VUGPU_IOC_SUBMIT _IOWR(VUGPU_IOC_MAGIC, 0x05, struct vugpu_submit)
#define VUGPU_IOC_WAIT _IOWR(VUGPU_IOC_MAGIC, 0x06, struct vugpu_wait)
#define VUGPU_IOC_PROG_INFO _IOR(VUGPU_IOC_MAGIC, 0x07, struct vugpu_prog_info)
/* uapi 1's WAIT (struct vugpu_wait without error.reason/pad: 48 bytes), still answered */
#define VUGPU_IOC_WAIT_V1 _IOC(_IOC_READ | _IOC_WRITE, VUGPU_IOC_MAGIC, 0x06, 48)

#endif /* VUGPU_UAPI_H */
