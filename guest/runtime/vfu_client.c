// SPDX-License-Identifier: MIT
/* Minimal synchronous vfio-user client; see vfu_client.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>
#include "vfu_client.h"

enum {
	CMD_VERSION = 1, CMD_DMA_MAP = 2, CMD_DMA_UNMAP = 3, CMD_DEVICE_GET_INFO = 4,
	CMD_GET_REGION_INFO = 5, CMD_SET_IRQS = 8, CMD_REGION_READ = 9, CMD_REGION_WRITE = 10,
	CMD_DEVICE_RESET = 13,
};
#define FLAG_REPLY 0x1u
#define FLAG_NO_REPLY 0x10u
#define FLAG_ERROR 0x20u
#define HDR 16
#define MAX_FDS 8
#define MAX_MSG (HDR + 16 + 4096)
#define REGION_CONFIG 7
#define IRQ_MSIX 2
#define IRQ_DATA_NONE 1u
#define IRQ_DATA_EVENTFD 4u
#define IRQ_ACTION_TRIGGER 32u
#define REGION_FLAG_MMAP 4u
#define REGION_FLAG_CAPS 8u
#define CAP_SPARSE_MMAP 1

struct hdr {
	uint16_t id, cmd;
	uint32_t size, flags, error;
};

static int fail(struct vfu_client *c, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->error, sizeof(c->error), fmt, ap);
	va_end(ap);
	return err;
}

static int read_all(int fd, void *buf, size_t n)
{
	uint8_t *p = buf;

	while (n) {
		ssize_t r = read(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EIO;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/*
 * Send one request in one sendmsg, with its fds. A posted one (NO_REPLY in h->flags) gets no
 * reply: the server handles messages in order, so a later request sees its effects.
 */
static int send_request(struct vfu_client *c, const struct hdr *h, const void *payload, uint32_t plen,
			const int *fds, int nfds)
{
	uint8_t out[MAX_MSG];
	char cbuf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
	struct iovec iov;
	struct msghdr msg;
	struct cmsghdr *cm;
	ssize_t r;

	if (c->failed)
		return -EIO;
	if (plen > sizeof(out) - HDR || nfds > MAX_FDS)
		return -EINVAL;
	memcpy(out, h, HDR);
	if (plen)
		memcpy(out + HDR, payload, plen);
	iov.iov_base = out;
	iov.iov_len = HDR + plen;
	memset(&msg, 0, sizeof(msg));
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	if (nfds) {
		memset(cbuf, 0, sizeof(cbuf));
		msg.msg_control = cbuf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
	}
	do {
		r = sendmsg(c->sock, &msg, MSG_NOSIGNAL);
	} while (r < 0 && errno == EINTR);
	if (r != (ssize_t)(HDR + plen)) {
		c->failed = 1;
		return fail(c, -EIO, "sendmsg of command %u failed: %s", h->cmd, r < 0 ? strerror(errno) : "short");
	}
	c->messages++;
	return 0;
}

/*
 * One request/reply exchange: the request (send_request), then the reply header received with
 * recvmsg (fds arrive with the first bytes), the rest read after it.
 */
