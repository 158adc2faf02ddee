// SPDX-License-Identifier: MIT
/*
 * Command pools and buffers, and the queue. A command buffer is a CPU list of resolved commands
 * (bindings as GPU VAs, push constants copied). vkQueueSubmit replays the lists into the
 * runtime, which queues launches and copies in order, and hands them to the device with one
 * vgFlushFence: one submission per vkQueueSubmit unless the runtime's queue fills up or a command
 * needs the GPU to have caught up (indirect counts, timestamps). The channel runs everything in
 * order, so barriers and same-queue semaphore waits cost nothing.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include "vk_priv.h"

enum cmd_type {
	CMD_DISPATCH,
	CMD_DISPATCH_INDIRECT,
	CMD_COPY,
	CMD_FILL,
	CMD_SET_EVENT,
	CMD_RESET_EVENT,
	CMD_WAIT_EVENT,
	CMD_TIMESTAMP,
	CMD_RESET_QUERY,
};

struct vkv_cmd {
	enum cmd_type type;
	union {
		struct {
			struct vkv_pipeline *pipe;
			uint32_t grid[3];
			uint32_t nb;
			vgDevicePtr ind_va;     /* indirect: the counts' VA, and their CPU address in host memory */
			const void *ind_host;
			vgBinding b[VKV_MAX_BINDINGS];
			uint8_t push[VKV_MAX_PUSH];
		} disp;
		struct {
			vgDevicePtr src, dst;
			uint64_t size;
		} copy;
		struct {
			vgDevicePtr dst;
			uint64_t size;
			uint32_t data;
		} fill;
		struct vkv_event *event;
		struct {
			struct vkv_query_pool *pool;
			uint32_t first, count;
		} query;
	} u;
};

/* pinned host memory holding vkCmdUpdateBuffer data until the buffer is reset */
struct vkv_chunk {
	struct vkv_chunk *next;
	void *host;
	vgDevicePtr va;
	uint64_t size, used;
};

#define CHUNK_MIN (64u << 10)

/* ---- pools and buffers ---- */

VkResult vkv_CreateCommandPool(VkDevice device, const VkCommandPoolCreateInfo *ci, const VkAllocationCallbacks *alloc,
			       VkCommandPool *out)
{
	struct vkv_cmd_pool *p;

	(void)device, (void)alloc;
	if (ci->queueFamilyIndex != 0)
		return VK_ERROR_INITIALIZATION_FAILED;
	p = calloc(1, sizeof(*p));
	if (!p)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	*out = (VkCommandPool)(uintptr_t)p;
	return VK_SUCCESS;
}

static void cb_reset(struct vkv_cmd_buffer *cb)
{
	struct vkv_chunk *c;

	if (cb->chunks) {
		pthread_mutex_lock(&vkv_lock);
		while ((c = cb->chunks)) {
			cb->chunks = c->next;
			vgMemFreeHost(cb->dev->ctx, c->host);
			free(c);
		}
		pthread_mutex_unlock(&vkv_lock);
	}
	cb->ncmds = 0;
	cb->record_error = VK_SUCCESS;
	cb->pipe = NULL;
	cb->layout = NULL;
	cb->nbound = 0;
	memset(cb->bound, 0, sizeof(cb->bound));
	memset(cb->push, 0, sizeof(cb->push));
}

void vkv_cmd_buffer_free(struct vkv_cmd_buffer *cb)
{
	cb_reset(cb);
	free(cb->cmds);
	free(cb);
}

void vkv_DestroyCommandPool(VkDevice device, VkCommandPool pool, const VkAllocationCallbacks *alloc)
{
	struct vkv_cmd_pool *p = (struct vkv_cmd_pool *)(uintptr_t)pool;

	(void)device, (void)alloc;
	if (!p)
		return;
	while (p->buffers) {
		struct vkv_cmd_buffer *cb = p->buffers;

		p->buffers = cb->next;
		vkv_cmd_buffer_free(cb);
	}
	free(p);
}

