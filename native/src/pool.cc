// Native job pool: copies and compute kernels run on a few std::threads, never touching JS.
// Completions go to a done list and wake the JS thread through one uv_async_t, whose callback
// hands them to onComplete in batches. One pool per process.
//
// Ways: every job names a way (the engine passes the channel's owner, i.e. the VM), and each way
// has its own queue and its own threads, started at its first job. A job that never ends (a
// guest's endless program waiting on its fence, a huge kernel until the watchdog) holds only its
// own way's threads: another VM's jobs never wait for a thread behind it, and on a CPU host the
// kernel's scheduler shares the cores between the VMs' threads.
//
// Threads: submit*/cancelJob/poolStart/poolStop and the async callback run on the JS thread;
// pool threads only see Job objects (shared_ptr) and the done list.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "copy.h"
#include "kernels.h"

namespace vugpu::addon {

namespace {

constexpr size_t kMaxBuffers = 64;
constexpr size_t kMaxParams = 64 * 1024;
constexpr size_t kMaxExtents = 1 << 20;
// Ways beyond this share threads (way % kMaxWays): VMs are far fewer.
constexpr uint32_t kMaxWays = 64;

struct Job {
  uint32_t id = 0;
  uint32_t way = 0;  // whose queue and threads run it (Pool::ways)
  bool isCopy = false;
  int setupStatus = 0;  // nonzero: complete with it without running
  std::atomic<bool> cancel{false};
  // A program that has run this long on the device since its submission stops (0 = never): the
  // engine's context switch asks for it while another VM waits (src/gpu/ctxsw.ts).
  std::atomic<uint64_t> preemptAfterNs{0};
  // kernel
  uint32_t kernel = 0;
  std::vector<void*> bufs;
  std::vector<size_t> lens;
  std::vector<uint8_t> params;
  // copy
  CopyPlan copy;
  // task: a backend outside this file (the Vulkan program backend)
  PoolTask task;
  uint64_t taskNs = 0;  // device time the task measured itself (0: wall time)
  uint32_t part = 0;    // a batch task's parts that completed (SetTaskPart)
  uint64_t queuedNs = 0;  // when Enqueue queued it (poolStats)
};

struct Completion {
  uint32_t job;
  int status;
  uint64_t deviceNs;
  uint64_t doneNs = 0;  // when it was handed to the JS side (poolStats)
  bool task = false;
  uint32_t part = 0;
};

// One way's queue and threads (queue and polling under Pool::mu).
struct Way {
  std::deque<std::shared_ptr<Job>> queue;
  std::condition_variable cv;
  // Polling for the next job (see Worker): queue's length for the polling thread to read
  // without the lock, and whether a thread polls now (at most one per way does).
  std::atomic<uint32_t> queued{0};
  bool polling = false;
  bool background = false;
};

struct Pool {
  std::mutex mu;  // ways' queues, active, stopping, threads
  std::unique_ptr<Way> ways[kMaxWays];
  int threadsPerWay = 1;
  // Background lane: work done for one guest that must never delay the device for others
  // (program compiles). One thread at the lowest CPU priority, so on a host without a GPU
  // a guest flooding the device with new modules spends idle CPU, not its co-tenants'.
  Way background;
  std::unordered_map<uint32_t, std::shared_ptr<Job>> active;  // queued or running
  bool stopping = false;
  std::vector<std::thread> threads;

  std::mutex doneMu;
  std::vector<Completion> done;

