// JS surface of the Vulkan program backend: device open/close, program slots, compile and
// dispatch jobs (through the shared job pool and its completion batches).
//
// Threads: everything here runs on a JS thread; compile/dispatch work runs in pool tasks that
// hold the Program (and through it the Context) by shared_ptr.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "../common.h"
#include "vk.h"  // first: it keeps unistd.h's R_OK out of program.h
#include "tuning.h"
#include "../spirv/module.h"

namespace vugpu::addon {

namespace {

using vk::Context;
using vk::Program;

constexpr size_t kMaxWindows = 64;
constexpr size_t kMaxParamBytes = 4096;
constexpr size_t kMaxBatch = 1024;  // launches per batch (the engine sends far fewer: compute.ts)
constexpr int64_t kMaxSlot = INT32_MAX;

std::mutex g_mu;  // g_slots, and vulkanOpen/vulkanClose against each other
std::shared_ptr<Context> Ctx() { return vk::CurrentContext(); }
std::unordered_map<uint32_t, std::shared_ptr<Program>>& Slots() {
  static auto* p = new std::unordered_map<uint32_t, std::shared_ptr<Program>>();
  return *p;
}

Napi::Array U32Array(Napi::Env env, const uint32_t* v, size_t n) {
  Napi::Array a = Napi::Array::New(env, n);
  for (size_t i = 0; i < n; i++) a.Set(uint32_t(i), Napi::Number::New(env, v[i]));
  return a;
}

// The knobs in force (tuning.h), by their environment variables' names less VUGPU_VK_.
Napi::Object TuningObject(Napi::Env env, const vk::Tuning& t) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("MEMORY", t.memory == vk::Tuning::Memory::Auto ? "auto" : t.memory == vk::Tuning::Memory::Device ? "device" : "import");
  o.Set("CMD_QUERY_RESET", t.cmdQueryReset);
  o.Set("COMPUTE_QUEUES", t.computeQueues);
  o.Set("CPU_WAYS", t.cpuWays);
  o.Set("WARMUP", t.warmUp);
  o.Set("MAX_PANELS", t.maxPanels);
  o.Set("PANEL_BYTES", double(t.panelBytes));
  o.Set("PANEL_WORKGROUPS", double(t.panelWorkgroups));
  o.Set("PANEL_PAIR", t.panelPair);
  o.Set("K_SLICES", t.kSlices);
  o.Set("K_SLAB_BYTES", double(t.kSlabBytes));
  o.Set("UPLOAD_ALL", t.uploadAll);
  o.Set("IMPORT_TRANSIENT", t.importTransient);
  o.Set("ONE_QUEUE_BYTES", double(t.oneQueueBytes));
  o.Set("CHAIN_ONE_QUEUE", t.chainOneQueue);
  o.Set("FILL_EACH_PANEL", t.fillEachPanel);
  o.Set("NO_REPLAY", t.noReplay);
  o.Set("NO_RESIDENT", t.noResident);
  o.Set("RESIDENT_SPAN", double(t.residentSpan));
  o.Set("SPIN_US", double(t.spinUs));
  return o;
}

Napi::Object LimitsObject(Napi::Env env, const vk::DeviceInfo& di) {
  const spirv::Limits& l = di.limits;
  Napi::Object o = Napi::Object::New(env);
  o.Set("maxModuleBytes", l.maxModuleBytes);
  o.Set("maxBindings", l.maxBindings);
  o.Set("maxPushBytes", l.maxPushBytes);
  o.Set("maxSpecConstants", l.maxSpecConstants);
  o.Set("maxWgInvocations", l.maxWgInvocations);
  o.Set("maxWgSize", U32Array(env, l.maxWgSize, 3));
  o.Set("maxSharedBytes", l.maxSharedBytes);
  o.Set("maxGrid", U32Array(env, di.launch.maxGrid, 3));
  o.Set("maxBufferBytes", double(di.launch.maxBufferBytes));
  o.Set("bufferAlign", di.launch.bufferAlign);
  o.Set("subgroupSize", l.subgroupSize);
  o.Set("loopLimit", l.loopLimit);
  o.Set("features", l.features);
  return o;
}

Napi::Object InfoObject(Napi::Env env, const vk::DeviceInfo& di) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", di.name);
  o.Set("type", di.type);
  o.Set("api", di.api);
  o.Set("driver", di.driverName);
  o.Set("driverInfo", di.driverInfo);
  o.Set("driverId", di.driverId);
  o.Set("driverVersion", di.driverVersion);
  o.Set("vendorId", di.vendorId);
  o.Set("deviceId", di.deviceId);
  o.Set("limits", LimitsObject(env, di));
  o.Set("timestamps", di.timestamps);
  o.Set("timestampPeriod", di.timestampPeriod);
  o.Set("importAlign", di.importAlign);
  o.Set("robustStorageAlign", di.robustStorageAlign);
  o.Set("nullDescriptor", di.nullDescriptor);
  o.Set("cancelWordDeviceLocal", di.cancelWordDeviceLocal);
  o.Set("deviceFault", di.deviceFault);
  o.Set("faultInjection", di.faultInjection);
  o.Set("memory", di.memoryMode);
  o.Set("warmUp", vk::WarmUpActive(di));
  o.Set("transferQueues", di.transferQueues);
  o.Set("computeQueues", di.computeQueues);
  o.Set("maxStorageRange", double(di.maxStorageRange));
  o.Set("tuning", TuningObject(env, vk::Tune()));
  return o;
}

