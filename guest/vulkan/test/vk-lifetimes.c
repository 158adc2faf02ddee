// SPDX-License-Identifier: MIT
/*
 * vk-lifetimes: memory, modules and devices come and go while the device is busy or after a
 * device was lost, as in llama.cpp (it creates pipelines and buffers while its graph runs) and in
 * any application that opens a new VkDevice after losing one. The busy checks start every round
 * with a long dispatch and do the rest without waiting for it; then they wait and check every
 * word on the CPU. Checks (one `VUGPU-CHECK {"check":…,"ok":…}` line each; exit 0 when all pass):
 *   load-busy   K new modules and pipelines (each a program load: a new VRAM buffer, cleared and
 *               filled on the device behind the running work), their first dispatches in one
 *               command buffer (each a new program for the device to compile: distinct SALT),
 *               one more module loaded while that batch runs and its dispatch submitted too
 *   free-busy   device memory allocated, a submission that does not use it (the device clears
 *               new memory ahead of the next submission's work), and the memory freed — legal
 *               Vulkan, since no command uses it — while all of that still waits behind the
 *               long dispatch
 *               (the busy checks free their pipelines and memory at the end of each round: the
 *               next round's reuse their addresses)
 *   after-loss  a VkDevice lost to a launch the device refuses (a grid over the maximum), its loss
 *               seen through vkGetFenceStatus alone, the device destroyed; then a new VkDevice of
 *               the same process (on the same channel) computes right — every round
 * Usage: vk-lifetimes [--rounds N] [--long-groups N] <dir with lcg.spv>
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#define K 8          /* modules loaded behind the long dispatch per round */
#define GROUPS 4     /* workgroups of each small dispatch */
#define SMALL_ITERS 64

struct buf {
	VkBuffer b;
	VkDeviceMemory m;
	uint32_t *map;
};

struct pipe {
	VkPipeline p;
	VkDescriptorPool pool;
	VkDescriptorSet set;
};

static VkPhysicalDevice phys;
static VkDevice dev;
static VkQueue queue;
static VkCommandPool cpool;
static VkDescriptorSetLayout dsl;
static VkPipelineLayout layout;
static uint32_t host_type = UINT32_MAX, vram_type = UINT32_MAX;
static uint32_t *spv;
static size_t spv_bytes;
static uint32_t long_groups = 1024;

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int read_spv(const char *dir)
{
	char path[4096];
	FILE *f;
	long n;

	snprintf(path, sizeof(path), "%s/lcg.spv", dir);
	f = fopen(path, "rb");
	if (!f || fseek(f, 0, SEEK_END) || (n = ftell(f)) <= 0) {
		fprintf(stderr, "vk-lifetimes: cannot read %s\n", path);
		return -1;
	}
	rewind(f);
	spv = malloc((size_t)n);
	if (!spv || fread(spv, 1, (size_t)n, f) != (size_t)n) {
		fclose(f);
		return -1;
	}
	fclose(f);
	spv_bytes = (size_t)n;
	return 0;
}

