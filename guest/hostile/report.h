/* SPDX-License-Identifier: MIT */
/* One-line JSON records on stdout (guest/README.md: VUGPU-<KIND> <json>). */
#ifndef HOSTILE_REPORT_H
#define HOSTILE_REPORT_H

#include <stddef.h>

struct js {
	char b[24576];
	size_t n;
	int items; /* elements in the current array (for commas) */
};

void js_init(struct js *j);
void jsf(struct js *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Start the next element of an array (adds the comma). */
void js_item(struct js *j);

/* VUGPU-CHECK {"check":name,"ok":ok,<fields>}; returns ok. */
int report_check(const char *name, int ok, const char *fields);
void report_phase(const char *phase);

#endif