Napi::Value VulkanDevices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string why;
  std::vector<vk::DeviceSummary> devs = vk::ListDevices(&why);
  Napi::Array a = Napi::Array::New(env, devs.size());
  for (size_t i = 0; i < devs.size(); i++) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", devs[i].name);
    o.Set("type", devs[i].type);
    o.Set("driver", devs[i].driver);
    o.Set("api", devs[i].api);
    a.Set(uint32_t(i), o);
  }
  if (devs.empty()) a.Set("reason", why);  // why it is empty, for logs and skipped tests
  return a;
}

Napi::Value Result(Napi::Env env, const std::shared_ptr<Context>& ctx, const std::string& err) {
  Napi::Object r = Napi::Object::New(env);
  r.Set("ok", bool(ctx));
  if (ctx) r.Set("info", InfoObject(env, ctx->info));
  else r.Set("error", err);
  return r;
}

// vulkanOpen({device?}): idempotent while open (a device name that does not match the open
// device is an error; vulkanClose first).
Napi::Value VulkanOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string want;
  if (info.Length() > 0 && !info[0].IsUndefined()) {
    if (!info[0].IsObject()) {
      ThrowTypeError(env, "vulkanOpen: options must be an object {device?}");
      return env.Undefined();
    }
    Napi::Value d = info[0].As<Napi::Object>().Get("device");
    if (!d.IsUndefined()) {
      if (!d.IsString()) {
        ThrowTypeError(env, "vulkanOpen: options.device must be a string");
        return env.Undefined();
      }
      want = d.As<Napi::String>().Utf8Value();
    }
  }
  std::lock_guard<std::mutex> lk(g_mu);
  std::shared_ptr<Context> ctx = Ctx();
  if (ctx) {
    auto lower = [](std::string s) {
      for (char& c : s) c = char(std::tolower(uint8_t(c)));
      return s;
    };
    if (!want.empty() && lower(ctx->info.name).find(lower(want)) == std::string::npos)
      return Result(env, nullptr, "another device is open (" + ctx->info.name + "); call vulkanClose first");
    return Result(env, ctx, "");
  }
  // The knobs are parsed here, once per open, and named in the log when any is set.
  const std::string knobs = vk::TuningText(vk::ReadTuning());
  std::string err;
  ctx = vk::OpenContext(want, &err);
  if (ctx) vk::SetCurrentContext(ctx);
  if (ctx && !knobs.empty()) fprintf(stderr, "vugpu: Vulkan device '%s' tuned: %s\n", ctx->info.name.c_str(), knobs.c_str());
  return Result(env, ctx, err);
}

Napi::Value VulkanClose(const Napi::CallbackInfo& info) {
  std::shared_ptr<Context> old;
  std::unordered_map<uint32_t, std::shared_ptr<Program>> progs;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    old = Ctx();
    vk::SetCurrentContext(nullptr);
    progs.swap(Slots());
  }
  // Destroyed here unless a job still holds them (then on the pool thread that ends last).
  progs.clear();
  old.reset();
  vk::DropWarmUp();
  return info.Env().Undefined();
}

bool ReadU32Array(Napi::Env env, Napi::Value v, const char* name, Napi::Uint32Array* out) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
    ThrowTypeError(env, "%s must be a Uint32Array", name);
    return false;
  }
  *out = v.As<Napi::Uint32Array>();
  return true;
}

// Optional overrides of the device limits, clamped so they never exceed the device.
bool ReadLimits(Napi::Env env, Napi::Value v, const spirv::Limits& dev, spirv::Limits* out) {
  *out = dev;
  if (v.IsUndefined() || v.IsNull()) return true;
  if (!v.IsObject()) {
    ThrowTypeError(env, "limits must be an object");
    return false;
  }
  Napi::Object o = v.As<Napi::Object>();
  auto field = [&](const char* name, uint32_t devv, uint32_t* dst) {
    Napi::Value x = o.Get(name);
    if (x.IsUndefined()) return true;
    int64_t n;
    if (!ValueInt(env, x, name, 0, UINT32_MAX, &n)) return false;
    *dst = std::min<uint32_t>(uint32_t(n), devv);
    return true;
  };
  if (!field("maxModuleBytes", dev.maxModuleBytes, &out->maxModuleBytes) ||
      !field("maxBindings", dev.maxBindings, &out->maxBindings) ||
      !field("maxPushBytes", dev.maxPushBytes, &out->maxPushBytes) ||
      !field("maxSpecConstants", dev.maxSpecConstants, &out->maxSpecConstants) ||
      !field("maxWgInvocations", dev.maxWgInvocations, &out->maxWgInvocations) ||
      !field("maxSharedBytes", dev.maxSharedBytes, &out->maxSharedBytes))
    return false;
  Napi::Value wg = o.Get("maxWgSize");
  if (!wg.IsUndefined()) {
    if (!wg.IsArray() || wg.As<Napi::Array>().Length() != 3) {
      ThrowTypeError(env, "limits.maxWgSize must be [x, y, z]");
      return false;
    }
    for (uint32_t i = 0; i < 3; i++) {
      int64_t n;
      if (!ValueInt(env, wg.As<Napi::Array>().Get(i), "limits.maxWgSize[i]", 0, UINT32_MAX, &n))
        return false;
      out->maxWgSize[i] = std::min<uint32_t>(uint32_t(n), dev.maxWgSize[i]);
    }
  }
  uint32_t feat = dev.features;
  if (!field("features", UINT32_MAX, &feat)) return false;
  out->features = feat & dev.features;
  uint32_t loop = dev.loopLimit;
  if (!field("loopLimit", UINT32_MAX, &loop)) return false;
  // A device with a hardware cap always counts, at most up to its own limit.
  out->loopLimit = dev.loopLimit ? (loop == 0 ? dev.loopLimit : std::min(loop, dev.loopLimit)) : loop;
  return true;
}