  uv_async_t async;
  napi_env env = nullptr;
  Napi::FunctionReference onComplete;
  napi_async_context actx = nullptr;
  napi_async_cleanup_hook_handle cleanup = nullptr;
  uint32_t inflight = 0;  // JS thread only: submitted, not yet delivered
};

Pool* g_pool = nullptr;  // JS thread of the env that started it
uint32_t g_nextJob = 1;
// poolSetPoll: how long a pool thread that just ran a device task (a Vulkan dispatch) polls for
// the next job before it sleeps. Waking a sleeping thread costs a GPU's launch microseconds
// (bench/vulkan-floor.c; docs/architecture.md, "Pool polling"), and a GPU's
// launches come back to back. KVM's halt polling, as the JS thread's completion polling
// (src/gpu/jobs.ts) — the engine asks for both on a GPU, with the same bound. Never after a CPU
// kernel or copy: there the other pool threads need the cores.
std::atomic<uint32_t> g_pollUs{0};
// poolStats: where a job's time goes between its submission and its delivery to JS, summed per
// kind (0: kernels and copies, 1: device tasks): queued (Enqueue → a thread takes it), run,
// after (run end → handed to JS: mapping holds dropped), deliver (→ the JS thread's callback).
struct PhaseSums {
  std::atomic<uint64_t> jobs{0}, queueNs{0}, runNs{0}, afterNs{0}, deliverNs{0};
};
PhaseSums g_phases[2];
std::atomic<uint64_t> g_pollHits{0}, g_pollMisses{0};

thread_local const std::atomic<uint64_t>* tl_preempt = nullptr;
thread_local uint32_t* tl_part = nullptr;

int RunJob(Job& job) {
  if (job.task) {
    tl_preempt = &job.preemptAfterNs;
    tl_part = &job.part;
    const int st = job.task(job.cancel, &job.taskNs);
    tl_preempt = nullptr;
    tl_part = nullptr;
    return st;
  }
  if (job.isCopy) return RunCopy(job.copy, job.cancel);
  KernelCtx ctx{job.bufs.data(),   job.lens.data(),   int(job.bufs.size()),
                job.params.data(), job.params.size(), &job.cancel};
  return run_kernel(job.kernel, ctx);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// After a device task: poll (up to g_pollUs) for the next job while no other thread does, so
// Enqueue need not wake a sleeping one. Returns with the job, if any, still queued: the caller's
// cv.wait takes it without sleeping.
void PollForNext(Pool* pool, Way* way) {
  const uint32_t us = g_pollUs.load(std::memory_order_relaxed);
  if (us == 0) return;
  {
    std::lock_guard<std::mutex> lk(pool->mu);
    if (way->polling || pool->stopping) return;
    way->polling = true;
  }
  const uint64_t until = NowNs() + uint64_t(us) * 1000;
  bool got = false;
  while (!(got = way->queued.load(std::memory_order_acquire) > 0) && NowNs() < until) CpuRelax();
  (got ? g_pollHits : g_pollMisses).fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lk(pool->mu);
  way->polling = false;  // from here Enqueue wakes a thread again
}

void Worker(Pool* pool, Way* way) {
  const bool background = way->background;
  auto& queue = way->queue;
  auto& cv = way->cv;
  // nice 19 for this thread only (Linux: per-thread nice through the tid); unprivileged.
  if (background) setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lk(pool->mu);
      cv.wait(lk, [&] { return pool->stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping and drained
      job = std::move(queue.front());
      queue.pop_front();
      way->queued.fetch_sub(1, std::memory_order_relaxed);
    }
    const bool deviceTask = static_cast<bool>(job->task);
    PhaseSums& ph = g_phases[deviceTask ? 1 : 0];
    const uint64_t startNs = NowNs();
    ph.queueNs.fetch_add(startNs - job->queuedNs, std::memory_order_relaxed);
    Completion c{job->id, job->setupStatus, 0};
    c.task = deviceTask;
    if (c.status == 0 && job->cancel.load(std::memory_order_relaxed)) c.status = -ECANCELED;
    uint64_t runEnd = startNs;
    if (c.status == 0) {
      c.status = RunJob(*job);
      c.part = job->part;
      runEnd = NowNs();
      c.deviceNs = job->taskNs ? job->taskNs : runEnd - startNs;
      if (c.deviceNs == 0) c.deviceNs = 1;  // it ran: never report zero time
    }
    ph.runNs.fetch_add(runEnd - startNs, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lk(pool->mu);
      pool->active.erase(job->id);
    }
    job.reset();  // drop mapping holds before the JS side hears about completion
    c.doneNs = NowNs();
    ph.afterNs.fetch_add(c.doneNs - runEnd, std::memory_order_relaxed);
    ph.jobs.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lk(pool->doneMu);
      pool->done.push_back(c);
    }
    uv_async_send(&pool->async);
    if (!background && deviceTask) PollForNext(pool, way);
  }
}

// JS thread: deliver every pending completion to onComplete in one array. fromJs: called
// inside a JS call (poolStop), where a thrown exception simply propagates to the caller.
void Deliver(Pool* pool, bool fromJs) {
  std::vector<Completion> batch;
  {
    std::lock_guard<std::mutex> lk(pool->doneMu);
    batch.swap(pool->done);
  }
  if (batch.empty()) return;
  const uint64_t now = NowNs();
  for (const Completion& c : batch) g_phases[c.task ? 1 : 0].deliverNs.fetch_add(now - c.doneNs, std::memory_order_relaxed);
  pool->inflight -= std::min<uint32_t>(pool->inflight, uint32_t(batch.size()));
  // An idle pool must not keep the process alive.
  if (pool->inflight == 0) uv_unref(reinterpret_cast<uv_handle_t*>(&pool->async));
  if (pool->onComplete.IsEmpty()) return;
  Napi::Env env(pool->env);
  Napi::HandleScope scope(env);
  Napi::Array arr = Napi::Array::New(env, batch.size());
  for (size_t i = 0; i < batch.size(); i++) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("job", Napi::Number::New(env, batch[i].job));
    o.Set("status", Napi::Number::New(env, batch[i].status));
    o.Set("deviceNs", Napi::Number::New(env, double(batch[i].deviceNs)));
    if (batch[i].task) o.Set("part", Napi::Number::New(env, batch[i].part));
    arr.Set(uint32_t(i), o);
  }
  napi_value argv[1] = {arr};
  napi_value result;
  napi_status st = napi_make_callback(pool->env, pool->actx, env.Global(),
                                      pool->onComplete.Value(), 1, argv, &result);
  if (!fromJs && (st == napi_pending_exception || env.IsExceptionPending())) {
    // No JS frame below us: report like an event handler's exception ('uncaughtException').
    napi_value err;
    napi_get_and_clear_last_exception(pool->env, &err);
    napi_fatal_exception(pool->env, err);
  }
}

void OnAsync(uv_async_t* h) { Deliver(static_cast<Pool*>(h->data), false); }

// Stop threads: queued jobs complete with -ECANCELED, running ones are asked to stop.
void StopThreads(Pool* pool) {
  {
    std::lock_guard<std::mutex> lk(pool->mu);
    pool->stopping = true;
    for (auto& [id, job] : pool->active) job->cancel.store(true, std::memory_order_relaxed);
    for (auto& w : pool->ways)
      if (w) w->cv.notify_all();
    pool->background.cv.notify_all();
  }
  for (std::thread& t : pool->threads) t.join();
  pool->threads.clear();
}

void ReleaseJsRefs(Pool* pool) {
  pool->onComplete.Reset();
  if (pool->actx) napi_async_destroy(pool->env, pool->actx);
  pool->actx = nullptr;
}

void OnAsyncClosed(uv_handle_t* h) {
  Pool* pool = static_cast<Pool*>(h->data);
  if (pool->cleanup) napi_remove_async_cleanup_hook(pool->cleanup);
  delete pool;
}

// Environment teardown with a running pool (process exit, or the worker that owns it ends).
void OnEnvCleanup(napi_async_cleanup_hook_handle handle, void* arg) {
  Pool* pool = static_cast<Pool*>(arg);
  if (g_pool == pool) g_pool = nullptr;
  StopThreads(pool);
  ReleaseJsRefs(pool);
  pool->cleanup = handle;
  uv_close(reinterpret_cast<uv_handle_t*>(&pool->async), OnAsyncClosed);
}

Napi::Value PoolStart(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t threads;
  Napi::Function cb;
  if (!ArgInt(info, 0, "threads", 1, 8, &threads) || !ArgFunction(info, 1, "onComplete", &cb))
    return env.Undefined();
  if (g_pool) {
    Napi::Error::New(env, "poolStart: the pool is already running (call poolStop first)")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  uv_loop_t* loop = nullptr;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok || !loop) {
    Napi::Error::New(env, "poolStart: no event loop").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Pool* pool = new Pool();
  if (int r = uv_async_init(loop, &pool->async, OnAsync); r < 0) {
    delete pool;
    ThrowErrno(env, "uv_async_init", -r);
    return env.Undefined();
  }
  pool->async.data = pool;
  uv_unref(reinterpret_cast<uv_handle_t*>(&pool->async));
  pool->env = env;
  pool->onComplete = Napi::Persistent(cb);
  napi_async_init(env, nullptr, Napi::String::New(env, "vugpu.pool"), &pool->actx);
  napi_add_async_cleanup_hook(env, OnEnvCleanup, pool, &pool->cleanup);
  pool->threadsPerWay = int(threads);
  pool->background.background = true;
  pool->threads.emplace_back(Worker, pool, &pool->background);  // the ways' threads: at their first job
  g_pool = pool;
  return env.Undefined();
}

// poolStop(): cancels queued and running jobs, joins the threads, delivers the last
// completions synchronously (so the caller's bookkeeping sees every job end), then closes the
// async handle. A stopped pool can be started again. No-op when not running.
Napi::Value PoolStop(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Pool* pool = g_pool;
  if (!pool) return env.Undefined();
  if (pool->env != static_cast<napi_env>(env)) {
    Napi::Error::New(env, "poolStop: the pool belongs to another thread").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  g_pool = nullptr;
  StopThreads(pool);
  Deliver(pool, true);
  ReleaseJsRefs(pool);
  if (pool->cleanup) {
    napi_remove_async_cleanup_hook(pool->cleanup);
    pool->cleanup = nullptr;
  }
  uv_close(reinterpret_cast<uv_handle_t*>(&pool->async), OnAsyncClosed);
  ClearFileCache();
  return env.Undefined();
}

// poolSetPoll(us): how long a pool thread polls for the next job after a device task (0 = never,
// at most 10 ms).
Napi::Value PoolSetPoll(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t us;
  if (!ArgInt(info, 0, "us", 0, 10000, &us)) return env.Undefined();
  g_pollUs.store(uint32_t(us), std::memory_order_relaxed);
  return env.Undefined();
}

// poolStats() → {cpu, task, polls}: per kind, jobs run and the sums of their phases in ns
// (g_phases); the polls after device tasks that ended with a job (hits) and at the bound.
Napi::Value PoolStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  for (int k = 0; k < 2; k++) {
    const PhaseSums& p = g_phases[k];
    Napi::Object x = Napi::Object::New(env);
    x.Set("jobs", double(p.jobs.load()));
    x.Set("queueNs", double(p.queueNs.load()));
    x.Set("runNs", double(p.runNs.load()));
    x.Set("afterNs", double(p.afterNs.load()));
    x.Set("deliverNs", double(p.deliverNs.load()));
    o.Set(k ? "task" : "cpu", x);
  }
  Napi::Object polls = Napi::Object::New(env);
  polls.Set("hits", double(g_pollHits.load()));
  polls.Set("misses", double(g_pollMisses.load()));
  o.Set("polls", polls);
  return o;
}

Pool* RunningPool(Napi::Env env, const char* fn) {
  if (!g_pool || g_pool->env != static_cast<napi_env>(env)) {
    Napi::Error::New(env, std::string(fn) + ": the pool is not running (call poolStart)")
        .ThrowAsJavaScriptException();
    return nullptr;
  }
  return g_pool;
}

uint32_t Enqueue(Pool* pool, std::shared_ptr<Job> job, uint32_t wayIndex, bool background = false) {
  uint32_t id;
  bool wake;
  Way* way;
  {
    std::lock_guard<std::mutex> lk(pool->mu);
    do id = g_nextJob++;
    while (id == 0 || pool->active.count(id));
    job->id = id;
    job->queuedNs = NowNs();
    pool->active[id] = job;
    if (background) {
      way = &pool->background;
    } else {
      std::unique_ptr<Way>& w = pool->ways[wayIndex % kMaxWays];
      if (!w) {
        // A way's threads start with its first job (they wait for mu, held here).
        w = std::make_unique<Way>();
        for (int i = 0; i < pool->threadsPerWay; i++) pool->threads.emplace_back(Worker, pool, w.get());
      }
      way = w.get();
    }
    auto& q = way->queue;
    // A polling thread takes the first job queued while it polls: no wake for that one.
    wake = background || !way->polling || !q.empty();
    q.push_back(std::move(job));
    way->queued.fetch_add(1, std::memory_order_release);
  }
  if (wake) way->cv.notify_one();
  if (pool->inflight++ == 0) uv_ref(reinterpret_cast<uv_handle_t*>(&pool->async));
  return id;
}

// job.way: optional, a nonnegative integer (default 0).
bool ReadWay(Napi::Env env, Napi::Object o, uint32_t* way) {
  Napi::Value v = o.Get("way");
  int64_t w = 0;
  if (!v.IsUndefined() && !ValueInt(env, v, "job.way", 0, UINT32_MAX, &w)) return false;
  *way = uint32_t(w);
  return true;
}

// Reads {kernel, windows, lengths, params} into job. Throws and returns false on bad input.
bool ReadKernelJob(Napi::Env env, Napi::Value v, Job* job) {
  if (!v.IsObject()) {
    ThrowTypeError(env, "job must be an object {kernel, windows, lengths, params}");
    return false;
  }
  Napi::Object o = v.As<Napi::Object>();
  if (!ReadWay(env, o, &job->way)) return false;
  int64_t kernel;
  if (!ValueInt(env, o.Get("kernel"), "job.kernel", 0, UINT32_MAX, &kernel)) return false;
  job->kernel = uint32_t(kernel);
  Napi::Value wv = o.Get("windows"), lv = o.Get("lengths");
  if (!wv.IsArray() || !lv.IsArray()) {
    ThrowTypeError(env, "job.windows (bigint[]) and job.lengths (number[]) must be arrays");
    return false;
  }
  Napi::Array w = wv.As<Napi::Array>(), l = lv.As<Napi::Array>();
  if (w.Length() != l.Length()) {
    ThrowRangeError(env, "job.windows and job.lengths differ in length");
    return false;
  }
  if (w.Length() > kMaxBuffers) {
    ThrowRangeError(env, "at most %zu buffers per kernel", kMaxBuffers);
    return false;
  }
  for (uint32_t i = 0; i < w.Length(); i++) {
    Napi::Value a = w.Get(i);
    if (!a.IsBigInt()) {
      ThrowTypeError(env, "job.windows[%u] must be a bigint address", i);
      return false;
    }
    bool lossless;
    uint64_t addr = a.As<Napi::BigInt>().Uint64Value(&lossless);
    int64_t len;
    if (!lossless) {
      ThrowRangeError(env, "job.windows[%u] is not a 64-bit address", i);
      return false;
    }
    if (!ValueInt(env, l.Get(i), "job.lengths[i]", 0, kMaxSafe, &len)) return false;
    job->bufs.push_back(reinterpret_cast<void*>(uintptr_t(addr)));
    job->lens.push_back(size_t(len));
  }
  Napi::Value pv = o.Get("params");
  if (!pv.IsUndefined()) {
    uint8_t* p;
    size_t n;
    if (!ValueBytes(env, pv, "job.params", &p, &n)) return false;
    if (n > kMaxParams) {
      ThrowRangeError(env, "job.params larger than %zu bytes", kMaxParams);
      return false;
    }
    job->params.assign(p, p + n);
  }
  return true;
}

bool ReadExtents(Napi::Env env, Napi::Value v, const char* name, std::vector<ExtentSpec>* out,
                 uint64_t* total) {
  if (!v.IsArray()) {
    ThrowTypeError(env, "%s must be an array of {fd, offset, length}", name);
    return false;
  }
  Napi::Array a = v.As<Napi::Array>();
  if (a.Length() > kMaxExtents) {
    ThrowRangeError(env, "%s: at most %zu extents", name, kMaxExtents);
    return false;
  }
  out->reserve(a.Length());
  *total = 0;
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value e = a.Get(i);
    if (!e.IsObject()) {
      ThrowTypeError(env, "%s[%u] must be an object {fd, offset, length}", name, i);
      return false;
    }
    Napi::Object o = e.As<Napi::Object>();
    int64_t fd, off, len;
    if (!ValueInt(env, o.Get("fd"), "extent.fd", 0, INT32_MAX, &fd) ||
        !ValueInt(env, o.Get("offset"), "extent.offset", 0, kMaxSafe, &off) ||
        !ValueInt(env, o.Get("length"), "extent.length", 0, kMaxSafe, &len))
      return false;
    out->push_back({int(fd), uint64_t(off), uint64_t(len)});
    *total += uint64_t(len);
  }
  return true;
}

Napi::Value SubmitKernel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto job = std::make_shared<Job>();
  if (!ReadKernelJob(env, info[0], job.get())) return env.Undefined();
  Pool* pool = RunningPool(env, "submitKernel");
  if (!pool) return env.Undefined();
  const uint32_t way = job->way;
  return Napi::Number::New(env, Enqueue(pool, std::move(job), way));
}

