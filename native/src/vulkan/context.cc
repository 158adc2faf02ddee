// Vulkan loader, device choice and the device context (features, limits, lanes).
#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>

#include "tuning.h"
#include "vk.h"

namespace vugpu::vk {

void RegisterContext(Context* c);    // staging.cc
void UnregisterContext(Context* c);

namespace {

// program.h's envelope (hw-spec §3.10) beyond Limits' defaults.
constexpr uint32_t kEnvMaxGrid = 65535;
constexpr uint64_t kEnvMaxBufferBytes = 128u << 20;
constexpr uint32_t kEnvBufferAlign = 16;
// lavapipe leaves every loop after 65,535 loop passes per SIMD group (its limiter, shared by all
// loops); the rewrite detects each such cut and the launch fails with PROGRAM_LOOP_LIMIT.
constexpr uint32_t kLavapipeLoopLimit = 65535;

std::string ApiString(uint32_t v) {
  char b[32];
  snprintf(b, sizeof b, "%u.%u.%u", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v),
           VK_API_VERSION_PATCH(v));
  return b;
}

const char* TypeName(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

// Lower is preferred when no name is given: real GPUs before a CPU device.
int TypeRank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

bool ContainsNoCase(const std::string& hay, const std::string& needle) {
  auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end(), [](char a, char b) {
    return std::tolower(uint8_t(a)) == std::tolower(uint8_t(b));
  });
  return it != hay.end();
}

Loader g_loader;
std::once_flag g_loaderOnce;

void LoadLoader() {
  void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    g_loader.error = std::string("no Vulkan loader: ") + (e ? e : "dlopen failed");
    return;
  }
  auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  if (!gipa) {
    g_loader.error = "libvulkan.so.1 has no vkGetInstanceProcAddr";
    dlclose(lib);
    return;
  }
  g_loader.vkGetInstanceProcAddr = gipa;
  g_loader.vkCreateInstance =
      reinterpret_cast<PFN_vkCreateInstance>(gipa(VK_NULL_HANDLE, "vkCreateInstance"));
  g_loader.vkEnumerateInstanceVersion = reinterpret_cast<PFN_vkEnumerateInstanceVersion>(
      gipa(VK_NULL_HANDLE, "vkEnumerateInstanceVersion"));
  uint32_t ver = 0;
  if (!g_loader.vkCreateInstance || !g_loader.vkEnumerateInstanceVersion ||
      g_loader.vkEnumerateInstanceVersion(&ver) != VK_SUCCESS || ver < VK_API_VERSION_1_1) {
    g_loader.error = "the Vulkan loader is older than 1.1";
    g_loader.vkGetInstanceProcAddr = nullptr;
    return;  // keep lib loaded: unloading a loader that may have spawned threads is unsafe
  }
  g_loader.lib = lib;  // never dlclose'd: ICDs may keep threads and atexit handlers
}

struct Instance {
  VkInstance inst = VK_NULL_HANDLE;
  InstanceFns fn;
};

bool CreateInstance(Instance* out, std::string* err) {
  const Loader* L = GetLoader(err);
  if (!L) return false;
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "vugpu";
  app.pEngineName = "vugpu";
  app.apiVersion = VK_API_VERSION_1_3;  // the highest we use; devices may report lower
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  VkResult r = L->vkCreateInstance(&ci, nullptr, &out->inst);
  if (r != VK_SUCCESS) {
    *err = std::string("vkCreateInstance: ") + ResultName(r);
    return false;
  }
#define X(n) out->fn.n = reinterpret_cast<PFN_##n>(L->vkGetInstanceProcAddr(out->inst, #n));
  VUGPU_VK_INSTANCE_FNS(X)
#undef X
  if (!out->fn.vkDestroyInstance || !out->fn.vkGetPhysicalDeviceProperties2 ||
      !out->fn.vkCreateDevice || !out->fn.vkGetDeviceProcAddr) {
    if (out->fn.vkDestroyInstance) out->fn.vkDestroyInstance(out->inst, nullptr);
    *err = "the Vulkan instance lacks 1.1 entry points";
    return false;
  }
  return true;
}

std::vector<VkPhysicalDevice> PhysicalDevices(const Instance& in) {
  uint32_t n = 0;
  if (in.fn.vkEnumeratePhysicalDevices(in.inst, &n, nullptr) != VK_SUCCESS || n == 0) return {};
  std::vector<VkPhysicalDevice> v(n);
  if (in.fn.vkEnumeratePhysicalDevices(in.inst, &n, v.data()) < 0) return {};
  v.resize(n);
  return v;
}

std::vector<std::string> DeviceExtensions(const InstanceFns& fn, VkPhysicalDevice pd) {
  uint32_t n = 0;
  if (fn.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<VkExtensionProperties> e(n);
  if (fn.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, e.data()) < 0) return {};
  std::vector<std::string> names;
  for (uint32_t i = 0; i < n; i++) names.emplace_back(e[i].extensionName);
  return names;
}

bool Has(const std::vector<std::string>& exts, const char* name) {
  return std::find(exts.begin(), exts.end(), name) != exts.end();
}

// A queue family with compute: a compute-only family with timestamps first, then any with
// timestamps, then any with compute. -1 when none.
int ComputeFamily(const InstanceFns& fn, VkPhysicalDevice pd, uint32_t* tsBits) {
  uint32_t n = 0;
  fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> q(n);
  fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, q.data());
  int best = -1, bestScore = -1;
  for (uint32_t i = 0; i < n; i++) {
    if (!(q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || q[i].queueCount == 0) continue;
    int score = (q[i].timestampValidBits ? 2 : 0) + ((q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT) ? 0 : 1);
    if (score > bestScore) best = int(i), bestScore = score, *tsBits = q[i].timestampValidBits;
  }
  return best;
}

}  // namespace

