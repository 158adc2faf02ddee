// Internal pieces of the SPIR-V front end (program.h is the public contract). A module is hostile
// input: the shape pass bounds every instruction before anything reads an operand, and every
// later pass reads operands only through Module::at(), which returns 0 past an instruction's end.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "program.h"

namespace vugpu::spirv::detail {

constexpr uint32_t kMagic = 0x07230203;
// Ids are bounded well under SPIRV-Tools' own limit (0x3FFFFF) so that the ids the rewrite adds
// always fit; a 1 MiB module defines at most 131,072 ids, so nothing real comes near it.
constexpr uint32_t kMaxInputBound = 1u << 21;
constexpr uint32_t kMaxOutputBound = 0x3FFFFF;

struct Inst {
  uint32_t off;   // word offset in the module
  uint16_t wc;    // word count (≥ 1)
  uint16_t op;
};

struct Failure {
  uint32_t reason = R_OK;
  std::string message;
  bool failed() const { return reason != R_OK; }
};

struct Module {
  const uint32_t* w = nullptr;
  size_t n = 0;
  uint32_t version = 0;
  uint32_t bound = 0;
  std::vector<Inst> insts;

  // Operand word k of instruction i (k = 0 is the opcode word); 0 when the instruction is shorter.
  uint32_t at(size_t i, size_t k) const {
    const Inst& in = insts[i];
    return k < in.wc ? w[in.off + k] : 0;
  }
  // A literal string starting at operand word k; empty and *next = wc when it is not terminated.
  std::string_view str(size_t i, size_t k, size_t* next = nullptr) const;
};

// Size, header and instruction framing (R_MODULE_SIZE / R_INVALID).
Failure parseShape(const uint32_t* words, size_t count, const Limits& lim, Module* m);

// Capability / extension / instruction allow-lists that need no validity (phase A).
Failure checkAllowLists(const Module& m, const Limits& lim);

// SPIRV-Tools validation, Vulkan 1.2 environment (SPIR-V 1.0–1.5). Empty string = valid.
std::string validate(const uint32_t* words, size_t count);

// Per-instruction <id> operands (not the result or result type), from SPIRV-Tools' parser, which
// knows each opcode's operand kinds. Only called on validated modules.
struct Operands {
  std::vector<uint32_t> resultId;   // per instruction, 0 = none
  std::vector<uint32_t> typeId;     // per instruction, 0 = none
  std::vector<uint32_t> first;      // per instruction + 1: range into ids
  std::vector<uint32_t> ids;
  uint32_t maxId = 0;
};
bool parseOperands(const Module& m, Operands* out);

// What the checks learn about the chosen entry point and what the rewrite needs.
struct Block {
  uint32_t label;
  uint32_t first;       // instruction index of OpLabel
  uint32_t term;        // instruction index of the terminator
  uint32_t mergeInst;   // OpLoopMerge / OpSelectionMerge before the terminator, or UINT32_MAX
};
struct Function {
  uint32_t id;
  uint32_t typeId;      // return type
  uint32_t begin, end;  // instruction indices of OpFunction and OpFunctionEnd
  std::vector<Block> blocks;
  std::vector<uint32_t> calls;  // callee function ids, per call site
};

struct Analysis {
  EntryInfo entry;
  uint32_t entryFunction = 0;
  bool vulkanMemoryModel = false;
  uint32_t uintType = 0;        // existing OpTypeInt 32 0, or 0
  uint32_t boolType = 0;        // existing OpTypeBool, or 0
  uint32_t voidType = 0;
  bool hasStorageBufferExt = false;  // OpExtension "SPV_KHR_storage_buffer_storage_class"
  std::vector<Function> functions;
  std::vector<uint32_t> entryPoints;   // instruction index of every OpEntryPoint
};

// Phase C: entry point, interface, limits; fills a. Needs a validated module.
Failure analyze(const Module& m, const Operands& ops, uint32_t entryIndex, const SpecValue* spec,
                size_t nspec, const Limits& lim, Analysis* a);

// Phase D: the loop rewrite. On success *out holds the new module words and *unchecked the
// headers of the small constant loops it left without a check (loopLimit == 0 only).
Failure rewrite(const Module& m, const Operands& ops, const Analysis& a, const Limits& lim,
                std::vector<uint32_t>* out, std::vector<uint32_t>* unchecked);

// Phase E (clamp.cc): clamps dynamic buffer element indices so that lavapipe's 32-bit offsets
// cannot wrap back inside a binding (hw-spec §6.3.1 step 4). Edits *words in place.
Failure clampBufferIndices(std::vector<uint32_t>* words);

}  // namespace vugpu::spirv::detail
