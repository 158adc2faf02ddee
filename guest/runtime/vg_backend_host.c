// SPDX-License-Identifier: MIT
/*
 * The native twin's backend: a user-space driver for a vugpu device served on a UNIX socket,
 * with no VM. It is the same driver core as the Linux module (guest/common) over a different
 * platform layer: BAR0 accesses are vfio-user REGION_READ/WRITE messages, BAR1 is the server's
 * VRAM fd mmapped here, "system memory" is a memfd this process DMA_MAPs to the server (bus
 * address = its IOVA), and the four MSI-X vectors are eventfds polled by whoever waits.
 *
 * Environment: VUGPU_SOCKET (required), VUGPU_SYSMEM_MB (default 256), VUGPU_PV (0/1/2),
 * VUGPU_CONNECT_TIMEOUT_MS (default 5000: how long a busy device is retried), VUGPU_VERBOSE.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "vg_backend.h"
#include "vfu_client.h"
#include "vg_core.h"

#define SYSMEM_IOVA 0x100000000ull /* where this process's memory appears on the device's bus */

struct host_dev {
	struct vg_dev core;
	struct vfu_client vfu;
	int memfd;
	uint8_t *sys;
	uint64_t sys_size;
	struct vg_ralloc sysalloc;
	uint64_t pv_off;
	int refs;
};

struct host_pin {
	uint64_t off, size;
};

struct vg_backend_ctx {
	struct host_dev *hd;
	struct vg_ctx *ctx;
};

