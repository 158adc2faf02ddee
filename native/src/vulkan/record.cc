// Record: a launch's descriptor sets and command buffers — one command buffer on the way's queue,
// or per panel an upload, compute and download command buffer for the three-queue chain — and
// the replay of the lane's last recording when a launch is identical to it.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "../common.h"
#include "launch.h"

namespace vugpu::vk {

using addon::NowNs;

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

namespace {

void CopyBarrierToHost(const DeviceFns& f, VkCommandBuffer cmd, VkPipelineStageFlags src, VkAccessFlags access) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = access;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  f.vkCmdPipelineBarrier(cmd, src, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
}


// Records the compute part of panel [y0, y1) into cmd (begun and ended by the caller).
void RecordCompute(Run& R, VkCommandBuffer cmd, const VkDescriptorSet* sets, uint32_t y0, uint32_t y1,
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

// A launch identical to the lane's last one submits the same command buffers and descriptor
// sets again (recording and descriptor writes are a measurable part of a short launch's time on
// a GPU's pool thread, and of a staged GEMM's: docs/results.md). What was recorded depends on the
// program, grid, parameters, windows, the staging plan and the imports and device buffers
// alone — all in the key, buffers by serial. A bounced window is copied per launch: never.
void MakeReplayKey(Run& R) {
  thread_local std::vector<uint64_t> key;  // pool threads live long: no allocation per launch
  key.clear();
  R.key = &key;
  bool bounced = false;
  for (const Group& g : R.groups) bounced = bounced || g.bounce.buf != VK_NULL_HANDLE;
  R.replayable = !bounced && !R.t.noReplay;
  if (R.replayable) {
    const DispatchInput& in = R.in;
    const bool staged = R.c.info.staging;
    key.reserve(32 + in.params.size() / 8 + 2 * in.windows.size() + in.panelRowBytes.size() + 4 * R.groups.size());
    key.assign({R.prog.serial, R.ts ? 1u : 0u, R.oneCmd ? 1u : 0u, staged ? 1u : 0u, R.panels, R.rowsPer,
                R.ks.slices, R.fillEach ? 1u : 0u, R.orderAfter ? 1u : 0u, in.grid[0], in.grid[1], in.grid[2], R.prog.pushRange,
                in.params.size(), in.windows.size(), in.overwrites.size(), in.panelRowBytes.size(), R.groups.size(),
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
      // Resident: the mirror and where it sits; the first launch uploads pages, later ones not.
      key.push_back(g.mir ? g.mir->serial : 0);
      key.push_back(g.mirOff);
      key.push_back(g.resUp.size());
      for (const VkBufferCopy& x : g.resUp) key.push_back(x.dstOffset), key.push_back(x.size);
    }
  }
  R.replay = R.replayable && key == R.lane->replayKey;
  if (!R.replay) R.lane->replayKey.clear();  // the sets and command buffers change below
}

void ToComputeBarrier(const DeviceFns& f, VkCommandBuffer cmd, VkPipelineStageFlags src, VkAccessFlags access) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = access;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  f.vkCmdPipelineBarrier(cmd, src, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

// One command buffer on the way's queue: uploads and zero fills, the dispatch, the write-back.
int RecordOne(Run& R, const VkCommandBufferBeginInfo& bi) {
  const DeviceFns& f = R.c.fn;
  VkCommandBuffer cmd = R.lane->cmd;
  f.vkBeginCommandBuffer(cmd, &bi);
  std::vector<VkBufferCopy> reg, fills;
  // Nothing staged (a launch without buffers): no copies, so no barriers around them.
  const bool copies = R.c.info.staging && !R.groups.empty();
  bool mirrored = false;
  if (copies)
    for (const Group& g : R.groups) mirrored = mirrored || g.mir != nullptr;
  // Work before it on the queue wrote what this launch reads: an earlier launch of its batch
  // still running (orderAfter), or — a mirror outlives the launch — the way's earlier launches,
  // which wrote the mirror in their shaders and read it in their write-backs. Their writes are
  // made visible to this launch's copies and shaders, and its copies wait for their reads.
  if (R.orderAfter || mirrored) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                       VK_ACCESS_TRANSFER_WRITE_BIT;
    f.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                           VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0,
                           nullptr, 0, nullptr);
  }
  if (copies) {
    for (const Group& g : R.groups) {
      if (g.mir) {
        if (!g.resUp.empty())
          f.vkCmdCopyBuffer(cmd, g.imp ? g.imp->buf : g.bounce.buf, g.mir->buf, uint32_t(g.resUp.size()), g.resUp.data());
        for (auto& x : g.resUp) R.up += x.size;
        continue;
      }
      reg.clear();
      fills.clear();
      PanelRegions(R, g, 0, 1, R.rowsPer, false, &reg, &fills);
      if (!reg.empty()) f.vkCmdCopyBuffer(cmd, g.imp ? g.imp->buf : g.bounce.buf, g.dev.buf, uint32_t(reg.size()), reg.data());
      for (auto& x : reg) R.up += x.size;
      for (auto& x : fills) f.vkCmdFillBuffer(cmd, g.dev.buf, x.dstOffset, x.size, 0), R.zeroedBytes += x.size;
    }
    ToComputeBarrier(f, cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
  }
  RecordCompute(R, cmd, R.sets, 0, R.in.grid[1], true, true, copies);
  if (copies) {
    for (const Group& g : R.groups) {
      reg.clear();
      PanelRegions(R, g, 0, 1, R.rowsPer, true, &reg);
      if (g.mir)
        for (auto& x : reg) x.srcOffset += g.mirOff;
      if (!reg.empty()) f.vkCmdCopyBuffer(cmd, g.mir ? g.mir->buf : g.dev.buf, g.imp ? g.imp->buf : g.bounce.buf, uint32_t(reg.size()), reg.data());
      for (auto& x : reg) R.down += x.size;
    }
    CopyBarrierToHost(f, cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
  }
  return f.vkEndCommandBuffer(cmd) ? -ENOMEM : 0;
}

using Fills = std::vector<std::pair<VkBuffer, VkBufferCopy>>;

// Panel p's uploads into u (with a k stream, only slab 0 of the streamed binding: the rest go
// slab by slab) and its write-back into d; the zero fills to run before its compute into *fills.
// The zero fills of every panel go before the first panel's dispatch: a fill and its barrier
// before each panel would make the GPU drain between panels (the last wave of one panel no
// longer overlapping the first of the next). VUGPU_VK_FILL_EACH_PANEL=1: fill per panel
// (measurement).
void RecordPanelCopies(Run& R, uint32_t p, VkCommandBuffer u, VkCommandBuffer d, Fills* panelFills) {
  const DeviceFns& f = R.c.fn;
  const uint32_t panels = R.panels, rowsPer = R.rowsPer;
  std::vector<VkBufferCopy> reg, fills;
  panelFills->clear();
  for (size_t gi = 0; gi < R.groups.size(); gi++) {
    const Group& g = R.groups[gi];
    VkBuffer host = g.imp ? g.imp->buf : g.bounce.buf;
    reg.clear();
    fills.clear();
    PanelRegions(R, g, p, panels, rowsPer, false, &reg, &fills);
    if (R.ks.slices > 1 && p == 0 && int(gi) == R.ks.group) reg.assign(1, R.ks.slab[0]);  // the rest: slab by slab
    if (!reg.empty()) f.vkCmdCopyBuffer(u, host, g.dev.buf, uint32_t(reg.size()), reg.data());
    for (auto& x : reg) R.up += x.size;
    if (R.fillEach) {
      for (auto& x : fills) panelFills->emplace_back(g.dev.buf, x), R.zeroedBytes += x.size;
    } else if (p == 0) {
      for (uint32_t q = 0; q < panels; q++) {
        std::vector<VkBufferCopy> qr, qf;
        PanelRegions(R, g, q, panels, rowsPer, false, &qr, &qf);
        for (auto& x : qf) panelFills->emplace_back(g.dev.buf, x), R.zeroedBytes += x.size;
      }
    }
    reg.clear();
    PanelRegions(R, g, p, panels, rowsPer, true, &reg);
    if (!reg.empty()) f.vkCmdCopyBuffer(d, g.dev.buf, host, uint32_t(reg.size()), reg.data());
    for (auto& x : reg) R.down += x.size;
  }
}

// Slabs 1..S-1 of the streamed binding, one upload command buffer each (slab 0 goes with panel
// 0's upload). 0 or -ENOMEM.
int RecordSlabs(Run& R, const VkCommandBufferBeginInfo& bi) {
  const DeviceFns& f = R.c.fn;
  const KStreamPlan& ks = R.ks;
  for (uint32_t sl = 1; sl < ks.slices; sl++) {
    const Group& g = R.groups[size_t(ks.group)];
    VkCommandBuffer us = R.lane->upCmd[sl];
    f.vkBeginCommandBuffer(us, &bi);
    f.vkCmdCopyBuffer(us, g.imp ? g.imp->buf : g.bounce.buf, g.dev.buf, 1, &ks.slab[sl]);
    R.up += ks.slab[sl].size;
    if (f.vkEndCommandBuffer(us)) return -ENOMEM;
  }
  return 0;
}

// Panel p's compute: panel 0 as the k stream's S slices (slice s adding into what s-1 wrote,
// over its own range of k), other panels as one dispatch. The zero fills go on the compute
// queue, before the first dispatch: a GPU clears at its memory bandwidth there, and they stay
// off the copy queues that carry the uploads. 0 or -ENOMEM.
int RecordPanelCompute(Run& R, uint32_t p, const VkCommandBufferBeginInfo& bi, const Fills& panelFills) {
  const DeviceFns& f = R.c.fn;
  const KStreamPlan& ks = R.ks;
  const uint32_t S = ks.slices;
  const uint32_t y0 = p * R.rowsPer, y1 = std::min(R.in.grid[1], y0 + R.rowsPer);
  const uint32_t nk = p == 0 ? S : 1;
  std::vector<uint8_t> sliceParams;
  for (uint32_t sl = 0; sl < nk; sl++) {
    VkCommandBuffer k = R.lane->compCmd[p == 0 ? sl : S - 1 + p];
    f.vkBeginCommandBuffer(k, &bi);
    if (sl == 0) {
      for (auto& [buf, x] : panelFills) f.vkCmdFillBuffer(k, buf, x.dstOffset, x.size, 0);
      if (!panelFills.empty()) ToComputeBarrier(f, k, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
    } else {
      ToComputeBarrier(f, k, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT);
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
    RecordCompute(R, k, R.sets, y0, y1, p == 0 && sl == 0, p == R.panels - 1, false, prm);
    if (f.vkEndCommandBuffer(k)) return -ENOMEM;
  }
  return 0;
}

// The chain: panel p uploads its rows (all of the other bindings with panel 0), computes its
// rows, writes them back, on three queues (SubmitChain orders them); upload p+1 and download
// p-1 run beside compute p.
int RecordChain(Run& R, const VkCommandBufferBeginInfo& bi) {
  const DeviceFns& f = R.c.fn;
  Lane* lane = R.lane;
  const uint32_t S = R.ks.slices;
  Fills panelFills;
  for (uint32_t p = 0; p < R.panels; p++) {
    VkCommandBuffer u = lane->upCmd[p == 0 ? 0 : S - 1 + p], d = lane->downCmd[p];
    f.vkBeginCommandBuffer(u, &bi);
    f.vkBeginCommandBuffer(d, &bi);
    RecordPanelCopies(R, p, u, d, &panelFills);
    if (p == 0 && RecordSlabs(R, bi)) return -ENOMEM;
    if (p == R.panels - 1) CopyBarrierToHost(f, d, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
    if (RecordPanelCompute(R, p, bi, panelFills)) return -ENOMEM;
    if (f.vkEndCommandBuffer(u) || f.vkEndCommandBuffer(d)) return -ENOMEM;
  }
  return 0;
}

}  // namespace

int RecordLaunch(Run& R) {
  Context& c = R.c;
  const DeviceFns& f = c.fn;
  Lane* lane = R.lane;
  const bool staged = c.info.staging;
  R.fillEach = staged && R.t.fillEachPanel;
  MakeReplayKey(R);
  R.sets[0] = lane->replaySets[0];
  R.sets[1] = lane->replaySets[1];
  if (!R.replay && !WriteSets(c, lane, R.prog, R.infos, R.sets)) return -ENOMEM;
  // Host writes before vkQueueSubmit are visible to the device (submission's implicit host
  // write ordering).
  lane->controlWords[0] = 0;
  lane->controlWords[1] = 0;
  if (!R.replay) {
    f.vkResetCommandPool(c.device, lane->cmdPool, 0);
    if (staged && lane->xferPool && lane->xferPool != lane->cmdPool) f.vkResetCommandPool(c.device, lane->xferPool, 0);
  }
  f.vkResetFences(c.device, 1, &lane->fence);
  // The lane's last launch is done (its fence was waited for): its queries are free to reset.
  if (R.ts && c.info.hostQueryReset) f.vkResetQueryPool(c.device, lane->queries, 0, 2);
  R.recordNs = NowNs();
  if (R.replay) {
    GetImportStats().replays++;
    R.up = lane->replayBytes[0], R.down = lane->replayBytes[1], R.zeroedBytes = lane->replayBytes[2];
    return 0;
  }
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = R.replayable ? 0 : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  return R.oneCmd ? RecordOne(R, bi) : RecordChain(R, bi);
}

void RememberRecording(Run& R) {
  Lane* lane = R.lane;
  lane->replayKey = *R.key;
  lane->replaySets[0] = R.sets[0];
  lane->replaySets[1] = R.sets[1];
  lane->replayBytes[0] = R.up, lane->replayBytes[1] = R.down, lane->replayBytes[2] = R.zeroedBytes;
}

}  // namespace vugpu::vk
