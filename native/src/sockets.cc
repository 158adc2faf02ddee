// UNIX stream sockets with SCM_RIGHTS fd passing, and uv_poll readiness watchers on the JS thread.
// Node core cannot pass fds (node-native.md §1), and vfio-user sends them in both directions.
#include <fcntl.h>
#include <sys/stat.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.h"

namespace vugpu::addon {

namespace {

// Linux SCM_MAX_FD: the most fds one SCM_RIGHTS message can carry.
constexpr size_t kMaxFds = 253;
// sendmsg on a full non-blocking socket: how long we wait for room before giving up. A
// vfio-user message must go out whole, so a short bounded wait beats dropping bytes.
constexpr int kSendWaitMs = 2000;

bool FillSockaddr(Napi::Env env, const std::string& path, sockaddr_un* sa, socklen_t* len) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof sa->sun_path) {
    ThrowRangeError(env, "socket path must be 1..%zu bytes", sizeof sa->sun_path - 1);
    return false;
  }
  memcpy(sa->sun_path, path.data(), path.size());
  *len = socklen_t(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  return true;
}

// Like FillSockaddr, but a leading '@' names the abstract namespace (systemd's NOTIFY_SOCKET
// may be "@/org/freedesktop/systemd1/notify").
bool FillSockaddrAny(Napi::Env env, const std::string& path, sockaddr_un* sa, socklen_t* len) {
  if (path.empty() || path[0] != '@') return FillSockaddr(env, path, sa, len);
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  if (path.size() > sizeof sa->sun_path) {
    ThrowRangeError(env, "abstract socket name must be 1..%zu bytes", sizeof sa->sun_path - 1);
    return false;
  }
  memcpy(sa->sun_path + 1, path.data() + 1, path.size() - 1);
  *len = socklen_t(offsetof(sockaddr_un, sun_path) + path.size());
  return true;
}

// The optional fds argument of a send, info[i] (an array of at most kMaxFds fds, or undefined
// or null for none), into fds[0..*nfds); false with a JS exception pending on bad input.
bool ArgFds(const Napi::CallbackInfo& info, size_t i, int* fds, size_t* nfds) {
  Napi::Env env = info.Env();
  *nfds = 0;
  if (info.Length() <= i || info[i].IsUndefined() || info[i].IsNull()) return true;
  if (!info[i].IsArray()) {
    ThrowTypeError(env, "fds must be an array of numbers");
    return false;
  }
  Napi::Array arr = info[i].As<Napi::Array>();
  if (arr.Length() > kMaxFds) {
    ThrowRangeError(env, "at most %zu fds per message", kMaxFds);
    return false;
  }
  for (uint32_t k = 0; k < arr.Length(); k++) {
    int64_t v;
    if (!ValueInt(env, arr.Get(k), "fds[i]", 0, INT32_MAX, &v)) return false;
    fds[(*nfds)++] = int(v);
  }
  return true;
}

// fds[0..nfds) as mh's one SCM_RIGHTS control message, built in cbuf (room for kMaxFds).
void AttachFds(msghdr* mh, char* cbuf, const int* fds, size_t nfds) {
  mh->msg_control = cbuf;
  mh->msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
  memset(cbuf, 0, mh->msg_controllen);
  cmsghdr* c = CMSG_FIRSTHDR(mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
  memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
}

int SetNonblockFd(int fd, bool on) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return -errno;
  int nfl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
  if (nfl != fl && fcntl(fd, F_SETFL, nfl) < 0) return -errno;
  return 0;
}

Napi::Value ListenUnix(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path;
  int64_t backlog;
  bool seqpacket;
  if (!ArgString(info, 0, "path", &path) || !ArgInt(info, 1, "backlog", 1, 4096, &backlog) ||
      !ArgOptBool(info, 2, "seqpacket", false, &seqpacket))
    return env.Undefined();
  sockaddr_un sa;
  socklen_t salen;
  if (!FillSockaddr(env, path, &sa, &salen)) return env.Undefined();
  // A stale socket file from a previous run would make bind fail with EADDRINUSE.
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path.c_str());
  int fd = socket(AF_UNIX, (seqpacket ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno(env, errno);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), salen) < 0 || listen(fd, int(backlog)) < 0)
    return ErrnoClosing(env, fd);
  return Napi::Number::New(env, fd);
}

