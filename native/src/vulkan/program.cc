// Program compile (prepare() + compute pipeline) and dispatch (zero-copy host imports, cancel
// word, timestamps) on pool threads.
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "../common.h"
#include "vk.h"

namespace vugpu::vk {

using addon::NowNs;

ImportStats& GetImportStats() {
  static ImportStats s;
  return s;
}

Program::~Program() {
  if (!ctx || !ctx->device) return;
  const DeviceFns& f = ctx->fn;
  f.vkDestroyPipeline(ctx->device, pipeline, nullptr);
  f.vkDestroyPipelineLayout(ctx->device, layout, nullptr);
  f.vkDestroyDescriptorSetLayout(ctx->device, set0, nullptr);
  f.vkDestroyDescriptorSetLayout(ctx->device, set1, nullptr);
}

namespace {

constexpr uint64_t kSpinNs = 100'000;  // polling before the first blocking wait (GPUs only)

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
  r = f.vkCreateComputePipelines(c.device, VK_NULL_HANDLE, 1, &ci, nullptr, &prog.pipeline);
  f.vkDestroyShaderModule(c.device, mod, nullptr);
  if (r != VK_SUCCESS) {
    prog.pipeline = VK_NULL_HANDLE;
    return CompileFail(prog, "vkCreateComputePipelines", r);
  }
  return 0;
}

// One imported host range and the buffer over it.
struct Import {
  uint64_t start = 0, size = 0;
  VkDeviceMemory mem = VK_NULL_HANDLE;
  VkBuffer buf = VK_NULL_HANDLE;
};

void FreeImports(Context& c, std::vector<Import>& imps) {
  for (Import& i : imps) {
    c.fn.vkDestroyBuffer(c.device, i.buf, nullptr);
    c.fn.vkFreeMemory(c.device, i.mem, nullptr);
  }
  imps.clear();
}

// Import [start, start+size) (import-aligned) of this process's memory and make a storage
// buffer over all of it. The mapping must stay valid until FreeImports.
VkResult ImportRange(Context& c, uint64_t start, uint64_t size, Import* out) {
  const DeviceFns& f = c.fn;
  void* p = reinterpret_cast<void*>(uintptr_t(start));
  VkMemoryHostPointerPropertiesEXT hp{VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
  VkResult r = f.vkGetMemoryHostPointerPropertiesEXT(
      c.device, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, p, &hp);
  if (r != VK_SUCCESS) return r;
  VkExternalMemoryBufferCreateInfo eb{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
  eb.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  VkBufferCreateInfo bc{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bc.pNext = &eb;
  bc.size = size;
  bc.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  bc.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if ((r = f.vkCreateBuffer(c.device, &bc, nullptr, &out->buf))) return r;
  VkMemoryRequirements req;
  f.vkGetBufferMemoryRequirements(c.device, out->buf, &req);
  uint32_t bits = hp.memoryTypeBits & req.memoryTypeBits;
  if (!bits || req.size > size) {
    f.vkDestroyBuffer(c.device, out->buf, nullptr);
    out->buf = VK_NULL_HANDLE;
    return VK_ERROR_INVALID_EXTERNAL_HANDLE;
  }
  VkImportMemoryHostPointerInfoEXT imp{VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT};
  imp.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  imp.pHostPointer = p;
  VkMemoryAllocateInfo ma{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ma.pNext = &imp;
  ma.allocationSize = size;
  ma.memoryTypeIndex = uint32_t(__builtin_ctz(bits));
  if ((r = f.vkAllocateMemory(c.device, &ma, nullptr, &out->mem))) {
    f.vkDestroyBuffer(c.device, out->buf, nullptr);
    out->buf = VK_NULL_HANDLE;
    out->mem = VK_NULL_HANDLE;
    return r;
  }
  if ((r = f.vkBindBufferMemory(c.device, out->buf, out->mem, 0))) {
    f.vkDestroyBuffer(c.device, out->buf, nullptr);
    f.vkFreeMemory(c.device, out->mem, nullptr);
    out->buf = VK_NULL_HANDLE;
    out->mem = VK_NULL_HANDLE;
    return r;
  }
  out->start = start;
  out->size = size;
  return VK_SUCCESS;
}

int DeviceLost(Context& c, const char* where) {
  c.lost.store(true);
  if (!c.lostLogged.exchange(true))
    fprintf(stderr, "vugpu: Vulkan device '%s' lost (%s); program launches fail with ENODEV\n",
            c.info.name.c_str(), where);
  return -ENODEV;
}

}  // namespace

int CompileProgram(Program& prog, const CompileInput& in, uint64_t* ns) {
  uint64_t t0 = NowNs();
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
    st = Build(prog, pp, in);
    if (st == 0) Finish(prog, spirv::R_OK, "");
  }
  *ns = std::max<uint64_t>(NowNs() - t0, 1);
  return st;
}

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
  if (prog.reason != spirv::R_OK || !prog.pipeline) return -EINVAL;
  Context& c = *prog.ctx;
  if (c.lost.load()) return -ENODEV;
  const DeviceInfo& di = c.info;
  const DeviceFns& f = c.fn;
  for (int i = 0; i < 3; i++)
    if (in.grid[i] > di.launch.maxGrid[i]) return -EINVAL;
  if (in.params.size() < prog.entry.pushBytes) return -EINVAL;
  for (uint32_t b : prog.setBindings) {
    if (b >= in.windows.size()) return -EINVAL;
    if (in.lengths[b] > di.launch.maxBufferBytes) return -EINVAL;
    if (in.lengths[b] == 0 ? !di.nullDescriptor : in.windows[b] % di.launch.bufferAlign != 0)
      return -EINVAL;
  }

  uint64_t wall0 = NowNs();
  std::string err;
  Lane* lane = c.AcquireLane(&err);
  if (!lane) {
    fprintf(stderr, "vugpu: Vulkan lane: %s\n", err.c_str());
    return -ENOMEM;
  }

  // Imports: one per distinct import-aligned range (bindings over the same pages share one).
  std::vector<Import> imps;
  std::vector<VkDescriptorBufferInfo> infos;
  const uint64_t al = di.importAlign;
  uint64_t ti = NowNs();
  int st = 0;
  for (uint32_t b : prog.setBindings) {
    uint64_t addr = in.windows[b], len = in.lengths[b];
    if (len == 0) {
      infos.push_back({VK_NULL_HANDLE, 0, VK_WHOLE_SIZE});
      continue;
    }
    uint64_t start = addr & ~(al - 1), end = (addr + len + al - 1) & ~(al - 1);
    const Import* hit = nullptr;
    for (const Import& i : imps)
      if (i.start == start && i.size == end - start) hit = &i;
    if (!hit) {
      Import im;
      VkResult r = ImportRange(c, start, end - start, &im);
      if (r != VK_SUCCESS) {
        st = r == VK_ERROR_DEVICE_LOST ? DeviceLost(c, "import")
             : r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? -ENOMEM
                                                                                      : -EFAULT;
        break;
      }
      imps.push_back(im);
      hit = &imps.back();
    }
    infos.push_back({hit->buf, addr - start, len});
  }
  if (st == 0 && !imps.empty()) {
    ImportStats& s = GetImportStats();
    s.count += imps.size();
    s.ns += NowNs() - ti;
  }

  VkDescriptorSet sets[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};
  VkResult r = VK_SUCCESS;
  if (st == 0) {
    f.vkResetDescriptorPool(c.device, lane->descPool, 0);
    VkDescriptorSetLayout layouts[2] = {prog.set0, prog.set1};
    VkDescriptorSetAllocateInfo da{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    da.descriptorPool = lane->descPool;
    da.descriptorSetCount = 2;
    da.pSetLayouts = layouts;
    if ((r = f.vkAllocateDescriptorSets(c.device, &da, sets))) st = -ENOMEM;
  }
  if (st == 0) {
    std::vector<VkWriteDescriptorSet> w;
    for (size_t i = 0; i < prog.setBindings.size(); i++) {
      VkWriteDescriptorSet x{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
      x.dstSet = sets[0];
      x.dstBinding = prog.setBindings[i];
      x.descriptorCount = 1;
      x.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      x.pBufferInfo = &infos[i];
      w.push_back(x);
    }
    VkDescriptorBufferInfo ctl{lane->control, 0, 8};
    VkWriteDescriptorSet x{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    x.dstSet = sets[1];
    x.dstBinding = spirv::CONTROL_BINDING;
    x.descriptorCount = 1;
    x.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    x.pBufferInfo = &ctl;
    w.push_back(x);
    f.vkUpdateDescriptorSets(c.device, uint32_t(w.size()), w.data(), 0, nullptr);

    // Host writes before vkQueueSubmit are visible to the device (submission's implicit host
    // write ordering).
    lane->controlWords[0] = 0;
    lane->controlWords[1] = 0;

    f.vkResetCommandPool(c.device, lane->cmdPool, 0);
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    VkCommandBuffer cmd = lane->cmd;
    f.vkBeginCommandBuffer(cmd, &bi);
    if (lane->queries) {
      f.vkCmdResetQueryPool(cmd, lane->queries, 0, 2);
      f.vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, lane->queries, 0);
    }
    f.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, prog.pipeline);
    f.vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, prog.layout, 0, 2, sets, 0,
                              nullptr);
    if (prog.pushRange) {
      uint8_t pc[256] = {};  // maxPushBytes ≤ 128 (envelope); zero-padded to the 4-byte range
      memcpy(pc, in.params.data(), std::min<size_t>(in.params.size(), prog.pushRange));
      f.vkCmdPushConstants(cmd, prog.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, prog.pushRange, pc);
    }
    f.vkCmdDispatch(cmd, in.grid[0], in.grid[1], in.grid[2]);
    if (lane->queries)
      f.vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, lane->queries, 1);
    // Make the shader's writes (buffers and control block) visible to host reads.
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    f.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                           0, 1, &mb, 0, nullptr, 0, nullptr);
    if ((r = f.vkEndCommandBuffer(cmd))) st = -ENOMEM;
  }
  bool submitted = false;
  if (st == 0) {
    f.vkResetFences(c.device, 1, &lane->fence);
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &lane->cmd;
    {
      std::lock_guard<std::mutex> lk(c.queueMu);
      r = f.vkQueueSubmit(c.queue, 1, &si, lane->fence);
    }
    if (r == VK_ERROR_DEVICE_LOST) st = DeviceLost(c, "vkQueueSubmit");
    else if (r != VK_SUCCESS) st = -ENOMEM;
    else submitted = true;
  }