// Finishes a program whose compile task was dropped unrun (cancelled while queued, pool
// stopped), so a launch waiting for it never hangs.
struct CompileGuard {
  std::shared_ptr<Program> prog;
  ~CompileGuard() {
    if (!prog) return;
    std::lock_guard<std::mutex> lk(prog->mu);
    if (!prog->done) {
      prog->reason = spirv::R_COMPILE;
      prog->message = "the compile was cancelled before it ran";
      prog->done = true;
      prog->cv.notify_all();
    }
  }
};

void Refuse(Program& p, uint32_t reason, const char* msg) {
  p.reason = reason;
  p.message = msg;
  p.done = true;
}

// submitProgramCompile({slot, words, entryIndex, spec?, limits?}) → job id.
Napi::Value SubmitProgramCompile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject()) {
    ThrowTypeError(env, "job must be an object {slot, words, entryIndex, spec, limits}");
    return env.Undefined();
  }
  Napi::Object o = info[0].As<Napi::Object>();
  int64_t slot, entry;
  Napi::Uint32Array words, spec;
  if (!ValueInt(env, o.Get("slot"), "job.slot", 0, kMaxSlot, &slot) ||
      !ReadU32Array(env, o.Get("words"), "job.words", &words) ||
      !ValueInt(env, o.Get("entryIndex"), "job.entryIndex", 0, UINT32_MAX, &entry))
    return env.Undefined();
  Napi::Value sv = o.Get("spec");
  bool haveSpec = !sv.IsUndefined();
  if (haveSpec && !ReadU32Array(env, sv, "job.spec", &spec)) return env.Undefined();
  if (haveSpec && spec.ElementLength() % 2) {
    ThrowRangeError(env, "job.spec holds (id, value) pairs: its length must be even");
    return env.Undefined();
  }

  std::shared_ptr<Context> ctx = Ctx();
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (Slots().count(uint32_t(slot))) {
      ThrowRangeError(env, "program slot %lld is in use (programRelease it first)", (long long)slot);
      return env.Undefined();
    }
  }
  auto prog = std::make_shared<Program>();
  prog->ctx = ctx;
  vk::CompileInput in;
  int setup = 0;
  if (!ctx) {
    Refuse(*prog, spirv::R_UNSUPPORTED, "no Vulkan device is open");
    setup = -ENODEV;
  } else if (!ReadLimits(env, o.Get("limits"), ctx->info.limits, &in.limits)) {
    return env.Undefined();
  } else if (words.ByteLength() > in.limits.maxModuleBytes) {
    // Refused before copying an oversized module; prepare() gives the same reason.
    Refuse(*prog, spirv::R_MODULE_SIZE, "module larger than the limit");
    setup = -EINVAL;
  } else if (haveSpec && spec.ElementLength() / 2 > in.limits.maxSpecConstants) {
    Refuse(*prog, spirv::R_SPEC_CONSTANTS, "more specialization constants than the limit");
    setup = -EINVAL;
  } else {
    in.words.assign(words.Data(), words.Data() + words.ElementLength());
    in.entryIndex = uint32_t(entry);
    if (haveSpec)
      for (size_t i = 0; i + 1 < spec.ElementLength(); i += 2)
        in.spec.push_back({spec[i], spec[i + 1]});
  }
  auto guard = std::make_shared<CompileGuard>();
  guard->prog = prog;
  PoolTask task = [guard, in = std::move(in)](const std::atomic<bool>&, uint64_t* ns) {
    return vk::CompileProgram(*guard->prog, in, ns);
  };
  uint32_t id = EnqueueTask(env, "submitProgramCompile", std::move(task), setup, /*background=*/true);
  if (id == 0) return env.Undefined();
  std::lock_guard<std::mutex> lk(g_mu);
  Slots()[uint32_t(slot)] = prog;
  return Napi::Number::New(env, id);
}