static struct host_dev *g_dev;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Service every MSI-X vector whose eventfd fired (this is the interrupt handler). */
static void service_irqs(struct host_dev *hd, int timeout_ms)
{
	struct pollfd pfd[VG_NUM_VECTORS];
	int i, n = 0;
	uint64_t v;

	for (i = 0; i < VG_NUM_VECTORS; i++) {
		pfd[i].fd = hd->vfu.irq_fd[i];
		pfd[i].events = POLLIN;
		pfd[i].revents = 0;
		if (pfd[i].fd >= 0)
			n = i + 1;
	}
	if (poll(pfd, (nfds_t)n, timeout_ms) <= 0)
		return;
	for (i = 0; i < n; i++) {
		if (!(pfd[i].revents & POLLIN))
			continue;
		if (read(pfd[i].fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
			vg_irq(&hd->core, (unsigned int)i);
	}
}

static int host_wait_fence(struct vg_ctx *c, u64 seq, unsigned int timeout_ms)
{
	struct host_dev *hd = (struct host_dev *)c->dev;
	uint64_t deadline = now_ms() + timeout_ms;
	int ret;

	/*
	 * A query (no time to wait): the fence is in memory, and an error comes as an interrupt,
	 * taken here without blocking. No interrupt is armed and no register read: applications
	 * poll fences in a loop (llama.cpp spins on vkGetFenceStatus), and a trapped read per poll
	 * flooded the server with vfio-user messages (docs/results.md, "The JS thread per dispatch").
	 */
	if (!timeout_ms) {
		if (!c->err_code && !vg_ctx_seq_done(c, seq) && !hd->vfu.failed)
			service_irqs(hd, 0);
		if (hd->vfu.failed)
			return -EIO;
		if (vg_ctx_seq_done(c, seq))
			return 0;
		if (c->err_code)
			return vg_ctx_status(c, NULL);
		/* the caller polls again at once: let the threads that make progress run (the server
		 * and the device share this host's cores) */
		sched_yield();
		return -ETIMEDOUT;
	}

	while (!c->err_code && !vg_ctx_seq_done(c, seq)) {
		uint64_t t = now_ms();

		if (hd->vfu.failed)
			return -EIO;
		/*
		 * Arm, then look at the fence again before sleeping. Arming is a no-op both when an
		 * interrupt is already due and when the fence has passed since the loop's check: in
		 * the second case nothing will ever fire, and a poll now would sleep out its whole
		 * timeout (the lost wake-up of issue 34). The kernel driver's wait_event re-checks
		 * its condition after arming for the same reason. Once the re-check still finds the
		 * fence pending, an interrupt is due: the one armed here or an earlier one queued
		 * behind it, and either fires after the fence is written, so it cannot have been
		 * consumed already.
		 */
		vg_ctx_arm_irq(c, seq);
		if (c->err_code || vg_ctx_seq_done(c, seq))
			break;
		if (t >= deadline) {
			ret = vg_ctx_poll_error(c);
			return ret ? ret : -ETIMEDOUT;
		}
		service_irqs(hd, (int)(deadline - t < 1000 ? deadline - t : 1000));
	}
	/* as the kernel driver: a fence that passed leaves a later failure to the work it concerns */
	if (vg_ctx_seq_done(c, seq))
		return 0;
	return vg_ctx_status(c, NULL);
}

static void host_wake(struct vg_ctx *c)
{
	(void)c; /* the waiter re-checks memory after every interrupt it services */
}

static void host_bo_release(struct vg_dev *d, struct vg_bo *bo)
{
	struct host_dev *hd = (struct host_dev *)d;
	struct host_pin *pin = bo->os_priv;

	if (pin) {
		vg_ralloc_free(&hd->sysalloc, pin->off, pin->size);
		free(pin);
	}
	bo->os_priv = NULL;
}

static void host_dev_put(struct host_dev *hd)
{
	if (--hd->refs > 0)
		return;
	if (hd->core.vm_ops)
		vg_dev_fini(&hd->core);
	if (!hd->vfu.failed) {
		vfu_disable_irqs(&hd->vfu);
		vfu_dma_unmap(&hd->vfu, SYSMEM_IOVA, hd->sys_size);
	}
	vfu_close(&hd->vfu);
	vg_ralloc_fini(&hd->sysalloc);
	if (hd->sys)
		munmap(hd->sys, hd->sys_size);
	if (hd->memfd >= 0)
		close(hd->memfd);
	free(hd);
	g_dev = NULL;
}

static int host_dev_get(struct host_dev **out)
{
	const char *sock = getenv("VUGPU_SOCKET"), *e;
	struct host_dev *hd;
	int ret;

	if (g_dev) {
		g_dev->refs++;
		*out = g_dev;
		return 0;
	}
	if (!sock || !*sock)
		return -ENODEV;
	hd = calloc(1, sizeof(*hd));
	if (!hd)
		return -ENOMEM;
	hd->refs = 1;
	hd->memfd = -1;
	g_dev = hd;
	e = getenv("VUGPU_SYSMEM_MB");
	hd->sys_size = (uint64_t)(e ? atoi(e) : 256) << 20;
	if (!hd->sys_size)
		hd->sys_size = 256ull << 20;
	e = getenv("VUGPU_VERBOSE");
	hd->core.os.verbose = e ? atoi(e) : 0;

	e = getenv("VUGPU_CONNECT_TIMEOUT_MS");
	ret = vfu_connect(&hd->vfu, sock, e ? (unsigned int)atoi(e) : 5000);
	if (!ret)
		ret = vfu_reset(&hd->vfu);
	if (!ret)
		ret = vfu_map_bar1(&hd->vfu);
	if (ret)
		goto fail;
	/* sealed against resizing, as QEMU's memory-backend-memfd is: the server may insist on it
	 * (a client shrinking a mapped file would make the server's accesses fault) */
	hd->memfd = memfd_create("vugpu-sysmem", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (hd->memfd < 0 || ftruncate(hd->memfd, (off_t)hd->sys_size) < 0 ||
	    fcntl(hd->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		ret = -errno;
		goto fail;
	}
	hd->sys = mmap(NULL, hd->sys_size, PROT_READ | PROT_WRITE, MAP_SHARED, hd->memfd, 0);
	if (hd->sys == MAP_FAILED) {
		hd->sys = NULL;
		ret = -errno;
		goto fail;
	}
	ret = vfu_dma_map(&hd->vfu, hd->memfd, 0, SYSMEM_IOVA, hd->sys_size, 1);
	if (!ret)
		ret = vfu_enable_msix(&hd->vfu, VG_NUM_VECTORS);
	if (!ret)
		ret = vg_ralloc_init(&hd->sysalloc, 0, hd->sys_size);
	if (ret)
		goto fail;

	hd->core.os.vfu = &hd->vfu;
	hd->core.os.bar1 = hd->vfu.bar1;
	hd->core.wake = host_wake;
	hd->core.wait = host_wait_fence;
	hd->core.bo_release = host_bo_release;
	e = getenv("VUGPU_PV");
	hd->core.pv_request = e ? atoi(e) : 0;
	if (hd->core.pv_request) {
		ret = vg_ralloc_alloc(&hd->sysalloc, VG_PV_AREA_SLOTS_WANT * VG_PV_SLOT_SIZE, VG_PV_SLOT_SIZE, &hd->pv_off);
		if (ret)
			goto fail;
		hd->core.pv_area = hd->sys + hd->pv_off;
		hd->core.pv_area_bus = SYSMEM_IOVA + hd->pv_off;
		hd->core.pv_area_slots = VG_PV_AREA_SLOTS_WANT;
	}
	ret = vg_dev_init(&hd->core);
	if (ret) {
		hd->core.vm_ops = NULL;
		goto fail;
	}
	if (hd->core.vram_size > hd->vfu.bar1_size) {
		ret = -ENODEV;
		goto fail;
	}
	*out = hd;
	return 0;
fail:
	if (hd->vfu.error[0])
		fprintf(stderr, "vugpu-host: %s\n", hd->vfu.error);
	host_dev_put(hd);
	return ret;
}

/*
 * vgInit: connect and bring the device up once per process (what the Linux driver does at
 * module load), so that context creation costs the same kind of work in both worlds. The
 * reference taken here lives until the process exits.
 */
static int host_init(void)
{
	struct host_dev *hd;

	return g_dev ? 0 : host_dev_get(&hd);
}

static int host_open(struct vg_backend_ctx **out)
{
	struct vg_backend_ctx *b = calloc(1, sizeof(*b));
	int ret;

	if (!b)
		return -ENOMEM;
	ret = host_dev_get(&b->hd);
	if (ret) {
		free(b);
		return ret;
	}
	ret = vg_ctx_create(&b->hd->core, b, &b->ctx);
	if (ret) {
		host_dev_put(b->hd);
		free(b);
		return ret;
	}
	*out = b;
	return 0;
}

static void host_close(struct vg_backend_ctx *b)
{
	vg_ctx_destroy(b->ctx);
	host_dev_put(b->hd);
	free(b);
}

static int host_info(struct vg_backend_ctx *b, struct vugpu_info *info)
{
	vg_dev_info(&b->hd->core, info);
	return 0;
}

static int host_prog_info(struct vg_backend_ctx *b, struct vugpu_prog_info *info)
{
	vg_dev_prog_info(&b->hd->core, info);
	return 0;
}

static int host_vram_alloc(struct vg_backend_ctx *b, uint64_t size, int cpu_access, uint32_t *handle, uint64_t *va,
			   void **cpu)
{
	struct vg_bo *bo;
	int ret = vg_ctx_vram_alloc(b->ctx, size, cpu_access ? 0 : VUGPU_MEM_NO_CPU, &bo);

	if (ret)
		return ret;
	*handle = bo->handle;
	*va = bo->va;
	*cpu = cpu_access ? (void *)(b->hd->vfu.bar1 + bo->vram_addr) : NULL;
	return 0;
}

static int host_host_alloc(struct vg_backend_ctx *b, uint64_t size, uint32_t *handle, uint64_t *va, void **cpu)
{
	struct host_dev *hd = b->hd;
	struct host_pin *pin;
	struct vg_bo *bo;
	uint64_t *bus, i, pages;
	int ret;

	size = (size + 4095) & ~4095ull;
	pages = size >> 12;
	if (!pages || pages > 0xffffffffull)
		return -EINVAL;
	pin = calloc(1, sizeof(*pin));
	bus = malloc(pages * sizeof(*bus));
	if (!pin || !bus) {
		free(pin);
		free(bus);
		return -ENOMEM;
	}
	ret = vg_ralloc_alloc(&hd->sysalloc, size, 4096, &pin->off);
	if (ret) {
		free(pin);
		free(bus);
		return ret;
	}
	pin->size = size;
	for (i = 0; i < pages; i++)
		bus[i] = SYSMEM_IOVA + pin->off + (i << 12);
	ret = vg_ctx_sys_map(b->ctx, bus, (u32)pages, 0, pin, &bo);
	free(bus);
	if (ret) {
		vg_ralloc_free(&hd->sysalloc, pin->off, pin->size);
		free(pin);
		return ret;
	}
	*handle = bo->handle;
	*va = bo->va;
	*cpu = hd->sys + pin->off;
	return 0;
}

static int host_mem_free(struct vg_backend_ctx *b, uint32_t handle, void *cpu, uint64_t size, int host)
{
	struct vg_bo *bo = vg_ctx_bo_find(b->ctx, handle);

	(void)cpu;
	(void)size;
	(void)host;
	if (!bo)
		return -ENOENT;
	return vg_ctx_bo_free(b->ctx, bo);
}

static void host_unmap_cpu(struct vg_backend_ctx *b, void *cpu, uint64_t size, int host)
{
	(void)b; /* VRAM is the shared BAR1 mapping, host memory the shared memfd: nothing per buffer */
	(void)cpu;
	(void)size;
	(void)host;
}

static int host_submit(struct vg_backend_ctx *b, const uint32_t *words, uint32_t count, uint32_t flags,
		       uint64_t *seq)
{
	u64 s;
	int ret;

	/* interrupts are serviced only by waiters here: take any that came while nobody waited (an
	 * ENGINE_LOST raised by a restarted server), so the core sees the channel's state before it
	 * queues work on it, as the kernel driver's interrupt handler would have */
	service_irqs(b->hd, 0);
	for (;;) {
		ret = vg_ctx_submit(b->ctx, words, count, flags, &s);
		if (ret != -EBUSY)
			break;
		ret = host_wait_fence(b->ctx, s, VG_WAIT_RETIRE_MS);
		if (ret)
			return ret;
	}
	if (!ret)
		*seq = s;
	return b->hd->vfu.failed ? -EIO : ret;
}

static int host_wait(struct vg_backend_ctx *b, uint64_t seq, uint32_t timeout_ms, struct vugpu_error *err)
{
	int ret;

	if (seq > b->ctx->seq)
		return -EINVAL;
	ret = host_wait_fence(b->ctx, seq, timeout_ms);
	vg_ctx_error(b->ctx, err);
	return ret;
}

const struct vg_backend vg_backend_host = {
	.name = "host",
	.init = host_init,
	.open = host_open,
	.close = host_close,
	.info = host_info,
	.prog_info = host_prog_info,
	.vram_alloc = host_vram_alloc,
	.host_alloc = host_host_alloc,
	.mem_free = host_mem_free,
	.unmap_cpu = host_unmap_cpu,
	.submit = host_submit,
	.wait = host_wait,
};
