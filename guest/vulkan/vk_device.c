// SPDX-License-Identifier: MIT
/*
 * Device-level objects: memory, buffers, shader modules, descriptors, pipelines, fences,
 * semaphores, events and query pools. Everything the GPU sees goes through the runtime
 * context of the VkDevice; synchronisation objects are CPU-side records of runtime fences.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "vk_priv.h"

#define WAIT_SLICE_MS 10u       /* the global lock is released between slices of a long wait */

int vkv_debug(void)
{
	static int v = -1;

	if (v < 0) {
		const char *e = getenv("VUGPU_VK_DEBUG");

		v = e ? (atoi(e) > 1 ? 2 : 1) : 0;
	}
	return v;
}

uint64_t vkv_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * A runtime result as Vulkan sees it; a failed channel loses this VkDevice (and only it). That
 * includes ENGINE_LOST (a restart of vugpu): it reaches the runtime only when this channel had
 * work in flight, whose results are undefined; the driver core rebinds an idle channel without
 * a word (docs/vulkan.md, "Surviving a server restart").
 */
VkResult vkv_result(struct vkv_device *d, vgResult r, const char *what)
{
	switch (r) {
	case VG_SUCCESS:
		return VK_SUCCESS;
	case VG_ERROR_OUT_OF_MEMORY:
		return VK_ERROR_OUT_OF_DEVICE_MEMORY;
	case VG_ERROR_INVALID_VALUE:
	case VG_ERROR_INVALID_HANDLE:
		if (vkv_debug())
			vkv_log("%s: %s", what, vgGetErrorString(r));
		return VK_ERROR_UNKNOWN;
	default:
		if (!d->lost)
			vkv_log("device lost in %s: %s (%s)", what, vgGetErrorName(r), vgGetErrorDetail(d->ctx));
		d->lost = 1;
		return VK_ERROR_DEVICE_LOST;
	}
}

int vkv_fence_passed(struct vkv_device *d, uint64_t seq)
{
	vgResult r;

	if (!seq || d->lost)
		return 1;
	r = vgFenceWait(d->ctx, seq, 0);
	if (r == VG_ERROR_TIMEOUT)
		return 0;
	vkv_result(d, r, "fence");
	return 1;
}

/* Wait (vkv_lock held) until seq passed; releases the lock between slices. */
VkResult vkv_wait_seq(struct vkv_device *d, uint64_t seq, uint64_t timeout_ns)
{
	uint64_t start = vkv_now_ns();

	for (;;) {
		uint64_t el = vkv_now_ns() - start, left_ms;
		vgResult r;

		if (d->lost)
			return VK_ERROR_DEVICE_LOST;
		if (!seq)
			return VK_SUCCESS;
		left_ms = timeout_ns == UINT64_MAX ? WAIT_SLICE_MS : el >= timeout_ns ? 0 : (timeout_ns - el) / 1000000;
		r = vgFenceWait(d->ctx, seq, (unsigned int)(left_ms < WAIT_SLICE_MS ? left_ms : WAIT_SLICE_MS));
		if (!r)
			return VK_SUCCESS;
		if (r != VG_ERROR_TIMEOUT)
			return vkv_result(d, r, "wait");
		if (timeout_ns != UINT64_MAX && vkv_now_ns() - start >= timeout_ns)
			return VK_TIMEOUT;
		pthread_mutex_unlock(&vkv_lock);
		pthread_mutex_lock(&vkv_lock);
	}
}

/* ---- device and queue ---- */

void vkv_DestroyDevice(VkDevice device, const VkAllocationCallbacks *alloc)
{
	struct vkv_device *d = (struct vkv_device *)device;

	(void)alloc;
	if (!d)
		return;
	pthread_mutex_lock(&vkv_lock);
	vgCtxDestroy(d->ctx); /* releases every allocation and program of the device */
	pthread_mutex_unlock(&vkv_lock);
	pthread_cond_destroy(&d->cond);
	free(d);
}

PFN_vkVoidFunction vkv_GetDeviceProcAddr(VkDevice device, const char *name)
{
	(void)device;
	return vkv_lookup(name);
}

void vkv_GetDeviceQueue(VkDevice device, uint32_t family, uint32_t index, VkQueue *q)
{
	struct vkv_device *d = (struct vkv_device *)device;

	*q = family == 0 && index == 0 ? (VkQueue)&d->queue : VK_NULL_HANDLE;
}

void vkv_GetDeviceQueue2(VkDevice device, const VkDeviceQueueInfo2 *info, VkQueue *q)
{
	vkv_GetDeviceQueue(device, info->queueFamilyIndex, info->queueIndex, q);
}

static VkResult wait_idle(struct vkv_device *d)
{
	uint64_t seq = 0;
	VkResult res;
	vgResult r;

	pthread_mutex_lock(&vkv_lock);
	if (d->lost) {
		pthread_mutex_unlock(&vkv_lock);
		return VK_ERROR_DEVICE_LOST;
	}
	r = vgFlushFence(d->ctx, &seq);
	res = r ? vkv_result(d, r, "wait idle") : vkv_wait_seq(d, seq, UINT64_MAX);
	pthread_mutex_unlock(&vkv_lock);
	return res;
}

VkResult vkv_QueueWaitIdle(VkQueue queue)
{
	return wait_idle(((struct vkv_queue *)queue)->dev);
}

VkResult vkv_DeviceWaitIdle(VkDevice device)
{
	return wait_idle((struct vkv_device *)device);
}

void vkv_GetDeviceGroupPeerMemoryFeatures(VkDevice device, uint32_t heap, uint32_t local, uint32_t remote,
					  VkPeerMemoryFeatureFlags *f)
{
	(void)device, (void)heap, (void)local, (void)remote;
	*f = VK_PEER_MEMORY_FEATURE_COPY_SRC_BIT | VK_PEER_MEMORY_FEATURE_COPY_DST_BIT |
	     VK_PEER_MEMORY_FEATURE_GENERIC_SRC_BIT | VK_PEER_MEMORY_FEATURE_GENERIC_DST_BIT;
}

/* ---- memory ---- */

