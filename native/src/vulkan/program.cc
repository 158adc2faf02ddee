// Program compile (prepare() + compute pipeline) and dispatch (zero-copy host imports, cancel
// word, timestamps) on pool threads.
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <map>

#include "../common.h"
#include "vk.h"

namespace vugpu::vk {

using addon::NowNs;

ImportStats& GetImportStats() {
  static ImportStats s;
  return s;
}

Program::~Program() { DestroyObjects(); }

void Program::DestroyObjects() {
  // Objects of a lost device are left with it (its context is never destroyed either).
  if (ctx && ctx->device && !ctx->lost.load()) {
    const DeviceFns& f = ctx->fn;
    f.vkDestroyPipeline(ctx->device, pipeline, nullptr);
    f.vkDestroyPipelineLayout(ctx->device, layout, nullptr);
    f.vkDestroyDescriptorSetLayout(ctx->device, set0, nullptr);
    f.vkDestroyDescriptorSetLayout(ctx->device, set1, nullptr);
  }
  pipeline = VK_NULL_HANDLE;
  layout = VK_NULL_HANDLE;
  set0 = set1 = VK_NULL_HANDLE;
  setBindings.clear();
}

namespace {

constexpr uint64_t kSpinUs = 100;  // polling before the first blocking wait (GPUs only; VUGPU_VK_SPIN_US)

// A CPU device's time for one launch, without timestamp queries: from its submission (or, when
// the queue was still running earlier work then, from the end of that work, as seen by the
// launch that waited for it) to this launch's fence. The device's one queue runs submissions in
// order, so the time other launches kept it busy is not charged here — what the timestamps
// measured, to a wake-up's accuracy. Built-in kernels on the CPU are charged their wall time too.
// Per device: each way's device (WayContext) has its own queue.
uint64_t CpuDeviceNs(std::atomic<uint64_t>& lastDone, uint64_t submitNs, uint64_t doneNs) {
  uint64_t prev = lastDone.load(std::memory_order_relaxed);
  while (prev < doneNs && !lastDone.compare_exchange_weak(prev, doneNs, std::memory_order_relaxed)) {
  }
  uint64_t start = prev > submitNs && prev <= doneNs ? prev : submitNs;
  return doneNs - start;
}

void Finish(Program& prog, uint32_t reason, std::string message) {
  std::lock_guard<std::mutex> lk(prog.mu);
  prog.reason = reason;
  prog.message = std::move(message);
  prog.done = true;
  prog.cv.notify_all();
}

int CompileFail(Program& prog, const char* what, VkResult r) {
  Finish(prog, spirv::R_COMPILE, std::string(what) + ": " + ResultName(r));
  return -EINVAL;
}

int Build(Program& prog, const spirv::Prepared& pp, const CompileInput& in) {
  Context& c = *prog.ctx;
  const DeviceFns& f = c.fn;
  VkResult r;

  // Set 0: exactly the entry's bindings (sorted, unique).
  for (const spirv::BindingUse& b : pp.entry.bindings) prog.setBindings.push_back(b.binding);
  std::sort(prog.setBindings.begin(), prog.setBindings.end());
  prog.setBindings.erase(std::unique(prog.setBindings.begin(), prog.setBindings.end()),
                         prog.setBindings.end());
  std::vector<VkDescriptorSetLayoutBinding> lb;
  for (uint32_t b : prog.setBindings) {
    if (b >= c.info.limits.maxBindings) {
      Finish(prog, spirv::R_BINDING, "binding " + std::to_string(b) + " over the device's limit");
      return -EINVAL;
    }
    lb.push_back({b, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr});
  }
  VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  dl.bindingCount = uint32_t(lb.size());
  dl.pBindings = lb.data();
  if ((r = f.vkCreateDescriptorSetLayout(c.device, &dl, nullptr, &prog.set0)))
    return CompileFail(prog, "vkCreateDescriptorSetLayout", r);
  // Set 1: the control block.
  VkDescriptorSetLayoutBinding cb{spirv::CONTROL_BINDING, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1,
                                  VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  dl.bindingCount = 1;
  dl.pBindings = &cb;
  if ((r = f.vkCreateDescriptorSetLayout(c.device, &dl, nullptr, &prog.set1)))
    return CompileFail(prog, "vkCreateDescriptorSetLayout", r);

  if (pp.entry.pushBytes > c.info.limits.maxPushBytes) {
    Finish(prog, spirv::R_PUSH_CONSTANTS, "push-constant block over the device's limit");
    return -EINVAL;
  }
  prog.pushRange = (pp.entry.pushBytes + 3) & ~3u;  // Vulkan ranges are multiples of 4
  VkPushConstantRange pr{VK_SHADER_STAGE_COMPUTE_BIT, 0, prog.pushRange};
  VkDescriptorSetLayout sets[2] = {prog.set0, prog.set1};
  VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  static_assert(spirv::CONTROL_SET == 1);
  pl.setLayoutCount = 2;
  pl.pSetLayouts = sets;
  pl.pushConstantRangeCount = prog.pushRange ? 1 : 0;
  pl.pPushConstantRanges = &pr;
  if ((r = f.vkCreatePipelineLayout(c.device, &pl, nullptr, &prog.layout)))
    return CompileFail(prog, "vkCreatePipelineLayout", r);

  VkShaderModuleCreateInfo sm{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  sm.codeSize = pp.words.size() * 4;
  sm.pCode = pp.words.data();
  VkShaderModule mod;
  if ((r = f.vkCreateShaderModule(c.device, &sm, nullptr, &mod)))
    return CompileFail(prog, "vkCreateShaderModule", r);

  // Specialization: one 4-byte entry per id; a repeated id keeps its last value (Vulkan wants
  // unique ids).
  std::map<uint32_t, uint32_t> spec;
  for (const spirv::SpecValue& s : in.spec) spec[s.id] = s.value;
  std::vector<VkSpecializationMapEntry> me;
  std::vector<uint32_t> data;
  for (auto [id, value] : spec) {
    me.push_back({id, uint32_t(data.size() * 4), 4});
    data.push_back(value);
  }
  VkSpecializationInfo si{uint32_t(me.size()), me.data(), data.size() * 4, data.data()};
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = mod;
  ci.stage.pName = pp.entry.name.c_str();
  ci.stage.pSpecializationInfo = me.empty() ? nullptr : &si;
  ci.layout = prog.layout;
  // Panels of a built-in are dispatched with a base workgroup (vkCmdDispatchBase).
  ci.flags = VK_PIPELINE_CREATE_DISPATCH_BASE_BIT;
  r = f.vkCreateComputePipelines(c.device, VK_NULL_HANDLE, 1, &ci, nullptr, &prog.pipeline);
  f.vkDestroyShaderModule(c.device, mod, nullptr);
  if (r != VK_SUCCESS) {
    prog.pipeline = VK_NULL_HANDLE;
    return CompileFail(prog, "vkCreateComputePipelines", r);
  }
  prog.serial = NextSerial();
  return 0;
}

constexpr uint32_t kMaxPanels = 16;
// Panels per launch by default (VUGPU_VK_MAX_PANELS overrides, up to kMaxPanels). Each panel
// boundary costs the GPU a partly idle wave; more panels only shorten the last panel's
// write-back. With the first panel's k slices (PlanKStream) 4 panels measured best at large
// GEMMs on a GPU (docs/results.md; bench/results/engine-vulkan.json, panelSweepBestMs).
constexpr uint32_t kDefaultMaxPanels = 4;
// Staged launches moving at most this much go on the compute queue in one command buffer
// (VUGPU_VK_ONE_QUEUE_BYTES overrides), unless they stream an operand (kOnePanelSlabBytes: a
// 1024³ FMMUL does, on the copy queues). The two queue paths without a stream measured within
// noise of each other at that size (docs/results.md; engine-vulkan.json, queueSweepBestMs).
constexpr uint64_t kOneQueueBytes = 32ull << 20;
// A panel streams at least kPanelBytes and has at least kPanelWorkgroups workgroups (enough to
// fill a large GPU's SMs about once; fewer and more both measured slower: docs/results.md).
// VUGPU_VK_PANEL_BYTES / _WORKGROUPS override (tests
// make panels of small launches on lavapipe; tuning).
uint64_t EnvOr(const char* name, uint64_t dflt) {
  const char* v = getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  unsigned long long x = strtoull(v, &end, 10);
  return end && *end == 0 && x > 0 ? uint64_t(x) : dflt;
}

// The lane's two descriptor sets for prog: set 0 binds infos[i] at prog.setBindings[i], set 1
// the lane's control words (cancel, status). false if the lane's pool could not allocate them.
bool WriteSets(Context& c, Lane* lane, const Program& prog, const std::vector<VkDescriptorBufferInfo>& infos,
               VkDescriptorSet sets[2]) {
  const DeviceFns& f = c.fn;
  f.vkResetDescriptorPool(c.device, lane->descPool, 0);
  VkDescriptorSetLayout layouts[2] = {prog.set0, prog.set1};
  VkDescriptorSetAllocateInfo da{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  da.descriptorPool = lane->descPool;
  da.descriptorSetCount = 2;
  da.pSetLayouts = layouts;
  if (f.vkAllocateDescriptorSets(c.device, &da, sets) != VK_SUCCESS) return false;
  const VkDescriptorBufferInfo ctl{lane->control, 0, 8};
  std::vector<VkWriteDescriptorSet> w;
  for (size_t i = 0; i <= prog.setBindings.size(); i++) {
    const bool control = i == prog.setBindings.size();
    VkWriteDescriptorSet x{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    x.dstSet = control ? sets[1] : sets[0];
    x.dstBinding = control ? spirv::CONTROL_BINDING : prog.setBindings[i];
    x.descriptorCount = 1;
    x.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    x.pBufferInfo = control ? &ctl : &infos[i];
    w.push_back(x);
  }
  f.vkUpdateDescriptorSets(c.device, uint32_t(w.size()), w.data(), 0, nullptr);
  return true;
}

int LostHere(Context& c, const char* where) {
  int st = MarkLost(c, where);
  RebuildAfterLoss(c);
  return st;
}

int ImportError(Context& c, VkResult r) {
  if (r == VK_ERROR_DEVICE_LOST) return LostHere(c, "import");
  return r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? -ENOMEM : -EFAULT;
}

// Compile prog's source again on `cur` (its device was rebuilt after a loss). 0 or -ENODEV.
int Recompile(Program& prog, const std::shared_ptr<Context>& cur) {
  std::unique_lock<std::shared_mutex> lk(prog.objMu);
  if (prog.ctx == cur) return 0;
  if (!prog.source) return -ENODEV;
  const CompileInput& in = *prog.source;
  spirv::Prepared pp = spirv::prepare(in.words.data(), in.words.size(), in.entryIndex,
                                      in.spec.data(), in.spec.size(), in.limits);
  if (pp.reason != spirv::R_OK || pp.words.empty()) return -ENODEV;
  prog.DestroyObjects();
  prog.ctx = cur;
  if (Build(prog, pp, in) != 0) {
    prog.DestroyObjects();
    return -ENODEV;
  }
  return 0;
}

// Bindings whose host ranges overlap share one group: one import and one device copy, so
// aliasing bindings still alias on the device.
struct Group {
  uint64_t start = 0, end = 0;  // import-aligned host range
  uint64_t lo = UINT64_MAX, hi = 0;  // the bytes its bindings cover
  std::vector<size_t> members;  // indices into prog.setBindings
  HostImport* imp = nullptr;
  PoolBuf dev, bounce;
  int panel = -1;               // member streamed by rows (then the only member)
};

// The first panel as slices of k (DispatchInput::KStream): slices = 1 means none.
struct KStreamPlan {
  uint32_t slices = 1;
  int group = -1;                 // the streamed binding's group (its only member)
  std::vector<uint32_t> kBound;   // slice s sums k in [kBound[s], kBound[s+1])
  std::vector<VkBufferCopy> slab; // upload of slice s's rows (offsets in the group)
  uint32_t k0Offset = 0, k1Offset = 0, accumulateOffset = 0;
};

struct Run {
  Context& c;
  Program& prog;
  const DispatchInput& in;
  Lane* lane = nullptr;
  std::vector<Group> groups;
  std::vector<int> groupOf;  // per setBindings index; -1 = zero-length (null descriptor)
  std::vector<bool> writable;
  std::vector<bool> zeroed;  // per setBindings index: overwritten, zero-filled instead of uploaded
  std::vector<VkDescriptorBufferInfo> infos;
  KStreamPlan ks;
  bool panelPair = false;    // two panels where the panel rule gave one (PanelCount)
  bool abandoned = false;    // lost: nothing is freed or reused
  // Timestamp queries (GPUs). On a CPU device each timestamp is an llvmpipe scene flush run by
  // its rasterizer threads: the two cost an empty launch more than half its time, and measure the
  // same CPU clock the launch's own wait does (see CpuDeviceNs).
  bool ts = false;

  Run(Context& cc, Program& p, const DispatchInput& i) : c(cc), prog(p), in(i) {}
  ~Run() {
    if (abandoned) return;
    for (Group& g : groups) {
      if (g.imp) ReleaseImport(c, g.imp);
      ReleasePoolBuf(c, g.dev);
      ReleasePoolBuf(c, g.bounce);
    }
    if (lane) c.ReleaseLane(lane);
  }
};

// Group the bindings and acquire their host side. 0 or -errno.
int MakeGroups(Run& R) {
  const Program& prog = R.prog;
  const DispatchInput& in = R.in;
  const uint64_t al = R.c.info.importAlign;
  const size_t n = prog.setBindings.size();
  R.groupOf.assign(n, -1);
  R.writable.assign(n, true);
  for (size_t i = 0; i < n; i++)
    for (const spirv::BindingUse& u : prog.entry.bindings)
      if (u.binding == prog.setBindings[i]) R.writable[i] = u.writable;
  std::vector<size_t> order;
  for (size_t i = 0; i < n; i++)
    if (in.lengths[prog.setBindings[i]] > 0) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return in.windows[prog.setBindings[a]] < in.windows[prog.setBindings[b]];
  });
  for (size_t i : order) {
    uint64_t addr = in.windows[prog.setBindings[i]], len = in.lengths[prog.setBindings[i]];
    uint64_t start = addr & ~(al - 1), end = (addr + len + al - 1) & ~(al - 1);
    if (R.groups.empty() || start >= R.groups.back().end) R.groups.emplace_back();
    Group& g = R.groups.back();
    if (g.members.empty()) g.start = start;
    g.end = std::max(g.end, end);
    g.lo = std::min(g.lo, addr);
    g.hi = std::max(g.hi, addr + len);
    g.members.push_back(i);
    R.groupOf[i] = int(R.groups.size() - 1);
  }
  return 0;
}

// Staged bindings the dispatch overwrites completely (DispatchInput::overwrites, built-ins only):
// their upload is skipped and their device range zero-filled instead (device-local, no bus
// traffic: a GEMM's C is a third of what it moves). Invariant: the write-back of a staged
// binding never carries bytes this VM did not put there. The device buffers come from a pool
// shared by all VMs, so a range that were neither uploaded nor cleared would hand another VM's
// stale bytes to this one wherever the kernel left a byte unwritten — which a cancelled
// launch (the cancel word ends it early) or a loop-cap cut does whatever the plan promised. The
// fill keeps the invariant on those paths; the plan's promise (every byte written) keeps the
// results equal to the uploaded path's. A binding sharing bytes with another of the group is
// uploaded as before (the other may read them). VUGPU_VK_UPLOAD_ALL=1 turns the skip off
// (tests, benchmarks).
void MarkOverwritten(Run& R) {
  const DispatchInput& in = R.in;
  const size_t n = R.prog.setBindings.size();
  R.zeroed.assign(n, false);
  if (!in.builtin || in.overwrites.empty() || EnvOr("VUGPU_VK_UPLOAD_ALL", 0)) return;
  for (size_t i = 0; i < n; i++) {
    const uint32_t b = R.prog.setBindings[i];
    if (b >= in.overwrites.size() || !in.overwrites[b] || R.groupOf[i] < 0 || !R.writable[i]) continue;
    const Group& g = R.groups[size_t(R.groupOf[i])];
    const uint64_t a = in.windows[b], e = a + in.lengths[b];
    // vkCmdFillBuffer: offset and size multiples of 4 (also each panel's rows).
    const uint64_t rb = b < in.panelRowBytes.size() ? in.panelRowBytes[b] : 0;
    if ((a - g.start) % 4 || (e - a) % 4 || rb % 4) continue;
    bool alone = true;
    for (size_t j : g.members) {
      const uint32_t o = R.prog.setBindings[j];
      if (j != i && in.windows[o] < e && a < in.windows[o] + in.lengths[o]) alone = false;
    }
    R.zeroed[i] = alone;
  }
}

// Zero-copy (lavapipe, integrated GPUs): the kernel runs on the imported host memory.
int AcquireZeroCopy(Run& R) {
  uint64_t t0 = NowNs();
  uint64_t misses0 = GetImportStats().cacheHits.load();
  size_t fresh = 0;
  for (Group& g : R.groups) {
    VkResult r = AcquireImport(R.c, g.start, g.end - g.start, &g.imp);
    if (r != VK_SUCCESS) {
      g.imp = nullptr;
      return ImportError(R.c, r);
    }
    fresh++;
  }
  size_t hits = size_t(GetImportStats().cacheHits.load() - misses0);
  if (fresh > hits) {
    GetImportStats().count += fresh - hits;
    GetImportStats().ns += NowNs() - t0;
  }
  return 0;
}

// Device memory: a device-local copy per group, its host side imported (or, where the driver
// refuses to import the range, a host-visible bounce buffer filled by the CPU).
// Copy regions of group g for panel p (below).
void PanelRegions(Run& R, const Group& g, uint32_t p, uint32_t panels, uint32_t rowsPer, bool down,
                  std::vector<VkBufferCopy>* out, std::vector<VkBufferCopy>* fills = nullptr);

int AcquireStaged(Run& R) {
  Context& c = R.c;
  uint64_t t0 = NowNs();
  uint64_t hits0 = GetImportStats().cacheHits.load();
  size_t fresh = 0;
  // A window mapped for this launch only (guest system memory) is copied through a pooled
  // pinned buffer: importing it would pin and map its pages for the device at every launch
  // (VUGPU_VK_IMPORT_TRANSIENT=1 imports it anyway, for measurement).
  const bool bounceTransient = !EnvOr("VUGPU_VK_IMPORT_TRANSIENT", 0);
  for (Group& g : R.groups) {
    const uint64_t size = g.end - g.start;
    const bool transient = bounceTransient && InsideTransientWindow(g.start, size);
    VkResult r = transient ? VK_ERROR_FEATURE_NOT_PRESENT : AcquireImport(c, g.start, size, &g.imp);
    if (r == VK_ERROR_DEVICE_LOST) {
      g.imp = nullptr;
      return LostHere(c, "import");
    }
    if (r != VK_SUCCESS) {
      g.imp = nullptr;
      if ((r = AcquirePoolBuf(c, size, true, &g.bounce)) != VK_SUCCESS) return ImportError(c, r);
      // Only what is uploaded: a binding the plan zero-fills on the device is never read.
      std::vector<VkBufferCopy> reg;
      PanelRegions(R, g, 0, 1, R.in.grid[1], false, &reg);
      for (const VkBufferCopy& x : reg) {
        memcpy(static_cast<uint8_t*>(g.bounce.map) + x.srcOffset,
               reinterpret_cast<const void*>(uintptr_t(g.start + x.srcOffset)), x.size);
        GetImportStats().bounceBytes += x.size;
      }
    } else {
      fresh++;
    }
    if ((r = AcquirePoolBuf(c, size, false, &g.dev)) != VK_SUCCESS) return ImportError(c, r);
  }
  size_t hits = size_t(GetImportStats().cacheHits.load() - hits0);
  if (fresh > hits) {
    GetImportStats().count += fresh - hits;
    GetImportStats().ns += NowNs() - t0;
  }
  return 0;
}

void CopyBarrierToHost(const DeviceFns& f, VkCommandBuffer cmd, VkPipelineStageFlags src, VkAccessFlags access) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = access;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  f.vkCmdPipelineBarrier(cmd, src, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

// Records the compute part of panel [y0, y1) into cmd (begun and ended by the caller).
void RecordCompute(Run& R, VkCommandBuffer cmd, VkDescriptorSet* sets, uint32_t y0, uint32_t y1,
                   bool first, bool last, bool thenCopies = false, const uint8_t* params = nullptr) {
  const DeviceFns& f = R.c.fn;
  Lane* lane = R.lane;
  if (first && R.ts) {
    if (!R.c.info.hostQueryReset) f.vkCmdResetQueryPool(cmd, lane->queries, 0, 2);  // else before submitting
    f.vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, lane->queries, 0);
  }
  f.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, R.prog.pipeline);
  f.vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, R.prog.layout, 0, 2, sets, 0, nullptr);
  if (R.prog.pushRange) {
    uint8_t pc[256] = {};  // maxPushBytes ≤ 128 (envelope); zero-padded to the 4-byte range
    memcpy(pc, params ? params : R.in.params.data(), std::min<size_t>(R.in.params.size(), R.prog.pushRange));
    f.vkCmdPushConstants(cmd, R.prog.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, R.prog.pushRange, pc);
  }
  if (y0 == 0 && y1 == R.in.grid[1]) f.vkCmdDispatch(cmd, R.in.grid[0], R.in.grid[1], R.in.grid[2]);
  else f.vkCmdDispatchBase(cmd, 0, y0, 0, R.in.grid[0], y1 - y0, R.in.grid[2]);
  if (last) {
    if (R.ts)
      f.vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, lane->queries, 1);
    // The shader's writes (buffers, control block) visible to host reads and, when the
    // write-back follows in the same command buffer, to the copies.
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT | (thenCopies ? VK_ACCESS_TRANSFER_READ_BIT : 0);
    f.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                           VK_PIPELINE_STAGE_HOST_BIT | (thenCopies ? VK_PIPELINE_STAGE_TRANSFER_BIT : 0), 0, 1,
                           &mb, 0, nullptr, 0, nullptr);
  }
}