// One launch's job object {slot, windows, lengths, params?, grid, ...} into *in and its program;
// false with a JS exception pending when it is malformed.
bool ParseDispatch(Napi::Env env, Napi::Object o, std::shared_ptr<Program>* progOut, vk::DispatchInput* in) {
  int64_t slot;
  if (!ValueInt(env, o.Get("slot"), "job.slot", 0, kMaxSlot, &slot)) return false;
  Napi::Value wv = o.Get("windows"), lv = o.Get("lengths");
  if (!wv.IsArray() || !lv.IsArray()) {
    ThrowTypeError(env, "job.windows (bigint[]) and job.lengths (number[]) must be arrays");
    return false;
  }
  Napi::Array w = wv.As<Napi::Array>(), l = lv.As<Napi::Array>();
  if (w.Length() != l.Length() || w.Length() > kMaxWindows) {
    ThrowRangeError(env, "job.windows and job.lengths must have the same length (at most %zu)", kMaxWindows);
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
    if (len > 0 && addr == 0) {
      ThrowRangeError(env, "job.windows[%u] is null", i);
      return false;
    }
    in->windows.push_back(addr);
    in->lengths.push_back(uint64_t(len));
  }
  Napi::Value pv = o.Get("params");
  if (!pv.IsUndefined()) {
    uint8_t* p;
    size_t n;
    if (!ValueBytes(env, pv, "job.params", &p, &n)) return false;
    if (n > kMaxParamBytes) {
      ThrowRangeError(env, "job.params larger than %zu bytes", kMaxParamBytes);
      return false;
    }
    in->params.assign(p, p + n);
  }
  // Built-in kernels only (src/gpu/builtin-programs.ts): panel rows and the device's range.
  Napi::Value bv = o.Get("builtin");
  if (!bv.IsUndefined()) {
    if (!bv.IsBoolean()) {
      ThrowTypeError(env, "job.builtin must be a boolean");
      return false;
    }
    in->builtin = bv.As<Napi::Boolean>().Value();
  }
  Napi::Value rv = o.Get("panelRowBytes");
  if (!rv.IsUndefined()) {
    if (!rv.IsArray() || rv.As<Napi::Array>().Length() > w.Length()) {
      ThrowTypeError(env, "job.panelRowBytes must be an array (at most one entry per window)");
      return false;
    }
    Napi::Array ra = rv.As<Napi::Array>();
    for (uint32_t i = 0; i < ra.Length(); i++) {
      int64_t v;
      if (!ValueInt(env, ra.Get(i), "job.panelRowBytes[i]", 0, kMaxSafe, &v)) return false;
      in->panelRowBytes.push_back(uint64_t(v));
    }
  }
  // Bindings the dispatch overwrites completely (vk.h): the host's own built-in plans only —
  // a guest program's writes cannot be trusted to cover its bindings.
  Napi::Value ov = o.Get("overwrites");
  if (!ov.IsUndefined()) {
    if (!in->builtin || !ov.IsArray()) {
      ThrowTypeError(env, "job.overwrites must be an array of binding indices, for built-ins only");
      return false;
    }
    Napi::Array oa = ov.As<Napi::Array>();
    in->overwrites.assign(w.Length(), 0);
    for (uint32_t i = 0; i < oa.Length(); i++) {
      int64_t v;
      if (!ValueInt(env, oa.Get(i), "job.overwrites[i]", 0, int64_t(w.Length()) - 1, &v)) return false;
      in->overwrites[size_t(v)] = 1;
    }
  }
  // A GEMM's streamed operand (vk.h DispatchInput::KStream): the host's own built-in plans only.
  Napi::Value kv = o.Get("kStream");
  if (!kv.IsUndefined()) {
    if (!in->builtin || !kv.IsObject()) {
      ThrowTypeError(env, "job.kStream must be an object {binding, rowBytes, k0Offset, k1Offset, accumulateOffset}, for built-ins only");
      return false;
    }
    Napi::Object ko = kv.As<Napi::Object>();
    int64_t b, rb, o0, o1, oa;
    const int64_t maxOff = int64_t(kMaxParamBytes) - 4;
    if (!ValueInt(env, ko.Get("binding"), "job.kStream.binding", 0, int64_t(w.Length()) - 1, &b) ||
        !ValueInt(env, ko.Get("rowBytes"), "job.kStream.rowBytes", 1, kMaxSafe, &rb) ||
        !ValueInt(env, ko.Get("k0Offset"), "job.kStream.k0Offset", 0, maxOff, &o0) ||
        !ValueInt(env, ko.Get("k1Offset"), "job.kStream.k1Offset", 0, maxOff, &o1) ||
        !ValueInt(env, ko.Get("accumulateOffset"), "job.kStream.accumulateOffset", 0, maxOff, &oa))
      return false;
    in->kStream = {uint32_t(b), uint64_t(rb), uint32_t(o0), uint32_t(o1), uint32_t(oa)};
  }
  Napi::Value gv = o.Get("grid");
  if (!gv.IsArray() || gv.As<Napi::Array>().Length() != 3) {
    ThrowTypeError(env, "job.grid must be [x, y, z]");
    return false;
  }
  for (uint32_t i = 0; i < 3; i++) {
    int64_t g;
    if (!ValueInt(env, gv.As<Napi::Array>().Get(i), "job.grid[i]", 0, UINT32_MAX, &g))
      return false;
    in->grid[i] = uint32_t(g);
  }
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = Slots().find(uint32_t(slot));
    if (it == Slots().end()) {
      ThrowRangeError(env, "program slot %lld is empty", (long long)slot);
      return false;
    }
    *progOut = it->second;
  }
  // The VM's way onto the device (vk.h WayQueue, WayContext) and through the pool.
  Napi::Value wayv = o.Get("way");
  if (!wayv.IsUndefined()) {
    int64_t way;
    if (!ValueInt(env, wayv, "job.way", 0, UINT32_MAX, &way)) return false;
    in->way = uint32_t(way);
  }
  // Guest programs: each binding's VRAM offset (-1: none) and the DEVICE_CACHED ones (resident.cc).
  Napi::Value vv = o.Get("vram");
  if (!vv.IsUndefined()) {
    if (in->builtin || !vv.IsArray() || vv.As<Napi::Array>().Length() != w.Length()) {
      ThrowTypeError(env, "job.vram must be an array of VRAM offsets (-1: none), one per window, for guest programs only");
      return false;
    }
    Napi::Array va = vv.As<Napi::Array>();
    for (uint32_t i = 0; i < va.Length(); i++) {
      int64_t v;
      if (!ValueInt(env, va.Get(i), "job.vram[i]", -1, kMaxSafe, &v)) return false;
      in->vram.push_back(v < 0 ? UINT64_MAX : uint64_t(v));
    }
    int64_t mask = 0;
    Napi::Value mv = o.Get("resident");
    if (!mv.IsUndefined() && !ValueInt(env, mv, "job.resident", 0, UINT32_MAX, &mask)) return false;
    in->residentMask = uint32_t(mask);
  }
  return true;
}

