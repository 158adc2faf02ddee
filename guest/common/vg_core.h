/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * vugpu driver core: everything a driver for docs/hw-spec.md does that does not depend on the
 * operating system. The Linux module (guest/driver) and the user-space host backend of the
 * runtime (guest/runtime, the "native twin") compile this same code over their own platform
 * layer (vg_os.h).
 *
 * Objects:
 *   vg_dev  one GPU: identity, VRAM allocator, channel table, runlist, interrupt decoding.
 *   vg_vm   one GPU address space: page directory + small-page tables, VA allocator. All
 *           updates go through struct vg_vm_ops (register path, or PV hypercalls, §9).
 *   vg_ctx  one context: an address space + one channel (instance block, USERD, GPFIFO and
 *           pushbuffer ring in VRAM, fence semaphore), its buffers and its error state.
 *
 * Locking: calls on one context must be serialised by the caller (the Linux module holds a
 * per-file mutex). The core takes the platform's device lock (a mutex) itself around
 * device-global state and multi-register sequences (VRAM allocator, channel table, runlist,
 * MMU flush, preempt, the PV slot), never while sleeping for the GPU. vg_irq() takes the
 * interrupt lock (a spinlock) around the channel table and the contexts' error state.
 */
#ifndef VG_CORE_H
#define VG_CORE_H

#include "vg_os.h"
#include "vugpu_hw.h"
#include "vugpu_uapi.h"

struct vg_dev;
struct vg_vm;
struct vg_ctx;
struct vg_bo;

/* ---- range allocator (VRAM and VA) ---- */
struct vg_range {
	u64 start, size;
	struct vg_range *next;
};

struct vg_ralloc {
	struct vg_range *free; /* sorted by start, coalesced */
	u64 base, size, used;
};

int vg_ralloc_init(struct vg_ralloc *a, u64 base, u64 size);
void vg_ralloc_fini(struct vg_ralloc *a);
int vg_ralloc_alloc(struct vg_ralloc *a, u64 size, u64 align, u64 *out);
void vg_ralloc_free(struct vg_ralloc *a, u64 start, u64 size);

/* ---- address-space operations: the one interface page-table updates go through ---- */
enum vg_pv_mode { VG_PV_OFF = 0, VG_PV_SINGLE = 1, VG_PV_BATCH = 2 };

struct vg_vm_ops {
	const char *name;
	/* VRAM allocation for everything the driver and its users put in VRAM. */
	int (*alloc)(struct vg_dev *d, u64 size, u64 align, u64 *addr);
	void (*free)(struct vg_dev *d, u64 addr, u64 size);
	/* The page directory vm->pd_addr was just allocated: make it a valid, empty PD. */
	int (*set_pgd)(struct vg_vm *vm);
	/*
	 * Map count pages at va: page i goes to addrs[i] (or base + i*page if addrs is NULL);
	 * pte_flags = target + READ_ONLY bits (PRESENT is added). Pages are 4 KiB, or 128 KiB at
	 * VAs of the large-page region (VG_LARGE_VA_START on; only with large_pages).
	 */
	int (*map)(struct vg_vm *vm, u64 va, u32 count, const u64 *addrs, u64 base, u64 pte_flags);
	int (*unmap)(struct vg_vm *vm, u64 va, u32 count);
	/* Make preceding map/unmap calls visible to the device (TLB flush). */
	int (*flush)(struct vg_vm *vm);
	/*
	 * Optional, one call each (PV 3): allocate count 4 KiB pages of VRAM aligned to align and
	 * map them at va, visible at once (*addr = the VRAM address); unmap and free them. Both
	 * return -EOPNOTSUPP where the path cannot: the core then uses alloc + map, unmap + free.
	 */
	int (*alloc_map)(struct vg_vm *vm, u64 va, u32 count, u64 align, u64 pte_flags, u64 *addr);
	int (*unmap_free)(struct vg_vm *vm, u64 va, u32 count, u64 addr);
	/*
	 * Optional, one call each (PV 4): allocate vm->alloc_bytes of VRAM and make its start the
	 * space's empty PD (vm->pd_addr); free the space with its PD allocation and every buffer
	 * alloc_map made in it. -EOPNOTSUPP where the path cannot: the core then does it in steps.
	 */
	int (*space_new)(struct vg_vm *vm);
	int (*space_free)(struct vg_vm *vm);
	/* Release the page tables (the PD itself is freed by the core). */
	void (*fini)(struct vg_vm *vm);
	/* Unmap every buffer before the VM goes away (PV: the host owns the tables). */
	bool unmap_on_destroy;
	/* The VAs from VG_LARGE_VA_START on are mapped with 128 KiB pages (hw-spec §7). */
	bool large_pages;
};

/*
 * The GPU VA space of a context: 4 KiB pages in [VUGPU_CTX_VA_START, VG_LARGE_VA_START), 128 KiB
 * pages above (one page size per 128 MiB PDE, hw-spec §7: the halves never share a PDE). VRAM
 * buffers of VG_LARGE_MIN_BYTES or more go to the large half where the path supports it: a
 * 64 MiB buffer is 512 PTEs in one 8 KiB table instead of 16384 in a 256 KiB one.
 */
