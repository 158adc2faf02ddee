// SPDX-License-Identifier: MIT
/*
 * Host tool for test/guest-bench-plan.test.ts: reads cases "<kernel> <param hex> <len>..." one per
 * line and prints builtin_plan()'s answer as one JSON line each, for comparison with the engine's
 * src/gpu/program/builtins.ts. Not part of the guest image.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

int main(void)
{
	static char line[1 << 16];
	static struct plan pl;

	while (fgets(line, sizeof(line), stdin)) {
		uint8_t params[256];
		uint64_t len[16];
		size_t plen = 0;
		unsigned int kernel, nbuf = 0;
		char *tok = strtok(line, " \n"), *hex;
		int ret;

		if (!tok)
			continue;
		kernel = (unsigned int)strtoul(tok, NULL, 0);
		hex = strtok(NULL, " \n");
		for (size_t i = 0; hex && hex[0] != '-' && hex[2 * i] && hex[2 * i + 1] && plen < sizeof(params); i++) {
			char b[3] = { hex[2 * i], hex[2 * i + 1], 0 };

			params[plen++] = (uint8_t)strtoul(b, NULL, 16);
		}
		while ((tok = strtok(NULL, " \n")) && nbuf < 16)
			len[nbuf++] = strtoull(tok, NULL, 0);
		ret = builtin_plan(kernel, params, plen, len, nbuf, &pl);
		printf("{\"ret\":%d", ret);
		if (!ret) {
			printf(",\"dispatches\":[");
			for (unsigned int i = 0; i < pl.n; i++) {
				const struct plan_dispatch *d = &pl.d[i];

				printf("%s{\"grid\":[%u,%u,%u],\"push\":\"", i ? "," : "", d->grid[0], d->grid[1], d->grid[2]);
				for (uint32_t k = 0; k < d->push_bytes; k++)
					printf("%02x", d->push[k]);
				if (d->repeat == PLAN_REPEAT_UNTIL_TIME)
					printf("\",\"repeat\":\"inf\"}");
				else
					printf("\",\"repeat\":%" PRIu64 "}", d->repeat);
			}
			printf("],\"time\":\"%" PRIu64 "\",\"elapsed\":[%d,%u],\"error\":[%d,%u,%u]", pl.time_limit_ns,
			       pl.elapsed_binding, pl.elapsed_offset, pl.error_binding, pl.error_offset, pl.error_mask);
		}
		printf("}\n");
	}
	return 0;
}
