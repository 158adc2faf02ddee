// SPDX-License-Identifier: MIT
/*
 * The loader's ICD interface (version 5), the instance and the physical device: what is
 * advertised comes from the device's PPROG limits and features (vgProgramLimits), so an
 * application sees exactly what the device and its program checker accept (docs/vulkan.md).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "vk_priv.h"

#define EXPORT __attribute__((visibility("default")))

pthread_mutex_t vkv_lock = PTHREAD_MUTEX_INITIALIZER;

/* One line, one write: the application writes to the same stderr from other threads, and a line
 * written in pieces could be split by theirs (bench:llama's worker lost its end-of-request mark so). */
void vkv_log(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "vugpu-vulkan: ");
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	fflush(stderr);
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return; /* nowhere to report it */
}

/* ---- entry-point table ---- */

struct entry {
	const char *name;
	PFN_vkVoidFunction fn;
};

#define VKV_ENTRY(n) { "vk" #n, (PFN_vkVoidFunction)vkv_##n },
static const struct entry entries[] = {
	VKV_GLOBAL(VKV_ENTRY) VKV_INSTANCE(VKV_ENTRY) VKV_DEVICE(VKV_ENTRY)
	/* extension names of promoted functions (the extensions we list) */
	{ "vkGetPhysicalDeviceFeatures2KHR", (PFN_vkVoidFunction)vkv_GetPhysicalDeviceFeatures2 },
	{ "vkGetPhysicalDeviceProperties2KHR", (PFN_vkVoidFunction)vkv_GetPhysicalDeviceProperties2 },
	{ "vkGetPhysicalDeviceQueueFamilyProperties2KHR", (PFN_vkVoidFunction)vkv_GetPhysicalDeviceQueueFamilyProperties2 },
	{ "vkGetPhysicalDeviceMemoryProperties2KHR", (PFN_vkVoidFunction)vkv_GetPhysicalDeviceMemoryProperties2 },
	{ "vkGetPhysicalDeviceFormatProperties2KHR", (PFN_vkVoidFunction)vkv_GetPhysicalDeviceFormatProperties2 },
	{ "vkGetPhysicalDeviceImageFormatProperties2KHR", (PFN_vkVoidFunction)vkv_GetPhysicalDeviceImageFormatProperties2 },
	{ "vkGetPhysicalDeviceSparseImageFormatProperties2KHR",
	  (PFN_vkVoidFunction)vkv_GetPhysicalDeviceSparseImageFormatProperties2 },
	{ "vkGetSemaphoreCounterValueKHR", (PFN_vkVoidFunction)vkv_GetSemaphoreCounterValue },
	{ "vkWaitSemaphoresKHR", (PFN_vkVoidFunction)vkv_WaitSemaphores },
	{ "vkSignalSemaphoreKHR", (PFN_vkVoidFunction)vkv_SignalSemaphore },
	{ "vkResetQueryPoolEXT", (PFN_vkVoidFunction)vkv_ResetQueryPool },
};

PFN_vkVoidFunction vkv_lookup(const char *name)
{
	size_t i;

	if (!name)
		return NULL;
	for (i = 0; i < sizeof(entries) / sizeof(entries[0]); i++)
		if (!strcmp(entries[i].name, name))
			return entries[i].fn;
	return NULL;
}

EXPORT VKAPI_ATTR VkResult VKAPI_CALL vk_icdNegotiateLoaderICDInterfaceVersion(uint32_t *pVersion)
{
	/* 5: physical-device entry points through vk_icdGetPhysicalDeviceProcAddr, apiVersion honoured */
	if (*pVersion > 5)
		*pVersion = 5;
	return *pVersion < 4 ? VK_ERROR_INCOMPATIBLE_DRIVER : VK_SUCCESS;
}

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vk_icdGetInstanceProcAddr(VkInstance instance, const char *name)
{
	(void)instance;
	return vkv_lookup(name);
}

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vk_icdGetPhysicalDeviceProcAddr(VkInstance instance, const char *name)
{
	(void)instance;
	/* only names this driver implements; NULL lets the loader handle the rest */
	return name && !strncmp(name, "vkGetPhysicalDevice", 19) ? vkv_lookup(name) : NULL;
}

PFN_vkVoidFunction vkv_GetInstanceProcAddr(VkInstance instance, const char *name)
{
	return vk_icdGetInstanceProcAddr(instance, name);
}

/* ---- instance ---- */

static const VkExtensionProperties instance_exts[] = {
	{ VK_KHR_GET_PHYSICAL_DEVICE_PROPERTIES_2_EXTENSION_NAME, VK_KHR_GET_PHYSICAL_DEVICE_PROPERTIES_2_SPEC_VERSION },
};

static VkResult copy_out(void *dst, uint32_t *count, const void *src, uint32_t n, size_t elem)
{
	uint32_t k;

	if (!dst) {
		*count = n;
		return VK_SUCCESS;
	}
	k = *count < n ? *count : n;
	memcpy(dst, src, k * elem);
	*count = k;
	return k < n ? VK_INCOMPLETE : VK_SUCCESS;
}

VkResult vkv_EnumerateInstanceExtensionProperties(const char *layer, uint32_t *count, VkExtensionProperties *props)
{
	if (layer)
		return VK_ERROR_LAYER_NOT_PRESENT;
	return copy_out(props, count, instance_exts, sizeof(instance_exts) / sizeof(instance_exts[0]), sizeof(*props));
}