static int xact(struct vfu_client *c, uint16_t cmd, const void *payload, uint32_t plen, const int *fds,
		int nfds, void *reply, uint32_t cap, uint32_t *rlen, int *rfds, int *nrfds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
	struct hdr h = { .id = c->next_id++, .cmd = cmd, .size = HDR + plen };
	struct hdr rh;
	struct iovec iov;
	struct msghdr msg;
	struct cmsghdr *cm;
	int got = 0, ret, i, stale = 0;
	ssize_t r;

	ret = send_request(c, &h, payload, plen, fds, nfds);
	if (ret)
		return ret;

again:
	iov.iov_base = &rh;
	iov.iov_len = HDR;
	memset(&msg, 0, sizeof(msg));
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = cbuf;
	msg.msg_controllen = sizeof(cbuf);
	do {
		r = recvmsg(c->sock, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
	} while (r < 0 && errno == EINTR);
	if (r != HDR) {
		c->failed = 1;
		return fail(c, -EIO, "reply to command %u: %s", cmd, r < 0 ? strerror(errno) : "connection closed");
	}
	/*
	 * A header-only reply to an earlier request: after a crash, the restarted server answers a
	 * request it found in its reply window with a header-only ERROR, since the dead server may
	 * or may not have sent its reply (docs/architecture.md, "Surviving a restart"). When it
	 * had, that request is long done here and this answer is a duplicate: drop it and wait for
	 * ours, as QEMU does (the stream is still in step; only a reply with a body could not be).
	 */
	if (rh.id != h.id && rh.size == HDR && (rh.flags & 0xf) == FLAG_REPLY && stale++ < 8) {
		for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
				for (i = 0; i < (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int)); i++)
					close(((int *)CMSG_DATA(cm))[i]);
		c->stale_replies++;
		fprintf(stderr, "vugpu-host: dropped a header-only reply to earlier request %u (a restarted server's)\n", rh.id);
		goto again;
	}
	for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			int *p = (int *)CMSG_DATA(cm);

			for (i = 0; i < n; i++) {
				if (rfds && got < (nrfds ? *nrfds : 0))
					rfds[got++] = p[i];
				else
					close(p[i]);
			}
		}
	}
	if (nrfds)
		*nrfds = got;
	if (rh.size < HDR || rh.size - HDR > cap + 4096) {
		c->failed = 1;
		return fail(c, -EIO, "reply to command %u has size %u", cmd, rh.size);
	}
	{
		uint32_t body = rh.size - HDR;
		uint8_t *dst = reply;
		uint8_t sink[256];

		if (body > cap) {
			/* larger than expected: keep what fits, drain the rest */
			ret = read_all(c->sock, dst, cap);
			for (uint32_t left = body - cap; !ret && left;) {
				uint32_t n = left < sizeof(sink) ? left : sizeof(sink);

				ret = read_all(c->sock, sink, n);
				left -= n;
			}
			body = cap;
		} else {
			ret = body ? read_all(c->sock, dst, body) : 0;
		}
		if (ret) {
			c->failed = 1;
			return fail(c, -EIO, "short reply to command %u", cmd);
		}
		if (rlen)
			*rlen = body;
	}
	if (rh.id != h.id || rh.cmd != cmd || (rh.flags & 0xf) != FLAG_REPLY) {
		c->failed = 1;
		return fail(c, -EIO, "unexpected reply (id %u cmd %u flags 0x%x) to %u/%u", rh.id, rh.cmd, rh.flags,
			    h.id, cmd);
	}
	if (rh.flags & FLAG_ERROR) {
		for (i = 0; i < got; i++)
			close(rfds[i]);
		if (nrfds)
			*nrfds = 0;
		return fail(c, -(int)(rh.error ? rh.error : EIO), "command %u refused: %s", cmd,
			    strerror((int)(rh.error ? rh.error : EIO)));
	}
	return 0;
}

static int connect_once(struct vfu_client *c, const char *path)
{
	static const char caps[] =
		"{\"capabilities\":{\"max_msg_fds\":8,\"max_data_xfer_size\":1048576,\"pgsizes\":4096,"
		"\"max_dma_maps\":65535,\"write_multiple\":false}}";
	uint8_t ver[4 + sizeof(caps)], reply[256];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	uint32_t info[4], rlen;
	int ret, i;

	memset(c, 0, sizeof(*c));
	c->post_writes = !getenv("VUGPU_HOST_NO_POSTED_WRITES");
	c->bar1_fd = -1;
	for (i = 0; i < 4; i++)
		c->irq_fd[i] = -1;
	if (strlen(path) >= sizeof(sa.sun_path))
		return fail(c, -ENAMETOOLONG, "socket path too long");
	strcpy(sa.sun_path, path);
	c->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->sock < 0)
		return fail(c, -errno, "socket: %s", strerror(errno));
	if (connect(c->sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = -errno;
		close(c->sock);
		c->sock = -1;
		return fail(c, ret, "connect %s: %s", path, strerror(-ret));
	}
	memset(ver, 0, 4); /* major 0, minor 0 */
	memcpy(ver + 4, caps, sizeof(caps)); /* includes the NUL */
	ret = xact(c, CMD_VERSION, ver, sizeof(ver), NULL, 0, reply, sizeof(reply), &rlen, NULL, NULL);
	if (ret)
		return ret;
	if (rlen < 4 || reply[0] | reply[1])
		return fail(c, -EPROTO, "server speaks vfio-user %u.%u", reply[0] | reply[1] << 8, reply[2] | reply[3] << 8);
	memset(info, 0, sizeof(info));
	info[0] = sizeof(info);
	ret = xact(c, CMD_DEVICE_GET_INFO, info, sizeof(info), NULL, 0, info, sizeof(info), &rlen, NULL, NULL);
	if (ret)
		return ret;
	if (info[2] < 8)
		return fail(c, -ENODEV, "device has %u regions", info[2]);
	c->nirq = info[3];
	return 0;
}

