/* SPDX-License-Identifier: MIT */
/*
 * Benchmark harness: the 14 GPUvm benchmarks timed in the nine stages of G-KVM's Table IV
 * (Init, MemAlloc, DataInit, HtoD, KernConf, Exec, DtoH, DataRead, Close), each verified
 * against a CPU reference after the timed run. One `VUGPU-BENCH {json}` line per run.
 *
 * Stage meanings here: Init = context creation (vgCtxCreate; vgInit, the driver's bring-up,
 * is timed apart as driver_us because the Linux driver did it at module load); MemAlloc = device (and pinned host)
 * allocations; DataInit = generating the inputs on the CPU; HtoD / DtoH = copies; KernConf =
 * preparing launch parameters; Exec = launches until the result is ready (including any
 * per-iteration control copies the algorithm needs, e.g. BFS's "changed" flag); DataRead =
 * reading the results back on the CPU (one pass over the output); Close = freeing and context
 * destruction. Verification is not timed.
 */
#ifndef VUGPU_BENCH_H
#define VUGPU_BENCH_H

#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include "vugpu.h"

enum stage { S_INIT, S_MEMALLOC, S_DATAINIT, S_HTOD, S_KERNCONF, S_EXEC, S_DTOH, S_DATAREAD, S_CLOSE, S_COUNT };

struct bench_opts {
	unsigned int size;     /* problem size (n, rows/cols, nodes...); 0 = default */
	unsigned int iters;    /* iterations; 0 = default */
	unsigned int mb;       /* copy size in MiB (cpy, pincpy); 0 = default */
	unsigned int ms;       /* loop: run for this long instead of a fixed count */
	unsigned int launches; /* loop: kernels launched back to back, each synchronized (0 = 1) */
	unsigned int seed;
	int large;             /* GPUvm/G-KVM sizes */
	const char *programs;  /* --programs DIR: run the kernels as SPIR-V programs (DIR/<file>.spv) */
};

struct bench_run {
	const struct bench_opts *o;
	vgContext ctx;
	double stage_us[S_COUNT];
	double t0;
	int cur;               /* stage being timed, -1 = none */
	vgResult err;          /* first runtime error */
	char err_where[64];
	char err_detail[256];  /* the runtime's description of the error (channel error code and name) */
	int verified;          /* 1 verified, 0 mismatch, -1 not checked */
	char detail[256];      /* verification / size description */
	char size_desc[96];
	double checksum;       /* DataRead: sum over the output */
	double driver_us;      /* vgInit */
	vgDeviceInfo info0;    /* counters right after context creation */
	vgDeviceInfo info1;    /* ... and just before destruction */
	vgProgram progs[16];   /* --programs: module per kernel id, loaded on first use */
	double prog_load_us;   /* vgProgramLoad (inside the stage that first launched) */
	unsigned long prog_launches;
};

struct bench {
	const char *name;
	const char *what;
	int (*run)(struct bench_run *r);
};

double now_us(void);
void stage_begin(struct bench_run *r, enum stage s);
void stage_end(struct bench_run *r);

/* Record the first failing runtime call (the run stops and reports it). */
int bench_fail(struct bench_run *r, vgResult e, const char *where);
#define VG(r, call)                                            \
	do {                                                   \
		vgResult e_ = (call);                           \
		if (e_)                                         \
			return bench_fail((r), e_, #call);      \
	} while (0)

/* Same, for functions that free their host buffers at `out:`. */
#define VGO(r, call)                                           \
	do {                                                   \
		vgResult e_ = (call);                           \
		if (e_) {                                       \
			bench_fail((r), e_, #call);             \
			goto out;                               \
		}                                               \
	} while (0)

/*
 * A kernel launch: vgLaunch of the built-in, or with --programs its SPIR-V plan (launch.c).
 * Asynchronous like vgLaunch.
 */
vgResult bench_launch(struct bench_run *r, unsigned int kernel, const unsigned int grid[3], const void *params,
		      size_t param_bytes, const vgBuffer *buffers, unsigned int nbuffers);

/* Init/Close helpers shared by every benchmark (time the stages themselves). */
int bench_init(struct bench_run *r);
int bench_close(struct bench_run *r);

/* A JSON string literal of s on stdout. */
void json_str(const char *s);
/* vugpu-bench b2b (b2b.c): back-to-back NOP launches, each timed; the exit status */
int run_b2b(unsigned int launches, unsigned int ms, int keep_going);

/* deterministic inputs */
uint32_t rng_u32(uint64_t *s);
float rng_unit(uint64_t *s); /* [0, 1) */

/* DataRead pass */
/* Fold output bytes into the run's "digest" (FNV-1a; sum_u32/sum_f32 do it too). */
void digest_bytes(const void *p, size_t n);
double sum_u32(const uint32_t *p, size_t n);
double sum_f32(const float *p, size_t n);
/* verification helpers: number of mismatching elements */
size_t cmp_u32(const uint32_t *got, const uint32_t *want, size_t n, size_t *first);
size_t cmp_f32(const float *got, const float *want, size_t n, double rel, double abs_tol, size_t *first);

void *xmalloc(size_t n);

extern const struct bench bench_nop, bench_loop, bench_madd, bench_mmul, bench_fmadd, bench_fmmul,
	bench_cpy, bench_pincpy, bench_backprop, bench_bfs, bench_hotspot, bench_lud, bench_srad,
	bench_srad2;

#endif /* VUGPU_BENCH_H */
