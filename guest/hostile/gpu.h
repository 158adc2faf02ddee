/* SPDX-License-Identifier: MIT */
/*
 * A minimal driver for the vugpu programming model (docs/hw-spec.md §3–§8), written for
 * misuse: one address space whose page tables live in VRAM and are written through BAR1,
 * channels (instance block, USERD, GPFIFO, pushbuffer segments) that can be bound to any chid,
 * a pushbuffer encoder and polling waits (no interrupts: PFIFO_CHAN_ERR, USERD.GP_GET and the
 * MMU_FAULT_* registers are read with a timeout).
 *
 * Guest VRAM layout (the slice, guest view; everything below 8 MiB is identity-mapped):
 *   0x000000 page directory         0x0b2000 runlist           0x100000 pushbuffers (64 KiB each)
 *   0x010000 small PT of PDE 0      0x0b3000 semaphores        0x200000 program modules (2 MiB)
 *   0x050000 small PT of PDE 1      0x0c0000 GPFIFO rings      0x400000 program buffers (1 MiB)
 *   0x090000 large PT of PDE 2      0x0a0000 instance blocks   0x5e0000 program push/spec blocks
 *                                   0x0b0000 USERDs            0x5f0000 kernel params/outputs
 *                                                              0x600000 SRC (1 MiB)
 *                                                              0x700000 DST (1 MiB)
 * VA map: [0, 8 MiB) → VRAM identity; 0x04000000 + 4 KiB·i → sysmem page i;
 * 0x08000000 + 4 KiB·i (PDE 1) and 0x10000000 + 128 KiB·i (PDE 2, large) → attack targets.
 */
#ifndef HOSTILE_GPU_H
#define HOSTILE_GPU_H

#include <stdint.h>
#include "raw.h"
#include "vugpu_hw.h"

/* Registers the guest driver does not use (so not in vugpu_hw.h): hw-spec §3.3 and §3.9. */
#define H_PRAMIN_BASE 0x001700
#define H_PRAMIN_WINDOW 0x700000
#define H_DIAG_DMA_ADDR_LO 0x00a040
#define H_DIAG_DMA_ADDR_HI 0x00a044
#define H_DIAG_DMA_LEN 0x00a048
#define H_DIAG_DMA_VRAM_OFF 0x00a04c
#define H_DIAG_DMA_CTRL 0x00a050
#define H_DIAG_DMA_STATUS 0x00a054
#define H_DIAG_DMA_ERROR 0x00a058
#define H_DIAG_VRAM_OFF 0x00a060
#define H_DIAG_VRAM_PEEK 0x00a064
#define H_DIAG_VRAM_POKE 0x00a068

#define L_PD 0x000000ull
#define L_PT0 0x010000ull
#define L_PT1 0x050000ull
#define L_LPT2 0x090000ull
#define L_INST 0x0a0000ull
#define L_USERD 0x0b0000ull
#define L_RUNLIST 0x0b2000ull
#define L_SEM 0x0b3000ull
#define L_GPFIFO 0x0c0000ull
#define L_PB 0x100000ull
#define L_PROG 0x200000ull
#define L_PBUF 0x400000ull
#define L_PPARAM 0x5e0000ull
#define L_KPARAM 0x5f0000ull
#define L_KOUT 0x5f8000ull
#define L_SRC 0x600000ull
#define L_DST 0x700000ull
#define L_IDENTITY (8ull << 20)

#define VA_SYS 0x04000000ull
#define VA_ATTACK 0x08000000ull     /* PDE 1, small pages */
#define VA_LATTACK 0x10000000ull    /* PDE 2, large pages */

#define SLOTS 16                    /* channel structures (inst/USERD/GPFIFO/PB) */
#define GP_ENTRIES 512
#define PB_SIZE 0x10000u

struct gpu {
	struct raw_dev *d;
	uint64_t slice;      /* PFB: bytes */
	unsigned int nchan;  /* PFIFO_CHAN_COUNT */
	int pv;              /* PV page present */
	uint32_t prog[VG_PPROG_COUNT]; /* PPROG registers (hw-spec §3.10), in order; prog[0] = version */
	uint8_t runlist[VG_MAX_CHANNELS];
};

struct chan {
	unsigned int chid;
	unsigned int slot;
	uint64_t inst, userd, gpfifo, pb; /* VRAM = VA (identity) */
	unsigned int put;
	uint32_t pb_off;
	uint32_t sem_payload;
};

