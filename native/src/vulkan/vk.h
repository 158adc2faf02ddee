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
#include <shared_mutex>
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
  X(vkGetBufferMemoryRequirements) X(vkGetMemoryHostPointerPropertiesEXT)                    \
  X(vkCmdCopyBuffer) X(vkCmdDispatchBase) X(vkCreateSemaphore) X(vkDestroySemaphore)        \
  X(vkCmdFillBuffer)

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
  // Optional (Vulkan 1.2 hostQueryReset): set only when the feature was enabled.
  PFN_vkResetQueryPool vkResetQueryPool = nullptr;
  // Optional (VK_EXT_device_fault): what the device says faulted, after a loss.
  PFN_vkGetDeviceFaultInfoEXT vkGetDeviceFaultInfoEXT = nullptr;
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
  bool hostQueryReset = false;        // queries reset by the host (a reset in the command buffer
                                      // costs a GPU's launch microseconds: bench/vulkan-floor.c)
  double timestampPeriod = 1.0;       // ns per tick
  uint64_t timestampMask = ~0ull;
  uint32_t importAlign = 4096;        // minImportedHostPointerAlignment
  uint32_t robustStorageAlign = 1;    // robustStorageBufferAccessSizeAlignment (bounds rounding)
  bool nullDescriptor = false;        // zero-length bindings become null descriptors
  bool cancelWordDeviceLocal = false; // control block in DEVICE_LOCAL|HOST_VISIBLE memory
  bool cpuDevice = false;             // VK_PHYSICAL_DEVICE_TYPE_CPU (lavapipe): never spin-wait
  bool deviceFault = false;           // VK_EXT_device_fault: a loss's log line says what faulted
  bool faultInjection = false;        // buffer device address on for vulkanInjectFault (test hooks, GPUs)
  uint32_t queueFamily = 0;
  // Device-memory path (staging.cc): windows are copied into DEVICE_LOCAL buffers per launch
  // instead of bound zero-copy. On for GPUs whose imported host memory is not device-local.
  bool staging = false;
  std::string memoryMode;             // "import" (zero-copy) or "device" (staged)
  uint32_t transferFamily = 0;        // queue family of the upload/download queues
  uint32_t transferQueues = 0;        // distinct transfer queues (0 = copies on the compute queue)
  uint32_t computeQueues = 1;         // compute queues, one per way (Context::wayQs)
  uint64_t maxStorageRange = 0;       // VkPhysicalDeviceLimits::maxStorageBufferRange
};

// A host range imported as device-visible memory (VK_EXT_external_memory_host), with a buffer
// over all of it. Cached per Context while the range lies in an engine window (staging.cc).
// Serial numbers for pipelines and imports: unique for the process's life.
inline uint64_t NextSerial() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

struct HostImport {
  uint64_t start = 0, size = 0;
  VkDeviceMemory mem = VK_NULL_HANDLE;
  VkBuffer buf = VK_NULL_HANDLE;
  uint64_t serial = 0;    // unique per import made (a freed handle's value may come back)
  uint32_t users = 0;     // dispatches using it now
  bool cached = false;    // in Context::imports (else freed after its dispatch)
  bool dead = false;      // its window was unmapped while in use: freed by the last user
  uint64_t lastUse = 0;
};

// A pooled buffer of one memory type (device-local operands, or host-visible bounce buffers).
struct PoolBuf {
  uint64_t size = 0;
  uint32_t memType = 0;
  VkDeviceMemory mem = VK_NULL_HANDLE;
  VkBuffer buf = VK_NULL_HANDLE;
  void* map = nullptr;    // host-visible bounce buffers only
  uint64_t serial = 0;    // unique per buffer made (a lane's replayKey names it)
};