// submitDispatch({slot, windows, lengths, params?, grid}) → job id.
Napi::Value SubmitDispatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject()) {
    ThrowTypeError(env, "job must be an object {slot, windows, lengths, params, grid}");
    return env.Undefined();
  }
  auto in = std::make_shared<vk::DispatchInput>();
  std::shared_ptr<Program> prog;
  if (!ParseDispatch(env, info[0].As<Napi::Object>(), &prog, in.get())) return env.Undefined();
  std::shared_ptr<Context> cur = Ctx();
  int setup = prog->ctx && cur ? 0 : -ENODEV;
  in->generation = cur ? cur->generation : 0;
  PoolTask task = [prog, in](const std::atomic<bool>& cancel, uint64_t* ns) {
    return vk::DispatchProgram(prog, in, cancel, ns);
  };
  uint32_t id = EnqueueTask(env, "submitDispatch", std::move(task), setup, false, in->way);
  if (id == 0) return env.Undefined();
  return Napi::Number::New(env, id);
}

// submitDispatchBatch(meta: Float64Array, params: Uint8Array, way) → job id: a channel's launches
// in order as one pool job (vk::DispatchBatch), all on one way; the completion's `part` says how
// many completed. Packed (src/gpu/jobs.ts packBatch) because reading a job object per launch cost
// more than the rest of the launch's JS (docs/results.md, "Batched launches on the H200"): per launch [slot, n, gridX, gridY, gridZ, resident
// (-1: no VRAM offsets), paramOffset, paramLength] then n × [address, length, vramOffset (-1)].
Napi::Value SubmitDispatchBatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
      !info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    ThrowTypeError(env, "submitDispatchBatch(meta: Float64Array, params: Uint8Array, way)");
    return env.Undefined();
  }
  Napi::Float64Array meta = info[0].As<Napi::Float64Array>();
  Napi::Uint8Array pbytes = info[1].As<Napi::Uint8Array>();
  int64_t way;
  if (!ValueInt(env, info[2], "way", 0, UINT32_MAX, &way)) return env.Undefined();
  const double* m = meta.Data();
  const size_t mn = meta.ElementLength();
  // Every number must be an integer in [lo, hi]; anything else is a malformed batch.
  auto num = [&](size_t at, double lo, double hi, double* out) {
    if (at >= mn) return false;
    const double v = m[at];
    if (!(v >= lo && v <= hi) || v != double(int64_t(v))) return false;
    *out = v;
    return true;
  };
  std::vector<std::shared_ptr<Program>> progs;
  std::vector<std::shared_ptr<vk::DispatchInput>> ins;
  size_t at = 0;
  while (at < mn) {
    double slot, n, g[3], res, po, pl;
    bool ok = num(at, 0, double(kMaxSlot), &slot) && num(at + 1, 0, double(kMaxWindows), &n) &&
              num(at + 2, 0, UINT32_MAX, &g[0]) && num(at + 3, 0, UINT32_MAX, &g[1]) &&
              num(at + 4, 0, UINT32_MAX, &g[2]) && num(at + 5, -1, UINT32_MAX, &res) &&
              num(at + 6, 0, double(pbytes.ElementLength()), &po) && num(at + 7, 0, double(kMaxParamBytes), &pl) &&
              po + pl <= double(pbytes.ElementLength());
    auto in = std::make_shared<vk::DispatchInput>();
    for (size_t i = 0; ok && i < size_t(n); i++) {
      double addr, len, vram;
      const size_t w = at + 8 + 3 * i;
      ok = num(w, 0, double(kMaxSafe), &addr) && num(w + 1, 0, double(kMaxSafe), &len) &&
           num(w + 2, -1, double(kMaxSafe), &vram) && !(len > 0 && addr == 0);
      if (!ok) break;
      in->windows.push_back(uint64_t(addr));
      in->lengths.push_back(uint64_t(len));
      if (res >= 0) in->vram.push_back(vram < 0 ? UINT64_MAX : uint64_t(vram));
    }
    if (!ok || ins.size() == kMaxBatch) {
      ThrowRangeError(env, "submitDispatchBatch: launch %zu is malformed", ins.size());
      return env.Undefined();
    }
    for (int i = 0; i < 3; i++) in->grid[i] = uint32_t(g[i]);
    in->residentMask = res < 0 ? 0 : uint32_t(res);
    in->params.assign(pbytes.Data() + size_t(po), pbytes.Data() + size_t(po) + size_t(pl));
    in->way = uint32_t(way);
    std::shared_ptr<Program> prog;
    {
      std::lock_guard<std::mutex> lk(g_mu);
      auto it = Slots().find(uint32_t(slot));
      if (it == Slots().end()) {
        ThrowRangeError(env, "program slot %lld is empty", (long long)slot);
        return env.Undefined();
      }
      prog = it->second;
    }
    progs.push_back(std::move(prog));
    ins.push_back(std::move(in));
    at += 8 + 3 * size_t(n);
  }
  if (ins.empty()) {
    ThrowRangeError(env, "submitDispatchBatch: no launches");
    return env.Undefined();
  }
  std::shared_ptr<Context> cur = Ctx();
  int setup = cur ? 0 : -ENODEV;
  for (auto& p : progs)
    if (!p->ctx) setup = -ENODEV;
  for (auto& in : ins) in->generation = cur ? cur->generation : 0;
  PoolTask task = [progs = std::move(progs), ins = std::move(ins)](const std::atomic<bool>& cancel, uint64_t* ns) {
    uint32_t done = 0;
    const int st = vk::DispatchBatch(progs, ins, cancel, ns, &done);
    addon::SetTaskPart(done);
    return st;
  };
  uint32_t id = EnqueueTask(env, "submitDispatchBatch", std::move(task), setup, false, uint32_t(way));
  if (id == 0) return env.Undefined();
  return Napi::Number::New(env, id);
}