VkResult vkv_AllocateMemory(VkDevice device, const VkMemoryAllocateInfo *ai, const VkAllocationCallbacks *alloc,
			    VkDeviceMemory *out)
{
	struct vkv_device *d = (struct vkv_device *)device;
	struct vkv_memory *m;
	vgResult r;

	(void)alloc;
	if (ai->memoryTypeIndex > VKV_MEM_TYPE_HOST || !ai->allocationSize)
		return VK_ERROR_UNKNOWN;
	if (d->lost)
		return VK_ERROR_DEVICE_LOST;
	m = calloc(1, sizeof(*m));
	if (!m)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	m->size = ai->allocationSize;
	m->type = ai->memoryTypeIndex;
	pthread_mutex_lock(&vkv_lock);
	if (m->type == VKV_MEM_TYPE_VRAM) {
		r = vgMemAlloc(d->ctx, &m->va, m->size);
	} else {
		r = vgMemAllocHost(d->ctx, &m->host, m->size);
		if (!r) {
			r = vgMemHostGetDevicePointer(d->ctx, &m->va, m->host);
			if (r)
				vgMemFreeHost(d->ctx, m->host);
		}
	}
	pthread_mutex_unlock(&vkv_lock);
	if (r) {
		free(m);
		if (r == VG_ERROR_OUT_OF_MEMORY)
			return ai->memoryTypeIndex == VKV_MEM_TYPE_VRAM ? VK_ERROR_OUT_OF_DEVICE_MEMORY : VK_ERROR_OUT_OF_HOST_MEMORY;
		return vkv_result(d, r, "vkAllocateMemory");
	}
	if (vkv_debug() > 1)
		vkv_log("memory type %u: %llu bytes at VA 0x%llx", m->type, (unsigned long long)m->size, (unsigned long long)m->va);
	*out = (VkDeviceMemory)(uintptr_t)m;
	return VK_SUCCESS;
}

void vkv_FreeMemory(VkDevice device, VkDeviceMemory memory, const VkAllocationCallbacks *alloc)
{
	struct vkv_device *d = (struct vkv_device *)device;
	struct vkv_memory *m = (struct vkv_memory *)(uintptr_t)memory;

	(void)alloc;
	if (!m)
		return;
	if (vkv_debug() > 1)
		vkv_log("free memory type %u: %llu bytes at VA 0x%llx", m->type, (unsigned long long)m->size,
			(unsigned long long)m->va);
	pthread_mutex_lock(&vkv_lock);
	if (m->type == VKV_MEM_TYPE_VRAM)
		vgMemFree(d->ctx, m->va);
	else
		vgMemFreeHost(d->ctx, m->host);
	pthread_mutex_unlock(&vkv_lock);
	free(m);
}

VkResult vkv_MapMemory(VkDevice device, VkDeviceMemory memory, VkDeviceSize offset, VkDeviceSize size,
		       VkMemoryMapFlags flags, void **pp)
{
	struct vkv_memory *m = (struct vkv_memory *)(uintptr_t)memory;

	(void)device, (void)size, (void)flags;
	if (!m->host)
		return VK_ERROR_MEMORY_MAP_FAILED;
	*pp = (uint8_t *)m->host + offset;
	return VK_SUCCESS;
}

void vkv_UnmapMemory(VkDevice device, VkDeviceMemory memory)
{
	(void)device, (void)memory;
}

/* host memory is coherent: nothing to flush or invalidate */
VkResult vkv_FlushMappedMemoryRanges(VkDevice device, uint32_t n, const VkMappedMemoryRange *r)
{
	(void)device, (void)n, (void)r;
	return VK_SUCCESS;
}

VkResult vkv_InvalidateMappedMemoryRanges(VkDevice device, uint32_t n, const VkMappedMemoryRange *r)
{
	(void)device, (void)n, (void)r;
	return VK_SUCCESS;
}

void vkv_GetDeviceMemoryCommitment(VkDevice device, VkDeviceMemory memory, VkDeviceSize *bytes)
{
	(void)device;
	*bytes = ((struct vkv_memory *)(uintptr_t)memory)->size;
}

uint64_t vkv_GetDeviceMemoryOpaqueCaptureAddress(VkDevice device, const VkDeviceMemoryOpaqueCaptureAddressInfo *info)
{
	(void)device, (void)info;
	return 0;
}

/* ---- buffers ---- */

static uint64_t buffer_align(struct vkv_device *d)
{
	uint64_t a = d->pd->lim.buffer_align;

	return a > 64 ? a : 64;
}

VkResult vkv_CreateBuffer(VkDevice device, const VkBufferCreateInfo *ci, const VkAllocationCallbacks *alloc, VkBuffer *out)
{
	struct vkv_buffer *b;

	(void)device, (void)alloc;
	if (ci->flags & (VK_BUFFER_CREATE_SPARSE_BINDING_BIT | VK_BUFFER_CREATE_PROTECTED_BIT))
		return VK_ERROR_FEATURE_NOT_PRESENT;
	b = calloc(1, sizeof(*b));
	if (!b)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	b->size = ci->size;
	*out = (VkBuffer)(uintptr_t)b;
	return VK_SUCCESS;
}

void vkv_DestroyBuffer(VkDevice device, VkBuffer buffer, const VkAllocationCallbacks *alloc)
{
	(void)device, (void)alloc;
	free((void *)(uintptr_t)buffer);
}

void vkv_GetBufferMemoryRequirements(VkDevice device, VkBuffer buffer, VkMemoryRequirements *req)
{
	struct vkv_device *d = (struct vkv_device *)device;
	struct vkv_buffer *b = (struct vkv_buffer *)(uintptr_t)buffer;
	uint64_t a = buffer_align(d);

	req->alignment = a;
	req->size = (b->size + a - 1) & ~(a - 1);
	req->memoryTypeBits = (1u << VKV_MEM_TYPE_VRAM) | (1u << VKV_MEM_TYPE_HOST);
}

void vkv_GetBufferMemoryRequirements2(VkDevice device, const VkBufferMemoryRequirementsInfo2 *info,
				      VkMemoryRequirements2 *req)
{
	VkBaseOutStructure *s;

	vkv_GetBufferMemoryRequirements(device, info->buffer, &req->memoryRequirements);
	for (s = req->pNext; s; s = s->pNext) {
		if (s->sType == VK_STRUCTURE_TYPE_MEMORY_DEDICATED_REQUIREMENTS) {
			((VkMemoryDedicatedRequirements *)s)->prefersDedicatedAllocation = VK_FALSE;
			((VkMemoryDedicatedRequirements *)s)->requiresDedicatedAllocation = VK_FALSE;
		}
	}
}

