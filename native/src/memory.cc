// Shared memory: memfds, fd mappings exposed as external ArrayBuffers, and contiguous "map
// windows" that stitch scattered fd extents into one host range for the native job pool.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

// The Vulkan backend caches host imports of ranges inside live windows (vulkan/staging.cc).
namespace vugpu::vk {
void NoteWindowMapped(uint64_t addr, uint64_t len, bool priv, bool transient);
void NoteWindowUnmapped(uint64_t addr, uint64_t len);
}  // namespace vugpu::vk
#include <vector>

#include "common.h"

namespace vugpu::addon {

namespace {

const size_t kPage = size_t(sysconf(_SC_PAGESIZE));

// Highest byte count we accept for one mapping or window (47-bit user address space).
constexpr int64_t kMaxMap = int64_t(1) << 46;

// ---- mmap → external ArrayBuffer ----
// Ownership: the Mapping record is deleted exactly once, by whoever removes it from g_all
// (the GC finalizer, or mmap's own failure path). munmap() unmaps early and marks it dead,
// so a finalizer that runs later only frees the record. Keys are records, not addresses:
// after an explicit munmap the kernel may hand the same address to a new mapping while the
// old ArrayBuffer still awaits GC.
struct Mapping {
  void* addr;
  size_t len;
  bool live;
};
std::mutex g_mapMu;
std::unordered_set<Mapping*> g_all;                // records not yet freed
std::unordered_map<uintptr_t, Mapping*> g_live;    // address → live record

void ReleaseMapping(Mapping* m) {  // caller holds g_mapMu
  if (!g_all.erase(m)) return;
  if (m->live) {
    auto it = g_live.find(uintptr_t(m->addr));
    if (it != g_live.end() && it->second == m) g_live.erase(it);
    munmap(m->addr, m->len);
  }
  delete m;
}

void FinalizeMapping(napi_env, void*, void* hint) {
  std::lock_guard<std::mutex> lk(g_mapMu);
  ReleaseMapping(static_cast<Mapping*>(hint));
}

int MapFlags(bool readonly, int* prot) {
  // Read-only views are private copy-on-write mappings: they accept O_RDONLY fds, and a stray
  // JS or kernel write stays in this process instead of faulting it (or reaching the fd).
  // Pages never written keep showing the fd's current contents.
  *prot = PROT_READ | PROT_WRITE;
  return readonly ? (MAP_PRIVATE | MAP_NORESERVE) : MAP_SHARED;
}

// A mapping must not run past the end of a regular file: touching such pages raises SIGBUS,
// which would kill the process (possibly on a pool thread).
int CheckFileRange(int fd, uint64_t offset, uint64_t length) {
  struct stat st;
  if (fstat(fd, &st) < 0) return -errno;
  if (S_ISREG(st.st_mode) && offset + length > uint64_t(st.st_size)) return -EFAULT;
  return 0;
}

Napi::Value MemfdCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string name;
  int64_t size;
  if (!ArgString(info, 0, "name", &name) || !ArgInt(info, 1, "size", 0, kMaxMap, &size))
    return env.Undefined();
  // Optional seals (F_SEAL_*) applied after sizing, as QEMU's memory-backend-memfd does.
  int64_t seals = -1;
  if (info.Length() > 2 && !info[2].IsUndefined() && !ArgInt(info, 2, "seals", 0, 0xffff, &seals))
    return env.Undefined();
  if (name.size() > 249) name.resize(249);  // memfd_create's limit
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC | (seals >= 0 ? MFD_ALLOW_SEALING : 0));
  if (fd < 0) return Errno(env, errno);
  if ((size > 0 && ftruncate(fd, off_t(size)) < 0) ||
      (seals > 0 && fcntl(fd, F_ADD_SEALS, int(seals)) < 0))
    return ErrnoClosing(env, fd);
  return Napi::Number::New(env, fd);
}

