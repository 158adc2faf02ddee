// Vulkan program backend (compute only): loader table, device context, compiled programs.
// The loader is dlopen'ed at run time (VK_NO_PROTOTYPES) so the addon loads where there is no
// Vulkan. One device context per process; jobs and programs hold it by shared_ptr, so it is
// destroyed only when nothing can still use it (never while a job runs: vkDestroyDevice hangs
// on a runaway dispatch).
#pragma once
// Vulkan structs are initialized as {sType} with the rest zeroed: that is the intent.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

// <unistd.h> defines R_OK (access(2)), which program.h uses as an enumerator: take unistd.h
// first (its include guard keeps later inclusions from redefining it) and drop the macro.
#include <unistd.h>
#undef R_OK
#include "program.h"

namespace vugpu::vk {

#define VUGPU_VK_INSTANCE_FNS(X)                                                              \
  X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)         \
  X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2)                           \
  X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkGetPhysicalDeviceMemoryProperties)          \
  X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr)

#define VUGPU_VK_DEVICE_FNS(X)                                                                \
  X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkQueueSubmit) X(vkDeviceWaitIdle)                 \
  X(vkCreateCommandPool) X(vkDestroyCommandPool) X(vkResetCommandPool)                        \
  X(vkAllocateCommandBuffers) X(vkBeginCommandBuffer) X(vkEndCommandBuffer)                   \
  X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets) X(vkCmdPushConstants) X(vkCmdDispatch)      \
  X(vkCmdWriteTimestamp) X(vkCmdResetQueryPool) X(vkCmdPipelineBarrier)                       \
  X(vkCreateFence) X(vkDestroyFence) X(vkResetFences) X(vkWaitForFences)                      \
  X(vkCreateQueryPool) X(vkDestroyQueryPool) X(vkGetQueryPoolResults)                         \
  X(vkCreateDescriptorPool) X(vkDestroyDescriptorPool) X(vkResetDescriptorPool)               \
  X(vkAllocateDescriptorSets) X(vkUpdateDescriptorSets) X(vkCreateDescriptorSetLayout)        \
  X(vkDestroyDescriptorSetLayout) X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout)        \
  X(vkCreateShaderModule) X(vkDestroyShaderModule) X(vkCreateComputePipelines)                \
  X(vkDestroyPipeline) X(vkAllocateMemory) X(vkFreeMemory) X(vkMapMemory) X(vkUnmapMemory)    \
  X(vkCreateBuffer) X(vkDestroyBuffer) X(vkBindBufferMemory)                                  \
  X(vkGetBufferMemoryRequirements) X(vkGetMemoryHostPointerPropertiesEXT)

// Process-wide loader: global and instance-level entry points (one instance at a time holds
// the instance table; device entry points live in the Context).
struct Loader {
  void* lib = nullptr;
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  PFN_vkCreateInstance vkCreateInstance = nullptr;
  PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion = nullptr;
  std::string error;  // why lib is null
};
// dlopen once (thread-safe); null with *why set when there is no usable loader.
const Loader* GetLoader(std::string* why);

struct InstanceFns {
#define X(n) PFN_##n n = nullptr;
  VUGPU_VK_INSTANCE_FNS(X)
#undef X
};
struct DeviceFns {
#define X(n) PFN_##n n = nullptr;
  VUGPU_VK_DEVICE_FNS(X)
#undef X
};

// What JS sees as vulkanDevices() entries.
struct DeviceSummary {
  std::string name, type, driver, api;
};
// Enumerate with a temporary instance; empty (why set) when there is no loader or instance.
std::vector<DeviceSummary> ListDevices(std::string* why);

// Limits beyond program.h's Limits that the engine checks at launch (PPROG).
struct LaunchLimits {
  uint32_t maxGrid[3] = {65535, 65535, 65535};
  uint64_t maxBufferBytes = 128u << 20;
  uint32_t bufferAlign = 16;
};