VkResult vkv_ResetCommandPool(VkDevice device, VkCommandPool pool, VkCommandPoolResetFlags flags)
{
	struct vkv_cmd_pool *p = (struct vkv_cmd_pool *)(uintptr_t)pool;
	struct vkv_cmd_buffer *cb;

	(void)device, (void)flags;
	for (cb = p->buffers; cb; cb = cb->next)
		cb_reset(cb);
	return VK_SUCCESS;
}

void vkv_TrimCommandPool(VkDevice device, VkCommandPool pool, VkCommandPoolTrimFlags flags)
{
	(void)device, (void)pool, (void)flags;
}

VkResult vkv_AllocateCommandBuffers(VkDevice device, const VkCommandBufferAllocateInfo *ai, VkCommandBuffer *out)
{
	struct vkv_cmd_pool *p = (struct vkv_cmd_pool *)(uintptr_t)ai->commandPool;
	uint32_t i;

	for (i = 0; i < ai->commandBufferCount; i++) {
		struct vkv_cmd_buffer *cb = calloc(1, sizeof(*cb));

		if (!cb) {
			vkv_FreeCommandBuffers(device, ai->commandPool, i, out);
			for (i = 0; i < ai->commandBufferCount; i++)
				out[i] = VK_NULL_HANDLE;
			return VK_ERROR_OUT_OF_HOST_MEMORY;
		}
		set_loader_magic_value(cb);
		cb->dev = (struct vkv_device *)device;
		cb->pool = p;
		cb->next = p->buffers;
		p->buffers = cb;
		out[i] = (VkCommandBuffer)cb;
	}
	return VK_SUCCESS;
}

void vkv_FreeCommandBuffers(VkDevice device, VkCommandPool pool, uint32_t n, const VkCommandBuffer *bufs)
{
	struct vkv_cmd_pool *p = (struct vkv_cmd_pool *)(uintptr_t)pool;
	uint32_t i;

	(void)device;
	for (i = 0; i < n; i++) {
		struct vkv_cmd_buffer *cb = (struct vkv_cmd_buffer *)bufs[i], **pp;

		if (!cb)
			continue;
		for (pp = &p->buffers; *pp; pp = &(*pp)->next) {
			if (*pp == cb) {
				*pp = cb->next;
				break;
			}
		}
		vkv_cmd_buffer_free(cb);
	}
}

VkResult vkv_BeginCommandBuffer(VkCommandBuffer cmdbuf, const VkCommandBufferBeginInfo *bi)
{
	struct vkv_cmd_buffer *cb = (struct vkv_cmd_buffer *)cmdbuf;

	cb_reset(cb);
	cb->usage = bi->flags;
	return VK_SUCCESS;
}

VkResult vkv_EndCommandBuffer(VkCommandBuffer cmdbuf)
{
	return ((struct vkv_cmd_buffer *)cmdbuf)->record_error;
}

VkResult vkv_ResetCommandBuffer(VkCommandBuffer cmdbuf, VkCommandBufferResetFlags flags)
{
	(void)flags;
	cb_reset((struct vkv_cmd_buffer *)cmdbuf);
	return VK_SUCCESS;
}

/* ---- recording ---- */

static struct vkv_cmd *cmd_add(struct vkv_cmd_buffer *cb, enum cmd_type t)
{
	struct vkv_cmd *c;

	if (cb->ncmds == cb->cap) {
		uint32_t cap = cb->cap ? 2 * cb->cap : 64;
		struct vkv_cmd *p = realloc(cb->cmds, cap * sizeof(*p));

		if (!p) {
			cb->record_error = VK_ERROR_OUT_OF_HOST_MEMORY;
			return NULL;
		}
		cb->cmds = p;
		cb->cap = cap;
	}
	c = &cb->cmds[cb->ncmds++];
	c->type = t;
	return c;
}

static vgDevicePtr buffer_va(const struct vkv_buffer *b, uint64_t offset)
{
	return b->mem ? b->mem->va + b->offset + offset : 0;
}

void vkv_CmdBindPipeline(VkCommandBuffer cmdbuf, VkPipelineBindPoint point, VkPipeline pipeline)
{
	struct vkv_cmd_buffer *cb = (struct vkv_cmd_buffer *)cmdbuf;

	if (point == VK_PIPELINE_BIND_POINT_COMPUTE)
		cb->pipe = (struct vkv_pipeline *)(uintptr_t)pipeline;
}