uint32_t PanelCount(Run& R, uint32_t* rowsPer) {
  const DispatchInput& in = R.in;
  const uint32_t gy = in.grid[1];
  *rowsPer = gy;
  if (!R.c.info.staging || in.panelRowBytes.empty() || in.grid[2] != 1 || gy < 2) return 1;
  uint64_t banded = 0;
  for (size_t i = 0; i < R.prog.setBindings.size(); i++) {
    uint32_t b = R.prog.setBindings[i];
    uint64_t rb = b < in.panelRowBytes.size() ? in.panelRowBytes[b] : 0;
    if (!rb || R.groupOf[i] < 0) continue;
    if (R.groups[size_t(R.groupOf[i])].members.size() != 1) return 1;  // aliased: stage whole
    banded += std::min<uint64_t>(rb * gy, in.lengths[b]);
  }
  const uint64_t panelBytes = EnvOr("VUGPU_VK_PANEL_BYTES", 8ull << 20);
  const uint64_t panelWorkgroups = EnvOr("VUGPU_VK_PANEL_WORKGROUPS", 256);
  const uint64_t maxPanels = std::min<uint64_t>(kMaxPanels, EnvOr("VUGPU_VK_MAX_PANELS", kDefaultMaxPanels));
  uint64_t p = std::min<uint64_t>({maxPanels, banded / panelBytes,
                                   uint64_t(in.grid[0]) * gy / panelWorkgroups, gy});
  if (p < 2) {
    // Too small for such panels but not for two of half their size: two panels, the first as two
    // slices of k (PlanKStream), when the plan streams an operand by k: faster than one panel in
    // k slices at 1024³ and 2048³ in every interleaved run on a GPU, where three or four panels
    // were slower (docs/results.md; bench/results/gemm-panels-h200.json).
    // VUGPU_VK_PANEL_PAIR=0: one panel.
    const char* pair = getenv("VUGPU_VK_PANEL_PAIR");
    if ((pair && strcmp(pair, "0") == 0) || maxPanels < 2 || in.kStream.binding == UINT32_MAX ||
        banded < panelBytes || uint64_t(in.grid[0]) * gy < panelWorkgroups)
      return 1;
    p = 2;
    R.panelPair = true;
  }
  *rowsPer = uint32_t((gy + p - 1) / p);
  for (size_t i = 0; i < R.prog.setBindings.size(); i++) {
    uint32_t b = R.prog.setBindings[i];
    if (b < in.panelRowBytes.size() && in.panelRowBytes[b] && R.groupOf[i] >= 0)
      R.groups[size_t(R.groupOf[i])].panel = int(i);
  }
  return (gy + *rowsPer - 1) / *rowsPer;
}