Napi::Value Accept(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int lfd;
  if (!ArgFd(info, 0, &lfd)) return env.Undefined();
  int fd;
  do fd = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) return Errno(env, errno == EWOULDBLOCK ? EAGAIN : errno);
  return Napi::Number::New(env, fd);
}

Napi::Value ConnectUnix(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path;
  bool nonblock;
  bool seqpacket;
  if (!ArgString(info, 0, "path", &path) || !ArgOptBool(info, 1, "nonblock", false, &nonblock) ||
      !ArgOptBool(info, 2, "seqpacket", false, &seqpacket))
    return env.Undefined();
  sockaddr_un sa;
  socklen_t salen;
  if (!FillSockaddr(env, path, &sa, &salen)) return env.Undefined();
  int fd = socket(AF_UNIX, (seqpacket ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno(env, errno);
  int r;
  do r = connect(fd, reinterpret_cast<sockaddr*>(&sa), salen);
  while (r < 0 && errno == EINTR);
  if (r == 0 && nonblock) r = SetNonblockFd(fd, true) == 0 ? 0 : -1;
  if (r < 0) return ErrnoClosing(env, fd);
  return Napi::Number::New(env, fd);
}

Napi::Value SocketPair(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
    ThrowErrno(env, "socketpair", errno);
    return env.Undefined();
  }
  Napi::Array a = Napi::Array::New(env, 2);
  a.Set(uint32_t(0), Napi::Number::New(env, sv[0]));
  a.Set(uint32_t(1), Napi::Number::New(env, sv[1]));
  return a;
}

Napi::Value SetNonblock(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  bool on;
  if (!ArgFd(info, 0, &fd) || !ArgBool(info, 1, "on", &on)) return env.Undefined();
  int r = SetNonblockFd(fd, on);
  if (r < 0) ThrowErrno(env, "fcntl(O_NONBLOCK)", -r);
  return env.Undefined();
}

Napi::Value RecvMsg(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  uint8_t* data;
  size_t cap;
  if (!ArgFd(info, 0, &fd) || !ValueBytes(env, info[1], "buf", &data, &cap)) return env.Undefined();
  if (!info[2].IsTypedArray() ||
      info[2].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    ThrowTypeError(env, "fdsOut must be an Int32Array");
    return env.Undefined();
  }
  Napi::Int32Array fdsOut = info[2].As<Napi::Int32Array>();
  if (fdsOut.ElementLength() < 1) {
    ThrowRangeError(env, "fdsOut needs at least one element (the count)");
    return env.Undefined();
  }
  if (cap == 0) {
    ThrowRangeError(env, "buf must not be empty");
    return env.Undefined();
  }
  // Optional peek: MSG_PEEK (the bytes stay queued; with SO_PEEK_OFF set, successive peeks
  // advance through the queue). fds come back as fresh duplicates on every peek.
  bool peek;
  if (!ArgOptBool(info, 3, "peek", false, &peek)) return env.Undefined();
  int32_t* fo = fdsOut.Data();
  size_t fdCap = fdsOut.ElementLength() - 1;
  fo[0] = 0;

  iovec iov{data, cap};
  // Room for the most fds Linux can attach, so the kernel never truncates on our side; fds
  // beyond the caller's capacity are closed (they must not leak into the process).
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  ssize_t r;
  do r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | (peek ? MSG_PEEK : 0));
  while (r < 0 && errno == EINTR);
  if (r < 0) return Errno(env, errno == EWOULDBLOCK ? EAGAIN : errno);
  size_t nf = 0;
  bool dropped = false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const unsigned char* p = CMSG_DATA(c);
    for (size_t i = 0; i < k; i++) {
      int f;
      memcpy(&f, p + i * sizeof(int), sizeof f);
      if (nf < fdCap) {
        fo[1 + nf++] = f;
      } else {
        close(f);
        dropped = true;
      }
    }
  }
  fo[0] = (mh.msg_flags & MSG_CTRUNC) || dropped ? -1 : int32_t(nf);
  return Napi::Number::New(env, double(r));
}