// vulkanPrepareWay(way): open the way's device now, on a thread of its own, instead of at its first
// launch (WayContext). Opening a GPU's device pauses the driver's other devices for a while
// (docs/results.md, the H200 neighbour rows): at a VM's attach that pause is not in the middle of
// its neighbours' work when it first launches.
Napi::Value VulkanPrepareWay(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t way;
  if (!ValueInt(env, info[0], "way", 0, UINT32_MAX, &way)) return env.Undefined();
  std::shared_ptr<Context> cur = Ctx();
  if (!cur) return env.Undefined();
  std::thread([cur, way] {
    if (!cur->lost.load()) WayContext(cur, uint32_t(way));
  }).detach();
  return env.Undefined();
}

// programInfo(slot) → null until the compile finished (or for an empty slot).
Napi::Value ProgramInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t slot;
  if (!ValueInt(env, info[0], "slot", 0, kMaxSlot, &slot)) return env.Undefined();
  std::shared_ptr<Program> prog;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = Slots().find(uint32_t(slot));
    if (it == Slots().end()) return env.Null();
    prog = it->second;
  }
  std::lock_guard<std::mutex> lk(prog->mu);
  if (!prog->done) return env.Null();
  Napi::Object r = Napi::Object::New(env);
  r.Set("reason", prog->reason);
  r.Set("message", prog->message);
  const spirv::EntryInfo& e = prog->entry;
  if (e.name.empty()) {
    r.Set("entry", env.Null());  // refused before the entry point was known
    return r;
  }
  Napi::Object eo = Napi::Object::New(env);
  eo.Set("name", e.name);
  eo.Set("wg", U32Array(env, e.wg, 3));
  eo.Set("sharedBytes", e.sharedBytes);
  eo.Set("pushBytes", e.pushBytes);
  Napi::Array b = Napi::Array::New(env, e.bindings.size());
  for (size_t i = 0; i < e.bindings.size(); i++) {
    Napi::Object bo = Napi::Object::New(env);
    bo.Set("binding", e.bindings[i].binding);
    bo.Set("writable", e.bindings[i].writable);
    b.Set(uint32_t(i), bo);
  }
  eo.Set("bindings", b);
  r.Set("entry", eo);
  return r;
}

Napi::Value ProgramRelease(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t slot;
  if (!ValueInt(env, info[0], "slot", 0, kMaxSlot, &slot)) return env.Undefined();
  std::shared_ptr<Program> prog;  // destroyed outside the lock (or by the last job using it)
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = Slots().find(uint32_t(slot));
    if (it != Slots().end()) {
      prog = std::move(it->second);
      Slots().erase(it);
    }
  }
  return env.Undefined();
}

// vulkanResident(vramBytes): DEVICE_CACHED bindings run on resident copies of a VRAM of this size
// (resident.cc); 0 turns residency off.
Napi::Value VulkanResident(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t bytes;
  if (!ValueInt(env, info[0], "vramBytes", 0, kMaxSafe, &bytes)) return env.Undefined();
  vk::SetResidentVram(uint64_t(bytes));
  // A new holder (or none): nothing kept for the last one is valid.
  vk::InvalidateVram(0, UINT64_MAX / 2);
  return env.Undefined();
}

// vulkanVramWritten(offset, length): the engine wrote these VRAM bytes other than through a
// launch's resident copy; every mirror's copy of them is stale.
Napi::Value VulkanVramWritten(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t off, len;
  if (!ValueInt(env, info[0], "offset", 0, kMaxSafe, &off) || !ValueInt(env, info[1], "length", 0, kMaxSafe, &len))
    return env.Undefined();
  if (len > 0) vk::InvalidateVram(uint64_t(off), uint64_t(len));
  return env.Undefined();
}

