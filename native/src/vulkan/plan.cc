// Plan: a launch's operands and how they reach the device. Bindings are grouped by host range and
// acquired (imported zero-copy, or copied to device-local buffers on the device-memory path);
// on that path a large launch is cut into panels of workgroup rows whose uploads, compute and
// write-backs overlap on three queues, and a GEMM's first panel into slices of k.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "../common.h"
#include "launch.h"

namespace vugpu::vk {

using addon::NowNs;

namespace {

// Group the bindings and acquire their host side. 0 or -errno.
int MakeGroups(Run& R) {
  const Program& prog = R.prog;
  const DispatchInput& in = R.in;
  const uint64_t al = R.c.info.importAlign;
  const size_t n = prog.setBindings.size();
  R.groupOf.assign(n, -1);
  R.writable.assign(n, true);
  for (size_t i = 0; i < n; i++)
    for (const spirv::BindingUse& u : prog.entry.bindings)
      if (u.binding == prog.setBindings[i]) R.writable[i] = u.writable;
  std::vector<size_t> order;
  for (size_t i = 0; i < n; i++)
    if (in.lengths[prog.setBindings[i]] > 0) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return in.windows[prog.setBindings[a]] < in.windows[prog.setBindings[b]];
  });
  for (size_t i : order) {
    uint64_t addr = in.windows[prog.setBindings[i]], len = in.lengths[prog.setBindings[i]];
    uint64_t start = addr & ~(al - 1), end = (addr + len + al - 1) & ~(al - 1);
    if (R.groups.empty() || start >= R.groups.back().end) R.groups.emplace_back();
    Group& g = R.groups.back();
    if (g.members.empty()) g.start = start;
    g.end = std::max(g.end, end);
    g.lo = std::min(g.lo, addr);
    g.hi = std::max(g.hi, addr + len);
    g.members.push_back(i);
    R.groupOf[i] = int(R.groups.size() - 1);
  }
  return 0;
}

// Staged bindings the dispatch overwrites completely (DispatchInput::overwrites, built-ins only):
// their upload is skipped and their device range zero-filled instead (device-local, no bus
// traffic: a GEMM's C is a third of what it moves). Invariant: the write-back of a staged
// binding never carries bytes this VM did not put there. The device buffers come from a pool
// shared by all VMs, so a range that were neither uploaded nor cleared would hand another VM's
// stale bytes to this one wherever the kernel left a byte unwritten — which a cancelled
// launch (the cancel word ends it early) or a loop-cap cut does whatever the plan promised. The
// fill keeps the invariant on those paths; the plan's promise (every byte written) keeps the
// results equal to the uploaded path's. A binding sharing bytes with another of the group is
// uploaded as before (the other may read them). VUGPU_VK_UPLOAD_ALL=1 turns the skip off
// (Tuning::uploadAll).
void MarkOverwritten(Run& R) {
  const DispatchInput& in = R.in;
  const size_t n = R.prog.setBindings.size();
  R.zeroed.assign(n, false);
  if (!in.builtin || in.overwrites.empty() || R.t.uploadAll) return;
  for (size_t i = 0; i < n; i++) {
    const uint32_t b = R.prog.setBindings[i];
    if (b >= in.overwrites.size() || !in.overwrites[b] || R.groupOf[i] < 0 || !R.writable[i]) continue;
    const Group& g = R.groups[size_t(R.groupOf[i])];
    const uint64_t a = in.windows[b], e = a + in.lengths[b];
    // vkCmdFillBuffer: offset and size multiples of 4 (also each panel's rows).
    const uint64_t rb = b < in.panelRowBytes.size() ? in.panelRowBytes[b] : 0;
    if ((a - g.start) % 4 || (e - a) % 4 || rb % 4) continue;
    bool alone = true;
    for (size_t j : g.members) {
      const uint32_t o = R.prog.setBindings[j];
      if (j != i && in.windows[o] < e && a < in.windows[o] + in.lengths[o]) alone = false;
    }
    R.zeroed[i] = alone;
  }
}


// Zero-copy (lavapipe, integrated GPUs): the kernel runs on the imported host memory.
int AcquireZeroCopy(Run& R) {
  uint64_t t0 = NowNs();
  uint64_t misses0 = GetImportStats().cacheHits.load();
  size_t fresh = 0;
  for (Group& g : R.groups) {
    VkResult r = AcquireImport(R.c, g.start, g.end - g.start, &g.imp);
    if (r != VK_SUCCESS) {
      g.imp = nullptr;
      return ImportError(R.c, r);
    }
    fresh++;
  }
  size_t hits = size_t(GetImportStats().cacheHits.load() - misses0);
  if (fresh > hits) {
    GetImportStats().count += fresh - hits;
    GetImportStats().ns += NowNs() - t0;
  }
  return 0;
}

