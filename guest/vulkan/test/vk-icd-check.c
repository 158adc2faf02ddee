// SPDX-License-Identifier: MIT
/*
 * vk-icd-check: the vugpu Vulkan driver through the Khronos loader, as an application sees it.
 * Checks (one `VUGPU-CHECK {"check":…,"ok":…}` line each; exit 0 when all pass):
 *   device     the vugpu device, Vulkan 1.2, 16-bit storage, timeline semaphores
 *   vadd       copies in, fill, a vector add with specialization + push constants, barriers,
 *              vkCmdUpdateBuffer, copy out — one command buffer, one submit, timeline signal
 *   narrow     8-/16-bit storage, dispatch indirect, a wait on the previous submit's timeline
 *              value, vkCmdSetEvent, a wait on a host-set event, timestamps, fence
 *   subgroup   subgroupAdd (when the device has subgroup arithmetic)
 *   host-sem   vkSignalSemaphore / vkGetSemaphoreCounterValue / vkWaitSemaphores
 *   refused    a module with a capability the device refuses fails at pipeline creation
 *   lost       a module the device refuses at launch loses that VkDevice only: a second
 *              VkDevice of the same process still computes correctly
 *   validation (--validate: with VK_LAYER_KHRONOS_validation) no error message beyond the
 *              deliberate ones (the refused module, the over-limit shared array)
 * Usage: vk-icd-check [--validate] <dir with vadd.spv narrow.spv subgroup.spv bigshared.spv>
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

static int failures, validation_errors;

static void check(const char *name, int ok, const char *detail)
{
	printf("VUGPU-CHECK {\"check\":\"%s\",\"ok\":%s,\"detail\":\"%s\"}\n", name, ok ? "true" : "false", detail);
	fflush(stdout);
	if (!ok)
		failures++;
}

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
						  VkDebugUtilsMessageTypeFlagsEXT type,
						  const VkDebugUtilsMessengerCallbackDataEXT *data, void *user)
{
	(void)type, (void)user;
	if (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
		validation_errors++;
		fprintf(stderr, "validation error: %s\n", data->pMessage);
	} else if (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
		fprintf(stderr, "validation warning: %s\n", data->pMessage);
	}
	return VK_FALSE;
}

static uint32_t *read_spv(const char *dir, const char *name, size_t *bytes)
{
	char path[4096];
	FILE *f;
	long n;
	uint32_t *w;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "vk-icd-check: cannot open %s\n", path);
		exit(2);
	}
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	w = malloc((size_t)n);
	if (!w || fread(w, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "vk-icd-check: cannot read %s\n", path);
		exit(2);
	}
	fclose(f);
	*bytes = (size_t)n;
	return w;
}

struct dev {
	VkPhysicalDevice pd;
	VkDevice d;
	VkQueue q;
	VkCommandPool pool;
	uint32_t vram_type, host_type;
	VkPhysicalDeviceVulkan11Properties p11;
	VkPhysicalDeviceVulkan12Features f12;
	VkPhysicalDeviceVulkan11Features f11;
};

struct buf {
	VkBuffer b;
	VkDeviceMemory m;
	void *map;
	VkDeviceSize size;
};

static VkResult make_buf(struct dev *dv, VkDeviceSize size, int host, struct buf *out)
{
	VkBufferCreateInfo bi = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
				  .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
					   VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT };
	VkMemoryRequirements req;
	VkMemoryAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO };
	VkResult r;

	memset(out, 0, sizeof(*out));
	out->size = size;
	r = vkCreateBuffer(dv->d, &bi, NULL, &out->b);
	if (r)
		return r;
	vkGetBufferMemoryRequirements(dv->d, out->b, &req);
	ai.allocationSize = req.size;
	ai.memoryTypeIndex = host ? dv->host_type : dv->vram_type;
	if (!(req.memoryTypeBits & (1u << ai.memoryTypeIndex)))
		return VK_ERROR_UNKNOWN;
	r = vkAllocateMemory(dv->d, &ai, NULL, &out->m);
	if (r)
		return r;
	r = vkBindBufferMemory(dv->d, out->b, out->m, 0);
	if (!r && host)
		r = vkMapMemory(dv->d, out->m, 0, VK_WHOLE_SIZE, 0, &out->map);
	return r;
}

static void free_buf(struct dev *dv, struct buf *b)
{
	vkDestroyBuffer(dv->d, b->b, NULL);
	vkFreeMemory(dv->d, b->m, NULL);
}

static VkResult open_dev(VkInstance inst, struct dev *dv)
{
	VkPhysicalDevice pds[8];
	uint32_t n = 8, i;
	VkPhysicalDeviceMemoryProperties mp;
	float prio = 1.0f;
	VkDeviceQueueCreateInfo qi = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = 0,
				       .queueCount = 1, .pQueuePriorities = &prio };
	const char *exts[] = { VK_KHR_16BIT_STORAGE_EXTENSION_NAME, VK_KHR_8BIT_STORAGE_EXTENSION_NAME };
	VkPhysicalDeviceVulkan12Features f12 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES };
	VkPhysicalDeviceVulkan11Features f11 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &f12 };
	VkPhysicalDeviceFeatures2 f2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11 };
	VkDeviceCreateInfo di = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &f2, .queueCreateInfoCount = 1,
				  .pQueueCreateInfos = &qi, .enabledExtensionCount = 2, .ppEnabledExtensionNames = exts };
	VkCommandPoolCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
				       .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT };
	VkResult r;

	memset(dv, 0, sizeof(*dv));
	r = vkEnumeratePhysicalDevices(inst, &n, pds);
	if (r < 0 || !n)
		return VK_ERROR_INITIALIZATION_FAILED;
	for (i = 0; i < n; i++) {
		VkPhysicalDeviceDriverProperties drv = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES };
		VkPhysicalDeviceVulkan11Properties p11 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES,
							   .pNext = &drv };
		VkPhysicalDeviceProperties2 p2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &p11 };

		vkGetPhysicalDeviceProperties2(pds[i], &p2);
		if (!strcmp(drv.driverName, "vugpu")) {
			dv->pd = pds[i];
			dv->p11 = p11;
			dv->p11.pNext = NULL;
			break;
		}
	}
	if (!dv->pd)
		return VK_ERROR_INITIALIZATION_FAILED;
	/* enable everything reported, as ggml does */
	vkGetPhysicalDeviceFeatures2(dv->pd, &f2);
	dv->f11 = f11;
	dv->f12 = f12;
	vkGetPhysicalDeviceMemoryProperties(dv->pd, &mp);
	dv->vram_type = dv->host_type = UINT32_MAX;
	for (i = 0; i < mp.memoryTypeCount; i++) {
		VkMemoryPropertyFlags fl = mp.memoryTypes[i].propertyFlags;

		if ((fl & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && dv->vram_type == UINT32_MAX)
			dv->vram_type = i;
		if ((fl & (VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)) ==
			    (VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) &&
		    dv->host_type == UINT32_MAX)
			dv->host_type = i;
	}
	if (dv->vram_type == UINT32_MAX || dv->host_type == UINT32_MAX)
		return VK_ERROR_INITIALIZATION_FAILED;
	r = vkCreateDevice(dv->pd, &di, NULL, &dv->d);
	if (r)
		return r;
	vkGetDeviceQueue(dv->d, 0, 0, &dv->q);
	return vkCreateCommandPool(dv->d, &ci, NULL, &dv->pool);
}