const Loader* GetLoader(std::string* why) {
  std::call_once(g_loaderOnce, LoadLoader);
  if (!g_loader.lib) {
    if (why) *why = g_loader.error;
    return nullptr;
  }
  return &g_loader;
}

const char* ResultName(VkResult r) {
  switch (r) {
#define R(x) case x: return #x;
    R(VK_SUCCESS) R(VK_NOT_READY) R(VK_TIMEOUT) R(VK_INCOMPLETE)
    R(VK_ERROR_OUT_OF_HOST_MEMORY) R(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    R(VK_ERROR_INITIALIZATION_FAILED) R(VK_ERROR_DEVICE_LOST) R(VK_ERROR_MEMORY_MAP_FAILED)
    R(VK_ERROR_LAYER_NOT_PRESENT) R(VK_ERROR_EXTENSION_NOT_PRESENT)
    R(VK_ERROR_FEATURE_NOT_PRESENT) R(VK_ERROR_INCOMPATIBLE_DRIVER) R(VK_ERROR_TOO_MANY_OBJECTS)
    R(VK_ERROR_FORMAT_NOT_SUPPORTED) R(VK_ERROR_FRAGMENTED_POOL) R(VK_ERROR_UNKNOWN)
    R(VK_ERROR_OUT_OF_POOL_MEMORY) R(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    R(VK_ERROR_INVALID_SHADER_NV)
#undef R
    default: return "VK_ERROR_(other)";
  }
}

std::vector<DeviceSummary> ListDevices(std::string* why) {
  Instance in;
  if (!CreateInstance(&in, why)) return {};
  std::vector<DeviceSummary> out;
  for (VkPhysicalDevice pd : PhysicalDevices(in)) {
    VkPhysicalDeviceProperties p{};
    in.fn.vkGetPhysicalDeviceProperties(pd, &p);
    VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    bool haveDrv = p.apiVersion >= VK_API_VERSION_1_2 ||
                   Has(DeviceExtensions(in.fn, pd), VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
    if (haveDrv) p2.pNext = &drv;
    in.fn.vkGetPhysicalDeviceProperties2(pd, &p2);
    out.push_back({p.deviceName, TypeName(p.deviceType), haveDrv ? drv.driverName : "",
                   ApiString(p.apiVersion)});
  }
  in.fn.vkDestroyInstance(in.inst, nullptr);
  if (out.empty() && why) *why = "the Vulkan loader found no devices";
  return out;
}

Context::~Context() {
  if (device && lost.load()) {
    // A lost device may still run a dispatch that never ends, and destroying it then hangs
    // (../shared/notes/vulkan.md): its objects are leaked, once per loss.
    UnregisterContext(this);
    return;
  }
  if (device) {
    // Only reached when no job holds the context: the queue is idle.
    fn.vkDeviceWaitIdle(device);
    FreeCaches(*this);
    for (Lane* l : allLanes) {
      if (l->controlWords) fn.vkUnmapMemory(device, l->controlMem);
      fn.vkDestroyBuffer(device, l->control, nullptr);
      fn.vkFreeMemory(device, l->controlMem, nullptr);
      fn.vkDestroyDescriptorPool(device, l->descPool, nullptr);
      fn.vkDestroyQueryPool(device, l->queries, nullptr);
      fn.vkDestroyFence(device, l->fence, nullptr);
      fn.vkDestroySemaphore(device, l->upSem, nullptr);
      fn.vkDestroySemaphore(device, l->compSem, nullptr);
      if (l->xferPool != l->cmdPool) fn.vkDestroyCommandPool(device, l->xferPool, nullptr);
      fn.vkDestroyCommandPool(device, l->cmdPool, nullptr);
      delete l;
    }
    fn.vkDestroyDevice(device, nullptr);
  } else {
    UnregisterContext(this);
  }
  if (instance) ifn.vkDestroyInstance(instance, nullptr);
}

Lane* Context::AcquireLane(std::string* err) {
  {
    std::lock_guard<std::mutex> lk(laneMu);
    if (!freeLanes.empty()) {
      Lane* l = freeLanes.back();
      freeLanes.pop_back();
      return l;
    }
  }
  auto l = std::make_unique<Lane>();
  auto fail = [&](const char* what, VkResult r) {
    *err = std::string(what) + ": " + ResultName(r);
    if (l->controlWords) fn.vkUnmapMemory(device, l->controlMem);
    fn.vkDestroyBuffer(device, l->control, nullptr);
    fn.vkFreeMemory(device, l->controlMem, nullptr);
    fn.vkDestroyDescriptorPool(device, l->descPool, nullptr);
    fn.vkDestroyQueryPool(device, l->queries, nullptr);
    fn.vkDestroyFence(device, l->fence, nullptr);
    fn.vkDestroyCommandPool(device, l->cmdPool, nullptr);
    return nullptr;
  };
  VkResult r;
  VkCommandPoolCreateInfo cp{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  cp.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
  cp.queueFamilyIndex = info.queueFamily;
  if ((r = fn.vkCreateCommandPool(device, &cp, nullptr, &l->cmdPool))) return fail("vkCreateCommandPool", r);
  VkCommandBufferAllocateInfo ca{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ca.commandPool = l->cmdPool;
  ca.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ca.commandBufferCount = 1;
  if ((r = fn.vkAllocateCommandBuffers(device, &ca, &l->cmd))) return fail("vkAllocateCommandBuffers", r);
  VkFenceCreateInfo fc{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if ((r = fn.vkCreateFence(device, &fc, nullptr, &l->fence))) return fail("vkCreateFence", r);
  if (info.timestamps) {
    VkQueryPoolCreateInfo qc{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qc.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qc.queryCount = 2;
    if ((r = fn.vkCreateQueryPool(device, &qc, nullptr, &l->queries))) return fail("vkCreateQueryPool", r);
  }
  VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, info.limits.maxBindings + 1};
  VkDescriptorPoolCreateInfo dp{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  dp.maxSets = 2;
  dp.poolSizeCount = 1;
  dp.pPoolSizes = &ps;
  if ((r = fn.vkCreateDescriptorPool(device, &dp, nullptr, &l->descPool))) return fail("vkCreateDescriptorPool", r);
  VkBufferCreateInfo bc{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bc.size = 256;
  bc.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  bc.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if ((r = fn.vkCreateBuffer(device, &bc, nullptr, &l->control))) return fail("vkCreateBuffer(control)", r);
  VkMemoryRequirements req;
  fn.vkGetBufferMemoryRequirements(device, l->control, &req);
  if (!(req.memoryTypeBits & (1u << controlMemType))) {
    *err = "the control block's memory type does not suit a storage buffer";
    return fail("vkGetBufferMemoryRequirements", VK_ERROR_FEATURE_NOT_PRESENT);
  }
  VkMemoryAllocateInfo ma{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ma.allocationSize = req.size;
  ma.memoryTypeIndex = controlMemType;
  if ((r = fn.vkAllocateMemory(device, &ma, nullptr, &l->controlMem))) return fail("vkAllocateMemory(control)", r);
  if ((r = fn.vkBindBufferMemory(device, l->control, l->controlMem, 0))) return fail("vkBindBufferMemory(control)", r);
  void* p = nullptr;
  if ((r = fn.vkMapMemory(device, l->controlMem, 0, VK_WHOLE_SIZE, 0, &p))) return fail("vkMapMemory(control)", r);
  l->controlWords = static_cast<volatile uint32_t*>(p);
  l->controlWords[0] = 0;
  l->controlWords[1] = 0;
  Lane* raw = l.release();
  std::lock_guard<std::mutex> lk(laneMu);
  allLanes.push_back(raw);
  return raw;
}

void Context::ReleaseLane(Lane* l) {
  std::lock_guard<std::mutex> lk(laneMu);
  freeLanes.push_back(l);
}

std::shared_ptr<Context> OpenContext(const std::string& want, std::string* err) {
  auto ctx = std::make_shared<Context>();
  Instance in;
  if (!CreateInstance(&in, err)) return nullptr;
  ctx->instance = in.inst;  // owned by ctx from here (its destructor destroys it)
  ctx->ifn = in.fn;
  const InstanceFns& ifn = ctx->ifn;

  // Choose: by name, else by type rank; either way it needs a compute queue and Vulkan 1.1.
  VkPhysicalDevice chosen = VK_NULL_HANDLE;
  int chosenRank = 99;
  std::string names;
  for (VkPhysicalDevice pd : PhysicalDevices(in)) {
    VkPhysicalDeviceProperties p{};
    ifn.vkGetPhysicalDeviceProperties(pd, &p);
    names += (names.empty() ? "" : ", ") + std::string(p.deviceName);
    uint32_t ts = 0;
    if (p.apiVersion < VK_API_VERSION_1_1 || ComputeFamily(ifn, pd, &ts) < 0) continue;
    if (!want.empty()) {
      if (ContainsNoCase(p.deviceName, want)) {
        chosen = pd;
        break;
      }
      continue;
    }
    if (TypeRank(p.deviceType) < chosenRank) chosen = pd, chosenRank = TypeRank(p.deviceType);
  }
  if (!chosen) {
    *err = want.empty() ? "no Vulkan 1.1 device with a compute queue"
                        : "no Vulkan 1.1 compute device matches '" + want + "'";
    if (!names.empty()) *err += " (devices: " + names + ")";
    else *err += " (the loader found no devices)";
    return nullptr;
  }
  ctx->phys = chosen;
  DeviceInfo& di = ctx->info;

  std::vector<std::string> exts = DeviceExtensions(ifn, chosen);
  VkPhysicalDeviceProperties base{};
  ifn.vkGetPhysicalDeviceProperties(chosen, &base);
  const bool v12 = base.apiVersion >= VK_API_VERSION_1_2;
  const bool haveHost = Has(exts, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  const bool haveRob2 = Has(exts, VK_EXT_ROBUSTNESS_2_EXTENSION_NAME);
  const bool haveDrv = v12 || Has(exts, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
  if (!haveHost || !haveRob2) {
    *err = std::string(base.deviceName) + " lacks " +
           (!haveHost ? VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME : VK_EXT_ROBUSTNESS_2_EXTENSION_NAME) +
           " (needed for zero-copy buffers bounded exactly to each binding)";
    return nullptr;
  }

  // ---- properties ----
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceExternalMemoryHostPropertiesEXT hostp{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
  VkPhysicalDeviceRobustness2PropertiesEXT rob2p{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ROBUSTNESS_2_PROPERTIES_EXT};
  p2.pNext = &sub;
  sub.pNext = &hostp;
  hostp.pNext = &rob2p;
  if (haveDrv) rob2p.pNext = &drv;
  ifn.vkGetPhysicalDeviceProperties2(chosen, &p2);
  const VkPhysicalDeviceLimits& L = p2.properties.limits;

  // ---- features ----
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDevice16BitStorageFeatures s16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
  VkPhysicalDeviceRobustness2FeaturesEXT rob2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ROBUSTNESS_2_FEATURES_EXT};
  VkPhysicalDeviceFaultFeaturesEXT faultf{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FAULT_FEATURES_EXT};
  const bool haveFault = Has(exts, VK_EXT_DEVICE_FAULT_EXTENSION_NAME);
  // 1.2+: the Vulkan11/12 aggregates; 1.1: only what is core there (16-bit storage).
  if (v12) {
    f2.pNext = &f11;
    f11.pNext = &f12;
    f12.pNext = &rob2;
  } else {
    f2.pNext = &s16;
    s16.pNext = &rob2;
  }
  if (haveFault) rob2.pNext = &faultf;
  ifn.vkGetPhysicalDeviceFeatures2(chosen, &f2);
  if (p2.properties.limits.maxBoundDescriptorSets < 2) {
    *err = std::string(base.deviceName) + " binds fewer than 2 descriptor sets";
    return nullptr;
  }
  if (!f2.features.robustBufferAccess || !rob2.robustBufferAccess2) {
    *err = std::string(base.deviceName) + " lacks robustBufferAccess2";
    return nullptr;
  }

  // Enable only what guest programs may need (never buffer device address and the like).
  VkPhysicalDeviceFeatures2 e2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  VkPhysicalDeviceVulkan11Features e11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features e12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDevice16BitStorageFeatures es16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
  VkPhysicalDeviceRobustness2FeaturesEXT erob2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ROBUSTNESS_2_FEATURES_EXT};
  e2.features.robustBufferAccess = VK_TRUE;
  e2.features.shaderInt64 = f2.features.shaderInt64;
  e2.features.shaderFloat64 = f2.features.shaderFloat64;
  e2.features.shaderInt16 = f2.features.shaderInt16;
  erob2.robustBufferAccess2 = VK_TRUE;
  erob2.nullDescriptor = rob2.nullDescriptor;
  bool st16, st8 = false, f16 = false, i8 = false, a64 = false;
  if (v12) {
    e11.storageBuffer16BitAccess = f11.storageBuffer16BitAccess;
    e11.uniformAndStorageBuffer16BitAccess = f11.uniformAndStorageBuffer16BitAccess;
    e11.storagePushConstant16 = f11.storagePushConstant16;
    e12.storageBuffer8BitAccess = f12.storageBuffer8BitAccess;
    e12.uniformAndStorageBuffer8BitAccess = f12.uniformAndStorageBuffer8BitAccess;
    e12.storagePushConstant8 = f12.storagePushConstant8;
    e12.shaderFloat16 = f12.shaderFloat16;
    e12.shaderInt8 = f12.shaderInt8;
    e12.shaderBufferInt64Atomics = f12.shaderBufferInt64Atomics;
    e12.vulkanMemoryModel = f12.vulkanMemoryModel;
    e12.vulkanMemoryModelDeviceScope = f12.vulkanMemoryModelDeviceScope;
    e2.pNext = &e11;
    e11.pNext = &e12;
    e12.pNext = &erob2;
    st16 = f11.storageBuffer16BitAccess && f11.uniformAndStorageBuffer16BitAccess &&
           f11.storagePushConstant16;
    st8 = f12.storageBuffer8BitAccess && f12.uniformAndStorageBuffer8BitAccess &&
          f12.storagePushConstant8;
    f16 = f12.shaderFloat16;
    i8 = f12.shaderInt8;
    a64 = f12.shaderBufferInt64Atomics;
  } else {
    es16.storageBuffer16BitAccess = s16.storageBuffer16BitAccess;
    es16.uniformAndStorageBuffer16BitAccess = s16.uniformAndStorageBuffer16BitAccess;
    es16.storagePushConstant16 = s16.storagePushConstant16;
    e2.pNext = &es16;
    es16.pNext = &erob2;
    st16 = s16.storageBuffer16BitAccess && s16.uniformAndStorageBuffer16BitAccess &&
           s16.storagePushConstant16;
  }

  // Timeline semaphores order the device-memory path's upload, compute and download queues.
  const bool timeline = v12 && f12.timelineSemaphore;
  if (timeline) e12.timelineSemaphore = VK_TRUE;
  const bool hostQueryReset = v12 && f12.hostQueryReset;
  if (hostQueryReset) e12.hostQueryReset = VK_TRUE;
  // VK_EXT_device_fault: after a loss, the driver says what faulted (address, kind, vendor
  // text); MarkLost puts it in the one log line.
  VkPhysicalDeviceFaultFeaturesEXT efault{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FAULT_FEATURES_EXT};
  const bool deviceFault = haveFault && faultf.deviceFault;
  if (deviceFault) {
    efault.deviceFault = VK_TRUE;
    erob2.pNext = &efault;
  }
  // Buffer device address only for the fault-injection test hook (VUGPU_TEST_HOOKS=1, a GPU):
  // guest programs can never use it (the validator refuses PhysicalStorageBufferAddresses), and
  // a server started without the hooks never enables it.
  const char* hooks = getenv("VUGPU_TEST_HOOKS");
  const bool faultInjection = hooks && std::string(hooks) == "1" && v12 && f12.bufferDeviceAddress &&
                              base.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU;
  if (faultInjection) e12.bufferDeviceAddress = VK_TRUE;

  uint32_t tsBits = 0;
  int fam = ComputeFamily(ifn, chosen, &tsBits);
  // A transfer-only family (a GPU's copy engines) for uploads and downloads: up to two queues,
  // so host→device and device→host copies run at once (PCIe is full duplex).
  int xfam = -1;
  uint32_t xcount = 0;
  {
    uint32_t n = 0;
    ifn.vkGetPhysicalDeviceQueueFamilyProperties(chosen, &n, nullptr);
    std::vector<VkQueueFamilyProperties> q(n);
    ifn.vkGetPhysicalDeviceQueueFamilyProperties(chosen, &n, q.data());
    for (uint32_t i = 0; i < n; i++) {
      VkQueueFlags fl = q[i].queueFlags;
      if ((fl & VK_QUEUE_TRANSFER_BIT) && !(fl & (VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT)) &&
          q[i].queueCount > 0 && int(i) != fam) {
        xfam = int(i);
        xcount = std::min<uint32_t>(2, q[i].queueCount);
        break;
      }
    }
  }
  // One compute queue per way (Context::wayQs) where the family has several: a dispatch that
  // never ends then blocks only its own queue. VUGPU_VK_COMPUTE_QUEUES=n caps them (A/B
  // measurement; 1 = every VM on one queue: Tuning::computeQueues).
  uint32_t nComp = 1;
  {
    uint32_t n = 0;
    ifn.vkGetPhysicalDeviceQueueFamilyProperties(chosen, &n, nullptr);
    std::vector<VkQueueFamilyProperties> q(n);
    ifn.vkGetPhysicalDeviceQueueFamilyProperties(chosen, &n, q.data());
    const uint32_t cap = Tune().computeQueues ? Tune().computeQueues : Context::kMaxWayQueues;
    nComp = std::max<uint32_t>(1, std::min({q[size_t(fam)].queueCount, cap, Context::kMaxWayQueues}));
  }
  float prio[Context::kMaxWayQueues];
  std::fill(prio, prio + Context::kMaxWayQueues, 1.0f);
  VkDeviceQueueCreateInfo qcis[2] = {{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO},
                                     {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}};
  qcis[0].queueFamilyIndex = uint32_t(fam);
  qcis[0].queueCount = nComp;
  qcis[0].pQueuePriorities = prio;
  qcis[1].queueFamilyIndex = uint32_t(xfam);
  qcis[1].queueCount = xcount;
  qcis[1].pQueuePriorities = prio;
  std::vector<const char*> enable = {VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME,
                                     VK_EXT_ROBUSTNESS_2_EXTENSION_NAME};
  if (!v12 && haveDrv) enable.push_back(VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
  if (deviceFault) enable.push_back(VK_EXT_DEVICE_FAULT_EXTENSION_NAME);
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &e2;
  dci.queueCreateInfoCount = xfam >= 0 ? 2 : 1;
  dci.pQueueCreateInfos = qcis;
  dci.enabledExtensionCount = uint32_t(enable.size());
  dci.ppEnabledExtensionNames = enable.data();
  VkResult r = ifn.vkCreateDevice(chosen, &dci, nullptr, &ctx->device);
  if (r != VK_SUCCESS) {
    ctx->device = VK_NULL_HANDLE;
    *err = std::string("vkCreateDevice(") + base.deviceName + "): " + ResultName(r);
    return nullptr;
  }
  RegisterContext(ctx.get());
#define X(n) ctx->fn.n = reinterpret_cast<PFN_##n>(ifn.vkGetDeviceProcAddr(ctx->device, #n));
  VUGPU_VK_DEVICE_FNS(X)
#undef X
#define X(n) if (!ctx->fn.n) { *err = "device entry point " #n " missing"; return nullptr; }
  VUGPU_VK_DEVICE_FNS(X)
#undef X
  if (hostQueryReset)
    ctx->fn.vkResetQueryPool = reinterpret_cast<PFN_vkResetQueryPool>(ifn.vkGetDeviceProcAddr(ctx->device, "vkResetQueryPool"));
  if (deviceFault)
    ctx->fn.vkGetDeviceFaultInfoEXT =
        reinterpret_cast<PFN_vkGetDeviceFaultInfoEXT>(ifn.vkGetDeviceProcAddr(ctx->device, "vkGetDeviceFaultInfoEXT"));
  ctx->fn.vkGetDeviceQueue(ctx->device, uint32_t(fam), 0, &ctx->queue);
  ctx->compQ = {ctx->queue, &ctx->queueMu};
  ctx->wayQs.push_back(ctx->compQ);
  for (uint32_t i = 1; i < nComp; i++) {
    VkQueue q = VK_NULL_HANDLE;
    ctx->fn.vkGetDeviceQueue(ctx->device, uint32_t(fam), i, &q);
    ctx->wayQs.push_back({q, &ctx->wayMu[i]});
  }
  di.computeQueues = nComp;
  ctx->upQ = ctx->downQ = ctx->compQ;
  if (xfam >= 0) {
    VkQueue q0 = VK_NULL_HANDLE, q1 = VK_NULL_HANDLE;
    ctx->fn.vkGetDeviceQueue(ctx->device, uint32_t(xfam), 0, &q0);
    ctx->upQ = {q0, &ctx->xferMu[0]};
    ctx->downQ = ctx->upQ;
    if (xcount > 1) {
      ctx->fn.vkGetDeviceQueue(ctx->device, uint32_t(xfam), 1, &q1);
      ctx->downQ = {q1, &ctx->xferMu[1]};
    }
  }
  di.transferFamily = xfam >= 0 ? uint32_t(xfam) : uint32_t(fam);
  di.transferQueues = xfam >= 0 ? xcount : 0;

  // The cancel word must be device-local where a running kernel does not see host memory
  // (NVIDIA, ../shared/notes/vulkan.md); plain host-coherent memory is the fallback.
  ifn.vkGetPhysicalDeviceMemoryProperties(chosen, &ctx->memProps);
  int dl = -1, hv = -1;
  const VkMemoryPropertyFlags coh = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  for (uint32_t i = 0; i < ctx->memProps.memoryTypeCount; i++) {
    VkMemoryPropertyFlags f = ctx->memProps.memoryTypes[i].propertyFlags;
    if ((f & coh) != coh) continue;
    if ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && dl < 0) dl = int(i);
    if (hv < 0) hv = int(i);
  }
  if (dl < 0 && hv < 0) {
    *err = std::string(base.deviceName) + " has no host-visible coherent memory for the control block";
    return nullptr;
  }
  ctx->controlMemType = uint32_t(dl >= 0 ? dl : hv);
  // Operands of the device-memory path: device-local memory the host cannot map (a GPU's own
  // memory) before any device-local type; bounce buffers (when a window cannot be imported):
  // host-cached system memory first.
  {
    int dev = -1, devAny = -1, bounce = -1, bounceAny = -1;
    for (uint32_t i = 0; i < ctx->memProps.memoryTypeCount; i++) {
      VkMemoryPropertyFlags f = ctx->memProps.memoryTypes[i].propertyFlags;
      if (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) {
        if (!(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && dev < 0) dev = int(i);
        if (devAny < 0) devAny = int(i);
      }
      if ((f & coh) == coh) {
        if ((f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) && !(f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && bounce < 0)
          bounce = int(i);
        if (bounceAny < 0) bounceAny = int(i);
      }
    }
    if (dev < 0) dev = devAny;
    if (bounce < 0) bounce = bounceAny;
    ctx->devMemType = dev >= 0 ? uint32_t(dev) : UINT32_MAX;
    ctx->bounceMemType = bounce >= 0 ? uint32_t(bounce) : UINT32_MAX;
  }
  // The memory path (docs/architecture.md, "GPU memory"): a discrete GPU reads imported host
  // memory over PCIe (a small fraction of its own memory's bandwidth), so its kernels run
  // on device-local copies; a CPU device (lavapipe) or an integrated GPU computes on host
  // memory, zero-copy. VUGPU_VK_MEMORY=import|device overrides (measurement, tests).
  {
    bool want = base.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
    if (Tune().memory == Tuning::Memory::Device) want = true;
    else if (Tune().memory == Tuning::Memory::Import) want = false;
    di.staging = want && timeline && ctx->devMemType != UINT32_MAX;
    di.memoryMode = di.staging ? "device" : "import";
  }

  // ---- report ----
  di.name = base.deviceName;
  di.type = TypeName(base.deviceType);
  di.cpuDevice = base.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  di.apiVersion = base.apiVersion;
  di.api = ApiString(base.apiVersion);
  di.vendorId = base.vendorID;
  di.deviceId = base.deviceID;
  di.driverVersion = base.driverVersion;
  if (haveDrv) {
    di.driverId = uint32_t(drv.driverID);
    di.driverName = drv.driverName;
    di.driverInfo = drv.driverInfo;
  }
  di.queueFamily = uint32_t(fam);
  di.timestamps = tsBits > 0 && L.timestampPeriod > 0;
  // VUGPU_VK_CMD_QUERY_RESET=1: reset them in the command buffer anyway (A/B measurement).
  di.hostQueryReset = ctx->fn.vkResetQueryPool != nullptr && !Tune().cmdQueryReset;
  di.timestampPeriod = L.timestampPeriod;
  di.timestampMask = tsBits >= 64 ? ~0ull : ((1ull << tsBits) - 1);
  di.importAlign = uint32_t(std::max<VkDeviceSize>(hostp.minImportedHostPointerAlignment, 1));
  di.robustStorageAlign = uint32_t(std::max<VkDeviceSize>(rob2p.robustStorageBufferAccessSizeAlignment, 1));
  di.nullDescriptor = rob2.nullDescriptor;
  di.cancelWordDeviceLocal = dl >= 0;
  di.deviceFault = ctx->fn.vkGetDeviceFaultInfoEXT != nullptr;
  di.faultInjection = faultInjection;

  spirv::Limits& lim = di.limits;  // starts at the envelope (program.h defaults)
  // Set 0 holds the guest's bindings, set 1 the control block.
  lim.maxBindings = std::min({lim.maxBindings, L.maxPerStageDescriptorStorageBuffers - 1,
                              L.maxDescriptorSetStorageBuffers - 1});
  lim.maxPushBytes = std::min(lim.maxPushBytes, L.maxPushConstantsSize);
  lim.maxWgInvocations = std::min(lim.maxWgInvocations, L.maxComputeWorkGroupInvocations);
  for (int i = 0; i < 3; i++) lim.maxWgSize[i] = std::min(lim.maxWgSize[i], L.maxComputeWorkGroupSize[i]);
  lim.subgroupSize = sub.subgroupSize ? sub.subgroupSize : 1;
  lim.loopLimit = haveDrv && drv.driverID == VK_DRIVER_ID_MESA_LLVMPIPE ? kLavapipeLoopLimit : 0;
  lim.maxSharedBytes = std::min(lim.maxSharedBytes, L.maxComputeSharedMemorySize);
  uint32_t feat = 0;
  if (f2.features.shaderFloat64) feat |= spirv::F_FLOAT64;
  if (f2.features.shaderInt64) feat |= spirv::F_INT64;
  if (f16 && st16) feat |= spirv::F_FLOAT16;
  if (i8 && st8) feat |= spirv::F_INT8;
  if (f2.features.shaderInt16 && st16) feat |= spirv::F_INT16;
  // SUBGROUP = basic, vote, arithmetic, ballot, shuffle (+ relative). Not clustered: lavapipe
  // 22.3 lacks it (supportedOperations 0xbf).
  const VkSubgroupFeatureFlags subOps =
      VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_VOTE_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT |
      VK_SUBGROUP_FEATURE_BALLOT_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT |
      VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT;
  if ((sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) && (sub.supportedOperations & subOps) == subOps)
    feat |= spirv::F_SUBGROUP;
  if (a64 && f2.features.shaderInt64) feat |= spirv::F_INT64_ATOMICS;
  lim.features = feat;
  for (int i = 0; i < 3; i++) di.launch.maxGrid[i] = std::min(kEnvMaxGrid, L.maxComputeWorkGroupCount[i]);
  di.launch.maxBufferBytes = std::min<uint64_t>(kEnvMaxBufferBytes, L.maxStorageBufferRange);
  di.maxStorageRange = L.maxStorageBufferRange;
  di.launch.bufferAlign = std::max<uint32_t>(kEnvBufferAlign, uint32_t(L.minStorageBufferOffsetAlignment));
  static std::atomic<uint64_t> generations{0};
  ctx->generation = ++generations;
  ctx->wanted = want;
  return ctx;
}

namespace {
std::mutex g_curMu;
// Heap-held and never destroyed at exit: destroying a device with a runaway dispatch hangs.
std::shared_ptr<Context>* g_cur = new std::shared_ptr<Context>();
std::mutex g_rebuildMu;
uint64_t g_lastRebuildNs = 0;
}  // namespace

std::shared_ptr<Context> CurrentContext() {
  std::lock_guard<std::mutex> lk(g_curMu);
  return *g_cur;
}

void SetCurrentContext(std::shared_ptr<Context> c) {
  std::shared_ptr<Context> old;
  {
    std::lock_guard<std::mutex> lk(g_curMu);
    old = std::move(*g_cur);
    *g_cur = std::move(c);
  }
  DropWays();
  // old is released here, outside the lock (its destructor may wait for the device).
}

namespace {
// Way contexts (WayContext): each way (VM) beyond the first runs on a device of its own.
// lavapipe runs a dispatch's workgroups on compute threads that belong to its VkInstance, first
// come first served, so one way's endless program would hold every later dispatch of every device
// of that instance; the host's scheduler then shares the cores between the ways' threads. A GPU
// time-slices between contexts (each VkDevice is one), not between the queues of one context: an
// endless dispatch whose workgroups fill the SMs keeps another queue's dispatch of the same device
// from starting until it ends (docs/results.md, "A tenant's hang", the H200 rows).
// Heap-held and never destroyed at exit (as g_cur).
constexpr uint32_t kCpuWays = kMaxCpuWays;
std::mutex g_waysMu;
std::vector<std::shared_ptr<Context>>* g_ways = new std::vector<std::shared_ptr<Context>>(kCpuWays);
uint64_t g_waysFor = 0;  // the serving context's generation they were opened beside
bool g_waysFailed[kCpuWays] = {};
bool g_waysOpening[kCpuWays] = {};  // a way's device being opened (outside g_waysMu)
std::condition_variable g_waysOpened;

void RetireWays(std::vector<std::shared_ptr<Context>>* out) {
  for (auto& w : *g_ways) {
    if (w) w->retired.store(true);
    out->push_back(std::move(w));
    w = nullptr;
  }
  std::fill(g_waysFailed, g_waysFailed + kCpuWays, false);
}
}  // namespace

void DropWays() {
  std::vector<std::shared_ptr<Context>> old;
  {
    std::lock_guard<std::mutex> lk(g_waysMu);
    RetireWays(&old);
    g_waysFor = 0;
  }
  // Released outside the lock; programs that built on them let go at their next launch.
}

std::shared_ptr<Context> WayContext(const std::shared_ptr<Context>& cur, uint32_t way) {
  const uint32_t n = Tune().cpuWays;  // 1 = every VM on the one device (A/B measurement)
  const uint32_t i = way % n;
  if (i == 0) return cur;
  std::vector<std::shared_ptr<Context>> old;
  std::unique_lock<std::mutex> lk(g_waysMu);
  for (;;) {
    if (g_waysFor != cur->generation) {
      RetireWays(&old);
      g_waysFor = cur->generation;
    }
    std::shared_ptr<Context>& slot = (*g_ways)[i];
    if (slot && slot->lost.load()) {
      slot->retired.store(true);
      old.push_back(std::move(slot));
      slot = nullptr;
    }
    if (slot) return slot;
    if (g_waysFailed[i]) return cur;
    if (!g_waysOpening[i]) break;
    g_waysOpened.wait(lk);  // this way's own open, by another of its threads
  }
  // Opened outside the lock: a GPU's device is slow to open (docs/results.md, the H200 neighbour
  // rows), and another VM's launch must not wait for it (its first launch after this VM's
  // arrival did, a whole open).
  g_waysOpening[i] = true;
  const uint64_t generation = cur->generation;
  lk.unlock();
  std::string err;
  std::shared_ptr<Context> w = OpenContext(cur->wanted, &err);
  lk.lock();
  g_waysOpening[i] = false;
  g_waysOpened.notify_all();
  if (!w || w->info.name != cur->info.name) {
    fprintf(stderr, "vugpu: no device of its own for way %u beside '%s' (%s): it shares the serving device\n", i,
            cur->info.name.c_str(), w ? "another device opened" : err.c_str());
    g_waysFailed[i] = true;
    if (w) old.push_back(std::move(w));
    return cur;
  }
  if (g_waysFor != generation) {  // the serving device was rebuilt meanwhile: this one is stale
    old.push_back(std::move(w));
    return cur;
  }
  (*g_ways)[i] = w;
  return w;
}

namespace {
std::mutex g_lossMu;
std::string g_lastLoss;  // the last loss's log text, for vulkanStats

const char* FaultAddressKind(VkDeviceFaultAddressTypeEXT t) {
  switch (t) {
    case VK_DEVICE_FAULT_ADDRESS_TYPE_READ_INVALID_EXT: return "read of";
    case VK_DEVICE_FAULT_ADDRESS_TYPE_WRITE_INVALID_EXT: return "write to";
    case VK_DEVICE_FAULT_ADDRESS_TYPE_EXECUTE_INVALID_EXT: return "execution at";
    case VK_DEVICE_FAULT_ADDRESS_TYPE_INSTRUCTION_POINTER_UNKNOWN_EXT:
    case VK_DEVICE_FAULT_ADDRESS_TYPE_INSTRUCTION_POINTER_INVALID_EXT:
    case VK_DEVICE_FAULT_ADDRESS_TYPE_INSTRUCTION_POINTER_FAULT_EXT: return "instruction at";
    default: return "address";
  }
}

// What the lost device says faulted (VK_EXT_device_fault), as "; device fault: …", or "".
std::string FaultText(Context& c) {
  if (!c.fn.vkGetDeviceFaultInfoEXT) return "";
  VkDeviceFaultCountsEXT counts{VK_STRUCTURE_TYPE_DEVICE_FAULT_COUNTS_EXT};
  if (c.fn.vkGetDeviceFaultInfoEXT(c.device, &counts, nullptr) != VK_SUCCESS) return "";
  counts.addressInfoCount = std::min<uint32_t>(counts.addressInfoCount, 4);
  counts.vendorInfoCount = std::min<uint32_t>(counts.vendorInfoCount, 4);
  counts.vendorBinarySize = 0;
  std::vector<VkDeviceFaultAddressInfoEXT> addr(counts.addressInfoCount);
  std::vector<VkDeviceFaultVendorInfoEXT> vendor(counts.vendorInfoCount);
  VkDeviceFaultInfoEXT fi{VK_STRUCTURE_TYPE_DEVICE_FAULT_INFO_EXT};
  fi.pAddressInfos = addr.data();
  fi.pVendorInfos = vendor.data();
  VkResult r = c.fn.vkGetDeviceFaultInfoEXT(c.device, &counts, &fi);
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) return "";
  std::string t = std::string("; device fault: ") + (fi.description[0] ? fi.description : "no description");
  char line[160];
  for (uint32_t i = 0; i < counts.addressInfoCount; i++) {
    snprintf(line, sizeof line, "; %s 0x%llx (±0x%llx)", FaultAddressKind(addr[i].addressType),
             (unsigned long long)addr[i].reportedAddress, (unsigned long long)addr[i].addressPrecision);
    t += line;
  }
  for (uint32_t i = 0; i < counts.vendorInfoCount; i++) {
    snprintf(line, sizeof line, "; %.100s (code 0x%llx)", vendor[i].description,
             (unsigned long long)vendor[i].vendorFaultCode);
    t += line;
  }
  return t;
}
}  // namespace

std::string LastLoss() {
  std::lock_guard<std::mutex> lk(g_lossMu);
  return g_lastLoss;
}

int MarkLost(Context& c, const char* where, bool real) {
  c.lost.store(true);
  if (!c.lostLogged.exchange(true)) {
    GetImportStats().losses++;
    std::string what = std::string(where) + (real ? FaultText(c) : "");
    fprintf(stderr,
            "vugpu: Vulkan device '%s' lost (%s): its queued and running launches fail with ENODEV "
            "(channel error ENGINE_LOST); the device is being rebuilt\n",
            c.info.name.c_str(), what.c_str());
    std::lock_guard<std::mutex> lk(g_lossMu);
    g_lastLoss = what;
  }
  return -ENODEV;
}

bool RebuildAfterLoss(const Context& lost) {
  std::lock_guard<std::mutex> lk(g_rebuildMu);
  std::shared_ptr<Context> cur = CurrentContext();
  if (!cur) return false;                       // closed meanwhile
  if (cur.get() != &lost && !cur->lost) return true;  // someone else rebuilt it
  // After a failed attempt, one per second at most: a GPU that is really gone must not be
  // reopened in a loop by every launch.
  uint64_t now = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  if (g_lastRebuildNs && now - g_lastRebuildNs < 1'000'000'000ull) return false;
  std::string err;
  std::shared_ptr<Context> fresh = OpenContext(cur->wanted, &err);
  if (!fresh) {
    g_lastRebuildNs = now;
    fprintf(stderr, "vugpu: Vulkan device rebuild failed: %s\n", err.c_str());
    return false;
  }
  g_lastRebuildNs = 0;
  GetImportStats().rebuilds++;
  fprintf(stderr, "vugpu: Vulkan device '%s' rebuilt; programs compile again at their next launch\n",
          fresh->info.name.c_str());
  std::lock_guard<std::mutex> lk2(g_curMu);
  if (g_cur->get() != cur.get()) return true;  // closed or replaced meanwhile: keep that
  g_cur->swap(fresh);  // the lost one leaves with `fresh` after g_curMu is unlocked
  return true;
}

}  // namespace vugpu::vk