// A slab of the streamed binding is at least this big (VUGPU_VK_K_SLAB_BYTES), and there are at
// most kMaxKSlices: each slice re-reads and re-writes the first panel's output and adds a
// dispatch, so slabs much smaller than a panel's own upload gain nothing.
constexpr uint64_t kKSlabBytes = 32ull << 20;
// A launch of one panel streams its operand too, in slabs of at least this: a 1024³ GEMM's B
// (4 MiB) as 2 slabs: on a GPU it brought 1024³ and 2048³ to direct Vulkan's times from above
// them with the copies on the compute queue (docs/results.md).
constexpr uint64_t kOnePanelSlabBytes = 2ull << 20;
constexpr uint32_t kMaxKSlices = 8;

// Plans the first panel's k slices (KStream) once the panels are known. On a GPU the first
// panel otherwise waits for the whole streamed operand (GEMM 8192³: B is 256 MiB, milliseconds
// of PCIe) before any compute starts. VUGPU_VK_K_SLICES=1 turns it off (measurement).
void PlanKStream(Run& R, uint32_t panels) {
  const DispatchInput& in = R.in;
  const DispatchInput::KStream& k = in.kStream;
  if (!in.builtin || k.binding == UINT32_MAX || !R.c.info.staging) return;
  const uint64_t maxSlices = std::min<uint64_t>(EnvOr("VUGPU_VK_K_SLICES", kMaxKSlices), kMaxKSlices);
  if (maxSlices < 2 || k.rowBytes == 0) return;
  size_t bi = SIZE_MAX;
  for (size_t i = 0; i < R.prog.setBindings.size(); i++)
    if (R.prog.setBindings[i] == k.binding) bi = i;
  if (bi == SIZE_MAX || R.groupOf[bi] < 0 || R.zeroed[bi]) return;
  const Group& g = R.groups[size_t(R.groupOf[bi])];
  if (g.panel >= 0 || g.members.size() != 1) return;
  auto u32 = [&](uint32_t off, uint32_t* v) {
    if (uint64_t(off) + 4 > in.params.size()) return false;
    memcpy(v, in.params.data() + off, 4);
    return true;
  };
  uint32_t kb = 0, ke = 0, acc = 0;
  if (!u32(k.k0Offset, &kb) || !u32(k.k1Offset, &ke) || !u32(k.accumulateOffset, &acc) || ke <= kb) return;
  const uint64_t addr = in.windows[k.binding], len = in.lengths[k.binding];
  if (uint64_t(ke) * k.rowBytes > len) return;
  uint64_t s = R.panelPair && !getenv("VUGPU_VK_K_SLAB_BYTES")
                   ? std::min<uint64_t>(maxSlices, 2)
                   : std::min<uint64_t>(maxSlices, len / EnvOr("VUGPU_VK_K_SLAB_BYTES", panels < 2 ? kOnePanelSlabBytes : kKSlabBytes));
  if (s < 2) return;
  // Slices of k in multiples of 16 (the GEMM shaders step k by 16 per loop pass).
  const uint32_t step = uint32_t(((ke - kb + s - 1) / s + 15) / 16 * 16);
  KStreamPlan& p = R.ks;
  p.kBound.clear();
  for (uint32_t x = kb; x < ke; x += step) p.kBound.push_back(x);
  p.kBound.push_back(ke);
  p.slices = uint32_t(p.kBound.size() - 1);
  if (p.slices < 2) {
    p = KStreamPlan{};
    return;
  }
  p.group = R.groupOf[bi];
  p.k0Offset = k.k0Offset;
  p.k1Offset = k.k1Offset;
  p.accumulateOffset = k.accumulateOffset;
  // Slab s: rows [kBound[s], kBound[s+1]); the first also takes the rows before k0, the last
  // whatever follows: together exactly the binding's window, as the one upload was.
  for (uint32_t x = 0; x < p.slices; x++) {
    uint64_t a = x == 0 ? addr : addr + uint64_t(p.kBound[x]) * k.rowBytes;
    uint64_t e = x + 1 == p.slices ? addr + len : addr + uint64_t(p.kBound[x + 1]) * k.rowBytes;
    p.slab.push_back({a - g.start, a - g.start, e - a});
  }
}

