// Compile: a guest's (or built-in's) SPIR-V validated and made stoppable (spirv::prepare), then
// its descriptor set layouts, pipeline layout and compute pipeline, on a pool thread. Also the
// rebuilds: on the device rebuilt after a loss, and on a CPU device's way devices.
#include <algorithm>
#include <cerrno>
#include <map>

#include "launch.h"

namespace vugpu::vk {

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

int CompileFail(Program& prog, const char* what, VkResult r) {
  FinishCompile(prog, spirv::R_COMPILE, std::string(what) + ": " + ResultName(r));
  return -EINVAL;
}

}  // namespace

void FinishCompile(Program& prog, uint32_t reason, std::string message) {
  std::lock_guard<std::mutex> lk(prog.mu);
  prog.reason = reason;
  prog.message = std::move(message);
  prog.done = true;
  prog.cv.notify_all();
}

int BuildPipeline(Program& prog, const spirv::Prepared& pp, const CompileInput& in) {
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
      FinishCompile(prog, spirv::R_BINDING, "binding " + std::to_string(b) + " over the device's limit");
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
    FinishCompile(prog, spirv::R_PUSH_CONSTANTS, "push-constant block over the device's limit");
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
  if (BuildPipeline(prog, pp, in) != 0) {
    prog.DestroyObjects();
    return -ENODEV;
  }
  return 0;
}


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
  if (BuildPipeline(*b, pp, in) != 0) return nullptr;
  b->done = true;
  std::lock_guard<std::mutex> lk(prog.wayMu);
  for (auto& x : prog.wayBuilds)
    if (x->ctx == wc) return x;  // another launch of this way built it meanwhile
  prog.wayBuilds.push_back(b);
  return b;
}


}  // namespace vugpu::vk