// Resident copies of the VRAM the group's writable members write through the staged path are
// stale: dropped on every context now; g.staleVram keeps the ranges for the drop at the end.
void NoteStagedWrites(Run& R, Group& g) {
  const DispatchInput& in = R.in;
  for (size_t i : g.members) {
    const uint32_t b = R.prog.setBindings[i];
    if (!R.writable[i] || b >= in.vram.size() || in.vram[b] == UINT64_MAX) continue;
    InvalidateVram(in.vram[b], in.lengths[b]);
    R.staleVram.emplace_back(in.vram[b], in.lengths[b]);
  }
}

// The VRAM offset of g.start when the group can run on the resident copy of its VRAM
// (resident.cc): every member DEVICE_CACHED and one contiguous VRAM range, the same for all
// members (their windows' offsets to the VRAM agree). UINT64_MAX otherwise.
uint64_t ResidentStart(const Run& R, const Group& g) {
  const DispatchInput& in = R.in;
  int64_t delta = 0;
  bool first = true;
  for (size_t i : g.members) {
    const uint32_t b = R.prog.setBindings[i];
    if (b >= 32 || !((in.residentMask >> b) & 1) || b >= in.vram.size() || in.vram[b] == UINT64_MAX) return UINT64_MAX;
    const int64_t d = int64_t(in.vram[b] - in.windows[b]);
    if (!first && d != delta) return UINT64_MAX;
    delta = d;
    first = false;
  }
  if (first) return UINT64_MAX;
  return uint64_t(int64_t(g.start) + delta);
}

// The group's host side: its range imported, or (a transient window, or a range the driver
// refuses to import) a pooled host-visible bounce buffer the CPU fills with the regions `up()`
// names (offsets relative to g.start). 0 or -errno; *fresh counts imports.
template <class Regions>
int AcquireHostSide(Run& R, Group& g, bool transient, Regions up, size_t* fresh) {
  Context& c = R.c;
  const uint64_t size = g.end - g.start;
  VkResult r = transient ? VK_ERROR_FEATURE_NOT_PRESENT : AcquireImport(c, g.start, size, &g.imp);
  if (r == VK_ERROR_DEVICE_LOST) {
    g.imp = nullptr;
    return LostHere(c, "import");
  }
  if (r == VK_SUCCESS) {
    (*fresh)++;
    return 0;
  }
  g.imp = nullptr;
  if ((r = AcquirePoolBuf(c, size, true, &g.bounce)) != VK_SUCCESS) return ImportError(c, r);
  for (const VkBufferCopy& x : up()) {
    memcpy(static_cast<uint8_t*>(g.bounce.map) + x.srcOffset,
           reinterpret_cast<const void*>(uintptr_t(g.start + x.srcOffset)), x.size);
    GetImportStats().bounceBytes += x.size;
  }
  return 0;
}

// Device memory: a device-local copy per group, its host side imported (or, where the driver
// refuses to import the range, a host-visible bounce buffer filled by the CPU).
int AcquireStaged(Run& R) {
  Context& c = R.c;
  uint64_t t0 = NowNs();
  uint64_t hits0 = GetImportStats().cacheHits.load();
  size_t fresh = 0;
  // A window mapped for this launch only (guest system memory) is copied through a pooled
  // pinned buffer: importing it would pin and map its pages for the device at every launch
  // (VUGPU_VK_IMPORT_TRANSIENT=1 imports it anyway, for measurement).
  const bool bounceTransient = !R.t.importTransient;
  const bool resident = !R.in.builtin && R.in.residentMask && ResidencyOn(c);
  for (Group& g : R.groups) {
    const uint64_t size = g.end - g.start;
    if (resident) {
      const uint64_t vs = ResidentStart(R, g);
      if (vs != UINT64_MAX && PlanResident(c, vs, size, &g.mir, &g.resUp)) {
        g.mirOff = vs - g.mir->base;
        if (R.t.residentCheck) CheckResident(R, g, vs);
        bool writes = false;
        for (size_t i : g.members) writes = writes || R.writable[i];
        for (const VkBufferCopy& x : g.resUp) GetImportStats().residentUploadBytes += x.size;
        // A VM launching on two contexts (a CPU device's way and the serving one) has a mirror
        // on each: what this one writes is stale on the other.
        if (writes) InvalidateVram(vs, size, &c);
        // Nothing to move: no import (the host side is touched only to upload or write back).
        if (g.resUp.empty() && !writes) continue;
        if (int st = AcquireHostSide(R, g, false, [&] { return g.resUp; }, &fresh)) return st;
        continue;
      }
      g.mir = nullptr;
      g.resUp.clear();
      // Marked DEVICE_CACHED but staged (spans two mirrors, aliased with other bindings, no
      // memory): the engine did not drop resident copies of what it writes (src/gpu/compute.ts),
      // so this launch does, now and when it is done (WaitAndFinish).
      NoteStagedWrites(R, g);
    }
    const bool transient = bounceTransient && InsideTransientWindow(g.start, size);
    // Only what is uploaded: a binding the plan zero-fills on the device is never read.
    int st = AcquireHostSide(R, g, transient, [&] {
      std::vector<VkBufferCopy> reg;
      PanelRegions(R, g, 0, 1, R.in.grid[1], false, &reg);
      return reg;
    }, &fresh);
    if (st) return st;
    if (VkResult r = AcquirePoolBuf(c, size, false, &g.dev); r != VK_SUCCESS) return ImportError(c, r);
  }
  size_t hits = size_t(GetImportStats().cacheHits.load() - hits0);
  if (fresh > hits) {
    GetImportStats().count += fresh - hits;
    GetImportStats().ns += NowNs() - t0;
  }
  return 0;
}

