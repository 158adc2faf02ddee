// Warm-up (CPU devices): a new pipeline's first dispatch, on a private device.
// lavapipe turns a pipeline into machine code (LLVM) at its first dispatch, on the device's one
// queue thread, where every VM's launches run one after the other: a VM loading new modules
// would hold every other VM's launches behind its JIT (bench:flood). So the compile
// lane dispatches each new pipeline once on a private device of its own, with no workgroups,
// before the program is ready: the JIT runs on that device's queue thread — opened by this
// nice-19 lane thread, so it runs at nice 19 too — and leaves the code in Mesa's shader cache,
// where the serving device's first dispatch finds it. Needs the cache (no warm-up under
// MESA_SHADER_CACHE_DISABLE); VUGPU_VK_WARMUP=0 turns it off. A GPU driver compiles in
// vkCreateComputePipelines, on the lane already.
#include <cstdio>

#include "launch.h"

namespace vugpu::vk {

namespace {

std::mutex g_warmMu;
std::shared_ptr<Context>* g_warm = new std::shared_ptr<Context>();  // like g_cur: never destroyed at exit
uint64_t g_warmFor = 0;  // the serving device's generation it was opened beside
bool g_warmFailed = false;

}  // namespace

bool WarmUpActive(const DeviceInfo& di) {
  if (!di.cpuDevice || !di.nullDescriptor) return false;
  const Tuning& t = Tune();
  return t.warmUp && !t.shaderCacheOff;
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

}  // namespace

// Best effort: any failure leaves the JIT to the serving device's first dispatch.
void WarmUp(const Context& serving, const spirv::Prepared& pp, const CompileInput& in) {
  if (!WarmUpActive(serving.info)) return;
  std::shared_ptr<Context> w = WarmContext(serving);
  if (!w || w->lost.load()) return;
  Program wp;
  wp.ctx = w;
  if (BuildPipeline(wp, pp, in) != 0) return;
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


void DropWarmUp() {
  std::shared_ptr<Context> old;
  {
    std::lock_guard<std::mutex> lk(g_warmMu);
    old = std::move(*g_warm);
    g_warmFor = 0;
    g_warmFailed = false;
  }
}

}  // namespace vugpu::vk