struct pipe {
	VkShaderModule mod;
	VkDescriptorSetLayout dsl;
	VkPipelineLayout layout;
	VkPipeline p;
	VkDescriptorPool dpool;
	VkDescriptorSet set;
};

static VkResult make_pipe(struct dev *dv, const uint32_t *code, size_t bytes, uint32_t nbind, uint32_t push,
			  const VkSpecializationInfo *spec, struct pipe *pp)
{
	VkShaderModuleCreateInfo mi = { .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = bytes, .pCode = code };
	VkDescriptorSetLayoutBinding b[8];
	VkDescriptorSetLayoutCreateInfo li = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
					       .bindingCount = nbind, .pBindings = b };
	VkPushConstantRange pr = { VK_SHADER_STAGE_COMPUTE_BIT, 0, push };
	VkPipelineLayoutCreateInfo pli = { .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
					   .pSetLayouts = &pp->dsl, .pushConstantRangeCount = push ? 1 : 0,
					   .pPushConstantRanges = &pr };
	VkComputePipelineCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO };
	VkDescriptorPoolSize ps = { VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 8 };
	VkDescriptorPoolCreateInfo dpi = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = 1,
					   .poolSizeCount = 1, .pPoolSizes = &ps };
	VkDescriptorSetAllocateInfo dai = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, .descriptorSetCount = 1,
					    .pSetLayouts = &pp->dsl };
	uint32_t i;
	VkResult r;

	memset(pp, 0, sizeof(*pp));
	for (i = 0; i < nbind; i++)
		b[i] = (VkDescriptorSetLayoutBinding){ i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL };
	if ((r = vkCreateShaderModule(dv->d, &mi, NULL, &pp->mod)) || (r = vkCreateDescriptorSetLayout(dv->d, &li, NULL, &pp->dsl)) ||
	    (r = vkCreatePipelineLayout(dv->d, &pli, NULL, &pp->layout)))
		return r;
	ci.stage = (VkPipelineShaderStageCreateInfo){ .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
						      .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = pp->mod,
						      .pName = "main", .pSpecializationInfo = spec };
	ci.layout = pp->layout;
	r = vkCreateComputePipelines(dv->d, VK_NULL_HANDLE, 1, &ci, NULL, &pp->p);
	/* the module may go as soon as the pipeline exists */
	vkDestroyShaderModule(dv->d, pp->mod, NULL);
	pp->mod = VK_NULL_HANDLE;
	if (r)
		return r;
	dai.descriptorPool = VK_NULL_HANDLE;
	if ((r = vkCreateDescriptorPool(dv->d, &dpi, NULL, &pp->dpool)))
		return r;
	dai.descriptorPool = pp->dpool;
	return vkAllocateDescriptorSets(dv->d, &dai, &pp->set);
}

