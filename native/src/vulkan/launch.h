// The Vulkan backend's inside, on gallium's pattern: program.cc is the table of entry points
// (CompileProgram, DispatchProgram) and each step of them lives behind it in a file of its own —
//   compile.cc  validate + rewrite (prepare) and build the pipeline; rebuilds after a loss and
//               per way of a CPU device
//   warmup.cc   a CPU device's first dispatch of a new pipeline, on a private device
//   plan.cc     a launch's operands (groups, imports, device copies) and its staging plan
//               (panels, slices of k, one command buffer or the copy-queue chain)
//   record.cc   descriptor sets and command buffers, and the replay of the lane's last ones
//   submit.cc   queue submission, the wait (cancel word, device loss) and the launch's charge
// Internal to native/src/vulkan: nothing else includes it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tuning.h"
#include "vk.h"

namespace vugpu::vk {

// ---- compile.cc ----
// Marks prog's compile done with `reason` (waking launches that wait for it).
void FinishCompile(Program& prog, uint32_t reason, std::string message);
// Descriptor set layouts, pipeline layout and compute pipeline for pp on prog.ctx. 0 or -EINVAL
// (prog finished with the reason).
int BuildPipeline(Program& prog, const spirv::Prepared& pp, const CompileInput& in);
// Compile prog's source again on `cur` (its device was rebuilt after a loss). 0 or -ENODEV.
int Recompile(Program& prog, const std::shared_ptr<Context>& cur);
// prog built on a CPU device's way context, at the way's first launch of it; null when it cannot
// be (the launch then runs on the serving device).
std::shared_ptr<Program> WayBuild(Program& prog, const std::shared_ptr<Context>& wc);

// ---- warmup.cc ----
// Best effort: dispatches a new pipeline once on the warm-up device (CPU devices).
void WarmUp(const Context& serving, const spirv::Prepared& pp, const CompileInput& in);

// ---- a launch in flight ----
// Bindings whose host ranges overlap share one group: one import and one device copy, so
// aliasing bindings still alias on the device.
struct Group {
  uint64_t start = 0, end = 0;  // import-aligned host range
  uint64_t lo = UINT64_MAX, hi = 0;  // the bytes its bindings cover
  std::vector<size_t> members;  // indices into prog.setBindings
  HostImport* imp = nullptr;
  PoolBuf dev, bounce;
  int panel = -1;               // member streamed by rows (then the only member)
  // Resident (DEVICE_CACHED, resident.cc): the mirror holding it, the mirror offset of g.start,
  // and the pages this launch uploads first (offsets relative to g.start / in the mirror).
  Mirror* mir = nullptr;
  uint64_t mirOff = 0;
  std::vector<VkBufferCopy> resUp;
};

// The first panel as slices of k (DispatchInput::KStream): slices = 1 means none.
struct KStreamPlan {
  uint32_t slices = 1;
  int group = -1;                 // the streamed binding's group (its only member)
  std::vector<uint32_t> kBound;   // slice s sums k in [kBound[s], kBound[s+1])
  std::vector<VkBufferCopy> slab; // upload of slice s's rows (offsets in the group)
  uint32_t k0Offset = 0, k1Offset = 0, accumulateOffset = 0;
};

// One launch on one context: its plan, what it holds and where its time went. Everything it
// acquired is released with it unless the device was lost (abandoned).
struct Run {
  Context& c;
  Program& prog;
  const DispatchInput& in;
  const Tuning& t;           // the knobs in force, read once per launch
  Lane* lane = nullptr;
  std::vector<Group> groups;
  std::vector<int> groupOf;  // per setBindings index; -1 = zero-length (null descriptor)
  std::vector<bool> writable;
  std::vector<bool> zeroed;  // per setBindings index: overwritten, zero-filled instead of uploaded
  std::vector<VkDescriptorBufferInfo> infos;
  KStreamPlan ks;
  bool panelPair = false;    // two panels where the panel rule gave one (PanelCount)
  // An earlier launch of its batch may still run on the queue (DispatchBatch): its command
  // buffer starts with a barrier after everything before it.
  bool orderAfter = false;
  bool abandoned = false;    // lost: nothing is freed or reused
  // VRAM [offset, +length) that DEVICE_CACHED bindings wrote through the staged path (plan.cc,
  // NoteStagedWrites): resident copies are dropped again when the launch is done.
  std::vector<std::pair<uint64_t, uint64_t>> staleVram;
  // Timestamp queries (GPUs). On a CPU device each timestamp is an llvmpipe scene flush run by
  // its rasterizer threads: the two cost an empty launch more than half its time, and measure the
  // same CPU clock the launch's own wait does (see CpuDeviceNs).
  bool ts = false;
  // Batched (DispatchBatch): the end timestamp of the launch before it on the queue, raw ticks
  // (0: none), and this launch's own. Its start is counted from the later of the two, so time it
  // spent behind its predecessor is not charged twice.
  uint64_t tsFloor = 0, tsEnd = 0;

