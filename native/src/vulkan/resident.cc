// Resident VRAM: bindings a guest marks DEVICE_CACHED (hw-spec §6.3; the Vulkan driver marks its
// DEVICE_LOCAL memory, which applications cannot map) run on a device-local copy of their VRAM
// that outlives the launch. Without it the device-memory path copies every binding up at every
// launch: llama.cpp reads each weight once per token, so the whole model crossed PCIe per token.
//
// A mirror is device memory at the VRAM's own offsets, one per 1 GiB of VRAM a context's launches
// touch (a binding never spans two: it then takes the per-launch path; VUGPU_VK_RESIDENT_SPAN). Its pages are valid when
// a launch has uploaded them from the VRAM; a launch's writes land in the mirror and are written
// back to the VRAM in the same command buffer (write-through), so the VRAM (BAR1, the copy
// engine, a restart's keeper) always holds the bytes and the mirror stays valid after writes.
// Any other engine write to VRAM (copies, fills, built-ins, the command processor, a detached
// slice's scrub) invalidates the pages on every mirror (InvalidateVram, from src/gpu). Guest
// CPU stores through BAR1 are not seen: hw-spec §6.3 says when they count.
//
// Isolation: a page is uploaded only from the launching VM's own window over it, and VMs' slices
// are disjoint, so a mirror never holds bytes one VM may see and another wrote; a slice given to
// a new VM was scrubbed, and the scrub invalidated it.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "launch.h"
#include "tuning.h"
#include "vk.h"