VkResult vkv_EnumerateInstanceLayerProperties(uint32_t *count, VkLayerProperties *props)
{
	(void)props;
	*count = 0;
	return VK_SUCCESS;
}

VkResult vkv_EnumerateInstanceVersion(uint32_t *version)
{
	*version = VKV_API_VERSION;
	return VK_SUCCESS;
}

VkResult vkv_CreateInstance(const VkInstanceCreateInfo *ci, const VkAllocationCallbacks *alloc, VkInstance *out)
{
	struct vkv_instance *inst;
	uint32_t i, j;

	(void)alloc;
	for (i = 0; i < ci->enabledExtensionCount; i++) {
		for (j = 0; j < sizeof(instance_exts) / sizeof(instance_exts[0]); j++)
			if (!strcmp(ci->ppEnabledExtensionNames[i], instance_exts[j].extensionName))
				break;
		if (j == sizeof(instance_exts) / sizeof(instance_exts[0]))
			return VK_ERROR_EXTENSION_NOT_PRESENT;
	}
	inst = calloc(1, sizeof(*inst));
	if (!inst)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	set_loader_magic_value(inst);
	inst->api_version = ci->pApplicationInfo && ci->pApplicationInfo->apiVersion ? ci->pApplicationInfo->apiVersion
										    : VK_API_VERSION_1_0;
	*out = (VkInstance)inst;
	return VK_SUCCESS;
}

void vkv_DestroyInstance(VkInstance instance, const VkAllocationCallbacks *alloc)
{
	struct vkv_instance *inst = (struct vkv_instance *)instance;

	(void)alloc;
	if (!inst)
		return;
	free(inst->pdev);
	free(inst);
}

/* Ask the device for its limits through a short-lived context; no device = no physical device. */
static void probe(struct vkv_instance *inst)
{
	struct vkv_pdev *pd;
	vgContext ctx;
	vgResult r;
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);

	inst->probed = 1;
	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return;
	pthread_mutex_lock(&vkv_lock);
	r = vgInit(0);
	if (!r)
		r = vgCtxCreate(&ctx);
	if (!r) {
		r = vgProgramLimits(ctx, &pd->lim);
		if (!r)
			r = vgGetDeviceInfo(ctx, &pd->info);
		vgCtxDestroy(ctx);
	}
	pthread_mutex_unlock(&vkv_lock);
	if (r || !pd->lim.version || pd->lim.max_bindings < 1) {
		if (getenv("VUGPU_VK_DEBUG"))
			vkv_log("no usable vugpu device (%s%s)", r ? vgGetErrorName(r) : "the device runs no programs",
				getenv("VUGPU_SOCKET") ? "" : "; VUGPU_SOCKET unset, tried the kernel driver");
		free(pd);
		return;
	}
	set_loader_magic_value(pd);
	pd->inst = inst;
	/* pinned host memory: half of RAM is what an application may reasonably pin */
	pd->host_heap = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize / 2 : (1ull << 30);
	inst->pdev = pd;
}

VkResult vkv_EnumeratePhysicalDevices(VkInstance instance, uint32_t *count, VkPhysicalDevice *devs)
{
	struct vkv_instance *inst = (struct vkv_instance *)instance;

	if (!inst->probed)
		probe(inst);
	return copy_out(devs, count, &inst->pdev, inst->pdev ? 1 : 0, sizeof(*devs));
}

VkResult vkv_EnumeratePhysicalDeviceGroups(VkInstance instance, uint32_t *count, VkPhysicalDeviceGroupProperties *props)
{
	struct vkv_instance *inst = (struct vkv_instance *)instance;
	uint32_t n;

	if (!inst->probed)
		probe(inst);
	n = inst->pdev ? 1 : 0;
	if (!props) {
		*count = n;
		return VK_SUCCESS;
	}
	if (*count && n) {
		props[0].physicalDeviceCount = 1;
		memset(props[0].physicalDevices, 0, sizeof(props[0].physicalDevices));
		props[0].physicalDevices[0] = (VkPhysicalDevice)inst->pdev;
		props[0].subsetAllocation = VK_FALSE;
		*count = 1;
		return VK_SUCCESS;
	}
	*count = 0;
	return n ? VK_INCOMPLETE : VK_SUCCESS;
}

/* ---- features ---- */

static int has(const struct vkv_pdev *pd, unsigned int bit)
{
	return (pd->lim.features >> bit) & 1;
}
#define F_FLOAT64 0
#define F_INT64 1
#define F_FLOAT16 2
#define F_INT8 3
#define F_INT16 4
#define F_SUBGROUP 5
#define F_INT64_ATOMICS 6

static void features10(const struct vkv_pdev *pd, VkPhysicalDeviceFeatures *f)
{
	memset(f, 0, sizeof(*f));
	f->robustBufferAccess = VK_TRUE; /* the device bounds every access to its binding (hw-spec §6.3.1) */
	f->shaderFloat64 = has(pd, F_FLOAT64);
	f->shaderInt64 = has(pd, F_INT64);
	f->shaderInt16 = has(pd, F_INT16);
}

static void features11(const struct vkv_pdev *pd, VkPhysicalDeviceVulkan11Features *f)
{
	(void)pd;
	/* 16-bit storage capabilities are on the checker's list unconditionally */
	f->storageBuffer16BitAccess = VK_TRUE;
	f->uniformAndStorageBuffer16BitAccess = VK_TRUE;
	f->storagePushConstant16 = VK_TRUE;
	f->storageInputOutput16 = VK_FALSE;
	f->multiview = f->multiviewGeometryShader = f->multiviewTessellationShader = VK_FALSE;
	f->variablePointersStorageBuffer = f->variablePointers = VK_FALSE;
	f->protectedMemory = f->samplerYcbcrConversion = f->shaderDrawParameters = VK_FALSE;
}