uint32_t PanelCount(Run& R, uint32_t* rowsPer) {
  const DispatchInput& in = R.in;
  const uint32_t gy = in.grid[1];
  *rowsPer = gy;
  if (!R.c.info.staging || in.panelRowBytes.empty() || in.grid[2] != 1 || gy < 2) return 1;
  uint64_t banded = 0;
  for (size_t i = 0; i < R.prog.setBindings.size(); i++) {
    uint32_t b = R.prog.setBindings[i];
    uint64_t rb = b < in.panelRowBytes.size() ? in.panelRowBytes[b] : 0;
    if (!rb || R.groupOf[i] < 0) continue;
    if (R.groups[size_t(R.groupOf[i])].members.size() != 1) return 1;  // aliased: stage whole
    banded += std::min<uint64_t>(rb * gy, in.lengths[b]);
  }
  const uint64_t panelBytes = R.t.panelBytes, panelWorkgroups = R.t.panelWorkgroups, maxPanels = R.t.maxPanels;
  uint64_t p = std::min<uint64_t>({maxPanels, banded / panelBytes,
                                   uint64_t(in.grid[0]) * gy / panelWorkgroups, gy});
  if (p < 2) {
    // Too small for such panels but not for two of half their size: two panels, the first as two
    // slices of k (PlanKStream), when the plan streams an operand by k: faster than one panel in
    // k slices at 1024³ and 2048³ in every interleaved run on a GPU, where three or four panels
    // were slower (docs/results.md, the GPU host's GEMM panels). VUGPU_VK_PANEL_PAIR=0: one panel.
    if (!R.t.panelPair || maxPanels < 2 || in.kStream.binding == UINT32_MAX ||
        banded < panelBytes || uint64_t(in.grid[0]) * gy < panelWorkgroups)
      return 1;
    p = 2;
    R.panelPair = true;
  }
  *rowsPer = uint32_t((gy + p - 1) / p);
  for (size_t i = 0; i < R.prog.setBindings.size(); i++) {
    uint32_t b = R.prog.setBindings[i];
    if (b < in.panelRowBytes.size() && in.panelRowBytes[b] && R.groupOf[i] >= 0)
      R.groups[size_t(R.groupOf[i])].panel = int(i);
  }
  return (gy + *rowsPer - 1) / *rowsPer;
}

// A slab of the streamed binding is at least this big (VUGPU_VK_K_SLAB_BYTES overrides), and there
// are at most kMaxKSlices (tuning.h): each slice re-reads and re-writes the first panel's output and adds a
// dispatch, so slabs much smaller than a panel's own upload gain nothing.
constexpr uint64_t kKSlabBytes = 32ull << 20;
// A launch of one panel streams its operand too, in slabs of at least this: a 1024³ GEMM's B
// (4 MiB) as 2 slabs: on a GPU it brought 1024³ and 2048³ to direct Vulkan's times from above
// them with the copies on the compute queue (docs/results.md).
constexpr uint64_t kOnePanelSlabBytes = 2ull << 20;