Napi::Value SendMsg(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  uint8_t* data;
  size_t len;
  if (!ArgFd(info, 0, &fd) || !ValueBytes(env, info[1], "data", &data, &len)) return env.Undefined();
  int fds[kMaxFds];
  size_t nfds;
  if (!ArgFds(info, 2, fds, &nfds)) return env.Undefined();
  if (len == 0 && nfds > 0) {
    ThrowRangeError(env, "fds need at least one data byte to travel with");
    return env.Undefined();
  }
  // Optional waitMs: how long to wait for room. Given explicitly, a partial send returns the
  // byte count (the caller queues the rest) instead of -ETIMEDOUT; waitMs 0 never waits, so an
  // event-loop server is never stalled by a peer that stops reading.
  int64_t waitMs = kSendWaitMs;
  bool partialOk = false;
  if (info.Length() > 3 && !info[3].IsUndefined()) {
    if (!ArgInt(info, 3, "waitMs", 0, 60000, &waitMs)) return env.Undefined();
    partialOk = true;
  }
  // Optional journal word (a Uint32Array over the request journal's shared memory): set to 2
  // (reply intended) right before the first sendmsg and to 3 (replied) once the whole message
  // is in the socket, so a SIGKILL can fall between the two only inside the syscall itself.
  uint32_t* journal = nullptr;
  if (info.Length() > 4 && !info[4].IsUndefined() && !info[4].IsNull()) {
    uint8_t* jp;
    size_t jlen;
    if (!ValueBytes(env, info[4], "journal", &jp, &jlen)) return env.Undefined();
    if (jlen < 4 || (reinterpret_cast<uintptr_t>(jp) & 3) != 0) {
      ThrowRangeError(env, "journal must be an aligned view of at least 4 bytes");
      return env.Undefined();
    }
    journal = reinterpret_cast<uint32_t*>(jp);
  }
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
  size_t sent = 0;
  uint64_t deadline = 0;
  if (journal) __atomic_store_n(journal, 2u, __ATOMIC_RELEASE);
  while (sent < len) {
    iovec iov{data + sent, len - sent};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (sent == 0 && nfds > 0) AttachFds(&mh, cbuf, fds, nfds);  // fds ride with the first chunk only
    ssize_t r = sendmsg(fd, &mh, MSG_NOSIGNAL);
    if (r > 0) {
      sent += size_t(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      uint64_t now = NowNs();
      if (deadline == 0) deadline = now + uint64_t(waitMs) * 1000000;
      if (now >= deadline) {
        // Nothing sent: the caller may retry. Partly sent: the stream is out of frame unless
        // the caller asked for partial counts (and sends the rest itself).
        if (sent > 0 && partialOk) return Napi::Number::New(env, double(sent));
        return Errno(env, sent == 0 ? EAGAIN : ETIMEDOUT);
      }
      pollfd p{fd, POLLOUT, 0};
      int wait = int((deadline - now) / 1000000) + 1;
      if (poll(&p, 1, wait) < 0 && errno != EINTR) return Errno(env, errno);
      continue;
    }
    return Errno(env, r < 0 ? errno : EIO);
  }
  if (journal) __atomic_store_n(journal, 3u, __ATOMIC_RELEASE);
  return Napi::Number::New(env, double(sent));
}

// setsockopt(SO_PEEK_OFF): -1 turns peek offsets off; n >= 0 makes the next MSG_PEEK start n
// bytes into the queue (and advance). Returns 0 or -errno.
Napi::Value SetPeekOffset(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  int64_t off;
  if (!ArgFd(info, 0, &fd) || !ArgInt(info, 1, "offset", -1, INT32_MAX, &off)) return env.Undefined();
  int v = int(off);
  if (setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &v, sizeof v) < 0) return Errno(env, errno);
  return Napi::Number::New(env, 0);
}

// getsockopt(SO_PEERCRED): the connected peer's {pid, uid, gid}, or -errno.
Napi::Value PeerCred(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  if (!ArgFd(info, 0, &fd)) return env.Undefined();
  ucred cr{};
  socklen_t len = sizeof cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) return Errno(env, errno);
  Napi::Object o = Napi::Object::New(env);
  o.Set("pid", Napi::Number::New(env, cr.pid));
  o.Set("uid", Napi::Number::New(env, cr.uid));
  o.Set("gid", Napi::Number::New(env, cr.gid));
  return o;
}

