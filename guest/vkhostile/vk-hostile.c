// SPDX-License-Identifier: MIT
/*
 * vk-hostile: a hostile Vulkan application, through the Vulkan API only (the loader and whatever
 * driver it finds — in a vugpu guest, the vugpu ICD). Each attack runs on a VkDevice of its own
 * and must end in a clear error or VK_ERROR_DEVICE_LOST for that device, never a hang, and change
 * no byte outside the memory it was given: a witness VkDevice of the same process keeps canary
 * buffers (VRAM and pinned host memory) allocated around every attack's own, and checks them
 * after each. One `VUGPU-CHECK {"check":"vk-…","ok":…,…}` line per attack says what the
 * application saw; `VUGPU-PHASE` lines mark the start and end. Exit status = failed checks.
 *
 *   vk-hostile [--only a:b:c] [--iters N] [--one-process]
 *                                           the attacks (names below, without the vk- prefix);
 *                                           --one-process leaves out what needs a second process
 *                                           (the kill attack, the fresh-process run): the native
 *                                           twin serves one process per VM socket
 *   vk-hostile clean                        a clean compute run in a fresh process (one check)
 *   vk-hostile child-submit                 (internal) the process the kill attack SIGKILLs
 *
 * The attacks are undefined behaviour in Vulkan's terms; what matters is that the driver and
 * the device contain them. Mark words are HOSTILE_MARK (guest/hostile), so a VRAM scan of another
 * VM can count them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#include "shaders.h"

#define HOSTILE_MARK 0x48535430u
#define CANARY_VRAM 0xCA4A2135u
#define CANARY_HOST 0xCA4A4057u
#define FENCE_TIMEOUT_NS (90ull * 1000000000ull)
/* every attack must be over well before this; hitting it is the hang the test looks for */
#define ATTACK_ALARM_S 150

static int failures;
static int one_process;
static uint32_t slow_iters = 20000;
static const char *current = "startup";

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static const char *res_name(VkResult r)
{
	switch (r) {
	case VK_SUCCESS: return "VK_SUCCESS";
	case VK_NOT_READY: return "VK_NOT_READY";
	case VK_TIMEOUT: return "VK_TIMEOUT";
	case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
	case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
	case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
	case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
	case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
	case VK_ERROR_UNKNOWN: return "VK_ERROR_UNKNOWN";
	default: return "other";
	}
}

/* one record: fields is a JSON fragment (",\"k\":v…") */
static void check(const char *name, int ok, const char *fmt, ...)
{
	char fields[1536] = "";
	va_list ap;

	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(fields, sizeof(fields), fmt, ap);
		va_end(ap);
	}
	printf("VUGPU-CHECK {\"check\":\"%s\",\"ok\":%s%s}\n", name, ok ? "true" : "false", fields);
	fflush(stdout);
	if (!ok)
		failures++;
}

static void phase(const char *p)
{
	printf("VUGPU-PHASE {\"phase\":\"%s\"}\n", p);
	fflush(stdout);
}

static void on_alarm(int sig)
{
	char line[256];
	int n;

	(void)sig;
	n = snprintf(line, sizeof(line), "VUGPU-CHECK {\"check\":\"%s\",\"ok\":false,\"detail\":\"hung: still running after %d s\"}\n",
		     current, ATTACK_ALARM_S);
	if (write(1, line, (size_t)n) < 0)
		_exit(4);
	_exit(3);
}

/* ---------------------------------------------------------------- devices, buffers, pipelines */

static VkInstance inst;
static VkPhysicalDevice pd;
static uint32_t vram_type = UINT32_MAX, host_type = UINT32_MAX;
static VkPhysicalDeviceLimits lim;

struct dev {
	VkDevice d;
	VkQueue q;
	VkCommandPool pool;
	VkFence fence;
};

struct buf {
	VkBuffer b;
	VkDeviceMemory m;
	void *map;
	VkDeviceSize size;
};

struct pipe {
	VkDescriptorSetLayout dsl;
	VkPipelineLayout layout;
	VkPipeline p;
	VkDescriptorPool dpool;
	VkDescriptorSet set;
};

static int open_instance(void)
{
	VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "vk-hostile",
				  .apiVersion = VK_API_VERSION_1_2 };
	VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
	VkPhysicalDeviceMemoryProperties mp;
	VkPhysicalDeviceProperties props;
	uint32_t n = 1, i;

	if (vkCreateInstance(&ici, NULL, &inst) != VK_SUCCESS)
		return -1;
	if (vkEnumeratePhysicalDevices(inst, &n, &pd) < 0 || !n)
		return -1;
	vkGetPhysicalDeviceProperties(pd, &props);
	lim = props.limits;
	vkGetPhysicalDeviceMemoryProperties(pd, &mp);
	for (i = 0; i < mp.memoryTypeCount; i++) {
		VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;

		if ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && !(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && vram_type == UINT32_MAX)
			vram_type = i;
		if ((f & (VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)) ==
			    (VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) && host_type == UINT32_MAX)
			host_type = i;
	}
	if (vram_type == UINT32_MAX)
		vram_type = host_type;
	return host_type == UINT32_MAX ? -1 : 0;
}

static VkResult dev_open(struct dev *dv)
{
	float prio = 1.0f;
	VkDeviceQueueCreateInfo qi = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = 0,
				       .queueCount = 1, .pQueuePriorities = &prio };
	VkDeviceCreateInfo di = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1, .pQueueCreateInfos = &qi };
	VkCommandPoolCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
				       .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT };
	VkFenceCreateInfo fi = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
	VkResult r;

	memset(dv, 0, sizeof(*dv));
	if ((r = vkCreateDevice(pd, &di, NULL, &dv->d)))
		return r;
	vkGetDeviceQueue(dv->d, 0, 0, &dv->q);
	if ((r = vkCreateCommandPool(dv->d, &ci, NULL, &dv->pool)))
		return r;
	return vkCreateFence(dv->d, &fi, NULL, &dv->fence);
}

