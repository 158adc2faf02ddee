// vulkanDirectRun: the engine benchmark's reference (bench/engine-vulkan.ts). A raw SPIR-V module
// (not rewritten, no cancel word, no engine) runs on the open device the way a plain Vulkan
// program would: its operands in pinned host memory (driver-allocated, host-cached), copied to
// device-local buffers, one dispatch, the writable ones copied back — copies on the transfer
// queue when the device has one, ordered by semaphores. Timed per repetition: wall time from
// submit to fence, and the dispatch alone (timestamps). Synchronous (a benchmark tool).
// With `control: true` the module is one the engine rewrote (programPrepare): it also binds the
// rewrite's control block (set 1, binding 0: { cancel = 0, status }) as the engine does, so the
// rewrite's cost is measured on exactly this path (bench/programs.ts); `entry` names the entry
// point (default "main").
#include <algorithm>
#include <cstring>

#include "../common.h"
#include "vk.h"

namespace vugpu::vk {

using addon::NowNs;

namespace {

struct Objects {
  Context* c = nullptr;
  VkShaderModule mod = VK_NULL_HANDLE;
  VkDescriptorSetLayout dsl = VK_NULL_HANDLE, dsl1 = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipe = VK_NULL_HANDLE;
  VkDescriptorPool dpool = VK_NULL_HANDLE;
  VkQueryPool qp = VK_NULL_HANDLE;
  VkCommandPool cpool = VK_NULL_HANDLE, xpool = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  VkSemaphore sem[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};
  std::vector<PoolBuf> host, dev;
  Lane* lane = nullptr;  // its control block (control: true)
  ~Objects() {
    if (!c) return;
    const DeviceFns& f = c->fn;
    VkDevice d = c->device;
    for (PoolBuf& b : host) ReleasePoolBuf(*c, b);
    for (PoolBuf& b : dev) ReleasePoolBuf(*c, b);
    if (lane) c->ReleaseLane(lane);
    f.vkDestroySemaphore(d, sem[0], nullptr);
    f.vkDestroySemaphore(d, sem[1], nullptr);
    f.vkDestroyFence(d, fence, nullptr);
    if (xpool != cpool) f.vkDestroyCommandPool(d, xpool, nullptr);
    f.vkDestroyCommandPool(d, cpool, nullptr);
    f.vkDestroyQueryPool(d, qp, nullptr);
    f.vkDestroyDescriptorPool(d, dpool, nullptr);
    f.vkDestroyPipeline(d, pipe, nullptr);
    f.vkDestroyPipelineLayout(d, layout, nullptr);
    f.vkDestroyDescriptorSetLayout(d, dsl, nullptr);
    f.vkDestroyDescriptorSetLayout(d, dsl1, nullptr);
    f.vkDestroyShaderModule(d, mod, nullptr);
  }
};

}  // namespace

Napi::Value DirectRunJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto fail = [&](const std::string& m) {
    addon::ThrowRangeError(env, "vulkanDirectRun: %s", m.c_str());
    return env.Undefined();
  };
  if (!info[0].IsObject()) return fail("needs {words, buffers, writable, push, grid, reps}");
  Napi::Object o = info[0].As<Napi::Object>();
  Napi::Value wv = o.Get("words"), bv = o.Get("buffers"), xv = o.Get("writable"), gv = o.Get("grid");
  if (!wv.IsTypedArray() || wv.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array)
    return fail("words must be a Uint32Array");
  if (!bv.IsArray() || !xv.IsArray() || bv.As<Napi::Array>().Length() != xv.As<Napi::Array>().Length())
    return fail("buffers and writable must be arrays of one length");
  if (!gv.IsArray() || gv.As<Napi::Array>().Length() != 3) return fail("grid must be [x, y, z]");
  uint8_t* push = nullptr;
  size_t pushLen = 0;
  if (!o.Get("push").IsUndefined() && !addon::ValueBytes(env, o.Get("push"), "push", &push, &pushLen))
    return env.Undefined();
  int64_t reps = 1;
  if (!o.Get("reps").IsUndefined() && !addon::ValueInt(env, o.Get("reps"), "reps", 1, 1000, &reps))
    return env.Undefined();
  const bool control = o.Get("control").ToBoolean().Value();
  std::string entry = "main";
  if (o.Get("entry").IsString()) entry = o.Get("entry").As<Napi::String>().Utf8Value();
  uint32_t grid[3];
  for (uint32_t i = 0; i < 3; i++) {
    int64_t g;
    if (!addon::ValueInt(env, gv.As<Napi::Array>().Get(i), "grid[i]", 1, 65535, &g)) return env.Undefined();
    grid[i] = uint32_t(g);
  }
  std::shared_ptr<Context> ctx = CurrentContext();
  if (!ctx || ctx->lost.load()) return fail("no Vulkan device is open");
  Context& c = *ctx;
  const DeviceFns& f = c.fn;
  VkDevice d = c.device;
  Objects ob;
  ob.c = &c;
  Napi::Array bufs = bv.As<Napi::Array>(), wr = xv.As<Napi::Array>();
  const uint32_t n = bufs.Length();
  std::vector<uint8_t*> data(n);
  std::vector<size_t> lens(n);
  std::vector<bool> writable(n);
  for (uint32_t i = 0; i < n; i++) {
    if (!addon::ValueBytes(env, bufs.Get(i), "buffers[i]", &data[i], &lens[i])) return env.Undefined();
    if (lens[i] == 0) return fail("empty buffer");
    writable[i] = wr.Get(i).ToBoolean().Value();
  }