// F_GET_SEALS: the seals of the file behind fd (memfd/shmem), or -errno (-EINVAL for files
// that cannot be sealed). A server mapping a client's file checks F_SEAL_SHRINK: without it
// the client could truncate the file and make the server's accesses fault (SIGBUS).
Napi::Value GetSeals(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  if (!ArgFd(info, 0, &fd)) return env.Undefined();
  int r = fcntl(fd, F_GET_SEALS);
  return Napi::Number::New(env, r < 0 ? -errno : r);
}

// lseek(fd, offset, SEEK_DATA or SEEK_HOLE): where the next data (or hole) of a memfd starts,
// or -errno (-ENXIO: no data at or after offset). Holes are pages never written (or swapped
// back as such): they read as zero without being touched, so a scrub skips them.
Napi::Value SeekData(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  int64_t offset, hole;
  if (!ArgFd(info, 0, &fd) || !ArgInt(info, 1, "offset", 0, int64_t(1) << 52, &offset) ||
      !ArgInt(info, 2, "hole", 0, 1, &hole))
    return env.Undefined();
  off_t r = lseek(fd, off_t(offset), hole ? SEEK_HOLE : SEEK_DATA);
  return Napi::Number::New(env, r < 0 ? -errno : double(r));
}

Napi::Value Ftruncate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  int64_t size;
  if (!ArgFd(info, 0, &fd) || !ArgInt(info, 1, "size", 0, kMaxMap, &size)) return env.Undefined();
  int r;
  do r = ftruncate(fd, off_t(size));
  while (r < 0 && errno == EINTR);
  return Napi::Number::New(env, r < 0 ? -errno : 0);
}

Napi::Value Mmap(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  int64_t len, off;
  bool ro;
  if (!ArgFd(info, 0, &fd) || !ArgInt(info, 1, "length", 1, kMaxMap, &len) ||
      !ArgInt(info, 2, "offset", 0, kMaxMap, &off) || !ArgOptBool(info, 3, "readonly", false, &ro))
    return env.Undefined();
  if (uint64_t(off) % kPage) {
    ThrowRangeError(env, "offset must be a multiple of the page size (%zu)", kPage);
    return env.Undefined();
  }
  if (int r = CheckFileRange(fd, uint64_t(off), uint64_t(len)); r < 0) {
    ThrowErrno(env, r == -EFAULT ? "mmap (range beyond end of file)" : "fstat", -r);
    return env.Undefined();
  }
  int prot;
  int flags = MapFlags(ro, &prot);
  void* p = mmap(nullptr, size_t(len), prot, flags, fd, off_t(off));
  if (p == MAP_FAILED) {
    ThrowErrno(env, "mmap", errno);
    return env.Undefined();
  }
  Mapping* m = new Mapping{p, size_t(len), true};
  {
    std::lock_guard<std::mutex> lk(g_mapMu);
    g_all.insert(m);
    g_live[uintptr_t(p)] = m;
  }
  napi_value ab;
  napi_status st = napi_create_external_arraybuffer(env, p, size_t(len), FinalizeMapping, m, &ab);
  if (st != napi_ok) {
    // Some Node versions already ran the finalizer on failure (Node 20 above 4 GiB): only
    // release the record if it is still ours.
    {
      std::lock_guard<std::mutex> lk(g_mapMu);
      ReleaseMapping(m);
    }
    if (!env.IsExceptionPending()) {
      Napi::Error::New(env, "mmap: cannot create an external ArrayBuffer (napi status " +
                                std::to_string(int(st)) + ")")
          .ThrowAsJavaScriptException();
    }
    return env.Undefined();
  }
  return Napi::Value(env, ab);
}

