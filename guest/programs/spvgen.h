/* SPDX-License-Identifier: MIT */
/*
 * A tiny SPIR-V emitter for guest tests: one parametric GLCompute kernel over uint storage
 * buffers, written word by word (the guest image has no glslang or spirv-as). vugpu-programs
 * uses it for the limit probes and vugpu-hostile for the program attacks (forbidden
 * capabilities and extensions, out-of-bounds accesses, endless loops, oversized shared memory,
 * many distinct modules). Every module it emits without a deliberate defect passes
 * `spirv-val --target-env vulkan1.1` (checked by `make -C guest/programs check-spvgen` on a host
 * with SPIRV-Tools).
 *
 * The kernel (binding i = descriptor set 0, binding i, each a `uint data[]` block):
 *   STORE     out[g] = constant + g                  (out = binding out_binding, default 0)
 *   OOB       out[g] = in[g + read_offset]; in[g + write_offset] = constant
 *                                                   (in = binding 0, out = binding 1; the offsets
 *                                                    aim outside the binding)
 *   LOOP      x = constant ^ g; for (i = 0; i != n; i += step) x = x * 1664525 + 1013904223;
 *             out[g] = x                            (n = push word 0; step 2 and an odd n: endless)
 *   SHARED    sh[l] = g; out[g] = sh[l] + constant  (sh: Workgroup uint[shared_words], l = local index)
 * g = gl_GlobalInvocationID.x.
 */
#ifndef VG_SPVGEN_H
#define VG_SPVGEN_H

#include <stddef.h>
#include <stdint.h>

enum spvgen_body { SPVGEN_STORE, SPVGEN_OOB, SPVGEN_LOOP, SPVGEN_SHARED };

/* SPIR-V enumerants used by callers */
#define SPV_CAP_SHADER 1
#define SPV_CAP_ADDRESSES 4
#define SPV_CAP_LINKAGE 5
#define SPV_CAP_KERNEL 6
#define SPV_CAP_INT64 11
#define SPV_CAP_IMAGE_QUERY 50
#define SPV_CAP_VARIABLE_POINTERS_STORAGE_BUFFER 4441
#define SPV_CAP_VARIABLE_POINTERS 4442
#define SPV_CAP_PHYSICAL_STORAGE_BUFFER_ADDRESSES 5347

struct spvgen {
	uint32_t version;          /* SPIR-V version word; 0 = 1.3 (0x00010300) */
	enum spvgen_body body;
	uint32_t local_x;          /* LocalSize x (y = z = 1); 0 = 64 */
	unsigned int bindings;     /* storage buffers declared (≥ the body's need) */
	unsigned int out_binding;  /* STORE: the binding written */
	uint32_t nonwritable;      /* bit i: binding i is NonWritable */
	uint32_t constant;
	int32_t read_offset, write_offset;
	uint32_t step;             /* LOOP: loop increment; 0 = 1 */
	uint32_t shared_words;     /* SHARED: Workgroup array length */
	uint32_t extra_capability; /* an OpCapability besides Shader (0: none) */
	const char *extension;     /* an OpExtension (NULL: none) */
	const char *ext_import;    /* an OpExtInstImport (NULL: none) */
};

/*
 * Emit the module into out (capacity in words). Returns the module size in words, or 0 when it
 * does not fit.
 */
size_t spvgen_emit(const struct spvgen *g, uint32_t *out, size_t cap);

#endif