  VkResult r;
  auto vkfail = [&](const char* what, VkResult rr) { return fail(std::string(what) + ": " + ResultName(rr)); };
  Napi::Uint32Array words = wv.As<Napi::Uint32Array>();
  VkShaderModuleCreateInfo sm{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  sm.codeSize = words.ByteLength();
  sm.pCode = words.Data();
  if ((r = f.vkCreateShaderModule(d, &sm, nullptr, &ob.mod))) return vkfail("vkCreateShaderModule", r);
  std::vector<VkDescriptorSetLayoutBinding> lb;
  for (uint32_t i = 0; i < n; i++)
    lb.push_back({i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr});
  VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  dl.bindingCount = n;
  dl.pBindings = lb.data();
  if ((r = f.vkCreateDescriptorSetLayout(d, &dl, nullptr, &ob.dsl))) return vkfail("vkCreateDescriptorSetLayout", r);
  if (control) {
    VkDescriptorSetLayoutBinding cb{0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    dl.bindingCount = 1;
    dl.pBindings = &cb;
    if ((r = f.vkCreateDescriptorSetLayout(d, &dl, nullptr, &ob.dsl1))) return vkfail("vkCreateDescriptorSetLayout", r);
  }
  const VkDescriptorSetLayout setLayouts[2] = {ob.dsl, ob.dsl1};
  const uint32_t pushRange = uint32_t((pushLen + 3) & ~size_t(3));
  VkPushConstantRange pr{VK_SHADER_STAGE_COMPUTE_BIT, 0, pushRange};
  VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pl.setLayoutCount = control ? 2 : 1;
  pl.pSetLayouts = setLayouts;
  pl.pushConstantRangeCount = pushRange ? 1 : 0;
  pl.pPushConstantRanges = &pr;
  if ((r = f.vkCreatePipelineLayout(d, &pl, nullptr, &ob.layout))) return vkfail("vkCreatePipelineLayout", r);
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = ob.mod;
  ci.stage.pName = entry.c_str();
  ci.layout = ob.layout;
  if ((r = f.vkCreateComputePipelines(d, VK_NULL_HANDLE, 1, &ci, nullptr, &ob.pipe)))
    return vkfail("vkCreateComputePipelines", r);

  // Operands: pinned host memory (the bounce type: host-visible, cached) and device-local.
  for (uint32_t i = 0; i < n; i++) {
    PoolBuf h, g;
    if ((r = AcquirePoolBuf(c, lens[i], true, &h))) return vkfail("host buffer", r);
    ob.host.push_back(h);
    if ((r = AcquirePoolBuf(c, lens[i], false, &g))) return vkfail("device buffer", r);
    ob.dev.push_back(g);
    memcpy(h.map, data[i], lens[i]);
  }
  // The control block is a lane's, as in the engine (the memory type a cancel word needs:
  // device-local and host-visible on a GPU).
  if (control) {
    std::string err;
    if (!(ob.lane = c.AcquireLane(&err))) return fail("lane: " + err);
    ob.lane->controlWords[0] = ob.lane->controlWords[1] = 0;
  }
  VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, n + (control ? 1 : 0)};
  VkDescriptorPoolCreateInfo dp{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  dp.maxSets = control ? 2 : 1;
  dp.poolSizeCount = 1;
  dp.pPoolSizes = &ps;
  if ((r = f.vkCreateDescriptorPool(d, &dp, nullptr, &ob.dpool))) return vkfail("vkCreateDescriptorPool", r);
  VkDescriptorSet sets[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};
  VkDescriptorSet& set = sets[0];
  VkDescriptorSetAllocateInfo da{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  da.descriptorPool = ob.dpool;
  da.descriptorSetCount = control ? 2 : 1;
  da.pSetLayouts = setLayouts;
  if ((r = f.vkAllocateDescriptorSets(d, &da, sets))) return vkfail("vkAllocateDescriptorSets", r);
  std::vector<VkDescriptorBufferInfo> bi(n + 1);
  std::vector<VkWriteDescriptorSet> w(n + 1);
  for (uint32_t i = 0; i < n; i++) {
    bi[i] = {ob.dev[i].buf, 0, lens[i]};
    w[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w[i].dstSet = set;
    w[i].dstBinding = i;
    w[i].descriptorCount = 1;
    w[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w[i].pBufferInfo = &bi[i];
  }
  if (control) {
    bi[n] = {ob.lane->control, 0, 8};
    w[n] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w[n].dstSet = sets[1];
    w[n].dstBinding = 0;
    w[n].descriptorCount = 1;
    w[n].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w[n].pBufferInfo = &bi[n];
  }
  f.vkUpdateDescriptorSets(d, n + (control ? 1 : 0), w.data(), 0, nullptr);
  if (c.info.timestamps) {
    VkQueryPoolCreateInfo qc{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qc.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qc.queryCount = 2;
    if ((r = f.vkCreateQueryPool(d, &qc, nullptr, &ob.qp))) return vkfail("vkCreateQueryPool", r);
  }
  VkCommandPoolCreateInfo cp{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  cp.queueFamilyIndex = c.info.queueFamily;
  if ((r = f.vkCreateCommandPool(d, &cp, nullptr, &ob.cpool))) return vkfail("vkCreateCommandPool", r);
  const bool xq = c.info.transferQueues > 0;
  ob.xpool = ob.cpool;
  if (xq) {
    cp.queueFamilyIndex = c.info.transferFamily;
    if ((r = f.vkCreateCommandPool(d, &cp, nullptr, &ob.xpool))) return vkfail("vkCreateCommandPool", r);
    VkSemaphoreCreateInfo sc{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
    if ((r = f.vkCreateSemaphore(d, &sc, nullptr, &ob.sem[0])) || (r = f.vkCreateSemaphore(d, &sc, nullptr, &ob.sem[1])))
      return vkfail("vkCreateSemaphore", r);
  }
  VkCommandBuffer up, comp, down;
  VkCommandBufferAllocateInfo ca{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ca.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ca.commandBufferCount = 1;
  ca.commandPool = ob.cpool;
  if ((r = f.vkAllocateCommandBuffers(d, &ca, &comp))) return vkfail("vkAllocateCommandBuffers", r);
  ca.commandPool = ob.xpool;
  if (xq) {
    if ((r = f.vkAllocateCommandBuffers(d, &ca, &up)) || (r = f.vkAllocateCommandBuffers(d, &ca, &down)))
      return vkfail("vkAllocateCommandBuffers", r);
  } else {
    up = down = comp;  // one command buffer: copies, barriers, dispatch, barriers, copies
  }
  VkFenceCreateInfo fc{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if ((r = f.vkCreateFence(d, &fc, nullptr, &ob.fence))) return vkfail("vkCreateFence", r);

  auto barrier = [&](VkCommandBuffer cmd, VkPipelineStageFlags s, VkAccessFlags sa, VkPipelineStageFlags t, VkAccessFlags ta) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = sa;
    mb.dstAccessMask = ta;
    f.vkCmdPipelineBarrier(cmd, s, t, 0, 1, &mb, 0, nullptr, 0, nullptr);
  };
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  // Recorded once, submitted `reps` times.
  f.vkBeginCommandBuffer(comp, &begin);
  if (xq) {
    f.vkBeginCommandBuffer(up, &begin);
    f.vkBeginCommandBuffer(down, &begin);
  }
  for (uint32_t i = 0; i < n; i++) {
    VkBufferCopy rg{0, 0, lens[i]};
    f.vkCmdCopyBuffer(up, ob.host[i].buf, ob.dev[i].buf, 1, &rg);
  }
  if (!xq) barrier(comp, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                   VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
  if (ob.qp) {
    f.vkCmdResetQueryPool(comp, ob.qp, 0, 2);
    f.vkCmdWriteTimestamp(comp, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, ob.qp, 0);
  }
  f.vkCmdBindPipeline(comp, VK_PIPELINE_BIND_POINT_COMPUTE, ob.pipe);
  f.vkCmdBindDescriptorSets(comp, VK_PIPELINE_BIND_POINT_COMPUTE, ob.layout, 0, control ? 2 : 1, sets, 0, nullptr);
  if (pushRange) {
    std::vector<uint8_t> pc(pushRange, 0);
    memcpy(pc.data(), push, pushLen);
    f.vkCmdPushConstants(comp, ob.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, pushRange, pc.data());
  }
  f.vkCmdDispatch(comp, grid[0], grid[1], grid[2]);
  if (ob.qp) f.vkCmdWriteTimestamp(comp, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, ob.qp, 1);
  if (control)  // the status word, for the host's read after the fence (the engine's barrier)
    barrier(comp, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
            VK_ACCESS_HOST_READ_BIT);
  if (!xq) barrier(comp, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                   VK_ACCESS_TRANSFER_READ_BIT);
  for (uint32_t i = 0; i < n; i++) {
    if (!writable[i]) continue;
    VkBufferCopy rg{0, 0, lens[i]};
    f.vkCmdCopyBuffer(down, ob.dev[i].buf, ob.host[i].buf, 1, &rg);
  }
  barrier(down, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
  f.vkEndCommandBuffer(comp);
  if (xq) {
    f.vkEndCommandBuffer(up);
    f.vkEndCommandBuffer(down);
  }

  Napi::Array wall = Napi::Array::New(env), kern = Napi::Array::New(env);
  uint32_t status = 0;  // the control block's status word, the highest seen (0: ran to the end)
  for (int64_t rep = 0; rep < reps; rep++) {
    f.vkResetFences(d, 1, &ob.fence);
    if (control) ob.lane->controlWords[0] = ob.lane->controlWords[1] = 0;
    uint64_t t0 = NowNs();
    if (xq) {
      const VkPipelineStageFlags ws[2] = {VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT};
      VkSubmitInfo s{VK_STRUCTURE_TYPE_SUBMIT_INFO};
      s.commandBufferCount = 1;
      s.pCommandBuffers = &up;
      s.signalSemaphoreCount = 1;
      s.pSignalSemaphores = &ob.sem[0];
      {
        std::lock_guard<std::mutex> lk(*c.upQ.mu);
        r = f.vkQueueSubmit(c.upQ.queue, 1, &s, VK_NULL_HANDLE);
      }
      s.pCommandBuffers = &comp;
      s.waitSemaphoreCount = 1;
      s.pWaitSemaphores = &ob.sem[0];
      s.pWaitDstStageMask = &ws[0];
      s.pSignalSemaphores = &ob.sem[1];
      if (r == VK_SUCCESS) {
        std::lock_guard<std::mutex> lk(*c.compQ.mu);
        r = f.vkQueueSubmit(c.compQ.queue, 1, &s, VK_NULL_HANDLE);
      }
      s.pCommandBuffers = &down;
      s.pWaitSemaphores = &ob.sem[1];
      s.pWaitDstStageMask = &ws[1];
      s.signalSemaphoreCount = 0;
      if (r == VK_SUCCESS) {
        std::lock_guard<std::mutex> lk(*c.downQ.mu);
        r = f.vkQueueSubmit(c.downQ.queue, 1, &s, ob.fence);
      }
    } else {
      VkSubmitInfo s{VK_STRUCTURE_TYPE_SUBMIT_INFO};
      s.commandBufferCount = 1;
      s.pCommandBuffers = &comp;
      std::lock_guard<std::mutex> lk(*c.compQ.mu);
      r = f.vkQueueSubmit(c.compQ.queue, 1, &s, ob.fence);
    }
    if (r) return vkfail("vkQueueSubmit", r);
    if (!c.info.cpuDevice)
      while (f.vkWaitForFences(d, 1, &ob.fence, VK_TRUE, 0) == VK_TIMEOUT && NowNs() - t0 < 100'000) {
      }
    if ((r = f.vkWaitForFences(d, 1, &ob.fence, VK_TRUE, 120'000'000'000ull))) return vkfail("vkWaitForFences", r);
    uint64_t t1 = NowNs();
    wall.Set(uint32_t(rep), double(t1 - t0));
    if (control) status = std::max(status, uint32_t(ob.lane->controlWords[1]));
    if (ob.qp) {
      uint64_t ts[2] = {0, 0};
      if (f.vkGetQueryPoolResults(d, ob.qp, 0, 2, sizeof ts, ts, 8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS)
        kern.Set(uint32_t(rep), double((ts[1] - ts[0]) & c.info.timestampMask) * c.info.timestampPeriod);
    }
  }
  for (uint32_t i = 0; i < n; i++)
    if (writable[i]) memcpy(data[i], ob.host[i].map, lens[i]);
  Napi::Object res = Napi::Object::New(env);
  res.Set("wallNs", wall);
  res.Set("kernelNs", kern);
  res.Set("transferQueue", xq);
  res.Set("status", status);
  return res;
}

}  // namespace vugpu::vk