static void features12(const struct vkv_pdev *pd, VkPhysicalDeviceVulkan12Features *f)
{
	void *next = f->pNext;
	VkStructureType t = f->sType;

	memset(f, 0, sizeof(*f));
	f->sType = t;
	f->pNext = next;
	f->storageBuffer8BitAccess = VK_TRUE;
	f->uniformAndStorageBuffer8BitAccess = VK_TRUE;
	f->storagePushConstant8 = VK_TRUE;
	f->shaderBufferInt64Atomics = has(pd, F_INT64_ATOMICS);
	f->shaderSharedInt64Atomics = has(pd, F_INT64_ATOMICS);
	f->shaderFloat16 = has(pd, F_FLOAT16);
	f->shaderInt8 = has(pd, F_INT8);
	f->hostQueryReset = VK_TRUE;
	f->timelineSemaphore = VK_TRUE;
	f->vulkanMemoryModel = VK_TRUE;
	f->vulkanMemoryModelDeviceScope = VK_TRUE;
	/* off by design: physical pointers are refused by the device */
	f->bufferDeviceAddress = VK_FALSE;
}

/* Fill one features struct of a pNext chain; 0 when its type is not one this driver knows. */
static int fill_features(const struct vkv_pdev *pd, VkBaseOutStructure *s)
{
	VkPhysicalDeviceVulkan11Features f11 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES };
	VkPhysicalDeviceVulkan12Features f12 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES };

	features11(pd, &f11);
	features12(pd, &f12);
	switch (s->sType) {
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2:
		features10(pd, &((VkPhysicalDeviceFeatures2 *)s)->features);
		return 1;
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES:
		features11(pd, (VkPhysicalDeviceVulkan11Features *)s);
		return 1;
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES:
		features12(pd, (VkPhysicalDeviceVulkan12Features *)s);
		return 1;
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES: {
		VkPhysicalDevice16BitStorageFeatures *f = (void *)s;

		f->storageBuffer16BitAccess = f11.storageBuffer16BitAccess;
		f->uniformAndStorageBuffer16BitAccess = f11.uniformAndStorageBuffer16BitAccess;
		f->storagePushConstant16 = f11.storagePushConstant16;
		f->storageInputOutput16 = f11.storageInputOutput16;
		return 1;
	}
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES: {
		VkPhysicalDevice8BitStorageFeatures *f = (void *)s;

		f->storageBuffer8BitAccess = f12.storageBuffer8BitAccess;
		f->uniformAndStorageBuffer8BitAccess = f12.uniformAndStorageBuffer8BitAccess;
		f->storagePushConstant8 = f12.storagePushConstant8;
		return 1;
	}
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES: {
		VkPhysicalDeviceShaderFloat16Int8Features *f = (void *)s;

		f->shaderFloat16 = f12.shaderFloat16;
		f->shaderInt8 = f12.shaderInt8;
		return 1;
	}
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_INT64_FEATURES: {
		VkPhysicalDeviceShaderAtomicInt64Features *f = (void *)s;

		f->shaderBufferInt64Atomics = f12.shaderBufferInt64Atomics;
		f->shaderSharedInt64Atomics = f12.shaderSharedInt64Atomics;
		return 1;
	}
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES:
		((VkPhysicalDeviceTimelineSemaphoreFeatures *)s)->timelineSemaphore = VK_TRUE;
		return 1;
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_HOST_QUERY_RESET_FEATURES:
		((VkPhysicalDeviceHostQueryResetFeatures *)s)->hostQueryReset = VK_TRUE;
		return 1;
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES: {
		VkPhysicalDeviceVulkanMemoryModelFeatures *f = (void *)s;

		f->vulkanMemoryModel = VK_TRUE;
		f->vulkanMemoryModelDeviceScope = VK_TRUE;
		f->vulkanMemoryModelAvailabilityVisibilityChains = VK_FALSE;
		return 1;
	}
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MULTIVIEW_FEATURES:
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VARIABLE_POINTERS_FEATURES:
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROTECTED_MEMORY_FEATURES:
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SAMPLER_YCBCR_CONVERSION_FEATURES:
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_DRAW_PARAMETERS_FEATURES:
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DESCRIPTOR_INDEXING_FEATURES:
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SCALAR_BLOCK_LAYOUT_FEATURES:
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_IMAGELESS_FRAMEBUFFER_FEATURES:
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_UNIFORM_BUFFER_STANDARD_LAYOUT_FEATURES:
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SUBGROUP_EXTENDED_TYPES_FEATURES:
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SEPARATE_DEPTH_STENCIL_LAYOUTS_FEATURES:
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES:
		return 2; /* known, all false: the caller zeroes the booleans */
	default:
		return 0;
	}
}

/* Bytes up to the end of the last VkBool32 of the feature structs fill_features knows (not sizeof:
 * the tail padding of a struct with an odd number of booleans is not the application's to set). */
