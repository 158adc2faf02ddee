// The Vulkan backend's tuning knobs: the VUGPU_VK_* environment variables, parsed once into one
// struct when a device is opened (vulkanOpen), logged there when any is set, and read from that
// struct by the compile and launch paths, never from the environment (a launch does not pay for
// getenv, and every launch of a device sees the same knobs). Most exist for A/B measurement and
// for tests that force a path on lavapipe; each is described below, with why its default is what
// it is (docs/architecture.md, "Engine backends", for the whole). vulkanReadTuning() parses
// them again for tests and benchmarks that change one between launches; the knobs read at open
// (memory path, queues) then keep the open device's values until the next vulkanOpen.
#pragma once
#include <cstdint>
#include <string>

namespace vugpu::vk {

// Hard caps: a knob may lower them, never raise them.
constexpr uint32_t kMaxPanels = 16;   // panels per launch (per-panel command buffers)
constexpr uint32_t kMaxKSlices = 8;   // slices of k in a launch's first panel
constexpr uint32_t kMaxCpuWays = 8;   // a CPU device's ways (one Vulkan instance each)

struct Tuning {
  // ---- read when a device is opened (OpenContext, WayContext) ----
  enum class Memory : uint8_t { Auto, Import, Device };
  // VUGPU_VK_MEMORY=import|device: the memory path regardless of the device type (measurement;
  // tests force `device` on lavapipe).
  Memory memory = Memory::Auto;
  // VUGPU_VK_CMD_QUERY_RESET=1: timestamp queries reset in the command buffer even where the
  // host can reset them (A/B measurement).
  bool cmdQueryReset = false;
  // VUGPU_VK_COMPUTE_QUEUES=n: at most n compute queues, so at most n ways on a GPU (1 = every
  // VM on one queue: A/B measurement). 0: as many as the family has (Context::kMaxWayQueues).
  uint32_t computeQueues = 0;
  // VUGPU_VK_CPU_WAYS=n: ways (VMs) that get a device of their own, CPU device or GPU (1 = every
  // VM on the one device: A/B measurement).
  uint32_t cpuWays = kMaxCpuWays;

  // ---- compile ----
  // VUGPU_VK_WARMUP=0: no warm-up dispatch on a CPU device (warmup.cc). Mesa's own
  // MESA_SHADER_CACHE_DISABLE turns it off too: the warm-up hands its code on through that cache.
  bool warmUp = true;
  bool shaderCacheOff = false;

  // ---- launch: the staging plan (plan.cc) ----
  // Panels per launch (VUGPU_VK_MAX_PANELS, at most kMaxPanels). Each panel boundary costs a GPU
  // a partly idle wave; more panels only shorten the last panel's write-back. With the first
  // panel's k slices 4 measured best at large GEMMs on a GPU (docs/results.md, "panels").
  uint32_t maxPanels = 4;
  // A panel streams at least panelBytes (VUGPU_VK_PANEL_BYTES) and has at least panelWorkgroups
  // workgroups (VUGPU_VK_PANEL_WORKGROUPS): enough to fill a large GPU's SMs about once; fewer
  // and more both measured slower (docs/results.md). Tests lower both to make panels of small
  // launches on lavapipe.
  uint64_t panelBytes = 8ull << 20;
  uint64_t panelWorkgroups = 256;
  // VUGPU_VK_PANEL_PAIR=0: a launch too small for panels stays one panel instead of two of half
  // the panel size (PanelCount).
  bool panelPair = true;
  // Slices of k in the first panel (VUGPU_VK_K_SLICES, at most kMaxKSlices; 1 = none).
  uint32_t kSlices = kMaxKSlices;
  // VUGPU_VK_K_SLAB_BYTES: the least slab of a streamed operand; named, it also wins over a panel
  // pair's two slices (kSlabNamed). 0: by the plan (kKSlabBytes, kOnePanelSlabBytes in plan.cc).
  uint64_t kSlabBytes = 0;
  bool kSlabNamed = false;
  // VUGPU_VK_UPLOAD_ALL=1: overwritten bindings are uploaded, not zero-filled (tests, benchmarks).
  bool uploadAll = false;
  // VUGPU_VK_IMPORT_TRANSIENT=1: a window of one launch is imported, not bounced (measurement).
  bool importTransient = false;

  // ---- launch: record and submit (record.cc, submit.cc) ----
  // Staged launches moving at most this much go on the compute queue in one command buffer
  // (VUGPU_VK_ONE_QUEUE_BYTES) unless they stream an operand: the two queue paths without a
  // stream measured within noise of each other at that size (docs/results.md).
  uint64_t oneQueueBytes = 32ull << 20;
  // VUGPU_VK_CHAIN_ONE_QUEUE=1: a one-panel staged launch takes the copy-queue chain even on a
  // device without copy queues (tests: lavapipe has one queue).
  bool chainOneQueue = false;
  // VUGPU_VK_FILL_EACH_PANEL=1: zero fills before each panel instead of all before the first
  // (measurement).
  bool fillEachPanel = false;
  // VUGPU_VK_NO_REPLAY=1: every launch records its command buffers (A/B measurement).
  bool noReplay = false;
  // VUGPU_VK_NO_RESIDENT=1: DEVICE_CACHED bindings are staged per launch like the others
  // (resident.cc; A/B measurement).
  bool noResident = false;
  // VUGPU_VK_RESIDENT_SPAN: VRAM bytes per mirror (a power of two, at least 64 KiB); a binding
  // across two mirrors is staged. Large, so that few bindings straddle (tests make it small).
  uint64_t residentSpan = 1ull << 30;
  // VUGPU_VK_RESIDENT_CHECK=1: before a launch uses resident pages, copy them back and compare
  // them with the VRAM; a difference is logged (diagnosis: a write the engine did not report).
  bool residentCheck = false;
  // Polling of a GPU's fence before the first blocking wait (VUGPU_VK_SPIN_US): a GPU ends short
  // launches sooner than the driver's sleep wakes up (docs/results.md). Never on a CPU device,
  // whose threads need the cores.
  uint64_t spinUs = 100;
};

// The knobs in force: those parsed at the last vulkanOpen (or ReadTuning); defaults before any.
// Safe from any thread; a launch reads it once (the struct it returns is never freed).
const Tuning& Tune();
// Parses the environment now and makes the result the knobs in force; a malformed value is
// named on stderr and its default used. Called by vulkanOpen before it opens the device.
const Tuning& ReadTuning();
// "VUGPU_VK_X=v ..." for the knobs that differ from their defaults ("" when none).
std::string TuningText(const Tuning& t);

}  // namespace vugpu::vk
