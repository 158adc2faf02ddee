// SPDX-License-Identifier: MIT
/* Writes every spvgen variant meant to be valid as <dir>/ok-<name>.spv (make check-spvgen runs
 * spirv-val on them) and the deliberately refused ones as <dir>/bad-<name>.spv. */
#include <stdio.h>
#include <sys/stat.h>
#include "spvgen.h"

static uint32_t buf[1 << 16];

static int dump(const char *dir, const char *name, struct spvgen g)
{
	char p[512];
	size_t n = spvgen_emit(&g, buf, sizeof(buf) / 4);
	FILE *f;

	if (!n) {
		fprintf(stderr, "%s: does not fit\n", name);
		return 1;
	}
	snprintf(p, sizeof(p), "%s/%s.spv", dir, name);
	f = fopen(p, "wb");
	if (!f || fwrite(buf, 4, n, f) != n) {
		perror(p);
		return 1;
	}
	fclose(f);
	return 0;
}

int main(int argc, char **argv)
{
	const char *d = argc > 1 ? argv[1] : "spvgen-out";
	int bad = 0;

	mkdir(d, 0755);
	bad |= dump(d, "ok-store", (struct spvgen){ .body = SPVGEN_STORE, .constant = 7 });
	bad |= dump(d, "ok-store-spv10", (struct spvgen){ .body = SPVGEN_STORE, .version = 0x00010000 });
	bad |= dump(d, "ok-oob", (struct spvgen){ .body = SPVGEN_OOB, .constant = 0xdead, .read_offset = 1024, .write_offset = -1 });
	bad |= dump(d, "ok-loop", (struct spvgen){ .body = SPVGEN_LOOP, .constant = 3 });
	bad |= dump(d, "ok-endless", (struct spvgen){ .body = SPVGEN_LOOP, .step = 2 });
	bad |= dump(d, "ok-shared", (struct spvgen){ .body = SPVGEN_SHARED, .shared_words = 8193 });
	bad |= dump(d, "ok-nonwritable", (struct spvgen){ .body = SPVGEN_STORE, .bindings = 3, .nonwritable = 6 });
	bad |= dump(d, "ok-out-binding3", (struct spvgen){ .body = SPVGEN_STORE, .bindings = 4, .out_binding = 3 });
	bad |= dump(d, "ok-bindings16", (struct spvgen){ .body = SPVGEN_STORE, .bindings = 16 });
	bad |= dump(d, "ok-varptr", (struct spvgen){ .body = SPVGEN_STORE, .extra_capability = SPV_CAP_VARIABLE_POINTERS });
	bad |= dump(d, "ok-extension", (struct spvgen){ .body = SPVGEN_STORE, .extension = "SPV_KHR_variable_pointers" });
	bad |= dump(d, "ok-wg1025", (struct spvgen){ .body = SPVGEN_STORE, .local_x = 1025 });
	bad |= dump(d, "bad-kernel", (struct spvgen){ .body = SPVGEN_STORE, .extra_capability = SPV_CAP_KERNEL });
	bad |= dump(d, "bad-spv14", (struct spvgen){ .body = SPVGEN_STORE, .version = 0x00010400 });
	return bad;
}
