/* SPDX-License-Identifier: MIT */
/*
 * libvulkan_vugpu: a Vulkan 1.2 compute driver (an ICD for the Khronos loader) over the vugpu
 * runtime (guest/runtime/vugpu.h). One VkDevice = one runtime context = one channel, so a channel
 * error loses that device only. See docs/vulkan.md.
 */
#ifndef VK_PRIV_H
#define VK_PRIV_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>
#include <vulkan/vk_icd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdbool.h>
#include "vugpu.h"

#define VKV_API_VERSION VK_MAKE_API_VERSION(0, 1, 2, VK_HEADER_VERSION)
#define VKV_DRIVER_VERSION VK_MAKE_VERSION(0, 1, 0)
#define VKV_VENDOR_ID 0x1de5
#define VKV_DEVICE_ID 0x6b75
#define VKV_MAX_BINDINGS 16        /* the compute class's buffer slots (hw-spec §6.2) */
#define VKV_MAX_PUSH 128          /* PROG_MAX_PUSH_BYTES never exceeds it (hw-spec §3.10) */
#define VKV_HOST_WAIT_LIMIT_NS (60ull * 1000000000ull) /* a wait on the host that never comes */
#define VKV_MEM_TYPE_VRAM 0
#define VKV_MEM_TYPE_HOST 1

/* every dispatchable object starts with the loader's slot */
struct vkv_instance {
	VK_LOADER_DATA loader;
	uint32_t api_version;
	struct vkv_pdev *pdev;      /* NULL until enumerated; stays NULL when no vugpu device answers */
	int probed;
};

struct vkv_pdev {
	VK_LOADER_DATA loader;
	struct vkv_instance *inst;
	vgProgLimits lim;
	vgDeviceInfo info;
	uint64_t host_heap;
};

struct vkv_queue {
	VK_LOADER_DATA loader;
	struct vkv_device *dev;
};

struct vkv_device {
	VK_LOADER_DATA loader;
	struct vkv_pdev *pd;
	vgContext ctx;
	int lost;
	struct vkv_queue queue;
	vgDevicePtr dummy_va;        /* a small buffer for bindings a set leaves unwritten */
	pthread_cond_t cond;          /* host-side signals (vkSignalSemaphore, vkSetEvent) */
};

struct vkv_memory {
	uint64_t size;
	uint32_t type;
	vgDevicePtr va;
	void *host;                  /* pinned host memory (type HOST), else NULL */
};

struct vkv_buffer {
	uint64_t size;
	struct vkv_memory *mem;
	uint64_t offset;
};

/* a module's program in GPU memory, shared by the module and the pipelines made from it */
struct vkv_prog {
	vgProgram prog;
	int refs;
};

struct vkv_shader {
	uint32_t *words;
	size_t bytes;
	struct vkv_prog *prog;       /* loaded at the first pipeline */
};

struct vkv_dsl {
	uint32_t count;              /* highest binding + 1 */
	VkDescriptorType type[VKV_MAX_BINDINGS];
};

struct vkv_set_binding {
	struct vkv_buffer *buf;
	uint64_t offset, range;
};

struct vkv_set {
	struct vkv_set *next;        /* in its pool */
	struct vkv_pool *pool;
	struct vkv_dsl layout;
	struct vkv_set_binding b[VKV_MAX_BINDINGS];
};

struct vkv_pool {
	struct vkv_set *sets;
	uint32_t max_sets, used;
	VkDescriptorPoolCreateFlags flags;
};

struct vkv_playout {
	uint32_t push_bytes;
	uint32_t nsets;
	struct vkv_dsl set0;
};

struct vkv_pipeline {
	struct vkv_prog *prog;
	uint32_t entry;
	uint32_t nspec;
	vgSpecConstant *spec;
	uint32_t push_bytes;
};

struct vkv_fence {
	uint64_t seq;                /* the submission's runtime fence; 0 = none pending */
	int signaled;
};

struct vkv_sem_signal {
	uint64_t value, seq;
};

struct vkv_semaphore {
	int timeline;
	uint64_t value;              /* reached */
	struct vkv_sem_signal *pending;
	uint32_t npending, cap;
};

struct vkv_event {
	int state;                   /* VK_EVENT_SET or VK_EVENT_RESET once pending passed */
	uint64_t seq;                /* pending_state applies once this fence passes */
	int pending_state;
};

struct vkv_query_pool {
	uint32_t count;
	uint64_t *value;
	uint8_t *avail;
};

struct vkv_cmd;
struct vkv_cmd_pool {
	struct vkv_cmd_buffer *buffers;
};
void vkv_cond_wait_ms(struct vkv_device *d, unsigned int ms);

struct vkv_chunk;
struct vkv_cmd_buffer {
	VK_LOADER_DATA loader;
	struct vkv_device *dev;
	struct vkv_cmd_pool *pool;
	struct vkv_cmd_buffer *next;
	/* recording */
	struct vkv_cmd *cmds;
	uint32_t ncmds, cap;
	VkResult record_error;
	struct vkv_pipeline *pipe;
	struct vkv_playout *layout;
	struct vkv_set_binding bound[VKV_MAX_BINDINGS];
	uint32_t nbound;
	uint8_t push[VKV_MAX_PUSH];
	struct vkv_chunk *chunks;   /* pinned host memory holding vkCmdUpdateBuffer data */
	VkCommandBufferUsageFlags usage;
};

/* instance / physical device (vk_instance.c) */
PFN_vkVoidFunction vkv_lookup(const char *name);
void vkv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern pthread_mutex_t vkv_lock;   /* the runtime is not thread-safe: every call under this */

