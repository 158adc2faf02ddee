// SPDX-License-Identifier: MIT
/*
 * The vugpu runtime (vugpu.h) over a driver backend (vg_backend.h): allocations, copies through
 * the copy engine, kernel launches through the compute class, synchronisation and errors.
 *
 * Copies (docs/guest.md discusses the choice): the copy engine moves the bytes, as CUDA does.
 * Pinned host memory (vgMemAllocHost) is copied directly. Pageable memory is staged through two
 * pinned buffers: HtoD fills one while the engine drains the other; DtoH keeps two chunks in
 * flight and copies each out as it lands. The staging buffers are created on the first pageable
 * copy, sized to it (64 KiB to 4 MiB, a power of two), and grown when a larger copy comes. VUGPU_COPY=bar1 switches to CPU copies through the
 * BAR1 mapping instead (for comparison; reads of BAR1 are slow under TCG).
 *
 * Kernel parameters are written into a ring of 64 parameter slots (4 KiB each) in pinned host
 * memory (zeroed by the OS, so it needs no clear on the GPU and no BAR1 mapping); a slot is
 * reused once the launch that used it has completed. Buffers of vgMemAlloc are GPU-only unless
 * VUGPU_COPY=bar1 needs their CPU mapping: the driver then clears them with the next submission
 * instead of one GPU round trip each.
 *
 * Launches are queued in the context (up to BATCH_LAUNCHES of them) and go to the driver as one
 * submission — one doorbell — when the program next needs the GPU to catch up: a copy (the
 * launches ride in front of it), vgSynchronize, a free, or a full queue. Until then the GPU
 * would only be waiting for them anyway: nothing can observe a launch before one of those.
 *
 * Copies ask for an interrupt on their fence (the runtime waits for them at once); launches do
 * not, and vgSynchronize lets the driver request one only if it has to sleep.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "vugpu.h"
#include "vg_backend.h"
#include "vugpu_hw.h"
#include "vugpu_names.h"

#define STAGING_MAX (4u << 20)
#define STAGING_MIN (64u << 10)
#define PARAM_SLOTS 64u
#define PARAM_SLOT_SIZE 4096u
#define COPY_MAX_LINE (1u << 30)
#define PB_WORDS 512u
#define BATCH_WORDS 4096u    /* ≤ VUGPU_SUBMIT_MAX_DWORDS */
#define BATCH_LAUNCHES 32u   /* < PARAM_SLOTS: a parameter slot being reused is never in the queue */

struct vg_alloc {
	struct vg_alloc *next;
	vgDevicePtr va;
	uint64_t size;
	uint32_t handle;
	void *cpu;
	int host;
	int program;          /* holds a program's module: not a vgMemFree target */
};

struct vgProgramRec {
	struct vgProgramRec *next;
	vgContext ctx;
	struct vg_alloc *mem;
	uint32_t bytes;
};

struct vgContextRec {
	const struct vg_backend *be;
	struct vg_backend_ctx *b;
	struct vg_alloc *allocs;
	uint64_t last_seq;
	vgResult sticky;
	char detail[320];
	struct vg_alloc *params;
	uint64_t param_seq[PARAM_SLOTS];
	unsigned int param_next;
	struct vg_alloc *staging[2];
	uint64_t staging_seq[2];
	uint32_t staging_size;
	int bar1_copies;
	uint32_t timeout_ms;
	struct vugpu_error chan_err;  /* the channel error behind `sticky` */
	struct vugpu_prog_info prog_info;
	int prog_info_valid;
	struct vgProgramRec *programs;
	/* launches queued for the next submission */
	uint32_t batch[BATCH_WORDS];
	uint32_t batch_n;
	unsigned int batch_slot[BATCH_LAUNCHES];
	unsigned int batch_launches;
};

static const struct vg_backend *g_backend;

/* ---- errors ---- */

static const struct vg_result_info {
	vgResult r;
	const char *name, *text;
} results[] = {
	{ VG_SUCCESS, "VG_SUCCESS", "no error" },
	{ VG_ERROR_INVALID_VALUE, "VG_ERROR_INVALID_VALUE", "invalid argument" },
	{ VG_ERROR_OUT_OF_MEMORY, "VG_ERROR_OUT_OF_MEMORY", "out of memory" },
	{ VG_ERROR_NOT_INITIALIZED, "VG_ERROR_NOT_INITIALIZED", "vgInit has not been called" },
	{ VG_ERROR_NO_DEVICE, "VG_ERROR_NO_DEVICE", "no vugpu device (driver not loaded, or VUGPU_SOCKET unreachable)" },
	{ VG_ERROR_INVALID_PROGRAM, "VG_ERROR_INVALID_PROGRAM", "the device refused the program or its launch (reason in the detail)" },
	{ VG_ERROR_INVALID_CONTEXT, "VG_ERROR_INVALID_CONTEXT", "invalid context" },
	{ VG_ERROR_INVALID_HANDLE, "VG_ERROR_INVALID_HANDLE", "pointer is not an allocation of this context" },
	{ VG_ERROR_NOT_READY, "VG_ERROR_NOT_READY", "work still in progress" },
	{ VG_ERROR_ILLEGAL_ADDRESS, "VG_ERROR_ILLEGAL_ADDRESS", "the GPU faulted on an address (MMU fault)" },
	{ VG_ERROR_LAUNCH_TIMEOUT, "VG_ERROR_LAUNCH_TIMEOUT", "a job ran past the time the device allows (its watchdog, or a timeslice while another VM waited) and was stopped" },
	{ VG_ERROR_LAUNCH_FAILED, "VG_ERROR_LAUNCH_FAILED", "the channel failed (bad command, launch or instance)" },
	{ VG_ERROR_KERNEL, "VG_ERROR_KERNEL", "the kernel rejected its parameters or buffers" },
	{ VG_ERROR_PROGRAM_LOOP_LIMIT, "VG_ERROR_PROGRAM_LOOP_LIMIT", "a program reached the device's loop limit and was stopped" },
	{ VG_ERROR_TIMEOUT, "VG_ERROR_TIMEOUT", "timed out waiting for the GPU" },
	{ VG_ERROR_NOT_SUPPORTED, "VG_ERROR_NOT_SUPPORTED", "the device runs no programs" },
	{ VG_ERROR_OS, "VG_ERROR_OS", "unexpected operating-system error" },
};