// Import counters since load: {imports, importNs} (each import is one window's page range).
Napi::Value VulkanStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  vk::ImportStats& s = vk::GetImportStats();
  Napi::Object o = Napi::Object::New(env);
  o.Set("imports", double(s.count.load()));
  o.Set("importNs", double(s.ns.load()));
  o.Set("importHits", double(s.cacheHits.load()));
  o.Set("uploadBytes", double(s.uploadBytes.load()));
  o.Set("downloadBytes", double(s.downloadBytes.load()));
  o.Set("bounceBytes", double(s.bounceBytes.load()));
  o.Set("zeroedBytes", double(s.zeroedBytes.load()));
  o.Set("panels", double(s.panels.load()));
  o.Set("losses", double(s.losses.load()));
  o.Set("rebuilds", double(s.rebuilds.load()));
  o.Set("warmUps", double(s.warmUps.load()));
  o.Set("kSlices", double(s.kSlices.load()));
  o.Set("replays", double(s.replays.load()));
  o.Set("residentBytes", double(s.residentBytes.load()));
  o.Set("residentUploadBytes", double(s.residentUploadBytes.load()));
  o.Set("mirrorBytes", double(s.mirrorBytes.load()));
  o.Set("residentDroppedPages", double(s.residentDropped.load()));
  Napi::Object ph = Napi::Object::New(env);
  ph.Set("dispatches", double(s.dispatches.load()));
  ph.Set("setupNs", double(s.setupNs.load()));
  ph.Set("recordNs", double(s.recordNs.load()));
  ph.Set("queueSubmitNs", double(s.queueSubmitNs.load()));
  ph.Set("waitNs", double(s.waitNs.load()));
  ph.Set("finishNs", double(s.finishNs.load()));
  o.Set("dispatchPhases", ph);
  o.Set("computeNs", double(s.computeNs.load()));
  std::shared_ptr<Context> c = Ctx();
  o.Set("generation", double(c ? c->generation : 0));
  o.Set("lastLoss", vk::LastLoss());
  return o;
}

// vulkanReadTuning(): parses the VUGPU_VK_* knobs again, for tests and benchmarks that change one
// between launches (a launch reads them from the struct made at vulkanOpen, never from the
// environment); returns the knobs in force. Those read at open (MEMORY, CMD_QUERY_RESET,
// COMPUTE_QUEUES) keep the open device's choice until the next vulkanOpen.
Napi::Value VulkanReadTuning(const Napi::CallbackInfo& info) {
  return TuningObject(info.Env(), vk::ReadTuning());
}

// The test hooks exist only with VUGPU_TEST_HOOKS=1; else a RangeError naming the hook.
bool TestHooksOn(Napi::Env env, const char* hook) {
  const char* hooks = getenv("VUGPU_TEST_HOOKS");
  if (hooks && std::string(hooks) == "1") return true;
  ThrowRangeError(env, "%s needs VUGPU_TEST_HOOKS=1", hook);
  return false;
}

// Test hook: behave as if the open device had returned VK_ERROR_DEVICE_LOST — launches queued or
// running on it fail with -ENODEV — then rebuild it (synchronously). Only when
// VUGPU_TEST_HOOKS=1 (tests), so a production server cannot be made to drop its work.
Napi::Value VulkanSimulateLoss(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!TestHooksOn(env, "vulkanSimulateLoss")) return env.Undefined();
  std::shared_ptr<Context> c = Ctx();
  if (!c) return Napi::Boolean::New(env, false);
  vk::MarkLost(*c, "simulated by a test hook", false);
  return Napi::Boolean::New(env, vk::RebuildAfterLoss(*c));
}