static VkResult open_device(VkInstance inst)
{
	VkPhysicalDevice pds[8], pd = VK_NULL_HANDLE;
	uint32_t n = 8, i;
	VkPhysicalDeviceMemoryProperties mp;
	float prio = 1.0f;
	VkDeviceQueueCreateInfo qi = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueCount = 1,
				       .pQueuePriorities = &prio };
	VkDeviceCreateInfo di = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1, .pQueueCreateInfos = &qi };
	VkCommandPoolCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO };
	VkDescriptorSetLayoutBinding b = { 0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL };
	VkDescriptorSetLayoutCreateInfo li = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = 1,
					       .pBindings = &b };
	VkPushConstantRange pr = { VK_SHADER_STAGE_COMPUTE_BIT, 0, 4 };
	VkPipelineLayoutCreateInfo pli = { .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
					   .pSetLayouts = &dsl, .pushConstantRangeCount = 1, .pPushConstantRanges = &pr };
	VkResult r;

	if (vkEnumeratePhysicalDevices(inst, &n, pds) < 0)
		return VK_ERROR_INITIALIZATION_FAILED;
	for (i = 0; i < n && !pd; i++) {
		VkPhysicalDeviceDriverProperties drv = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES };
		VkPhysicalDeviceProperties2 p2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &drv };

		vkGetPhysicalDeviceProperties2(pds[i], &p2);
		if (!strcmp(drv.driverName, "vugpu"))
			pd = pds[i];
	}
	if (!pd)
		return VK_ERROR_INITIALIZATION_FAILED;
	phys = pd;
	vkGetPhysicalDeviceMemoryProperties(pd, &mp);
	for (i = 0; i < mp.memoryTypeCount; i++) {
		VkMemoryPropertyFlags fl = mp.memoryTypes[i].propertyFlags;

		if ((fl & (VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)) ==
			    (VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) &&
		    host_type == UINT32_MAX)
			host_type = i;
		if (fl == VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT && vram_type == UINT32_MAX)
			vram_type = i; /* device memory only: the device clears it */
	}
	if (host_type == UINT32_MAX || vram_type == UINT32_MAX)
		return VK_ERROR_INITIALIZATION_FAILED;
	if ((r = vkCreateDevice(pd, &di, NULL, &dev)))
		return r;
	vkGetDeviceQueue(dev, 0, 0, &queue);
	if ((r = vkCreateCommandPool(dev, &ci, NULL, &cpool)) || (r = vkCreateDescriptorSetLayout(dev, &li, NULL, &dsl)))
		return r;
	return vkCreatePipelineLayout(dev, &pli, NULL, &layout);
}

/* A storage buffer in host-visible memory (mapped, zeroed), or in device memory (vram). */
static VkResult make_buf_in(VkDeviceSize size, int vram, struct buf *out)
{
	VkBufferCreateInfo bi = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
				  .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT };
	VkMemoryRequirements req;
	VkMemoryAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
				    .memoryTypeIndex = vram ? vram_type : host_type };
	VkResult r;

	memset(out, 0, sizeof(*out));
	if ((r = vkCreateBuffer(dev, &bi, NULL, &out->b)))
		return r;
	vkGetBufferMemoryRequirements(dev, out->b, &req);
	ai.allocationSize = req.size;
	if ((r = vkAllocateMemory(dev, &ai, NULL, &out->m)) || (r = vkBindBufferMemory(dev, out->b, out->m, 0)))
		return r;
	if (vram)
		return VK_SUCCESS;
	if ((r = vkMapMemory(dev, out->m, 0, VK_WHOLE_SIZE, 0, (void **)&out->map)))
		return r;
	memset(out->map, 0, size);
	return VK_SUCCESS;
}

static VkResult make_buf(VkDeviceSize size, struct buf *out)
{
	return make_buf_in(size, 0, out);
}

static void free_buf(struct buf *b)
{
	vkDestroyBuffer(dev, b->b, NULL);
	vkFreeMemory(dev, b->m, NULL);
}

/* A new module (a program load on this device) and a pipeline of it for salt, bound to out. */
static VkResult make_pipe(uint32_t salt, struct buf *out, struct pipe *pp)
{
	VkShaderModuleCreateInfo mi = { .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = spv_bytes, .pCode = spv };
	VkSpecializationMapEntry me = { 0, 0, 4 };
	VkSpecializationInfo si = { 1, &me, 4, &salt };
	VkComputePipelineCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, .layout = layout };
	VkDescriptorPoolSize ps = { VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1 };
	VkDescriptorPoolCreateInfo dpi = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = 1,
					   .poolSizeCount = 1, .pPoolSizes = &ps };
	VkDescriptorSetAllocateInfo dai = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, .descriptorSetCount = 1,
					    .pSetLayouts = &dsl };
	VkDescriptorBufferInfo bi = { out->b, 0, VK_WHOLE_SIZE };
	VkWriteDescriptorSet w = { .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstBinding = 0, .descriptorCount = 1,
				   .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &bi };
	VkShaderModule mod;
	VkResult r;

	memset(pp, 0, sizeof(*pp));
	if ((r = vkCreateShaderModule(dev, &mi, NULL, &mod)))
		return r;
	ci.stage = (VkPipelineShaderStageCreateInfo){ .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
						      .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = mod, .pName = "main",
						      .pSpecializationInfo = &si };
	r = vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &ci, NULL, &pp->p);
	vkDestroyShaderModule(dev, mod, NULL);
	if (r || (r = vkCreateDescriptorPool(dev, &dpi, NULL, &pp->pool)))
		return r;
	dai.descriptorPool = pp->pool;
	if ((r = vkAllocateDescriptorSets(dev, &dai, &pp->set)))
		return r;
	w.dstSet = pp->set;
	vkUpdateDescriptorSets(dev, 1, &w, 0, NULL);
	return VK_SUCCESS;
}