VkResult vkv_BindBufferMemory(VkDevice device, VkBuffer buffer, VkDeviceMemory memory, VkDeviceSize offset)
{
	struct vkv_buffer *b = (struct vkv_buffer *)(uintptr_t)buffer;

	(void)device;
	b->mem = (struct vkv_memory *)(uintptr_t)memory;
	b->offset = offset;
	return VK_SUCCESS;
}

VkResult vkv_BindBufferMemory2(VkDevice device, uint32_t n, const VkBindBufferMemoryInfo *infos)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		vkv_BindBufferMemory(device, infos[i].buffer, infos[i].memory, infos[i].memoryOffset);
	return VK_SUCCESS;
}

/* bufferDeviceAddress is not offered: physical pointers are refused by the device */
VkDeviceAddress vkv_GetBufferDeviceAddress(VkDevice device, const VkBufferDeviceAddressInfo *info)
{
	(void)device, (void)info;
	return 0;
}

uint64_t vkv_GetBufferOpaqueCaptureAddress(VkDevice device, const VkBufferDeviceAddressInfo *info)
{
	(void)device, (void)info;
	return 0;
}

/* no texel buffers: no format has buffer features */
VkResult vkv_CreateBufferView(VkDevice device, const VkBufferViewCreateInfo *ci, const VkAllocationCallbacks *alloc,
			      VkBufferView *out)
{
	(void)device, (void)ci, (void)alloc, (void)out;
	return VK_ERROR_FORMAT_NOT_SUPPORTED;
}

void vkv_DestroyBufferView(VkDevice device, VkBufferView view, const VkAllocationCallbacks *alloc)
{
	(void)device, (void)view, (void)alloc;
}

/* ---- shader modules and programs ---- */

VkResult vkv_CreateShaderModule(VkDevice device, const VkShaderModuleCreateInfo *ci, const VkAllocationCallbacks *alloc,
				VkShaderModule *out)
{
	struct vkv_shader *s;

	(void)device, (void)alloc;
	if (ci->codeSize < 20 || ci->codeSize % 4 || ci->pCode[0] != 0x07230203u) {
		if (vkv_debug())
			vkv_log("vkCreateShaderModule: not a SPIR-V module");
		return VK_ERROR_INVALID_SHADER_NV;
	}
	s = calloc(1, sizeof(*s));
	if (s)
		s->words = malloc(ci->codeSize);
	if (!s || !s->words) {
		free(s);
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	}
	memcpy(s->words, ci->pCode, ci->codeSize);
	s->bytes = ci->codeSize;
	*out = (VkShaderModule)(uintptr_t)s;
	return VK_SUCCESS;
}

void vkv_prog_put(struct vkv_device *d, struct vkv_prog *p)
{
	if (!p || --p->refs)
		return;
	vgProgramUnload(d->ctx, p->prog); /* waits for launches still reading it */
	free(p);
}

void vkv_DestroyShaderModule(VkDevice device, VkShaderModule module, const VkAllocationCallbacks *alloc)
{
	struct vkv_device *d = (struct vkv_device *)device;
	struct vkv_shader *s = (struct vkv_shader *)(uintptr_t)module;

	(void)alloc;
	if (!s)
		return;
	pthread_mutex_lock(&vkv_lock);
	vkv_prog_put(d, s->prog);
	pthread_mutex_unlock(&vkv_lock);
	free(s->words);
	free(s);
}

/* SPIR-V capabilities the device's checker accepts (hw-spec §6.3.3); feature bit or -1 */
static const struct {
	uint32_t cap;
	int feature;
} caps[] = {
	{ 0, -1 } /* Matrix */, { 1, -1 } /* Shader */, { 39, 3 } /* Int8 */, { 22, 4 } /* Int16 */,
	{ 11, 1 } /* Int64 */, { 9, 2 } /* Float16 */, { 10, 0 } /* Float64 */, { 12, 6 } /* Int64Atomics */,
	{ 4448, -1 }, { 4449, -1 }, { 4450, -1 } /* 8-bit storage */,
	{ 4433, -1 }, { 4434, -1 }, { 4435, -1 } /* 16-bit storage */,
	{ 61, -1 } /* GroupNonUniform */, { 62, 5 }, { 63, 5 }, { 64, 5 }, { 65, 5 }, { 66, 5 } /* vote … shuffle relative */,
	{ 5345, -1 }, { 5346, -1 } /* VulkanMemoryModel, DeviceScope */,
	{ 4466, -1 } /* SignedZeroInfNanPreserve */, { 4467, -1 } /* RoundingModeRTE */,
};

/*
 * What the driver can tell before the device does: the entry point's index among the GLCompute
 * entry points, and capabilities the device refuses (so the pipeline fails at creation, not as a
 * lost device at the first dispatch). The device still checks everything at launch.
 */
static VkResult parse_module(const struct vkv_device *d, const struct vkv_shader *s, const char *name, uint32_t *entry)
{
	const uint32_t *w = s->words;
	size_t n = s->bytes / 4, i = 5, k;
	uint32_t idx = 0;
	int found = 0;

	while (i < n) {
		uint32_t op = w[i] & 0xffff, wc = w[i] >> 16;

		if (!wc || i + wc > n)
			break;
		if (op == 17 && wc >= 2) { /* OpCapability */
			for (k = 0; k < sizeof(caps) / sizeof(caps[0]); k++)
				if (caps[k].cap == w[i + 1])
					break;
			if (k == sizeof(caps) / sizeof(caps[0]) ||
			    (caps[k].feature >= 0 && !((d->pd->lim.features >> caps[k].feature) & 1))) {
				vkv_log("pipeline refused: the module uses SPIR-V capability %u, which this device does not run",
					w[i + 1]);
				return VK_ERROR_UNKNOWN;
			}
		} else if (op == 15 && wc >= 4 && w[i + 1] == 5) { /* OpEntryPoint GLCompute */
			const char *nm = (const char *)&w[i + 3];

			if (!found && strnlen(nm, (wc - 3) * 4) < (wc - 3) * 4 && !strcmp(nm, name)) {
				*entry = idx;
				found = 1;
			}
			idx++;
		} else if (op == 54) { /* OpFunction: the preamble is over */
			break;
		}
		i += wc;
	}
	if (!found) {
		vkv_log("pipeline refused: no GLCompute entry point named \"%s\"", name);
		return VK_ERROR_UNKNOWN;
	}
	return VK_SUCCESS;
}