/* a lost device still has to let go of everything without hanging */
static void dev_close(struct dev *dv)
{
	if (!dv->d)
		return;
	vkDeviceWaitIdle(dv->d);
	vkDestroyFence(dv->d, dv->fence, NULL);
	vkDestroyCommandPool(dv->d, dv->pool, NULL);
	vkDestroyDevice(dv->d, NULL);
	dv->d = VK_NULL_HANDLE;
}

static VkResult make_buf(struct dev *dv, VkDeviceSize size, int host, struct buf *out)
{
	VkBufferCreateInfo bi = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
				  .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
					   VK_BUFFER_USAGE_TRANSFER_DST_BIT };
	VkMemoryAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO };
	VkMemoryRequirements req;
	VkResult r;

	memset(out, 0, sizeof(*out));
	out->size = size;
	if ((r = vkCreateBuffer(dv->d, &bi, NULL, &out->b)))
		return r;
	vkGetBufferMemoryRequirements(dv->d, out->b, &req);
	ai.allocationSize = req.size;
	ai.memoryTypeIndex = host ? host_type : vram_type;
	if ((r = vkAllocateMemory(dv->d, &ai, NULL, &out->m)))
		return r;
	if ((r = vkBindBufferMemory(dv->d, out->b, out->m, 0)))
		return r;
	if (host)
		r = vkMapMemory(dv->d, out->m, 0, VK_WHOLE_SIZE, 0, &out->map);
	return r;
}

static void free_buf(struct dev *dv, struct buf *b)
{
	if (b->b)
		vkDestroyBuffer(dv->d, b->b, NULL);
	if (b->m)
		vkFreeMemory(dv->d, b->m, NULL);
	memset(b, 0, sizeof(*b));
}

static VkResult make_pipe(struct dev *dv, const uint32_t *code, size_t bytes, uint32_t nbind, uint32_t push, struct pipe *pp)
{
	VkShaderModuleCreateInfo mi = { .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = bytes, .pCode = code };
	VkDescriptorSetLayoutBinding b[4];
	VkDescriptorSetLayoutCreateInfo li = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
					       .bindingCount = nbind, .pBindings = b };
	VkPushConstantRange pr = { VK_SHADER_STAGE_COMPUTE_BIT, 0, push };
	VkPipelineLayoutCreateInfo pli = { .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
					   .pSetLayouts = &pp->dsl, .pushConstantRangeCount = push ? 1 : 0,
					   .pPushConstantRanges = &pr };
	VkComputePipelineCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO };
	VkDescriptorPoolSize ps = { VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 4 };
	VkDescriptorPoolCreateInfo dpi = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = 1,
					   .poolSizeCount = 1, .pPoolSizes = &ps };
	VkDescriptorSetAllocateInfo dai = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, .descriptorSetCount = 1,
					    .pSetLayouts = &pp->dsl };
	VkShaderModule mod;
	uint32_t i;
	VkResult r;

	memset(pp, 0, sizeof(*pp));
	for (i = 0; i < nbind; i++)
		b[i] = (VkDescriptorSetLayoutBinding){ i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL };
	if ((r = vkCreateShaderModule(dv->d, &mi, NULL, &mod)))
		return r;
	if ((r = vkCreateDescriptorSetLayout(dv->d, &li, NULL, &pp->dsl)) || (r = vkCreatePipelineLayout(dv->d, &pli, NULL, &pp->layout))) {
		vkDestroyShaderModule(dv->d, mod, NULL);
		return r;
	}
	ci.stage = (VkPipelineShaderStageCreateInfo){ .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
						      .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = mod, .pName = "main" };
	ci.layout = pp->layout;
	r = vkCreateComputePipelines(dv->d, VK_NULL_HANDLE, 1, &ci, NULL, &pp->p);
	vkDestroyShaderModule(dv->d, mod, NULL);
	if (r)
		return r;
	if ((r = vkCreateDescriptorPool(dv->d, &dpi, NULL, &pp->dpool)))
		return r;
	dai.descriptorPool = pp->dpool;
	return vkAllocateDescriptorSets(dv->d, &dai, &pp->set);
}

/* binding i = bufs[i] (whole buffer, or [off, off + range) where ranges is given) */
static void bind(struct dev *dv, struct pipe *pp, struct buf **bufs, const VkDeviceSize (*ranges)[2], uint32_t n)
{
	VkDescriptorBufferInfo bi[4];
	VkWriteDescriptorSet w = { .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = pp->set, .dstBinding = 0,
				   .descriptorCount = n, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = bi };
	uint32_t i;

	for (i = 0; i < n; i++)
		bi[i] = (VkDescriptorBufferInfo){ bufs[i]->b, ranges ? ranges[i][0] : 0, ranges ? ranges[i][1] : VK_WHOLE_SIZE };
	vkUpdateDescriptorSets(dv->d, 1, &w, 0, NULL);
}

static VkCommandBuffer begin(struct dev *dv, VkCommandBufferUsageFlags flags)
{
	VkCommandBufferAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = dv->pool,
					   .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
	VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, .flags = flags };
	VkCommandBuffer cb;

	if (vkAllocateCommandBuffers(dv->d, &ai, &cb))
		return VK_NULL_HANDLE;
	vkBeginCommandBuffer(cb, &bi);
	return cb;
}

static void barrier(VkCommandBuffer cb)
{
	VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
			       .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
			       .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT };

	vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
			     VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