// Test hook: makes the open GPU really lose its device. vulkanInjectFault(words, address)
// dispatches `words` (a module that writes through the buffer reference in its first 8 push
// constant bytes) with `address`, which nothing maps: the GPU's MMU faults and the driver
// loses the whole VkDevice (NVIDIA: Xid 31), the launches running on it included — which the
// engine must then discover and recover from on its own paths. Returns the VkResult name its
// own fence wait saw (10 s at most). Only with VUGPU_TEST_HOOKS=1 on a GPU opened with them:
// on a CPU device the fault would be the server's own segfault.
Napi::Value VulkanInjectFault(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!TestHooksOn(env, "vulkanInjectFault")) return env.Undefined();
  if (info.Length() < 2 || !info[0].IsTypedArray() ||
      info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array || !info[1].IsBigInt()) {
    ThrowTypeError(env, "vulkanInjectFault(words: Uint32Array, address: bigint)");
    return env.Undefined();
  }
  Napi::Uint32Array w = info[0].As<Napi::Uint32Array>();
  // A driver handed invalid SPIR-V may do anything: refuse it here, like every other module.
  const std::string invalid = spirv::detail::validate(w.Data(), w.ElementLength());
  if (!invalid.empty()) {
    ThrowTypeError(env, "vulkanInjectFault: not valid SPIR-V: %s", invalid.c_str());
    return env.Undefined();
  }
  std::shared_ptr<Context> c = Ctx();
  if (!c) {
    ThrowRangeError(env, "vulkanInjectFault: no Vulkan device is open");
    return env.Undefined();
  }
  if (!c->info.faultInjection) {
    ThrowRangeError(env, "vulkanInjectFault: %s %s", c->info.name.c_str(),
                    c->info.cpuDevice ? "is a CPU device (the fault would crash this process)"
                                      : "was not opened with buffer device address (VUGPU_TEST_HOOKS=1 at open)");
    return env.Undefined();
  }
  bool lossless = false;
  const uint64_t address = info[1].As<Napi::BigInt>().Uint64Value(&lossless);
  const vk::DeviceFns& f = c->fn;
  VkShaderModule mod = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipe = VK_NULL_HANDLE;
  VkCommandPool pool = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  VkResult r;
  VkShaderModuleCreateInfo sm{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  sm.codeSize = w.ElementLength() * 4;
  sm.pCode = w.Data();
  VkPushConstantRange pr{VK_SHADER_STAGE_COMPUTE_BIT, 0, 8};
  VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pl.pushConstantRangeCount = 1;
  pl.pPushConstantRanges = &pr;
  VkCommandPoolCreateInfo cp{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  cp.queueFamilyIndex = c->info.queueFamily;
  VkFenceCreateInfo fc{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  if ((r = f.vkCreateShaderModule(c->device, &sm, nullptr, &mod)) == VK_SUCCESS &&
      (r = f.vkCreatePipelineLayout(c->device, &pl, nullptr, &layout)) == VK_SUCCESS) {
    VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = mod;
    ci.stage.pName = "main";
    ci.layout = layout;
    r = f.vkCreateComputePipelines(c->device, VK_NULL_HANDLE, 1, &ci, nullptr, &pipe);
  }
  if (r == VK_SUCCESS && (r = f.vkCreateCommandPool(c->device, &cp, nullptr, &pool)) == VK_SUCCESS &&
      (r = f.vkCreateFence(c->device, &fc, nullptr, &fence)) == VK_SUCCESS) {
    VkCommandBufferAllocateInfo ca{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ca.commandPool = pool;
    ca.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ca.commandBufferCount = 1;
    r = f.vkAllocateCommandBuffers(c->device, &ca, &cmd);
  }
  if (r == VK_SUCCESS) {
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    f.vkBeginCommandBuffer(cmd, &bi);
    f.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    f.vkCmdPushConstants(cmd, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 8, &address);
    f.vkCmdDispatch(cmd, 1, 1, 1);
    r = f.vkEndCommandBuffer(cmd);
  }
  if (r == VK_SUCCESS) {
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cmd;
    {
      std::lock_guard<std::mutex> lk(*c->compQ.mu);
      r = f.vkQueueSubmit(c->compQ.queue, 1, &si, fence);
    }
    if (r == VK_SUCCESS) r = f.vkWaitForFences(c->device, 1, &fence, VK_TRUE, 10'000'000'000ull);
  }
  // Destroying objects of a lost device is allowed; a fence that timed out is still pending on a
  // live device, so its objects are left to the device's destruction.
  if (r != VK_TIMEOUT) {
    if (fence) f.vkDestroyFence(c->device, fence, nullptr);
    if (pool) f.vkDestroyCommandPool(c->device, pool, nullptr);
    if (pipe) f.vkDestroyPipeline(c->device, pipe, nullptr);
  }
  if (layout) f.vkDestroyPipelineLayout(c->device, layout, nullptr);
  if (mod) f.vkDestroyShaderModule(c->device, mod, nullptr);
  return Napi::String::New(env, vk::ResultName(r));
}

}  // namespace

void RegisterVulkan(Napi::Env env, Napi::Object exports) {
  exports.Set("vulkanDevices", Napi::Function::New(env, VulkanDevices, "vulkanDevices"));
  exports.Set("vulkanOpen", Napi::Function::New(env, VulkanOpen, "vulkanOpen"));
  exports.Set("vulkanClose", Napi::Function::New(env, VulkanClose, "vulkanClose"));
  exports.Set("vulkanStats", Napi::Function::New(env, VulkanStats, "vulkanStats"));
  exports.Set("vulkanReadTuning", Napi::Function::New(env, VulkanReadTuning, "vulkanReadTuning"));
  exports.Set("vulkanResident", Napi::Function::New(env, VulkanResident, "vulkanResident"));
  exports.Set("vulkanVramWritten", Napi::Function::New(env, VulkanVramWritten, "vulkanVramWritten"));
  exports.Set("vulkanPrepareWay", Napi::Function::New(env, VulkanPrepareWay, "vulkanPrepareWay"));
  exports.Set("vulkanSimulateLoss", Napi::Function::New(env, VulkanSimulateLoss, "vulkanSimulateLoss"));
  exports.Set("vulkanInjectFault", Napi::Function::New(env, VulkanInjectFault, "vulkanInjectFault"));
  exports.Set("vulkanDirectRun", Napi::Function::New(env, vk::DirectRunJs, "vulkanDirectRun"));
  exports.Set("submitProgramCompile",
              Napi::Function::New(env, SubmitProgramCompile, "submitProgramCompile"));
  exports.Set("submitDispatch", Napi::Function::New(env, SubmitDispatch, "submitDispatch"));
  exports.Set("submitDispatchBatch", Napi::Function::New(env, SubmitDispatchBatch, "submitDispatchBatch"));
  exports.Set("programInfo", Napi::Function::New(env, ProgramInfo, "programInfo"));
  exports.Set("programRelease", Napi::Function::New(env, ProgramRelease, "programRelease"));
}

}  // namespace vugpu::addon