static void free_pipe(struct pipe *pp)
{
	vkDestroyPipeline(dev, pp->p, NULL);
	vkDestroyDescriptorPool(dev, pp->pool, NULL);
}

static void record(VkCommandBuffer cb, struct pipe *pp, uint32_t iters, uint32_t groups)
{
	vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pp->p);
	vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &pp->set, 0, NULL);
	vkCmdPushConstants(cb, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, &iters);
	vkCmdDispatch(cb, groups, 1, 1);
}

/* Record the n pipelines' dispatches into one command buffer and submit it with fence f. */
static VkResult submit(struct pipe *pp, uint32_t n, uint32_t iters, uint32_t groups, VkCommandBuffer *cb, VkFence *f)
{
	VkCommandBufferAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = cpool,
					   .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
	VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
					.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
	VkFenceCreateInfo fi = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
	VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = cb };
	VkResult r;
	uint32_t i;

	if ((r = vkAllocateCommandBuffers(dev, &ai, cb)) || (r = vkCreateFence(dev, &fi, NULL, f)))
		return r;
	vkBeginCommandBuffer(*cb, &bi);
	for (i = 0; i < n; i++)
		record(*cb, &pp[i], iters, groups);
	if ((r = vkEndCommandBuffer(*cb)))
		return r;
	return vkQueueSubmit(queue, 1, &si, *f);
}

static uint32_t lcg(uint32_t x, uint32_t iters)
{
	while (iters--)
		x = x * 1664525u + 1013904223u;
	return x;
}

/* Words of out that are not what the dispatch for salt should have written. */
static uint32_t wrong_words(const struct buf *out, uint32_t salt, uint32_t iters, uint32_t n)
{
	uint32_t i, bad = 0;

	for (i = 0; i < n; i++)
		bad += out->map[i] != lcg(i ^ salt, iters);
	return bad;
}

static const char *res_name(VkResult r)
{
	static char s[32];

	switch (r) {
	case VK_SUCCESS: return "VK_SUCCESS";
	case VK_TIMEOUT: return "VK_TIMEOUT";
	case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
	case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
	case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
	default:
		snprintf(s, sizeof(s), "VkResult %d", r);
		return s;
	}
}

static void destroy_submit(VkCommandBuffer *cb, VkFence *f, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++) {
		vkDestroyFence(dev, f[i], NULL);
		vkFreeCommandBuffers(dev, cpool, 1, &cb[i]);
	}
}

struct tally {
	unsigned long done, wrong, busy;
	double ms;
	VkResult r;
};

static const uint32_t long_iters = 20000;

/* The long dispatch everything else of a round waits behind (its own pipeline, loaded first). */
static VkResult start_long(uint32_t salt, struct buf *out, struct pipe *pp, VkCommandBuffer *cb, VkFence *f)
{
	VkResult r;

	if ((r = make_buf(long_groups * 64 * 4, out)) || (r = make_pipe(salt, out, pp)) || (r = vkQueueWaitIdle(queue)))
		return r;
	return submit(pp, 1, long_iters, long_groups, cb, f);
}

static void end_long(struct buf *out, struct pipe *pp, uint32_t salt, struct tally *t)
{
	t->wrong += wrong_words(out, salt, long_iters, long_groups * 64);
	free_pipe(pp);
	free_buf(out);
}