#define BOOL_END(T, m) (offsetof(T, m) + sizeof(VkBool32))
static size_t features_size(VkStructureType t)
{
	switch (t) {
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2:
		return offsetof(VkPhysicalDeviceFeatures2, features) + sizeof(VkPhysicalDeviceFeatures);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES:
		return BOOL_END(VkPhysicalDeviceVulkan11Features, shaderDrawParameters);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES:
		return BOOL_END(VkPhysicalDeviceVulkan12Features, subgroupBroadcastDynamicId);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES:
		return BOOL_END(VkPhysicalDevice16BitStorageFeatures, storageInputOutput16);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES:
		return BOOL_END(VkPhysicalDevice8BitStorageFeatures, storagePushConstant8);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES:
		return BOOL_END(VkPhysicalDeviceShaderFloat16Int8Features, shaderInt8);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_INT64_FEATURES:
		return BOOL_END(VkPhysicalDeviceShaderAtomicInt64Features, shaderSharedInt64Atomics);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES:
		return BOOL_END(VkPhysicalDeviceTimelineSemaphoreFeatures, timelineSemaphore);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_HOST_QUERY_RESET_FEATURES:
		return BOOL_END(VkPhysicalDeviceHostQueryResetFeatures, hostQueryReset);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES:
		return BOOL_END(VkPhysicalDeviceVulkanMemoryModelFeatures, vulkanMemoryModelAvailabilityVisibilityChains);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MULTIVIEW_FEATURES:
		return BOOL_END(VkPhysicalDeviceMultiviewFeatures, multiviewTessellationShader);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VARIABLE_POINTERS_FEATURES:
		return BOOL_END(VkPhysicalDeviceVariablePointersFeatures, variablePointers);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROTECTED_MEMORY_FEATURES:
		return BOOL_END(VkPhysicalDeviceProtectedMemoryFeatures, protectedMemory);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SAMPLER_YCBCR_CONVERSION_FEATURES:
		return BOOL_END(VkPhysicalDeviceSamplerYcbcrConversionFeatures, samplerYcbcrConversion);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_DRAW_PARAMETERS_FEATURES:
		return BOOL_END(VkPhysicalDeviceShaderDrawParametersFeatures, shaderDrawParameters);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DESCRIPTOR_INDEXING_FEATURES:
		return BOOL_END(VkPhysicalDeviceDescriptorIndexingFeatures, runtimeDescriptorArray);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SCALAR_BLOCK_LAYOUT_FEATURES:
		return BOOL_END(VkPhysicalDeviceScalarBlockLayoutFeatures, scalarBlockLayout);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_IMAGELESS_FRAMEBUFFER_FEATURES:
		return BOOL_END(VkPhysicalDeviceImagelessFramebufferFeatures, imagelessFramebuffer);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_UNIFORM_BUFFER_STANDARD_LAYOUT_FEATURES:
		return BOOL_END(VkPhysicalDeviceUniformBufferStandardLayoutFeatures, uniformBufferStandardLayout);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SUBGROUP_EXTENDED_TYPES_FEATURES:
		return BOOL_END(VkPhysicalDeviceShaderSubgroupExtendedTypesFeatures, shaderSubgroupExtendedTypes);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SEPARATE_DEPTH_STENCIL_LAYOUTS_FEATURES:
		return BOOL_END(VkPhysicalDeviceSeparateDepthStencilLayoutsFeatures, separateDepthStencilLayouts);
	case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES:
		return BOOL_END(VkPhysicalDeviceBufferDeviceAddressFeatures, bufferDeviceAddressMultiDevice);
	default:
		return 0;
	}
}

static void fill_features_chain(const struct vkv_pdev *pd, VkBaseOutStructure *s)
{
	for (; s; s = s->pNext) {
		void *next = s->pNext;
		size_t sz = features_size(s->sType);

		if (fill_features(pd, s) == 2 && sz > sizeof(VkBaseOutStructure))
			memset(s + 1, 0, sz - sizeof(VkBaseOutStructure));
		s->pNext = next;
	}
}

void vkv_GetPhysicalDeviceFeatures(VkPhysicalDevice physdev, VkPhysicalDeviceFeatures *f)
{
	features10((struct vkv_pdev *)physdev, f);
}

void vkv_GetPhysicalDeviceFeatures2(VkPhysicalDevice physdev, VkPhysicalDeviceFeatures2 *f)
{
	fill_features_chain((struct vkv_pdev *)physdev, (VkBaseOutStructure *)f);
}

/*
 * Every requested feature must be one we report: compare each known struct, boolean by boolean,
 * with what fill_features reports. Unknown structs belong to extensions we do not list.
 */
static VkResult check_features(const struct vkv_pdev *pd, const VkDeviceCreateInfo *ci)
{
	const VkBaseInStructure *s;
	uint8_t buf[512];
	size_t i;

	if (ci->pEnabledFeatures) {
		VkPhysicalDeviceFeatures sup;
		const VkBool32 *a = (const VkBool32 *)ci->pEnabledFeatures, *b = (const VkBool32 *)&sup;

		features10(pd, &sup);
		for (i = 0; i < sizeof(sup) / sizeof(VkBool32); i++)
			if (a[i] && !b[i]) {
				if (vkv_debug())
					vkv_log("vkCreateDevice: VkPhysicalDeviceFeatures member %zu is not supported", i);
				return VK_ERROR_FEATURE_NOT_PRESENT;
			}
	}
	for (s = ci->pNext; s; s = s->pNext) {
		size_t sz = features_size(s->sType);
		const VkBool32 *a, *b;

		if (!sz || sz > sizeof(buf))
			continue;
		memset(buf, 0, sz);
		((VkBaseOutStructure *)buf)->sType = s->sType;
		if (fill_features(pd, (VkBaseOutStructure *)buf) == 2)
			memset(buf + sizeof(VkBaseOutStructure), 0, sz - sizeof(VkBaseOutStructure));
		a = (const VkBool32 *)((const uint8_t *)s + sizeof(VkBaseOutStructure));
		b = (const VkBool32 *)(buf + sizeof(VkBaseOutStructure));
		for (i = 0; i < (sz - sizeof(VkBaseOutStructure)) / sizeof(VkBool32); i++)
			if (a[i] && !b[i]) {
				if (vkv_debug())
					vkv_log("vkCreateDevice: member %zu of feature struct %d is not supported", i, s->sType);
				return VK_ERROR_FEATURE_NOT_PRESENT;
			}
	}
	return VK_SUCCESS;
}

