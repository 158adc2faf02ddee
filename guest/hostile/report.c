/* SPDX-License-Identifier: MIT */
#include "report.h"

#include <stdarg.h>
#include <stdio.h>

void js_init(struct js *j)
{
	j->n = 0;
	j->b[0] = 0;
	j->items = 0;
}

void jsf(struct js *j, const char *fmt, ...)
{
	va_list ap;
	int w;

	if (j->n >= sizeof(j->b) - 1)
		return;
	va_start(ap, fmt);
	w = vsnprintf(j->b + j->n, sizeof(j->b) - j->n, fmt, ap);
	va_end(ap);
	if (w > 0)
		j->n += (size_t)w;
	if (j->n >= sizeof(j->b))
		j->n = sizeof(j->b) - 1; /* truncated: the record is still one line, maybe not JSON */
}

void js_item(struct js *j)
{
	if (j->items++)
		jsf(j, ",");
}

int report_check(const char *name, int ok, const char *fields)
{
	printf("VUGPU-CHECK {\"check\":\"%s\",\"ok\":%s%s%s}\n", name, ok ? "true" : "false",
	       fields && *fields ? "," : "", fields ? fields : "");
	fflush(stdout);
	return ok;
}

void report_phase(const char *phase)
{
	printf("VUGPU-PHASE {\"phase\":\"%s\"}\n", phase);
	fflush(stdout);
}