static void dispatch(VkCommandBuffer cb, struct pipe *pp, const void *push, uint32_t push_bytes, uint32_t x, uint32_t y, uint32_t z)
{
	vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pp->p);
	vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pp->layout, 0, 1, &pp->set, 0, NULL);
	if (push_bytes)
		vkCmdPushConstants(cb, pp->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
	vkCmdDispatch(cb, x, y, z);
}

/* submit and wait on the device's fence: the submit's result, else the wait's */
static VkResult submit_wait(struct dev *dv, VkCommandBuffer cb, double *ms)
{
	VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb };
	double t0 = now_ms();
	VkResult r;

	vkResetFences(dv->d, 1, &dv->fence);
	r = vkQueueSubmit(dv->q, 1, &si, dv->fence);
	if (!r)
		r = vkWaitForFences(dv->d, 1, &dv->fence, VK_TRUE, FENCE_TIMEOUT_NS);
	if (ms)
		*ms = now_ms() - t0;
	return r;
}

static uint32_t lcg(uint32_t i, uint32_t iters)
{
	uint32_t x = i, k;

	for (k = 0; k < iters; k++)
		x = x * 1664525u + 1013904223u;
	return x;
}

/* ---------------------------------------------------------------- the witness: canaries */

/* The witness device owns canaries allocated around each attack's memory (VRAM and pinned host
 * memory, before and after), filled with a known word and checked after every attack. */
#define WIT_MAX 64
#define WIT_BYTES (64 * 1024)
static struct dev wit;
static struct buf wit_buf[WIT_MAX], wit_stage;
static int wit_host[WIT_MAX], wit_n, wit_ok = 1;