Napi::Value Munmap(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArrayBuffer()) {
    ThrowTypeError(env, "buf must be an ArrayBuffer returned by mmap");
    return env.Undefined();
  }
  Napi::ArrayBuffer ab = info[0].As<Napi::ArrayBuffer>();
  bool detached = false;
  napi_is_detached_arraybuffer(env, ab, &detached);
  void* data = detached ? nullptr : ab.Data();
  if (!data) return env.Undefined();  // already unmapped: idempotent
  std::lock_guard<std::mutex> lk(g_mapMu);
  auto it = g_live.find(uintptr_t(data));
  if (it == g_live.end() || it->second->len != ab.ByteLength()) {
    ThrowTypeError(env, "buf is not a live ArrayBuffer returned by mmap");
    return env.Undefined();
  }
  if (napi_detach_arraybuffer(env, ab) != napi_ok) {
    if (!env.IsExceptionPending())
      Napi::Error::New(env, "munmap: cannot detach the ArrayBuffer").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Mapping* m = it->second;
  g_live.erase(it);
  munmap(m->addr, m->len);
  m->live = false;  // the record itself is freed by the GC finalizer
  return env.Undefined();
}

Napi::Value AddressOf(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint8_t* p;
  size_t n;
  if (!ValueBytes(env, info[0], "buf", &p, &n)) return env.Undefined();
  return Napi::BigInt::New(env, uint64_t(uintptr_t(p)));
}

// pread(fd, buf, offset) / pwrite(fd, buf, offset): bytes or -errno.
template <ssize_t (*Io)(int, uint8_t*, size_t, off_t)>
Napi::Value PositionalIo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  uint8_t* p;
  size_t n;
  int64_t off;
  if (!ArgFd(info, 0, &fd) || !ValueBytes(env, info[1], "buf", &p, &n) ||
      !ArgInt(info, 2, "offset", 0, kMaxSafe, &off))
    return env.Undefined();
  ssize_t r;
  do r = Io(fd, p, n, off_t(off));
  while (r < 0 && errno == EINTR);
  return Napi::Number::New(env, r < 0 ? -errno : double(r));
}

ssize_t DoPread(int fd, uint8_t* p, size_t n, off_t off) { return pread(fd, p, n, off); }
ssize_t DoPwrite(int fd, uint8_t* p, size_t n, off_t off) { return pwrite(fd, p, n, off); }

Napi::Value Pread(const Napi::CallbackInfo& info) { return PositionalIo<DoPread>(info); }
Napi::Value Pwrite(const Napi::CallbackInfo& info) { return PositionalIo<DoPwrite>(info); }

// ---- map windows ----
// A window is a PROT_NONE reservation (plus one guard page) in which each extent is mapped
// MAP_FIXED in order, giving pool threads one contiguous range over scattered memory.
// Lifetime contract: the JS side must not unmapWindow() a window while a submitted job that
// uses it has not completed; the addon does not track window users.
struct Window {
  void* addr;
  size_t len;       // visible length (sum of extents)
  size_t reserved;  // len + guard page
  napi_env env = nullptr;
  napi_ref view = nullptr;  // weak ref to the ArrayBuffer from windowBuffer(), if any
};
std::mutex g_winMu;
std::unordered_map<uint32_t, Window> g_windows;
uint32_t g_nextWindow = 1;