static void free_pipe(struct dev *dv, struct pipe *pp)
{
	vkDestroyPipeline(dv->d, pp->p, NULL);
	vkDestroyDescriptorPool(dv->d, pp->dpool, NULL);
	vkDestroyPipelineLayout(dv->d, pp->layout, NULL);
	vkDestroyDescriptorSetLayout(dv->d, pp->dsl, NULL);
}

static void bind_bufs(struct dev *dv, struct pipe *pp, struct buf **bufs, uint32_t n)
{
	VkDescriptorBufferInfo bi[8];
	VkWriteDescriptorSet w = { .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = pp->set, .dstBinding = 0,
				   .descriptorCount = n, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = bi };
	uint32_t i;

	for (i = 0; i < n; i++)
		bi[i] = (VkDescriptorBufferInfo){ bufs[i]->b, 0, VK_WHOLE_SIZE };
	vkUpdateDescriptorSets(dv->d, 1, &w, 0, NULL);
}

static void barrier(VkCommandBuffer cb)
{
	VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
			       .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
			       .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
						VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
						VK_ACCESS_INDIRECT_COMMAND_READ_BIT };

	vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
			     VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT |
				     VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT,
			     0, 1, &mb, 0, NULL, 0, NULL);
}

static VkCommandBuffer begin(struct dev *dv)
{
	VkCommandBufferAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = dv->pool,
					   .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
	VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
					.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
	VkCommandBuffer cb;

	if (vkAllocateCommandBuffers(dv->d, &ai, &cb))
		return VK_NULL_HANDLE;
	vkBeginCommandBuffer(cb, &bi);
	return cb;
}

