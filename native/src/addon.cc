// Module entry point: each concern registers its own exports (see common.h).
#include "common.h"

namespace {

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  vugpu::addon::RegisterSockets(env, exports);
  vugpu::addon::RegisterMemory(env, exports);
  vugpu::addon::RegisterEvents(env, exports);
  vugpu::addon::RegisterPool(env, exports);
  vugpu::addon::RegisterVulkan(env, exports);
  vugpu::addon::RegisterSpirv(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(vugpu_native, Init)
