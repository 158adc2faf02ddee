// vulkanDirectRun: the engine benchmark's reference (bench/engine-vulkan.ts). A raw SPIR-V module
// (not rewritten, no cancel word, no engine) runs on the open device the way a plain Vulkan
// program would: its operands in pinned host memory (driver-allocated, host-cached), copied to
// device-local buffers, one dispatch, the writable ones copied back — copies on the transfer
// queue when the device has one, ordered by semaphores. Timed per repetition: wall time from
// submit to fence, and the dispatch alone (timestamps). Synchronous (a benchmark tool).
// With `control: true` the module is one the engine rewrote (programPrepare): it also binds the
// rewrite's control block (set 1, binding 0: { cancel = 0, or 1 with `cancelled`, status }) as the engine does, so the
// rewrite's cost is measured on exactly this path (bench/rewrite-cost.ts); `entry` names the entry
// point (default "main"). `variants: [{words, entry}]` are further modules on the same layout,
// buffers and copies, run in turn with the main one in every repetition (the order rotates), so
// an A/B on a noisy host compares runs a few ms apart; their times come back in `variants`
// (the buffers keep what the last run wrote).
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
  std::vector<VkPipeline> extra;  // variants
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
    for (VkPipeline p : extra) f.vkDestroyPipeline(d, p, nullptr);
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
  // Tests: the cancel word is already set when the launch starts (how far a program runs then).
  const uint32_t cancelWord = control && o.Get("cancelled").ToBoolean().Value() ? 1 : 0;
  std::string entry = "main";
  if (o.Get("entry").IsString()) entry = o.Get("entry").As<Napi::String>().Utf8Value();
  struct Variant {
    Napi::Uint32Array words;
    std::string entry = "main";
  };
  std::vector<Variant> variants;
  if (Napi::Value vv = o.Get("variants"); !vv.IsUndefined()) {
    if (!vv.IsArray() || vv.As<Napi::Array>().Length() > 8) return fail("variants must be an array of at most 8 {words, entry}");
    Napi::Array va = vv.As<Napi::Array>();
    for (uint32_t i = 0; i < va.Length(); i++) {
      Napi::Value e = va.Get(i);
      if (!e.IsObject()) return fail("variants[i] must be {words, entry}");
      Napi::Value w = e.As<Napi::Object>().Get("words");
      if (!w.IsTypedArray() || w.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array)
        return fail("variants[i].words must be a Uint32Array");
      Variant x{w.As<Napi::Uint32Array>()};
      if (Napi::Value en = e.As<Napi::Object>().Get("entry"); en.IsString()) x.entry = en.As<Napi::String>().Utf8Value();
      variants.push_back(x);
    }
  }
  const uint32_t nv = 1 + uint32_t(variants.size());
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
  std::vector<VkPipeline> pipes{ob.pipe};
  for (const Variant& v : variants) {
    VkShaderModuleCreateInfo vm{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    vm.codeSize = v.words.ByteLength();
    vm.pCode = v.words.Data();
    VkShaderModule m;
    if ((r = f.vkCreateShaderModule(d, &vm, nullptr, &m))) return vkfail("vkCreateShaderModule", r);
    ci.stage.module = m;
    ci.stage.pName = v.entry.c_str();
    VkPipeline pp = VK_NULL_HANDLE;
    r = f.vkCreateComputePipelines(d, VK_NULL_HANDLE, 1, &ci, nullptr, &pp);
    f.vkDestroyShaderModule(d, m, nullptr);
    if (r) return vkfail("vkCreateComputePipelines (variant)", r);
    ob.extra.push_back(pp);
    pipes.push_back(pp);
  }

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
    ob.lane->controlWords[0] = cancelWord;
    ob.lane->controlWords[1] = 0;
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
    qc.queryCount = 2 * nv;
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
  VkCommandBuffer up = VK_NULL_HANDLE, down = VK_NULL_HANDLE;
  std::vector<VkCommandBuffer> comps(nv);  // one per module
  VkCommandBufferAllocateInfo ca{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ca.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ca.commandBufferCount = nv;
  ca.commandPool = ob.cpool;
  if ((r = f.vkAllocateCommandBuffers(d, &ca, comps.data()))) return vkfail("vkAllocateCommandBuffers", r);
  ca.commandPool = ob.xpool;
  ca.commandBufferCount = 1;
  if (xq && ((r = f.vkAllocateCommandBuffers(d, &ca, &up)) || (r = f.vkAllocateCommandBuffers(d, &ca, &down))))
    return vkfail("vkAllocateCommandBuffers", r);
  VkFenceCreateInfo fc{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if ((r = f.vkCreateFence(d, &fc, nullptr, &ob.fence))) return vkfail("vkCreateFence", r);

  auto barrier = [&](VkCommandBuffer cmd, VkPipelineStageFlags s, VkAccessFlags sa, VkPipelineStageFlags t, VkAccessFlags ta) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = sa;
    mb.dstAccessMask = ta;
    f.vkCmdPipelineBarrier(cmd, s, t, 0, 1, &mb, 0, nullptr, 0, nullptr);
  };
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  // Recorded once, submitted `reps` times. Without a transfer queue one command buffer per
  // module holds copies, barriers, dispatch, barriers, copies.
  for (uint32_t v = 0; v < nv; v++) {
    VkCommandBuffer comp = comps[v];
    const bool copies = !xq || v == 0;
    VkCommandBuffer upc = xq ? up : comp, downc = xq ? down : comp;
    f.vkBeginCommandBuffer(comp, &begin);
    if (xq && v == 0) {
      f.vkBeginCommandBuffer(up, &begin);
      f.vkBeginCommandBuffer(down, &begin);
    }
    for (uint32_t i = 0; copies && i < n; i++) {
      VkBufferCopy rg{0, 0, lens[i]};
      f.vkCmdCopyBuffer(upc, ob.host[i].buf, ob.dev[i].buf, 1, &rg);
    }
    if (!xq) barrier(comp, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                     VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    if (ob.qp) {
      f.vkCmdResetQueryPool(comp, ob.qp, 2 * v, 2);
      f.vkCmdWriteTimestamp(comp, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, ob.qp, 2 * v);
    }
    f.vkCmdBindPipeline(comp, VK_PIPELINE_BIND_POINT_COMPUTE, pipes[v]);
    f.vkCmdBindDescriptorSets(comp, VK_PIPELINE_BIND_POINT_COMPUTE, ob.layout, 0, control ? 2 : 1, sets, 0, nullptr);
    if (pushRange) {
      std::vector<uint8_t> pc(pushRange, 0);
      memcpy(pc.data(), push, pushLen);
      f.vkCmdPushConstants(comp, ob.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, pushRange, pc.data());
    }
    f.vkCmdDispatch(comp, grid[0], grid[1], grid[2]);
    if (ob.qp) f.vkCmdWriteTimestamp(comp, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, ob.qp, 2 * v + 1);
    if (control)  // the status word, for the host's read after the fence (the engine's barrier)
      barrier(comp, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
              VK_ACCESS_HOST_READ_BIT);
    if (!xq) barrier(comp, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                     VK_ACCESS_TRANSFER_READ_BIT);
    if (copies) {
      for (uint32_t i = 0; i < n; i++) {
        if (!writable[i]) continue;
        VkBufferCopy rg{0, 0, lens[i]};
        f.vkCmdCopyBuffer(downc, ob.dev[i].buf, ob.host[i].buf, 1, &rg);
      }
      barrier(downc, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    }
    f.vkEndCommandBuffer(comp);
    if (xq && v == 0) {
      f.vkEndCommandBuffer(up);
      f.vkEndCommandBuffer(down);
    }
  }

  std::vector<Napi::Array> wall(nv), kern(nv);
  for (uint32_t v = 0; v < nv; v++) {
    wall[v] = Napi::Array::New(env);
    kern[v] = Napi::Array::New(env);
  }
  uint32_t status = 0;  // the control block's status word, the highest seen (0: ran to the end)
  for (int64_t rep = 0; rep < reps; rep++) {
    for (uint32_t k = 0; k < nv; k++) {
      const uint32_t v = uint32_t((k + uint64_t(rep)) % nv);
      VkCommandBuffer comp = comps[v];
      f.vkResetFences(d, 1, &ob.fence);
      if (control) ob.lane->controlWords[0] = cancelWord, ob.lane->controlWords[1] = 0;
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
      wall[v].Set(uint32_t(rep), double(t1 - t0));
      if (control) status = std::max(status, uint32_t(ob.lane->controlWords[1]));
      if (ob.qp) {
        uint64_t ts[2] = {0, 0};
        if (f.vkGetQueryPoolResults(d, ob.qp, 2 * v, 2, sizeof ts, ts, 8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS)
          kern[v].Set(uint32_t(rep), double((ts[1] - ts[0]) & c.info.timestampMask) * c.info.timestampPeriod);
      }
    }
  }
  for (uint32_t i = 0; i < n; i++)
    if (writable[i]) memcpy(data[i], ob.host[i].map, lens[i]);
  Napi::Object res = Napi::Object::New(env);
  res.Set("wallNs", wall[0]);
  res.Set("kernelNs", kern[0]);
  Napi::Array va = Napi::Array::New(env);
  for (uint32_t v = 1; v < nv; v++) {
    Napi::Object x = Napi::Object::New(env);
    x.Set("wallNs", wall[v]);
    x.Set("kernelNs", kern[v]);
    va.Set(v - 1, x);
  }
  res.Set("variants", va);
  res.Set("transferQueue", xq);
  res.Set("status", status);
  return res;
}

}  // namespace vugpu::vk