// Setup failures that depend on the fds (bad fd, range past the end of file, read-only
// destination) complete asynchronously with that errno, like any device-side error.
Napi::Value SubmitCopy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject()) {
    ThrowTypeError(env, "job must be an object {src, dst}");
    return env.Undefined();
  }
  Napi::Object o = info[0].As<Napi::Object>();
  std::vector<ExtentSpec> src, dst;
  uint64_t sbytes, dbytes;
  uint32_t way;
  if (!ReadWay(env, o, &way) || !ReadExtents(env, o.Get("src"), "job.src", &src, &sbytes) ||
      !ReadExtents(env, o.Get("dst"), "job.dst", &dst, &dbytes))
    return env.Undefined();
  if (sbytes != dbytes) {
    ThrowRangeError(env, "copy: src has %llu bytes, dst %llu", (unsigned long long)sbytes,
                    (unsigned long long)dbytes);
    return env.Undefined();
  }
  Pool* pool = RunningPool(env, "submitCopy");
  if (!pool) return env.Undefined();
  auto job = std::make_shared<Job>();
  job->isCopy = true;
  job->setupStatus = PlanCopy(src, dst, &job->copy);
  if (job->setupStatus != 0) job->copy = CopyPlan();
  return Napi::Number::New(env, Enqueue(pool, std::move(job), way));
}

