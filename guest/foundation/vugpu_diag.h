/* SPDX-License-Identifier: MIT */
/*
 * vugpu foundation diagnostic driver: user API (shared by vugpu_diag.ko and foundation-test).
 * Register offsets are those of docs/diag-block.md.
 */
#ifndef VUGPU_DIAG_H
#define VUGPU_DIAG_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define VUGPU_PCI_VENDOR 0x1de5
#define VUGPU_PCI_DEVICE 0x6b75
#define VUGPU_NUM_VECTORS 4

/* BAR0 registers (docs/diag-block.md) */
#define VUGPU_PMC_BOOT_0 0x000000
#define VUGPU_PMC_BOOT_0_VALUE 0x0C0000A1u
#define VUGPU_PMC_INTR 0x000100    /* W1C pending sources, bit n = vector n (docs/hw-spec.md §2) */
#define VUGPU_PMC_INTR_EN 0x000140 /* bit n enables MSI-X vector n */
#define VUGPU_DIAG_MAGIC 0x00A000
#define VUGPU_DIAG_MAGIC_VALUE 0x56554750u /* 'VUGP' */
#define VUGPU_DIAG_SCRATCH(n) (0x00A010 + 4 * (n))
#define VUGPU_DIAG_SCRATCH_COUNT 8
#define VUGPU_DIAG_DMA_ADDR_LO 0x00A040
#define VUGPU_DIAG_DMA_ADDR_HI 0x00A044
#define VUGPU_DIAG_DMA_LEN 0x00A048
#define VUGPU_DIAG_DMA_VRAM_OFF 0x00A04C
#define VUGPU_DIAG_DMA_CTRL 0x00A050
#define VUGPU_DIAG_DMA_STATUS 0x00A054
#define VUGPU_DIAG_DMA_ERROR 0x00A058
#define VUGPU_DIAG_DMA_FNV 0x00A05C
#define VUGPU_DIAG_VRAM_OFF 0x00A060
#define VUGPU_DIAG_VRAM_PEEK 0x00A064
#define VUGPU_DIAG_VRAM_POKE 0x00A068
#define VUGPU_DIAG_IRQ_FIRE 0x00A080
#define VUGPU_DIAG_IRQ_COUNT 0x00A084

#define VUGPU_DMA_TO_VRAM 1   /* DIAG_DMA_CTRL value: system memory -> VRAM */
#define VUGPU_DMA_FROM_VRAM 2 /* VRAM -> system memory */
#define VUGPU_DMA_STATUS_DONE 1
#define VUGPU_DMA_STATUS_ERROR 2
#define VUGPU_DMA_MAX_LEN (1u << 20)

/* mmap offsets on /dev/vugpu-diag<N>: BAR0 at 0, BAR1 at VUGPU_MMAP_BAR1. */
#define VUGPU_MMAP_BAR0 0ull
#define VUGPU_MMAP_BAR1 (1ull << 40)

struct vugpu_diag_info {
	__u64 bar0_size;
	__u64 bar1_size;
	__u64 dma_addr;     /* bus address of the driver's coherent DMA buffer */
	__u32 dma_size;     /* its size in bytes */
	__u32 num_vectors;  /* MSI-X vectors enabled */
};

struct vugpu_diag_reg {
	__u32 offset;       /* BAR0 byte offset, 4-aligned */
	__u32 value;
};

/*
 * One DMA loopback step through DIAG_DMA_* using the driver's buffer.
 * TO_VRAM: the driver fills len bytes with vugpu_pattern(seed), computes their FNV-1a and runs
 * the transfer. FROM_VRAM: the driver poisons the buffer, runs the transfer, then compares the
 * bytes with vugpu_pattern(seed) (the pattern the caller put into VRAM beforehand).
 */
struct vugpu_diag_dma {
	__u32 direction;    /* VUGPU_DMA_TO_VRAM or VUGPU_DMA_FROM_VRAM */
	__u32 len;          /* 1 .. dma_size */
	__u32 vram_offset;
	__u32 seed;
	/* out */
	__u32 status;       /* DIAG_DMA_STATUS after the transfer */
	__u32 error;        /* DIAG_DMA_ERROR */
	__u32 device_fnv;   /* DIAG_DMA_FNV */
	__u32 buffer_fnv;   /* FNV-1a of the buffer as the driver sees it after the step */
	__u32 mismatches;   /* FROM_VRAM: bytes differing from the pattern */
	__u32 first_mismatch; /* index of the first one (or 0xffffffff) */
};

struct vugpu_diag_irq_counts {
	__u64 count[VUGPU_NUM_VECTORS]; /* interrupts handled per MSI-X vector since probe */
};

#define VUGPU_DIAG_IOC_INFO _IOR('V', 0x40, struct vugpu_diag_info)
#define VUGPU_DIAG_IOC_READ32 _IOWR('V', 0x41, struct vugpu_diag_reg)
#define VUGPU_DIAG_IOC_WRITE32 _IOW('V', 0x42, struct vugpu_diag_reg)
#define VUGPU_DIAG_IOC_DMA _IOWR('V', 0x43, struct vugpu_diag_dma)
#define VUGPU_DIAG_IOC_IRQ_COUNTS _IOR('V', 0x44, struct vugpu_diag_irq_counts)

/* Test pattern and hash, identical in the driver and in user space. */
static inline void vugpu_pattern(__u8 *buf, __u32 len, __u32 seed)
{
	__u32 x = seed ? seed : 0x9e3779b9u, i;

	for (i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = (__u8)(x >> 24);
	}
}

static inline __u32 vugpu_fnv1a(const __u8 *buf, __u32 len)
{
	__u32 h = 0x811c9dc5u, i;

	for (i = 0; i < len; i++) {
		h ^= buf[i];
		h *= 0x01000193u;
	}
	return h;
}

#endif /* VUGPU_DIAG_H */