static const struct vg_result_info *find_result(vgResult r)
{
	size_t i;

	for (i = 0; i < sizeof(results) / sizeof(results[0]); i++)
		if (results[i].r == r)
			return &results[i];
	return NULL;
}

const char *vgGetErrorName(vgResult r)
{
	const struct vg_result_info *e = find_result(r);

	return e ? e->name : "VG_ERROR_UNKNOWN";
}

const char *vgGetErrorString(vgResult r)
{
	const struct vg_result_info *e = find_result(r);

	return e ? e->text : "unknown error";
}

const char *vgGetErrorDetail(vgContext ctx)
{
	return ctx ? ctx->detail : "";
}

static vgResult os_error(vgContext ctx, int err, const char *what)
{
	if (ctx)
		snprintf(ctx->detail, sizeof(ctx->detail), "%s: %s", what, strerror(-err));
	switch (err) {
	case -ENOMEM:
	case -ENOSPC:
		return VG_ERROR_OUT_OF_MEMORY;
	case -EINVAL:
	case -E2BIG:
	case -EOVERFLOW:
		return VG_ERROR_INVALID_VALUE;
	case -ENOENT:
		return VG_ERROR_INVALID_HANDLE;
	case -ENODEV:
	case -ENXIO:
		return VG_ERROR_NO_DEVICE;
	case -ETIMEDOUT:
		return VG_ERROR_TIMEOUT;
	default:
		return VG_ERROR_OS;
	}
}

/* A channel failure: translate the hw-spec §8 state into a sticky result with a description. */
static vgResult channel_error(vgContext ctx, const struct vugpu_error *e)
{
	vgResult r;
	int n;

	switch (e->code) {
	case VG_CERR_MMU_FAULT:
		r = VG_ERROR_ILLEGAL_ADDRESS;
		break;
	case VG_CERR_WATCHDOG:
	case VG_CERR_CTXSW_TIMEOUT: /* ran out of the time the device allows, as with the watchdog */
		r = VG_ERROR_LAUNCH_TIMEOUT;
		break;
	case VG_CERR_KERNEL_ERROR:
		r = VG_ERROR_KERNEL;
		break;
	case VG_CERR_BAD_PROGRAM:
		r = VG_ERROR_INVALID_PROGRAM;
		break;
	case VG_CERR_PROGRAM_LOOP_LIMIT:
		r = VG_ERROR_PROGRAM_LOOP_LIMIT;
		break;
	default:
		r = VG_ERROR_LAUNCH_FAILED;
	}
	ctx->chan_err = *e;
	if (e->code == VG_CERR_BAD_PROGRAM)
		n = snprintf(ctx->detail, sizeof(ctx->detail),
			     "channel error %u (%s), reason %u (%s), gp_get %u, subchannel %u, method 0x%03x", e->code,
			     vg_chan_err_name(e->code), e->reason, vg_prog_err_name(e->reason), e->info >> 16,
			     (e->info >> 13) & 7, (e->info & 0xfff) << 2);
	else
		n = snprintf(ctx->detail, sizeof(ctx->detail), "channel error %u (%s), gp_get %u, subchannel %u, method 0x%03x",
			     e->code, vg_chan_err_name(e->code), e->info >> 16, (e->info >> 13) & 7, (e->info & 0xfff) << 2);
	if (e->fault_valid && n > 0 && (size_t)n < sizeof(ctx->detail))
		snprintf(ctx->detail + n, sizeof(ctx->detail) - (size_t)n, "; MMU fault at VA 0x%010llx: %s on %s by %s",
			 (unsigned long long)e->fault_va, vg_fault_name(VG_FAULT_INFO_REASON(e->fault_info)),
			 VG_FAULT_INFO_WRITE(e->fault_info) ? "write" : "read", vg_unit_name(VG_FAULT_INFO_UNIT(e->fault_info)));
	/* ENGINE_LOST is reported once and not sticky: the driver rebinds the channel on the next
	 * submission (a restart of vugpu under the VM), so the context carries on. */
	if (e->code != VG_CERR_ENGINE_LOST)
		ctx->sticky = r;
	return r;
}

/* Result of a backend call that may have hit a failed channel (-EFAULT/-EIO). */
static vgResult be_result(vgContext ctx, int err, const char *what)
{
	struct vugpu_error e;

	if (!err)
		return VG_SUCCESS;
	if (err == -EFAULT || err == -EIO) {
		memset(&e, 0, sizeof(e));
		ctx->be->wait(ctx->b, 0, 0, &e); /* fetch the channel's state */
		if (e.code)
			return channel_error(ctx, &e);
	}
	return os_error(ctx, err, what);
}

static vgResult wait_seq(vgContext ctx, uint64_t seq)
{
	struct vugpu_error e;
	int ret;

	if (!seq)
		return VG_SUCCESS;
	memset(&e, 0, sizeof(e));
	ret = ctx->be->wait(ctx->b, seq, ctx->timeout_ms, &e);
	if (!ret)
		return VG_SUCCESS;
	if ((ret == -EFAULT || ret == -EIO) && e.code)
		return channel_error(ctx, &e);
	return os_error(ctx, ret, "wait");
}

#define CHECK_CTX(ctx)                                  \
	do {                                            \
		if (!g_backend)                         \
			return VG_ERROR_NOT_INITIALIZED; \
		if (!(ctx) || !(ctx)->b)                \
			return VG_ERROR_INVALID_CONTEXT; \
		if ((ctx)->sticky)                      \
			return (ctx)->sticky;           \
	} while (0)