/* a vector add through copies, fill and update, on dv; 0 when the result is exact */
static int run_vadd(struct dev *dv, const uint32_t *code, size_t bytes, VkSemaphore tl, uint64_t signal,
		    char *detail, size_t dlen)
{
	enum { N = 1000, PAD = 24 };
	struct buf a, b, c, stage, out;
	struct buf *bs[3] = { &a, &b, &c };
	struct pipe pp;
	uint32_t spec_data[2];
	float scale = 2.0f;
	VkSpecializationMapEntry me[2] = { { 0, 0, 4 }, { 1, 4, 4 } };
	VkSpecializationInfo si = { 2, me, 8, spec_data };
	struct { uint32_t n; float bias; } push = { N, 0.5f };
	VkCommandBuffer cb;
	VkBufferCopy cp;
	VkTimelineSemaphoreSubmitInfo tsi = { .sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
					      .signalSemaphoreValueCount = 1, .pSignalSemaphoreValues = &signal };
	VkSubmitInfo sub = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .pNext = &tsi, .commandBufferCount = 1,
			     .signalSemaphoreCount = 1, .pSignalSemaphores = &tl };
	VkSemaphoreWaitInfo wi = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, .semaphoreCount = 1, .pSemaphores = &tl,
				   .pValues = &signal };
	uint32_t upd[4] = { 0x11111111, 0x22222222, 0x33333333, 0x44444444 };
	float *fa, *fb, *fo;
	uint32_t *uo;
	int i, bad = 0;
	VkResult r;

	spec_data[0] = 64;
	memcpy(&spec_data[1], &scale, 4);
	if ((r = make_buf(dv, N * 4, 0, &a)) || (r = make_buf(dv, N * 4, 0, &b)) || (r = make_buf(dv, (N + PAD) * 4, 0, &c)) ||
	    (r = make_buf(dv, 2 * N * 4, 1, &stage)) || (r = make_buf(dv, (N + PAD) * 4, 1, &out))) {
		snprintf(detail, dlen, "buffers: VkResult %d", r);
		return 1;
	}
	fa = stage.map;
	fb = fa + N;
	for (i = 0; i < N; i++) {
		fa[i] = (float)i;
		fb[i] = (float)(3 * i) * 0.25f;
	}
	memset(out.map, 0, (N + PAD) * 4);
	if ((r = make_pipe(dv, code, bytes, 3, sizeof(push), &si, &pp))) {
		snprintf(detail, dlen, "pipeline: VkResult %d", r);
		return 1;
	}
	bind_bufs(dv, &pp, bs, 3);
	cb = begin(dv);
	cp = (VkBufferCopy){ 0, 0, N * 4 };
	vkCmdCopyBuffer(cb, stage.b, a.b, 1, &cp);
	cp = (VkBufferCopy){ N * 4, 0, N * 4 };
	vkCmdCopyBuffer(cb, stage.b, b.b, 1, &cp);
	vkCmdFillBuffer(cb, c.b, 0, VK_WHOLE_SIZE, 0xdeadbeef);
	barrier(cb);
	vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pp.p);
	vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pp.layout, 0, 1, &pp.set, 0, NULL);
	vkCmdPushConstants(cb, pp.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(push), &push);
	vkCmdDispatch(cb, (N + 63) / 64, 1, 1);
	barrier(cb);
	vkCmdUpdateBuffer(cb, c.b, (N + 4) * 4, sizeof(upd), upd);
	barrier(cb);
	cp = (VkBufferCopy){ 0, 0, (N + PAD) * 4 };
	vkCmdCopyBuffer(cb, c.b, out.b, 1, &cp);
	vkEndCommandBuffer(cb);
	sub.pCommandBuffers = &cb;
	r = vkQueueSubmit(dv->q, 1, &sub, VK_NULL_HANDLE);
	if (!r)
		r = vkWaitSemaphores(dv->d, &wi, 20ull * 1000000000ull);
	if (r) {
		snprintf(detail, dlen, "submit/wait: VkResult %d", r);
		bad = 1;
	} else {
		fo = out.map;
		uo = out.map;
		for (i = 0; i < N && !bad; i++)
			if (fo[i] != 2.0f * (fa[i] + fb[i]) + 0.5f) {
				snprintf(detail, dlen, "c[%d] = %g, want %g", i, fo[i], 2.0f * (fa[i] + fb[i]) + 0.5f);
				bad = 1;
			}
		for (i = N; i < N + PAD && !bad; i++) {
			uint32_t want = i >= N + 4 && i < N + 8 ? upd[i - N - 4] : 0xdeadbeef;

			if (uo[i] != want) {
				snprintf(detail, dlen, "word %d = 0x%08x, want 0x%08x (fill/update)", i, uo[i], want);
				bad = 1;
			}
		}
		if (!bad)
			snprintf(detail, dlen, "%d sums, fill and update exact; one submit", N);
	}
	vkDeviceWaitIdle(dv->d);
	vkFreeCommandBuffers(dv->d, dv->pool, 1, &cb);
	free_pipe(dv, &pp);
	free_buf(dv, &a), free_buf(dv, &b), free_buf(dv, &c), free_buf(dv, &stage), free_buf(dv, &out);
	return bad;
}