// A piece of VRAM kept on the device between launches (resident.cc): device-local memory mirroring
// VRAM [base, base + size) at the same offsets, and which of its 4 KiB pages hold the VRAM's
// current bytes. Pages become valid when a launch uploads them and stop being valid when the
// engine writes those VRAM bytes some other way (InvalidateVram).
struct Mirror {
  uint64_t base = 0, size = 0;
  VkDeviceMemory mem = VK_NULL_HANDLE;
  VkBuffer buf = VK_NULL_HANDLE;
  uint64_t serial = 0;          // unique per mirror made (a lane's replayKey names it)
  std::vector<uint8_t> valid;   // per page
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
  // Device-memory path: one command buffer per panel and stage, timeline semaphores between the
  // upload, compute and download queues (values only grow: lane->tl is the last one used).
  VkCommandPool xferPool = VK_NULL_HANDLE;  // transfer family (== cmdPool without one)
  std::vector<VkCommandBuffer> upCmd, compCmd, downCmd;
  VkSemaphore upSem = VK_NULL_HANDLE, compSem = VK_NULL_HANDLE;
  uint64_t tl = 0;
  // What the lane's command buffers and descriptor sets hold when they can be submitted again
  // unchanged (a launch identical to the lane's last one, none of its windows bounced): program,
  // import and device-buffer serials, grid, parameters, windows, the staging plan. Empty =
  // nothing replayable. replayBytes: that recording's upload, download and zero-fill bytes.
  std::vector<uint64_t> replayKey;
  VkDescriptorSet replaySets[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};
  uint64_t replayBytes[3] = {0, 0, 0};
};

// The queues a dispatch submits to; they may all be one queue (then one mutex).
struct QueueRef {
  VkQueue queue = VK_NULL_HANDLE;
  std::mutex* mu = nullptr;
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
  uint64_t generation = 0;  // which device build this is (rebuilt after VK_ERROR_DEVICE_LOST)
  std::string wanted;       // the device name it was opened with (a rebuild opens the same)

  // Device-memory path: the upload and download queues (== queue without a transfer family),
  // memory types, the import cache and the buffer pools (staging.cc).
  QueueRef compQ, upQ, downQ;
  std::mutex xferMu[2];
  // Ways onto the device (docs/architecture.md, "What bounds a neighbour's stall"): a GPU's
  // compute family gives each way (VM) its own queue, so a dispatch that never ends holds only
  // its own queue and the hardware time-slices the others past it. wayQs[0] == compQ.
  static constexpr uint32_t kMaxWayQueues = 16;
  std::vector<QueueRef> wayQs;
  std::mutex wayMu[kMaxWayQueues];
  const QueueRef& WayQueue(uint32_t way) const { return wayQs[way % wayQs.size()]; }
  // A CPU device's launch time (submit.cc, CpuDeviceNs): the end of its queue's last launch.
  std::atomic<uint64_t> cpuLastDone{0};
  // A CPU device's way context left behind by a rebuild or close (WayContext): programs drop
  // what they built on it at their next launch.
  std::atomic<bool> retired{false};
  uint32_t devMemType = UINT32_MAX, bounceMemType = UINT32_MAX;
  std::mutex impMu;
  std::vector<HostImport*> imports;  // cached imports (ranges inside engine windows)
  uint64_t importClock = 0;
  std::mutex poolMu;
  std::vector<PoolBuf> pool;         // idle buffers
  uint64_t poolBytes = 0;
  std::mutex resMu;
  std::vector<Mirror*> mirrors;      // resident VRAM (resident.cc), made at first use

  ~Context();
  Lane* AcquireLane(std::string* err);
  void ReleaseLane(Lane* l);
};

// The process's current device context (null before vulkanOpen / after vulkanClose).
std::shared_ptr<Context> CurrentContext();
void SetCurrentContext(std::shared_ptr<Context> c);
// After a loss: open the same device again and make it current (at most one attempt per
// second; false when it did not open). Programs recompile on it at their next launch.
bool RebuildAfterLoss(const Context& lost);
// Marks c lost and logs once (per device build), with what the device says faulted when it
// can say (real: a loss the driver reported, not the test hook's simulation); returns -ENODEV.
int MarkLost(Context& c, const char* where, bool real = true);
// The last loss's text (where, and the device's fault report), "" before any.
std::string LastLoss();