/* ---- init and contexts ---- */

vgResult vgInit(unsigned int flags)
{
	const char *sock = getenv("VUGPU_SOCKET");
	const struct vg_backend *be = sock && *sock ? &vg_backend_host : &vg_backend_kmod;
	int ret;

	if (flags)
		return VG_ERROR_INVALID_VALUE;
	if (g_backend)
		return VG_SUCCESS;
	ret = be->init();
	if (ret)
		return ret == -ENOMEM ? VG_ERROR_OUT_OF_MEMORY : VG_ERROR_NO_DEVICE;
	g_backend = be;
	return VG_SUCCESS;
}

/* host: pinned host memory; else VRAM, CPU-mapped only with cpu (GPU-only buffers clear lazily) */
static vgResult alloc_record(vgContext ctx, int host, int cpu, uint64_t size, struct vg_alloc **out)
{
	struct vg_alloc *a = calloc(1, sizeof(*a));
	int ret;

	if (!a)
		return VG_ERROR_OUT_OF_MEMORY;
	a->host = host;
	a->size = size;
	ret = host ? ctx->be->host_alloc(ctx->b, size, &a->handle, &a->va, &a->cpu)
		   : ctx->be->vram_alloc(ctx->b, size, cpu, &a->handle, &a->va, &a->cpu);
	if (ret) {
		free(a);
		return be_result(ctx, ret, host ? "pinned host allocation" : "VRAM allocation");
	}
	a->next = ctx->allocs;
	ctx->allocs = a;
	*out = a;
	return VG_SUCCESS;
}

static vgResult flush_launches(vgContext ctx);

static vgResult alloc_release(vgContext ctx, struct vg_alloc *a)
{
	struct vg_alloc **pp;
	int ret;

	/* queued launches may use it: they go first (the driver then waits for them) */
	flush_launches(ctx);
	for (pp = &ctx->allocs; *pp; pp = &(*pp)->next) {
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	}
	ret = ctx->be->mem_free(ctx->b, a->handle, a->cpu, a->size, a->host);
	free(a);
	return be_result(ctx, ret, "free");
}

vgResult vgCtxCreate(vgContext *out)
{
	vgContext ctx;
	const char *e;
	vgResult r;
	int ret, tries;

	if (!g_backend)
		return VG_ERROR_NOT_INITIALIZED;
	if (!out)
		return VG_ERROR_INVALID_VALUE;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return VG_ERROR_OUT_OF_MEMORY;
	ctx->be = g_backend;
	e = getenv("VUGPU_COPY");
	ctx->bar1_copies = e && !strcmp(e, "bar1");
	e = getenv("VUGPU_TIMEOUT_MS");
	ctx->timeout_ms = e ? (uint32_t)atoi(e) : 120000;
	ret = ctx->be->open(&ctx->b);
	if (ret) {
		r = os_error(NULL, ret, "open");
		free(ctx);
		return r == VG_ERROR_OS || r == VG_ERROR_INVALID_HANDLE ? VG_ERROR_NO_DEVICE : r;
	}
	/* A restart of the device under a context that is still being created (ENGINE_LOST) lost
	 * none of the caller's work: the context is not theirs yet, so try again on the rebound
	 * channel instead of failing a create nobody can recover from. */
	for (tries = 0;; tries++) {
		r = alloc_record(ctx, 1, 1, PARAM_SLOTS * PARAM_SLOT_SIZE, &ctx->params);
		if (!r || ctx->chan_err.code != VG_CERR_ENGINE_LOST || tries == 2)
			break;
		memset(&ctx->chan_err, 0, sizeof(ctx->chan_err));
		ctx->detail[0] = 0;
	}
	if (r) {
		vgCtxDestroy(ctx);
		return r;
	}
	*out = ctx;
	return VG_SUCCESS;
}

vgResult vgCtxDestroy(vgContext ctx)
{
	struct vg_alloc *a;

	if (!ctx || !ctx->b)
		return VG_ERROR_INVALID_CONTEXT;
	if (!ctx->sticky)
		flush_launches(ctx); /* queued work is submitted work, as for a driver that rang at once */
	/*
	 * Closing the context releases every buffer at once (the driver stops the channel first).
	 * CPU mappings of VRAM must go before the close (they pin the driver's file), pinned host
	 * memory after it (the driver unpins it at close).
	 */
	for (a = ctx->allocs; a; a = a->next)
		if (!a->host)
			ctx->be->unmap_cpu(ctx->b, a->cpu, a->size, 0);
	ctx->be->close(ctx->b);
	while (ctx->programs) {
		struct vgProgramRec *p = ctx->programs;

		ctx->programs = p->next;
		free(p);
	}
	while ((a = ctx->allocs)) {
		ctx->allocs = a->next;
		if (a->host)
			ctx->be->unmap_cpu(NULL, a->cpu, a->size, 1);
		free(a);
	}
	ctx->b = NULL;
	free(ctx);
	return VG_SUCCESS;
}

vgResult vgGetDeviceInfo(vgContext ctx, vgDeviceInfo *info)
{
	struct vugpu_info i;
	int ret, k;

	if (!ctx || !ctx->b)
		return VG_ERROR_INVALID_CONTEXT;
	if (!info)
		return VG_ERROR_INVALID_VALUE;
	ret = ctx->be->info(ctx->b, &i);
	if (ret)
		return os_error(ctx, ret, "info");
	memset(info, 0, sizeof(*info));
	snprintf(info->backend, sizeof(info->backend), "%s", ctx->be->name);
	info->vram_size = i.vram_size;
	info->vram_used = i.vram_used;
	info->channels = i.chan_count;
	info->pv_mode = i.pv_mode;
	info->mmio_count = i.mmio_count;
	for (k = 0; k < 4; k++)
		info->irq_count[k] = i.irq_count[k];
	info->pv_calls = i.pv_calls;
	return VG_SUCCESS;
}

/* ---- memory ---- */