Napi::Value MapWindow(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool ro;
  if (!info[0].IsArray()) {
    ThrowTypeError(env, "extents must be an array of {fd, offset, length}");
    return env.Undefined();
  }
  // shared: a read-only window that still maps the fds MAP_SHARED, for a device that pins the
  // pages it reads (a GPU's host import pins the private copies of a copy-on-write mapping, so
  // later writes to the fd never reach it). Only for readers that never write through it.
  // transient: unmapped after one launch (the Vulkan backend's device-memory path then copies
  // it through a pinned buffer instead of importing its pages: vulkan/staging.cc).
  bool shared, transient;
  if (!ArgOptBool(info, 1, "readonly", false, &ro) || !ArgOptBool(info, 2, "shared", false, &shared) ||
      !ArgOptBool(info, 3, "transient", false, &transient))
    return env.Undefined();
  Napi::Array arr = info[0].As<Napi::Array>();
  struct Ext {
    int fd;
    uint64_t off, len;
  };
  std::vector<Ext> ext;
  ext.reserve(arr.Length());
  uint64_t total = 0;
  if (arr.Length() == 0) {
    ThrowRangeError(env, "mapWindow needs at least one extent");
    return env.Undefined();
  }
  for (uint32_t i = 0; i < arr.Length(); i++) {
    Napi::Value v = arr.Get(i);
    if (!v.IsObject()) {
      ThrowTypeError(env, "extents[%u] must be an object {fd, offset, length}", i);
      return env.Undefined();
    }
    Napi::Object o = v.As<Napi::Object>();
    int64_t fd, off, len;
    if (!ValueInt(env, o.Get("fd"), "extent.fd", 0, INT32_MAX, &fd) ||
        !ValueInt(env, o.Get("offset"), "extent.offset", 0, kMaxMap, &off) ||
        !ValueInt(env, o.Get("length"), "extent.length", 1, kMaxMap, &len))
      return env.Undefined();
    if (uint64_t(off) % kPage || uint64_t(len) % kPage) {
      ThrowRangeError(env, "extents[%u]: offset and length must be multiples of the page size (%zu)",
                      i, kPage);
      return env.Undefined();
    }
    total += uint64_t(len);
    if (total > uint64_t(kMaxMap)) {
      ThrowRangeError(env, "window too large");
      return env.Undefined();
    }
    if (int r = CheckFileRange(int(fd), uint64_t(off), uint64_t(len)); r < 0) {
      ThrowErrno(env, r == -EFAULT ? "mapWindow (extent beyond end of file)" : "mapWindow fstat", -r);
      return env.Undefined();
    }
    ext.push_back({int(fd), uint64_t(off), uint64_t(len)});
  }
  size_t reserved = size_t(total) + kPage;
  void* base = mmap(nullptr, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    ThrowErrno(env, "mmap (window reservation)", errno);
    return env.Undefined();
  }
  int prot;
  const bool priv = ro && !shared;
  int flags = MapFlags(priv, &prot) | MAP_FIXED;
  uint8_t* pos = static_cast<uint8_t*>(base);
  for (const Ext& e : ext) {
    if (mmap(pos, e.len, prot, flags, e.fd, off_t(e.off)) == MAP_FAILED) {
      int err = errno;
      munmap(base, reserved);
      ThrowErrno(env, "mmap (window extent)", err);
      return env.Undefined();
    }
    pos += e.len;
  }
  uint32_t id;
  {
    std::lock_guard<std::mutex> lk(g_winMu);
    do id = g_nextWindow++;
    while (id == 0 || g_windows.count(id));
    g_windows[id] = Window{base, size_t(total), reserved};
  }
  vugpu::vk::NoteWindowMapped(uint64_t(uintptr_t(base)), total, priv, transient);
  Napi::Object res = Napi::Object::New(env);
  res.Set("id", Napi::Number::New(env, id));
  res.Set("address", Napi::BigInt::New(env, uint64_t(uintptr_t(base))));
  res.Set("length", Napi::Number::New(env, double(total)));
  return res;
}

void DropWindowView(Window& w) {
  if (!w.view) return;
  napi_value v = nullptr;
  if (napi_get_reference_value(w.env, w.view, &v) == napi_ok && v) {
    bool detached = true;
    napi_is_detached_arraybuffer(w.env, v, &detached);
    if (!detached) napi_detach_arraybuffer(w.env, v);
  }
  napi_delete_reference(w.env, w.view);
  w.view = nullptr;
}

