// The device-memory path's resources: host imports (cached while they lie in an engine window),
// pooled device-local and bounce buffers, and the staged lanes' command buffers and semaphores.
//
// Why a cache of imports: importing a host range costs a GPU's driver more than a 1024³ GEMM at
// large sizes (it pins every page; docs/results.md). Engine
// windows over VRAM live as long as the window cache keeps them (src/gpu/windows.ts), so an
// import of a range inside one stays valid until that window is unmapped: memory.cc tells us
// (NoteWindowUnmapped) before it munmaps, and every cached import over it goes. Ranges that are
// not inside a known window (a test's heap buffer, whose pages can be freed and reused) are
// imported per dispatch, as before.
#include <algorithm>
#include <cstdio>
#include <mutex>

#include "vk.h"

namespace vugpu::vk {

namespace {

// Live windows [addr, addr + len) and live contexts (their import caches), process-wide.
struct LiveWindow {
  uint64_t addr, len;
  bool priv;       // a private copy-on-write mapping (a read-only window)
  bool transient;  // mapped for one launch
};
std::mutex g_regMu;
std::vector<LiveWindow> g_windows;
std::vector<Context*> g_contexts;

// As many as the engine's window cache keeps windows (src/gpu/windows.ts): an application's
// working set of buffers (llama.cpp: hundreds of tensors) then stays imported.
constexpr size_t kMaxCachedImports = 1024;
constexpr uint64_t kPoolRound = 1ull << 16;

// 1 = inside a shared window, 2 = inside a private (copy-on-write) window, 0 = neither.
int InsideWindow(uint64_t start, uint64_t size) {
  std::lock_guard<std::mutex> lk(g_regMu);
  for (auto& w : g_windows)
    if (start >= w.addr && start + size <= w.addr + w.len) return w.priv ? 2 : 1;
  return 0;
}

void FreeImport(Context& c, HostImport* i) {
  c.fn.vkDestroyBuffer(c.device, i->buf, nullptr);
  c.fn.vkFreeMemory(c.device, i->mem, nullptr);
  delete i;
}

// Drop cached imports overlapping [addr, addr + len); those in use die with their last user.
void DropImports(Context& c, uint64_t addr, uint64_t len) {
  std::vector<HostImport*> gone;
  {
    std::lock_guard<std::mutex> lk(c.impMu);
    auto& v = c.imports;
    for (size_t k = 0; k < v.size();) {
      HostImport* i = v[k];
      if (i->start < addr + len && addr < i->start + i->size) {
        v[k] = v.back();
        v.pop_back();
        i->cached = false;
        if (i->users) i->dead = true;
        else gone.push_back(i);
      } else {
        k++;
      }
    }
  }
  for (HostImport* i : gone) FreeImport(c, i);
}

VkResult ImportHost(Context& c, uint64_t start, uint64_t size, HostImport* out) {
  const DeviceFns& f = c.fn;
  void* p = reinterpret_cast<void*>(uintptr_t(start));
  VkMemoryHostPointerPropertiesEXT hp{VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
  VkResult r = f.vkGetMemoryHostPointerPropertiesEXT(
      c.device, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, p, &hp);
  if (r != VK_SUCCESS) return r;
  VkExternalMemoryBufferCreateInfo eb{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
  eb.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  VkBufferCreateInfo bc{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bc.pNext = &eb;
  bc.size = size;
  bc.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
             VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  uint32_t fams[2] = {c.info.queueFamily, c.info.transferFamily};
  if (fams[0] != fams[1]) {
    bc.sharingMode = VK_SHARING_MODE_CONCURRENT;
    bc.queueFamilyIndexCount = 2;
    bc.pQueueFamilyIndices = fams;
  }
  if ((r = f.vkCreateBuffer(c.device, &bc, nullptr, &out->buf))) return r;
  VkMemoryRequirements req;
  f.vkGetBufferMemoryRequirements(c.device, out->buf, &req);
  uint32_t bits = hp.memoryTypeBits & req.memoryTypeBits;
  VkDeviceMemory mem = VK_NULL_HANDLE;
  if (!bits || req.size > size) {
    r = VK_ERROR_INVALID_EXTERNAL_HANDLE;
  } else {
    VkImportMemoryHostPointerInfoEXT imp{VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT};
    imp.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
    imp.pHostPointer = p;
    VkMemoryAllocateInfo ma{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ma.pNext = &imp;
    ma.allocationSize = size;
    ma.memoryTypeIndex = uint32_t(__builtin_ctz(bits));
    r = f.vkAllocateMemory(c.device, &ma, nullptr, &mem);
    if (r == VK_SUCCESS && (r = f.vkBindBufferMemory(c.device, out->buf, mem, 0)) != VK_SUCCESS) {
      f.vkFreeMemory(c.device, mem, nullptr);
      mem = VK_NULL_HANDLE;
    }
  }
  if (r != VK_SUCCESS) {
    f.vkDestroyBuffer(c.device, out->buf, nullptr);
    out->buf = VK_NULL_HANDLE;
    return r;
  }
  out->mem = mem;
  out->start = start;
  out->size = size;
  return VK_SUCCESS;
}

}  // namespace

void RegisterContext(Context* c) {
  std::lock_guard<std::mutex> lk(g_regMu);
  g_contexts.push_back(c);
}

void UnregisterContext(Context* c) {
  std::lock_guard<std::mutex> lk(g_regMu);
  g_contexts.erase(std::remove(g_contexts.begin(), g_contexts.end(), c), g_contexts.end());
}

void NoteWindowMapped(uint64_t addr, uint64_t len, bool priv, bool transient) {
  std::lock_guard<std::mutex> lk(g_regMu);
  g_windows.push_back({addr, len, priv, transient});
}

bool InsideTransientWindow(uint64_t start, uint64_t size) {
  std::lock_guard<std::mutex> lk(g_regMu);
  for (auto& w : g_windows)
    if (start >= w.addr && start + size <= w.addr + w.len) return w.transient;
  return false;
}

void NoteWindowUnmapped(uint64_t addr, uint64_t len) {
  // Under the registry lock throughout: a context cannot be destroyed meanwhile (its destructor
  // unregisters under this lock), and no import of the range can be cached behind our back
  // (the window is gone from the list before the imports over it are dropped).
  std::lock_guard<std::mutex> lk(g_regMu);
  g_windows.erase(std::remove_if(g_windows.begin(), g_windows.end(),
                                 [&](auto& w) { return w.addr == addr; }),
                  g_windows.end());
  for (Context* c : g_contexts)
    if (c->device) DropImports(*c, addr, len);
}

void InvalidateVram(uint64_t off, uint64_t len, const Context* keep) {
  // Under the registry lock, as NoteWindowUnmapped: no context goes away meanwhile.
  std::lock_guard<std::mutex> lk(g_regMu);
  for (Context* c : g_contexts)
    if (c->device && c != keep) InvalidateMirrors(*c, off, len);
}

VkResult AcquireImport(Context& c, uint64_t start, uint64_t size, HostImport** out) {
  // A GPU's import pins the pages it sees. Over a private (read-only, copy-on-write) window
  // those are private copies made at import time: a cached import would keep showing the data
  // of its first launch while the guest writes the fd (seen on a GPU: the second benchmark over
  // the same VRAM read the first one's inputs). Such ranges are imported per dispatch — a snapshot that
  // is current, and the kernel's stray writes stay private. A CPU device reads through the
  // mapping itself, which always shows the fd's current contents.
  const int inside = InsideWindow(start, size);
  const bool cacheable = inside == 1 || (inside == 2 && c.info.cpuDevice);
  if (cacheable) {
    std::lock_guard<std::mutex> lk(c.impMu);
    for (HostImport* i : c.imports)
      if (i->start == start && i->size == size) {
        i->users++;
        i->lastUse = ++c.importClock;
        GetImportStats().cacheHits++;
        *out = i;
        return VK_SUCCESS;
      }
  }
  auto* imp = new HostImport();
  VkResult r = ImportHost(c, start, size, imp);
  if (r != VK_SUCCESS) {
    delete imp;
    return r;
  }
  imp->users = 1;
  imp->serial = NextSerial();
  std::vector<HostImport*> evict;
  if (cacheable) {
    std::lock_guard<std::mutex> lk(c.impMu);
    imp->cached = true;
    imp->lastUse = ++c.importClock;
    c.imports.push_back(imp);
    // Bound the pinned set: drop the least recently used idle imports beyond the cap.
    while (c.imports.size() > kMaxCachedImports) {
      auto it = std::min_element(c.imports.begin(), c.imports.end(), [](HostImport* a, HostImport* b) {
        return (a->users ? UINT64_MAX : a->lastUse) < (b->users ? UINT64_MAX : b->lastUse);
      });
      if ((*it)->users) break;
      (*it)->cached = false;
      evict.push_back(*it);
      c.imports.erase(it);
    }
  }
  for (HostImport* i : evict) FreeImport(c, i);
  *out = imp;
  return VK_SUCCESS;
}

void ReleaseImport(Context& c, HostImport* imp) {
  bool free;
  {
    std::lock_guard<std::mutex> lk(c.impMu);
    imp->users--;
    free = imp->users == 0 && (!imp->cached || imp->dead);
  }
  if (free) FreeImport(c, imp);
}

VkResult CreateBufferRaw(Context& c, uint64_t size, VkBufferUsageFlags usage, bool concurrent, VkBuffer* out) {
  VkBufferCreateInfo bc{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bc.size = size;
  bc.usage = usage;
  uint32_t fams[2] = {c.info.queueFamily, c.info.transferFamily};
  if (concurrent && fams[0] != fams[1]) {
    bc.sharingMode = VK_SHARING_MODE_CONCURRENT;
    bc.queueFamilyIndexCount = 2;
    bc.pQueueFamilyIndices = fams;
  }
  return c.fn.vkCreateBuffer(c.device, &bc, nullptr, out);
}

VkResult AcquirePoolBuf(Context& c, uint64_t size, bool hostVisible, PoolBuf* out) {
  const uint32_t type = hostVisible ? c.bounceMemType : c.devMemType;
  if (type == UINT32_MAX) return VK_ERROR_FEATURE_NOT_PRESENT;
  size = (size + kPoolRound - 1) & ~(kPoolRound - 1);
  {
    // The smallest idle buffer of the type that holds `size` and wastes at most half of itself.
    std::lock_guard<std::mutex> lk(c.poolMu);
    size_t best = SIZE_MAX;
    for (size_t k = 0; k < c.pool.size(); k++) {
      const PoolBuf& b = c.pool[k];
      // Mapped (bounce) and unmapped buffers are told apart by map: one memory type may serve
      // both (lavapipe's only type is device-local and host-visible).
      if (b.memType == type && (b.map != nullptr) == hostVisible && b.size >= size && b.size <= 2 * size &&
          (best == SIZE_MAX || b.size < c.pool[best].size))
        best = k;
    }
    if (best != SIZE_MAX) {
      *out = c.pool[best];
      c.poolBytes -= out->size;
      c.pool.erase(c.pool.begin() + long(best));
      return VK_SUCCESS;
    }
  }
  const DeviceFns& f = c.fn;
  PoolBuf b;
  b.size = size;
  b.memType = type;
  b.serial = NextSerial();
  VkResult r = CreateBufferRaw(c, size,
                               VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                   VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                               true, &b.buf);
  if (r) return r;
  VkMemoryRequirements req;
  f.vkGetBufferMemoryRequirements(c.device, b.buf, &req);
  if (!(req.memoryTypeBits & (1u << type))) {
    f.vkDestroyBuffer(c.device, b.buf, nullptr);
    return VK_ERROR_FEATURE_NOT_PRESENT;
  }
  VkMemoryAllocateInfo ma{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ma.allocationSize = req.size;
  ma.memoryTypeIndex = type;
  if ((r = f.vkAllocateMemory(c.device, &ma, nullptr, &b.mem))) {
    f.vkDestroyBuffer(c.device, b.buf, nullptr);
    return r;
  }
  if ((r = f.vkBindBufferMemory(c.device, b.buf, b.mem, 0)) ||
      (hostVisible && (r = f.vkMapMemory(c.device, b.mem, 0, VK_WHOLE_SIZE, 0, &b.map)))) {
    f.vkDestroyBuffer(c.device, b.buf, nullptr);
    f.vkFreeMemory(c.device, b.mem, nullptr);
    return r;
  }
  *out = b;
  return VK_SUCCESS;
}

void ReleasePoolBuf(Context& c, PoolBuf& b) {
  if (!b.buf) return;
  // Idle buffers kept: up to 1/4 of the device-local heap, at most 6 GiB (a few large GEMMs).
  uint64_t cap = 6ull << 30;
  if (c.devMemType != UINT32_MAX) {
    uint32_t heap = c.memProps.memoryTypes[c.devMemType].heapIndex;
    cap = std::min(cap, c.memProps.memoryHeaps[heap].size / 4);
  }
  {
    std::lock_guard<std::mutex> lk(c.poolMu);
    if (c.poolBytes + b.size <= cap) {
      c.pool.push_back(b);
      c.poolBytes += b.size;
      b = PoolBuf();
      return;
    }
  }
  if (b.map) c.fn.vkUnmapMemory(c.device, b.mem);
  c.fn.vkDestroyBuffer(c.device, b.buf, nullptr);
  c.fn.vkFreeMemory(c.device, b.mem, nullptr);
  b = PoolBuf();
}

void FreeCaches(Context& c) {
  UnregisterContext(&c);
  FreeMirrors(c);
  for (HostImport* i : c.imports) FreeImport(c, i);
  c.imports.clear();
  for (PoolBuf& b : c.pool) {
    if (b.map) c.fn.vkUnmapMemory(c.device, b.mem);
    c.fn.vkDestroyBuffer(c.device, b.buf, nullptr);
    c.fn.vkFreeMemory(c.device, b.mem, nullptr);
  }
  c.pool.clear();
}

VkResult PrepareStagingLane(Context& c, Lane* l, size_t panels) {
  const DeviceFns& f = c.fn;
  VkResult r;
  if (!l->upSem) {
    VkSemaphoreTypeCreateInfo tc{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
    tc.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    VkSemaphoreCreateInfo sc{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
    sc.pNext = &tc;
    if ((r = f.vkCreateSemaphore(c.device, &sc, nullptr, &l->upSem))) return r;
    if ((r = f.vkCreateSemaphore(c.device, &sc, nullptr, &l->compSem))) return r;
  }
  if (!l->xferPool) {
    if (c.info.transferQueues == 0) {
      l->xferPool = l->cmdPool;
    } else {
      VkCommandPoolCreateInfo cp{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
      cp.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
      cp.queueFamilyIndex = c.info.transferFamily;
      if ((r = f.vkCreateCommandPool(c.device, &cp, nullptr, &l->xferPool))) return r;
    }
  }
  auto grow = [&](VkCommandPool pool, std::vector<VkCommandBuffer>& v) -> VkResult {
    if (v.size() >= panels) return VK_SUCCESS;
    std::vector<VkCommandBuffer> more(panels - v.size());
    VkCommandBufferAllocateInfo ca{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ca.commandPool = pool;
    ca.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ca.commandBufferCount = uint32_t(more.size());
    VkResult rr = f.vkAllocateCommandBuffers(c.device, &ca, more.data());
    if (rr) return rr;
    v.insert(v.end(), more.begin(), more.end());
    return VK_SUCCESS;
  };
  if (l->compCmd.empty()) l->compCmd.push_back(l->cmd);  // the lane's first compute buffer
  if ((r = grow(l->cmdPool, l->compCmd)) || (r = grow(l->xferPool, l->upCmd)) ||
      (r = grow(l->xferPool, l->downCmd)))
    return r;
  return VK_SUCCESS;
}

}  // namespace vugpu::vk
