// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * First-fit range allocator over a sorted, coalesced free list. Used for VRAM (one per device)
 * and for GPU virtual addresses (one per context). Allocation counts are small (tens to
 * hundreds of buffers), so a list is simpler than a tree and fast enough.
 */
#include "vg_priv.h"

int vg_ralloc_init(struct vg_ralloc *a, u64 base, u64 size)
{
	struct vg_range *r = vg_os_zalloc(sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->start = base;
	r->size = size;
	a->free = r;
	a->base = base;
	a->size = size;
	a->used = 0;
	return 0;
}

void vg_ralloc_fini(struct vg_ralloc *a)
{
	struct vg_range *r = a->free, *n;

	while (r) {
		n = r->next;
		vg_os_free(r);
		r = n;
	}
	a->free = NULL;
}

int vg_ralloc_alloc(struct vg_ralloc *a, u64 size, u64 align, u64 *out)
{
	struct vg_range **pp, *r;

	if (size == 0 || align == 0 || (align & (align - 1)))
		return -EINVAL;
	for (pp = &a->free; (r = *pp); pp = &r->next) {
		u64 start = VG_ALIGN_UP(r->start, align);
		u64 pad = start - r->start;
		u64 end = r->start + r->size;

		if (start < r->start || start > end || end - start < size)
			continue;
		if (pad == 0) {
			/* take from the front */
			r->start += size;
			r->size -= size;
			if (r->size == 0) {
				*pp = r->next;
				vg_os_free(r);
			}
		} else if (start + size == end) {
			r->size = pad; /* take from the back */
		} else {
			/* split: [r->start, start) stays, [start+size, end) is a new range */
			struct vg_range *tail = vg_os_zalloc(sizeof(*tail));

			if (!tail)
				return -ENOMEM;
			tail->start = start + size;
			tail->size = end - tail->start;
			tail->next = r->next;
			r->size = pad;
			r->next = tail;
		}
		a->used += size;
		*out = start;
		return 0;
	}
	return -ENOMEM;
}

void vg_ralloc_free(struct vg_ralloc *a, u64 start, u64 size)
{
	struct vg_range **pp = &a->free, *prev = NULL, *r, *n;

	if (size == 0)
		return;
	while ((r = *pp) && r->start < start) {
		prev = r;
		pp = &r->next;
	}
	a->used -= size;
	/* merge with the previous range */
	if (prev && prev->start + prev->size == start) {
		prev->size += size;
		if (r && prev->start + prev->size == r->start) {
			prev->size += r->size;
			prev->next = r->next;
			vg_os_free(r);
		}
		return;
	}
	/* merge with the next range */
	if (r && start + size == r->start) {
		r->start = start;
		r->size += size;
		return;
	}
	n = vg_os_zalloc(sizeof(*n));
	if (!n) {
		/* cannot track the hole: leak it rather than corrupt the list */
		return;
	}
	n->start = start;
	n->size = size;
	n->next = r;
	*pp = n;
}