int main(int argc, char **argv)
{
	VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "vk-icd-check",
				  .apiVersion = VK_API_VERSION_1_2 };
	VkInstanceCreateInfo ii = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
	VkDebugUtilsMessengerCreateInfoEXT mi = {
		.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
		.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT,
		.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
			       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
		.pfnUserCallback = on_message };
	const char *dbg_ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME, *layer = "VK_LAYER_KHRONOS_validation", *dir;
	VkExtensionProperties iexts[64];
	VkLayerProperties layers[64];
	uint32_t nie = 64, nl = 64, i;
	int have_dbg = 0, validate = 0;
	VkInstance inst;
	VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
	struct dev dv, dv2;
	char detail[512];
	size_t vbytes, nbytes, sbytes, bbytes;
	uint32_t *vadd, *narrow, *subgroup, *bigshared;
	VkSemaphoreTypeCreateInfo sti = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
					  .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE, .initialValue = 0 };
	VkSemaphoreCreateInfo sci = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &sti };
	VkSemaphore tl;
	VkResult r;

	validate = argc == 3 && !strcmp(argv[1], "--validate");
	if (argc != 2 + validate) {
		fprintf(stderr, "usage: vk-icd-check [--validate] <directory of the test's .spv files>\n");
		return 2;
	}
	dir = argv[1 + validate];
	vadd = read_spv(dir, "vadd.spv", &vbytes);
	narrow = read_spv(dir, "narrow.spv", &nbytes);
	subgroup = read_spv(dir, "subgroup.spv", &sbytes);
	bigshared = read_spv(dir, "bigshared.spv", &bbytes);

	if (validate) {
		int found = 0;

		if (vkEnumerateInstanceLayerProperties(&nl, layers) >= 0)
			for (i = 0; i < nl; i++)
				if (!strcmp(layers[i].layerName, layer))
					found = 1;
		if (!found) {
			fprintf(stderr, "vk-icd-check: --validate needs %s (Debian: vulkan-validationlayers)\n", layer);
			return 2;
		}
		ii.enabledLayerCount = 1;
		ii.ppEnabledLayerNames = &layer;
		if (vkEnumerateInstanceExtensionProperties(NULL, &nie, iexts) >= 0)
			for (i = 0; i < nie; i++)
				if (!strcmp(iexts[i].extensionName, dbg_ext))
					have_dbg = 1;
		if (!have_dbg) {
			fprintf(stderr, "vk-icd-check: --validate needs %s\n", dbg_ext);
			return 2;
		}
	}
	if (have_dbg) {
		ii.enabledExtensionCount = 1;
		ii.ppEnabledExtensionNames = &dbg_ext;
		ii.pNext = &mi;
	}
	r = vkCreateInstance(&ii, NULL, &inst);
	if (r) {
		check("device", 0, "vkCreateInstance failed");
		return 1;
	}
	if (have_dbg) {
		PFN_vkCreateDebugUtilsMessengerEXT f =
			(PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(inst, "vkCreateDebugUtilsMessengerEXT");

		if (f)
			f(inst, &mi, NULL, &messenger);
	}

	/* ---- device ---- */
	r = open_dev(inst, &dv);
	if (r) {
		snprintf(detail, sizeof(detail), "no vugpu device or vkCreateDevice failed (VkResult %d)", r);
		check("device", 0, detail);
		return 1;
	}
	{
		VkPhysicalDeviceProperties p;

		vkGetPhysicalDeviceProperties(dv.pd, &p);
		snprintf(detail, sizeof(detail), "%s, Vulkan %u.%u, subgroup %u ops 0x%x, storageBuffer16BitAccess %u, 8bit %u, timeline %u",
			 p.deviceName, VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion),
			 dv.p11.subgroupSize, dv.p11.subgroupSupportedOperations, dv.f11.storageBuffer16BitAccess,
			 dv.f12.storageBuffer8BitAccess, dv.f12.timelineSemaphore);
		check("device", p.apiVersion >= VK_API_VERSION_1_2 && dv.f11.storageBuffer16BitAccess &&
					dv.f12.storageBuffer8BitAccess && dv.f12.timelineSemaphore &&
					p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU,
		      detail);
	}
	if (vkCreateSemaphore(dv.d, &sci, NULL, &tl)) {
		check("vadd", 0, "timeline semaphore creation failed");
		return 1;
	}

	/* ---- vadd ---- */
	check("vadd", !run_vadd(&dv, vadd, vbytes, tl, 1, detail, sizeof(detail)), detail);

	/* ---- narrow: 8/16-bit storage, indirect, timeline wait, events, timestamps, fence ---- */
	{
		enum { N = 200 };
		struct buf q, h, o, ind, stage;
		struct buf *bs[3] = { &q, &h, &o };
		struct pipe pp;
		struct { uint32_t n; } push = { N };
		VkCommandBuffer cb;
		VkBufferCopy cp;
		VkEvent ev_dev, ev_host;
		VkEventCreateInfo eci = { .sType = VK_STRUCTURE_TYPE_EVENT_CREATE_INFO };
		VkQueryPoolCreateInfo qpi = { .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
					      .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = 2 };
		VkQueryPool qp;
		VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
		VkFence fence;
		uint64_t wait_v = 1, sig_v = 2, ts[2] = { 0, 0 };
		VkPipelineStageFlags ws = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
		VkTimelineSemaphoreSubmitInfo tsi = { .sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
						      .waitSemaphoreValueCount = 1, .pWaitSemaphoreValues = &wait_v,
						      .signalSemaphoreValueCount = 1, .pSignalSemaphoreValues = &sig_v };
		VkSubmitInfo sub = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .pNext = &tsi, .waitSemaphoreCount = 1,
				     .pWaitSemaphores = &tl, .pWaitDstStageMask = &ws, .commandBufferCount = 1,
				     .signalSemaphoreCount = 1, .pSignalSemaphores = &tl };
		uint32_t groups[3] = { (N + 31) / 32, 1, 1 };
		uint8_t *qm;
		uint16_t *hm;
		float *om;
		int bad = 0;

		detail[0] = 0;
		if (make_buf(&dv, N, 0, &q) || make_buf(&dv, N * 2, 0, &h) || make_buf(&dv, N * 4, 0, &o) ||
		    make_buf(&dv, 16, 0, &ind) || make_buf(&dv, N * 8, 1, &stage) ||
		    (r = make_pipe(&dv, narrow, nbytes, 3, sizeof(push), NULL, &pp)) ||
		    vkCreateEvent(dv.d, &eci, NULL, &ev_dev) || vkCreateEvent(dv.d, &eci, NULL, &ev_host) ||
		    vkCreateQueryPool(dv.d, &qpi, NULL, &qp) || vkCreateFence(dv.d, &fci, NULL, &fence)) {
			check("narrow", 0, "setup failed");
		} else {
			qm = stage.map;
			hm = (uint16_t *)((uint8_t *)stage.map + N);
			for (i = 0; i < N; i++) {
				qm[i] = (uint8_t)(i * 7);
				hm[i] = 0x3c00 + (uint16_t)((i % 4) << 8); /* 1.0, 1.25, 1.5, 1.75 in fp16 */
			}
			bind_bufs(&dv, &pp, bs, 3);
			vkSetEvent(dv.d, ev_host);
			cb = begin(&dv);
			vkCmdResetQueryPool(cb, qp, 0, 2);
			vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, qp, 0);
			cp = (VkBufferCopy){ 0, 0, N };
			vkCmdCopyBuffer(cb, stage.b, q.b, 1, &cp);
			cp = (VkBufferCopy){ N, 0, N * 2 };
			vkCmdCopyBuffer(cb, stage.b, h.b, 1, &cp);
			vkCmdUpdateBuffer(cb, ind.b, 0, sizeof(groups), groups);
			vkCmdWaitEvents(cb, 1, &ev_host, VK_PIPELINE_STAGE_HOST_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, NULL,
					0, NULL, 0, NULL);
			barrier(cb);
			vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pp.p);
			vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pp.layout, 0, 1, &pp.set, 0, NULL);
			vkCmdPushConstants(cb, pp.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(push), &push);
			vkCmdDispatchIndirect(cb, ind.b, 0);
			barrier(cb);
			cp = (VkBufferCopy){ 0, N * 4, N * 4 };
			vkCmdCopyBuffer(cb, o.b, stage.b, 1, &cp);
			vkCmdSetEvent(cb, ev_dev, VK_PIPELINE_STAGE_TRANSFER_BIT);
			vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, qp, 1);
			vkEndCommandBuffer(cb);
			sub.pCommandBuffers = &cb;
			r = vkQueueSubmit(dv.q, 1, &sub, fence);
			if (!r)
				r = vkWaitForFences(dv.d, 1, &fence, VK_TRUE, 20ull * 1000000000ull);
			if (r) {
				snprintf(detail, sizeof(detail), "submit/fence: VkResult %d", r);
				bad = 1;
			}
			om = (float *)((uint8_t *)stage.map + N * 4);
			for (i = 0; i < N && !bad; i++) {
				float want = (float)(uint8_t)(i * 7) * (1.0f + 0.25f * (float)(i % 4));

				if (om[i] != want) {
					snprintf(detail, sizeof(detail), "o[%u] = %g, want %g", i, om[i], want);
					bad = 1;
				}
			}
			if (!bad && vkGetEventStatus(dv.d, ev_dev) != VK_EVENT_SET) {
				snprintf(detail, sizeof(detail), "the command buffer's event is not set");
				bad = 1;
			}
			if (!bad) {
				uint64_t v = 0;

				vkGetSemaphoreCounterValue(dv.d, tl, &v);
				r = vkGetQueryPoolResults(dv.d, qp, 0, 2, sizeof(ts), ts, 8,
							  VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
				if (v != 2 || r || ts[1] < ts[0] || !ts[0]) {
					snprintf(detail, sizeof(detail), "timeline %llu (want 2), timestamps %llu..%llu (VkResult %d)",
						 (unsigned long long)v, (unsigned long long)ts[0], (unsigned long long)ts[1], r);
					bad = 1;
				}
			}
			if (!bad)
				snprintf(detail, sizeof(detail), "%d products exact; indirect grid, event, timeline 2, %llu ns between timestamps",
					 N, (unsigned long long)(ts[1] - ts[0]));
			check("narrow", !bad, detail);
			vkFreeCommandBuffers(dv.d, dv.pool, 1, &cb);
			free_pipe(&dv, &pp);
		}
		vkDestroyEvent(dv.d, ev_dev, NULL);
		vkDestroyEvent(dv.d, ev_host, NULL);
		vkDestroyQueryPool(dv.d, qp, NULL);
		vkDestroyFence(dv.d, fence, NULL);
		free_buf(&dv, &q), free_buf(&dv, &h), free_buf(&dv, &o), free_buf(&dv, &ind), free_buf(&dv, &stage);
	}

	/* ---- subgroup ---- */
	if (!(dv.p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT)) {
		printf("VUGPU-CHECK {\"check\":\"subgroup\",\"ok\":true,\"skipped\":\"no subgroup arithmetic on this device\"}\n");
	} else {
		enum { N = 256 };
		struct buf x, s;
		struct buf *bs[2] = { &x, &s };
		struct pipe pp;
		VkCommandBuffer cb;
		VkSubmitInfo sub = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1 };
		uint32_t sg = dv.p11.subgroupSize, *xm, *sm;
		int bad = 0;

		if (make_buf(&dv, N * 4, 1, &x) || make_buf(&dv, N * 4, 1, &s) ||
		    (r = make_pipe(&dv, subgroup, sbytes, 2, 0, NULL, &pp))) {
			check("subgroup", 0, "setup failed");
		} else {
			xm = x.map;
			sm = s.map;
			for (i = 0; i < N; i++)
				xm[i] = i + 1;
			bind_bufs(&dv, &pp, bs, 2);
			cb = begin(&dv);
			vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pp.p);
			vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pp.layout, 0, 1, &pp.set, 0, NULL);
			vkCmdDispatch(cb, N / 64, 1, 1);
			vkEndCommandBuffer(cb);
			sub.pCommandBuffers = &cb;
			r = vkQueueSubmit(dv.q, 1, &sub, VK_NULL_HANDLE);
			if (!r)
				r = vkQueueWaitIdle(dv.q);
			if (r) {
				snprintf(detail, sizeof(detail), "submit: VkResult %d", r);
				bad = 1;
			}
			for (i = 0; i < N / sg && !bad; i++) {
				uint32_t want = 0, k;

				for (k = 0; k < sg; k++)
					want += xm[i * sg + k];
				if (sm[i] != want) {
					snprintf(detail, sizeof(detail), "sum %u = %u, want %u (subgroup %u)", i, sm[i], want, sg);
					bad = 1;
				}
			}
			if (!bad)
				snprintf(detail, sizeof(detail), "%u subgroup sums of %u exact", N / sg, sg);
			check("subgroup", !bad, detail);
			vkFreeCommandBuffers(dv.d, dv.pool, 1, &cb);
			free_pipe(&dv, &pp);
		}
		free_buf(&dv, &x), free_buf(&dv, &s);
	}

	/* ---- host-side timeline operations ---- */
	{
		VkSemaphoreSignalInfo sgi = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO, .semaphore = tl, .value = 7 };
		uint64_t v = 0, want = 7;
		VkSemaphoreWaitInfo wi = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, .semaphoreCount = 1,
					   .pSemaphores = &tl, .pValues = &want };
		VkResult r1, r2, r3;

		want = 8;
		r1 = vkWaitSemaphores(dv.d, &wi, 1000000); /* not reached yet: times out */
		r2 = vkSignalSemaphore(dv.d, &sgi);
		want = 7;
		r3 = vkWaitSemaphores(dv.d, &wi, 1000000000ull);
		vkGetSemaphoreCounterValue(dv.d, tl, &v);
		snprintf(detail, sizeof(detail), "wait(8) %d, signal(7) %d, wait(7) %d, value %llu", r1, r2, r3,
			 (unsigned long long)v);
		check("host-sem", r1 == VK_TIMEOUT && !r2 && !r3 && v == 7, detail);
	}

	/* ---- refused at pipeline creation: a capability outside the device's list ---- */
	{
		uint32_t *w = malloc(vbytes);
		size_t k, n = vbytes / 4;
		struct pipe pp;

		memcpy(w, vadd, vbytes);
		/* turn OpCapability Shader into DotProductInput4x8BitPacked (integer dot product) */
		for (k = 5; k < n;) {
			uint32_t op = w[k] & 0xffff, wc = w[k] >> 16;

			if (op == 17 && w[k + 1] == 1) {
				w[k + 1] = 6018;
				break;
			}
			k += wc ? wc : 1;
		}
		/* the module is invalid for the layer on purpose: hide this one from the counter */
		{
			int before = validation_errors;
			uint32_t spec_data[2] = { 64, 0x3f800000 };
			VkSpecializationMapEntry me[2] = { { 0, 0, 4 }, { 1, 4, 4 } };
			VkSpecializationInfo si = { 2, me, 8, spec_data };

			r = make_pipe(&dv, w, vbytes, 3, 8, &si, &pp);
			validation_errors = before;
		}
		snprintf(detail, sizeof(detail), "vkCreateComputePipelines: VkResult %d", r);
		check("refused", r != VK_SUCCESS && r != VK_ERROR_DEVICE_LOST, detail);
		if (pp.dsl)
			vkDestroyDescriptorSetLayout(dv.d, pp.dsl, NULL);
		if (pp.layout)
			vkDestroyPipelineLayout(dv.d, pp.layout, NULL);
		free(w);
	}

	/* ---- lost: refused at launch loses this device only ---- */
	r = open_dev(inst, &dv2);
	if (r) {
		snprintf(detail, sizeof(detail), "second device: VkResult %d", r);
		check("lost", 0, detail);
	} else {
		struct buf o;
		struct buf *bs[1] = { &o };
		struct pipe pp;
		VkCommandBuffer cb;
		VkSubmitInfo sub = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1 };
		VkResult rs, rw, rafter;
		int again;
		VkSemaphore tl2;

		make_buf(&dv, 256, 0, &o);
		{
			int before = validation_errors; /* the shared array is over the advertised limit on purpose */

			r = make_pipe(&dv, bigshared, bbytes, 1, 0, NULL, &pp);
			validation_errors = before;
		}
		if (r) {
			snprintf(detail, sizeof(detail), "pipeline: VkResult %d", r);
			check("lost", 0, detail);
		} else {
			bind_bufs(&dv, &pp, bs, 1);
			cb = begin(&dv);
			vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pp.p);
			vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pp.layout, 0, 1, &pp.set, 0, NULL);
			vkCmdDispatch(cb, 1, 1, 1);
			vkEndCommandBuffer(cb);
			sub.pCommandBuffers = &cb;
			{
				VkSubmitInfo empty = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO };

				rs = vkQueueSubmit(dv.q, 1, &sub, VK_NULL_HANDLE);
				rw = vkQueueWaitIdle(dv.q);
				rafter = vkQueueSubmit(dv.q, 1, &empty, VK_NULL_HANDLE);
			}
			vkCreateSemaphore(dv2.d, &sci, NULL, &tl2);
			again = run_vadd(&dv2, vadd, vbytes, tl2, 1, detail, sizeof(detail));
			snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail),
				 "; refused launch: submit %d, wait %d, next submit %d", rs, rw, rafter);
			check("lost", (rs == VK_ERROR_DEVICE_LOST || rw == VK_ERROR_DEVICE_LOST) &&
					      rafter == VK_ERROR_DEVICE_LOST && !again,
			      detail);
			vkDestroySemaphore(dv2.d, tl2, NULL);
			{
				int before = validation_errors; /* the lost device's buffer never left the pending state */

				vkFreeCommandBuffers(dv.d, dv.pool, 1, &cb);
				validation_errors = before;
			}
			free_pipe(&dv, &pp);
		}
		free_buf(&dv, &o);
		vkDestroyCommandPool(dv2.d, dv2.pool, NULL);
		vkDestroyDevice(dv2.d, NULL);
	}

	vkDestroySemaphore(dv.d, tl, NULL);
	vkDestroyCommandPool(dv.d, dv.pool, NULL);
	vkDestroyDevice(dv.d, NULL);
	if (messenger) {
		PFN_vkDestroyDebugUtilsMessengerEXT f =
			(PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(inst, "vkDestroyDebugUtilsMessengerEXT");

		if (f)
			f(inst, messenger, NULL);
	}
	vkDestroyInstance(inst, NULL);
	if (have_dbg) {
		snprintf(detail, sizeof(detail), "%d validation error(s) outside the deliberate ones", validation_errors);
		check("validation", validation_errors == 0, detail);
	}
	free(vadd), free(narrow), free(subgroup), free(bigshared);
	return failures ? 1 : 0;
}