// Copy regions of group g for panel p (upload or download): offsets relative to g.start. An
// upload leaves out the zeroed bindings' ranges and lists them in *fills when given.
void PanelRegions(Run& R, const Group& g, uint32_t p, uint32_t panels, uint32_t rowsPer, bool down,
                  std::vector<VkBufferCopy>* out, std::vector<VkBufferCopy>* fills) {
  const DispatchInput& in = R.in;
  if (g.panel >= 0) {
    uint32_t b = R.prog.setBindings[size_t(g.panel)];
    if (down && !R.writable[size_t(g.panel)]) return;
    uint64_t rb = in.panelRowBytes[b], addr = in.windows[b], len = in.lengths[b];
    uint64_t a = uint64_t(p) * rowsPer * rb;
    uint64_t e = std::min<uint64_t>(len, uint64_t(std::min(in.grid[1], (p + 1) * rowsPer)) * rb);
    // The last panel also takes whatever lies past the last row (nothing for a GEMM).
    if (p == panels - 1) e = len;
    if (a >= e) return;
    if (!down && R.zeroed[size_t(g.panel)]) {
      if (fills) fills->push_back({0, addr + a - g.start, e - a});
      return;
    }
    out->push_back({addr + a - g.start, addr + a - g.start, e - a});
    return;
  }
  if (!down) {
    if (p != 0) return;
    // [lo, hi) less the zeroed members (sorted by window, disjoint from every other member).
    uint64_t cur = g.lo;
    for (size_t i : g.members) {
      if (!R.zeroed[i]) continue;
      uint32_t b = R.prog.setBindings[i];
      uint64_t a = in.windows[b], e = a + in.lengths[b];
      if (a > cur) out->push_back({cur - g.start, cur - g.start, a - cur});
      if (fills) fills->push_back({0, a - g.start, e - a});
      cur = std::max(cur, e);
    }
    if (cur < g.hi) out->push_back({cur - g.start, cur - g.start, g.hi - cur});
    return;
  }
  if (p != panels - 1) return;
  // Write back exactly the writable bindings' bytes, merged (regions must not overlap).
  std::vector<std::pair<uint64_t, uint64_t>> w;
  for (size_t i : g.members)
    if (R.writable[i]) {
      uint32_t b = R.prog.setBindings[i];
      w.emplace_back(in.windows[b], in.windows[b] + in.lengths[b]);
    }
  std::sort(w.begin(), w.end());
  for (size_t k = 0; k < w.size();) {
    uint64_t a = w[k].first, e = w[k].second;
    for (k++; k < w.size() && w[k].first <= e; k++) e = std::max(e, w[k].second);
    out->push_back({a - g.start, a - g.start, e - a});
  }
}

// ---- warm-up (CPU devices) ----
// lavapipe turns a pipeline into machine code (LLVM) at its first dispatch, on the device's one
// queue thread, where every VM's launches run one after the other: a VM loading new modules
// would hold every other VM's launches behind its JIT (bench:flood). So the compile
// lane dispatches each new pipeline once on a private device of its own, with no workgroups,
// before the program is ready: the JIT runs on that device's queue thread — opened by this
// nice-19 lane thread, so it runs at nice 19 too — and leaves the code in Mesa's shader cache,
// where the serving device's first dispatch finds it. Needs the cache (no warm-up under
// MESA_SHADER_CACHE_DISABLE); VUGPU_VK_WARMUP=0 turns it off. A GPU driver compiles in
// vkCreateComputePipelines, on the lane already.
std::mutex g_warmMu;
std::shared_ptr<Context>* g_warm = new std::shared_ptr<Context>();  // like g_cur: never destroyed at exit
uint64_t g_warmFor = 0;  // the serving device's generation it was opened beside
bool g_warmFailed = false;

bool EnvTrue(const char* name) {
  const char* v = getenv(name);
  return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes"));
}

}  // namespace

bool WarmUpActive(const DeviceInfo& di) {
  if (!di.cpuDevice || !di.nullDescriptor) return false;
  const char* w = getenv("VUGPU_VK_WARMUP");
  if (w && !strcmp(w, "0")) return false;
  return !EnvTrue("MESA_SHADER_CACHE_DISABLE");
}