static struct vg_alloc *find_dev(vgContext ctx, vgDevicePtr p, uint64_t n)
{
	struct vg_alloc *a;

	for (a = ctx->allocs; a; a = a->next)
		if (!a->host && p >= a->va && p - a->va <= a->size && n <= a->size - (p - a->va))
			return a;
	return NULL;
}

static struct vg_alloc *find_host(vgContext ctx, const void *p, uint64_t n)
{
	uintptr_t q = (uintptr_t)p;
	struct vg_alloc *a;

	for (a = ctx->allocs; a; a = a->next) {
		uintptr_t base = (uintptr_t)a->cpu;

		if (a->host && q >= base && q - base <= a->size && n <= a->size - (q - base))
			return a;
	}
	return NULL;
}

vgResult vgMemAlloc(vgContext ctx, vgDevicePtr *dptr, size_t bytes)
{
	struct vg_alloc *a;
	vgResult r;

	CHECK_CTX(ctx);
	if (!dptr || !bytes)
		return VG_ERROR_INVALID_VALUE;
	r = alloc_record(ctx, 0, ctx->bar1_copies, bytes, &a);
	if (!r)
		*dptr = a->va;
	return r;
}

vgResult vgMemFree(vgContext ctx, vgDevicePtr dptr)
{
	struct vg_alloc *a;

	CHECK_CTX(ctx);
	for (a = ctx->allocs; a; a = a->next)
		if (!a->host && a->va == dptr && a != ctx->params && !a->program)
			return alloc_release(ctx, a);
	return VG_ERROR_INVALID_HANDLE;
}

vgResult vgMemAllocHost(vgContext ctx, void **ptr, size_t bytes)
{
	struct vg_alloc *a;
	vgResult r;

	CHECK_CTX(ctx);
	if (!ptr || !bytes)
		return VG_ERROR_INVALID_VALUE;
	r = alloc_record(ctx, 1, 1, bytes, &a);
	if (!r)
		*ptr = a->cpu;
	return r;
}

vgResult vgMemFreeHost(vgContext ctx, void *ptr)
{
	struct vg_alloc *a;

	CHECK_CTX(ctx);
	for (a = ctx->allocs; a; a = a->next)
		if (a->host && a->cpu == ptr && a != ctx->staging[0] && a != ctx->staging[1] && a != ctx->params)
			return alloc_release(ctx, a);
	return VG_ERROR_INVALID_HANDLE;
}

/* ---- pushbuffer building ---- */

struct pb {
	uint32_t w[PB_WORDS];
	uint32_t n;
};

static void pb_mthd(struct pb *p, unsigned int subc, unsigned int mthd, unsigned int count, const uint32_t *data)
{
	unsigned int i;

	p->w[p->n++] = VG_MTHD(VG_OP_INC, subc, mthd, count);
	for (i = 0; i < count; i++)
		p->w[p->n++] = data[i];
}

static void pb_copy(struct pb *p, uint64_t src, uint64_t dst, uint32_t len)
{
	uint32_t off[4] = { (uint32_t)(src >> 32) & 0xff, (uint32_t)src, (uint32_t)(dst >> 32) & 0xff, (uint32_t)dst };
	uint32_t line[2] = { len, 1 };
	uint32_t launch = VG_LAUNCH_TRANSFER_NON_PIPELINED;

	pb_mthd(p, VG_SUBCH_COPY, VG_COPY_OFFSET_IN_UPPER, 4, off);
	pb_mthd(p, VG_SUBCH_COPY, VG_COPY_LINE_LENGTH_IN, 2, line);
	pb_mthd(p, VG_SUBCH_COPY, VG_COPY_LAUNCH_DMA, 1, &launch);
}

static vgResult submit_words(vgContext ctx, const uint32_t *w, uint32_t n, int irq, uint64_t *seq)
{
	uint64_t s = 0;
	int ret = ctx->be->submit(ctx->b, w, n, irq ? VUGPU_SUBMIT_FENCE_IRQ : 0, &s);

	if (ret)
		return be_result(ctx, ret, "submit");
	ctx->last_seq = s;
	if (seq)
		*seq = s;
	return VG_SUCCESS;
}

/*
 * Submit the queued launches with p (NULL: none) after them — one submission when they fit
 * together. irq: the caller waits for this submission right away (copies); launches alone are
 * left silent. *seq (if not NULL) is the fence of p, or of the launches when p is NULL.
 */
static vgResult submit(vgContext ctx, const struct pb *p, int irq, uint64_t *seq)
{
	unsigned int i, n = ctx->batch_launches;
	uint64_t s = 0;
	vgResult r;

	if (!ctx->batch_n)
		return p ? submit_words(ctx, p->w, p->n, irq, seq) : VG_SUCCESS;
	if (p && ctx->batch_n + p->n <= BATCH_WORDS) {
		memcpy(ctx->batch + ctx->batch_n, p->w, (size_t)p->n * 4);
		ctx->batch_n += p->n;
		p = NULL;
	}
	r = submit_words(ctx, ctx->batch, ctx->batch_n, p ? 0 : irq, &s);
	ctx->batch_n = 0;
	ctx->batch_launches = 0;
	if (r)
		return r;
	for (i = 0; i < n; i++)
		ctx->param_seq[ctx->batch_slot[i]] = s;
	if (p)
		return submit_words(ctx, p->w, p->n, irq, seq);
	if (seq)
		*seq = s;
	return VG_SUCCESS;
}

/* Hand the queued launches to the driver (one doorbell). */
static vgResult flush_launches(vgContext ctx)
{
	return submit(ctx, NULL, 0, NULL);
}

/* Queue a launch whose parameters are in slot; its fence becomes the slot's at submission. */
static vgResult queue_launch(vgContext ctx, const struct pb *p, unsigned int slot)
{
	vgResult r;

	if (ctx->batch_n + p->n > BATCH_WORDS || ctx->batch_launches == BATCH_LAUNCHES) {
		r = flush_launches(ctx);
		if (r)
			return r;
	}
	memcpy(ctx->batch + ctx->batch_n, p->w, (size_t)p->n * 4);
	ctx->batch_n += p->n;
	ctx->batch_slot[ctx->batch_launches++] = slot;
	return VG_SUCCESS;
}