  bool cancelled = false;
  if (submitted) {
    // A GPU finishes short launches in microseconds: poll briefly before sleeping in the driver
    // (H100: empty launch 44 → 22 µs). Not on a CPU device, whose threads need the cores.
    if (!di.cpuDevice) {
      uint64_t until = NowNs() + kSpinNs;
      while (NowNs() < until && f.vkWaitForFences(c.device, 1, &lane->fence, VK_TRUE, 0) == VK_TIMEOUT) {
      }
    }
    // Wait in 1 ms slices so a cancel reaches the program through its cancel word.
    for (;;) {
      r = f.vkWaitForFences(c.device, 1, &lane->fence, VK_TRUE, 1'000'000);
      if (r == VK_SUCCESS) break;
      if (r == VK_TIMEOUT) {
        if (!cancelled && cancel.load(std::memory_order_relaxed)) {
          __atomic_store_n(&lane->controlWords[0], 1u, __ATOMIC_SEQ_CST);
          cancelled = true;
        }
        continue;
      }
      // Lost, or an error after which the dispatch's state is unknown: treat both as lost
      // (the imports below must not be freed under a running dispatch... nor reused).
      st = DeviceLost(c, r == VK_ERROR_DEVICE_LOST ? "vkWaitForFences" : ResultName(r));
      break;
    }
  }

