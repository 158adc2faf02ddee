// Submit: a launch's command buffers onto its way's queue (or the upload, compute and download
// queues of the chain), the wait for its fence — a cancel passed on through the program's cancel
// word, a device loss turned into ENGINE_LOST — and what the launch is charged.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "../common.h"
#include "launch.h"

namespace vugpu::vk {

using addon::CurrentPreemptAfterNs;
using addon::NowNs;

int LostHere(Context& c, const char* where) {
  int st = MarkLost(c, where);
  RebuildAfterLoss(c);
  return st;
}

int ImportError(Context& c, VkResult r) {
  if (r == VK_ERROR_DEVICE_LOST) return LostHere(c, "import");
  return r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? -ENOMEM : -EFAULT;
}

namespace {

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

// The one command buffer, on the way's queue.
int SubmitOne(Run& R) {
  Context& c = R.c;
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &R.lane->cmd;
  R.submitNs = NowNs();
  VkResult r;
  {
    const QueueRef& q = c.WayQueue(R.in.way);
    std::lock_guard<std::mutex> lk(*q.mu);
    r = c.fn.vkQueueSubmit(q.queue, 1, &si, R.lane->fence);
  }
  if (r == VK_ERROR_DEVICE_LOST) return R.abandoned = true, LostHere(c, "vkQueueSubmit");
  if (r != VK_SUCCESS) return -ENOMEM;
  R.submitted = true;
  return 0;
}

// The chain, ordered by two timeline semaphores. With a k stream (KStream) panel 0 runs as S
// slices of k, slice s after slab s of the streamed binding: its compute starts after one slab
// instead of the whole binding. Uploads u: 0 = panel 0 + slab 0, 1..S-1 = slabs, then panels
// 1..; computes: S slices of panel 0, then panels 1..; downloads: one per panel.
int SubmitChain(Run& R) {
  Context& c = R.c;
  Lane* lane = R.lane;
  const uint32_t S = R.ks.slices, panels = R.panels;
  const uint32_t nUp = S + panels - 1, nComp = S + panels - 1;
  const uint64_t base = lane->tl;
  lane->tl += nUp + panels;  // upSem takes base+1..base+nUp, compSem base+1..base+panels
  R.submitNs = NowNs();
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
  VkResult r = VK_SUCCESS;
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
    r = c.fn.vkQueueSubmit(q.queue, count, si.data(), stage == 2 ? lane->fence : VK_NULL_HANDLE);
    if (r == VK_SUCCESS) R.submitted = true;
  }
  if (r != VK_SUCCESS) {
    // Part of the chain may be queued: the lane's semaphores are in an unknown state.
    R.abandoned = true;
    if (r == VK_ERROR_DEVICE_LOST || R.submitted) return LostHere(c, "vkQueueSubmit");
    return -ENOMEM;
  }
  return 0;
}

// Until the fence: 0, or -ENODEV when the device was lost meanwhile. *cancelled: the cancel
// word was set.
int WaitFence(Run& R, const std::atomic<bool>& cancel, bool* cancelled) {
  Context& c = R.c;
  const DeviceFns& f = c.fn;
  Lane* lane = R.lane;
  // A GPU finishes short launches in microseconds: poll briefly before sleeping in the driver
  // (Tuning::spinUs). Not on a CPU device, whose threads need the cores.
  if (!c.info.cpuDevice) {
    uint64_t until = NowNs() + R.t.spinUs * 1000;
    while (NowNs() < until && f.vkWaitForFences(c.device, 1, &lane->fence, VK_TRUE, 0) == VK_TIMEOUT) {
    }
  }
  // Wait in 1 ms slices so a cancel reaches the program through its cancel word.
  for (;;) {
    VkResult r = f.vkWaitForFences(c.device, 1, &lane->fence, VK_TRUE, 1'000'000);
    if (r == VK_SUCCESS) return 0;
    if (r == VK_TIMEOUT) {
      if (c.lost.load()) return -ENODEV;  // another job saw the loss (or the test hook simulated one)
      // The cancel (watchdog, unbind), or the context switch's preempt once the program has run
      // its timeslice on the device: time in the pool queue or staging does not count.
      const uint64_t preempt = CurrentPreemptAfterNs();
      if (!*cancelled && (cancel.load(std::memory_order_relaxed) || (preempt && NowNs() - R.submittedNs >= preempt))) {
        __atomic_store_n(&lane->controlWords[0], 1u, __ATOMIC_SEQ_CST);
        *cancelled = true;
      }
      continue;
    }
    // Lost, or an error after which the dispatch's state is unknown: treat both as lost.
    return MarkLost(c, r == VK_ERROR_DEVICE_LOST ? "vkWaitForFences" : ResultName(r));
  }
}

// Device time from the timestamps (*haveTs); reading them can also report the loss (-ENODEV).
int ReadTimestamps(Run& R, uint64_t* devNs, bool* haveTs) {
  Context& c = R.c;
  uint64_t ts[2] = {0, 0};
  VkResult r = c.fn.vkGetQueryPoolResults(c.device, R.lane->queries, 0, 2, sizeof ts, ts, 8,
                                          VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
  if (r == VK_ERROR_DEVICE_LOST) return MarkLost(c, "vkGetQueryPoolResults");
  if (r == VK_SUCCESS) {
    R.tsEnd = ts[1];
    if (R.tsFloor > ts[0] && R.tsFloor <= ts[1]) ts[0] = R.tsFloor;
    uint64_t d = (ts[1] - ts[0]) & c.info.timestampMask;
    *devNs = uint64_t(double(d) * c.info.timestampPeriod);
    *haveTs = true;
    GetImportStats().computeNs += *devNs;
  }
  return 0;
}

// Bounced groups: the device wrote into the bounce buffer; the CPU copies the writable bytes.
void CopyBouncedBack(const Run& R) {
  for (const Group& g : R.groups) {
    if (!g.bounce.map) continue;
    std::vector<VkBufferCopy> reg;
    for (uint32_t p = 0; p < R.panels; p++) PanelRegions(R, g, p, R.panels, R.rowsPer, true, &reg);
    for (const VkBufferCopy& x : reg)
      memcpy(reinterpret_cast<void*>(uintptr_t(g.start + x.dstOffset)),
             static_cast<const uint8_t*>(g.bounce.map) + x.srcOffset, x.size);
  }
}

}  // namespace

int SubmitLaunch(Run& R) {
  ImportStats& S = GetImportStats();
  S.uploadBytes += R.up;
  S.downloadBytes += R.down;
  S.zeroedBytes += R.zeroedBytes;
  if (!R.oneCmd && R.ks.slices > 1) S.kSlices += R.ks.slices;
  int st = R.oneCmd ? SubmitOne(R) : SubmitChain(R);
  if (st == 0 && R.replayable && !R.replay) RememberRecording(R);
  return st;
}

int WaitAndFinish(Run& R, const std::atomic<bool>& cancel, uint64_t* ns) {
  Context& c = R.c;
  const DeviceInfo& di = c.info;
  R.submittedNs = NowNs();
  bool cancelled = false;
  int st = WaitFence(R, cancel, &cancelled);
  R.doneNs = NowNs();
  uint64_t devNs = 0;
  bool haveTs = false;
  if (st == 0 && R.ts) st = ReadTimestamps(R, &devNs, &haveTs);
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
    *ns = std::max<uint64_t>(NowNs() - R.wall0, 1);
    return st;
  }
  uint32_t status = __atomic_load_n(&R.lane->controlWords[1], __ATOMIC_SEQ_CST);
  cancelled = cancelled || cancel.load(std::memory_order_relaxed);
  if (status == spirv::STATUS_LOOP_LIMIT) st = -ELOOP;
  else if (status == spirv::STATUS_CANCELLED || cancelled) st = -ECANCELED;
  if (di.staging) CopyBouncedBack(R);
  for (auto& [off, len] : R.staleVram) InvalidateVram(off, len);
  // Device time charged to the VM: the compute (timestamps); with device memory, the whole
  // submission from upload to write-back, since the copy engines worked for it too.
  if (!haveTs && di.cpuDevice && !di.staging) {
    devNs = CpuDeviceNs(c.cpuLastDone, R.submitNs, R.doneNs);
    GetImportStats().computeNs += devNs;
  }
  const uint64_t endNs = NowNs();
  if ((!haveTs && !di.cpuDevice) || di.staging) devNs = endNs - R.wall0;
  *ns = std::max<uint64_t>(devNs, 1);
  ImportStats& S = GetImportStats();
  S.dispatches++;
  S.setupNs += R.recordNs - R.wall0;
  S.recordNs += R.submitNs - R.recordNs;
  S.queueSubmitNs += R.submittedNs - R.submitNs;
  S.waitNs += R.doneNs - R.submittedNs;
  S.finishNs += endNs - R.doneNs;
  return st;
}

}  // namespace vugpu::vk