/* Everything submitted or queued so far has completed. */
static vgResult sync_all(vgContext ctx)
{
	vgResult r = flush_launches(ctx);

	return r ? r : wait_seq(ctx, ctx->last_seq);
}

/* GPU copy of len bytes between two GPU VAs, split into lines the engine accepts; waits. */
static vgResult gpu_copy(vgContext ctx, uint64_t src, uint64_t dst, uint64_t len)
{
	struct pb p;
	uint64_t seq = 0;
	vgResult r;

	p.n = 0;
	while (len) {
		uint32_t n = len > COPY_MAX_LINE ? COPY_MAX_LINE : (uint32_t)len;

		if (p.n + 16 > PB_WORDS) {
			r = submit(ctx, &p, 0, NULL);
			if (r)
				return r;
			p.n = 0;
		}
		pb_copy(&p, src, dst, n);
		src += n;
		dst += n;
		len -= n;
	}
	if (p.n) {
		r = submit(ctx, &p, 1, &seq);
		if (r)
			return r;
	}
	return wait_seq(ctx, seq ? seq : ctx->last_seq);
}

/* Two pinned staging buffers of at least min(bytes, STAGING_MAX); returns the chunk size. */
static vgResult ensure_staging(vgContext ctx, uint64_t bytes, uint32_t *chunk)
{
	uint32_t want = STAGING_MIN;
	vgResult r;
	int i;

	while (want < bytes && want < STAGING_MAX)
		want <<= 1;
	if (ctx->staging_size < want) {
		for (i = 0; i < 2; i++) {
			if (!ctx->staging[i])
				continue;
			r = wait_seq(ctx, ctx->staging_seq[i]);
			if (!r)
				r = alloc_release(ctx, ctx->staging[i]);
			ctx->staging[i] = NULL;
			ctx->staging_seq[i] = 0;
			if (r)
				return r;
		}
		ctx->staging_size = 0;
		for (i = 0; i < 2; i++) {
			r = alloc_record(ctx, 1, 1, want, &ctx->staging[i]);
			if (r)
				return r;
		}
		ctx->staging_size = want;
	}
	*chunk = ctx->staging_size;
	return VG_SUCCESS;
}

/* ---- copies ---- */

vgResult vgMemcpyHtoD(vgContext ctx, vgDevicePtr dst, const void *src, size_t bytes)
{
	struct vg_alloc *d, *h;
	const uint8_t *s = src;
	uint64_t off = 0;
	uint32_t chunk;
	vgResult r;
	int k = 0;

	CHECK_CTX(ctx);
	if (!bytes)
		return VG_SUCCESS;
	if (!src)
		return VG_ERROR_INVALID_VALUE;
	d = find_dev(ctx, dst, bytes);
	if (!d)
		return VG_ERROR_INVALID_HANDLE;
	h = find_host(ctx, src, bytes);
	if (h) /* pinned: one DMA, no staging */
		return gpu_copy(ctx, h->va + ((uintptr_t)src - (uintptr_t)h->cpu), dst, bytes);
	if (ctx->bar1_copies && d->cpu) {
		/* earlier work may still write the buffer */
		r = sync_all(ctx);
		if (!r)
			memcpy((uint8_t *)d->cpu + (dst - d->va), src, bytes);
		return r;
	}
	r = ensure_staging(ctx, bytes, &chunk);
	if (r)
		return r;
	while (off < bytes) {
		uint32_t n = bytes - off > chunk ? chunk : (uint32_t)(bytes - off);
		struct vg_alloc *st = ctx->staging[k];
		struct pb p;

		/* the engine may still be reading this staging buffer from the previous round */
		r = wait_seq(ctx, ctx->staging_seq[k]);
		if (r)
			return r;
		memcpy(st->cpu, s + off, n);
		p.n = 0;
		pb_copy(&p, st->va, dst + off, n);
		r = submit(ctx, &p, 1, &ctx->staging_seq[k]);
		if (r)
			return r;
		off += n;
		k ^= 1;
	}
	return wait_seq(ctx, ctx->last_seq);
}

vgResult vgMemcpyDtoH(vgContext ctx, void *dst, vgDevicePtr src, size_t bytes)
{
	struct vg_alloc *d, *h;
	uint8_t *out = dst;
	uint64_t chunk_off[2] = { 0, 0 }, next = 0, done = 0;
	uint32_t chunk_len[2] = { 0, 0 }, chunk;
	vgResult r;
	int k;

	CHECK_CTX(ctx);
	if (!bytes)
		return VG_SUCCESS;
	if (!dst)
		return VG_ERROR_INVALID_VALUE;
	d = find_dev(ctx, src, bytes);
	if (!d)
		return VG_ERROR_INVALID_HANDLE;
	h = find_host(ctx, dst, bytes);
	if (h)
		return gpu_copy(ctx, src, h->va + ((uintptr_t)dst - (uintptr_t)h->cpu), bytes);
	if (ctx->bar1_copies && d->cpu) {
		r = sync_all(ctx);
		if (!r)
			memcpy(dst, (const uint8_t *)d->cpu + (src - d->va), bytes);
		return r;
	}
	r = ensure_staging(ctx, bytes, &chunk);
	if (r)
		return r;
	/* keep both staging buffers busy: chunk i goes to buffer i % 2 */
	for (k = 0; k < 2 && next < bytes; k++) {
		struct pb p;

		chunk_off[k] = next;
		chunk_len[k] = bytes - next > chunk ? chunk : (uint32_t)(bytes - next);
		p.n = 0;
		pb_copy(&p, src + next, ctx->staging[k]->va, chunk_len[k]);
		r = submit(ctx, &p, 1, &ctx->staging_seq[k]);
		if (r)
			return r;
		next += chunk_len[k];
	}
	for (k = 0; done < bytes; k ^= 1) {
		r = wait_seq(ctx, ctx->staging_seq[k]);
		if (r)
			return r;
		memcpy(out + chunk_off[k], ctx->staging[k]->cpu, chunk_len[k]);
		done += chunk_len[k];
		if (next < bytes) {
			struct pb p;

			chunk_off[k] = next;
			chunk_len[k] = bytes - next > chunk ? chunk : (uint32_t)(bytes - next);
			p.n = 0;
			pb_copy(&p, src + next, ctx->staging[k]->va, chunk_len[k]);
			r = submit(ctx, &p, 1, &ctx->staging_seq[k]);
			if (r)
				return r;
			next += chunk_len[k];
		}
	}
	return VG_SUCCESS;
}