// Plans the first panel's k slices (KStream) once the panels are known. On a GPU the first
// panel otherwise waits for the whole streamed operand (GEMM 8192³: B is 256 MiB, all of it over
// PCIe) before any compute starts. VUGPU_VK_K_SLICES=1 turns it off (measurement).
void PlanKStream(Run& R, uint32_t panels) {
  const DispatchInput& in = R.in;
  const DispatchInput::KStream& k = in.kStream;
  if (!in.builtin || k.binding == UINT32_MAX || !R.c.info.staging) return;
  const uint64_t maxSlices = R.t.kSlices;
  if (maxSlices < 2 || k.rowBytes == 0) return;
  size_t bi = SIZE_MAX;
  for (size_t i = 0; i < R.prog.setBindings.size(); i++)
    if (R.prog.setBindings[i] == k.binding) bi = i;
  if (bi == SIZE_MAX || R.groupOf[bi] < 0 || R.zeroed[bi]) return;
  const Group& g = R.groups[size_t(R.groupOf[bi])];
  if (g.panel >= 0 || g.members.size() != 1) return;
  auto u32 = [&](uint32_t off, uint32_t* v) {
    if (uint64_t(off) + 4 > in.params.size()) return false;
    memcpy(v, in.params.data() + off, 4);
    return true;
  };
  uint32_t kb = 0, ke = 0, acc = 0;
  if (!u32(k.k0Offset, &kb) || !u32(k.k1Offset, &ke) || !u32(k.accumulateOffset, &acc) || ke <= kb) return;
  const uint64_t addr = in.windows[k.binding], len = in.lengths[k.binding];
  if (uint64_t(ke) * k.rowBytes > len) return;
  const uint64_t slab = R.t.kSlabBytes ? R.t.kSlabBytes : panels < 2 ? kOnePanelSlabBytes : kKSlabBytes;
  uint64_t s = R.panelPair && !R.t.kSlabNamed ? std::min<uint64_t>(maxSlices, 2) : std::min<uint64_t>(maxSlices, len / slab);
  if (s < 2) return;
  // Slices of k in multiples of 16 (the GEMM shaders step k by 16 per loop pass).
  const uint32_t step = uint32_t(((ke - kb + s - 1) / s + 15) / 16 * 16);
  KStreamPlan& p = R.ks;
  p.kBound.clear();
  for (uint32_t x = kb; x < ke; x += step) p.kBound.push_back(x);
  p.kBound.push_back(ke);
  p.slices = uint32_t(p.kBound.size() - 1);
  if (p.slices < 2) {
    p = KStreamPlan{};
    return;
  }
  p.group = R.groupOf[bi];
  p.k0Offset = k.k0Offset;
  p.k1Offset = k.k1Offset;
  p.accumulateOffset = k.accumulateOffset;
  // Slab s: rows [kBound[s], kBound[s+1]); the first also takes the rows before k0, the last
  // whatever follows: together exactly the binding's window, as the one upload was.
  for (uint32_t x = 0; x < p.slices; x++) {
    uint64_t a = x == 0 ? addr : addr + uint64_t(p.kBound[x]) * k.rowBytes;
    uint64_t e = x + 1 == p.slices ? addr + len : addr + uint64_t(p.kBound[x + 1]) * k.rowBytes;
    p.slab.push_back({a - g.start, a - g.start, e - a});
  }
}


}  // namespace

// Copy regions of group g for panel p (upload or download): offsets relative to g.start. An
// upload leaves out the zeroed bindings' ranges and lists them in *fills when given.
void PanelRegions(const Run& R, const Group& g, uint32_t p, uint32_t panels, uint32_t rowsPer, bool down,
                  std::vector<VkBufferCopy>* out, std::vector<VkBufferCopy>* fills) {
  const DispatchInput& in = R.in;
  if (g.panel >= 0) {
    uint32_t b = R.prog.setBindings[size_t(g.panel)];
    if (down && !R.writable[size_t(g.panel)]) return;
    uint64_t rb = in.panelRowBytes[b], addr = in.windows[b], len = in.lengths[b];
    uint64_t a = uint64_t(p) * rowsPer * rb;
    uint64_t e = std::min<uint64_t>(len, uint64_t(std::min(in.grid[1], (p + 1) * rowsPer)) * rb);
    // The last panel also takes whatever lies past the last row (nothing for a GEMM).
    if (p == panels - 1) e = len;
    if (a >= e) return;
    if (!down && R.zeroed[size_t(g.panel)]) {
      if (fills) fills->push_back({0, addr + a - g.start, e - a});
      return;
    }
    out->push_back({addr + a - g.start, addr + a - g.start, e - a});
    return;
  }
  if (!down) {
    if (p != 0) return;
    // [lo, hi) less the zeroed members (sorted by window, disjoint from every other member).
    uint64_t cur = g.lo;
    for (size_t i : g.members) {
      if (!R.zeroed[i]) continue;
      uint32_t b = R.prog.setBindings[i];
      uint64_t a = in.windows[b], e = a + in.lengths[b];
      if (a > cur) out->push_back({cur - g.start, cur - g.start, a - cur});
      if (fills) fills->push_back({0, a - g.start, e - a});
      cur = std::max(cur, e);
    }
    if (cur < g.hi) out->push_back({cur - g.start, cur - g.start, g.hi - cur});
    return;
  }
  if (p != panels - 1) return;
  // Write back exactly the writable bindings' bytes, merged (regions must not overlap).
  std::vector<std::pair<uint64_t, uint64_t>> w;
  for (size_t i : g.members)
    if (R.writable[i]) {
      uint32_t b = R.prog.setBindings[i];
      w.emplace_back(in.windows[b], in.windows[b] + in.lengths[b]);
    }
  std::sort(w.begin(), w.end());
  for (size_t k = 0; k < w.size();) {
    uint64_t a = w[k].first, e = w[k].second;
    for (k++; k < w.size() && w[k].first <= e; k++) e = std::max(e, w[k].second);
    out->push_back({a - g.start, a - g.start, e - a});
  }
}