void vkv_CmdBindDescriptorSets(VkCommandBuffer cmdbuf, VkPipelineBindPoint point, VkPipelineLayout layout,
			       uint32_t first, uint32_t n, const VkDescriptorSet *sets, uint32_t ndyn,
			       const uint32_t *dyn)
{
	struct vkv_cmd_buffer *cb = (struct vkv_cmd_buffer *)cmdbuf;
	const struct vkv_set *s;

	(void)ndyn, (void)dyn; /* dynamic buffers are not offered */
	if (point != VK_PIPELINE_BIND_POINT_COMPUTE || first != 0 || !n || !sets[0])
		return;
	cb->layout = (struct vkv_playout *)(uintptr_t)layout;
	/* descriptors may not change while a command buffer that binds them is recorded or pending */
	s = (const struct vkv_set *)(uintptr_t)sets[0];
	memcpy(cb->bound, s->b, sizeof(cb->bound));
	cb->nbound = s->layout.count;
}

void vkv_CmdPushConstants(VkCommandBuffer cmdbuf, VkPipelineLayout layout, VkShaderStageFlags stages, uint32_t offset,
			  uint32_t size, const void *values)
{
	struct vkv_cmd_buffer *cb = (struct vkv_cmd_buffer *)cmdbuf;

	(void)layout, (void)stages;
	if (offset >= VKV_MAX_PUSH)
		return;
	if (size > VKV_MAX_PUSH - offset)
		size = VKV_MAX_PUSH - offset;
	memcpy(cb->push + offset, values, size);
}

static struct vkv_cmd *record_dispatch(struct vkv_cmd_buffer *cb, enum cmd_type t, uint32_t x, uint32_t y, uint32_t z)
{
	const struct vkv_device *d = cb->dev;
	struct vkv_cmd *c;
	uint32_t i;

	if (!cb->pipe) {
		cb->record_error = VK_ERROR_UNKNOWN;
		return NULL;
	}
	c = cmd_add(cb, t);
	if (!c)
		return NULL;
	c->u.disp.pipe = cb->pipe;
	c->u.disp.grid[0] = x;
	c->u.disp.grid[1] = y;
	c->u.disp.grid[2] = z;
	c->u.disp.nb = cb->nbound;
	for (i = 0; i < cb->nbound; i++) {
		const struct vkv_set_binding *sb = &cb->bound[i];
		vgBinding *b = &c->u.disp.b[i];

		if (!sb->buf || !sb->buf->mem) {
			/* a binding the set leaves empty: the module may not use it, the device needs one */
			b->ptr = d->dummy_va;
			b->bytes = 16;
		} else {
			uint64_t range = sb->range == VK_WHOLE_SIZE ? sb->buf->size - sb->offset : sb->range;

			b->ptr = buffer_va(sb->buf, sb->offset);
			b->bytes = range > d->pd->lim.max_buffer_bytes ? d->pd->lim.max_buffer_bytes : range;
			if (!b->bytes)
				b->bytes = 1;
		}
		/* DEVICE_LOCAL memory is not host-visible: only the device writes it, so the device
		 * may keep it on the GPU between launches (hw-spec §6.3 DEVICE_CACHED) */
		b->flags = sb->buf && sb->buf->mem && sb->buf->mem->type == VKV_MEM_TYPE_VRAM ? VG_BINDING_DEVICE_CACHED : 0;
	}
	memcpy(c->u.disp.push, cb->push, cb->pipe->push_bytes);
	return c;
}

void vkv_CmdDispatch(VkCommandBuffer cmdbuf, uint32_t x, uint32_t y, uint32_t z)
{
	record_dispatch((struct vkv_cmd_buffer *)cmdbuf, CMD_DISPATCH, x, y, z);
}

