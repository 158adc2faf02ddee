// The Vulkan program backend's entry points, on Mesa gallium's pattern (p_context.h: a driver is
// a table of entry points and how each is done lives behind it): CompileProgram and
// DispatchProgram, run on pool threads, say what happens in which order; the steps live in
// compile.cc, warmup.cc, plan.cc, record.cc and submit.cc (launch.h). The tuning knobs they read
// were parsed once at device open (tuning.h).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>

#include "../common.h"
#include "launch.h"

namespace vugpu::vk {

using addon::NowNs;

ImportStats& GetImportStats() {
  static ImportStats s;
  return s;
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
    FinishCompile(prog, pp.reason, pp.message.empty() ? "refused" : pp.message);
    st = -EINVAL;
  } else if (pp.words.empty()) {
    FinishCompile(prog, spirv::R_INVALID, "prepare() returned no module");
    st = -EINVAL;
  } else {
    prog.entry = pp.entry;
    {
      std::unique_lock<std::shared_mutex> lk(prog.objMu);
      st = BuildPipeline(prog, pp, in);
    }
    if (st == 0) WarmUp(*prog.ctx, pp, in);
    if (st == 0) FinishCompile(prog, spirv::R_OK, "");
  }
  *ns = std::max<uint64_t>(NowNs() - t0, 1);
  return st;
}

namespace {

// What the launch asks of the device, checked against it: -EINVAL when out of bounds.
int CheckLaunch(const Program& prog, const DispatchInput& in, const DeviceInfo& di) {
  if (!prog.pipeline) return -EINVAL;
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
  return 0;
}

// One launch on one context: lane, plan, record, submit, wait.
int Dispatch(Run& R, const std::atomic<bool>& cancel, uint64_t* ns) {
  Context& c = R.c;
  R.wall0 = NowNs();
  std::string err;
  R.lane = c.AcquireLane(&err);
  if (!R.lane) {
    fprintf(stderr, "vugpu: Vulkan lane: %s\n", err.c_str());
    return -ENOMEM;
  }
  R.ts = R.lane->queries && !c.info.cpuDevice;
  int st = PlanLaunch(R);
  if (st == 0) st = RecordLaunch(R);
  if (st == 0) st = SubmitLaunch(R);
  if (st) return st;
  return WaitAndFinish(R, cancel, ns);
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
  if (int st = CheckLaunch(prog, in, cur->info)) return st;
  // A way beyond the first runs on a device of its own (WayContext).
  std::shared_ptr<Context> wc = WayContext(cur, in.way);
  if (wc != cur) {
    std::shared_ptr<Program> wb = WayBuild(prog, wc);
    if (wb && wb->pipeline) {
      Run R(*wc, *wb, in);
      return Dispatch(R, cancel, ns);
    }
  }
  Run R(*cur, prog, in);
  return Dispatch(R, cancel, ns);
}


}  // namespace vugpu::vk