// The context a launch of `way` runs on: `cur` itself on a GPU (its ways are queues, WayQueue);
// on a CPU device (lavapipe, whose one queue and compute threads belong to one VkInstance) a
// device of its own per way, opened at the way's first launch (way 0 and ways that could not be
// opened: cur). Dropped with cur (DropWays: a rebuild or vulkanClose).
std::shared_ptr<Context> WayContext(const std::shared_ptr<Context>& cur, uint32_t way);
void DropWays();

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
  uint64_t serial = 0;  // unique per pipeline built (a lane's replayKey names it)
  // What it was compiled from: after a device rebuild it is compiled again on the new device
  // (under objMu held exclusively; dispatches hold it shared while they use the objects).
  std::shared_ptr<const struct CompileInput> source;
  std::shared_mutex objMu;
  // The same program built on way contexts of a CPU device (WayContext), at their first launch.
  std::mutex wayMu;
  std::vector<std::shared_ptr<Program>> wayBuilds;
  ~Program();
  void DestroyObjects();
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
  // Built-in kernels only (never guest programs): bytes of binding i that one workgroup row
  // (y) reads/writes, 0 = the whole binding. The device-memory path then streams panels of
  // rows: uploads of panel p+1 and write-back of p-1 overlap the compute of panel p.
  std::vector<uint64_t> panelRowBytes;
  // Built-in kernels only (napi refuses it for other jobs, Dispatch ignores it): per binding,
  // nonzero = this dispatch writes every byte of the binding's window whatever the inputs, so
  // the device-memory path starts its device copy as zeros instead of uploading the guest's
  // bytes (the write-back stays). src/gpu/program/builtins.ts (BuiltinDispatch.overwrites) says
  // which plans may declare it.
  std::vector<uint8_t> overwrites;
  // Built-in GEMMs only (napi refuses it for other jobs): binding `binding` is read by rows of
  // k (rowBytes each) and the dispatch sums k over [u32 at k0Offset, u32 at k1Offset) of params,
  // adding into its output when the u32 at accumulateOffset is nonzero. The device-memory path
  // may then run the first panel as slices of k, each after its slab of the binding is up
  // (plan.cc, PlanKStream). binding == UINT32_MAX: none.
  struct KStream {
    uint32_t binding = UINT32_MAX;
    uint64_t rowBytes = 0;
    uint32_t k0Offset = 0, k1Offset = 0, accumulateOffset = 0;
  } kStream;
  // Built-ins may bind up to the device's maxStorageBufferRange (guest programs: the envelope).
  bool builtin = false;
  // The context generation the job was queued under: a job queued before a device loss fails
  // (-ENODEV) instead of running on the rebuilt device.
  uint64_t generation = 0;
  // Whose way onto the device it takes (the VM: WayQueue, WayContext).
  uint32_t way = 0;
  // Guest programs only: the VRAM offset of each binding's first byte (UINT64_MAX: not one
  // contiguous VRAM range), and the bindings the guest marked DEVICE_CACHED (hw-spec §6.3): those
  // run on the resident copy of their VRAM (resident.cc).
  std::vector<uint64_t> vram;
  uint32_t residentMask = 0;
};
// Pool thread: runs one launch (a batch of one). Returns 0, -EINVAL, -ECANCELED, -ELOOP, -ENODEV or -ENOMEM;
// *ns = device time from timestamps (wall time without them).
int DispatchProgram(const std::shared_ptr<Program>& prog, const std::shared_ptr<DispatchInput>& in,
                    const std::atomic<bool>& cancel, uint64_t* ns);
// Pool thread: a channel's launches in order, as one job (a guest submission's dispatches between
// two synchronization points, hw-spec §6.3 "Batched launches"). Each is submitted without waiting
// for the one before where nothing on the host side depends on it (program.cc, Overlaps); a
// barrier at the top of its command buffer orders it after them on the way's queue. Stops at the
// first launch that fails and returns its status; *done = the launches that completed before it
// (all of them on success). -EAGAIN: it yielded the device to another VM (its preempt was armed)
// after *done launches; the rest were not run. *ns = their device time.
int DispatchBatch(const std::vector<std::shared_ptr<Program>>& progs,
                  const std::vector<std::shared_ptr<DispatchInput>>& ins, const std::atomic<bool>& cancel,
                  uint64_t* ns, uint32_t* done);

