// The VUGPU_VK_* knobs parsed into one struct (tuning.h).
#include "tuning.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <string>

namespace vugpu::vk {

namespace {

// Each parse is a new struct and the last one is never freed: a launch on a pool thread may still
// read the one it loaded when a test parses again, and there are a handful per process.
std::atomic<const Tuning*> g_tune{nullptr};

// A positive integer, else dflt; a set value that is not one is named on stderr (for a switch,
// zeroOk, "0" is its plain "off").
uint64_t Count(const char* name, uint64_t dflt, bool zeroOk = false) {
  const char* v = getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  unsigned long long x = strtoull(v, &end, 10);
  if (end && *end == 0 && x > 0) return uint64_t(x);
  if (!(zeroOk && strcmp(v, "0") == 0))
    fprintf(stderr, "vugpu: %s='%s' is not a positive integer: the default (%s) is used\n", name, v,
            dflt ? std::to_string(dflt).c_str() : "none");
  return dflt;
}

// A switch that is on when the variable is a positive integer (VUGPU_VK_NO_REPLAY=1).
bool On(const char* name) { return Count(name, 0, true) != 0; }

// Off only when the variable is exactly "0" (VUGPU_VK_WARMUP, VUGPU_VK_PANEL_PAIR).
bool NotZero(const char* name) {
  const char* v = getenv(name);
  return !(v && strcmp(v, "0") == 0);
}

}  // namespace

const Tuning& Tune() {
  static const Tuning defaults;
  const Tuning* t = g_tune.load(std::memory_order_acquire);
  return t ? *t : defaults;
}

const Tuning& ReadTuning() {
  Tuning* t = new Tuning();
  if (const char* m = getenv("VUGPU_VK_MEMORY"); m && *m) {
    if (!strcmp(m, "device")) t->memory = Tuning::Memory::Device;
    else if (!strcmp(m, "import")) t->memory = Tuning::Memory::Import;
    else fprintf(stderr, "vugpu: VUGPU_VK_MEMORY='%s' is neither import nor device: chosen by the device type\n", m);
  }
  const char* cqr = getenv("VUGPU_VK_CMD_QUERY_RESET");
  t->cmdQueryReset = cqr && *cqr == '1';
  t->computeQueues = uint32_t(std::min<uint64_t>(Count("VUGPU_VK_COMPUTE_QUEUES", 0, true), UINT32_MAX));
  t->cpuWays = uint32_t(std::min<uint64_t>(Count("VUGPU_VK_CPU_WAYS", kMaxCpuWays), kMaxCpuWays));
  t->warmUp = NotZero("VUGPU_VK_WARMUP");
  const char* sc = getenv("MESA_SHADER_CACHE_DISABLE");
  t->shaderCacheOff = sc && (!strcmp(sc, "1") || !strcasecmp(sc, "true") || !strcasecmp(sc, "yes"));
  t->maxPanels = uint32_t(std::min<uint64_t>(Count("VUGPU_VK_MAX_PANELS", t->maxPanels), kMaxPanels));
  t->panelBytes = Count("VUGPU_VK_PANEL_BYTES", t->panelBytes);
  t->panelWorkgroups = Count("VUGPU_VK_PANEL_WORKGROUPS", t->panelWorkgroups);
  t->panelPair = NotZero("VUGPU_VK_PANEL_PAIR");
  t->kSlices = uint32_t(std::min<uint64_t>(Count("VUGPU_VK_K_SLICES", kMaxKSlices), kMaxKSlices));
  t->kSlabNamed = getenv("VUGPU_VK_K_SLAB_BYTES") != nullptr;
  t->kSlabBytes = Count("VUGPU_VK_K_SLAB_BYTES", 0);
  t->uploadAll = On("VUGPU_VK_UPLOAD_ALL");
  t->importTransient = On("VUGPU_VK_IMPORT_TRANSIENT");
  t->oneQueueBytes = Count("VUGPU_VK_ONE_QUEUE_BYTES", t->oneQueueBytes);
  t->chainOneQueue = On("VUGPU_VK_CHAIN_ONE_QUEUE");
  t->fillEachPanel = On("VUGPU_VK_FILL_EACH_PANEL");
  t->noReplay = On("VUGPU_VK_NO_REPLAY");
  t->noResident = On("VUGPU_VK_NO_RESIDENT");
  t->residentCheck = On("VUGPU_VK_RESIDENT_CHECK");
  {
    const uint64_t s = Count("VUGPU_VK_RESIDENT_SPAN", t->residentSpan);
    if (s >= (64u << 10) && (s & (s - 1)) == 0) t->residentSpan = s;
    else fprintf(stderr, "vugpu: VUGPU_VK_RESIDENT_SPAN=%llu is not a power of two of at least 64 KiB: %llu used\n",
                 (unsigned long long)s, (unsigned long long)t->residentSpan);
  }
  t->spinUs = Count("VUGPU_VK_SPIN_US", t->spinUs);
  g_tune.store(t, std::memory_order_release);
  return *t;
}

std::string TuningText(const Tuning& t) {
  const Tuning d;
  std::string s;
  auto add = [&](const char* name, const std::string& v) {
    if (!s.empty()) s += ' ';
    s += name;
    s += '=';
    s += v;
  };
  auto num = [&](const char* name, uint64_t v, uint64_t dv) {
    if (v != dv) add(name, std::to_string(v));
  };
  auto flag = [&](const char* name, bool v, bool dv) {
    if (v != dv) add(name, v ? "1" : "0");
  };
  if (t.memory != d.memory) add("VUGPU_VK_MEMORY", t.memory == Tuning::Memory::Device ? "device" : "import");
  flag("VUGPU_VK_CMD_QUERY_RESET", t.cmdQueryReset, d.cmdQueryReset);
  num("VUGPU_VK_COMPUTE_QUEUES", t.computeQueues, d.computeQueues);
  num("VUGPU_VK_CPU_WAYS", t.cpuWays, d.cpuWays);
  flag("VUGPU_VK_WARMUP", t.warmUp, d.warmUp);
  flag("MESA_SHADER_CACHE_DISABLE", t.shaderCacheOff, d.shaderCacheOff);
  num("VUGPU_VK_MAX_PANELS", t.maxPanels, d.maxPanels);
  num("VUGPU_VK_PANEL_BYTES", t.panelBytes, d.panelBytes);
  num("VUGPU_VK_PANEL_WORKGROUPS", t.panelWorkgroups, d.panelWorkgroups);
  flag("VUGPU_VK_PANEL_PAIR", t.panelPair, d.panelPair);
  num("VUGPU_VK_K_SLICES", t.kSlices, d.kSlices);
  if (t.kSlabNamed) add("VUGPU_VK_K_SLAB_BYTES", t.kSlabBytes ? std::to_string(t.kSlabBytes) : "(default)");
  flag("VUGPU_VK_UPLOAD_ALL", t.uploadAll, d.uploadAll);
  flag("VUGPU_VK_IMPORT_TRANSIENT", t.importTransient, d.importTransient);
  num("VUGPU_VK_ONE_QUEUE_BYTES", t.oneQueueBytes, d.oneQueueBytes);
  flag("VUGPU_VK_CHAIN_ONE_QUEUE", t.chainOneQueue, d.chainOneQueue);
  flag("VUGPU_VK_FILL_EACH_PANEL", t.fillEachPanel, d.fillEachPanel);
  flag("VUGPU_VK_NO_REPLAY", t.noReplay, d.noReplay);
  flag("VUGPU_VK_NO_RESIDENT", t.noResident, d.noResident);
  num("VUGPU_VK_RESIDENT_SPAN", t.residentSpan, d.residentSpan);
  flag("VUGPU_VK_RESIDENT_CHECK", t.residentCheck, d.residentCheck);
  num("VUGPU_VK_SPIN_US", t.spinUs, d.spinUs);
  return s;
}

}  // namespace vugpu::vk
