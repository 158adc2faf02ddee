// SPDX-License-Identifier: MIT
/* Backend over the Linux driver: /dev/vugpu<N> ioctls (guest/common/vugpu_uapi.h) and mmap. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include "vg_backend.h"

struct vg_backend_ctx {
	int fd;
};

static int xioctl(int fd, unsigned long req, void *arg)
{
	int r;

	do {
		r = ioctl(fd, req, arg);
	} while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : 0;
}

static int kmod_init(void)
{
	const char *path = getenv("VUGPU_DEV");

	return access(path && *path ? path : "/dev/vugpu0", R_OK | W_OK) ? -ENODEV : 0;
}

static int kmod_open(struct vg_backend_ctx **out)
{
	const char *path = getenv("VUGPU_DEV");
	struct vugpu_ctx_create cc = { 0 };
	struct vg_backend_ctx *b;
	int ret;

	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->fd = open(path && *path ? path : "/dev/vugpu0", O_RDWR | O_CLOEXEC);
	if (b->fd < 0) {
		ret = -errno;
		free(b);
		return ret;
	}
	ret = xioctl(b->fd, VUGPU_IOC_CTX_CREATE, &cc);
	if (ret) {
		close(b->fd);
		free(b);
		return ret;
	}
	*out = b;
	return 0;
}

static void kmod_close(struct vg_backend_ctx *b)
{
	close(b->fd); /* the driver tears the context down on release */
	free(b);
}

static int kmod_info(struct vg_backend_ctx *b, struct vugpu_info *info)
{
	return xioctl(b->fd, VUGPU_IOC_INFO, info);
}

static int kmod_prog_info(struct vg_backend_ctx *b, struct vugpu_prog_info *info)
{
	int ret = xioctl(b->fd, VUGPU_IOC_PROG_INFO, info);

	if (ret == -ENOTTY) { /* a driver of uapi 1: no programs */
		memset(info, 0, sizeof(*info));
		return 0;
	}
	return ret;
}

static int kmod_vram_alloc(struct vg_backend_ctx *b, uint64_t size, int cpu_access, uint32_t *handle, uint64_t *va,
			   void **cpu)
{
	struct vugpu_mem_alloc a = { .size = size, .flags = cpu_access ? VUGPU_MEM_VRAM : VUGPU_MEM_NO_CPU };
	struct vugpu_mem_free f = { 0 };
	void *p;
	int ret;

	ret = xioctl(b->fd, VUGPU_IOC_MEM_ALLOC, &a);
	if (ret == -EINVAL && !cpu_access) { /* a driver of uapi < 3: an ordinary buffer, left unmapped */
		a = (struct vugpu_mem_alloc){ .size = size, .flags = VUGPU_MEM_VRAM };
		ret = xioctl(b->fd, VUGPU_IOC_MEM_ALLOC, &a);
	}
	if (ret)
		return ret;
	if (!cpu_access) {
		*handle = a.handle;
		*va = a.va;
		*cpu = NULL;
		return 0;
	}
	size = (size + 4095) & ~4095ull;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, (off_t)a.mmap_offset);
	if (p == MAP_FAILED) {
		ret = -errno;
		f.handle = a.handle;
		xioctl(b->fd, VUGPU_IOC_MEM_FREE, &f);
		return ret;
	}
	*handle = a.handle;
	*va = a.va;
	*cpu = p;
	return 0;
}

static int kmod_host_alloc(struct vg_backend_ctx *b, uint64_t size, uint32_t *handle, uint64_t *va, void **cpu)
{
	struct vugpu_host_register r = { 0 };
	void *p;
	int ret;

	size = (size + 4095) & ~4095ull;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	r.uaddr = (uintptr_t)p;
	r.size = size;
	ret = xioctl(b->fd, VUGPU_IOC_HOST_REGISTER, &r);
	if (ret) {
		munmap(p, size);
		return ret;
	}
	*handle = r.handle;
	*va = r.va;
	*cpu = p;
	return 0;
}

static int kmod_mem_free(struct vg_backend_ctx *b, uint32_t handle, void *cpu, uint64_t size, int host)
{
	struct vugpu_mem_free f = { .handle = handle };
	int ret;

	size = (size + 4095) & ~4095ull;
	if (!host && cpu)
		munmap(cpu, size);
	ret = xioctl(b->fd, VUGPU_IOC_MEM_FREE, &f); /* unpins host pages once the GPU is done */
	if (host && cpu)
		munmap(cpu, size);
	return ret;
}

static void kmod_unmap_cpu(struct vg_backend_ctx *b, void *cpu, uint64_t size, int host)
{
	(void)b;
	(void)host;
	if (cpu)
		munmap(cpu, (size + 4095) & ~4095ull);
}

static int kmod_submit(struct vg_backend_ctx *b, const uint32_t *words, uint32_t count, uint32_t flags,
		       uint64_t *seq)
{
	struct vugpu_submit s = { .words = (uintptr_t)words, .count = count, .flags = flags };
	int ret = xioctl(b->fd, VUGPU_IOC_SUBMIT, &s);

	if (!ret)
		*seq = s.seq;
	return ret;
}

static int kmod_wait(struct vg_backend_ctx *b, uint64_t seq, uint32_t timeout_ms, struct vugpu_error *err)
{
	struct vugpu_wait w = { .seq = seq, .timeout_ms = timeout_ms };
	int ret = xioctl(b->fd, VUGPU_IOC_WAIT, &w);

	*err = w.err;
	/* a query of a pending fence: the caller polls again at once, so let the threads that make
	 * progress run first (as the host backend does) */
	if (ret == -ETIMEDOUT && !timeout_ms)
		sched_yield();
	return ret;
}

const struct vg_backend vg_backend_kmod = {
	.name = "kmod",
	.init = kmod_init,
	.open = kmod_open,
	.close = kmod_close,
	.info = kmod_info,
	.prog_info = kmod_prog_info,
	.vram_alloc = kmod_vram_alloc,
	.host_alloc = kmod_host_alloc,
	.mem_free = kmod_mem_free,
	.unmap_cpu = kmod_unmap_cpu,
	.submit = kmod_submit,
	.wait = kmod_wait,
};