/* ---- properties ---- */

static void properties10(const struct vkv_pdev *pd, VkPhysicalDeviceProperties *p)
{
	const vgProgLimits *l = &pd->lim;
	VkPhysicalDeviceLimits *m = &p->limits;
	int i;

	memset(p, 0, sizeof(*p));
	p->apiVersion = VKV_API_VERSION;
	p->driverVersion = VKV_DRIVER_VERSION;
	p->vendorID = VKV_VENDOR_ID;
	p->deviceID = VKV_DEVICE_ID;
	p->deviceType = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
	snprintf(p->deviceName, sizeof(p->deviceName), "vugpu GPU (%s)", pd->info.backend);
	memcpy(p->pipelineCacheUUID, "vugpu-vk-cache-1", VK_UUID_SIZE);

	/* what a compute queue on this device can use; graphics and image limits stay 0 */
	m->maxStorageBufferRange = l->max_buffer_bytes;
	m->maxPushConstantsSize = l->max_push_bytes;
	m->maxMemoryAllocationCount = 4096;
	m->bufferImageGranularity = 1;
	m->maxBoundDescriptorSets = 1; /* the device reads descriptor set 0 only (hw-spec §6.3.2) */
	m->maxPerStageDescriptorStorageBuffers = l->max_bindings;
	m->maxPerStageResources = l->max_bindings;
	m->maxDescriptorSetStorageBuffers = l->max_bindings;
	m->maxComputeSharedMemorySize = l->max_shared_bytes;
	for (i = 0; i < 3; i++) {
		m->maxComputeWorkGroupCount[i] = l->max_grid[i];
		m->maxComputeWorkGroupSize[i] = l->max_wg_size[i];
	}
	m->maxComputeWorkGroupInvocations = l->max_wg_invocations;
	m->minMemoryMapAlignment = 64;
	m->minTexelBufferOffsetAlignment = 256;
	m->minUniformBufferOffsetAlignment = 256;
	m->minStorageBufferOffsetAlignment = l->buffer_align ? l->buffer_align : 16;
	/* host clock in ns, read when the preceding work has completed (docs/vulkan.md) */
	m->timestampPeriod = 1.0f;
	m->timestampComputeAndGraphics = VK_TRUE;
	m->discreteQueuePriorities = 2;
	m->optimalBufferCopyOffsetAlignment = 16;
	m->optimalBufferCopyRowPitchAlignment = 16;
	m->nonCoherentAtomSize = 64;
	m->maxSamplerAllocationCount = 0;
	m->standardSampleLocations = VK_FALSE;
	m->strictLines = VK_FALSE;
}

static void properties11(const struct vkv_pdev *pd, VkPhysicalDeviceVulkan11Properties *p)
{
	memset(p->deviceUUID, 0, VK_UUID_SIZE);
	memcpy(p->deviceUUID, "vugpu-device", 12);
	memcpy(p->driverUUID, "vugpu-vk-driver1", VK_UUID_SIZE);
	memset(p->deviceLUID, 0, VK_LUID_SIZE);
	p->deviceNodeMask = 0;
	p->deviceLUIDValid = VK_FALSE;
	p->subgroupSize = pd->lim.subgroup_size ? pd->lim.subgroup_size : 1;
	p->subgroupSupportedStages = VK_SHADER_STAGE_COMPUTE_BIT;
	/* GroupNonUniform is always allowed; the rest with the SUBGROUP feature (hw-spec §6.3.3) */
	p->subgroupSupportedOperations = VK_SUBGROUP_FEATURE_BASIC_BIT;
	if (has(pd, F_SUBGROUP))
		p->subgroupSupportedOperations |= VK_SUBGROUP_FEATURE_VOTE_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT |
						  VK_SUBGROUP_FEATURE_BALLOT_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT |
						  VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT;
	p->subgroupQuadOperationsInAllStages = VK_FALSE;
	p->pointClippingBehavior = VK_POINT_CLIPPING_BEHAVIOR_ALL_CLIP_PLANES;
	p->maxMultiviewViewCount = 0;
	p->maxMultiviewInstanceIndex = 0;
	p->protectedNoFault = VK_FALSE;
	p->maxPerSetDescriptors = pd->lim.max_bindings;
	p->maxMemoryAllocationSize = pd->info.vram_size;
}

