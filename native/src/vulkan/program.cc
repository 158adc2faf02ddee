// The Vulkan program backend's entry points, on Mesa gallium's pattern (p_context.h: a driver is
// a table of entry points and how each is done lives behind it): CompileProgram and
// DispatchBatch (DispatchProgram is a batch of one), run on pool threads, say what happens in which order; the steps live in
// compile.cc, warmup.cc, plan.cc, record.cc and submit.cc (launch.h). The tuning knobs they read
// were parsed once at device open (tuning.h).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <deque>
#include <cstdio>

#include "../common.h"
#include "launch.h"

namespace vugpu::vk {

using addon::CurrentPreemptAfterNs;
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

// One launch on one context up to its submission: lane, plan, record, submit.
int Begin(Run& R) {
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
  return st;
}

// Waits for a launch's compile; then its program's verdict.
int AwaitCompile(Program& prog, const std::atomic<bool>& cancel) {
  // With several pool threads the launch may start while its compile still runs (FIFO: the
  // compile was taken first, so this wait ends).
  std::unique_lock<std::mutex> lk(prog.mu);
  while (!prog.done) {
    if (cancel.load(std::memory_order_relaxed)) return -ECANCELED;
    prog.cv.wait_for(lk, std::chrono::milliseconds(1));
  }
  return prog.reason == spirv::R_OK ? 0 : -EINVAL;
}

// The device a launch runs on now: null (and *ns set) when it was lost under the launch.
std::shared_ptr<Context> LaunchContext(const DispatchInput& in, uint64_t* ns) {
  // A launch queued before a device loss fails; one queued after runs on the rebuilt device.
  std::shared_ptr<Context> cur = CurrentContext();
  if (!cur || cur->lost.load() || (in.generation && cur->generation != in.generation)) {
    if (cur && cur->lost.load()) RebuildAfterLoss(*cur);
    *ns = 1;
    return nullptr;
  }
  return cur;
}

// Whether the launch after R may be planned and submitted before R's fence: nothing of R's is
// finished by the host after the fence (a bounce buffer's write-back), and R is one command
// buffer on its way's queue (the chain's copy queues are not ordered with the next launch).
bool Overlaps(const Run& R) {
  if (!R.oneCmd || R.t.residentCheck) return false;
  for (const Group& g : R.groups)
    if (g.bounce.map) return false;
  return true;
}

// Whether a launch planned behind unfinished ones must wait for them after all: its plan copied
// host bytes into a bounce buffer, which an earlier launch may still write.
bool Bounced(const Run& R) {
  for (const Group& g : R.groups)
    if (g.bounce.map) return true;
  return false;
}

}  // namespace

// Launches of a batch submitted ahead of the one the host waits for.
constexpr size_t kAhead = 4;