namespace vugpu::vk {

namespace {

std::atomic<uint64_t> g_vramBytes{0};
std::atomic<uint64_t> g_span{1ull << 30};  // VRAM per mirror (Tuning::residentSpan)
constexpr uint64_t kPage = 4096;

void DestroyMirror(Context& c, Mirror* m) {
  c.fn.vkDestroyBuffer(c.device, m->buf, nullptr);
  c.fn.vkFreeMemory(c.device, m->mem, nullptr);
  GetImportStats().mirrorBytes -= m->size;
  delete m;
}

// The mirror of span `base` on c, made if needed (under c.resMu). null: no memory for it.
Mirror* GetMirror(Context& c, uint64_t base) {
  for (Mirror* m : c.mirrors)
    if (m->base == base) return m;
  const uint64_t vram = g_vramBytes.load();
  if (base >= vram || c.devMemType == UINT32_MAX) return nullptr;
  auto* m = new Mirror();
  m->base = base;
  m->size = std::min(g_span.load(), vram - base);
  if (CreateBufferRaw(c, m->size,
                      VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                          VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                      true, &m->buf) != VK_SUCCESS) {
    delete m;
    return nullptr;
  }
  VkMemoryRequirements req;
  c.fn.vkGetBufferMemoryRequirements(c.device, m->buf, &req);
  VkMemoryAllocateInfo ma{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ma.allocationSize = req.size;
  ma.memoryTypeIndex = c.devMemType;
  if (!(req.memoryTypeBits & (1u << c.devMemType)) ||
      c.fn.vkAllocateMemory(c.device, &ma, nullptr, &m->mem) != VK_SUCCESS) {
    c.fn.vkDestroyBuffer(c.device, m->buf, nullptr);
    delete m;
    return nullptr;
  }
  if (c.fn.vkBindBufferMemory(c.device, m->buf, m->mem, 0) != VK_SUCCESS) {
    c.fn.vkDestroyBuffer(c.device, m->buf, nullptr);
    c.fn.vkFreeMemory(c.device, m->mem, nullptr);
    delete m;
    return nullptr;
  }
  m->serial = NextSerial();
  m->valid.assign(size_t(m->size / kPage), 0);
  GetImportStats().mirrorBytes += m->size;
  c.mirrors.push_back(m);
  return m;
}

}  // namespace

void SetResidentVram(uint64_t bytes) {
  // Mirrors of an earlier span stay usable: they are found by their base and hold their size.
  g_span.store(Tune().residentSpan);
  g_vramBytes.store(bytes);
}

bool ResidencyOn(const Context& c) {
  return g_vramBytes.load() != 0 && c.info.staging && !Tune().noResident && c.info.importAlign <= kPage &&
         kPage % c.info.importAlign == 0;
}

bool PlanResident(Context& c, uint64_t vstart, uint64_t len, Mirror** out, std::vector<VkBufferCopy>* up) {
  const uint64_t span = g_span.load();
  if (len == 0 || vstart % kPage || len % kPage || vstart / span != (vstart + len - 1) / span) return false;
  std::lock_guard<std::mutex> lk(c.resMu);
  Mirror* m = GetMirror(c, vstart / span * span);
  if (!m || vstart + len > m->base + m->size) return false;
  up->clear();
  const uint64_t p0 = (vstart - m->base) / kPage, p1 = p0 + len / kPage;
  uint64_t found = 0;
  for (uint64_t p = p0; p < p1;) {
    if (m->valid[p]) {
      found += kPage;
      p++;
      continue;
    }
    uint64_t q = p;
    while (q < p1 && !m->valid[q]) m->valid[q++] = 1;
    up->push_back({(p - p0) * kPage, p * kPage, (q - p) * kPage});
    p = q;
  }
  GetImportStats().residentBytes += found;
  *out = m;
  return true;
}

void UnplanResident(Context& c, Mirror* m, const std::vector<VkBufferCopy>& up) {
  std::lock_guard<std::mutex> lk(c.resMu);
  for (const VkBufferCopy& x : up)
    std::fill_n(m->valid.begin() + long(x.dstOffset / kPage), size_t(x.size / kPage), 0);
}

void InvalidateMirrors(Context& c, uint64_t off, uint64_t len) {
  std::lock_guard<std::mutex> lk(c.resMu);
  for (Mirror* m : c.mirrors) {
    const uint64_t a = std::max(off, m->base), e = std::min(off + len, m->base + m->size);
    if (a >= e) continue;
    uint64_t dropped = 0;
    for (uint64_t p = (a - m->base) / kPage; p < (e - m->base + kPage - 1) / kPage; p++) {
      dropped += m->valid[p];
      m->valid[p] = 0;
    }
    GetImportStats().residentDropped += dropped;
  }
}

void CheckResident(Run& R, const Group& g, uint64_t vstart) {
  Context& c = R.c;
  const DeviceFns& f = c.fn;
  const uint64_t size = g.end - g.start;
  if (!g.resUp.empty()) return;  // only groups wholly resident: those read nothing fresh
  PoolBuf tmp;
  if (AcquirePoolBuf(c, size, true, &tmp) != VK_SUCCESS) return;
  // The lane's command buffer, before the launch records into it (its replay is given up).
  R.lane->replayKey.clear();
  f.vkResetCommandPool(c.device, R.lane->cmdPool, 0);
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  f.vkBeginCommandBuffer(R.lane->cmd, &bi);
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
  f.vkCmdPipelineBarrier(R.lane->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
  VkBufferCopy x{g.mirOff, 0, size};
  f.vkCmdCopyBuffer(R.lane->cmd, g.mir->buf, tmp.buf, 1, &x);
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  f.vkCmdPipelineBarrier(R.lane->cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0,
                         nullptr, 0, nullptr);
  f.vkEndCommandBuffer(R.lane->cmd);
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &R.lane->cmd;
  f.vkResetFences(c.device, 1, &R.lane->fence);
  VkResult r;
  {
    const QueueRef& q = c.WayQueue(R.in.way);
    std::lock_guard<std::mutex> lk(*q.mu);
    r = f.vkQueueSubmit(q.queue, 1, &si, R.lane->fence);
  }
  if (r == VK_SUCCESS) r = f.vkWaitForFences(c.device, 1, &R.lane->fence, VK_TRUE, 10'000'000'000ull);
  f.vkResetFences(c.device, 1, &R.lane->fence);
  if (r == VK_SUCCESS) {
    const uint8_t* dev = static_cast<const uint8_t*>(tmp.map);
    const uint8_t* host = reinterpret_cast<const uint8_t*>(uintptr_t(g.start));
    uint64_t first = UINT64_MAX, diff = 0;
    if (memcmp(dev, host, size) != 0)
      for (uint64_t o = 0; o < size; o++) {
        if (dev[o] == host[o]) continue;
        if (first == UINT64_MAX) first = o;
        diff++;
      }
    if (diff)
      fprintf(stderr, "vugpu: resident check: program %llu grid %ux%ux%u: VRAM 0x%llx+%llu: %llu bytes differ from the mirror, first at +%llu (mirror %02x, VRAM %02x); members %zu\n",
              (unsigned long long)R.prog.serial, R.in.grid[0], R.in.grid[1], R.in.grid[2], (unsigned long long)vstart,
              (unsigned long long)size, (unsigned long long)diff, (unsigned long long)first, dev[first], host[first],
              g.members.size());
  }
  ReleasePoolBuf(c, tmp);
}

void FreeMirrors(Context& c) {
  std::lock_guard<std::mutex> lk(c.resMu);
  for (Mirror* m : c.mirrors) DestroyMirror(c, m);
  c.mirrors.clear();
}

}  // namespace vugpu::vk