  uint64_t devNs = 0;
  bool haveTs = false;
  if (st == 0) {
    uint32_t status = __atomic_load_n(&lane->controlWords[1], __ATOMIC_SEQ_CST);
    cancelled = cancelled || cancel.load(std::memory_order_relaxed);
    if (status == spirv::STATUS_LOOP_LIMIT) st = -ELOOP;
    else if (status == spirv::STATUS_CANCELLED || cancelled) st = -ECANCELED;
    if (lane->queries) {
      uint64_t ts[2] = {0, 0};
      if (f.vkGetQueryPoolResults(c.device, lane->queries, 0, 2, sizeof ts, ts, 8,
                                  VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS) {
        uint64_t d = (ts[1] - ts[0]) & di.timestampMask;
        devNs = uint64_t(double(d) * di.timestampPeriod);
        haveTs = true;
      }
    }
  }
  // After a lost device the dispatch's state is unknown: its lane and imports are abandoned,
  // never reused or freed under it (a driver that pins imported pages keeps them).
  if (submitted && st == -ENODEV) {
    *ns = std::max<uint64_t>(NowNs() - wall0, 1);
    return st;
  }
  FreeImports(c, imps);
  c.ReleaseLane(lane);
  if (!haveTs) devNs = NowNs() - wall0;
  *ns = std::max<uint64_t>(devNs, 1);
  return st;
}

}  // namespace vugpu::vk