/*
 * A vfio-user server serves one client per device: a second connection is closed at once,
 * and the previous client's departure takes the server a moment to notice. So a connection
 * dropped before VERSION is answered is retried, with backoff, for up to timeout_ms.
 */
int vfu_connect(struct vfu_client *c, const char *path, unsigned int timeout_ms)
{
	unsigned int waited = 0, delay = 20;
	int ret;

	for (;;) {
		ret = connect_once(c, path);
		if (ret != -EIO && ret != -ECONNREFUSED)
			return ret;
		if (waited >= timeout_ms)
			return ret;
		vfu_close(c);
		usleep(delay * 1000);
		waited += delay;
		if (delay < 500)
			delay *= 2;
	}
}

void vfu_close(struct vfu_client *c)
{
	int i;

	if (c->bar1)
		munmap((void *)c->bar1, c->bar1_size);
	if (c->bar1_fd >= 0)
		close(c->bar1_fd);
	for (i = 0; i < 4; i++)
		if (c->irq_fd[i] >= 0)
			close(c->irq_fd[i]);
	if (c->sock >= 0)
		close(c->sock);
	c->sock = -1;
	c->bar1 = NULL;
	c->bar1_fd = -1;
}

int vfu_dma_map(struct vfu_client *c, int fd, uint64_t fd_offset, uint64_t iova, uint64_t size, int writable)
{
	uint8_t p[32];
	uint32_t argsz = 32, flags = 1u | (writable ? 2u : 0u);

	memcpy(p, &argsz, 4);
	memcpy(p + 4, &flags, 4);
	memcpy(p + 8, &fd_offset, 8);
	memcpy(p + 16, &iova, 8);
	memcpy(p + 24, &size, 8);
	return xact(c, CMD_DMA_MAP, p, sizeof(p), &fd, 1, NULL, 0, NULL, NULL, NULL);
}

int vfu_dma_unmap(struct vfu_client *c, uint64_t iova, uint64_t size)
{
	uint8_t p[24], r[24];
	uint32_t argsz = 24, flags = 0;

	memcpy(p, &argsz, 4);
	memcpy(p + 4, &flags, 4);
	memcpy(p + 8, &iova, 8);
	memcpy(p + 16, &size, 8);
	return xact(c, CMD_DMA_UNMAP, p, sizeof(p), NULL, 0, r, sizeof(r), NULL, NULL, NULL);
}

int vfu_region_info(struct vfu_client *c, uint32_t index, uint64_t *size, uint32_t *flags, int *fd,
		    uint64_t *mmap_offset, uint64_t *sparse_offset, uint64_t *sparse_size)
{
	uint8_t p[32], r[256];
	uint32_t argsz = sizeof(r), rlen = 0, cap_off, rflags;
	int rfds[1], nrfds = 1, ret;

	memset(p, 0, sizeof(p));
	memcpy(p, &argsz, 4);
	memcpy(p + 8, &index, 4);
	ret = xact(c, CMD_GET_REGION_INFO, p, sizeof(p), NULL, 0, r, sizeof(r), &rlen, rfds, &nrfds);
	if (ret)
		return ret;
	if (rlen < 32)
		return fail(c, -EPROTO, "region %u info of %u bytes", index, rlen);
	memcpy(&rflags, r + 4, 4);
	memcpy(&cap_off, r + 12, 4);
	memcpy(size, r + 16, 8);
	memcpy(mmap_offset, r + 24, 8);
	*flags = rflags;
	*sparse_offset = 0;
	*sparse_size = 0;
	if ((rflags & REGION_FLAG_CAPS) && cap_off >= 32 && cap_off + 32 <= rlen) {
		uint16_t id;
		uint32_t nr;

		memcpy(&id, r + cap_off, 2);
		memcpy(&nr, r + cap_off + 8, 4);
		if (id == CAP_SPARSE_MMAP && nr >= 1) {
			memcpy(sparse_offset, r + cap_off + 16, 8);
			memcpy(sparse_size, r + cap_off + 24, 8);
		}
	}
	if (fd)
		*fd = nrfds ? rfds[0] : -1;
	else if (nrfds)
		close(rfds[0]);
	return 0;
}