// Import cost, measured by the dispatch path (for the bench/test report).
struct ImportStats {
  std::atomic<uint64_t> count{0}, ns{0};
  std::atomic<uint64_t> cacheHits{0};
  std::atomic<uint64_t> uploadBytes{0}, downloadBytes{0}, bounceBytes{0}, panels{0};
  std::atomic<uint64_t> zeroedBytes{0};  // overwritten bindings zero-filled on the device, not uploaded
  std::atomic<uint64_t> rebuilds{0}, losses{0};
  std::atomic<uint64_t> warmUps{0};  // new pipelines dispatched once on the warm-up device (CPU devices)
  std::atomic<uint64_t> kSlices{0};  // first panels run as slices of k (KStream)
  std::atomic<uint64_t> replays{0};  // launches that submitted their lane's last command buffer again
  // DEVICE_CACHED bindings: bytes found resident (not uploaded), bytes uploaded into a mirror,
  // mirror bytes allocated, pages invalidated by engine writes.
  std::atomic<uint64_t> residentBytes{0}, residentUploadBytes{0}, mirrorBytes{0}, residentDropped{0};
  std::atomic<uint64_t> computeNs{0};  // dispatch time from timestamps (first to last panel)
  // Where a dispatch's wall time goes on the pool thread (sums over `dispatches`): lane,
  // imports, staging and descriptors; recording; vkQueueSubmit; until the fence; timestamps
  // and write-back after it.
  std::atomic<uint64_t> dispatches{0}, setupNs{0}, recordNs{0}, queueSubmitNs{0}, waitNs{0}, finishNs{0};
};

// Engine windows (native/src/memory.cc tells us): an import of a range inside a live window may
// be cached; its unmapping drops every cached import over it, in every context. A transient
// window lives for one launch (guest system memory): the device-memory path copies it through a
// pooled pinned buffer instead of importing (pinning) its pages every time.
void NoteWindowMapped(uint64_t addr, uint64_t len, bool priv, bool transient);
bool InsideTransientWindow(uint64_t start, uint64_t size);
void NoteWindowUnmapped(uint64_t addr, uint64_t len);

// ---- resident VRAM (resident.cc) ----
// The VRAM's size (0: no residency); set by the engine when it opens the device.
void SetResidentVram(uint64_t bytes);
bool ResidencyOn(const Context& c);
// Pages of VRAM [vstart, vstart + len) (page-aligned, inside one mirror's span) on c's mirror:
// *m, and the runs to upload first (srcOffset relative to vstart, dstOffset in the mirror), which
// are marked valid now. false: no mirror for it (out of memory, or outside the VRAM).
bool PlanResident(Context& c, uint64_t vstart, uint64_t len, Mirror** m, std::vector<VkBufferCopy>* up);
// Undo PlanResident's marks for runs that were never submitted.
void UnplanResident(Context& c, Mirror* m, const std::vector<VkBufferCopy>& up);
// The engine wrote VRAM [off, off + len) other than through c's mirrors: those pages are stale on
// every context's mirror (except `keep`'s).
void InvalidateVram(uint64_t off, uint64_t len, const Context* keep = nullptr);
void InvalidateMirrors(Context& c, uint64_t off, uint64_t len);
void FreeMirrors(Context& c);

// ---- the device-memory path (staging.cc) ----
// A host range the dispatch uses: imported (cached or per-dispatch), or a bounce buffer.
VkResult AcquireImport(Context& c, uint64_t start, uint64_t size, HostImport** out);
void ReleaseImport(Context& c, HostImport* imp);
VkResult AcquirePoolBuf(Context& c, uint64_t size, bool hostVisible, PoolBuf* out);
void ReleasePoolBuf(Context& c, PoolBuf& b);
void FreeCaches(Context& c);
// Sets up what the lane needs for the staged path (lazily, first staged dispatch).
VkResult PrepareStagingLane(Context& c, Lane* l, size_t panels);
VkResult CreateBufferRaw(Context& c, uint64_t size, VkBufferUsageFlags usage, bool concurrent, VkBuffer* out);
ImportStats& GetImportStats();
// Closes the warm-up device (warmup.cc) when the serving device closes.
void DropWarmUp();
// Whether new pipelines are warmed up on a private device before their first launch (CPU
// devices with Mesa's shader cache on and VUGPU_VK_WARMUP not 0; warmup.cc).
bool WarmUpActive(const DeviceInfo& di);

const char* ResultName(VkResult r);

}  // namespace vugpu::vk

#include <napi.h>
namespace vugpu::vk {
// vulkanDirectRun (direct.cc): the benchmark's reference — a raw module run straight through
// Vulkan on the open device, with plain pinned-memory transfers, no engine.
Napi::Value DirectRunJs(const Napi::CallbackInfo& info);

}  // namespace vugpu::vk