/* ---- descriptor set layouts, pools, sets, pipeline layouts ---- */

VkResult vkv_CreateDescriptorSetLayout(VkDevice device, const VkDescriptorSetLayoutCreateInfo *ci,
				       const VkAllocationCallbacks *alloc, VkDescriptorSetLayout *out)
{
	struct vkv_device *d = (struct vkv_device *)device;
	struct vkv_dsl *l;
	uint32_t i;

	(void)alloc;
	for (i = 0; i < ci->bindingCount; i++) {
		const VkDescriptorSetLayoutBinding *b = &ci->pBindings[i];

		if (b->binding >= d->pd->lim.max_bindings || b->descriptorCount > 1 ||
		    (b->descriptorCount && b->descriptorType != VK_DESCRIPTOR_TYPE_STORAGE_BUFFER)) {
			vkv_log("descriptor set layout refused: binding %u (type %d, count %u); the device takes one "
				"storage buffer per binding below %u",
				b->binding, b->descriptorType, b->descriptorCount, d->pd->lim.max_bindings);
			return VK_ERROR_FEATURE_NOT_PRESENT;
		}
	}
	l = calloc(1, sizeof(*l));
	if (!l)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	for (i = 0; i < ci->bindingCount; i++) {
		const VkDescriptorSetLayoutBinding *b = &ci->pBindings[i];

		if (!b->descriptorCount)
			continue;
		l->type[b->binding] = b->descriptorType;
		if (b->binding + 1 > l->count)
			l->count = b->binding + 1;
	}
	*out = (VkDescriptorSetLayout)(uintptr_t)l;
	return VK_SUCCESS;
}

void vkv_DestroyDescriptorSetLayout(VkDevice device, VkDescriptorSetLayout layout, const VkAllocationCallbacks *alloc)
{
	(void)device, (void)alloc;
	free((void *)(uintptr_t)layout);
}

void vkv_GetDescriptorSetLayoutSupport(VkDevice device, const VkDescriptorSetLayoutCreateInfo *ci,
				       VkDescriptorSetLayoutSupport *support)
{
	struct vkv_device *d = (struct vkv_device *)device;
	uint32_t i;

	support->supported = VK_TRUE;
	for (i = 0; i < ci->bindingCount; i++) {
		const VkDescriptorSetLayoutBinding *b = &ci->pBindings[i];

		if (b->binding >= d->pd->lim.max_bindings || b->descriptorCount > 1 ||
		    (b->descriptorCount && b->descriptorType != VK_DESCRIPTOR_TYPE_STORAGE_BUFFER))
			support->supported = VK_FALSE;
	}
}

VkResult vkv_CreateDescriptorPool(VkDevice device, const VkDescriptorPoolCreateInfo *ci, const VkAllocationCallbacks *alloc,
				  VkDescriptorPool *out)
{
	struct vkv_pool *p = calloc(1, sizeof(*p));

	(void)device, (void)alloc;
	if (!p)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	p->max_sets = ci->maxSets;
	p->flags = ci->flags;
	*out = (VkDescriptorPool)(uintptr_t)p;
	return VK_SUCCESS;
}

static void pool_reset(struct vkv_pool *p)
{
	while (p->sets) {
		struct vkv_set *s = p->sets;

		p->sets = s->next;
		free(s);
	}
	p->used = 0;
}

void vkv_DestroyDescriptorPool(VkDevice device, VkDescriptorPool pool, const VkAllocationCallbacks *alloc)
{
	struct vkv_pool *p = (struct vkv_pool *)(uintptr_t)pool;

	(void)device, (void)alloc;
	if (!p)
		return;
	pool_reset(p);
	free(p);
}

VkResult vkv_ResetDescriptorPool(VkDevice device, VkDescriptorPool pool, VkDescriptorPoolResetFlags flags)
{
	(void)device, (void)flags;
	pool_reset((struct vkv_pool *)(uintptr_t)pool);
	return VK_SUCCESS;
}

VkResult vkv_AllocateDescriptorSets(VkDevice device, const VkDescriptorSetAllocateInfo *ai, VkDescriptorSet *sets)
{
	struct vkv_pool *p = (struct vkv_pool *)(uintptr_t)ai->descriptorPool;
	uint32_t i;

	for (i = 0; i < ai->descriptorSetCount; i++) {
		struct vkv_set *s = p->used < p->max_sets ? calloc(1, sizeof(*s)) : NULL;

		if (!s) {
			VkResult res = p->used < p->max_sets ? VK_ERROR_OUT_OF_HOST_MEMORY : VK_ERROR_OUT_OF_POOL_MEMORY;

			if (i)
				vkv_FreeDescriptorSets(device, ai->descriptorPool, i, sets);
			for (i = 0; i < ai->descriptorSetCount; i++)
				sets[i] = VK_NULL_HANDLE;
			return res;
		}
		s->layout = *(const struct vkv_dsl *)(uintptr_t)ai->pSetLayouts[i];
		s->pool = p;
		s->next = p->sets;
		p->sets = s;
		p->used++;
		sets[i] = (VkDescriptorSet)(uintptr_t)s;
	}
	return VK_SUCCESS;
}

VkResult vkv_FreeDescriptorSets(VkDevice device, VkDescriptorPool pool, uint32_t n, const VkDescriptorSet *sets)
{
	struct vkv_pool *p = (struct vkv_pool *)(uintptr_t)pool;
	uint32_t i;

	(void)device;
	for (i = 0; i < n; i++) {
		struct vkv_set *s = (struct vkv_set *)(uintptr_t)sets[i], **pp;

		if (!s)
			continue;
		for (pp = &p->sets; *pp; pp = &(*pp)->next) {
			if (*pp == s) {
				*pp = s->next;
				free(s);
				p->used--;
				break;
			}
		}
	}
	return VK_SUCCESS;
}