int vfu_map_bar1(struct vfu_client *c)
{
	uint64_t size, off, soff, ssize;
	uint32_t flags;
	int fd = -1, ret;
	void *p;

	ret = vfu_region_info(c, 0, &c->bar0_size, &flags, NULL, &off, &soff, &ssize);
	if (ret)
		return ret;
	ret = vfu_region_info(c, 1, &size, &flags, &fd, &off, &soff, &ssize);
	if (ret)
		return ret;
	c->bar1_size = size;
	if (!(flags & REGION_FLAG_MMAP) || fd < 0) {
		if (fd >= 0)
			close(fd);
		return fail(c, -ENOTSUP, "BAR1 is not mappable (flags 0x%x): this device mode traps BAR1", flags);
	}
	if (!ssize) {
		soff = 0;
		ssize = size;
	}
	if (soff != 0 || ssize != size) {
		close(fd);
		return fail(c, -ENOTSUP, "BAR1 is only partly mappable (%#llx+%#llx)", (unsigned long long)soff,
			    (unsigned long long)ssize);
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)(off + soff));
	if (p == MAP_FAILED) {
		ret = -errno;
		close(fd);
		return fail(c, ret, "mmap of BAR1: %s", strerror(-ret));
	}
	c->bar1_fd = fd;
	c->bar1_fd_offset = off;
	c->bar1 = p;
	return 0;
}

int vfu_region_read(struct vfu_client *c, uint32_t index, uint64_t off, void *buf, uint32_t n)
{
	uint8_t p[16], r[16 + 256];
	uint32_t rlen = 0, count;
	int ret;

	if (n > 256)
		return -EINVAL;
	memcpy(p, &off, 8);
	memcpy(p + 8, &index, 4);
	memcpy(p + 12, &n, 4);
	ret = xact(c, CMD_REGION_READ, p, sizeof(p), NULL, 0, r, sizeof(r), &rlen, NULL, NULL);
	if (ret)
		return ret;
	memcpy(&count, r + 12, 4);
	if (rlen < 16 + n || count != n)
		return fail(c, -EPROTO, "short region read (%u of %u bytes)", rlen, n);
	memcpy(buf, r + 16, n);
	return 0;
}

/* A REGION_WRITE, answered or posted (NO_REPLY: no answer, so no error either). */
static int region_write(struct vfu_client *c, uint32_t index, uint64_t off, const void *buf, uint32_t n, int posted)
{
	uint8_t p[16 + 256], r[16];

	if (n > 256)
		return -EINVAL;
	memcpy(p, &off, 8);
	memcpy(p + 8, &index, 4);
	memcpy(p + 12, &n, 4);
	memcpy(p + 16, buf, n);
	if (posted) {
		struct hdr h = { .id = c->next_id++, .cmd = CMD_REGION_WRITE, .size = HDR + 16 + n, .flags = FLAG_NO_REPLY };

		return send_request(c, &h, p, 16 + n, NULL, 0);
	}
	return xact(c, CMD_REGION_WRITE, p, 16 + n, NULL, 0, r, sizeof(r), NULL, NULL, NULL);
}

int vfu_region_write(struct vfu_client *c, uint32_t index, uint64_t off, const void *buf, uint32_t n)
{
	return region_write(c, index, off, buf, n, 0);
}

