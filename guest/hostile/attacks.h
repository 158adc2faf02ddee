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
	int failed;
};

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
int attack_legit_after(struct ctx *x);

/* Map the locked sysmem pages at VA_SYS (after as_build). */
void map_sys(struct ctx *x);

#endif