/* load-busy: modules loaded and first launched behind the long dispatch. */
static VkResult round_load(uint32_t round, struct tally *t)
{
	struct buf long_out, out[K + 1];
	struct pipe long_pipe, pp[K + 1];
	VkCommandBuffer cb[3];
	VkFence f[3];
	uint32_t salt = round * (K + 2) + 1, i;
	double t0 = now_ms();
	VkResult r;

	if ((r = start_long(salt + K + 1, &long_out, &long_pipe, &cb[0], &f[0])))
		return r;
	/* the loads start behind the long dispatch only if it is still running now (each load
	 * then waits for its own copy, so the device has caught up once it returns) */
	t->busy += vkGetFenceStatus(dev, f[0]) == VK_NOT_READY;
	for (i = 0; i < K && !r; i++)
		if (!(r = make_buf(GROUPS * 64 * 4, &out[i])))
			r = make_pipe(salt + i, &out[i], &pp[i]);
	/* their first launches (the device compiles each), then one more load behind them */
	if (r || (r = submit(pp, K, SMALL_ITERS, GROUPS, &cb[1], &f[1])) || (r = make_buf(GROUPS * 64 * 4, &out[K])) ||
	    (r = make_pipe(salt + K, &out[K], &pp[K])) || (r = submit(&pp[K], 1, SMALL_ITERS, GROUPS, &cb[2], &f[2])))
		return r;
	if ((r = vkWaitForFences(dev, 3, f, VK_TRUE, 120ull * 1000000000ull)))
		return r;
	t->ms += now_ms() - t0;
	for (i = 0; i <= K; i++)
		t->wrong += wrong_words(&out[i], salt + i, SMALL_ITERS, GROUPS * 64);
	destroy_submit(cb, f, 3);
	for (i = 0; i <= K; i++) {
		free_pipe(&pp[i]);
		free_buf(&out[i]);
	}
	end_long(&long_out, &long_pipe, salt + K + 1, t);
	t->done++;
	return VK_SUCCESS;
}

/* free-busy: device memory allocated, a submission that does not use it, the memory freed. */
static VkResult round_free(uint32_t round, struct pipe *small, struct buf *small_out, struct tally *t)
{
	static const VkDeviceSize sizes[4] = { 4096, 65536, 200 * 1024, 2u << 20 };
	struct buf long_out, mem[4];
	struct pipe long_pipe;
	VkCommandBuffer cb[2];
	VkFence f[2];
	uint32_t salt = 0x40000000u + round, i;
	double t0 = now_ms();
	VkResult r;

	if ((r = start_long(salt, &long_out, &long_pipe, &cb[0], &f[0])))
		return r;
	for (i = 0; i < 4 && !r; i++)
		r = make_buf_in(sizes[i], 1, &mem[i]);
	if (r || (r = submit(small, 1, SMALL_ITERS, GROUPS, &cb[1], &f[1])))
		return r;
	t->busy += vkGetFenceStatus(dev, f[0]) == VK_NOT_READY;
	for (i = 0; i < 4; i++)
		free_buf(&mem[i]);
	if ((r = vkWaitForFences(dev, 2, f, VK_TRUE, 120ull * 1000000000ull)))
		return r;
	t->ms += now_ms() - t0;
	t->wrong += wrong_words(small_out, 7, SMALL_ITERS, GROUPS * 64);
	destroy_submit(cb, f, 2);
	end_long(&long_out, &long_pipe, salt, t);
	t->done++;
	return VK_SUCCESS;
}

static void close_device(void)
{
	vkDestroyPipelineLayout(dev, layout, NULL);
	vkDestroyDescriptorSetLayout(dev, dsl, NULL);
	vkDestroyCommandPool(dev, cpool, NULL);
	vkDestroyDevice(dev, NULL); /* releases what a failed round left */
}

/*
 * after-loss: lose the device to a launch it refuses, learn it by polling the fence only (no
 * wait), destroy it, and compute on a new one. Open on entry, open (the new one) on return.
 */
static VkResult round_after_loss(VkInstance inst, uint32_t round, struct tally *t)
{
	VkPhysicalDeviceProperties props;
	struct buf out;
	struct pipe pp;
	VkCommandBuffer cb;
	VkFence f;
	uint32_t salt = 0x50000000u + round;
	double t0 = now_ms();
	VkResult r;

	vkGetPhysicalDeviceProperties(phys, &props);
	if ((r = make_buf(GROUPS * 64 * 4, &out)) || (r = make_pipe(salt, &out, &pp)) ||
	    (r = submit(&pp, 1, SMALL_ITERS, props.limits.maxComputeWorkGroupCount[0] + 1u, &cb, &f)))
		return r;
	while ((r = vkGetFenceStatus(dev, f)) == VK_NOT_READY && now_ms() - t0 < 60000)
		usleep(1000);
	if (r != VK_ERROR_DEVICE_LOST) {
		fprintf(stderr, "vk-lifetimes: a grid over the maximum gave %s, not a lost device\n", res_name(r));
		return r ? r : VK_ERROR_UNKNOWN;
	}
	destroy_submit(&cb, &f, 1);
	free_pipe(&pp);
	free_buf(&out);
	close_device();
	if ((r = open_device(inst)) || (r = make_buf(GROUPS * 64 * 4, &out)) || (r = make_pipe(salt, &out, &pp)) ||
	    (r = submit(&pp, 1, SMALL_ITERS, GROUPS, &cb, &f)) || (r = vkWaitForFences(dev, 1, &f, VK_TRUE, 120ull * 1000000000ull)))
		return r;
	t->ms += now_ms() - t0;
	t->wrong += wrong_words(&out, salt, SMALL_ITERS, GROUPS * 64);
	destroy_submit(&cb, &f, 1);
	free_pipe(&pp);
	free_buf(&out);
	t->done++;
	return VK_SUCCESS;
}