static void properties12(const struct vkv_pdev *pd, VkPhysicalDeviceVulkan12Properties *p)
{
	void *next = p->pNext;
	VkStructureType t = p->sType;

	memset(p, 0, sizeof(*p));
	p->sType = t;
	p->pNext = next;
	p->driverID = (VkDriverId)0; /* no Khronos-registered id for this driver */
	snprintf(p->driverName, sizeof(p->driverName), "vugpu");
	snprintf(p->driverInfo, sizeof(p->driverInfo), "vugpu Vulkan compute driver over the %s backend",
		 pd->info.backend);
	p->denormBehaviorIndependence = VK_SHADER_FLOAT_CONTROLS_INDEPENDENCE_NONE;
	p->roundingModeIndependence = VK_SHADER_FLOAT_CONTROLS_INDEPENDENCE_NONE;
	/* no update-after-bind (descriptorIndexing is off), but the validation layer checks every
	 * layout against these limits: the plain ones are the truthful answer */
	p->maxUpdateAfterBindDescriptorsInAllPools = pd->lim.max_bindings;
	p->maxPerStageDescriptorUpdateAfterBindStorageBuffers = pd->lim.max_bindings;
	p->maxPerStageUpdateAfterBindResources = pd->lim.max_bindings;
	p->maxDescriptorSetUpdateAfterBindStorageBuffers = pd->lim.max_bindings;
	p->supportedDepthResolveModes = 0;
	p->maxTimelineSemaphoreValueDifference = UINT64_MAX;
	p->framebufferIntegerColorSampleCounts = 0;
}

static void properties_chain(const struct vkv_pdev *pd, VkBaseOutStructure *s)
{
	VkPhysicalDeviceVulkan11Properties p11 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES };
	VkPhysicalDeviceVulkan12Properties p12 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES };

	properties11(pd, &p11);
	properties12(pd, &p12);
	for (; s; s = s->pNext) {
		switch (s->sType) {
		case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2:
			properties10(pd, &((VkPhysicalDeviceProperties2 *)s)->properties);
			break;
		case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES:
			properties11(pd, (VkPhysicalDeviceVulkan11Properties *)s);
			break;
		case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES:
			properties12(pd, (VkPhysicalDeviceVulkan12Properties *)s);
			break;
		case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES: {
			VkPhysicalDeviceIDProperties *p = (void *)s;

			memcpy(p->deviceUUID, p11.deviceUUID, VK_UUID_SIZE);
			memcpy(p->driverUUID, p11.driverUUID, VK_UUID_SIZE);
			memset(p->deviceLUID, 0, VK_LUID_SIZE);
			p->deviceNodeMask = 0;
			p->deviceLUIDValid = VK_FALSE;
			break;
		}
		case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES: {
			VkPhysicalDeviceSubgroupProperties *p = (void *)s;

			p->subgroupSize = p11.subgroupSize;
			p->supportedStages = p11.subgroupSupportedStages;
			p->supportedOperations = p11.subgroupSupportedOperations;
			p->quadOperationsInAllStages = VK_FALSE;
			break;
		}
		case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES: {
			VkPhysicalDeviceMaintenance3Properties *p = (void *)s;

			p->maxPerSetDescriptors = p11.maxPerSetDescriptors;
			p->maxMemoryAllocationSize = p11.maxMemoryAllocationSize;
			break;
		}
		case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_POINT_CLIPPING_PROPERTIES:
			((VkPhysicalDevicePointClippingProperties *)s)->pointClippingBehavior = p11.pointClippingBehavior;
			break;
		case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES: {
			VkPhysicalDeviceDriverProperties *p = (void *)s;

			p->driverID = p12.driverID;
			memcpy(p->driverName, p12.driverName, sizeof(p->driverName));
			memcpy(p->driverInfo, p12.driverInfo, sizeof(p->driverInfo));
			p->conformanceVersion = p12.conformanceVersion;
			break;
		}
		case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES: {
			VkPhysicalDeviceFloatControlsProperties *p = (void *)s;

			p->denormBehaviorIndependence = p12.denormBehaviorIndependence;
			p->roundingModeIndependence = p12.roundingModeIndependence;
			memset(&p->shaderSignedZeroInfNanPreserveFloat16, 0,
			       sizeof(*p) - offsetof(VkPhysicalDeviceFloatControlsProperties, shaderSignedZeroInfNanPreserveFloat16));
			break;
		}
		case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DESCRIPTOR_INDEXING_PROPERTIES: {
			VkPhysicalDeviceDescriptorIndexingProperties *p = (void *)s;

			memset(&p->maxUpdateAfterBindDescriptorsInAllPools, 0,
			       sizeof(*p) - offsetof(VkPhysicalDeviceDescriptorIndexingProperties, maxUpdateAfterBindDescriptorsInAllPools));
			p->maxUpdateAfterBindDescriptorsInAllPools = p12.maxUpdateAfterBindDescriptorsInAllPools;
			p->maxPerStageDescriptorUpdateAfterBindStorageBuffers = p12.maxPerStageDescriptorUpdateAfterBindStorageBuffers;
			p->maxPerStageUpdateAfterBindResources = p12.maxPerStageUpdateAfterBindResources;
			p->maxDescriptorSetUpdateAfterBindStorageBuffers = p12.maxDescriptorSetUpdateAfterBindStorageBuffers;
			break;
		}
		case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_PROPERTIES:
			((VkPhysicalDeviceTimelineSemaphoreProperties *)s)->maxTimelineSemaphoreValueDifference =
				p12.maxTimelineSemaphoreValueDifference;
			break;
		default:
			break;
		}
	}
}

void vkv_GetPhysicalDeviceProperties(VkPhysicalDevice physdev, VkPhysicalDeviceProperties *p)
{
	properties10((struct vkv_pdev *)physdev, p);
}

void vkv_GetPhysicalDeviceProperties2(VkPhysicalDevice physdev, VkPhysicalDeviceProperties2 *p)
{
	properties_chain((struct vkv_pdev *)physdev, (VkBaseOutStructure *)p);
}