// One datagram with optional fds to an AF_UNIX datagram socket by path ('@' = abstract), from
// a fresh unbound socket: sd_notify (FDSTORE=1 with the fds to keep). Returns bytes or -errno.
Napi::Value SendDatagram(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path;
  uint8_t* data;
  size_t len;
  if (!ArgString(info, 0, "path", &path) || !ValueBytes(env, info[1], "data", &data, &len)) return env.Undefined();
  int fds[kMaxFds];
  size_t nfds;
  if (!ArgFds(info, 2, fds, &nfds)) return env.Undefined();
  sockaddr_un sa;
  socklen_t salen;
  if (!FillSockaddrAny(env, path, &sa, &salen)) return env.Undefined();
  int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Errno(env, errno);
  iovec iov{data, len};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msghdr mh{};
  mh.msg_name = &sa;
  mh.msg_namelen = salen;
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (nfds > 0) AttachFds(&mh, cbuf, fds, nfds);
  ssize_t r;
  do r = sendmsg(s, &mh, MSG_NOSIGNAL);
  while (r < 0 && errno == EINTR);
  int e = errno;
  close(s);
  if (r < 0) return Errno(env, e);
  return Napi::Number::New(env, double(r));
}

// A bound, non-blocking AF_UNIX datagram socket ('@' = abstract): what systemd's notify socket
// is, for tests and tools that stand in for it. Returns fd or -errno.
Napi::Value BindDatagram(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path;
  if (!ArgString(info, 0, "path", &path)) return env.Undefined();
  sockaddr_un sa;
  socklen_t salen;
  if (!FillSockaddrAny(env, path, &sa, &salen)) return env.Undefined();
  if (path[0] != '@') {
    struct stat st;
    if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path.c_str());
  }
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno(env, errno);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), salen) < 0) return ErrnoClosing(env, fd);
  return Napi::Number::New(env, fd);
}

Napi::Value Close(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  if (!ArgFd(info, 0, &fd)) return env.Undefined();
  // Linux always releases the fd, even when close reports EINTR: never retry.
  if (close(fd) < 0 && errno != EINTR) return Errno(env, errno);
  return Napi::Number::New(env, 0);
}

// ---- uv_poll watchers ----
// A watcher lives in a table keyed by a small integer handle. unwatch() may be called from
// inside the watcher's own callback: it only stops and closes the uv handle; the memory is
// freed in the close callback, which libuv runs on a later loop turn.
struct Watch {
  uv_poll_t poll;
  napi_env env;
  Napi::FunctionReference cb;
  napi_async_context actx = nullptr;
  uint32_t id;
  bool closing = false;
};

std::unordered_map<uint32_t, Watch*> g_watches;  // JS thread only
uint32_t g_nextWatch = 1;

void OnWatchClosed(uv_handle_t* h) {
  Watch* w = static_cast<Watch*>(h->data);
  if (w->actx) napi_async_destroy(w->env, w->actx);
  delete w;
}

void CloseWatch(Watch* w) {
  if (w->closing) return;
  w->closing = true;
  g_watches.erase(w->id);
  uv_poll_stop(&w->poll);
  uv_close(reinterpret_cast<uv_handle_t*>(&w->poll), OnWatchClosed);
}

void OnPoll(uv_poll_t* h, int status, int events) {
  Watch* w = static_cast<Watch*>(h->data);
  if (w->closing) return;
  Napi::Env env(w->env);
  Napi::HandleScope scope(env);
  napi_value argv[2] = {Napi::Number::New(env, status), Napi::Number::New(env, events)};
  napi_value recv = env.Global();
  napi_value result;
  napi_status st = napi_make_callback(w->env, w->actx, recv, w->cb.Value(), 2, argv, &result);
  if (st == napi_pending_exception || env.IsExceptionPending()) {
    // No JS frame is below us: hand the error to process 'uncaughtException' like any
    // event-emitter callback, instead of swallowing it.
    napi_value err;
    napi_get_and_clear_last_exception(w->env, &err);
    napi_fatal_exception(w->env, err);
  }
}

void CleanupWatches(void* arg) {
  // Environment teardown (process exit or a worker thread ending): close this env's handles
  // so a worker's loop can close, dropping JS references while the env is still usable.
  napi_env env = static_cast<napi_env>(arg);
  std::vector<Watch*> mine;
  for (auto& [id, w] : g_watches)
    if (w->env == env) mine.push_back(w);
  for (Watch* w : mine) {
    w->cb.Reset();
    if (w->actx) napi_async_destroy(w->env, w->actx);
    w->actx = nullptr;
    CloseWatch(w);
  }
}