void vkv_CmdDispatchBase(VkCommandBuffer cmdbuf, uint32_t bx, uint32_t by, uint32_t bz, uint32_t x, uint32_t y,
			 uint32_t z)
{
	struct vkv_cmd_buffer *cb = (struct vkv_cmd_buffer *)cmdbuf;

	/* the device has no base workgroup: only a zero base can be honoured */
	if (bx || by || bz) {
		vkv_log("vkCmdDispatchBase with a non-zero base is not supported");
		cb->record_error = VK_ERROR_FEATURE_NOT_PRESENT;
		return;
	}
	record_dispatch(cb, CMD_DISPATCH, x, y, z);
}

void vkv_CmdDispatchIndirect(VkCommandBuffer cmdbuf, VkBuffer buffer, VkDeviceSize offset)
{
	struct vkv_cmd_buffer *cb = (struct vkv_cmd_buffer *)cmdbuf;
	const struct vkv_buffer *b = (const struct vkv_buffer *)(uintptr_t)buffer;
	struct vkv_cmd *c = record_dispatch(cb, CMD_DISPATCH_INDIRECT, 0, 0, 0);

	if (!c)
		return;
	c->u.disp.ind_va = buffer_va(b, offset);
	c->u.disp.ind_host = b->mem && b->mem->host ? (const uint8_t *)b->mem->host + b->offset + offset : NULL;
}

void vkv_CmdCopyBuffer(VkCommandBuffer cmdbuf, VkBuffer src, VkBuffer dst, uint32_t n, const VkBufferCopy *regions)
{
	struct vkv_cmd_buffer *cb = (struct vkv_cmd_buffer *)cmdbuf;
	const struct vkv_buffer *s = (const struct vkv_buffer *)(uintptr_t)src, *d = (const struct vkv_buffer *)(uintptr_t)dst;
	uint32_t i;

	for (i = 0; i < n; i++) {
		struct vkv_cmd *c;

		if (!regions[i].size)
			continue;
		c = cmd_add(cb, CMD_COPY);
		if (!c)
			return;
		c->u.copy.src = buffer_va(s, regions[i].srcOffset);
		c->u.copy.dst = buffer_va(d, regions[i].dstOffset);
		c->u.copy.size = regions[i].size;
	}
}

void vkv_CmdFillBuffer(VkCommandBuffer cmdbuf, VkBuffer dst, VkDeviceSize offset, VkDeviceSize size, uint32_t data)
{
	struct vkv_cmd_buffer *cb = (struct vkv_cmd_buffer *)cmdbuf;
	const struct vkv_buffer *b = (const struct vkv_buffer *)(uintptr_t)dst;
	struct vkv_cmd *c;

	if (size == VK_WHOLE_SIZE)
		size = (b->size - offset) & ~(VkDeviceSize)3;
	if (!size)
		return;
	c = cmd_add(cb, CMD_FILL);
	if (!c)
		return;
	c->u.fill.dst = buffer_va(b, offset);
	c->u.fill.size = size;
	c->u.fill.data = data;
}

void vkv_CmdUpdateBuffer(VkCommandBuffer cmdbuf, VkBuffer dst, VkDeviceSize offset, VkDeviceSize size, const void *data)
{
	struct vkv_cmd_buffer *cb = (struct vkv_cmd_buffer *)cmdbuf;
	const struct vkv_buffer *b = (const struct vkv_buffer *)(uintptr_t)dst;
	struct vkv_chunk *ch = cb->chunks;
	struct vkv_cmd *c;

	if (!size)
		return;
	/* the data lives in pinned host memory until the buffer is reset: the copy engine reads it */
	if (!ch || ch->size - ch->used < size) {
		vgResult r;

		ch = calloc(1, sizeof(*ch));
		if (!ch) {
			cb->record_error = VK_ERROR_OUT_OF_HOST_MEMORY;
			return;
		}
		ch->size = size > CHUNK_MIN ? size : CHUNK_MIN;
		pthread_mutex_lock(&vkv_lock);
		r = vgMemAllocHost(cb->dev->ctx, &ch->host, ch->size);
		if (!r) {
			r = vgMemHostGetDevicePointer(cb->dev->ctx, &ch->va, ch->host);
			if (r)
				vgMemFreeHost(cb->dev->ctx, ch->host);
		}
		pthread_mutex_unlock(&vkv_lock);
		if (r) {
			free(ch);
			cb->record_error = VK_ERROR_OUT_OF_HOST_MEMORY;
			return;
		}
		ch->next = cb->chunks;
		cb->chunks = ch;
	}
	c = cmd_add(cb, CMD_COPY);
	if (!c)
		return;
	memcpy((uint8_t *)ch->host + ch->used, data, size);
	c->u.copy.src = ch->va + ch->used;
	c->u.copy.dst = buffer_va(b, offset);
	c->u.copy.size = size;
	ch->used += (size + 15) & ~(VkDeviceSize)15;
}

