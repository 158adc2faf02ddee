// Shared helpers for the addon's system layer: argument validation that throws JS errors
// (never crashes), errno conventions, and the per-concern registration functions.
//
// Conventions (mirrored in src/native.ts):
//  - Calls that can fail at run time return a negative errno as a JS number.
//  - Calls that return an object (mmap, mapWindow, pagemap) throw an Error whose message names
//    the syscall and carries `errno` / `code` properties.
//  - Malformed JS arguments throw TypeError / RangeError before any syscall is made.
// Exceptions are disabled (NODE_ADDON_API_DISABLE_CPP_EXCEPTIONS): every helper that fails has
// already scheduled a JS exception and returns false; callers return immediately.
#pragma once

#include <napi.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>

#include <unistd.h>

namespace vugpu::addon {

// ---- registration (one per source file) ----
void RegisterSockets(Napi::Env env, Napi::Object exports);
void RegisterMemory(Napi::Env env, Napi::Object exports);
void RegisterEvents(Napi::Env env, Napi::Object exports);
void RegisterPool(Napi::Env env, Napi::Object exports);
void RegisterSpirv(Napi::Env env, Napi::Object exports);
void RegisterVulkan(Napi::Env env, Napi::Object exports);

// ---- job pool: a job kind for backends outside pool.cc ----
// Runs on a pool thread with the job's cancel flag; returns 0 or a negative errno and may set
// *deviceNs (left 0: the pool reports the wall time). Dropped unrun when cancelled while queued
// or when setupStatus != 0, so captured state must clean up in its destructor.
using PoolTask = std::function<int(const std::atomic<bool>& cancel, uint64_t* deviceNs)>;
// Queue a task like submitKernel; returns the job id, or 0 with a JS exception pending when the
// pool is not running. setupStatus != 0 completes the job with it without running the task.
// background: the pool's low-priority lane (one thread at nice 19): work for one guest that must
// not take CPU from the device's other work, i.e. program compiles. way: whose queue and threads
// run it (pool.cc, "Ways": one per VM, so one VM's endless job never holds another's thread).
uint32_t EnqueueTask(Napi::Env env, const char* fn, PoolTask task, int setupStatus = 0, bool background = false,
                     uint32_t way = 0);
// On a pool thread running a task: how long its program may run on the device since its
// submission before it stops (0 = no limit; preemptJob sets it while the task runs or waits).
uint64_t CurrentPreemptAfterNs();
// On a pool thread running a task made of parts (a batch of launches): how many of them completed
// before the status it returns (JobCompletion.part; 0 when never set).
void SetTaskPart(uint32_t part);

// ---- errors ----
void ThrowTypeError(Napi::Env env, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void ThrowRangeError(Napi::Env env, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// Error("<syscall>: <strerror> (E...)") with .errno = -err and .code = "E...".
void ThrowErrno(Napi::Env env, const char* syscall, int err);
const char* ErrnoName(int err);

// ---- argument helpers: on failure they throw and return false ----
bool ArgInt(const Napi::CallbackInfo& info, size_t i, const char* name, int64_t min, int64_t max,
            int64_t* out);
bool ArgFd(const Napi::CallbackInfo& info, size_t i, int* out);
bool ArgBool(const Napi::CallbackInfo& info, size_t i, const char* name, bool* out);
// Absent/undefined → dflt.
bool ArgOptBool(const Napi::CallbackInfo& info, size_t i, const char* name, bool dflt, bool* out);
bool ArgString(const Napi::CallbackInfo& info, size_t i, const char* name, std::string* out);
bool ArgFunction(const Napi::CallbackInfo& info, size_t i, const char* name, Napi::Function* out);
bool ArgBigAddr(const Napi::CallbackInfo& info, size_t i, const char* name, uint64_t* out);

// Integer-valued JS number within [min, max] (no NaN, no fractions).
bool ValueInt(Napi::Env env, Napi::Value v, const char* name, int64_t min, int64_t max,
              int64_t* out);
// Bytes of an ArrayBuffer, any TypedArray, a DataView or a Buffer. data may be null when length 0.
bool ValueBytes(Napi::Env env, Napi::Value v, const char* name, uint8_t** data, size_t* len);

// Largest safe integer a JS number carries exactly.
constexpr int64_t kMaxSafe = (int64_t(1) << 53) - 1;

inline uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline Napi::Value Errno(Napi::Env env, int err) { return Napi::Number::New(env, -err); }

// A call on an fd this function just opened failed: close the fd and return the call's -errno
// (read before close, which may change it).
inline Napi::Value ErrnoClosing(Napi::Env env, int fd) {
  int e = errno;
  close(fd);
  return Errno(env, e);
}

}  // namespace vugpu::addon