void vkv_UpdateDescriptorSets(VkDevice device, uint32_t nw, const VkWriteDescriptorSet *w, uint32_t nc,
			      const VkCopyDescriptorSet *c)
{
	uint32_t i, k;

	(void)device;
	for (i = 0; i < nw; i++) {
		struct vkv_set *s = (struct vkv_set *)(uintptr_t)w[i].dstSet;

		if (w[i].descriptorType != VK_DESCRIPTOR_TYPE_STORAGE_BUFFER || !w[i].pBufferInfo)
			continue;
		/* one descriptor per binding: element k lands in binding dstBinding + k */
		for (k = 0; k < w[i].descriptorCount; k++) {
			uint32_t b = w[i].dstBinding + w[i].dstArrayElement + k;
			const VkDescriptorBufferInfo *bi = &w[i].pBufferInfo[k];

			if (b >= VKV_MAX_BINDINGS)
				break;
			s->b[b].buf = (struct vkv_buffer *)(uintptr_t)bi->buffer;
			s->b[b].offset = bi->offset;
			s->b[b].range = bi->range;
		}
	}
	for (i = 0; i < nc; i++) {
		const struct vkv_set *src = (const struct vkv_set *)(uintptr_t)c[i].srcSet;
		struct vkv_set *dst = (struct vkv_set *)(uintptr_t)c[i].dstSet;

		for (k = 0; k < c[i].descriptorCount; k++) {
			uint32_t sb = c[i].srcBinding + c[i].srcArrayElement + k, db = c[i].dstBinding + c[i].dstArrayElement + k;

			if (sb < VKV_MAX_BINDINGS && db < VKV_MAX_BINDINGS)
				dst->b[db] = src->b[sb];
		}
	}
}

VkResult vkv_CreatePipelineLayout(VkDevice device, const VkPipelineLayoutCreateInfo *ci, const VkAllocationCallbacks *alloc,
				  VkPipelineLayout *out)
{
	struct vkv_device *d = (struct vkv_device *)device;
	struct vkv_playout *l;
	uint32_t i;

	(void)alloc;
	if (ci->setLayoutCount > 1) {
		vkv_log("pipeline layout refused: %u descriptor sets; the device reads set 0 only", ci->setLayoutCount);
		return VK_ERROR_FEATURE_NOT_PRESENT;
	}
	l = calloc(1, sizeof(*l));
	if (!l)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	l->nsets = ci->setLayoutCount;
	if (ci->setLayoutCount && ci->pSetLayouts[0])
		l->set0 = *(const struct vkv_dsl *)(uintptr_t)ci->pSetLayouts[0];
	for (i = 0; i < ci->pushConstantRangeCount; i++) {
		uint32_t end = ci->pPushConstantRanges[i].offset + ci->pPushConstantRanges[i].size;

		if (end > l->push_bytes)
			l->push_bytes = end;
	}
	if (l->push_bytes > d->pd->lim.max_push_bytes)
		l->push_bytes = d->pd->lim.max_push_bytes;
	*out = (VkPipelineLayout)(uintptr_t)l;
	return VK_SUCCESS;
}

void vkv_DestroyPipelineLayout(VkDevice device, VkPipelineLayout layout, const VkAllocationCallbacks *alloc)
{
	(void)device, (void)alloc;
	free((void *)(uintptr_t)layout);
}

/* ---- pipeline caches: nothing to keep (the device caches compiled programs per VM) ---- */

struct vkv_cache {
	int unused;
};

VkResult vkv_CreatePipelineCache(VkDevice device, const VkPipelineCacheCreateInfo *ci, const VkAllocationCallbacks *alloc,
				 VkPipelineCache *out)
{
	struct vkv_cache *c = calloc(1, sizeof(*c));

	(void)device, (void)ci, (void)alloc;
	if (!c)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	*out = (VkPipelineCache)(uintptr_t)c;
	return VK_SUCCESS;
}

void vkv_DestroyPipelineCache(VkDevice device, VkPipelineCache cache, const VkAllocationCallbacks *alloc)
{
	(void)device, (void)alloc;
	free((void *)(uintptr_t)cache);
}

VkResult vkv_GetPipelineCacheData(VkDevice device, VkPipelineCache cache, size_t *size, void *data)
{
	struct vkv_device *d = (struct vkv_device *)device;
	uint32_t hdr[4] = { 32, VK_PIPELINE_CACHE_HEADER_VERSION_ONE, VKV_VENDOR_ID, VKV_DEVICE_ID };
	VkPhysicalDeviceProperties p;

	(void)cache;
	if (!data) {
		*size = 32;
		return VK_SUCCESS;
	}
	if (*size < 32) {
		*size = 0;
		return VK_INCOMPLETE;
	}
	vkv_GetPhysicalDeviceProperties((VkPhysicalDevice)d->pd, &p);
	memcpy(data, hdr, 16);
	memcpy((uint8_t *)data + 16, p.pipelineCacheUUID, VK_UUID_SIZE);
	*size = 32;
	return VK_SUCCESS;
}

VkResult vkv_MergePipelineCaches(VkDevice device, VkPipelineCache dst, uint32_t n, const VkPipelineCache *src)
{
	(void)device, (void)dst, (void)n, (void)src;
	return VK_SUCCESS;
}

/* ---- compute pipelines ---- */