/* the channel executes in order: a barrier has nothing left to order */
void vkv_CmdPipelineBarrier(VkCommandBuffer cmdbuf, VkPipelineStageFlags src, VkPipelineStageFlags dst,
			    VkDependencyFlags dep, uint32_t nm, const VkMemoryBarrier *m, uint32_t nb,
			    const VkBufferMemoryBarrier *b, uint32_t ni, const VkImageMemoryBarrier *im)
{
	(void)cmdbuf, (void)src, (void)dst, (void)dep, (void)nm, (void)m, (void)nb, (void)b, (void)ni, (void)im;
}

void vkv_CmdSetEvent(VkCommandBuffer cmdbuf, VkEvent event, VkPipelineStageFlags stage)
{
	struct vkv_cmd *c = cmd_add((struct vkv_cmd_buffer *)cmdbuf, CMD_SET_EVENT);

	(void)stage;
	if (c)
		c->u.event = (struct vkv_event *)(uintptr_t)event;
}

void vkv_CmdResetEvent(VkCommandBuffer cmdbuf, VkEvent event, VkPipelineStageFlags stage)
{
	struct vkv_cmd *c = cmd_add((struct vkv_cmd_buffer *)cmdbuf, CMD_RESET_EVENT);

	(void)stage;
	if (c)
		c->u.event = (struct vkv_event *)(uintptr_t)event;
}

void vkv_CmdWaitEvents(VkCommandBuffer cmdbuf, uint32_t n, const VkEvent *events, VkPipelineStageFlags src,
		       VkPipelineStageFlags dst, uint32_t nm, const VkMemoryBarrier *m, uint32_t nb,
		       const VkBufferMemoryBarrier *b, uint32_t ni, const VkImageMemoryBarrier *im)
{
	uint32_t i;

	(void)src, (void)dst, (void)nm, (void)m, (void)nb, (void)b, (void)ni, (void)im;
	for (i = 0; i < n; i++) {
		struct vkv_cmd *c = cmd_add((struct vkv_cmd_buffer *)cmdbuf, CMD_WAIT_EVENT);

		if (c)
			c->u.event = (struct vkv_event *)(uintptr_t)events[i];
	}
}

void vkv_CmdWriteTimestamp(VkCommandBuffer cmdbuf, VkPipelineStageFlagBits stage, VkQueryPool pool, uint32_t query)
{
	struct vkv_cmd *c = cmd_add((struct vkv_cmd_buffer *)cmdbuf, CMD_TIMESTAMP);

	(void)stage;
	if (!c)
		return;
	c->u.query.pool = (struct vkv_query_pool *)(uintptr_t)pool;
	c->u.query.first = query;
	c->u.query.count = 1;
}

void vkv_CmdResetQueryPool(VkCommandBuffer cmdbuf, VkQueryPool pool, uint32_t first, uint32_t count)
{
	struct vkv_cmd *c = cmd_add((struct vkv_cmd_buffer *)cmdbuf, CMD_RESET_QUERY);

	if (!c)
		return;
	c->u.query.pool = (struct vkv_query_pool *)(uintptr_t)pool;
	c->u.query.first = first;
	c->u.query.count = count;
}

