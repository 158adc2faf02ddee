/* SPDX-License-Identifier: MIT */
/*
 * Raw access to the vugpu PCI function from user space, without any kernel driver: find the
 * device in sysfs, unbind whatever driver holds it, turn on memory decoding and bus mastering
 * through the config file, mmap BAR0 (resource0) and BAR1 (resource1), and get guest-physical
 * addresses of locked buffers from /proc/self/pagemap. This is what a malicious guest driver
 * has; everything above it (gpu.c) programs the device from docs/hw-spec.md alone.
 */
#ifndef HOSTILE_RAW_H
#define HOSTILE_RAW_H

#include <stddef.h>
#include <stdint.h>

struct raw_dev {
	char bdf[32];
	volatile uint8_t *bar0;
	size_t bar0_size;
	volatile uint8_t *bar1;  /* the VM's VRAM (its slice), by identity */
	size_t bar1_size;
	uint64_t mmio;           /* BAR0 accesses made */
};

/* Locked anonymous pages and their guest-physical addresses. */
struct sysbuf {
	uint8_t *va;
	size_t pages;
	uint64_t *gpa;  /* per page */
};

/* Find, unbind, enable and map the first 1de5:6b75 function. 0 or -errno (message on stderr). */
int raw_open(struct raw_dev *d);
void raw_close(struct raw_dev *d);

static inline uint32_t rd32(struct raw_dev *d, uint32_t off)
{
	d->mmio++;
	return *(volatile uint32_t *)(d->bar0 + off);
}

static inline void wr32(struct raw_dev *d, uint32_t off, uint32_t v)
{
	d->mmio++;
	*(volatile uint32_t *)(d->bar0 + off) = v;
}

/* VRAM through BAR1 (guest view: the slice). Callers keep addresses inside bar1_size. */
static inline uint32_t vr32(struct raw_dev *d, uint64_t a) { return *(volatile uint32_t *)(d->bar1 + a); }
static inline uint64_t vr64(struct raw_dev *d, uint64_t a) { return *(volatile uint64_t *)(d->bar1 + a); }
static inline void vw32(struct raw_dev *d, uint64_t a, uint32_t v) { *(volatile uint32_t *)(d->bar1 + a) = v; }
static inline void vw64(struct raw_dev *d, uint64_t a, uint64_t v) { *(volatile uint64_t *)(d->bar1 + a) = v; }
void vfill(struct raw_dev *d, uint64_t a, uint32_t pattern, size_t len);
/* Does [a, a+len) hold only `pattern` words? */
int vcheck(struct raw_dev *d, uint64_t a, uint32_t pattern, size_t len);

/* Order BAR1 and sysmem stores before the next BAR0 write (the doorbell). */
static inline void wmb_all(void) { __sync_synchronize(); }

int sysbuf_alloc(struct sysbuf *b, size_t pages);
void sysbuf_free(struct sysbuf *b);

/* Highest end of "System RAM" in /proc/iomem (guest-physical), 0 if unknown. */
uint64_t ram_top(void);

double now_ms(void);
void sleep_ms(unsigned int ms);

#endif