/* device (vk_device.c) */
VkResult vkv_result(struct vkv_device *d, vgResult r, const char *what);
int vkv_fence_passed(struct vkv_device *d, uint64_t seq);
void vkv_sem_signal(struct vkv_semaphore *s, uint64_t value, uint64_t seq);
uint64_t vkv_sem_value(struct vkv_device *d, struct vkv_semaphore *s);
void vkv_event_update(struct vkv_device *d, struct vkv_event *e);
void vkv_prog_put(struct vkv_device *d, struct vkv_prog *p);
VkResult vkv_wait_seq(struct vkv_device *d, uint64_t seq, uint64_t timeout_ns);
uint64_t vkv_now_ns(void);
int vkv_debug(void);
void vkv_cmd_buffer_free(struct vkv_cmd_buffer *cb);

/* every entry point: X(name) for vk<name>, implemented as vkv_<name> */
#define VKV_GLOBAL(X) X(CreateInstance) X(EnumerateInstanceExtensionProperties) \
	X(EnumerateInstanceLayerProperties) X(EnumerateInstanceVersion)
#define VKV_INSTANCE(X) X(DestroyInstance) X(EnumeratePhysicalDevices) X(EnumeratePhysicalDeviceGroups) \
	X(GetInstanceProcAddr) X(GetPhysicalDeviceProperties) X(GetPhysicalDeviceProperties2) \
	X(GetPhysicalDeviceFeatures) X(GetPhysicalDeviceFeatures2) X(GetPhysicalDeviceQueueFamilyProperties) \
	X(GetPhysicalDeviceQueueFamilyProperties2) X(GetPhysicalDeviceMemoryProperties) \
	X(GetPhysicalDeviceMemoryProperties2) X(GetPhysicalDeviceFormatProperties) \
	X(GetPhysicalDeviceFormatProperties2) X(GetPhysicalDeviceImageFormatProperties) \
	X(GetPhysicalDeviceImageFormatProperties2) X(GetPhysicalDeviceSparseImageFormatProperties) \
	X(GetPhysicalDeviceSparseImageFormatProperties2) X(GetPhysicalDeviceExternalBufferProperties) \
	X(GetPhysicalDeviceExternalFenceProperties) X(GetPhysicalDeviceExternalSemaphoreProperties) \
	X(EnumerateDeviceExtensionProperties) X(EnumerateDeviceLayerProperties) X(CreateDevice)

#define VKV_DEVICE(X) X(GetDeviceProcAddr) X(DestroyDevice) X(GetDeviceQueue) X(GetDeviceQueue2) \
	X(DeviceWaitIdle) X(QueueWaitIdle) X(QueueSubmit) X(AllocateMemory) X(FreeMemory) X(MapMemory) \
	X(UnmapMemory) X(FlushMappedMemoryRanges) X(InvalidateMappedMemoryRanges) X(GetDeviceMemoryCommitment) \
	X(CreateBuffer) X(DestroyBuffer) X(GetBufferMemoryRequirements) X(GetBufferMemoryRequirements2) \
	X(BindBufferMemory) X(BindBufferMemory2) X(GetBufferDeviceAddress) X(GetBufferOpaqueCaptureAddress) \
	X(GetDeviceMemoryOpaqueCaptureAddress) X(CreateBufferView) X(DestroyBufferView) \
	X(CreateShaderModule) X(DestroyShaderModule) X(CreateDescriptorSetLayout) \
	X(DestroyDescriptorSetLayout) X(GetDescriptorSetLayoutSupport) X(CreateDescriptorPool) \
	X(DestroyDescriptorPool) X(ResetDescriptorPool) X(AllocateDescriptorSets) X(FreeDescriptorSets) \
	X(UpdateDescriptorSets) X(CreatePipelineLayout) X(DestroyPipelineLayout) X(CreatePipelineCache) \
	X(DestroyPipelineCache) X(GetPipelineCacheData) X(MergePipelineCaches) X(CreateComputePipelines) \
	X(DestroyPipeline) X(CreateFence) X(DestroyFence) X(ResetFences) \
	X(GetFenceStatus) X(WaitForFences) X(CreateSemaphore) X(DestroySemaphore) \
	X(GetSemaphoreCounterValue) X(WaitSemaphores) X(SignalSemaphore) X(CreateEvent) X(DestroyEvent) \
	X(GetEventStatus) X(SetEvent) X(ResetEvent) X(CreateQueryPool) X(DestroyQueryPool) \
	X(GetQueryPoolResults) X(ResetQueryPool) X(CreateCommandPool) X(DestroyCommandPool) \
	X(ResetCommandPool) X(TrimCommandPool) X(AllocateCommandBuffers) X(FreeCommandBuffers) \
	X(BeginCommandBuffer) X(EndCommandBuffer) X(ResetCommandBuffer) X(CmdBindPipeline) \
	X(CmdBindDescriptorSets) X(CmdPushConstants) X(CmdDispatch) X(CmdDispatchBase) \
	X(CmdDispatchIndirect) X(CmdCopyBuffer) X(CmdFillBuffer) X(CmdUpdateBuffer) \
	X(CmdPipelineBarrier) X(CmdSetEvent) X(CmdResetEvent) X(CmdWaitEvents) \
	X(CmdWriteTimestamp) \
	X(CmdResetQueryPool) X(CmdExecuteCommands) X(CmdSetDeviceMask) X(GetDeviceGroupPeerMemoryFeatures)
#define VKV_DECL(n) extern __typeof__(*(PFN_vk##n)0) vkv_##n;
VKV_GLOBAL(VKV_DECL)
VKV_INSTANCE(VKV_DECL)
VKV_DEVICE(VKV_DECL)
#endif /* VK_PRIV_H */