void vkv_CmdExecuteCommands(VkCommandBuffer cmdbuf, uint32_t n, const VkCommandBuffer *secondaries)
{
	struct vkv_cmd_buffer *cb = (struct vkv_cmd_buffer *)cmdbuf;
	uint32_t i, k;

	/* the secondaries stay valid while the primary is pending, and so does their update data */
	for (i = 0; i < n; i++) {
		const struct vkv_cmd_buffer *s = (const struct vkv_cmd_buffer *)secondaries[i];

		for (k = 0; k < s->ncmds; k++) {
			struct vkv_cmd *c = cmd_add(cb, s->cmds[k].type);

			if (!c)
				return;
			*c = s->cmds[k];
		}
	}
}

void vkv_CmdSetDeviceMask(VkCommandBuffer cmdbuf, uint32_t mask)
{
	(void)cmdbuf, (void)mask;
}

/* ---- submission ---- */

struct sem_sig {
	struct vkv_semaphore *sem;
	uint64_t value;
};

struct ev_set {
	struct vkv_event *ev;
	int state;
};

struct submit_state {
	struct sem_sig *sigs;
	uint32_t nsigs, capsigs;
	struct ev_set *evs;
	uint32_t nevs, capevs;
};

static int grow(void **p, uint32_t *cap, uint32_t n, size_t elem)
{
	void *q;
	uint32_t c;

	if (n < *cap)
		return 0;
	c = *cap ? 2 * *cap : 16;
	q = realloc(*p, c * elem);
	if (!q)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

/* vkv_lock held: the submission may wait on value of a timeline semaphore */
static VkResult wait_timeline(struct vkv_device *d, struct vkv_semaphore *s, uint64_t value, const struct submit_state *st)
{
	uint64_t start = vkv_now_ns();
	uint32_t k;

	for (;;) {
		if (d->lost)
			return VK_ERROR_DEVICE_LOST;
		if (vkv_sem_value(d, s) >= value)
			return VK_SUCCESS;
		/* signalled by earlier work on this queue: the channel's order does the waiting */
		for (k = 0; k < s->npending; k++)
			if (s->pending[k].value >= value)
				return VK_SUCCESS;
		for (k = 0; k < st->nsigs; k++)
			if (st->sigs[k].sem == s && st->sigs[k].value >= value)
				return VK_SUCCESS;
		if (vkv_now_ns() - start > VKV_HOST_WAIT_LIMIT_NS) {
			vkv_log("vkQueueSubmit: a timeline semaphore wait was never signalled");
			return VK_ERROR_DEVICE_LOST;
		}
		vkv_cond_wait_ms(d, 1); /* a host signal */
	}
}

static VkResult wait_event(struct vkv_device *d, struct vkv_event *e, const struct submit_state *st)
{
	uint64_t start = vkv_now_ns();
	uint32_t k;

	for (;;) {
		int state = -1;

		for (k = 0; k < st->nevs; k++)
			if (st->evs[k].ev == e)
				state = st->evs[k].state;
		if (state < 0) {
			vkv_event_update(d, e);
			state = e->seq ? e->pending_state : e->state;
		}
		if (state == VK_EVENT_SET)
			return VK_SUCCESS;
		if (d->lost)
			return VK_ERROR_DEVICE_LOST;
		if (vkv_now_ns() - start > VKV_HOST_WAIT_LIMIT_NS) {
			vkv_log("vkQueueSubmit: vkCmdWaitEvents on an event that was never set");
			return VK_ERROR_DEVICE_LOST;
		}
		vkv_cond_wait_ms(d, 1); /* vkSetEvent from the host */
	}
}

static VkResult exec_dispatch(struct vkv_device *d, const struct vkv_cmd *c)
{
	const struct vkv_pipeline *p = c->u.disp.pipe;
	unsigned int grid[3] = { c->u.disp.grid[0], c->u.disp.grid[1], c->u.disp.grid[2] };
	vgResult r;

	if (c->type == CMD_DISPATCH_INDIRECT) {
		uint32_t counts[3];

		/* the counts are the GPU's to write: read them once the work before has landed */
		if (c->u.disp.ind_host) {
			uint64_t seq;
			VkResult res;

			r = vgFlushFence(d->ctx, &seq);
			if (r)
				return vkv_result(d, r, "vkCmdDispatchIndirect");
			res = vkv_wait_seq(d, seq, UINT64_MAX);
			if (res)
				return res;
			memcpy(counts, c->u.disp.ind_host, sizeof(counts));
		} else {
			r = vgMemcpyDtoH(d->ctx, counts, c->u.disp.ind_va, sizeof(counts));
			if (r)
				return vkv_result(d, r, "vkCmdDispatchIndirect");
		}
		memcpy(grid, counts, sizeof(grid));
	}
	if (!grid[0] || !grid[1] || !grid[2])
		return VK_SUCCESS;
	if (vkv_debug() > 1) {
		uint32_t i;

		vkv_log("dispatch %ux%ux%u entry %u push %u spec %u", grid[0], grid[1], grid[2], p->entry, p->push_bytes, p->nspec);
		for (i = 0; i < c->u.disp.nb; i++)
			vkv_log("  binding %u: VA 0x%llx + %zu", i, (unsigned long long)c->u.disp.b[i].ptr, c->u.disp.b[i].bytes);
	}
	r = vgLaunchProgram(d->ctx, p->prog->prog, p->entry, grid, c->u.disp.b, c->u.disp.nb, c->u.disp.push,
			    p->push_bytes, p->spec, p->nspec, 0);
	return r ? vkv_result(d, r, "vkCmdDispatch") : VK_SUCCESS;
}

static VkResult exec_cmds(struct vkv_device *d, const struct vkv_cmd_buffer *cb, struct submit_state *st)
{
	uint32_t i;
	VkResult res = VK_SUCCESS;

	for (i = 0; i < cb->ncmds && !res; i++) {
		const struct vkv_cmd *c = &cb->cmds[i];
		vgResult r;

		switch (c->type) {
		case CMD_DISPATCH:
		case CMD_DISPATCH_INDIRECT:
			res = exec_dispatch(d, c);
			break;
		case CMD_COPY:
			if (vkv_debug() > 1)
				vkv_log("copy 0x%llx -> 0x%llx, %llu bytes", (unsigned long long)c->u.copy.src,
					(unsigned long long)c->u.copy.dst, (unsigned long long)c->u.copy.size);
			r = vgMemcpyAsync(d->ctx, c->u.copy.dst, c->u.copy.src, c->u.copy.size);
			res = r ? vkv_result(d, r, "vkCmdCopyBuffer") : VK_SUCCESS;
			break;
		case CMD_FILL: {
			/* the MEMSET kernel (docs/kernels.md): {u32 pattern, u32 reserved, u64 count} */
			uint32_t params[4] = { c->u.fill.data, 0, (uint32_t)(c->u.fill.size / 4),
					       (uint32_t)((c->u.fill.size / 4) >> 32) };
			vgBuffer b = { c->u.fill.dst, c->u.fill.size };
			unsigned int grid[3] = { 1, 1, 1 };

			if (vkv_debug() > 1)
				vkv_log("fill 0x%llx, %llu bytes with 0x%08x", (unsigned long long)c->u.fill.dst,
					(unsigned long long)c->u.fill.size, c->u.fill.data);

			r = vgLaunch(d->ctx, VG_KERNEL_MEMSET, grid, params, sizeof(params), &b, 1);
			res = r ? vkv_result(d, r, "vkCmdFillBuffer") : VK_SUCCESS;
			break;
		}
		case CMD_SET_EVENT:
		case CMD_RESET_EVENT:
			if (grow((void **)&st->evs, &st->capevs, st->nevs, sizeof(*st->evs))) {
				res = VK_ERROR_OUT_OF_HOST_MEMORY;
				break;
			}
			st->evs[st->nevs].ev = c->u.event;
			st->evs[st->nevs++].state = c->type == CMD_SET_EVENT ? VK_EVENT_SET : VK_EVENT_RESET;
			break;
		case CMD_WAIT_EVENT:
			res = wait_event(d, c->u.event, st);
			break;
		case CMD_TIMESTAMP: {
			/* no device clock: the host's, read once everything before has completed */
			uint64_t seq;

			r = vgFlushFence(d->ctx, &seq);
			res = r ? vkv_result(d, r, "vkCmdWriteTimestamp") : vkv_wait_seq(d, seq, UINT64_MAX);
			if (!res && c->u.query.first < c->u.query.pool->count) {
				c->u.query.pool->value[c->u.query.first] = vkv_now_ns();
				c->u.query.pool->avail[c->u.query.first] = 1;
			}
			break;
		}
		case CMD_RESET_QUERY: {
			struct vkv_query_pool *q = c->u.query.pool;

			if (c->u.query.first < q->count)
				memset(q->avail + c->u.query.first, 0,
				       c->u.query.count > q->count - c->u.query.first ? q->count - c->u.query.first
										       : c->u.query.count);
			break;
		}
		}
	}
	return res;
}

static const VkTimelineSemaphoreSubmitInfo *timeline_info(const VkSubmitInfo *si)
{
	const VkBaseInStructure *s;

	for (s = si->pNext; s; s = s->pNext)
		if (s->sType == VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO)
			return (const VkTimelineSemaphoreSubmitInfo *)s;
	return NULL;
}

VkResult vkv_QueueSubmit(VkQueue queue, uint32_t n, const VkSubmitInfo *si, VkFence fence)
{
	struct vkv_device *d = ((struct vkv_queue *)queue)->dev;
	struct submit_state st = { 0 };
	VkResult res = VK_SUCCESS;
	uint64_t seq = 0;
	uint32_t i, k;
	vgResult r;

	pthread_mutex_lock(&vkv_lock);
	if (d->lost) {
		pthread_mutex_unlock(&vkv_lock);
		return VK_ERROR_DEVICE_LOST;
	}
	for (i = 0; i < n && !res; i++) {
		const VkTimelineSemaphoreSubmitInfo *tl = timeline_info(&si[i]);

		/* binary semaphores are only signalled by earlier submissions to this queue: ordered */
		for (k = 0; k < si[i].waitSemaphoreCount && !res; k++) {
			struct vkv_semaphore *s = (struct vkv_semaphore *)(uintptr_t)si[i].pWaitSemaphores[k];

			if (s->timeline && tl && k < tl->waitSemaphoreValueCount)
				res = wait_timeline(d, s, tl->pWaitSemaphoreValues[k], &st);
		}
		for (k = 0; k < si[i].commandBufferCount && !res; k++)
			res = exec_cmds(d, (const struct vkv_cmd_buffer *)si[i].pCommandBuffers[k], &st);
		for (k = 0; k < si[i].signalSemaphoreCount && !res; k++) {
			struct vkv_semaphore *s = (struct vkv_semaphore *)(uintptr_t)si[i].pSignalSemaphores[k];

			if (!s->timeline || !tl || k >= tl->signalSemaphoreValueCount)
				continue;
			if (grow((void **)&st.sigs, &st.capsigs, st.nsigs, sizeof(*st.sigs))) {
				res = VK_ERROR_OUT_OF_HOST_MEMORY;
				break;
			}
			st.sigs[st.nsigs].sem = s;
			st.sigs[st.nsigs++].value = tl->pSignalSemaphoreValues[k];
		}
	}
	/* one doorbell for everything queued above */
	r = vgFlushFence(d->ctx, &seq);
	if (r && !res)
		res = vkv_result(d, r, "vkQueueSubmit");
	if (!res) {
		for (i = 0; i < st.nsigs; i++)
			vkv_sem_signal(st.sigs[i].sem, st.sigs[i].value, seq);
		for (i = 0; i < st.nevs; i++) {
			st.evs[i].ev->pending_state = st.evs[i].state;
			st.evs[i].ev->seq = seq;
			if (!seq)
				st.evs[i].ev->state = st.evs[i].state;
		}
		if (fence) {
			struct vkv_fence *f = (struct vkv_fence *)(uintptr_t)fence;

			f->seq = seq;
			f->signaled = !seq;
		}
	} else if (res != VK_ERROR_OUT_OF_HOST_MEMORY && !d->lost) {
		/* part of the work may have reached the device: nothing later can be trusted */
		vkv_log("vkQueueSubmit failed part-way; the device is lost");
		d->lost = 1;
		res = VK_ERROR_DEVICE_LOST;
	}
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&vkv_lock);
	free(st.sigs);
	free(st.evs);
	return res;
}