  // The plan (plan.cc): panels of rowsPer workgroup rows; one command buffer on the way's queue,
  // or the chain of upload, compute and download queues.
  uint32_t panels = 1, rowsPer = 0;
  bool oneCmd = true;
  // The recording (record.cc): replayable = may be submitted again by an identical launch;
  // replay = this launch submits the lane's last recording; key = what identifies it.
  bool fillEach = false;
  bool replayable = false, replay = false;
  std::vector<uint64_t>* key = nullptr;
  VkDescriptorSet sets[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};
  uint64_t up = 0, down = 0, zeroedBytes = 0;  // bytes uploaded, written back, zero-filled
  bool submitted = false;
  // Clock: start, recording, vkQueueSubmit, its return, the fence.
  uint64_t wall0 = 0, recordNs = 0, submitNs = 0, submittedNs = 0, doneNs = 0;

  Run(Context& cc, Program& p, const DispatchInput& i) : c(cc), prog(p), in(i), t(Tune()) {}
  ~Run() {
    if (abandoned) return;
    for (Group& g : groups) {
      if (g.mir && !submitted && !g.resUp.empty()) UnplanResident(c, g.mir, g.resUp);
      if (g.imp) ReleaseImport(c, g.imp);
      ReleasePoolBuf(c, g.dev);
      ReleasePoolBuf(c, g.bounce);
    }
    if (lane) c.ReleaseLane(lane);
  }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;
};

// ---- plan.cc ----
// Groups the bindings, acquires their host side (and device copies), fills infos, plans panels,
// slices of k and the queue path. 0 or -errno (-ENODEV: abandoned).
int PlanLaunch(Run& R);
// Copy regions of group g for panel p (upload or download): offsets relative to g.start. An
// upload leaves out the zeroed bindings' ranges and lists them in *fills when given.
void PanelRegions(const Run& R, const Group& g, uint32_t p, uint32_t panels, uint32_t rowsPer, bool down,
                  std::vector<VkBufferCopy>* out, std::vector<VkBufferCopy>* fills = nullptr);

// ---- resident.cc ----
// VUGPU_VK_RESIDENT_CHECK: the group's resident pages (those it does not upload) copied back and
// compared with the VRAM at vstart; a difference is logged to stderr.
void CheckResident(Run& R, const Group& g, uint64_t vstart);

// ---- record.cc ----
// The lane's two descriptor sets for prog: set 0 binds infos[i] at prog.setBindings[i], set 1
// the lane's control words (cancel, status). false if the lane's pool could not allocate them.
bool WriteSets(Context& c, Lane* lane, const Program& prog, const std::vector<VkDescriptorBufferInfo>& infos,
               VkDescriptorSet sets[2]);
// Descriptor sets, control words and command buffers of the launch (or the lane's last ones
// again). 0 or -ENOMEM.
int RecordLaunch(Run& R);
// After a successful submission: the recording is remembered for an identical next launch.
void RememberRecording(Run& R);

// ---- submit.cc ----
// Submits what RecordLaunch recorded. 0, -ENOMEM or -ENODEV.
int SubmitLaunch(Run& R);
// Waits for the launch's fence, passing a cancel on through the cancel word; then the device
// time, the program's status, the bounced write-back and the stats. Returns the launch's result.
int WaitAndFinish(Run& R, const std::atomic<bool>& cancel, uint64_t* ns);
// The device is lost here: marked, a rebuild tried; -ENODEV.
int LostHere(Context& c, const char* where);
// An import or buffer that could not be had: -ENODEV (lost), -ENOMEM or -EFAULT.
int ImportError(Context& c, VkResult r);

}  // namespace vugpu::vk