/*
 * BAR0 accesses. Only a broken connection is final (xact latches it in c->failed); a refused
 * access is not. A restarted server refuses, with a header-only ERROR, the one request it found
 * in the dead server's reply window (or one that waited too long for it). A register read has
 * no side effects, so it is asked again and the driver sees the register, not the all-ones a
 * guest gets from QEMU there. A refused write is not repeated: in the reply window its effects
 * had already been applied and checkpointed (and a PV call must not run twice); a guest's write
 * in the same place is dropped by QEMU just the same. Latching every refusal as a dead device
 * made a twin whose server crashed at the wrong moment unable to go on (issue 34).
 */
uint32_t vfu_bar0_rd32(struct vfu_client *c, uint32_t off)
{
	uint32_t v;
	int tries;

	for (tries = 0; tries < 3; tries++) {
		if (!vfu_region_read(c, 0, off, &v, 4))
			return v;
		if (c->failed)
			break;
		c->refused++;
		fprintf(stderr, "vugpu-host: BAR0 read at 0x%x refused (%s); asking again\n", off, c->error);
	}
	return 0xffffffffu;
}

void vfu_bar0_wr32(struct vfu_client *c, uint32_t off, uint32_t v)
{
	if (vfu_region_write(c, 0, off, &v, 4) && !c->failed) {
		c->refused++;
		fprintf(stderr, "vugpu-host: BAR0 write at 0x%x refused (%s); not repeated\n", off, c->error);
	}
}

/*
 * A posted BAR0 write (NO_REPLY), as QEMU's vfio-user-pci sends a guest's BAR writes unless
 * x-no-posted-writes is set: the doorbell. VUGPU_HOST_NO_POSTED_WRITES=1 waits for the answer.
 */
void vfu_bar0_post32(struct vfu_client *c, uint32_t off, uint32_t v)
{
	if (!c->post_writes)
		vfu_bar0_wr32(c, off, v);
	else
		region_write(c, 0, off, &v, 4, 1); /* a broken connection is latched in c->failed */
}

static int set_irqs(struct vfu_client *c, uint32_t flags, uint32_t count, const int *fds, int nfds)
{
	uint32_t p[5] = { 20, flags, IRQ_MSIX, 0, count };

	return xact(c, CMD_SET_IRQS, p, sizeof(p), fds, nfds, NULL, 0, NULL, NULL, NULL);
}

int vfu_enable_msix(struct vfu_client *c, uint32_t n)
{
	uint8_t cfg[256];
	uint16_t cmd, ctrl;
	uint8_t pos;
	int ret, i, guard = 0;

	if (n > 4)
		return -EINVAL;
	ret = vfu_region_read(c, REGION_CONFIG, 0, cfg, sizeof(cfg));
	if (ret)
		return ret;
	/* memory decoding + bus mastering, INTx off */
	memcpy(&cmd, cfg + 4, 2);
	cmd |= 0x2 | 0x4 | 0x400;
	ret = vfu_region_write(c, REGION_CONFIG, 4, &cmd, 2);
	if (ret)
		return ret;
	/* find the MSI-X capability (id 0x11) and enable it, function mask off */
	for (pos = cfg[0x34] & 0xfc; pos && guard < 48; pos = cfg[pos + 1] & 0xfc, guard++) {
		if (cfg[pos] == 0x11)
			break;
	}
	if (!pos || cfg[pos] != 0x11)
		return fail(c, -ENODEV, "no MSI-X capability in config space");
	memcpy(&ctrl, cfg + pos + 2, 2);
	ctrl = (uint16_t)((ctrl | 0x8000) & ~0x4000);
	ret = vfu_region_write(c, REGION_CONFIG, pos + 2, &ctrl, 2);
	if (ret)
		return ret;
	for (i = 0; i < (int)n; i++) {
		c->irq_fd[i] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (c->irq_fd[i] < 0)
			return fail(c, -errno, "eventfd: %s", strerror(errno));
	}
	return set_irqs(c, IRQ_DATA_EVENTFD | IRQ_ACTION_TRIGGER, n, c->irq_fd, (int)n);
}

int vfu_disable_irqs(struct vfu_client *c)
{
	return set_irqs(c, IRQ_DATA_NONE | IRQ_ACTION_TRIGGER, 0, NULL, 0);
}

int vfu_reset(struct vfu_client *c)
{
	return xact(c, CMD_DEVICE_RESET, NULL, 0, NULL, 0, NULL, 0, NULL, NULL, NULL);
}