int DispatchBatch(const std::vector<std::shared_ptr<Program>>& progs,
                  const std::vector<std::shared_ptr<DispatchInput>>& ins, const std::atomic<bool>& cancel,
                  uint64_t* ns, uint32_t* done) {
  *ns = 0;
  *done = 0;
  // Each program's objects stay as they are while its launches run (one shared hold each:
  // a program launched twice in the batch is held once).
  std::vector<std::pair<Program*, std::shared_lock<std::shared_mutex>>> held;
  auto hold = [&](Program& p) {
    for (auto& h : held)
      if (h.first == &p) return;
    held.emplace_back(&p, std::shared_lock<std::shared_mutex>(p.objMu));
  };
  auto isHeld = [&](Program& p) {
    for (auto& h : held)
      if (h.first == &p) return true;
    return false;
  };
  std::deque<std::unique_ptr<Run>> queued;  // submitted, not yet waited for, in order
  std::vector<std::shared_ptr<Program>> wayProgs;
  int status = 0;
  uint64_t lastEnd = 0;
  // Waits for the oldest queued launch; after a failure the rest are stopped through their
  // cancel words (they are the same VM's, and its channel stops here).
  auto finishOldest = [&]() {
    std::unique_ptr<Run>& r = queued.front();
    if (status != 0) __atomic_store_n(&r->lane->controlWords[0], 1u, __ATOMIC_SEQ_CST);
    r->tsFloor = lastEnd;
    uint64_t n = 0;
    const int st = WaitAndFinish(*r, cancel, &n);
    *ns += n;
    lastEnd = r->tsEnd;
    if (status == 0) {
      if (st == 0) (*done)++;
      else status = st;
    }
    queued.pop_front();
  };
  auto drain = [&]() {
    while (!queued.empty()) finishOldest();
  };
  for (size_t i = 0; i < ins.size() && status == 0; i++) {
    Program& prog = *progs[i];
    const DispatchInput& in = *ins[i];
    if (cancel.load(std::memory_order_relaxed)) {
      drain();
      if (status == 0) status = -ECANCELED;
      break;
    }
    // Another VM waits for the device (the context switch armed this job's preempt): the batch
    // yields at this launch boundary, so the neighbour waits for the launches already on the
    // queue, not for the whole batch. The engine runs the rest once it is this VM's turn again.
    if (i > 0 && CurrentPreemptAfterNs() != 0) {
      drain();
      if (status == 0) status = -EAGAIN;
      break;
    }
    // At most kAhead launches on the queue ahead of the host: enough to keep the GPU fed, few
    // enough that a yield comes soon.
    if (queued.size() >= kAhead) finishOldest();
    if (status != 0) break;
    int st = AwaitCompile(prog, cancel);
    uint64_t lostNs = 0;
    std::shared_ptr<Context> cur = st ? nullptr : LaunchContext(in, &lostNs);
    if (st == 0 && !cur) st = -ENODEV;
    if (st == 0 && prog.ctx != cur) {
      // Rebuilt after a loss: recompiled on the new device, unless this batch holds it already.
      if (isHeld(prog) || Recompile(prog, cur) != 0 || prog.ctx != cur) st = -ENODEV;
    }
    if (st == 0) {
      hold(prog);
      if (prog.ctx != cur) st = -ENODEV;
    }
    if (st == 0) st = CheckLaunch(prog, in, cur->info);
    if (st) {
      drain();
      *ns += lostNs;
      if (status == 0) status = st;
      break;
    }
    // A way beyond the first runs on a device of its own (WayContext).
    std::shared_ptr<Context> ctx = cur;
    Program* use = &prog;
    std::shared_ptr<Context> wc = WayContext(cur, in.way);
    if (wc != cur) {
      std::shared_ptr<Program> wb = WayBuild(prog, wc);
      if (wb && wb->pipeline) {
        ctx = wc;
        use = wb.get();
        wayProgs.push_back(std::move(wb));
      }
    }
    // Behind a launch whose host side finishes after its fence, or on another device: wait first.
    if (!queued.empty() && (!Overlaps(*queued.back()) || &queued.back()->c != ctx.get())) drain();
    if (status != 0) break;
    auto R = std::make_unique<Run>(*ctx, *use, in);
    R->orderAfter = !queued.empty();
    st = Begin(*R);
    if (st == 0 && R->orderAfter && Bounced(*R)) {
      // Its plan read host bytes that the launches before it may still write: plan it again
      // once they are done.
      R.reset();
      drain();
      if (status != 0) break;
      R = std::make_unique<Run>(*ctx, *use, in);
      st = Begin(*R);
    }
    if (st) {
      R.reset();
      drain();
      if (status == 0) status = st;
      break;
    }
    queued.push_back(std::move(R));
  }
  drain();
  return status;
}

int DispatchProgram(const std::shared_ptr<Program>& prog, const std::shared_ptr<DispatchInput>& in,
                    const std::atomic<bool>& cancel, uint64_t* ns) {
  uint32_t done = 0;
  return DispatchBatch({prog}, {in}, cancel, ns, &done);
}

}  // namespace vugpu::vk