static int report(const char *name, const struct tally *t, unsigned long rounds)
{
	int ok = !t->r && !t->wrong && t->done == rounds;

	printf("VUGPU-CHECK {\"check\":\"%s\",\"ok\":%s,\"rounds\":%lu,\"of\":%lu,\"result\":\"%s\",\"wrong_words\":%lu,"
	       "\"while_busy\":%lu,\"round_ms\":%.0f}\n",
	       name, ok ? "true" : "false", t->done, rounds, res_name(t->r), t->wrong, t->busy,
	       t->done ? t->ms / (double)t->done : 0.0);
	return ok;
}

int main(int argc, char **argv)
{
	VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_2 };
	VkInstanceCreateInfo ii = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
	unsigned long rounds = 20, n;
	const char *dir = NULL;
	struct tally load = { 0 }, fr = { 0 }, lost = { 0 };
	struct pipe small;
	struct buf small_out;
	VkInstance inst;
	VkResult r;
	int k, ok;

	for (k = 1; k < argc; k++) {
		if (!strcmp(argv[k], "--rounds") && k + 1 < argc)
			rounds = strtoul(argv[++k], NULL, 10);
		else if (!strcmp(argv[k], "--long-groups") && k + 1 < argc)
			long_groups = (uint32_t)strtoul(argv[++k], NULL, 10);
		else if (argv[k][0] != '-' && !dir)
			dir = argv[k];
		else
			dir = NULL, k = argc;
	}
	if (!dir || !rounds || rounds > 100000 || !long_groups || long_groups > 65535) {
		fprintf(stderr, "usage: vk-lifetimes [--rounds N] [--long-groups N] <dir with lcg.spv>\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (read_spv(dir))
		return 2;
	if ((r = vkCreateInstance(&ii, NULL, &inst)) || (r = open_device(inst))) {
		printf("VUGPU-CHECK {\"check\":\"device\",\"ok\":false,\"detail\":\"no vugpu device: %s\"}\n", res_name(r));
		return 1;
	}
	for (n = 0; n < rounds && !load.r; n++)
		load.r = round_load((uint32_t)n, &load);
	ok = report("load-busy", &load, rounds);
	/* a device lost above would fail every round here too: the next check gets a new device */
	if (load.r) {
		close_device();
		if ((r = open_device(inst))) {
			printf("VUGPU-CHECK {\"check\":\"device\",\"ok\":false,\"detail\":\"second device: %s\"}\n", res_name(r));
			return 1;
		}
	}
	fr.r = make_buf(GROUPS * 64 * 4, &small_out);
	if (!fr.r)
		fr.r = make_pipe(7, &small_out, &small);
	for (n = 0; n < rounds && !fr.r; n++)
		fr.r = round_free((uint32_t)n, &small, &small_out, &fr);
	ok &= report("free-busy", &fr, rounds);
	if (!fr.r) {
		free_pipe(&small);
		free_buf(&small_out);
	} else {
		close_device();
		if ((r = open_device(inst))) {
			printf("VUGPU-CHECK {\"check\":\"device\",\"ok\":false,\"detail\":\"third device: %s\"}\n", res_name(r));
			return 1;
		}
	}
	for (n = 0; n < rounds && !lost.r; n++)
		lost.r = round_after_loss(inst, (uint32_t)n, &lost);
	ok &= report("after-loss", &lost, rounds);
	close_device();
	vkDestroyInstance(inst, NULL);
	return ok ? 0 : 1;
}