/* What a channel did by the end of a wait. */
struct outcome {
	int done;           /* GP_GET caught up with GP_PUT */
	uint32_t err;       /* PFIFO_CHAN_ERR */
	uint32_t err_info;
	uint32_t state;     /* PFIFO_CHAN_STATE */
	uint32_t gp_get;
	double ms;
};

struct fault {
	uint32_t status, info, chid;
	uint64_t addr;
};

/* A pushbuffer being built (words are copied into the channel's segment on submit). */
struct pb {
	uint32_t w[2048];
	unsigned int n;
};

int gpu_init(struct gpu *g, struct raw_dev *d);

/* Page tables: PD with PDE 0 (identity + sysmem), PDE 1 (attack, small), PDE 2 (attack, large). */
void as_build(struct gpu *g);
void as_set_pde(struct gpu *g, unsigned int pdi, uint64_t pde);
void as_pte(struct gpu *g, uint64_t pt, unsigned int index, uint64_t pte);
void as_flush(struct gpu *g);
static inline uint64_t pte_vram(uint64_t a) { return (a & VG_ENTRY_ADDR_MASK) | VG_PTE_PRESENT | VG_ENTRY_TARGET(VG_TARGET_VRAM); }
static inline uint64_t pte_sys(uint64_t a) { return (a & VG_ENTRY_ADDR_MASK) | VG_PTE_PRESENT | VG_ENTRY_TARGET(VG_TARGET_SYSMEM); }

/* Write slot's instance block (USERD/PD overridable by the caller afterwards) and bind chid. */
void chan_prepare(struct gpu *g, struct chan *c, unsigned int chid, unsigned int slot);
void chan_bind(struct gpu *g, struct chan *c);
int chan_open(struct gpu *g, struct chan *c, unsigned int chid, unsigned int slot);
void chan_close(struct gpu *g, struct chan *c);
void runlist_submit(struct gpu *g);

void pb_reset(struct pb *p);
void pb_mthd(struct pb *p, unsigned int subc, unsigned int mthd, unsigned int n, const uint32_t *data);
void pb_1(struct pb *p, unsigned int subc, unsigned int mthd, uint32_t v);
void pb_copy(struct pb *p, uint64_t src, uint64_t dst, uint32_t len);
void pb_sem_release(struct pb *p, uint64_t va, uint32_t payload);
void pb_kernel(struct pb *p, uint32_t id, uint64_t params, uint32_t plen, unsigned int nbuf, const uint64_t *va, const uint32_t *len);

/* A program launch (hw-spec §6.3): every method of it, so nothing is left from a previous launch. */
struct prog_launch {
	uint64_t module;
	uint32_t length, entry;
	uint32_t grid[3];
	uint64_t params;
	uint32_t plen;
	uint64_t spec;
	uint32_t nspec;
	unsigned int nbuf;        /* BUFFER(i) methods written */
	uint32_t buffer_count;    /* BUFFER_COUNT; 0xffffffff = nbuf */
	uint64_t va[VG_COMPUTE_MAX_BUFFERS];
	uint32_t len[VG_COMPUTE_MAX_BUFFERS];
	uint32_t flags[VG_COMPUTE_MAX_BUFFERS];
};
void pb_program(struct pb *p, const struct prog_launch *l);
/* PPROG field by register offset */
static inline uint32_t gpu_prog(const struct gpu *g, uint32_t reg) { return g->prog[(reg - VG_PPROG_FIRST) / 4]; }

/* Append the pushbuffer as one GPFIFO entry and ring the doorbell. */
void chan_submit(struct gpu *g, struct chan *c, const struct pb *p);
/* Append a raw GPFIFO entry (w0, w1) and ring (garbage entries). */
void chan_submit_raw(struct gpu *g, struct chan *c, uint32_t w0, uint32_t w1);
/* Wait until the channel is idle, errored, or timeout_ms passed. */
struct outcome chan_wait(struct gpu *g, struct chan *c, unsigned int timeout_ms);

void fault_clear(struct gpu *g);
struct fault fault_read(struct gpu *g);
/* Clear pending interrupt state (PMC_INTR, PFIFO_INTR, FENCE/ERR pending). */
void intr_clear(struct gpu *g);

uint64_t ptimer_ns(struct gpu *g);

#endif
