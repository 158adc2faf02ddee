// Contract between the SPIR-V front end (native/src/spirv: check, loop rewrite, validation) and
// the program backends (native/src/vulkan). The front end never sees a device; a backend never
// sees a module that prepare() did not accept. Reason codes are docs/hw-spec.md §6.3.6.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vugpu::spirv {

// BAD_PROGRAM reasons (PFIFO_CHAN_ERR_REASON), hw-spec §6.3.6.
enum Reason : uint32_t {
  R_OK = 0, R_UNSUPPORTED = 1, R_MODULE_SIZE = 2, R_INVALID = 3, R_CAPABILITY = 4,
  R_EXTENSION = 5, R_INSTRUCTION = 6, R_ENTRY_POINT = 7, R_BINDING = 8, R_BINDING_WRITABLE = 9,
  R_PUSH_CONSTANTS = 10, R_WORKGROUP_SIZE = 11, R_SHARED_MEMORY = 12, R_SPEC_CONSTANTS = 13,
  R_GRID = 14, R_BUFFER = 15, R_COMPILE = 16, R_LOOP_FORM = 17,
};

// PROG_FEATURES bits (hw-spec §3.10).
enum Feature : uint32_t {
  F_FLOAT64 = 1u << 0, F_INT64 = 1u << 1, F_FLOAT16 = 1u << 2, F_INT8 = 1u << 3,
  F_INT16 = 1u << 4, F_SUBGROUP = 1u << 5, F_INT64_ATOMICS = 1u << 6,
};

struct Limits {
  uint32_t maxModuleBytes = 1u << 20;
  uint32_t maxBindings = 16;
  uint32_t maxPushBytes = 128;
  uint32_t maxSpecConstants = 64;
  uint32_t maxWgInvocations = 1024;
  uint32_t maxWgSize[3] = {1024, 1024, 64};
  uint32_t maxSharedBytes = 32768;   // Workgroup memory the guest may use
  uint32_t features = 0;             // Feature bits the device supports
  uint32_t loopLimit = 0;            // back-edges per subgroup per launch; 0 = no counting
  // Benchmark switch (bench/rewrite-cost.ts; the engine leaves it 0): load the cancel word at the
  // start of each iteration, in the loop header, and test it at the back-edge, so a GPU's L2
  // round trip overlaps the body instead of stalling the branch. Stops within one more iteration.
  uint32_t cancelLoadEarly = 0;
  // Benchmark switch (bench/rewrite-cost.ts; the engine leaves it 0), to tell the rewrite's costs
  // apart: bit 0 leaves out the buffer index clamps, bit 1 the loop rewrite (clamps only).
  uint32_t benchParts = 0;
  // Checked back-edges of an invocation between two loads of the cancel word (rounded down to a
  // power of two, at most 1024); 0 = the default, 64 (rewrite.cc); 1 = every back-edge
  // (benchmarks).
  uint32_t cancelEvery = 0;
  uint32_t subgroupSize = 8;
};

struct SpecValue { uint32_t id; uint32_t value; };

struct BindingUse {
  uint32_t binding;   // descriptor set 0, this binding
  bool writable;      // false when the variable (or every member of its block) is NonWritable
};

struct EntryInfo {
  std::string name;                 // OpEntryPoint name (what vkCreateComputePipelines needs)
  uint32_t wg[3] = {1, 1, 1};       // workgroup size after specialization
  uint32_t sharedBytes = 0;         // guest Workgroup memory after specialization
  uint32_t pushBytes = 0;           // push-constant block size (0 = none)
  std::vector<BindingUse> bindings; // set 0 bindings the entry point's interface may use
};

// The control block the rewrite adds (descriptor set 1, binding 0, a storage buffer):
//   struct { uint cancel; uint status; }
// The host sets cancel != 0 to stop the launch; the program sets status before it returns
// early: STATUS_CANCELLED when it left a loop because of the cancel word, STATUS_LOOP_LIMIT
// when it reached Limits::loopLimit.
constexpr uint32_t CONTROL_SET = 1, CONTROL_BINDING = 0;
constexpr uint32_t STATUS_CANCELLED = 1, STATUS_LOOP_LIMIT = 2;

struct Prepared {
  uint32_t reason = R_OK;           // R_OK, or why the module is refused
  std::string message;              // one readable sentence for logs when refused
  EntryInfo entry;
  std::vector<uint32_t> words;      // the rewritten, re-validated module (empty when refused)
  // Loop headers (label ids) left without a cancel check: small constant trip counts (the
  // rewrite's comment in native/src/spirv/rewrite.cc).
  std::vector<uint32_t> uncheckedLoops;
};

// Check (validator + capability/extension/instruction allow-lists + limits), rewrite every loop
// (cancel word; small constant loops are left alone: uncheckedLoops; with lim.loopLimit > 0 a
// probe of the device's spent loop limiter before each return of the entry point), validate the
// result.
// Thread-safe and never throws: any input gives a Prepared.
Prepared prepare(const uint32_t* words, size_t count, uint32_t entryIndex,
                 const SpecValue* spec, size_t nspec, const Limits& lim);

}  // namespace vugpu::spirv
