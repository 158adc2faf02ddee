// JS binding of the SPIR-V front end: programPrepare (check + loop rewrite) and programValidate.
// Synchronous: tests, the fuzzer and launch-time analysis call it on the JS thread.
// program.h first: its Reason enum has an R_OK, which <unistd.h> (pulled in by napi.h) defines
// as a macro; parsed first, the enum is intact (this file then compares with 0, not R_OK).
#include "module.h"

#include <cstring>

#include "../common.h"

namespace vugpu::addon {

namespace {

bool ArgWords(const Napi::CallbackInfo& info, size_t i, const char* name, const uint32_t** data,
              size_t* count) {
  Napi::Value v = info[i];
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
    ThrowTypeError(info.Env(), "%s must be a Uint32Array", name);
    return false;
  }
  Napi::Uint32Array a = v.As<Napi::Uint32Array>();
  *data = a.Data();
  *count = a.ElementLength();
  return true;
}

bool LimitField(Napi::Env env, Napi::Object o, const char* key, uint32_t* out) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined()) return true;
  int64_t x;
  if (!ValueInt(env, v, key, 0, 0xFFFFFFFFll, &x)) return false;
  *out = uint32_t(x);
  return true;
}

bool ArgLimits(const Napi::CallbackInfo& info, size_t i, spirv::Limits* lim) {
  Napi::Env env = info.Env();
  if (info.Length() <= i || info[i].IsUndefined()) return true;
  if (!info[i].IsObject()) {
    ThrowTypeError(env, "limits must be an object");
    return false;
  }
  Napi::Object o = info[i].As<Napi::Object>();
  if (!LimitField(env, o, "maxModuleBytes", &lim->maxModuleBytes) ||
      !LimitField(env, o, "maxBindings", &lim->maxBindings) ||
      !LimitField(env, o, "maxPushBytes", &lim->maxPushBytes) ||
      !LimitField(env, o, "maxSpecConstants", &lim->maxSpecConstants) ||
      !LimitField(env, o, "maxWgInvocations", &lim->maxWgInvocations) ||
      !LimitField(env, o, "maxSharedBytes", &lim->maxSharedBytes) ||
      !LimitField(env, o, "features", &lim->features) ||
      !LimitField(env, o, "loopLimit", &lim->loopLimit) ||
      !LimitField(env, o, "cancelLoadEarly", &lim->cancelLoadEarly) ||
      !LimitField(env, o, "benchParts", &lim->benchParts) ||
      !LimitField(env, o, "cancelEvery", &lim->cancelEvery) ||
      !LimitField(env, o, "subgroupSize", &lim->subgroupSize))
    return false;
  Napi::Value wg = o.Get("maxWgSize");
  if (!wg.IsUndefined()) {
    if (!wg.IsArray() || wg.As<Napi::Array>().Length() != 3) {
      ThrowTypeError(env, "limits.maxWgSize must be [x, y, z]");
      return false;
    }
    Napi::Array arr = wg.As<Napi::Array>();
    for (uint32_t k = 0; k < 3; ++k) {
      int64_t x;
      if (!ValueInt(env, arr.Get(k), "limits.maxWgSize[i]", 0, 0xFFFFFFFFll, &x)) return false;
      lim->maxWgSize[k] = uint32_t(x);
    }
  }
  return true;
}

// programPrepare(words, entryIndex, spec /* id,value pairs */, limits) →
//   { reason, message, entry?: { name, wg, sharedBytes, pushBytes, bindings }, words?,
//     uncheckedLoops? (header label ids left without a cancel check) }
Napi::Value ProgramPrepare(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const uint32_t* words;
  size_t count;
  if (!ArgWords(info, 0, "words", &words, &count)) return env.Undefined();
  int64_t entryIndex;
  if (!ArgInt(info, 1, "entryIndex", 0, 0xFFFFFFFFll, &entryIndex)) return env.Undefined();
  std::vector<spirv::SpecValue> spec;
  if (info.Length() > 2 && !info[2].IsUndefined()) {
    const uint32_t* s;
    size_t n;
    if (!ArgWords(info, 2, "spec", &s, &n)) return env.Undefined();
    if (n % 2) {
      ThrowRangeError(env, "spec must hold (id, value) pairs");
      return env.Undefined();
    }
    for (size_t k = 0; k < n; k += 2) spec.push_back({s[k], s[k + 1]});
  }
  spirv::Limits lim;
  if (!ArgLimits(info, 3, &lim)) return env.Undefined();

  spirv::Prepared p = spirv::prepare(words, count, uint32_t(entryIndex), spec.data(), spec.size(), lim);

  Napi::Object out = Napi::Object::New(env);
  out.Set("reason", Napi::Number::New(env, p.reason));
  out.Set("message", Napi::String::New(env, p.message));
  if (p.reason != 0) return out;
  Napi::Object e = Napi::Object::New(env);
  e.Set("name", Napi::String::New(env, p.entry.name));
  Napi::Array wg = Napi::Array::New(env, 3);
  for (uint32_t k = 0; k < 3; ++k) wg.Set(k, Napi::Number::New(env, p.entry.wg[k]));
  e.Set("wg", wg);
  e.Set("sharedBytes", Napi::Number::New(env, p.entry.sharedBytes));
  e.Set("pushBytes", Napi::Number::New(env, p.entry.pushBytes));
  Napi::Array b = Napi::Array::New(env, p.entry.bindings.size());
  for (size_t k = 0; k < p.entry.bindings.size(); ++k) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("binding", Napi::Number::New(env, p.entry.bindings[k].binding));
    o.Set("writable", Napi::Boolean::New(env, p.entry.bindings[k].writable));
    b.Set(uint32_t(k), o);
  }
  e.Set("bindings", b);
  out.Set("entry", e);
  Napi::Uint32Array w = Napi::Uint32Array::New(env, p.words.size());
  if (!p.words.empty()) memcpy(w.Data(), p.words.data(), p.words.size() * 4);
  out.Set("words", w);
  Napi::Uint32Array u = Napi::Uint32Array::New(env, p.uncheckedLoops.size());
  if (!p.uncheckedLoops.empty()) memcpy(u.Data(), p.uncheckedLoops.data(), p.uncheckedLoops.size() * 4);
  out.Set("uncheckedLoops", u);
  return out;
}

// programValidate(words) → null when SPIRV-Tools (Vulkan 1.2 environment) accepts the module,
// else its message. For tests and the fuzzer's independent check of rewritten modules.
Napi::Value ProgramValidate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const uint32_t* words;
  size_t count;
  if (!ArgWords(info, 0, "words", &words, &count)) return env.Undefined();
  std::vector<uint32_t> copy(words, words + count);
  std::string msg = spirv::detail::validate(copy.data(), copy.size());
  if (msg.empty()) return env.Null();
  return Napi::String::New(env, msg);
}

}  // namespace

void RegisterSpirv(Napi::Env env, Napi::Object exports) {
  exports.Set("programPrepare", Napi::Function::New(env, ProgramPrepare, "programPrepare"));
  exports.Set("programValidate", Napi::Function::New(env, ProgramValidate, "programValidate"));
}

}  // namespace vugpu::addon