static const VkQueueFamilyProperties queue_family = {
	.queueFlags = VK_QUEUE_COMPUTE_BIT | VK_QUEUE_TRANSFER_BIT,
	.queueCount = 1,
	.timestampValidBits = 64,
	.minImageTransferGranularity = { 1, 1, 1 },
};

void vkv_GetPhysicalDeviceQueueFamilyProperties(VkPhysicalDevice physdev, uint32_t *count, VkQueueFamilyProperties *p)
{
	(void)physdev;
	copy_out(p, count, &queue_family, 1, sizeof(*p));
}

void vkv_GetPhysicalDeviceQueueFamilyProperties2(VkPhysicalDevice physdev, uint32_t *count, VkQueueFamilyProperties2 *p)
{
	(void)physdev;
	if (!p) {
		*count = 1;
		return;
	}
	if (*count)
		p[0].queueFamilyProperties = queue_family, *count = 1;
}

void vkv_GetPhysicalDeviceMemoryProperties(VkPhysicalDevice physdev, VkPhysicalDeviceMemoryProperties *m)
{
	struct vkv_pdev *pd = (struct vkv_pdev *)physdev;

	memset(m, 0, sizeof(*m));
	/* VRAM is GPU-only (no coherent CPU mapping is promised on every host); pinned host memory
	 * is what the CPU maps, and the GPU reaches it by DMA — coherent and cached on the CPU side */
	m->memoryHeapCount = 2;
	m->memoryHeaps[0].size = pd->info.vram_size;
	m->memoryHeaps[0].flags = VK_MEMORY_HEAP_DEVICE_LOCAL_BIT;
	m->memoryHeaps[1].size = pd->host_heap;
	m->memoryTypeCount = 2;
	m->memoryTypes[VKV_MEM_TYPE_VRAM].propertyFlags = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
	m->memoryTypes[VKV_MEM_TYPE_VRAM].heapIndex = 0;
	m->memoryTypes[VKV_MEM_TYPE_HOST].propertyFlags =
		VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT | VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
	m->memoryTypes[VKV_MEM_TYPE_HOST].heapIndex = 1;
}

void vkv_GetPhysicalDeviceMemoryProperties2(VkPhysicalDevice physdev, VkPhysicalDeviceMemoryProperties2 *m)
{
	vkv_GetPhysicalDeviceMemoryProperties(physdev, &m->memoryProperties);
}

/* no images: no format has any feature */
void vkv_GetPhysicalDeviceFormatProperties(VkPhysicalDevice physdev, VkFormat fmt, VkFormatProperties *p)
{
	(void)physdev;
	(void)fmt;
	memset(p, 0, sizeof(*p));
}

void vkv_GetPhysicalDeviceFormatProperties2(VkPhysicalDevice physdev, VkFormat fmt, VkFormatProperties2 *p)
{
	vkv_GetPhysicalDeviceFormatProperties(physdev, fmt, &p->formatProperties);
}

VkResult vkv_GetPhysicalDeviceImageFormatProperties(VkPhysicalDevice physdev, VkFormat fmt, VkImageType type,
						    VkImageTiling tiling, VkImageUsageFlags usage,
						    VkImageCreateFlags flags, VkImageFormatProperties *p)
{
	(void)physdev, (void)fmt, (void)type, (void)tiling, (void)usage, (void)flags;
	memset(p, 0, sizeof(*p));
	return VK_ERROR_FORMAT_NOT_SUPPORTED;
}

VkResult vkv_GetPhysicalDeviceImageFormatProperties2(VkPhysicalDevice physdev, const VkPhysicalDeviceImageFormatInfo2 *info,
						     VkImageFormatProperties2 *p)
{
	(void)physdev, (void)info;
	memset(&p->imageFormatProperties, 0, sizeof(p->imageFormatProperties));
	return VK_ERROR_FORMAT_NOT_SUPPORTED;
}

void vkv_GetPhysicalDeviceSparseImageFormatProperties(VkPhysicalDevice physdev, VkFormat fmt, VkImageType type,
						      VkSampleCountFlagBits samples, VkImageUsageFlags usage,
						      VkImageTiling tiling, uint32_t *count, VkSparseImageFormatProperties *p)
{
	(void)physdev, (void)fmt, (void)type, (void)samples, (void)usage, (void)tiling, (void)p;
	*count = 0;
}

void vkv_GetPhysicalDeviceSparseImageFormatProperties2(VkPhysicalDevice physdev,
						       const VkPhysicalDeviceSparseImageFormatInfo2 *info, uint32_t *count,
						       VkSparseImageFormatProperties2 *p)
{
	(void)physdev, (void)info, (void)p;
	*count = 0;
}

/* no external memory, fences or semaphores */
void vkv_GetPhysicalDeviceExternalBufferProperties(VkPhysicalDevice physdev, const VkPhysicalDeviceExternalBufferInfo *info,
						   VkExternalBufferProperties *p)
{
	(void)physdev, (void)info;
	memset(&p->externalMemoryProperties, 0, sizeof(p->externalMemoryProperties));
}

void vkv_GetPhysicalDeviceExternalFenceProperties(VkPhysicalDevice physdev, const VkPhysicalDeviceExternalFenceInfo *info,
						  VkExternalFenceProperties *p)
{
	(void)physdev, (void)info;
	p->exportFromImportedHandleTypes = 0;
	p->compatibleHandleTypes = 0;
	p->externalFenceFeatures = 0;
}

