/* SPDX-License-Identifier: MIT */
/*
 * A minimal vfio-user client (the protocol QEMU's vfio-user-pci speaks; see QEMU's
 * docs/interop/vfio-user.rst and, for the server's side, src/device-model/README.md), enough for a user-space
 * driver to own a vugpu device without a VM: VERSION, DMA_MAP of its own memory (with the fd, so
 * the server maps it directly), region info with the BAR1 fd to mmap, config space access,
 * MSI-X eventfds (SET_IRQS), BAR0 REGION_READ/REGION_WRITE, DEVICE_RESET. Synchronous: one
 * request in flight, replies checked against the request id.
 */
#ifndef VFU_CLIENT_H
#define VFU_CLIENT_H

#include <stdint.h>
#include <stddef.h>

struct vfu_client {
	int sock;
	uint16_t next_id;
	int failed;              /* a transport error happened: every later access fails */
	char error[160];
	uint64_t bar0_size;
	uint64_t bar1_size;
	int bar1_fd;
	uint64_t bar1_fd_offset;
	volatile uint8_t *bar1;  /* mmap of the BAR1 fd (NULL if not mappable) */
	int irq_fd[4];
	uint32_t nirq;
	int post_writes;         /* vfu_bar0_post32 posts (NO_REPLY); VUGPU_HOST_NO_POSTED_WRITES=1: not */
	uint64_t messages;
	uint64_t refused;        /* BAR0 accesses the server answered with an error (not final) */
	uint64_t stale_replies;  /* header-only replies to earlier requests, dropped (restarts) */
};

/* Connect, negotiate VERSION, read DEVICE_GET_INFO; a refused or dropped connection (the device
 * still serving its previous client) is retried for up to timeout_ms. */
int vfu_connect(struct vfu_client *c, const char *path, unsigned int timeout_ms);
void vfu_close(struct vfu_client *c);
int vfu_dma_map(struct vfu_client *c, int fd, uint64_t fd_offset, uint64_t iova, uint64_t size, int writable);
int vfu_dma_unmap(struct vfu_client *c, uint64_t iova, uint64_t size);
/* Region info of a BAR; for a mappable one also receives its fd and mmap offset. */
int vfu_region_info(struct vfu_client *c, uint32_t index, uint64_t *size, uint32_t *flags, int *fd,
		    uint64_t *mmap_offset, uint64_t *sparse_offset, uint64_t *sparse_size);
int vfu_map_bar1(struct vfu_client *c);
int vfu_region_read(struct vfu_client *c, uint32_t index, uint64_t off, void *buf, uint32_t n);
int vfu_region_write(struct vfu_client *c, uint32_t index, uint64_t off, const void *buf, uint32_t n);
/* Turn on memory decoding + bus mastering and MSI-X in config space, hand over n eventfds. */
int vfu_enable_msix(struct vfu_client *c, uint32_t n);
int vfu_disable_irqs(struct vfu_client *c);
int vfu_reset(struct vfu_client *c);

/* Used by the core's platform layer (vg_os_user.h). A broken connection is latched in
 * c->failed (every later access fails, reads return all-ones); a refused access is not. */
uint32_t vfu_bar0_rd32(struct vfu_client *c, uint32_t off);
void vfu_bar0_wr32(struct vfu_client *c, uint32_t off, uint32_t v);
void vfu_bar0_post32(struct vfu_client *c, uint32_t off, uint32_t v);

#endif /* VFU_CLIENT_H */