vgResult vgMemcpyDtoD(vgContext ctx, vgDevicePtr dst, vgDevicePtr src, size_t bytes)
{
	CHECK_CTX(ctx);
	if (!bytes)
		return VG_SUCCESS;
	if (!find_dev(ctx, dst, bytes) || !find_dev(ctx, src, bytes))
		return VG_ERROR_INVALID_HANDLE;
	return gpu_copy(ctx, src, dst, bytes);
}

/* ---- launches ---- */

vgResult vgLaunch(vgContext ctx, unsigned int kernel, const unsigned int grid[3], const void *params,
		  size_t param_bytes, const vgBuffer *buffers, unsigned int nbuffers)
{
	uint32_t cfg[7], launch = 0, nb = nbuffers;
	unsigned int slot, i;
	uint64_t pva;
	struct pb p;
	vgResult r;

	CHECK_CTX(ctx);
	if (param_bytes > VG_COMPUTE_MAX_PARAMS || (param_bytes && !params) || nbuffers > VG_COMPUTE_MAX_BUFFERS ||
	    (nbuffers && !buffers))
		return VG_ERROR_INVALID_VALUE;
	for (i = 0; i < nbuffers; i++) {
		if (!buffers[i].bytes || buffers[i].bytes > 0xffffffffu)
			return VG_ERROR_INVALID_VALUE;
	}
	/* parameter slot: wait until its previous launch is done, then write it through BAR1 */
	slot = ctx->param_next;
	ctx->param_next = (slot + 1) % PARAM_SLOTS;
	r = wait_seq(ctx, ctx->param_seq[slot]);
	if (r)
		return r;
	pva = ctx->params->va + (uint64_t)slot * PARAM_SLOT_SIZE;
	if (param_bytes)
		memcpy((uint8_t *)ctx->params->cpu + (size_t)slot * PARAM_SLOT_SIZE, params, param_bytes);
	__atomic_thread_fence(__ATOMIC_RELEASE);

	cfg[0] = kernel;
	cfg[1] = grid ? grid[0] : 1;
	cfg[2] = grid ? grid[1] : 1;
	cfg[3] = grid ? grid[2] : 1;
	cfg[4] = (uint32_t)(pva >> 32) & 0xff;
	cfg[5] = (uint32_t)pva;
	cfg[6] = (uint32_t)param_bytes;
	p.n = 0;
	pb_mthd(&p, VG_SUBCH_COMPUTE, VG_COMPUTE_KERNEL_ID, 7, cfg);
	pb_mthd(&p, VG_SUBCH_COMPUTE, VG_COMPUTE_BUFFER_COUNT, 1, &nb);
	if (nbuffers) {
		uint32_t b[4 * VG_COMPUTE_MAX_BUFFERS];

		for (i = 0; i < nbuffers; i++) {
			b[4 * i] = (uint32_t)(buffers[i].ptr >> 32) & 0xff;
			b[4 * i + 1] = (uint32_t)buffers[i].ptr;
			b[4 * i + 2] = (uint32_t)buffers[i].bytes;
			b[4 * i + 3] = 0;
		}
		pb_mthd(&p, VG_SUBCH_COMPUTE, VG_COMPUTE_BUFFER(0), 4 * nbuffers, b);
	}
	pb_mthd(&p, VG_SUBCH_COMPUTE, VG_COMPUTE_LAUNCH, 1, &launch);
	return queue_launch(ctx, &p, slot);
}

vgResult vgSynchronize(vgContext ctx)
{
	CHECK_CTX(ctx);
	return sync_all(ctx);
}

vgResult vgFlush(vgContext ctx)
{
	CHECK_CTX(ctx);
	return flush_launches(ctx);
}

/* ---- programs (hw-spec §6.3) ---- */

vgResult vgGetChannelError(vgContext ctx, vgChannelError *err)
{
	if (!ctx || !ctx->b)
		return VG_ERROR_INVALID_CONTEXT;
	if (!err)
		return VG_ERROR_INVALID_VALUE;
	memset(err, 0, sizeof(*err));
	err->code = ctx->chan_err.code;
	err->reason = ctx->chan_err.reason;
	err->info = ctx->chan_err.info;
	err->fault_valid = ctx->chan_err.fault_valid;
	err->fault_va = ctx->chan_err.fault_va;
	err->fault_info = ctx->chan_err.fault_info;
	return VG_SUCCESS;
}

/* The driver read PPROG at probe; ask it once per context. */
static vgResult prog_info(vgContext ctx, const struct vugpu_prog_info **out)
{
	int ret;

	if (!ctx->prog_info_valid) {
		ret = ctx->be->prog_info(ctx->b, &ctx->prog_info);
		if (ret)
			return os_error(ctx, ret, "program limits");
		ctx->prog_info_valid = 1;
	}
	*out = &ctx->prog_info;
	return VG_SUCCESS;
}