void vkv_GetPhysicalDeviceExternalSemaphoreProperties(VkPhysicalDevice physdev,
						      const VkPhysicalDeviceExternalSemaphoreInfo *info,
						      VkExternalSemaphoreProperties *p)
{
	(void)physdev, (void)info;
	p->exportFromImportedHandleTypes = 0;
	p->compatibleHandleTypes = 0;
	p->externalSemaphoreFeatures = 0;
}

/* ---- device extensions and creation ---- */

static uint32_t device_exts(const struct vkv_pdev *pd, VkExtensionProperties *out)
{
	static const VkExtensionProperties always[] = {
		{ VK_KHR_16BIT_STORAGE_EXTENSION_NAME, VK_KHR_16BIT_STORAGE_SPEC_VERSION },
		{ VK_KHR_8BIT_STORAGE_EXTENSION_NAME, VK_KHR_8BIT_STORAGE_SPEC_VERSION },
		{ VK_KHR_STORAGE_BUFFER_STORAGE_CLASS_EXTENSION_NAME, VK_KHR_STORAGE_BUFFER_STORAGE_CLASS_SPEC_VERSION },
		{ VK_KHR_TIMELINE_SEMAPHORE_EXTENSION_NAME, VK_KHR_TIMELINE_SEMAPHORE_SPEC_VERSION },
		{ VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME, VK_KHR_DRIVER_PROPERTIES_SPEC_VERSION },
		{ VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME, VK_KHR_VULKAN_MEMORY_MODEL_SPEC_VERSION },
		{ VK_EXT_HOST_QUERY_RESET_EXTENSION_NAME, VK_EXT_HOST_QUERY_RESET_SPEC_VERSION },
	};
	static const VkExtensionProperties f16i8 = { VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME,
						     VK_KHR_SHADER_FLOAT16_INT8_SPEC_VERSION };
	static const VkExtensionProperties atom64 = { VK_KHR_SHADER_ATOMIC_INT64_EXTENSION_NAME,
						      VK_KHR_SHADER_ATOMIC_INT64_SPEC_VERSION };
	uint32_t n = 0, i;

	for (i = 0; i < sizeof(always) / sizeof(always[0]); i++)
		out[n++] = always[i];
	if (has(pd, F_FLOAT16) || has(pd, F_INT8))
		out[n++] = f16i8;
	if (has(pd, F_INT64_ATOMICS))
		out[n++] = atom64;
	return n;
}

VkResult vkv_EnumerateDeviceExtensionProperties(VkPhysicalDevice physdev, const char *layer, uint32_t *count,
						VkExtensionProperties *props)
{
	VkExtensionProperties all[16];
	uint32_t n;

	if (layer)
		return VK_ERROR_LAYER_NOT_PRESENT;
	n = device_exts((struct vkv_pdev *)physdev, all);
	return copy_out(props, count, all, n, sizeof(*props));
}

VkResult vkv_EnumerateDeviceLayerProperties(VkPhysicalDevice physdev, uint32_t *count, VkLayerProperties *props)
{
	(void)physdev, (void)props;
	*count = 0;
	return VK_SUCCESS;
}

VkResult vkv_CreateDevice(VkPhysicalDevice physdev, const VkDeviceCreateInfo *ci, const VkAllocationCallbacks *alloc,
			  VkDevice *out)
{
	struct vkv_pdev *pd = (struct vkv_pdev *)physdev;
	VkExtensionProperties all[16];
	struct vkv_device *d;
	uint32_t n, i, j;
	VkResult res;
	vgResult r;

	(void)alloc;
	n = device_exts(pd, all);
	for (i = 0; i < ci->enabledExtensionCount; i++) {
		for (j = 0; j < n; j++)
			if (!strcmp(ci->ppEnabledExtensionNames[i], all[j].extensionName))
				break;
		if (j == n) {
			if (getenv("VUGPU_VK_DEBUG"))
				vkv_log("vkCreateDevice: extension %s is not supported", ci->ppEnabledExtensionNames[i]);
			return VK_ERROR_EXTENSION_NOT_PRESENT;
		}
	}
	res = check_features(pd, ci);
	if (res)
		return res;
	for (i = 0; i < ci->queueCreateInfoCount; i++)
		if (ci->pQueueCreateInfos[i].queueFamilyIndex != 0 || ci->pQueueCreateInfos[i].queueCount > 1)
			return VK_ERROR_INITIALIZATION_FAILED;
	d = calloc(1, sizeof(*d));
	if (!d)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	set_loader_magic_value(d);
	set_loader_magic_value(&d->queue);
	d->pd = pd;
	d->queue.dev = d;
	pthread_cond_init(&d->cond, NULL);
	pthread_mutex_lock(&vkv_lock);
	r = vgCtxCreate(&d->ctx);
	if (!r)
		r = vgMemAlloc(d->ctx, &d->dummy_va, 256);
	if (r && d->ctx)
		vgCtxDestroy(d->ctx);
	pthread_mutex_unlock(&vkv_lock);
	if (r) {
		vkv_log("vkCreateDevice: no channel (%s)", vgGetErrorName(r));
		pthread_cond_destroy(&d->cond);
		free(d);
		return r == VG_ERROR_OUT_OF_MEMORY ? VK_ERROR_OUT_OF_DEVICE_MEMORY : VK_ERROR_INITIALIZATION_FAILED;
	}
	*out = (VkDevice)d;
	return VK_SUCCESS;
}
