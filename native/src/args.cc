// Argument validation and JS error construction shared by every export.
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

#include "common.h"

namespace vugpu::addon {

namespace {

void ThrowFormatted(Napi::Env env, napi_status (*make)(napi_env, napi_value, napi_value, napi_value*),
                    const char* fmt, va_list ap) {
  char msg[256];
  vsnprintf(msg, sizeof msg, fmt, ap);
  napi_value text, err;
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &text);
  make(env, nullptr, text, &err);
  napi_throw(env, err);
}

}  // namespace

void ThrowTypeError(Napi::Env env, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ThrowFormatted(env, napi_create_type_error, fmt, ap);
  va_end(ap);
}

void ThrowRangeError(Napi::Env env, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ThrowFormatted(env, napi_create_range_error, fmt, ap);
  va_end(ap);
}

const char* ErrnoName(int err) {
  switch (err) {
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EINTR: return "EINTR";
    case EIO: return "EIO";
    case EBADF: return "EBADF";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES";
    case EFAULT: return "EFAULT";
    case EBUSY: return "EBUSY";
    case EEXIST: return "EEXIST";
    case ENODEV: return "ENODEV";
    case EINVAL: return "EINVAL";
    case ENFILE: return "ENFILE";
    case EMFILE: return "EMFILE";
    case ENOTTY: return "ENOTTY";
    case EFBIG: return "EFBIG";
    case ENOSPC: return "ENOSPC";
    case EPIPE: return "EPIPE";
    case ERANGE: return "ERANGE";
    case ENOSYS: return "ENOSYS";
    case EOVERFLOW: return "EOVERFLOW";
    case ENOTSOCK: return "ENOTSOCK";
    case EADDRINUSE: return "EADDRINUSE";
    case ECONNRESET: return "ECONNRESET";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ETIMEDOUT: return "ETIMEDOUT";
    case ECANCELED: return "ECANCELED";
    default: return "EUNKNOWN";
  }
}

void ThrowErrno(Napi::Env env, const char* syscall, int err) {
  char msg[256];
  snprintf(msg, sizeof msg, "%s: %s (%s)", syscall, strerror(err), ErrnoName(err));
  Napi::Error e = Napi::Error::New(env, msg);
  e.Set("errno", Napi::Number::New(env, -err));
  e.Set("code", Napi::String::New(env, ErrnoName(err)));
  e.Set("syscall", Napi::String::New(env, syscall));
  e.ThrowAsJavaScriptException();
}

bool ValueInt(Napi::Env env, Napi::Value v, const char* name, int64_t min, int64_t max,
              int64_t* out) {
  if (!v.IsNumber()) {
    ThrowTypeError(env, "%s must be a number", name);
    return false;
  }
  double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || std::trunc(d) != d) {
    ThrowTypeError(env, "%s must be an integer", name);
    return false;
  }
  if (d < double(min) || d > double(max)) {
    ThrowRangeError(env, "%s out of range [%lld, %lld]", name, (long long)min, (long long)max);
    return false;
  }
  *out = int64_t(d);
  return true;
}

bool ArgInt(const Napi::CallbackInfo& info, size_t i, const char* name, int64_t min, int64_t max,
            int64_t* out) {
  return ValueInt(info.Env(), info[i], name, min, max, out);
}

bool ArgFd(const Napi::CallbackInfo& info, size_t i, int* out) {
  int64_t v;
  if (!ArgInt(info, i, "fd", 0, INT32_MAX, &v)) return false;
  *out = int(v);
  return true;
}

bool ArgBool(const Napi::CallbackInfo& info, size_t i, const char* name, bool* out) {
  if (!info[i].IsBoolean()) {
    ThrowTypeError(info.Env(), "%s must be a boolean", name);
    return false;
  }
  *out = info[i].As<Napi::Boolean>().Value();
  return true;
}

bool ArgOptBool(const Napi::CallbackInfo& info, size_t i, const char* name, bool dflt, bool* out) {
  if (i >= info.Length() || info[i].IsUndefined()) {
    *out = dflt;
    return true;
  }
  return ArgBool(info, i, name, out);
}

bool ArgString(const Napi::CallbackInfo& info, size_t i, const char* name, std::string* out) {
  if (!info[i].IsString()) {
    ThrowTypeError(info.Env(), "%s must be a string", name);
    return false;
  }
  *out = info[i].As<Napi::String>().Utf8Value();
  if (out->find('\0') != std::string::npos) {
    ThrowTypeError(info.Env(), "%s must not contain NUL", name);
    return false;
  }
  return true;
}

bool ArgFunction(const Napi::CallbackInfo& info, size_t i, const char* name, Napi::Function* out) {
  if (!info[i].IsFunction()) {
    ThrowTypeError(info.Env(), "%s must be a function", name);
    return false;
  }
  *out = info[i].As<Napi::Function>();
  return true;
}

bool ArgBigAddr(const Napi::CallbackInfo& info, size_t i, const char* name, uint64_t* out) {
  if (!info[i].IsBigInt()) {
    ThrowTypeError(info.Env(), "%s must be a bigint", name);
    return false;
  }
  bool lossless = false;
  *out = info[i].As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) {
    ThrowRangeError(info.Env(), "%s must be a non-negative 64-bit bigint", name);
    return false;
  }
  return true;
}

bool ValueBytes(Napi::Env env, Napi::Value v, const char* name, uint8_t** data, size_t* len) {
  void* p = nullptr;
  size_t n = 0;
  if (v.IsTypedArray()) {
    napi_typedarray_type type;
    size_t count, offset;
    napi_value ab;
    if (napi_get_typedarray_info(env, v, &type, &count, &p, &ab, &offset) != napi_ok) {
      ThrowTypeError(env, "%s: cannot read typed array", name);
      return false;
    }
    n = v.As<Napi::TypedArray>().ByteLength();
  } else if (v.IsDataView()) {
    napi_value ab;
    size_t offset;
    if (napi_get_dataview_info(env, v, &n, &p, &ab, &offset) != napi_ok) {
      ThrowTypeError(env, "%s: cannot read DataView", name);
      return false;
    }
  } else if (v.IsArrayBuffer()) {
    if (napi_get_arraybuffer_info(env, v, &p, &n) != napi_ok) {
      ThrowTypeError(env, "%s: cannot read ArrayBuffer", name);
      return false;
    }
  } else {
    ThrowTypeError(env, "%s must be an ArrayBuffer or ArrayBufferView", name);
    return false;
  }
  *data = static_cast<uint8_t*>(p);
  *len = p ? n : 0;  // a detached buffer reports no data: treat as empty
  return true;
}

}  // namespace vugpu::addon