Napi::Value CancelJob(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t id;
  if (!ArgInt(info, 0, "job", 0, UINT32_MAX, &id)) return env.Undefined();
  Pool* pool = g_pool;
  if (!pool) return env.Undefined();
  std::lock_guard<std::mutex> lk(pool->mu);
  auto it = pool->active.find(uint32_t(id));
  if (it != pool->active.end()) it->second->cancel.store(true, std::memory_order_relaxed);
  return env.Undefined();  // finished or unknown jobs: nothing to do
}

// preemptJob(id, afterNs): the job's program stops once it has run afterNs on the device (see
// Job::preemptAfterNs); finished or unknown jobs: nothing to do.
Napi::Value PreemptJob(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t id, after;
  if (!ArgInt(info, 0, "job", 0, UINT32_MAX, &id) || !ArgInt(info, 1, "afterNs", 1, INT64_MAX, &after)) return env.Undefined();
  Pool* pool = g_pool;
  if (!pool) return env.Undefined();
  std::lock_guard<std::mutex> lk(pool->mu);
  auto it = pool->active.find(uint32_t(id));
  if (it != pool->active.end()) it->second->preemptAfterNs.store(uint64_t(after), std::memory_order_relaxed);
  return env.Undefined();
}

Napi::Value RunKernelSync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Job job;
  if (!ReadKernelJob(env, info[0], &job)) return env.Undefined();
  return Napi::Number::New(env, RunJob(job));
}