#define VG_LARGE_VA_START (1ull << 39)
#define VG_LARGE_MIN_BYTES (1u << 20)

extern const struct vg_vm_ops vg_vm_ops_reg;
extern const struct vg_vm_ops vg_vm_ops_pv;

struct vg_vm {
	struct vg_dev *dev;
	u64 pd_addr;
	u64 alloc_bytes;      /* the PD's VRAM allocation: the PD, then what vg_vm_init's caller asked for */
	u64 *pt_addr;         /* VRAM address of the small-page table per PDE, 0 = none (register path) */
	struct vg_ralloc va;
	struct vg_ralloc va_large;  /* [VG_LARGE_VA_START, 2^40) */
	u32 pt_count;
	/* mappings changed since the last flush: the core flushes before its next doorbell (and at
	 * once after unmapping), so a run of allocations costs one flush, and in a mediated VM one
	 * shadow rebuild */
	bool dirty;
};

/* ---- buffers ---- */
struct vg_bo {
	struct vg_bo *next;
	u32 handle;
	u32 flags;            /* VUGPU_MEM_* */
	bool sysmem;
	bool internal;        /* driver structure or a buffer being retired: not visible to users */
	u64 size;             /* bytes, multiple of 4 KiB */
	u64 va;
	u64 va_size;          /* size + guard page */
	u64 vram_addr;        /* VRAM buffers */
	void *os_priv;        /* platform data of sysmem buffers (pinned pages) */
	/* VUGPU_MEM_NO_CPU buffers: zeroed by a MEMSET the next submission carries ahead of its work */
	struct vg_bo *clear_next; /* on the context's list of clears not yet submitted */
	bool clear_pending;
	u64 clear_seq;        /* submission that carried the clear (0: cleared at allocation) */
	bool large;           /* mapped with 128 KiB pages (size and VRAM address 128 KiB aligned) */
	bool space_owned;     /* allocated by alloc_map: freed with the space by space_free (PV 4) */
};

/* ---- context (address space + channel) ---- */
#define VG_GPFIFO_ENTRIES 1024u
#define VG_PB_SIZE (512u * 1024u)
#define VG_GPFIFO_BYTES (VG_GPFIFO_ENTRIES * VG_GPFIFO_ENTRY_SIZE) /* page multiple: the pushbuffer follows it */
#define VG_FENCE_DWORDS 5u
#define VG_USERD_OFFSET 0x800 /* USERD lives in the instance block's page, after its fields */
#define VG_SEM_PARAM_OFFSET 0x100 /* parameter block of driver-issued launches (buffer clears) */
#define VG_WAIT_RETIRE_MS 20000   /* longer than the engine's job watchdog */
#define VG_MAX_DEFERRED_CLEARS 32 /* NO_CPU buffers whose clear may wait for the next submission */

struct vg_ctx {
	struct vg_dev *dev;
	struct vg_vm vm;
	int chid;             /* -1 until bound */
	bool bound;
	u64 inst_addr, userd_addr;
	u64 gpfifo_addr, gpfifo_va;
	u64 pb_addr, pb_va;
	u64 sem_addr, sem_va;
	u32 gp_put;           /* next GPFIFO slot */
	u32 pb_put;           /* next free pushbuffer byte */
	u32 *gp_pb_start;     /* per GPFIFO slot: pushbuffer offset of its allocation */
	u64 *gp_seq;          /* per GPFIFO slot: fence sequence number */
	u64 seq;              /* last sequence number submitted */
	u64 irq_armed_seq;    /* an interrupt is due once every fence up to this one has passed */
	/* error state: written by vg_irq under the platform lock */
	u32 err_code, err_info;
	u32 err_reason;       /* PFIFO_CHAN_ERR_REASON when err_code is BAD_PROGRAM */
	bool err_reported;    /* the error was returned to a caller (ENGINE_LOST: recover next) */
	u64 fault_va;
	u32 fault_info;
	bool fault_valid;
	struct vg_bo *bos;
	struct vg_bo *clears; /* deferred clears, newest first (at most VG_MAX_DEFERRED_CLEARS) */
	u32 nclears;
	bool bind_classes;    /* the next submission binds the classes first (new or recovered) */
	u32 next_handle;
	u64 vram_bytes;       /* VRAM owned by this context (structures + buffers) */
	void *os_priv;        /* platform data (wait queue) */
};

/* PV area the platforms register: 16 slots (64 KiB), so one PV 2 MAP_RANGE carries 8184 PTEs */
#define VG_PV_AREA_SLOTS_WANT 16u
#define VG_PV_AREA_BYTES (VG_PV_AREA_SLOTS_WANT * VG_PV_SLOT_SIZE)

