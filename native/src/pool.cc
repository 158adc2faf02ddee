// Native job pool (copies and compute kernels off the JS thread). Filled in next.
#include "common.h"

namespace vugpu::addon {

void RegisterPool(Napi::Env, Napi::Object) {}

}  // namespace vugpu::addon
