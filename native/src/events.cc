// eventfds (doorbells, MSI-X), open/ioctl (KVM and device probing), /proc/self/pagemap and
// the monotonic clock.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

#include "common.h"

namespace vugpu::addon {

namespace {

Napi::Value Eventfd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t init;
  bool nonblock;
  if (!ArgInt(info, 0, "initval", 0, UINT32_MAX, &init) ||
      !ArgOptBool(info, 1, "nonblock", false, &nonblock))
    return env.Undefined();
  int fd = eventfd(unsigned(init), EFD_CLOEXEC | (nonblock ? EFD_NONBLOCK : 0));
  return Napi::Number::New(env, fd < 0 ? -errno : fd);
}

// Returns 0 or -errno (-EAGAIN when a non-blocking counter would overflow).
Napi::Value EventfdWrite(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  int64_t value;
  if (!ArgFd(info, 0, &fd) || !ArgInt(info, 1, "value", 1, kMaxSafe, &value)) return env.Undefined();
  uint64_t v = uint64_t(value);
  ssize_t r;
  do r = write(fd, &v, sizeof v);
  while (r < 0 && errno == EINTR);
  if (r < 0) return Errno(env, errno);
  return Napi::Number::New(env, r == sizeof v ? 0 : -EIO);
}

// Returns the counter (reset to zero), or -errno (-EAGAIN when non-blocking and zero).
Napi::Value EventfdRead(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  if (!ArgFd(info, 0, &fd)) return env.Undefined();
  uint64_t v = 0;
  ssize_t r;
  do r = read(fd, &v, sizeof v);
  while (r < 0 && errno == EINTR);
  if (r < 0) return Errno(env, errno);
  if (r != sizeof v) return Errno(env, EIO);
  return Napi::Number::New(env, double(v));
}

// open(path, flags): O_CLOEXEC is always added; files created with O_CREAT get mode 0600.
Napi::Value Open(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path;
  int64_t flags;
  if (!ArgString(info, 0, "path", &path) || !ArgInt(info, 1, "flags", 0, INT32_MAX, &flags))
    return env.Undefined();
  int fd;
  do fd = open(path.c_str(), int(flags) | O_CLOEXEC, 0600);
  while (fd < 0 && errno == EINTR);
  return Napi::Number::New(env, fd < 0 ? -errno : fd);
}

// ioctl(fd, request, arg): arg is an integer, or a byte buffer passed by pointer (the kernel
// reads and/or writes it in place; the caller sizes it for the request).
Napi::Value Ioctl(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  int64_t req;
  if (!ArgFd(info, 0, &fd) || !ArgInt(info, 1, "request", 0, UINT32_MAX, &req)) return env.Undefined();
  unsigned long arg;
  if (info[2].IsNumber()) {
    int64_t v;
    if (!ValueInt(env, info[2], "arg", -kMaxSafe, kMaxSafe, &v)) return env.Undefined();
    arg = (unsigned long)v;
  } else {
    uint8_t* p;
    size_t n;
    if (!ValueBytes(env, info[2], "arg", &p, &n)) return env.Undefined();
    if (n == 0) {
      ThrowRangeError(env, "ioctl: buffer argument must not be empty");
      return env.Undefined();
    }
    arg = (unsigned long)(uintptr_t)p;
  }
  int r;
  do r = ioctl(fd, (unsigned long)req, arg);
  while (r < 0 && errno == EINTR);
  return Napi::Number::New(env, r < 0 ? -errno : r);
}

// pagemap(addr, count): raw 64-bit entries of /proc/self/pagemap (bit 63 present, bits 0-54
// PFN when the process may see PFNs, i.e. CAP_SYS_ADMIN). Throws on failure.
std::mutex g_pmMu;
int g_pagemapFd = -1;

Napi::Value Pagemap(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t addr;
  int64_t count;
  if (!ArgBigAddr(info, 0, "addr", &addr) || !ArgInt(info, 1, "count", 1, 1 << 20, &count))
    return env.Undefined();
  static const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  int fd;
  {
    std::lock_guard<std::mutex> lk(g_pmMu);
    if (g_pagemapFd < 0) g_pagemapFd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (g_pagemapFd < 0) {
      ThrowErrno(env, "open(/proc/self/pagemap)", errno);
      return env.Undefined();
    }
    fd = g_pagemapFd;
  }
  Napi::BigUint64Array out = Napi::BigUint64Array::New(env, size_t(count));
  size_t want = size_t(count) * 8;
  uint8_t* dst = reinterpret_cast<uint8_t*>(out.Data());
  off_t off = off_t((addr / page) * 8);
  size_t got = 0;
  while (got < want) {
    ssize_t r = pread(fd, dst + got, want - got, off + off_t(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      ThrowErrno(env, "pread(/proc/self/pagemap)", errno);
      return env.Undefined();
    }
    if (r == 0) {
      ThrowErrno(env, "pread(/proc/self/pagemap) (address beyond the address space)", EINVAL);
      return env.Undefined();
    }
    got += size_t(r);
  }
  return out;
}

Napi::Value MonotonicNs(const Napi::CallbackInfo& info) {
  return Napi::BigInt::New(info.Env(), NowNs());
}

}  // namespace

void RegisterEvents(Napi::Env env, Napi::Object exports) {
  exports.Set("eventfd", Napi::Function::New(env, Eventfd, "eventfd"));
  exports.Set("eventfdWrite", Napi::Function::New(env, EventfdWrite, "eventfdWrite"));
  exports.Set("eventfdRead", Napi::Function::New(env, EventfdRead, "eventfdRead"));
  exports.Set("open", Napi::Function::New(env, Open, "open"));
  exports.Set("ioctl", Napi::Function::New(env, Ioctl, "ioctl"));
  exports.Set("pagemap", Napi::Function::New(env, Pagemap, "pagemap"));
  exports.Set("monotonicNs", Napi::Function::New(env, MonotonicNs, "monotonicNs"));
}

}  // namespace vugpu::addon