static int wit_add(void)
{
	VkCommandBuffer cb;
	int i, first = wit_n;

	for (i = 0; i < 2 && wit_n < WIT_MAX; i++, wit_n++) {
		wit_host[wit_n] = i;
		if (make_buf(&wit, WIT_BYTES, i, &wit_buf[wit_n]))
			return -1;
		if (i) {
			uint32_t *w = wit_buf[wit_n].map, k;

			for (k = 0; k < WIT_BYTES / 4; k++)
				w[k] = CANARY_HOST;
		}
	}
	cb = begin(&wit, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
	for (i = first; i < wit_n; i++)
		if (!wit_host[i])
			vkCmdFillBuffer(cb, wit_buf[i].b, 0, VK_WHOLE_SIZE, CANARY_VRAM);
	vkEndCommandBuffer(cb);
	i = submit_wait(&wit, cb, NULL);
	vkFreeCommandBuffers(wit.d, wit.pool, 1, &cb);
	return i ? -1 : 0;
}

/* every canary still holds its word; the number of changed words, -1 when the witness failed */
static long wit_check(void)
{
	long bad = 0;
	int i;
	uint32_t k;

	for (i = 0; i < wit_n; i++) {
		const uint32_t *w;
		uint32_t want = wit_host[i] ? CANARY_HOST : CANARY_VRAM;

		if (!wit_host[i]) {
			VkCommandBuffer cb = begin(&wit, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
			VkBufferCopy cp = { 0, 0, WIT_BYTES };
			VkResult r;

			vkCmdCopyBuffer(cb, wit_buf[i].b, wit_stage.b, 1, &cp);
			vkEndCommandBuffer(cb);
			r = submit_wait(&wit, cb, NULL);
			vkFreeCommandBuffers(wit.d, wit.pool, 1, &cb);
			if (r)
				return -1;
			w = wit_stage.map;
		} else {
			w = wit_buf[i].map;
		}
		for (k = 0; k < WIT_BYTES / 4; k++)
			bad += w[k] != want;
	}
	if (bad)
		wit_ok = 0;
	return bad;
}

/* ---------------------------------------------------------------- the attacks */

struct attack_ctx {
	struct dev dv;
	double t0;
};

static void attack_begin(struct attack_ctx *a, const char *name)
{
	current = name;
	printf("VUGPU-PHASE {\"phase\":\"attack-start\",\"attack\":\"%s\"}\n", name);
	fflush(stdout);
	alarm(ATTACK_ALARM_S);
	wit_add();
	memset(a, 0, sizeof(*a));
	a->t0 = now_ms();
}

/* closes the attack's device, adds canaries after its memory and checks them all */
static long attack_end(struct attack_ctx *a, double *close_ms)
{
	double t = now_ms();
	long bad;

	dev_close(&a->dv);
	*close_ms = now_ms() - t;
	wit_add();
	bad = wit_check();
	alarm(0);
	return bad;
}

#define SETUP(expr)                                                                                   \
	do {                                                                                          \
		VkResult _r = (expr);                                                                 \
		if (_r) {                                                                             \
			snprintf(setup_err, sizeof(setup_err), "%s: %s", #expr, res_name(_r));        \
			goto setup_failed;                                                            \
		}                                                                                     \
	} while (0)

static char setup_err[256];

/* An endless compute shader: the device stops it (watchdog, or the loop limit) and the device is
 * lost; the next submit says so at once. */
static void attack_endless(void)
{
	struct attack_ctx a;
	struct buf counter;
	struct pipe pp;
	uint32_t stride = 1;
	VkCommandBuffer cb;
	VkResult r, again;
	double ms, close_ms;
	long bad;

	attack_begin(&a, "vk-endless");
	SETUP(dev_open(&a.dv));
	SETUP(make_buf(&a.dv, 256, 1, &counter));
	SETUP(make_pipe(&a.dv, spv_endless, sizeof(spv_endless), 1, 4, &pp));
	bind(&a.dv, &pp, (struct buf *[]){ &counter }, NULL, 1);
	cb = begin(&a.dv, 0);
	dispatch(cb, &pp, &stride, 4, 256, 1, 1);
	vkEndCommandBuffer(cb);
	r = submit_wait(&a.dv, cb, &ms);
	again = submit_wait(&a.dv, cb, NULL);
	bad = attack_end(&a, &close_ms);
	check("vk-endless", r == VK_ERROR_DEVICE_LOST && again == VK_ERROR_DEVICE_LOST && bad == 0,
	      ",\"result\":\"%s\",\"ms\":%.0f,\"next_submit\":\"%s\",\"close_ms\":%.0f,\"canary_words_changed\":%ld",
	      res_name(r), ms, res_name(again), close_ms, bad);
	return;
setup_failed:
	attack_end(&a, &close_ms);
	check("vk-endless", 0, ",\"detail\":\"setup: %s\"", setup_err);
}

/* Data-driven out-of-bounds indices into a binding that is a window of a larger buffer: reads past
 * the window return 0, writes past it are dropped — the buffer's own words on both sides of the
 * window (and the witness's canaries) keep their values. */
static void attack_oob(void)
{
	enum { WIN = 1024, GUARD = 1024, N = 256, IN = 128 };
	struct attack_ctx a;
	struct buf idx, data, got, stage;
	struct pipe pp;
	struct { uint32_t n, mark; } push = { N, HOSTILE_MARK };
	const VkDeviceSize ranges[3][2] = { { 0, VK_WHOLE_SIZE }, { GUARD * 4, WIN * 4 }, { 0, VK_WHOLE_SIZE } };
	VkBufferCopy cp = { 0, 0, (GUARD + WIN + GUARD) * 4 };
	uint32_t *ix, *g, *d, i, oob_reads_nonzero = 0, wrong_in = 0, guard_changed = 0, window_wrong = 0;
	uint32_t seen[WIN] = { 0 };
	VkCommandBuffer cb;
	VkResult r;
	double ms, close_ms;
	long bad;

	attack_begin(&a, "vk-oob-indices");
	SETUP(dev_open(&a.dv));
	SETUP(make_buf(&a.dv, N * 4, 1, &idx));
	SETUP(make_buf(&a.dv, (GUARD + WIN + GUARD) * 4, 0, &data));
	SETUP(make_buf(&a.dv, N * 4, 1, &got));
	SETUP(make_buf(&a.dv, (GUARD + WIN + GUARD) * 4, 1, &stage));
	SETUP(make_pipe(&a.dv, spv_oob, sizeof(spv_oob), 3, 8, &pp));
	ix = idx.map;
	/* distinct in-range indices, then indices past the window: just past it, into the guard
	 * words after it, far beyond, and "negative" ones that wrap to the guard before it */
	for (i = 0; i < IN; i++)
		ix[i] = (i * 37u + 5u) % WIN;
	{
		static const uint32_t far[] = { WIN, WIN + 1, WIN + 7, WIN + GUARD - 1, WIN + GUARD, 2 * WIN, 0x3fffffffu,
						0x40000000u, 0x7fffffffu, 0x80000000u, 0xbfffffffu, 0xfffffc00u, 0xffffff00u,
						0xfffffffeu, 0xffffffffu, 1u << 20, 1u << 26, 1u << 28 };
		for (i = IN; i < N; i++)
			ix[i] = i - IN < sizeof(far) / 4 ? far[i - IN] : WIN + (uint32_t)rand() % 0x7fffffffu;
	}
	memset(got.map, 0xff, N * 4);
	d = stage.map;
	for (i = 0; i < GUARD + WIN + GUARD; i++)
		d[i] = 0x5eed0000u + i;
	bind(&a.dv, &pp, (struct buf *[]){ &idx, &data, &got }, ranges, 3);
	cb = begin(&a.dv, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
	vkCmdCopyBuffer(cb, stage.b, data.b, 1, &cp);
	barrier(cb);
	dispatch(cb, &pp, &push, 8, N / 64, 1, 1);
	barrier(cb);
	vkCmdCopyBuffer(cb, data.b, stage.b, 1, &cp);
	vkEndCommandBuffer(cb);
	r = submit_wait(&a.dv, cb, &ms);
	g = got.map;
	if (!r) {
		for (i = 0; i < N; i++) {
			if (i < IN) {
				seen[ix[i]] = 1;
				wrong_in += g[i] != 0x5eed0000u + GUARD + ix[i];
			} else {
				oob_reads_nonzero += g[i] != 0;
			}
		}
		for (i = 0; i < GUARD + WIN + GUARD; i++) {
			if (i < GUARD || i >= GUARD + WIN) {
				guard_changed += d[i] != 0x5eed0000u + i;
			} else {
				uint32_t j = i - GUARD, k, want = 0x5eed0000u + i;

				if (seen[j])
					for (k = 0; k < IN; k++)
						if (ix[k] == j)
							want = HOSTILE_MARK + k;
				window_wrong += d[i] != want;
			}
		}
	}
	bad = attack_end(&a, &close_ms);
	check("vk-oob-indices", !r && !oob_reads_nonzero && !wrong_in && !guard_changed && !window_wrong && bad == 0,
	      ",\"result\":\"%s\",\"ms\":%.0f,\"in_range\":%u,\"out_of_range\":%u,\"oob_reads_nonzero\":%u,\"in_range_wrong\":%u,"
	      "\"guard_words_changed\":%u,\"window_words_wrong\":%u,\"canary_words_changed\":%ld",
	      res_name(r), ms, IN, N - IN, oob_reads_nonzero, wrong_in, guard_changed, window_wrong, bad);
	return;
setup_failed:
	attack_end(&a, &close_ms);
	check("vk-oob-indices", 0, ",\"detail\":\"setup: %s\"", setup_err);
}

/* slow.comp over `groups` workgroups of 64 into out + counter */
static VkCommandBuffer record_slow(struct dev *dv, struct pipe *pp, uint32_t groups, VkCommandBufferUsageFlags flags)
{
	VkCommandBuffer cb = begin(dv, flags);

	dispatch(cb, pp, &slow_iters, 4, groups, 1, 1);
	vkEndCommandBuffer(cb);
	return cb;
}

static uint32_t slow_wrong(const uint32_t *v, uint32_t n)
{
	uint32_t i, wrong = 0;

	for (i = 0; i < n; i++)
		wrong += v[i] != lcg(i, slow_iters);
	return wrong;
}

/* A buffer and its memory freed (VRAM, then pinned host memory) while a dispatch that writes it is
 * running. The free may wait for the dispatch or the device may be lost; either way the fence
 * answers, the canaries hold, and a dispatch after it on the same device computes right when the
 * device was not lost. */
static void attack_free_while_running(void)
{
	enum { GROUPS = 64 };
	struct attack_ctx a;
	struct buf out, counter, out2, counter2;
	struct pipe pp;
	VkCommandBuffer cb;
	VkResult r[2], after = VK_SUCCESS;
	double free_ms[2], ms[2], close_ms;
	VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1 };
	uint32_t wrong_after = 0, count_after = 0;
	int h;
	long bad;

	attack_begin(&a, "vk-free-while-running");
	SETUP(dev_open(&a.dv));
	SETUP(make_pipe(&a.dv, spv_slow, sizeof(spv_slow), 2, 4, &pp));
	for (h = 0; h < 2; h++) {
		double t0;

		SETUP(make_buf(&a.dv, GROUPS * 64 * 4, h, &out));
		SETUP(make_buf(&a.dv, 256, h, &counter));
		bind(&a.dv, &pp, (struct buf *[]){ &out, &counter }, NULL, 2);
		cb = record_slow(&a.dv, &pp, GROUPS, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
		si.pCommandBuffers = &cb;
		vkResetFences(a.dv.d, 1, &a.dv.fence);
		t0 = now_ms();
		r[h] = vkQueueSubmit(a.dv.q, 1, &si, a.dv.fence);
		free_buf(&a.dv, &out);
		free_buf(&a.dv, &counter);
		free_ms[h] = now_ms() - t0;
		if (!r[h])
			r[h] = vkWaitForFences(a.dv.d, 1, &a.dv.fence, VK_TRUE, FENCE_TIMEOUT_NS);
		ms[h] = now_ms() - t0;
	}
	/* the same device afterwards */
	SETUP(make_buf(&a.dv, GROUPS * 64 * 4, 1, &out2));
	SETUP(make_buf(&a.dv, 256, 1, &counter2));
	memset(counter2.map, 0, 4);
	bind(&a.dv, &pp, (struct buf *[]){ &out2, &counter2 }, NULL, 2);
	cb = record_slow(&a.dv, &pp, GROUPS, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
	after = submit_wait(&a.dv, cb, NULL);
	if (!after) {
		wrong_after = slow_wrong(out2.map, GROUPS * 64);
		count_after = *(uint32_t *)counter2.map;
	}
	bad = attack_end(&a, &close_ms);
	{
		int answered = (r[0] == VK_SUCCESS || r[0] == VK_ERROR_DEVICE_LOST) && (r[1] == VK_SUCCESS || r[1] == VK_ERROR_DEVICE_LOST);
		int lost = r[0] == VK_ERROR_DEVICE_LOST || r[1] == VK_ERROR_DEVICE_LOST;
		int after_ok = lost ? after == VK_ERROR_DEVICE_LOST : (!after && !wrong_after && count_after == GROUPS * 64);

		check("vk-free-while-running", answered && after_ok && bad == 0,
		      ",\"vram\":{\"result\":\"%s\",\"free_ms\":%.0f,\"ms\":%.0f},\"host\":{\"result\":\"%s\",\"free_ms\":%.0f,\"ms\":%.0f},"
		      "\"after\":\"%s\",\"after_wrong\":%u,\"after_count\":%u,\"canary_words_changed\":%ld",
		      res_name(r[0]), free_ms[0], ms[0], res_name(r[1]), free_ms[1], ms[1], res_name(after), wrong_after,
		      count_after, bad);
	}
	return;
setup_failed:
	attack_end(&a, &close_ms);
	check("vk-free-while-running", 0, ",\"detail\":\"setup: %s\"", setup_err);
}

/* A command buffer (recorded without SIMULTANEOUS_USE) submitted again while its first submission
 * is pending. The queue is in order: both run, one after the other, or the second is refused;
 * the results are right either way. */
static void attack_resubmit_pending(void)
{
	enum { GROUPS = 64 };
	struct attack_ctx a;
	struct buf out, counter;
	struct pipe pp;
	VkCommandBuffer cb;
	VkFence f2;
	VkFenceCreateInfo fi = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
	VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1 };
	VkResult r1, r2, w1 = VK_SUCCESS, w2 = VK_SUCCESS;
	uint32_t wrong = 0, count = 0;
	double ms, close_ms, t0;
	long bad;

	attack_begin(&a, "vk-resubmit-pending");
	SETUP(dev_open(&a.dv));
	SETUP(vkCreateFence(a.dv.d, &fi, NULL, &f2));
	SETUP(make_buf(&a.dv, GROUPS * 64 * 4, 1, &out));
	SETUP(make_buf(&a.dv, 256, 1, &counter));
	memset(counter.map, 0, 4);
	SETUP(make_pipe(&a.dv, spv_slow, sizeof(spv_slow), 2, 4, &pp));
	bind(&a.dv, &pp, (struct buf *[]){ &out, &counter }, NULL, 2);
	cb = record_slow(&a.dv, &pp, GROUPS, 0);
	si.pCommandBuffers = &cb;
	vkResetFences(a.dv.d, 1, &a.dv.fence);
	t0 = now_ms();
	r1 = vkQueueSubmit(a.dv.q, 1, &si, a.dv.fence);
	r2 = vkQueueSubmit(a.dv.q, 1, &si, f2);
	if (!r1)
		w1 = vkWaitForFences(a.dv.d, 1, &a.dv.fence, VK_TRUE, FENCE_TIMEOUT_NS);
	if (!r2)
		w2 = vkWaitForFences(a.dv.d, 1, &f2, VK_TRUE, FENCE_TIMEOUT_NS);
	ms = now_ms() - t0;
	if (!r1 && !w1) {
		wrong = slow_wrong(out.map, GROUPS * 64);
		count = *(uint32_t *)counter.map;
	}
	vkDestroyFence(a.dv.d, f2, NULL);
	bad = attack_end(&a, &close_ms);
	{
		int both = !r1 && !w1 && !r2 && !w2;
		int refused = !r1 && !w1 && (r2 || w2);

		check("vk-resubmit-pending", (both ? count == 2 * GROUPS * 64 : refused ? count == GROUPS * 64 : 0) && !wrong && bad == 0,
		      ",\"first\":\"%s\",\"second\":\"%s\",\"first_wait\":\"%s\",\"second_wait\":\"%s\",\"ms\":%.0f,\"count\":%u,"
		      "\"runs\":%u,\"wrong\":%u,\"canary_words_changed\":%ld",
		      res_name(r1), res_name(r2), res_name(w1), res_name(w2), ms, count, count / (GROUPS * 64), wrong, bad);
	}
	return;
setup_failed:
	attack_end(&a, &close_ms);
	check("vk-resubmit-pending", 0, ",\"detail\":\"setup: %s\"", setup_err);
}

/* One count.comp dispatch of x×y×z on a fresh device: the result, the counter, the time. */
static void grid_run(uint32_t x, uint32_t y, uint32_t z, uint32_t repeat, VkResult *r, uint32_t *count, double *ms, char *err)
{
	struct dev dv;
	struct buf counter;
	struct pipe pp;
	VkCommandBuffer cb;
	VkResult e;
	uint32_t i;

	*count = 0;
	*r = VK_ERROR_UNKNOWN;
	if ((e = dev_open(&dv)) || (e = make_buf(&dv, 256, 1, &counter)) || (e = make_pipe(&dv, spv_count, sizeof(spv_count), 1, 0, &pp))) {
		sprintf(err, "setup: %s", res_name(e));
		dev_close(&dv);
		return;
	}
	memset(counter.map, 0, 4);
	bind(&dv, &pp, (struct buf *[]){ &counter }, NULL, 1);
	cb = begin(&dv, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
	for (i = 0; i < repeat; i++)
		dispatch(cb, &pp, NULL, 0, x, y, z);
	vkEndCommandBuffer(cb);
	*r = submit_wait(&dv, cb, ms);
	*count = *(uint32_t *)counter.map;
	dev_close(&dv);
}

/* Huge dispatch counts: a grid at maxComputeWorkGroupCount[0] runs and counts every workgroup;
 * many dispatches in one command buffer all run; the whole maximum grid in all three dimensions
 * is stopped by the device (lost) or runs (its 32-bit count then wraps: right modulo 2^32 — lavapipe
 * folds a loop of uniform atomic adds, so it can finish quickly);
 * a grid over the maximum is refused (lost device). */
static void attack_huge_dispatch(void)
{
	struct attack_ctx a;
	const uint32_t *mx = lim.maxComputeWorkGroupCount;
	VkResult r_max, r_over, r_all, r_many;
	uint32_t c_max, c_over, c_all, c_many;
	double m_max, m_over, m_all, m_many, close_ms;
	char err[128] = "";
	const uint32_t many = 4096;
	long bad;

	attack_begin(&a, "vk-huge-dispatch");
	grid_run(mx[0], 1, 1, 1, &r_max, &c_max, &m_max, err);
	grid_run(1, 1, 1, many, &r_many, &c_many, &m_many, err);
	grid_run(mx[0], mx[1], mx[2], 1, &r_all, &c_all, &m_all, err);
	grid_run(mx[0] + 1u, 1, 1, 1, &r_over, &c_over, &m_over, err);
	bad = attack_end(&a, &close_ms);
	check("vk-huge-dispatch",
	      !r_max && c_max == mx[0] && r_over == VK_ERROR_DEVICE_LOST && c_over == 0 &&
		      (r_all == VK_ERROR_DEVICE_LOST || (r_all == VK_SUCCESS && c_all == (uint32_t)((uint64_t)mx[0] * mx[1] * mx[2]))) &&
		      !r_many && c_many == many && bad == 0,
	      ",\"max\":[%u,%u,%u],\"at_max\":{\"result\":\"%s\",\"count\":%u,\"ms\":%.0f},\"over_max\":{\"result\":\"%s\",\"count\":%u,\"ms\":%.0f},"
	      "\"max_xyz\":{\"result\":\"%s\",\"count\":%u,\"count_if_all_ran_mod_2_32\":%u,\"ms\":%.0f},\"many\":{\"dispatches\":%u,\"result\":\"%s\",\"count\":%u,\"ms\":%.0f},"
	      "\"canary_words_changed\":%ld%s%s%s",
	      mx[0], mx[1], mx[2], res_name(r_max), c_max, m_max, res_name(r_over), c_over, m_over, res_name(r_all), c_all,
	      (uint32_t)((uint64_t)mx[0] * mx[1] * mx[2]), m_all,
	      many, res_name(r_many), c_many, m_many, bad, *err ? ",\"detail\":\"" : "", err, *err ? "\"" : "");
}

/* A descriptor set whose buffer's memory was freed: recorded after the free, and recorded before
 * it and submitted after. The device faults on the stale address (lost) or the access stays in
 * this application's memory; the canaries hold either way. */
static void attack_freed_descriptor(void)
{
	struct attack_ctx a, b;
	struct buf victim, victim2;
	struct pipe pp, pp2;
	VkCommandBuffer cb;
	VkResult r1, r2;
	double ms1, ms2, close_ms;
	long bad;

	attack_begin(&a, "vk-freed-descriptor");
	memset(&b, 0, sizeof(b));
	SETUP(dev_open(&a.dv));
	SETUP(make_buf(&a.dv, 1 << 20, 0, &victim));
	SETUP(make_pipe(&a.dv, spv_count, sizeof(spv_count), 1, 0, &pp));
	bind(&a.dv, &pp, (struct buf *[]){ &victim }, NULL, 1);
	vkFreeMemory(a.dv.d, victim.m, NULL); /* the VkBuffer stays, bound to memory that is gone */
	cb = begin(&a.dv, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
	dispatch(cb, &pp, NULL, 0, 64, 1, 1);
	vkEndCommandBuffer(cb);
	r1 = submit_wait(&a.dv, cb, &ms1);
	/* recorded while the memory existed, submitted after it went (on a second device: the first
	 * may be lost) */
	SETUP(dev_open(&b.dv));
	SETUP(make_buf(&b.dv, 1 << 20, 1, &victim2));
	SETUP(make_pipe(&b.dv, spv_count, sizeof(spv_count), 1, 0, &pp2));
	bind(&b.dv, &pp2, (struct buf *[]){ &victim2 }, NULL, 1);
	cb = begin(&b.dv, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
	dispatch(cb, &pp2, NULL, 0, 64, 1, 1);
	vkEndCommandBuffer(cb);
	vkFreeMemory(b.dv.d, victim2.m, NULL);
	r2 = submit_wait(&b.dv, cb, &ms2);
	dev_close(&b.dv);
	bad = attack_end(&a, &close_ms);
	check("vk-freed-descriptor",
	      (r1 == VK_ERROR_DEVICE_LOST || r1 == VK_SUCCESS) && (r2 == VK_ERROR_DEVICE_LOST || r2 == VK_SUCCESS) && bad == 0,
	      ",\"recorded_after_free\":{\"memory\":\"vram\",\"result\":\"%s\",\"ms\":%.0f},"
	      "\"submitted_after_free\":{\"memory\":\"host\",\"result\":\"%s\",\"ms\":%.0f},\"canary_words_changed\":%ld",
	      res_name(r1), ms1, res_name(r2), ms2, bad);
	return;
setup_failed:
	dev_close(&b.dv);
	attack_end(&a, &close_ms);
	check("vk-freed-descriptor", 0, ",\"detail\":\"setup: %s\"", setup_err);
}

/* slow.comp on dv into fresh buffers: 0 when every word and the count are right */
static int clean_run(struct dev *dv, VkResult *r)
{
	enum { GROUPS = 16 };
	struct buf out, counter;
	struct pipe pp;
	VkCommandBuffer cb;
	int wrong;

	if ((*r = make_buf(dv, GROUPS * 64 * 4, 1, &out)) || (*r = make_buf(dv, 256, 1, &counter)) ||
	    (*r = make_pipe(dv, spv_slow, sizeof(spv_slow), 2, 4, &pp)))
		return -1;
	memset(counter.map, 0, 4);
	bind(dv, &pp, (struct buf *[]){ &out, &counter }, NULL, 2);
	cb = record_slow(dv, &pp, GROUPS, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
	if ((*r = submit_wait(dv, cb, NULL)))
		return -1;
	wrong = (int)slow_wrong(out.map, GROUPS * 64) + (*(uint32_t *)counter.map != GROUPS * 64);
	vkFreeCommandBuffers(dv->d, dv->pool, 1, &cb);
	vkDestroyPipeline(dv->d, pp.p, NULL);
	vkDestroyDescriptorPool(dv->d, pp.dpool, NULL);
	vkDestroyPipelineLayout(dv->d, pp.layout, NULL);
	vkDestroyDescriptorSetLayout(dv->d, pp.dsl, NULL);
	free_buf(dv, &out);
	free_buf(dv, &counter);
	return wrong;
}

/* The child of the kill attack: its own device, submitting without waiting, until killed. */
static int child_submit(void)
{
	struct dev dv;
	struct buf out, counter;
	struct pipe pp;
	VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1 };
	VkCommandBuffer cb;
	unsigned long n;

	if (open_instance() || dev_open(&dv) || make_buf(&dv, 64 * 64 * 4, 0, &out) || make_buf(&dv, 256, 0, &counter) ||
	    make_pipe(&dv, spv_slow, sizeof(spv_slow), 2, 4, &pp))
		return 1;
	bind(&dv, &pp, (struct buf *[]){ &out, &counter }, NULL, 2);
	cb = record_slow(&dv, &pp, 64, VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT);
	si.pCommandBuffers = &cb;
	for (n = 0;; n++) {
		if (vkQueueSubmit(dv.q, 1, &si, VK_NULL_HANDLE))
			return 1;
		if (n == 0) {
			printf("submitting\n");
			fflush(stdout);
		}
	}
}

/* A process killed mid-submission: a child (this program, re-executed) submits on its own device
 * without pause and is SIGKILLed; this process's device, opened before, computes right after. */
static void attack_killed(void)
{
	struct attack_ctx a;
	int fds[2], status = 0, wrong_before, wrong_after = -1;
	pid_t pid;
	char line[64] = "";
	VkResult rb, ra = VK_ERROR_UNKNOWN;
	double reap_ms = 0, close_ms, t;
	long bad;
	ssize_t got;

	attack_begin(&a, "vk-killed-mid-submit");
	SETUP(dev_open(&a.dv));
	wrong_before = clean_run(&a.dv, &rb);
	if (pipe(fds))
		goto setup_failed;
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		execl("/proc/self/exe", "vk-hostile", "child-submit", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	got = read(fds[0], line, sizeof(line) - 1); /* "submitting" once it has submitted */
	usleep(300 * 1000);
	t = now_ms();
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	reap_ms = now_ms() - t;
	close(fds[0]);
	wrong_after = clean_run(&a.dv, &ra);
	bad = attack_end(&a, &close_ms);
	check("vk-killed-mid-submit",
	      got > 0 && !strncmp(line, "submitting", 10) && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && !wrong_before &&
		      !rb && !wrong_after && !ra && bad == 0,
	      ",\"child\":\"%s\",\"killed\":%s,\"reap_ms\":%.0f,\"parent_before\":\"%s\",\"parent_after\":\"%s\",\"parent_wrong\":%d,"
	      "\"canary_words_changed\":%ld",
	      got > 0 && !strncmp(line, "submitting", 10) ? "submitting" : "never submitted",
	      WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? "true" : "false", reap_ms, res_name(rb), res_name(ra),
	      wrong_after, bad);
	return;
setup_failed:
	attack_end(&a, &close_ms);
	check("vk-killed-mid-submit", 0, ",\"detail\":\"setup: %s\"", setup_err);
}

/* After the attacks: a fresh device in this process, and a fresh process, compute right. */
static void after_attacks(void)
{
	struct attack_ctx a;
	VkResult r;
	int wrong, status = 0;
	double close_ms;
	long bad;
	pid_t pid;

	attack_begin(&a, "vk-clean-after");
	r = dev_open(&a.dv);
	wrong = r ? -1 : clean_run(&a.dv, &r);
	bad = attack_end(&a, &close_ms);
	check("vk-clean-after", !r && !wrong && bad == 0 && wit_ok,
	      ",\"result\":\"%s\",\"wrong\":%d,\"canary_words_changed\":%ld,\"canaries\":%d", res_name(r), wrong, bad, wit_n);
	fflush(stdout);
	if (one_process)
		return;
	pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", "vk-hostile", "clean", (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		failures++; /* its own record says why */
}

static int clean_process(void)
{
	struct dev dv;
	VkResult r = VK_ERROR_INITIALIZATION_FAILED;
	int wrong = -1;

	if (!open_instance() && !(r = dev_open(&dv))) {
		wrong = clean_run(&dv, &r);
		dev_close(&dv);
	}
	check("vk-clean-new-process", !r && !wrong, ",\"result\":\"%s\",\"wrong\":%d", res_name(r), wrong);
	return failures;
}

static const struct {
	const char *name;
	void (*fn)(void);
} attacks[] = {
	{ "endless", attack_endless },
	{ "oob-indices", attack_oob },
	{ "free-while-running", attack_free_while_running },
	{ "resubmit-pending", attack_resubmit_pending },
	{ "huge-dispatch", attack_huge_dispatch },
	{ "freed-descriptor", attack_freed_descriptor },
	{ "killed-mid-submit", attack_killed },
};

static int selected(const char *only, const char *name)
{
	size_t n = strlen(name);
	const char *p;

	if (!only)
		return 1;
	for (p = only; (p = strstr(p, name)); p += n)
		if ((p == only || p[-1] == ':') && (p[n] == 0 || p[n] == ':'))
			return 1;
	return 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: vk-hostile [--only a:b:c] [--iters N] [--one-process] | clean\n");
	return 2;
}

int main(int argc, char **argv)
{
	const char *only = NULL;
	unsigned int i;
	int k;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGALRM, on_alarm);
	signal(SIGPIPE, SIG_IGN);
	if (argc == 2 && !strcmp(argv[1], "child-submit"))
		return child_submit();
	if (argc == 2 && !strcmp(argv[1], "clean")) {
		alarm(ATTACK_ALARM_S);
		current = "vk-clean-new-process";
		return clean_process();
	}
	for (k = 1; k < argc; k++) {
		if (!strcmp(argv[k], "--only") && k + 1 < argc) {
			only = argv[++k];
		} else if (!strcmp(argv[k], "--one-process")) {
			one_process = 1;
		} else if (!strcmp(argv[k], "--iters") && k + 1 < argc) {
			char *end;
			unsigned long v = strtoul(argv[++k], &end, 10);

			if (*end || !v || v > 60000)
				return usage();
			slow_iters = (uint32_t)v;
		} else {
			return usage();
		}
	}
	srand(7);
	if (open_instance() || dev_open(&wit) || make_buf(&wit, WIT_BYTES, 1, &wit_stage)) {
		check("vk-device", 0, ",\"detail\":\"no Vulkan device with host-visible memory\"");
		return 1;
	}
	{
		VkPhysicalDeviceProperties p;

		vkGetPhysicalDeviceProperties(pd, &p);
		check("vk-device", 1, ",\"device\":\"%s\",\"maxComputeWorkGroupCount\":[%u,%u,%u],\"iters\":%u", p.deviceName,
		      lim.maxComputeWorkGroupCount[0], lim.maxComputeWorkGroupCount[1], lim.maxComputeWorkGroupCount[2], slow_iters);
	}
	phase("attacks-start");
	for (i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++)
		if (selected(only, attacks[i].name) && !(one_process && attacks[i].fn == attack_killed))
			attacks[i].fn();
	phase("attacks-done");
	after_attacks();
	dev_close(&wit);
	vkDestroyInstance(inst, NULL);
	return failures;
}