vgResult vgProgramLimits(vgContext ctx, vgProgLimits *l)
{
	const struct vugpu_prog_info *pi;
	vgResult r;

	if (!g_backend)
		return VG_ERROR_NOT_INITIALIZED;
	if (!ctx || !ctx->b)
		return VG_ERROR_INVALID_CONTEXT;
	if (!l)
		return VG_ERROR_INVALID_VALUE;
	r = prog_info(ctx, &pi);
	if (r)
		return r;
	memset(l, 0, sizeof(*l));
	l->version = pi->version;
	l->max_module_bytes = pi->max_module_bytes;
	l->max_bindings = pi->max_bindings;
	l->max_push_bytes = pi->max_push_bytes;
	l->max_spec_constants = pi->max_spec_constants;
	l->max_wg_invocations = pi->max_wg_invocations;
	memcpy(l->max_wg_size, pi->max_wg_size, sizeof(l->max_wg_size));
	l->max_shared_bytes = pi->max_shared_bytes;
	memcpy(l->max_grid, pi->max_grid, sizeof(l->max_grid));
	l->max_buffer_bytes = pi->max_buffer_bytes;
	l->buffer_align = pi->buffer_align;
	l->subgroup_size = pi->subgroup_size;
	l->max_loop_iterations = pi->max_loop_iterations;
	l->features = pi->features;
	return VG_SUCCESS;
}

vgResult vgProgramLoad(vgContext ctx, const void *spirv, size_t bytes, vgProgram *out)
{
	const struct vugpu_prog_info *pi;
	struct vgProgramRec *p;
	struct vg_alloc *a;
	vgResult r;

	CHECK_CTX(ctx);
	if (!spirv || !bytes || bytes > 0xffffffffu || !out)
		return VG_ERROR_INVALID_VALUE;
	r = prog_info(ctx, &pi);
	if (r)
		return r;
	if (!pi->version)
		return VG_ERROR_NOT_SUPPORTED;
	/* no parsing here: size, form and content are the device's to judge (§6.3.1, §6.3.3) */
	p = calloc(1, sizeof(*p));
	if (!p)
		return VG_ERROR_OUT_OF_MEMORY;
	r = alloc_record(ctx, 0, 0, bytes, &a);
	if (r) {
		free(p);
		return r;
	}
	a->program = 1;
	r = vgMemcpyHtoD(ctx, a->va, spirv, bytes);
	if (r) {
		alloc_release(ctx, a);
		free(p);
		return r;
	}
	p->ctx = ctx;
	p->mem = a;
	p->bytes = (uint32_t)bytes;
	p->next = ctx->programs;
	ctx->programs = p;
	*out = p;
	return VG_SUCCESS;
}

static int program_unlink(vgContext ctx, vgProgram prog)
{
	struct vgProgramRec **pp;

	for (pp = &ctx->programs; *pp; pp = &(*pp)->next) {
		if (*pp == prog) {
			*pp = prog->next;
			return 1;
		}
	}
	return 0;
}

vgResult vgProgramUnload(vgContext ctx, vgProgram prog)
{
	vgResult r;

	CHECK_CTX(ctx);
	if (!prog || prog->ctx != ctx || !program_unlink(ctx, prog))
		return VG_ERROR_INVALID_HANDLE;
	r = alloc_release(ctx, prog->mem); /* the backend waits for launches still using it */
	free(prog);
	return r;
}

vgResult vgLaunchProgram(vgContext ctx, vgProgram prog, unsigned int entry, const unsigned int grid[3],
			 const vgBinding *bindings, unsigned int nbindings, const void *push, size_t push_bytes,
			 const vgSpecConstant *spec, unsigned int nspec, unsigned int flags)
{
	uint32_t w[6], b[4 * VG_COMPUTE_MAX_BUFFERS], nb = nbindings, launch = VG_LAUNCH_PROGRAM;
	size_t spec_off = (push_bytes + 7) & ~(size_t)7, spec_bytes = (size_t)nspec * VG_SPEC_ENTRY_SIZE;
	unsigned int slot, i;
	uint64_t pva, sva, mva;
	uint8_t *cpu;
	struct pb p;
	const struct vugpu_prog_info *pi;
	uint32_t cached = 0;
	vgResult r;

	CHECK_CTX(ctx);
	/* DEVICE_CACHED is a hint: a device of programs v1.0 has no such flag, so it is left out there */
	if (prog_info(ctx, &pi) == VG_SUCCESS && pi->version >> 16 == 1 && (pi->version & 0xffff) >= 1)
		cached = VG_BUFFER_FLAG_DEVICE_CACHED;
	/* only what the methods cannot carry; every limit of §3.10 is the device's to enforce */
	if (!prog || prog->ctx != ctx)
		return VG_ERROR_INVALID_HANDLE;
	if (flags || nbindings > VG_COMPUTE_MAX_BUFFERS || (nbindings && !bindings) || (push_bytes && !push) ||
	    (nspec && !spec) || push_bytes > PARAM_SLOT_SIZE || nspec > PARAM_SLOT_SIZE / VG_SPEC_ENTRY_SIZE ||
	    spec_off + spec_bytes > PARAM_SLOT_SIZE)
		return VG_ERROR_INVALID_VALUE;
	for (i = 0; i < nbindings; i++) {
		if (!bindings[i].bytes || bindings[i].bytes > 0xffffffffu ||
		    (bindings[i].flags & ~(VG_BINDING_READ_ONLY | VG_BINDING_DEVICE_CACHED)))
			return VG_ERROR_INVALID_VALUE;
		b[4 * i] = (uint32_t)(bindings[i].ptr >> 32) & 0xff;
		b[4 * i + 1] = (uint32_t)bindings[i].ptr;
		b[4 * i + 2] = (uint32_t)bindings[i].bytes;
		b[4 * i + 3] = ((bindings[i].flags & VG_BINDING_READ_ONLY) ? VG_BUFFER_FLAG_READ_ONLY : 0) |
			       ((bindings[i].flags & VG_BINDING_DEVICE_CACHED) ? cached : 0);
	}
	/* push constants and the spec block share a parameter slot (same reuse rule as vgLaunch) */
	slot = ctx->param_next;
	ctx->param_next = (slot + 1) % PARAM_SLOTS;
	r = wait_seq(ctx, ctx->param_seq[slot]);
	if (r)
		return r;
	pva = ctx->params->va + (uint64_t)slot * PARAM_SLOT_SIZE;
	sva = pva + spec_off;
	cpu = (uint8_t *)ctx->params->cpu + (size_t)slot * PARAM_SLOT_SIZE;
	if (push_bytes)
		memcpy(cpu, push, push_bytes);
	for (i = 0; i < nspec; i++) { /* {u32 id, u32 value}, little-endian like the device */
		memcpy(cpu + spec_off + 8 * i, &spec[i].id, 4);
		memcpy(cpu + spec_off + 8 * i + 4, &spec[i].value, 4);
	}
	__atomic_thread_fence(__ATOMIC_RELEASE);

	mva = prog->mem->va;
	p.n = 0;
	/* GRID_X … PARAM_LENGTH (KERNEL_ID is ignored by a program launch) */
	w[0] = grid ? grid[0] : 1;
	w[1] = grid ? grid[1] : 1;
	w[2] = grid ? grid[2] : 1;
	w[3] = (uint32_t)(pva >> 32) & 0xff;
	w[4] = (uint32_t)pva;
	w[5] = (uint32_t)push_bytes;
	pb_mthd(&p, VG_SUBCH_COMPUTE, VG_COMPUTE_GRID_X, 6, w);
	w[0] = (uint32_t)(mva >> 32) & 0xff;
	w[1] = (uint32_t)mva;
	w[2] = prog->bytes;
	w[3] = entry;
	pb_mthd(&p, VG_SUBCH_COMPUTE, VG_COMPUTE_PROGRAM_VA_UPPER, 4, w);
	pb_mthd(&p, VG_SUBCH_COMPUTE, VG_COMPUTE_BUFFER_COUNT, 1, &nb);
	w[0] = (uint32_t)(sva >> 32) & 0xff;
	w[1] = (uint32_t)sva;
	w[2] = nspec; /* always set: method state persists across launches */
	pb_mthd(&p, VG_SUBCH_COMPUTE, VG_COMPUTE_SPEC_VA_UPPER, 3, w);
	if (nbindings)
		pb_mthd(&p, VG_SUBCH_COMPUTE, VG_COMPUTE_BUFFER(0), 4 * nbindings, b);
	pb_mthd(&p, VG_SUBCH_COMPUTE, VG_COMPUTE_LAUNCH, 1, &launch);
	return queue_launch(ctx, &p, slot);
}