static VkResult create_pipeline(struct vkv_device *d, const VkComputePipelineCreateInfo *ci, struct vkv_pipeline **out)
{
	struct vkv_shader *s = (struct vkv_shader *)(uintptr_t)ci->stage.module;
	const struct vkv_playout *l = (const struct vkv_playout *)(uintptr_t)ci->layout;
	const VkSpecializationInfo *si = ci->stage.pSpecializationInfo;
	struct vkv_pipeline *p;
	uint32_t entry = 0, i;
	VkResult res;
	vgResult r;

	if (!s || ci->stage.stage != VK_SHADER_STAGE_COMPUTE_BIT)
		return VK_ERROR_UNKNOWN;
	res = parse_module(d, s, ci->stage.pName, &entry);
	if (res)
		return res;
	if (si && si->mapEntryCount > d->pd->lim.max_spec_constants) {
		vkv_log("pipeline refused: %u specialization constants (the device takes %u)", si->mapEntryCount,
			d->pd->lim.max_spec_constants);
		return VK_ERROR_UNKNOWN;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	p->entry = entry;
	p->push_bytes = l ? l->push_bytes : 0;
	if (si && si->mapEntryCount) {
		p->spec = calloc(si->mapEntryCount, sizeof(*p->spec));
		if (!p->spec) {
			free(p);
			return VK_ERROR_OUT_OF_HOST_MEMORY;
		}
		for (i = 0; i < si->mapEntryCount; i++) {
			const VkSpecializationMapEntry *e = &si->pMapEntries[i];
			uint64_t v = 0;

			/* the device's entries carry 32 bits; smaller constants are zero-extended */
			if (e->offset + e->size <= si->dataSize && e->size <= 8)
				memcpy(&v, (const uint8_t *)si->pData + e->offset, e->size);
			if (e->size == 8 && (v >> 32) && vkv_debug())
				vkv_log("specialization constant %u: only its low 32 bits reach the device", e->constantID);
			p->spec[i].id = e->constantID;
			p->spec[i].value = (uint32_t)v;
		}
		p->nspec = si->mapEntryCount;
	}
	pthread_mutex_lock(&vkv_lock);
	if (!s->prog) {
		struct vkv_prog *pr = calloc(1, sizeof(*pr));

		/* a module loads once, at its first pipeline; behind running work if there is any */
		r = pr ? vgProgramLoad(d->ctx, s->words, s->bytes, &pr->prog) : VG_ERROR_OUT_OF_MEMORY;
		if (r) {
			free(pr);
			pthread_mutex_unlock(&vkv_lock);
			free(p->spec);
			free(p);
			return vkv_result(d, r, "vkCreateComputePipelines");
		}
		pr->refs = 1;
		s->prog = pr;
	}
	s->prog->refs++;
	p->prog = s->prog;
	pthread_mutex_unlock(&vkv_lock);
	*out = p;
	return VK_SUCCESS;
}

VkResult vkv_CreateComputePipelines(VkDevice device, VkPipelineCache cache, uint32_t n,
				    const VkComputePipelineCreateInfo *ci, const VkAllocationCallbacks *alloc,
				    VkPipeline *out)
{
	struct vkv_device *d = (struct vkv_device *)device;
	VkResult res = VK_SUCCESS;
	uint32_t i;

	(void)cache, (void)alloc;
	for (i = 0; i < n; i++) {
		struct vkv_pipeline *p = NULL;
		VkResult r1 = create_pipeline(d, &ci[i], &p);

		out[i] = (VkPipeline)(uintptr_t)p;
		if (r1 && !res)
			res = r1;
	}
	return res;
}

void vkv_DestroyPipeline(VkDevice device, VkPipeline pipeline, const VkAllocationCallbacks *alloc)
{
	struct vkv_device *d = (struct vkv_device *)device;
	struct vkv_pipeline *p = (struct vkv_pipeline *)(uintptr_t)pipeline;

	(void)alloc;
	if (!p)
		return;
	pthread_mutex_lock(&vkv_lock);
	vkv_prog_put(d, p->prog);
	pthread_mutex_unlock(&vkv_lock);
	free(p->spec);
	free(p);
}

/* ---- fences ---- */

VkResult vkv_CreateFence(VkDevice device, const VkFenceCreateInfo *ci, const VkAllocationCallbacks *alloc, VkFence *out)
{
	struct vkv_fence *f = calloc(1, sizeof(*f));

	(void)device, (void)alloc;
	if (!f)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	f->signaled = !!(ci->flags & VK_FENCE_CREATE_SIGNALED_BIT);
	*out = (VkFence)(uintptr_t)f;
	return VK_SUCCESS;
}

void vkv_DestroyFence(VkDevice device, VkFence fence, const VkAllocationCallbacks *alloc)
{
	(void)device, (void)alloc;
	free((void *)(uintptr_t)fence);
}

VkResult vkv_ResetFences(VkDevice device, uint32_t n, const VkFence *fences)
{
	uint32_t i;

	(void)device;
	pthread_mutex_lock(&vkv_lock);
	for (i = 0; i < n; i++) {
		struct vkv_fence *f = (struct vkv_fence *)(uintptr_t)fences[i];

		f->signaled = 0;
		f->seq = 0;
	}
	pthread_mutex_unlock(&vkv_lock);
	return VK_SUCCESS;
}

/* vkv_lock held: 1 when signaled */
static int fence_check(struct vkv_device *d, struct vkv_fence *f)
{
	if (!f->signaled && f->seq && vkv_fence_passed(d, f->seq)) {
		f->signaled = 1;
		f->seq = 0;
	}
	return f->signaled;
}

VkResult vkv_GetFenceStatus(VkDevice device, VkFence fence)
{
	struct vkv_device *d = (struct vkv_device *)device;
	int s;

	pthread_mutex_lock(&vkv_lock);
	s = fence_check(d, (struct vkv_fence *)(uintptr_t)fence);
	pthread_mutex_unlock(&vkv_lock);
	if (d->lost)
		return VK_ERROR_DEVICE_LOST;
	return s ? VK_SUCCESS : VK_NOT_READY;
}

VkResult vkv_WaitForFences(VkDevice device, uint32_t n, const VkFence *fences, VkBool32 all, uint64_t timeout)
{
	struct vkv_device *d = (struct vkv_device *)device;
	uint64_t start = vkv_now_ns();
	VkResult res = VK_SUCCESS;

	pthread_mutex_lock(&vkv_lock);
	for (;;) {
		uint32_t i, done = 0;
		uint64_t wait_seq = 0, el;

		for (i = 0; i < n; i++) {
			struct vkv_fence *f = (struct vkv_fence *)(uintptr_t)fences[i];

			if (fence_check(d, f))
				done++;
			else if (f->seq && (!wait_seq || f->seq < wait_seq))
				wait_seq = f->seq;
		}
		if (d->lost) {
			res = VK_ERROR_DEVICE_LOST;
			break;
		}
		if (all ? done == n : done > 0)
			break;
		el = vkv_now_ns() - start;
		if (timeout != UINT64_MAX && el >= timeout) {
			res = VK_TIMEOUT;
			break;
		}
		if (wait_seq) {
			/* the earliest pending fence; each pass re-checks all of them */
			res = vkv_wait_seq(d, wait_seq, timeout == UINT64_MAX ? WAIT_SLICE_MS * 1000000ull
							  : (timeout - el < WAIT_SLICE_MS * 1000000ull ? timeout - el : WAIT_SLICE_MS * 1000000ull));
			if (res == VK_TIMEOUT)
				res = VK_SUCCESS;
			if (res)
				break;
		} else {
			/* not submitted yet: another thread may submit it */
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&d->cond, &vkv_lock, &ts);
		}
	}
	pthread_mutex_unlock(&vkv_lock);
	return res;
}