namespace {

std::shared_ptr<Context> WarmContext(const Context& serving) {
  std::lock_guard<std::mutex> lk(g_warmMu);
  if (g_warmFor == serving.generation && (*g_warm || g_warmFailed)) return *g_warm;
  g_warm->reset();
  g_warmFor = serving.generation;
  g_warmFailed = false;
  std::string err;
  std::shared_ptr<Context> w = OpenContext(serving.wanted, &err);
  if (!w || w->info.name != serving.info.name) {
    fprintf(stderr, "vugpu: no warm-up device beside '%s' (%s): new programs compile at their first launch\n",
            serving.info.name.c_str(), w ? "another device opened" : err.c_str());
    g_warmFailed = true;
    return nullptr;
  }
  *g_warm = w;
  return w;
}

// Best effort: any failure leaves the JIT to the serving device's first dispatch.
void WarmUp(const Context& serving, const spirv::Prepared& pp, const CompileInput& in) {
  if (!WarmUpActive(serving.info)) return;
  std::shared_ptr<Context> w = WarmContext(serving);
  if (!w || w->lost.load()) return;
  Program wp;
  wp.ctx = w;
  if (Build(wp, pp, in) != 0) return;
  Context& c = *w;
  const DeviceFns& f = c.fn;
  std::string err;
  Lane* lane = c.AcquireLane(&err);
  if (!lane) return;
  VkDescriptorSet sets[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};
  // Null descriptors for the guest's bindings: no workgroup runs, nothing is read.
  const std::vector<VkDescriptorBufferInfo> infos(wp.setBindings.size(), {VK_NULL_HANDLE, 0, VK_WHOLE_SIZE});
  bool ok = WriteSets(c, lane, wp, infos, sets);
  if (ok) {
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    f.vkResetCommandPool(c.device, lane->cmdPool, 0);
    f.vkResetFences(c.device, 1, &lane->fence);
    f.vkBeginCommandBuffer(lane->cmd, &bi);
    f.vkCmdBindPipeline(lane->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, wp.pipeline);
    f.vkCmdBindDescriptorSets(lane->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, wp.layout, 0, 2, sets, 0, nullptr);
    if (wp.pushRange) {
      uint8_t pc[256] = {};
      f.vkCmdPushConstants(lane->cmd, wp.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, wp.pushRange, pc);
    }
    f.vkCmdDispatch(lane->cmd, 0, 0, 0);
    ok = f.vkEndCommandBuffer(lane->cmd) == VK_SUCCESS;
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &lane->cmd;
    ok = ok && f.vkQueueSubmit(c.queue, 1, &si, lane->fence) == VK_SUCCESS;
    // No workgroup runs: only the JIT is waited for (seconds at most, at nice 19 on a busy host).
    ok = ok && f.vkWaitForFences(c.device, 1, &lane->fence, VK_TRUE, 60'000'000'000ull) == VK_SUCCESS;
  }
  if (!ok) {
    // Its state is unknown: leave the lane (and the device) to the next rebuild.
    std::lock_guard<std::mutex> lk(g_warmMu);
    if (g_warm->get() == w.get()) g_warmFailed = true, g_warm->reset();
    w->lost.store(true);
    return;
  }
  GetImportStats().warmUps++;
  c.ReleaseLane(lane);
}

}  // namespace

void DropWarmUp() {
  std::shared_ptr<Context> old;
  {
    std::lock_guard<std::mutex> lk(g_warmMu);
    old = std::move(*g_warm);
    g_warmFor = 0;
    g_warmFailed = false;
  }
}

int CompileProgram(Program& prog, const CompileInput& in, uint64_t* ns) {
  uint64_t t0 = NowNs();
  // A compile queued before a device rebuild builds on the current device.
  if (!prog.ctx || prog.ctx->lost.load()) {
    std::shared_ptr<Context> cur = CurrentContext();
    if (cur && !cur->lost.load()) prog.ctx = cur;
  }
  prog.source = std::make_shared<const CompileInput>(in);
  spirv::Prepared pp = spirv::prepare(in.words.data(), in.words.size(), in.entryIndex,
                                      in.spec.data(), in.spec.size(), in.limits);
  int st;
  if (pp.reason != spirv::R_OK) {
    Finish(prog, pp.reason, pp.message.empty() ? "refused" : pp.message);
    st = -EINVAL;
  } else if (pp.words.empty()) {
    Finish(prog, spirv::R_INVALID, "prepare() returned no module");
    st = -EINVAL;
  } else {
    prog.entry = pp.entry;
    {
      std::unique_lock<std::shared_mutex> lk(prog.objMu);
      st = Build(prog, pp, in);
    }
    if (st == 0) WarmUp(*prog.ctx, pp, in);
    if (st == 0) Finish(prog, spirv::R_OK, "");
  }
  *ns = std::max<uint64_t>(NowNs() - t0, 1);
  return st;
}

namespace {

int Dispatch(Run& R, const std::atomic<bool>& cancel, uint64_t* ns);

// prog built on a CPU device's way context (WayContext), at the way's first launch of it; null
// when it cannot be (the launch then runs on the serving device). Builds on contexts that were
// retired or lost are dropped here.
std::shared_ptr<Program> WayBuild(Program& prog, const std::shared_ptr<Context>& wc) {
  {
    std::lock_guard<std::mutex> lk(prog.wayMu);
    auto& v = prog.wayBuilds;
    v.erase(std::remove_if(v.begin(), v.end(),
                           [](const std::shared_ptr<Program>& b) { return b->ctx->retired.load() || b->ctx->lost.load(); }),
            v.end());
    for (auto& b : v)
      if (b->ctx == wc) return b;
  }
  if (!prog.source) return nullptr;
  const CompileInput& in = *prog.source;
  spirv::Prepared pp = spirv::prepare(in.words.data(), in.words.size(), in.entryIndex, in.spec.data(),
                                      in.spec.size(), in.limits);
  if (pp.reason != spirv::R_OK || pp.words.empty()) return nullptr;
  auto b = std::make_shared<Program>();
  b->ctx = wc;
  b->entry = pp.entry;
  b->source = prog.source;
  if (Build(*b, pp, in) != 0) return nullptr;
  b->done = true;
  std::lock_guard<std::mutex> lk(prog.wayMu);
  for (auto& x : prog.wayBuilds)
    if (x->ctx == wc) return x;  // another launch of this way built it meanwhile
  prog.wayBuilds.push_back(b);
  return b;
}

}  // namespace

int DispatchProgram(Program& prog, const DispatchInput& in, const std::atomic<bool>& cancel,
                    uint64_t* ns) {
  {
    // With several pool threads the launch may start while its compile still runs (FIFO: the
    // compile was taken first, so this wait ends).
    std::unique_lock<std::mutex> lk(prog.mu);
    while (!prog.done) {
      if (cancel.load(std::memory_order_relaxed)) return -ECANCELED;
      prog.cv.wait_for(lk, std::chrono::milliseconds(1));
    }
  }
  if (prog.reason != spirv::R_OK) return -EINVAL;
  // A launch queued before a device loss fails; one queued after runs on the rebuilt device.
  std::shared_ptr<Context> cur = CurrentContext();
  if (!cur || cur->lost.load() || (in.generation && cur->generation != in.generation)) {
    if (cur && cur->lost.load()) RebuildAfterLoss(*cur);
    *ns = 1;
    return -ENODEV;
  }
  std::shared_lock<std::shared_mutex> objLock(prog.objMu);
  if (prog.ctx != cur) {
    objLock.unlock();
    if (Recompile(prog, cur) != 0) {
      *ns = 1;
      return -ENODEV;
    }
    objLock.lock();
    if (prog.ctx != cur) return -ENODEV;
  }
  if (!prog.pipeline) return -EINVAL;
  Context& c = *cur;
  const DeviceInfo& di = c.info;
  for (int i = 0; i < 3; i++)
    if (in.grid[i] > di.launch.maxGrid[i]) return -EINVAL;
  if (in.params.size() < prog.entry.pushBytes) return -EINVAL;
  // Guest programs: the envelope (PPROG); built-ins: what the device binds.
  const uint64_t maxBytes = in.builtin ? std::max<uint64_t>(di.launch.maxBufferBytes, di.maxStorageRange)
                                       : di.launch.maxBufferBytes;
  for (uint32_t b : prog.setBindings) {
    if (b >= in.windows.size()) return -EINVAL;
    if (in.lengths[b] > maxBytes) return -EINVAL;
    if (in.lengths[b] == 0 ? !di.nullDescriptor : in.windows[b] % di.launch.bufferAlign != 0)
      return -EINVAL;
  }
  // A CPU device's way runs on a device of its own (WayContext); a GPU's ways are its queues.
  std::shared_ptr<Context> wc = WayContext(cur, in.way);
  if (wc != cur) {
    std::shared_ptr<Program> wb = WayBuild(prog, wc);
    if (wb && wb->pipeline) {
      Run R(*wc, *wb, in);
      return Dispatch(R, cancel, ns);
    }
  }
  Run R(c, prog, in);
  return Dispatch(R, cancel, ns);
}

namespace {

int Dispatch(Run& R, const std::atomic<bool>& cancel, uint64_t* ns) {
  Context& c = R.c;
  Program& prog = R.prog;
  const DeviceInfo& di = c.info;
  const DeviceFns& f = c.fn;
  const bool staged = di.staging;
  uint64_t wall0 = NowNs();
  std::string err;
  R.lane = c.AcquireLane(&err);
  if (!R.lane) {
    fprintf(stderr, "vugpu: Vulkan lane: %s\n", err.c_str());
    return -ENOMEM;
  }
  Lane* lane = R.lane;
  R.ts = lane->queries && !di.cpuDevice;
  int st = MakeGroups(R);
  if (st == 0) MarkOverwritten(R);
  if (st == 0) st = staged ? AcquireStaged(R) : AcquireZeroCopy(R);
  if (st) {
    if (st == -ENODEV) R.abandoned = true;
    return st;
  }
  for (size_t i = 0; i < prog.setBindings.size(); i++) {
    uint32_t b = prog.setBindings[i];
    if (R.groupOf[i] < 0) {
      R.infos.push_back({VK_NULL_HANDLE, 0, VK_WHOLE_SIZE});
      continue;
    }
    const Group& g = R.groups[size_t(R.groupOf[i])];
    VkBuffer buf = staged ? g.dev.buf : g.imp->buf;
    R.infos.push_back({buf, R.in.windows[b] - g.start, R.in.lengths[b]});
  }
  uint32_t rowsPer = R.in.grid[1];
  const uint32_t panels = PanelCount(R, &rowsPer);
  // One panel on a device without copy queues: one command buffer, nothing to overlap.
  // VUGPU_VK_CHAIN_ONE_QUEUE=1 runs the chain there anyway (tests: lavapipe has one queue).
  if (staged && (panels > 1 || di.transferQueues > 0 || EnvOr("VUGPU_VK_CHAIN_ONE_QUEUE", 0))) {
    PlanKStream(R, panels);
    VkResult r = PrepareStagingLane(c, lane, panels + R.ks.slices - 1);
    if (r) return r == VK_ERROR_DEVICE_LOST ? (R.abandoned = true, LostHere(c, "lane")) : -ENOMEM;
    if (panels > 1) GetImportStats().panels += panels;
  }

  // Small staged launches (most of the GPUvm benchmarks, NOP) copy on the compute queue in the
  // same command buffer: one submission, no cross-queue semaphores (their latency is more than
  // the copies). Large ones, and those streaming an operand, use the copy engines, in panels
  // where the plan allows.
  bool oneCmd = !staged;
  if (staged && panels == 1) {
    uint64_t bytes = 0;
    std::vector<VkBufferCopy> reg;
    for (const Group& g : R.groups) {
      PanelRegions(R, g, 0, 1, rowsPer, false, &reg);
      PanelRegions(R, g, 0, 1, rowsPer, true, &reg);
    }
    for (auto& x : reg) bytes += x.size;
    // A guest's program runs as one command buffer on its way's queue whatever it moves: in the
    // chain its write-back would wait on the download queue that every VM shares, and a program
    // that never ends would hold every later write-back there. (One panel overlaps nothing; the
    // chain's gain is the copy engines' rate for large transfers — built-ins keep it: they end.)
    oneCmd = R.ks.slices < 2 && (bytes <= EnvOr("VUGPU_VK_ONE_QUEUE_BYTES", kOneQueueBytes) || di.transferQueues == 0 ||
                                 !R.in.builtin);
  }
  // A launch identical to the lane's last one submits the same command buffers and descriptor
  // sets again (recording and descriptor writes are a fifth of a NOP program's time on a GPU's
  // pool thread, and a tenth of a staged 1024³ GEMM's). What was recorded depends on the
  // program, grid, parameters, windows, the staging plan and the imports and device buffers
  // alone — all in the key, buffers by serial. A bounced window is copied per launch: never.
  const bool fillEach = staged && EnvOr("VUGPU_VK_FILL_EACH_PANEL", 0) != 0;
  thread_local std::vector<uint64_t> key;  // pool threads live long: no allocation per launch
  key.clear();
  bool bounced = false;
  for (const Group& g : R.groups) bounced = bounced || g.bounce.buf != VK_NULL_HANDLE;
  const bool replayable = !bounced && !EnvOr("VUGPU_VK_NO_REPLAY", 0);
  if (replayable) {
    const DispatchInput& in = R.in;
    key.reserve(32 + in.params.size() / 8 + 2 * in.windows.size() + in.panelRowBytes.size() + 4 * R.groups.size());
    key.assign({prog.serial, R.ts ? 1u : 0u, oneCmd ? 1u : 0u, staged ? 1u : 0u, panels, rowsPer, R.ks.slices,
                fillEach ? 1u : 0u, in.grid[0], in.grid[1], in.grid[2], prog.pushRange, in.params.size(),
                in.windows.size(), in.overwrites.size(), in.panelRowBytes.size(), R.groups.size(),
                in.kStream.binding, in.kStream.rowBytes, in.kStream.k0Offset, in.kStream.k1Offset,
                in.kStream.accumulateOffset, R.ks.kBound.size()});
    for (size_t o = 0; o < in.params.size(); o += 8) {
      uint64_t w = 0;
      memcpy(&w, in.params.data() + o, std::min<size_t>(8, in.params.size() - o));
      key.push_back(w);
    }
    for (size_t i = 0; i < in.windows.size(); i++) key.push_back(in.windows[i]), key.push_back(in.lengths[i]);
    for (uint8_t o : in.overwrites) key.push_back(o);
    for (uint64_t b : in.panelRowBytes) key.push_back(b);
    for (uint32_t k : R.ks.kBound) key.push_back(k);
    for (bool z : R.zeroed) key.push_back(z ? 1u : 0u);  // VUGPU_VK_UPLOAD_ALL changes them
    for (const Group& g : R.groups) {
      key.push_back(g.imp ? g.imp->serial : 0);
      key.push_back(g.dev.serial);
      key.push_back(g.start);
      key.push_back(g.end);
    }
  }
  const bool replay = replayable && key == lane->replayKey;
  if (!replay) lane->replayKey.clear();  // the sets and command buffers change below

  VkDescriptorSet sets[2] = {lane->replaySets[0], lane->replaySets[1]};
  if (!replay && !WriteSets(c, lane, prog, R.infos, sets)) return -ENOMEM;
  // Host writes before vkQueueSubmit are visible to the device (submission's implicit host
  // write ordering).
  lane->controlWords[0] = 0;
  lane->controlWords[1] = 0;

  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = replayable ? 0 : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  if (!replay) {
    f.vkResetCommandPool(c.device, lane->cmdPool, 0);
    if (staged && lane->xferPool && lane->xferPool != lane->cmdPool) f.vkResetCommandPool(c.device, lane->xferPool, 0);
  }
  VkResult r = VK_SUCCESS;
  f.vkResetFences(c.device, 1, &lane->fence);
  // The lane's last launch is done (its fence was waited for): its queries are free to reset.
  if (R.ts && di.hostQueryReset) f.vkResetQueryPool(c.device, lane->queries, 0, 2);
  bool submitted = false;
  uint64_t up = 0, down = 0, zeroed = 0, submitNs = 0;
  const uint64_t recordNs = NowNs();
  // What a replayable recording is remembered by, once it was submitted.
  auto remember = [&] {
    lane->replayKey = key;
    lane->replaySets[0] = sets[0];
    lane->replaySets[1] = sets[1];
    lane->replayBytes[0] = up, lane->replayBytes[1] = down, lane->replayBytes[2] = zeroed;
  };
  if (replay) {
    GetImportStats().replays++;
    up = lane->replayBytes[0], down = lane->replayBytes[1], zeroed = lane->replayBytes[2];
  } else if (oneCmd) {
    VkCommandBuffer cmd = lane->cmd;
    f.vkBeginCommandBuffer(cmd, &bi);
    std::vector<VkBufferCopy> reg, fills;
    // Nothing staged (a launch without buffers): no copies, so no barriers around them.
    const bool copies = staged && !R.groups.empty();
    if (copies) {
      for (const Group& g : R.groups) {
        reg.clear();
        fills.clear();
        PanelRegions(R, g, 0, 1, rowsPer, false, &reg, &fills);
        if (!reg.empty()) f.vkCmdCopyBuffer(cmd, g.imp ? g.imp->buf : g.bounce.buf, g.dev.buf, uint32_t(reg.size()), reg.data());
        for (auto& x : reg) up += x.size;
        for (auto& x : fills) f.vkCmdFillBuffer(cmd, g.dev.buf, x.dstOffset, x.size, 0), zeroed += x.size;
      }
      VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
      mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
      f.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb,
                             0, nullptr, 0, nullptr);
    }
    RecordCompute(R, cmd, sets, 0, R.in.grid[1], true, true, copies);
    if (copies) {
      for (const Group& g : R.groups) {
        reg.clear();
        PanelRegions(R, g, 0, 1, rowsPer, true, &reg);
        if (!reg.empty()) f.vkCmdCopyBuffer(cmd, g.dev.buf, g.imp ? g.imp->buf : g.bounce.buf, uint32_t(reg.size()), reg.data());
        for (auto& x : reg) down += x.size;
      }
      CopyBarrierToHost(f, cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
    }
    if (f.vkEndCommandBuffer(cmd)) return -ENOMEM;
  }
  if (oneCmd) {
    GetImportStats().uploadBytes += up;
    GetImportStats().downloadBytes += down;
    GetImportStats().zeroedBytes += zeroed;
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &lane->cmd;
    submitNs = NowNs();
    {
      const QueueRef& q = c.WayQueue(R.in.way);
      std::lock_guard<std::mutex> lk(*q.mu);
      r = f.vkQueueSubmit(q.queue, 1, &si, lane->fence);
    }
    if (r == VK_ERROR_DEVICE_LOST) return R.abandoned = true, LostHere(c, "vkQueueSubmit");
    if (r != VK_SUCCESS) return -ENOMEM;
    submitted = true;
    if (replayable && !replay) remember();
  } else {
    // Panel p: upload its rows (all of the other bindings with panel 0) → compute its rows →
    // write them back. Three queues, ordered by two timeline semaphores; upload p+1 and
    // download p-1 run beside compute p. With a k stream (KStream) panel 0 runs as S slices of
    // k, slice s after slab s of the streamed binding: its compute starts after one slab
    // instead of the whole binding. Uploads u: 0 = panel 0 + slab 0, 1..S-1 = slabs, then
    // panels 1..; computes: S slices of panel 0, then panels 1..; downloads: one per panel.
    const KStreamPlan& ks = R.ks;
    const uint32_t S = ks.slices;
    const uint32_t nUp = S + panels - 1, nComp = S + panels - 1;
    std::vector<VkBufferCopy> reg, fills;
    std::vector<std::pair<VkBuffer, VkBufferCopy>> panelFills;
    // The zero fills of every panel go before the first panel's dispatch: a fill and its barrier
    // before each panel would make the GPU drain between panels (the last wave of one panel no
    // longer overlapping the first of the next). VUGPU_VK_FILL_EACH_PANEL=1: fill per panel
    // (measurement).
    std::vector<uint8_t> sliceParams;
    for (uint32_t p = 0; p < panels && !replay; p++) {
      const uint32_t y0 = p * rowsPer, y1 = std::min(R.in.grid[1], y0 + rowsPer);
      VkCommandBuffer u = lane->upCmd[p == 0 ? 0 : S - 1 + p], d = lane->downCmd[p];
      f.vkBeginCommandBuffer(u, &bi);
      f.vkBeginCommandBuffer(d, &bi);
      panelFills.clear();
      for (size_t gi = 0; gi < R.groups.size(); gi++) {
        const Group& g = R.groups[gi];
        VkBuffer host = g.imp ? g.imp->buf : g.bounce.buf;
        reg.clear();
        fills.clear();
        PanelRegions(R, g, p, panels, rowsPer, false, &reg, &fills);
        if (S > 1 && p == 0 && int(gi) == ks.group) reg.assign(1, ks.slab[0]);  // the rest: slab by slab
        if (!reg.empty()) f.vkCmdCopyBuffer(u, host, g.dev.buf, uint32_t(reg.size()), reg.data());
        for (auto& x : reg) up += x.size;
        if (fillEach) {
          for (auto& x : fills) panelFills.emplace_back(g.dev.buf, x), zeroed += x.size;
        } else if (p == 0) {
          for (uint32_t q = 0; q < panels; q++) {
            std::vector<VkBufferCopy> qr, qf;
            PanelRegions(R, g, q, panels, rowsPer, false, &qr, &qf);
            for (auto& x : qf) panelFills.emplace_back(g.dev.buf, x), zeroed += x.size;
          }
        }
        reg.clear();
        PanelRegions(R, g, p, panels, rowsPer, true, &reg);
        if (!reg.empty()) f.vkCmdCopyBuffer(d, g.dev.buf, host, uint32_t(reg.size()), reg.data());
        for (auto& x : reg) down += x.size;
      }
      if (p == 0)
        for (uint32_t sl = 1; sl < S; sl++) {
          const Group& g = R.groups[size_t(ks.group)];
          VkCommandBuffer us = lane->upCmd[sl];
          f.vkBeginCommandBuffer(us, &bi);
          f.vkCmdCopyBuffer(us, g.imp ? g.imp->buf : g.bounce.buf, g.dev.buf, 1, &ks.slab[sl]);
          up += ks.slab[sl].size;
          if (f.vkEndCommandBuffer(us)) return -ENOMEM;
        }
      if (p == panels - 1) CopyBarrierToHost(f, d, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
      const uint32_t nk = p == 0 ? S : 1;
      for (uint32_t sl = 0; sl < nk; sl++) {
        VkCommandBuffer k = lane->compCmd[p == 0 ? sl : S - 1 + p];
        f.vkBeginCommandBuffer(k, &bi);
        // Fills on the compute queue, before the (first) panel's dispatch: a GPU clears at its
        // memory bandwidth there, and they stay off the copy queues that carry the uploads.
        if (sl == 0) {
          for (auto& [buf, x] : panelFills) f.vkCmdFillBuffer(k, buf, x.dstOffset, x.size, 0);
          if (!panelFills.empty()) {
            VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
            mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
            mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
            f.vkCmdPipelineBarrier(k, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                                   nullptr, 0, nullptr);
          }
        } else {
          // Slice sl adds into what slice sl-1 wrote.
          VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
          mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
          mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
          f.vkCmdPipelineBarrier(k, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                                 &mb, 0, nullptr, 0, nullptr);
        }
        const uint8_t* prm = nullptr;
        if (nk > 1) {
          sliceParams = R.in.params;
          auto put = [&](uint32_t off, uint32_t v) { memcpy(sliceParams.data() + off, &v, 4); };
          put(ks.k0Offset, ks.kBound[sl]);
          put(ks.k1Offset, ks.kBound[sl + 1]);
          if (sl > 0) put(ks.accumulateOffset, 1);
          prm = sliceParams.data();
        }
        RecordCompute(R, k, sets, y0, y1, p == 0 && sl == 0, p == panels - 1, false, prm);
        if (f.vkEndCommandBuffer(k)) return -ENOMEM;
      }
      if (f.vkEndCommandBuffer(u) || f.vkEndCommandBuffer(d)) return -ENOMEM;
    }
    GetImportStats().uploadBytes += up;
    GetImportStats().downloadBytes += down;
    GetImportStats().zeroedBytes += zeroed;
    if (S > 1) GetImportStats().kSlices += S;
    const uint64_t base = lane->tl;
    lane->tl += nUp + panels;  // upSem takes base+1..base+nUp, compSem base+1..base+panels
    submitNs = NowNs();
    // Semaphore values: upload u signals base+u+1; a slice of panel 0 waits for its slab's
    // upload, panel p >= 1 for upload S-1+p; panel p's compute (panel 0's last slice) signals
    // compSem base+p+1, which download p waits for.
    std::vector<uint64_t> upVal(nUp), waitUp(nComp), sigComp(nComp, 0), downWait(panels);
    for (uint32_t i = 0; i < nUp; i++) upVal[i] = base + i + 1;
    for (uint32_t i = 0; i < nComp; i++) {
      waitUp[i] = base + i + 1;
      const bool endsPanel = i >= S - 1;
      if (endsPanel) sigComp[i] = base + (i - (S - 1)) + 1;
    }
    for (uint32_t p = 0; p < panels; p++) downWait[p] = base + p + 1;
    const size_t most = std::max<size_t>(nUp, panels);
    std::vector<VkTimelineSemaphoreSubmitInfo> ti(most, {VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO});
    std::vector<VkSubmitInfo> si(most, {VK_STRUCTURE_TYPE_SUBMIT_INFO});
    const VkPipelineStageFlags compStage = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
    const VkPipelineStageFlags xferStage = VK_PIPELINE_STAGE_TRANSFER_BIT;
    // stage 0: uploads signal upSem; 1: computes wait upSem, panel ends signal compSem;
    // 2: downloads wait compSem.
    for (int stage = 0; stage < 3 && r == VK_SUCCESS; stage++) {
      const uint32_t count = stage == 0 ? nUp : stage == 1 ? nComp : panels;
      for (uint32_t i = 0; i < count; i++) {
        VkTimelineSemaphoreSubmitInfo& t = ti[i];
        VkSubmitInfo& x = si[i];
        t = {VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
        x = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
        x.pNext = &t;
        x.commandBufferCount = 1;
        x.pCommandBuffers = stage == 0 ? &lane->upCmd[i] : stage == 1 ? &lane->compCmd[i] : &lane->downCmd[i];
        if (stage > 0) {
          x.waitSemaphoreCount = 1;
          x.pWaitSemaphores = stage == 1 ? &lane->upSem : &lane->compSem;
          x.pWaitDstStageMask = stage == 1 ? &compStage : &xferStage;
          t.waitSemaphoreValueCount = 1;
          t.pWaitSemaphoreValues = stage == 1 ? &waitUp[i] : &downWait[i];
        }
        if (stage == 0 || (stage == 1 && sigComp[i])) {
          x.signalSemaphoreCount = 1;
          x.pSignalSemaphores = stage == 0 ? &lane->upSem : &lane->compSem;
          t.signalSemaphoreValueCount = 1;
          t.pSignalSemaphoreValues = stage == 0 ? &upVal[i] : &sigComp[i];
        }
      }
      const QueueRef& q = stage == 0 ? c.upQ : stage == 1 ? c.WayQueue(R.in.way) : c.downQ;
      std::lock_guard<std::mutex> lk(*q.mu);
      r = f.vkQueueSubmit(q.queue, count, si.data(), stage == 2 ? lane->fence : VK_NULL_HANDLE);
      if (r == VK_SUCCESS) submitted = true;
    }
    if (r != VK_SUCCESS) {
      // Part of the chain may be queued: the lane's semaphores are in an unknown state.
      R.abandoned = true;
      if (r == VK_ERROR_DEVICE_LOST || submitted) return LostHere(c, "vkQueueSubmit");
      return -ENOMEM;
    }
    if (replayable && !replay) remember();
  }

  const uint64_t submittedNs = NowNs();
  bool cancelled = false;
  // A GPU finishes short launches in microseconds: poll briefly before sleeping in the driver
  // (it halves an empty launch on a GPU). Not on a CPU device, whose threads need the cores.
  if (!di.cpuDevice) {
    uint64_t until = NowNs() + EnvOr("VUGPU_VK_SPIN_US", kSpinUs) * 1000;
    while (NowNs() < until && f.vkWaitForFences(c.device, 1, &lane->fence, VK_TRUE, 0) == VK_TIMEOUT) {
    }
  }
  // Wait in 1 ms slices so a cancel reaches the program through its cancel word.
  for (;;) {
    r = f.vkWaitForFences(c.device, 1, &lane->fence, VK_TRUE, 1'000'000);
    if (r == VK_SUCCESS) break;
    if (r == VK_TIMEOUT) {
      if (c.lost.load()) {  // another job saw the loss (or the test hook simulated one)
        st = -ENODEV;
        break;
      }
      if (!cancelled && cancel.load(std::memory_order_relaxed)) {
        __atomic_store_n(&lane->controlWords[0], 1u, __ATOMIC_SEQ_CST);
        cancelled = true;
      }
      continue;
    }
    // Lost, or an error after which the dispatch's state is unknown: treat both as lost.
    st = MarkLost(c, r == VK_ERROR_DEVICE_LOST ? "vkWaitForFences" : ResultName(r));
    break;
  }
  const uint64_t doneNs = NowNs();
  // Device time from the timestamps; reading them can also report the loss.
  uint64_t devNs = 0;
  bool haveTs = false;
  if (st == 0 && R.ts) {
    uint64_t ts[2] = {0, 0};
    r = f.vkGetQueryPoolResults(c.device, lane->queries, 0, 2, sizeof ts, ts, 8,
                                VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r == VK_ERROR_DEVICE_LOST) {
      st = MarkLost(c, "vkGetQueryPoolResults");
    } else if (r == VK_SUCCESS) {
      uint64_t d = (ts[1] - ts[0]) & di.timestampMask;
      devNs = uint64_t(double(d) * di.timestampPeriod);
      haveTs = true;
      GetImportStats().computeNs += devNs;
    }
  }
  // A fence of a lost device may still report success (the spec lets waits return VK_SUCCESS
  // after a loss; a GPU was seen to signal the running dispatch's fence and refuse the next submit),
  // so success is believed only while no other job has seen the loss — a launch that ended
  // around it fails ENGINE_LOST instead of returning what the device may never have written.
  if (st == 0 && c.lost.load()) st = -ENODEV;
  if (st == -ENODEV) {
    // The dispatch's state is unknown: its lane, imports and buffers are abandoned, never
    // reused or freed under it (a driver that pins imported pages keeps them).
    R.abandoned = true;
    RebuildAfterLoss(c);
    *ns = std::max<uint64_t>(NowNs() - wall0, 1);
    return st;
  }
  (void)submitted;

  uint32_t status = __atomic_load_n(&lane->controlWords[1], __ATOMIC_SEQ_CST);
  cancelled = cancelled || cancel.load(std::memory_order_relaxed);
  if (status == spirv::STATUS_LOOP_LIMIT) st = -ELOOP;
  else if (status == spirv::STATUS_CANCELLED || cancelled) st = -ECANCELED;
  // Bounced groups: the device wrote into the bounce buffer; the CPU copies the writable bytes.
  if (staged)
    for (const Group& g : R.groups) {
      if (!g.bounce.map) continue;
      std::vector<VkBufferCopy> reg;
      for (uint32_t p = 0; p < panels; p++) PanelRegions(R, g, p, panels, rowsPer, true, &reg);
      for (const VkBufferCopy& x : reg)
        memcpy(reinterpret_cast<void*>(uintptr_t(g.start + x.dstOffset)),
               static_cast<const uint8_t*>(g.bounce.map) + x.srcOffset, x.size);
    }
  // Device time charged to the VM: the compute (timestamps); with device memory, the whole
  // submission from upload to write-back, since the copy engines worked for it too.
  if (!haveTs && di.cpuDevice && !staged) {
    devNs = CpuDeviceNs(c.cpuLastDone, submitNs, doneNs);
    GetImportStats().computeNs += devNs;
  }
  const uint64_t endNs = NowNs();
  if ((!haveTs && !di.cpuDevice) || staged) devNs = endNs - wall0;
  *ns = std::max<uint64_t>(devNs, 1);
  ImportStats& S = GetImportStats();
  S.dispatches++;
  S.setupNs += recordNs - wall0;
  S.recordNs += submitNs - recordNs;
  S.queueSubmitNs += submittedNs - submitNs;
  S.waitNs += doneNs - submittedNs;
  S.finishNs += endNs - doneNs;
  return st;
}

}  // namespace

}  // namespace vugpu::vk
