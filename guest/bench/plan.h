/* SPDX-License-Identifier: MIT */
/*
 * The built-in kernels as programs, guest side: the C mirror of src/gpu/program/builtins.ts (the
 * engine's table). A kernel's parameter block becomes the SPIR-V launches of its GPU form
 * (native/shaders/builtins/<file>.comp, shipped as /programs/builtins/<file>.spv), with the same
 * parameter checks as the native kernel and every launch under the CPU device's loop cap.
 * Keep the two in step: same dispatch counts, grids and push words for the same inputs.
 */
#ifndef VUGPU_BENCH_PLAN_H
#define VUGPU_BENCH_PLAN_H

#include <stddef.h>
#include <stdint.h>

#define PLAN_MAX_DISPATCHES 64
#define PLAN_PUSH_MAX 64
#define PLAN_REPEAT_UNTIL_TIME UINT64_MAX

struct plan_dispatch {
	uint32_t grid[3];
	uint8_t push[PLAN_PUSH_MAX];
	uint32_t push_bytes;
	uint64_t repeat;        /* ≥ 1; PLAN_REPEAT_UNTIL_TIME: until time_limit_ns (LOOP without a count) */
};

struct plan {
	unsigned int n;
	struct plan_dispatch d[PLAN_MAX_DISPATCHES];
	uint64_t time_limit_ns;  /* LOOP's target_ns: stop after the launch during which it passed; 0 none */
	int elapsed_binding;     /* store the plan's elapsed ns (u64) at this binding/offset; -1 none */
	uint32_t elapsed_offset;
	int error_binding;       /* after the plan: (u32 there) & mask ≠ 0 means -EINVAL (BFS); -1 none */
	uint32_t error_offset, error_mask;
};

/* 0 and *out, -EINVAL where the native kernel rejects its parameters, -ENOSYS for an unknown id,
 * -E2BIG when a plan would need more than PLAN_MAX_DISPATCHES launches. */
int builtin_plan(unsigned int kernel, const void *params, size_t param_bytes, const uint64_t *lengths,
		 unsigned int nbuf, struct plan *out);
/* Module file name (without .spv) and buffers of kernel `id`; NULL / -1 for an unknown id. */
const char *builtin_file(unsigned int kernel);
int builtin_buffers(unsigned int kernel);
/* Bit i: the kernel writes buffer i (the others are declared readonly in its shader). */
uint32_t builtin_writes(unsigned int kernel);

#endif