/* ---- semaphores (CPU records of the submissions that signal them) ---- */

VkResult vkv_CreateSemaphore(VkDevice device, const VkSemaphoreCreateInfo *ci, const VkAllocationCallbacks *alloc,
			     VkSemaphore *out)
{
	const VkBaseInStructure *s;
	struct vkv_semaphore *sem = calloc(1, sizeof(*sem));

	(void)device, (void)alloc;
	if (!sem)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	for (s = ci->pNext; s; s = s->pNext) {
		if (s->sType == VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO) {
			const VkSemaphoreTypeCreateInfo *t = (const void *)s;

			sem->timeline = t->semaphoreType == VK_SEMAPHORE_TYPE_TIMELINE;
			sem->value = sem->timeline ? t->initialValue : 0;
		}
	}
	*out = (VkSemaphore)(uintptr_t)sem;
	return VK_SUCCESS;
}

void vkv_DestroySemaphore(VkDevice device, VkSemaphore semaphore, const VkAllocationCallbacks *alloc)
{
	struct vkv_semaphore *s = (struct vkv_semaphore *)(uintptr_t)semaphore;

	(void)device, (void)alloc;
	if (!s)
		return;
	free(s->pending);
	free(s);
}

/* vkv_lock held: a submission with fence seq sets the semaphore to value when it completes */
void vkv_sem_signal(struct vkv_semaphore *s, uint64_t value, uint64_t seq)
{
	if (s->npending == s->cap) {
		uint32_t cap = s->cap ? 2 * s->cap : 8;
		struct vkv_sem_signal *p = realloc(s->pending, cap * sizeof(*p));

		if (!p) { /* keep the signal correct, only later: wait for it now */
			if (value > s->value)
				s->value = value;
			return;
		}
		s->pending = p;
		s->cap = cap;
	}
	s->pending[s->npending].value = value;
	s->pending[s->npending].seq = seq;
	s->npending++;
}

/* vkv_lock held: the value reached, folding in completed submissions */
uint64_t vkv_sem_value(struct vkv_device *d, struct vkv_semaphore *s)
{
	uint32_t i, k = 0;

	for (i = 0; i < s->npending; i++) {
		if (vkv_fence_passed(d, s->pending[i].seq)) {
			if (s->pending[i].value > s->value)
				s->value = s->pending[i].value;
		} else {
			s->pending[k++] = s->pending[i];
		}
	}
	s->npending = k;
	return s->value;
}

VkResult vkv_GetSemaphoreCounterValue(VkDevice device, VkSemaphore semaphore, uint64_t *value)
{
	struct vkv_device *d = (struct vkv_device *)device;

	pthread_mutex_lock(&vkv_lock);
	*value = vkv_sem_value(d, (struct vkv_semaphore *)(uintptr_t)semaphore);
	pthread_mutex_unlock(&vkv_lock);
	return d->lost ? VK_ERROR_DEVICE_LOST : VK_SUCCESS;
}

VkResult vkv_WaitSemaphores(VkDevice device, const VkSemaphoreWaitInfo *info, uint64_t timeout)
{
	struct vkv_device *d = (struct vkv_device *)device;
	int any = !!(info->flags & VK_SEMAPHORE_WAIT_ANY_BIT);
	uint64_t start = vkv_now_ns();
	VkResult res = VK_SUCCESS;

	pthread_mutex_lock(&vkv_lock);
	for (;;) {
		uint32_t i, k, done = 0;
		uint64_t wait_seq = 0, el;

		for (i = 0; i < info->semaphoreCount; i++) {
			struct vkv_semaphore *s = (struct vkv_semaphore *)(uintptr_t)info->pSemaphores[i];

			if (vkv_sem_value(d, s) >= info->pValues[i]) {
				done++;
				continue;
			}
			for (k = 0; k < s->npending; k++)
				if (s->pending[k].value >= info->pValues[i] && (!wait_seq || s->pending[k].seq < wait_seq))
					wait_seq = s->pending[k].seq;
		}
		if (d->lost) {
			res = VK_ERROR_DEVICE_LOST;
			break;
		}
		if (any ? done > 0 || !info->semaphoreCount : done == info->semaphoreCount)
			break;
		el = vkv_now_ns() - start;
		if (timeout != UINT64_MAX && el >= timeout) {
			res = VK_TIMEOUT;
			break;
		}
		if (wait_seq) {
			res = vkv_wait_seq(d, wait_seq, timeout == UINT64_MAX || timeout - el > WAIT_SLICE_MS * 1000000ull
								? WAIT_SLICE_MS * 1000000ull : timeout - el);
			if (res == VK_TIMEOUT)
				res = VK_SUCCESS;
			if (res)
				break;
		} else {
			struct timespec ts; /* a host signal (vkSignalSemaphore) or a later submission */

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&d->cond, &vkv_lock, &ts);
		}
	}
	pthread_mutex_unlock(&vkv_lock);
	return res;
}

VkResult vkv_SignalSemaphore(VkDevice device, const VkSemaphoreSignalInfo *info)
{
	struct vkv_device *d = (struct vkv_device *)device;
	struct vkv_semaphore *s = (struct vkv_semaphore *)(uintptr_t)info->semaphore;

	pthread_mutex_lock(&vkv_lock);
	if (info->value > s->value)
		s->value = info->value;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&vkv_lock);
	return VK_SUCCESS;
}

/* ---- events ---- */