// forgetFd(fd): drop the copy engine's cached mapping of fd's file so its memory can be freed
// (call when a guest memory region goes away). Jobs in flight keep their own reference.
Napi::Value ForgetFd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  if (!ArgFd(info, 0, &fd)) return env.Undefined();
  return Napi::Number::New(env, ForgetFile(fd));
}

bool ArgF32(const Napi::CallbackInfo& info, size_t i, const char* name, Napi::Float32Array* out) {
  if (!info[i].IsTypedArray() ||
      info[i].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    ThrowTypeError(info.Env(), "%s must be a Float32Array", name);
    return false;
  }
  *out = info[i].As<Napi::Float32Array>();
  return true;
}

Napi::Value SgemmDirect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t m, n, k;
  Napi::Float32Array a, b, c;
  if (!ArgInt(info, 0, "m", 1, INT32_MAX, &m) || !ArgInt(info, 1, "n", 1, INT32_MAX, &n) ||
      !ArgInt(info, 2, "k", 1, INT32_MAX, &k) || !ArgF32(info, 3, "a", &a) ||
      !ArgF32(info, 4, "b", &b) || !ArgF32(info, 5, "c", &c))
    return env.Undefined();
  if (uint64_t(m * k) > a.ElementLength() || uint64_t(k * n) > b.ElementLength() ||
      uint64_t(m * n) > c.ElementLength()) {
    ThrowRangeError(env, "sgemmDirect: a needs m*k, b k*n and c m*n elements");
    return env.Undefined();
  }
  sgemm_rowmajor(int(m), int(n), int(k), a.Data(), b.Data(), c.Data());
  return env.Undefined();
}