/* ---- device ---- */
struct vg_dev {
	struct vg_os os;
	/* set by the platform before vg_dev_init */
	int pv_request;                  /* enum vg_pv_mode asked for */
	void *pv_area;                   /* 4 KiB slots of coherent system memory (PV only) */
	u64 pv_area_bus;
	u32 pv_area_slots;               /* slots in pv_area (0 = 1); PV 2 calls span them all */
	/* release a sysmem buffer's pinned pages (called once the device can no longer reach them) */
	void (*bo_release)(struct vg_dev *d, struct vg_bo *bo);
	/* wake the waiters of a context (fence passed or channel failed); called under the lock */
	void (*wake)(struct vg_ctx *c);
	/* sleep until fence seq of c passed (0), the channel failed (-EFAULT/-EIO), timeout
	 * (-ETIMEDOUT) or a fatal signal (-EINTR); used for buffer clears and deferred frees */
	int (*wait)(struct vg_ctx *c, u64 seq, unsigned int timeout_ms);

	/* discovered */
	u32 boot0;
	u64 vram_size;
	u32 chan_count;
	struct vugpu_prog_info prog;     /* PPROG limits (hw-spec §3.10), read once at probe */
	int pv_mode;                     /* enum vg_pv_mode in use */
	u32 pv_version;                  /* PV_VERSION (2: MAP_RANGE/UNMAP_RANGE) */
	const struct vg_vm_ops *vm_ops;

	struct vg_ralloc vram;           /* register-path allocator */
	u64 vram_used;
	struct vg_ctx *chans[VG_MAX_CHANNELS];
	u32 contexts, channels_active;
	u32 address_spaces;              /* live vg_vm (device lock): 1 lets a flush be one write */
	u64 runlist_addr[2];
	int runlist_cur;
	u64 irq_count[VG_NUM_VECTORS];
	u64 pv_calls;
	u64 faults, chan_errors;
};

int vg_dev_init(struct vg_dev *d);
void vg_dev_fini(struct vg_dev *d);
void vg_dev_info(struct vg_dev *d, struct vugpu_info *out);
void vg_dev_prog_info(struct vg_dev *d, struct vugpu_prog_info *out);

/* Interrupt service for one MSI-X vector: decode, acknowledge, record errors, wake contexts. */
void vg_irq(struct vg_dev *d, unsigned int vector);

/* os_priv is stored in the context before its channel can raise interrupts (wake uses it). */
int vg_ctx_create(struct vg_dev *d, void *os_priv, struct vg_ctx **out);
void vg_ctx_destroy(struct vg_ctx *c);

int vg_ctx_vram_alloc(struct vg_ctx *c, u64 size, u32 flags, struct vg_bo **out);
/* Map already pinned and DMA-mapped system-memory pages (bus addresses, one per 4 KiB page). */
int vg_ctx_sys_map(struct vg_ctx *c, const u64 *bus, u32 pages, u32 flags, void *os_priv,
		   struct vg_bo **out);
struct vg_bo *vg_ctx_bo_find(struct vg_ctx *c, u32 handle);
struct vg_bo *vg_ctx_bo_find_vram(struct vg_ctx *c, u64 vram_addr, u64 size);
/* Unmap, wait until no submitted work can still use it, release. Returns the wait's error (the
 * buffer is then retired at context destruction instead). */
int vg_ctx_bo_free(struct vg_ctx *c, struct vg_bo *bo);

/*
 * Copy a pushbuffer into the ring, append the fence segment, ring the doorbell. flags:
 * VUGPU_SUBMIT_FENCE_IRQ. Returns 0 and *seq, -EBUSY with *seq = the fence to wait for when the
 * ring is full, -EFAULT/-EIO when the channel has failed, -EINVAL for a bad size or flag.
 */
int vg_ctx_submit(struct vg_ctx *c, const u32 *words, u32 count, u32 flags, u64 *seq);
/*
 * A waiter is about to sleep for fence seq: make sure an interrupt will come once it has
 * passed (appends a NON_STALL_INTERRUPT unless one is already due). Every platform wait that
 * sleeps calls this first. It does nothing either when the fence (or an error) is already there:
 * then no interrupt will come, so the caller must check its fence again after this call and
 * before it sleeps (wait_event does; a poll loop must do it by hand), or it sleeps out its
 * timeout.
 */
int vg_ctx_arm_irq(struct vg_ctx *c, u64 seq);
bool vg_ctx_seq_done(struct vg_ctx *c, u64 seq);
u64 vg_ctx_seq_completed(struct vg_ctx *c);
/* 0, or -EFAULT (MMU fault) / -EIO (other channel error); fills *err if not NULL. An error
 * returned here counts as reported (ENGINE_LOST is reported once). */
int vg_ctx_status(struct vg_ctx *c, struct vugpu_error *err);
/* The same answer and *err, without counting anything as reported: for a caller that only
 * describes the state (a wait whose fence passed must leave the error to the work it concerns). */
int vg_ctx_error(struct vg_ctx *c, struct vugpu_error *err);
/* Slow path for waiters that timed out: read the channel state from the device. */
int vg_ctx_poll_error(struct vg_ctx *c);

#endif /* VG_CORE_H */