Napi::Value WatchFd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  Napi::Function cb;
  if (!ArgFd(info, 0, &fd) || !ArgFunction(info, 1, "cb", &cb)) return env.Undefined();
  int64_t events = UV_READABLE;
  if (info.Length() > 2 && !info[2].IsUndefined() &&
      !ArgInt(info, 2, "events", 1, UV_READABLE | UV_WRITABLE, &events))
    return env.Undefined();
  uv_loop_t* loop = nullptr;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok || !loop) {
    Napi::Error::New(env, "watch: no event loop").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Watch* w = new Watch();
  w->env = env;
  int r = uv_poll_init(loop, &w->poll, fd);
  if (r < 0) {
    delete w;
    ThrowErrno(env, "uv_poll_init", -r);
    return env.Undefined();
  }
  w->poll.data = w;
  w->cb = Napi::Persistent(cb);
  napi_async_init(env, nullptr, Napi::String::New(env, "vugpu.watch"), &w->actx);
  r = uv_poll_start(&w->poll, int(events) | UV_DISCONNECT, OnPoll);
  if (r < 0) {
    w->closing = true;
    uv_close(reinterpret_cast<uv_handle_t*>(&w->poll), OnWatchClosed);
    ThrowErrno(env, "uv_poll_start", -r);
    return env.Undefined();
  }
  do w->id = g_nextWatch++;
  while (w->id == 0 || g_watches.count(w->id));
  g_watches[w->id] = w;
  return Napi::Number::New(env, w->id);
}

Napi::Value Unwatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t id;
  if (!ArgInt(info, 0, "handle", 0, UINT32_MAX, &id)) return env.Undefined();
  auto it = g_watches.find(uint32_t(id));
  if (it != g_watches.end()) CloseWatch(it->second);  // unknown/already closed: no-op
  return env.Undefined();
}

// Change what a watcher waits for (1 readable, 2 writable, or both), e.g. writable while a
// message waits for room in the socket, readable again once it is out.
Napi::Value WatchEvents(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t id;
  int64_t events;
  if (!ArgInt(info, 0, "handle", 0, UINT32_MAX, &id) ||
      !ArgInt(info, 1, "events", 1, UV_READABLE | UV_WRITABLE, &events))
    return env.Undefined();
  auto it = g_watches.find(uint32_t(id));
  if (it == g_watches.end()) return env.Undefined();  // closed: nothing to change
  int r = uv_poll_start(&it->second->poll, int(events) | UV_DISCONNECT, OnPoll);
  if (r < 0) ThrowErrno(env, "uv_poll_start", -r);
  return env.Undefined();
}

}  // namespace

void RegisterSockets(Napi::Env env, Napi::Object exports) {
  exports.Set("watchEvents", Napi::Function::New(env, WatchEvents, "watchEvents"));
  exports.Set("listenUnix", Napi::Function::New(env, ListenUnix, "listenUnix"));
  exports.Set("accept", Napi::Function::New(env, Accept, "accept"));
  exports.Set("connectUnix", Napi::Function::New(env, ConnectUnix, "connectUnix"));
  exports.Set("socketpair", Napi::Function::New(env, SocketPair, "socketpair"));
  exports.Set("setNonblock", Napi::Function::New(env, SetNonblock, "setNonblock"));
  exports.Set("recvmsg", Napi::Function::New(env, RecvMsg, "recvmsg"));
  exports.Set("sendmsg", Napi::Function::New(env, SendMsg, "sendmsg"));
  exports.Set("close", Napi::Function::New(env, Close, "close"));
  exports.Set("setPeekOffset", Napi::Function::New(env, SetPeekOffset, "setPeekOffset"));
  exports.Set("peerCred", Napi::Function::New(env, PeerCred, "peerCred"));
  exports.Set("sendDatagram", Napi::Function::New(env, SendDatagram, "sendDatagram"));
  exports.Set("bindDatagram", Napi::Function::New(env, BindDatagram, "bindDatagram"));
  exports.Set("watch", Napi::Function::New(env, WatchFd, "watch"));
  exports.Set("unwatch", Napi::Function::New(env, Unwatch, "unwatch"));
  napi_add_env_cleanup_hook(env, CleanupWatches, static_cast<napi_env>(env));
}

}  // namespace vugpu::addon