/* ---- asynchronous work for layered drivers (guest/vulkan) ---- */

vgResult vgMemHostGetDevicePointer(vgContext ctx, vgDevicePtr *dptr, void *host)
{
	struct vg_alloc *a;

	CHECK_CTX(ctx);
	if (!dptr || !host)
		return VG_ERROR_INVALID_VALUE;
	a = find_host(ctx, host, 1);
	if (!a || a == ctx->params || a == ctx->staging[0] || a == ctx->staging[1])
		return VG_ERROR_INVALID_HANDLE;
	*dptr = a->va + ((uintptr_t)host - (uintptr_t)a->cpu);
	return VG_SUCCESS;
}

/* A caller's allocation (VRAM or pinned) covering [va, va + n); never the runtime's own buffers. */
static struct vg_alloc *find_user_va(vgContext ctx, vgDevicePtr va, uint64_t n)
{
	struct vg_alloc *a;

	for (a = ctx->allocs; a; a = a->next)
		if (va >= a->va && va - a->va <= a->size && n <= a->size - (va - a->va))
			return a == ctx->params || a == ctx->staging[0] || a == ctx->staging[1] || a->program ? NULL : a;
	return NULL;
}

vgResult vgMemcpyAsync(vgContext ctx, vgDevicePtr dst, vgDevicePtr src, size_t bytes)
{
	struct pb p;
	vgResult r;

	CHECK_CTX(ctx);
	if (!bytes)
		return VG_SUCCESS;
	if (!find_user_va(ctx, dst, bytes) || !find_user_va(ctx, src, bytes))
		return VG_ERROR_INVALID_HANDLE;
	while (bytes) {
		uint32_t n = bytes > COPY_MAX_LINE ? COPY_MAX_LINE : (uint32_t)bytes;

		p.n = 0;
		pb_copy(&p, src, dst, n);
		/* a copy takes no parameter slot: it only needs room in the queue */
		if (ctx->batch_n + p.n > BATCH_WORDS) {
			r = flush_launches(ctx);
			if (r)
				return r;
		}
		memcpy(ctx->batch + ctx->batch_n, p.w, (size_t)p.n * 4);
		ctx->batch_n += p.n;
		src += n;
		dst += n;
		bytes -= n;
	}
	return VG_SUCCESS;
}

vgResult vgFlushFence(vgContext ctx, uint64_t *fence)
{
	vgResult r;

	CHECK_CTX(ctx);
	if (!fence)
		return VG_ERROR_INVALID_VALUE;
	r = flush_launches(ctx);
	if (!r)
		*fence = ctx->last_seq;
	return r;
}

vgResult vgFenceWait(vgContext ctx, uint64_t fence, unsigned int timeout_ms)
{
	struct vugpu_error e;
	int ret;

	CHECK_CTX(ctx);
	if (fence > ctx->last_seq)
		return VG_ERROR_INVALID_VALUE;
	if (!fence)
		return VG_SUCCESS;
	memset(&e, 0, sizeof(e));
	ret = ctx->be->wait(ctx->b, fence, timeout_ms, &e);
	if (!ret)
		return VG_SUCCESS;
	if ((ret == -EFAULT || ret == -EIO) && e.code)
		return channel_error(ctx, &e);
	if (ret == -ETIMEDOUT)
		return VG_ERROR_TIMEOUT;
	return os_error(ctx, ret, "wait");
}