Napi::Value HaveOpenBlas(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), have_openblas());
}

}  // namespace

uint64_t CurrentPreemptAfterNs() {
  return tl_preempt ? tl_preempt->load(std::memory_order_relaxed) : 0;
}

void SetTaskPart(uint32_t part) {
  if (tl_part) *tl_part = part;
}

uint32_t EnqueueTask(Napi::Env env, const char* fn, PoolTask task, int setupStatus, bool background, uint32_t way) {
  Pool* pool = RunningPool(env, fn);
  if (!pool) return 0;
  auto job = std::make_shared<Job>();
  job->task = std::move(task);
  job->setupStatus = setupStatus;
  job->way = way;
  return Enqueue(pool, std::move(job), way, background);
}

void RegisterPool(Napi::Env env, Napi::Object exports) {
  exports.Set("poolStart", Napi::Function::New(env, PoolStart, "poolStart"));
  exports.Set("poolStop", Napi::Function::New(env, PoolStop, "poolStop"));
  exports.Set("poolSetPoll", Napi::Function::New(env, PoolSetPoll, "poolSetPoll"));
  exports.Set("poolStats", Napi::Function::New(env, PoolStats, "poolStats"));
  exports.Set("submitKernel", Napi::Function::New(env, SubmitKernel, "submitKernel"));
  exports.Set("submitCopy", Napi::Function::New(env, SubmitCopy, "submitCopy"));
  exports.Set("cancelJob", Napi::Function::New(env, CancelJob, "cancelJob"));
  exports.Set("preemptJob", Napi::Function::New(env, PreemptJob, "preemptJob"));
  exports.Set("runKernelSync", Napi::Function::New(env, RunKernelSync, "runKernelSync"));
  exports.Set("forgetFd", Napi::Function::New(env, ForgetFd, "forgetFd"));
  exports.Set("sgemmDirect", Napi::Function::New(env, SgemmDirect, "sgemmDirect"));
  exports.Set("haveOpenBlas", Napi::Function::New(env, HaveOpenBlas, "haveOpenBlas"));
}

}  // namespace vugpu::addon