namespace {

// The descriptor of each binding: its group's buffer (the import, or the device copy) at the
// binding's offset; a zero-length binding is a null descriptor.
void BindInfos(Run& R) {
  for (size_t i = 0; i < R.prog.setBindings.size(); i++) {
    uint32_t b = R.prog.setBindings[i];
    if (R.groupOf[i] < 0) {
      R.infos.push_back({VK_NULL_HANDLE, 0, VK_WHOLE_SIZE});
      continue;
    }
    const Group& g = R.groups[size_t(R.groupOf[i])];
    if (g.mir) {
      R.infos.push_back({g.mir->buf, g.mirOff + (R.in.windows[b] - g.start), R.in.lengths[b]});
      continue;
    }
    VkBuffer buf = R.c.info.staging ? g.dev.buf : g.imp->buf;
    R.infos.push_back({buf, R.in.windows[b] - g.start, R.in.lengths[b]});
  }
}

// Small staged launches (most of the GPUvm benchmarks, NOP) copy on the compute queue in the
// same command buffer: one submission, no cross-queue semaphores (their latency is more than
// the copies). Large ones, and those streaming an operand, use the copy engines, in panels
// where the plan allows.
bool OneCommandBuffer(const Run& R) {
  const DeviceInfo& di = R.c.info;
  if (!di.staging) return true;
  if (R.panels != 1) return false;
  uint64_t bytes = 0;
  std::vector<VkBufferCopy> reg;
  for (const Group& g : R.groups) {
    PanelRegions(R, g, 0, 1, R.rowsPer, false, &reg);
    PanelRegions(R, g, 0, 1, R.rowsPer, true, &reg);
  }
  for (auto& x : reg) bytes += x.size;
  // A guest's program runs as one command buffer on its way's queue whatever it moves: in the
  // chain its write-back would wait on the download queue that every VM shares, and a program
  // that never ends would hold every later write-back there. (One panel overlaps nothing; the
  // chain's gain is the copy engines' rate for large transfers — built-ins keep it: they end.)
  return R.ks.slices < 2 && (bytes <= R.t.oneQueueBytes || di.transferQueues == 0 || !R.in.builtin);
}

}  // namespace

int PlanLaunch(Run& R) {
  Context& c = R.c;
  const DeviceInfo& di = c.info;
  const bool staged = di.staging;
  int st = MakeGroups(R);
  if (st == 0) MarkOverwritten(R);
  if (st == 0) st = staged ? AcquireStaged(R) : AcquireZeroCopy(R);
  if (st) {
    if (st == -ENODEV) R.abandoned = true;
    return st;
  }
  BindInfos(R);
  R.rowsPer = R.in.grid[1];
  R.panels = PanelCount(R, &R.rowsPer);
  // One panel on a device without copy queues: one command buffer, nothing to overlap.
  // VUGPU_VK_CHAIN_ONE_QUEUE=1 runs the chain there anyway (tests: lavapipe has one queue).
  if (staged && (R.panels > 1 || di.transferQueues > 0 || R.t.chainOneQueue)) {
    PlanKStream(R, R.panels);
    VkResult r = PrepareStagingLane(c, R.lane, R.panels + R.ks.slices - 1);
    if (r) return r == VK_ERROR_DEVICE_LOST ? (R.abandoned = true, LostHere(c, "lane")) : -ENOMEM;
    if (R.panels > 1) GetImportStats().panels += R.panels;
  }
  R.oneCmd = OneCommandBuffer(R);
  return 0;
}

}  // namespace vugpu::vk
