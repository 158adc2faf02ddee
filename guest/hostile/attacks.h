/* SPDX-License-Identifier: MIT */
/*
 * The attacks of vugpu-hostile. Each one reports a VUGPU-CHECK line whose "ok" means "contained
 * as docs/hw-spec.md says": the offending channel got the fault or error the spec names (or the
 * write was ignored), nothing was read from or written to memory the VM does not own, and the
 * VM's own device keeps working.
 */
#ifndef HOSTILE_ATTACKS_H
#define HOSTILE_ATTACKS_H

#include <stdint.h>
#include "gpu.h"
#include "raw.h"

#define SYS_PAGES 16
/* The hostile's source pattern: a scan of another slice (vugpu-hostile scan) looks for it. */
#define HOSTILE_MARK 0x48535430u

struct ctx {
	struct raw_dev d;
	struct gpu g;
	struct sysbuf sys;       /* SYS_PAGES locked pages, mapped at VA_SYS */
	uint64_t engine_vram;    /* the engine's VRAM size (not visible to a guest: an argument) */
	uint64_t ram_top;        /* end of guest RAM (/proc/iomem) */
	uint32_t seed;
	unsigned int garbage_runs;
	unsigned int hold_ms;    /* how long the channel-pool hog holds its channels */
	unsigned int wait_ms;    /* per submission */
	unsigned int endless_ms; /* how long to wait for the watchdog */
	unsigned int chid_next, slot_next;
	unsigned int flood;      /* program-module-flood: distinct modules */
	unsigned int bursts;     /* flood-bursts: flood bursts */
	int flood_control;       /* flood-bursts: a control burst after each flood burst */
	int failed;
};

#define BIT(n) (1u << (n))
#define ANY_VA (~0ull)
#define UNIT_HOST 0
#define UNIT_SEMAPHORE 1
#define UNIT_COPY 2
#define UNIT_COMPUTE 3

/* What a case must produce. */
struct expect {
	uint32_t codes;   /* allowed PFIFO_CHAN_ERR values, bit c (BIT(0): completing is allowed) */
	uint32_t reasons; /* MMU_FAULT: allowed reasons, bit r */
	int unit;         /* MMU_FAULT: -1 any */
	int write;        /* MMU_FAULT: -1 any */
	uint64_t va;      /* MMU_FAULT: fault VA, or ANY_VA */
	int follow_up;    /* a semaphore release in the next entry must not run */
	uint32_t prog_reasons; /* BAD_PROGRAM: allowed PFIFO_CHAN_ERR_REASON values, bit r (0: any) */
};

/* Case machinery shared by the attack files (attacks.c). */
struct js;
int run_case(struct ctx *x, struct js *j, const char *what, const struct pb *p, const uint32_t *raw,
	     const struct expect *e);
struct expect mmu(uint32_t reasons, int unit, int write, uint64_t va);
struct expect code(uint32_t codes);
int legit(struct ctx *x, const struct pb *p);
void reset_state(struct ctx *x);
unsigned int next_chid(struct ctx *x);
unsigned int next_slot(struct ctx *x);
const char *unit_name(unsigned int u);
uint32_t lcg_steps(uint32_t s, uint64_t n);

int attack_baseline(struct ctx *x);
int attack_other_slice(struct ctx *x);
int attack_unmapped_sysmem(struct ctx *x);
int attack_instance(struct ctx *x);
int attack_foreign_chid(struct ctx *x);
int attack_runlist(struct ctx *x);
int attack_chid_pool(struct ctx *x);
int attack_bad_gpfifo(struct ctx *x);
int attack_bad_methods(struct ctx *x);
int attack_garbage(struct ctx *x);
int attack_endless(struct ctx *x);
int attack_acquire_forever(struct ctx *x);
int attack_pramin(struct ctx *x);
int attack_diag(struct ctx *x);
int attack_pv(struct ctx *x);
int attack_programs(struct ctx *x);  /* prog_attacks.c */
int attack_flood_bursts(struct ctx *x);  /* prog_attacks.c: vugpu-hostile flood-bursts */
int attack_legit_after(struct ctx *x);

/* Map the locked sysmem pages at VA_SYS (after as_build). */
void map_sys(struct ctx *x);

#endif