VkResult vkv_CreateEvent(VkDevice device, const VkEventCreateInfo *ci, const VkAllocationCallbacks *alloc, VkEvent *out)
{
	struct vkv_event *e = calloc(1, sizeof(*e));

	(void)device, (void)ci, (void)alloc;
	if (!e)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	e->state = VK_EVENT_RESET;
	*out = (VkEvent)(uintptr_t)e;
	return VK_SUCCESS;
}

void vkv_DestroyEvent(VkDevice device, VkEvent event, const VkAllocationCallbacks *alloc)
{
	(void)device, (void)alloc;
	free((void *)(uintptr_t)event);
}

/* vkv_lock held: apply a device-side set/reset whose submission completed */
void vkv_event_update(struct vkv_device *d, struct vkv_event *e)
{
	if (e->seq && vkv_fence_passed(d, e->seq)) {
		e->state = e->pending_state;
		e->seq = 0;
	}
}

VkResult vkv_GetEventStatus(VkDevice device, VkEvent event)
{
	struct vkv_device *d = (struct vkv_device *)device;
	struct vkv_event *e = (struct vkv_event *)(uintptr_t)event;
	int s;

	pthread_mutex_lock(&vkv_lock);
	vkv_event_update(d, e);
	s = e->state;
	pthread_mutex_unlock(&vkv_lock);
	if (d->lost)
		return VK_ERROR_DEVICE_LOST;
	return s == VK_EVENT_SET ? VK_EVENT_SET : VK_EVENT_RESET;
}

static VkResult host_event(struct vkv_device *d, VkEvent event, int state)
{
	struct vkv_event *e = (struct vkv_event *)(uintptr_t)event;

	pthread_mutex_lock(&vkv_lock);
	e->state = state;
	e->seq = 0;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&vkv_lock);
	return VK_SUCCESS;
}

VkResult vkv_SetEvent(VkDevice device, VkEvent event)
{
	return host_event((struct vkv_device *)device, event, VK_EVENT_SET);
}

VkResult vkv_ResetEvent(VkDevice device, VkEvent event)
{
	return host_event((struct vkv_device *)device, event, VK_EVENT_RESET);
}

/* ---- query pools: timestamps only ---- */

VkResult vkv_CreateQueryPool(VkDevice device, const VkQueryPoolCreateInfo *ci, const VkAllocationCallbacks *alloc,
			     VkQueryPool *out)
{
	struct vkv_query_pool *q;

	(void)device, (void)alloc;
	if (ci->queryType != VK_QUERY_TYPE_TIMESTAMP)
		return VK_ERROR_FEATURE_NOT_PRESENT;
	q = calloc(1, sizeof(*q));
	if (q) {
		q->value = calloc(ci->queryCount ? ci->queryCount : 1, sizeof(*q->value));
		q->avail = calloc(ci->queryCount ? ci->queryCount : 1, 1);
	}
	if (!q || !q->value || !q->avail) {
		if (q) {
			free(q->value);
			free(q->avail);
		}
		free(q);
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	}
	q->count = ci->queryCount;
	*out = (VkQueryPool)(uintptr_t)q;
	return VK_SUCCESS;
}

void vkv_DestroyQueryPool(VkDevice device, VkQueryPool pool, const VkAllocationCallbacks *alloc)
{
	struct vkv_query_pool *q = (struct vkv_query_pool *)(uintptr_t)pool;

	(void)device, (void)alloc;
	if (!q)
		return;
	free(q->value);
	free(q->avail);
	free(q);
}

void vkv_ResetQueryPool(VkDevice device, VkQueryPool pool, uint32_t first, uint32_t count)
{
	struct vkv_query_pool *q = (struct vkv_query_pool *)(uintptr_t)pool;

	(void)device;
	pthread_mutex_lock(&vkv_lock);
	if (first < q->count)
		memset(q->avail + first, 0, count > q->count - first ? q->count - first : count);
	pthread_mutex_unlock(&vkv_lock);
}

VkResult vkv_GetQueryPoolResults(VkDevice device, VkQueryPool pool, uint32_t first, uint32_t count, size_t size,
				 void *data, VkDeviceSize stride, VkQueryResultFlags flags)
{
	struct vkv_device *d = (struct vkv_device *)device;
	struct vkv_query_pool *q = (struct vkv_query_pool *)(uintptr_t)pool;
	int wide = !!(flags & VK_QUERY_RESULT_64_BIT), with_avail = !!(flags & VK_QUERY_RESULT_WITH_AVAILABILITY_BIT);
	size_t elem = wide ? 8 : 4;
	uint64_t start = vkv_now_ns();
	VkResult res = VK_SUCCESS;
	uint32_t i;

	pthread_mutex_lock(&vkv_lock);
	for (i = 0; i < count && first + i < q->count; i++) {
		uint8_t *out = (uint8_t *)data + i * stride;
		uint32_t k = first + i;

		/* timestamps are written while their submission is processed: waiting means another
		 * thread has yet to submit it */
		while ((flags & VK_QUERY_RESULT_WAIT_BIT) && !q->avail[k] && !d->lost &&
		       vkv_now_ns() - start < VKV_HOST_WAIT_LIMIT_NS) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&d->cond, &vkv_lock, &ts);
		}
		if ((size_t)(i * stride) + elem * (with_avail ? 2 : 1) > size)
			break;
		if (q->avail[k] || (flags & VK_QUERY_RESULT_PARTIAL_BIT)) {
			uint64_t v = q->avail[k] ? q->value[k] : 0;

			if (wide)
				memcpy(out, &v, 8);
			else {
				uint32_t v32 = (uint32_t)v;

				memcpy(out, &v32, 4);
			}
		}
		if (!q->avail[k])
			res = VK_NOT_READY;
		if (with_avail) {
			uint64_t a = q->avail[k];

			if (wide)
				memcpy(out + 8, &a, 8);
			else {
				uint32_t a32 = (uint32_t)a;

				memcpy(out + 4, &a32, 4);
			}
		}
	}
	pthread_mutex_unlock(&vkv_lock);
	if (d->lost)
		return VK_ERROR_DEVICE_LOST;
	return res;
}

/* vkv_lock held: sleep until a host-side signal or ms pass (the lock is released meanwhile) */
void vkv_cond_wait_ms(struct vkv_device *d, unsigned int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&d->cond, &vkv_lock, &ts);
}