struct DeviceInfo {
  std::string name, driverName, driverInfo, api, type;
  uint32_t driverId = 0, driverVersion = 0, vendorId = 0, deviceId = 0, apiVersion = 0;
  spirv::Limits limits;  // clamped to program.h's envelope; features = PROG_FEATURES bits
  LaunchLimits launch;
  bool timestamps = false;            // device timestamps on the chosen queue
  double timestampPeriod = 1.0;       // ns per tick
  uint64_t timestampMask = ~0ull;
  uint32_t importAlign = 4096;        // minImportedHostPointerAlignment
  uint32_t robustStorageAlign = 1;    // robustStorageBufferAccessSizeAlignment (bounds rounding)
  bool nullDescriptor = false;        // zero-length bindings become null descriptors
  bool cancelWordDeviceLocal = false; // control block in DEVICE_LOCAL|HOST_VISIBLE memory
  bool cpuDevice = false;             // VK_PHYSICAL_DEVICE_TYPE_CPU (lavapipe): never spin-wait
  uint32_t queueFamily = 0;
};

// Per-dispatch resources, reused: one lane is used by one job at a time.
struct Lane {
  VkCommandPool cmdPool = VK_NULL_HANDLE;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  VkQueryPool queries = VK_NULL_HANDLE;
  VkDescriptorPool descPool = VK_NULL_HANDLE;
  VkBuffer control = VK_NULL_HANDLE;
  VkDeviceMemory controlMem = VK_NULL_HANDLE;
  volatile uint32_t* controlWords = nullptr;  // {cancel, status}, mapped persistently
};

struct Context {
  InstanceFns ifn;
  DeviceFns fn;
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice phys = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties memProps{};
  uint32_t controlMemType = 0;
  DeviceInfo info;

  std::mutex queueMu;  // vkQueueSubmit (the queue is externally synchronized)
  std::mutex laneMu;
  std::vector<Lane*> freeLanes;
  std::vector<Lane*> allLanes;  // lanes of abandoned (device-lost) jobs are not freed
  std::atomic<bool> lost{false};
  std::atomic<bool> lostLogged{false};

  ~Context();
  Lane* AcquireLane(std::string* err);
  void ReleaseLane(Lane* l);
};

// Opens the device whose name contains `want` (case-insensitive; empty = prefer a GPU over a
// CPU device, else the first with a compute queue). Null with *err on failure.
std::shared_ptr<Context> OpenContext(const std::string& want, std::string* err);

// One compiled program slot.
struct Program {
  std::shared_ptr<Context> ctx;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // the compile job finished (ok or not)
  uint32_t reason = spirv::R_OK;
  std::string message;
  spirv::EntryInfo entry;
  uint32_t pushRange = 0;  // push-constant range bytes (entry.pushBytes rounded up to 4)
  std::vector<uint32_t> setBindings;  // sorted, unique set-0 bindings
  VkDescriptorSetLayout set0 = VK_NULL_HANDLE, set1 = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  ~Program();
};

struct CompileInput {
  std::vector<uint32_t> words;
  uint32_t entryIndex = 0;
  std::vector<spirv::SpecValue> spec;
  spirv::Limits limits;
};
// Pool thread: prepare() then vkCreateComputePipelines. Fills prog and marks it done.
// Returns 0 or -EINVAL; *ns = wall time of both.
int CompileProgram(Program& prog, const CompileInput& in, uint64_t* ns);

struct DispatchInput {
  std::vector<uint64_t> windows;
  std::vector<uint64_t> lengths;
  std::vector<uint8_t> params;
  uint32_t grid[3] = {1, 1, 1};
};
// Pool thread: runs one launch. Returns 0, -EINVAL, -ECANCELED, -ELOOP, -ENODEV or -ENOMEM;
// *ns = device time from timestamps (wall time without them).
int DispatchProgram(Program& prog, const DispatchInput& in, const std::atomic<bool>& cancel,
                    uint64_t* ns);

// Import cost, measured by the dispatch path (for the bench/test report).
struct ImportStats {
  std::atomic<uint64_t> count{0}, ns{0};
};
ImportStats& GetImportStats();

const char* ResultName(VkResult r);

}  // namespace vugpu::vk