Napi::Value UnmapWindow(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t id;
  if (!ArgInt(info, 0, "id", 0, UINT32_MAX, &id)) return env.Undefined();
  Window w;
  {
    std::lock_guard<std::mutex> lk(g_winMu);
    auto it = g_windows.find(uint32_t(id));
    if (it == g_windows.end()) return env.Undefined();  // unknown or already unmapped
    w = it->second;
    g_windows.erase(it);
  }
  DropWindowView(w);
  vugpu::vk::NoteWindowUnmapped(uint64_t(uintptr_t(w.addr)), w.len);
  munmap(w.addr, w.reserved);
  return env.Undefined();
}

// windowBuffer(id): an external ArrayBuffer over the window for JS-side access (tests,
// debugging, small CPU-side fixes). It is detached by unmapWindow().
Napi::Value WindowBuffer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t id;
  if (!ArgInt(info, 0, "id", 0, UINT32_MAX, &id)) return env.Undefined();
  std::lock_guard<std::mutex> lk(g_winMu);
  auto it = g_windows.find(uint32_t(id));
  if (it == g_windows.end()) {
    ThrowRangeError(env, "windowBuffer: no window %u", uint32_t(id));
    return env.Undefined();
  }
  Window& w = it->second;
  if (w.view) {
    napi_value v = nullptr;
    bool detached = true;
    if (napi_get_reference_value(w.env, w.view, &v) == napi_ok && v &&
        napi_is_detached_arraybuffer(env, v, &detached) == napi_ok && !detached)
      return Napi::Value(env, v);
    napi_delete_reference(w.env, w.view);
    w.view = nullptr;
  }
  napi_value ab;
  if (napi_create_external_arraybuffer(env, w.addr, w.len, nullptr, nullptr, &ab) != napi_ok) {
    if (!env.IsExceptionPending())
      Napi::Error::New(env, "windowBuffer: cannot create an external ArrayBuffer")
          .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  w.env = env;
  napi_create_reference(env, ab, 0, &w.view);
  return Napi::Value(env, ab);
}

Napi::Value MemcpyDirect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint8_t *d, *s;
  size_t dn, sn;
  int64_t len;
  if (!ValueBytes(env, info[0], "dst", &d, &dn) || !ValueBytes(env, info[1], "src", &s, &sn) ||
      !ArgInt(info, 2, "length", 0, kMaxSafe, &len))
    return env.Undefined();
  if (uint64_t(len) > dn || uint64_t(len) > sn) {
    ThrowRangeError(env, "memcpyDirect: length exceeds a buffer");
    return env.Undefined();
  }
  if (len) memmove(d, s, size_t(len));
  return env.Undefined();
}

}  // namespace

void RegisterMemory(Napi::Env env, Napi::Object exports) {
  exports.Set("memfdCreate", Napi::Function::New(env, MemfdCreate, "memfdCreate"));
  exports.Set("seekData", Napi::Function::New(env, SeekData, "seekData"));
  exports.Set("getSeals", Napi::Function::New(env, GetSeals, "getSeals"));
  exports.Set("ftruncate", Napi::Function::New(env, Ftruncate, "ftruncate"));
  exports.Set("mmap", Napi::Function::New(env, Mmap, "mmap"));
  exports.Set("munmap", Napi::Function::New(env, Munmap, "munmap"));
  exports.Set("addressOf", Napi::Function::New(env, AddressOf, "addressOf"));
  exports.Set("pread", Napi::Function::New(env, Pread, "pread"));
  exports.Set("pwrite", Napi::Function::New(env, Pwrite, "pwrite"));
  exports.Set("mapWindow", Napi::Function::New(env, MapWindow, "mapWindow"));
  exports.Set("unmapWindow", Napi::Function::New(env, UnmapWindow, "unmapWindow"));
  exports.Set("windowBuffer", Napi::Function::New(env, WindowBuffer, "windowBuffer"));
  exports.Set("memcpyDirect", Napi::Function::New(env, MemcpyDirect, "memcpyDirect"));
}

}  // namespace vugpu::addon
