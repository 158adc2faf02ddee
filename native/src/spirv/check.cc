// Checks of a guest SPIR-V module (hw-spec §6.3.3): allow-lists before validation (phase A) and
// the interface, limits and entry-point analysis after it (phase C). Hostile input: no recursion,
// every operand read is bounds-checked, memory is bounded by the module's size and id count.
#define SPV_ENABLE_UTILITY_CODE
#include <spirv/unified1/spirv.h>

#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include "module.h"

namespace vugpu::spirv::detail {

namespace {

constexpr uint64_t kSat = uint64_t(1) << 40;  // sizes saturate here: far over every limit
// Private + Function memory per invocation: not a Vulkan limit, but a huge local array becomes a
// huge per-lane allocation (scratch) inside the driver; real compute code stays far below.
constexpr uint64_t kMaxPrivateBytes = 64 * 1024;

uint64_t SatAdd(uint64_t a, uint64_t b) { return std::min(kSat, a + b); }
uint64_t SatMul(uint64_t a, uint64_t b) {
  if (a == 0 || b == 0) return 0;
  if (a >= kSat || b >= kSat || a > kSat / b) return kSat;
  return std::min(kSat, a * b);
}
uint64_t RoundUp(uint64_t v, uint64_t a) { return a <= 1 ? v : std::min(kSat, (v + a - 1) / a * a); }

std::string Num(uint64_t v) { return std::to_string(v); }
std::string Id(uint32_t id) { return "%" + std::to_string(id); }

const char* CapName(uint32_t c) {
  switch (c) {
    case SpvCapabilityMatrix: return "Matrix";
    case SpvCapabilityShader: return "Shader";
    case SpvCapabilityAddresses: return "Addresses";
    case SpvCapabilityLinkage: return "Linkage";
    case SpvCapabilityKernel: return "Kernel";
    case SpvCapabilityFloat16: return "Float16";
    case SpvCapabilityFloat64: return "Float64";
    case SpvCapabilityInt64: return "Int64";
    case SpvCapabilityInt64Atomics: return "Int64Atomics";
    case SpvCapabilityInt16: return "Int16";
    case SpvCapabilityInt8: return "Int8";
    case SpvCapabilityImage1D: return "Image1D";
    case SpvCapabilitySampled1D: return "Sampled1D";
    case SpvCapabilityImageBuffer: return "ImageBuffer";
    case SpvCapabilitySampledBuffer: return "SampledBuffer";
    case SpvCapabilityStorageImageExtendedFormats: return "StorageImageExtendedFormats";
    case SpvCapabilityGroupNonUniform: return "GroupNonUniform";
    case SpvCapabilityGroupNonUniformVote: return "GroupNonUniformVote";
    case SpvCapabilityGroupNonUniformArithmetic: return "GroupNonUniformArithmetic";
    case SpvCapabilityGroupNonUniformBallot: return "GroupNonUniformBallot";
    case SpvCapabilityGroupNonUniformShuffle: return "GroupNonUniformShuffle";
    case SpvCapabilityGroupNonUniformShuffleRelative: return "GroupNonUniformShuffleRelative";
    case SpvCapabilityGroupNonUniformClustered: return "GroupNonUniformClustered";
    case SpvCapabilityGroupNonUniformQuad: return "GroupNonUniformQuad";
    case SpvCapabilityVariablePointers: return "VariablePointers";
    case SpvCapabilityVariablePointersStorageBuffer: return "VariablePointersStorageBuffer";
    case SpvCapabilityPhysicalStorageBufferAddresses: return "PhysicalStorageBufferAddresses";
    case SpvCapabilityCooperativeMatrixNV: return "CooperativeMatrixNV";
    default: return nullptr;
  }
}

std::string CapText(uint32_t c) {
  const char* n = CapName(c);
  return n ? std::string(n) : "#" + Num(c);
}

// 0 = allowed; otherwise the PROG_FEATURES bit that is missing (or ~0u: never allowed).
uint32_t CapMissing(uint32_t c, uint32_t features) {
  auto need = [&](uint32_t bit) { return (features & bit) ? 0u : bit; };
  switch (c) {
    case SpvCapabilityShader:
    case SpvCapabilityMatrix:
    case SpvCapabilityStorageBuffer8BitAccess:
    case SpvCapabilityUniformAndStorageBuffer8BitAccess:
    case SpvCapabilityStorageBuffer16BitAccess:
    case SpvCapabilityUniformAndStorageBuffer16BitAccess:
    case SpvCapabilityStoragePushConstant8:
    case SpvCapabilityStoragePushConstant16:
    case SpvCapabilityGroupNonUniform:
    case SpvCapabilityVulkanMemoryModel:
    case SpvCapabilityVulkanMemoryModelDeviceScope:
    case SpvCapabilityDenormPreserve:
    case SpvCapabilityDenormFlushToZero:
    case SpvCapabilitySignedZeroInfNanPreserve:
    case SpvCapabilityRoundingModeRTE:
    case SpvCapabilityRoundingModeRTZ:
      return 0;
    case SpvCapabilityFloat64: return need(F_FLOAT64);
    case SpvCapabilityInt64: return need(F_INT64);
    case SpvCapabilityFloat16: return need(F_FLOAT16);
    case SpvCapabilityInt8: return need(F_INT8);
    case SpvCapabilityInt16: return need(F_INT16);
    case SpvCapabilityInt64Atomics: return need(F_INT64_ATOMICS);
    case SpvCapabilityGroupNonUniformVote:
    case SpvCapabilityGroupNonUniformArithmetic:
    case SpvCapabilityGroupNonUniformBallot:
    case SpvCapabilityGroupNonUniformShuffle:
    case SpvCapabilityGroupNonUniformShuffleRelative:
    case SpvCapabilityGroupNonUniformClustered:
      return need(F_SUBGROUP);
    default: return ~0u;
  }
}

bool ExtensionAllowed(std::string_view e) {
  return e == "SPV_KHR_storage_buffer_storage_class" || e == "SPV_KHR_8bit_storage" ||
         e == "SPV_KHR_16bit_storage" || e == "SPV_KHR_vulkan_memory_model" ||
         e == "SPV_KHR_float_controls";
}

bool StorageClassAllowed(uint32_t sc) {
  switch (sc) {
    case SpvStorageClassFunction:
    case SpvStorageClassPrivate:
    case SpvStorageClassWorkgroup:
    case SpvStorageClassStorageBuffer:
    case SpvStorageClassUniform:
    case SpvStorageClassPushConstant:
    case SpvStorageClassInput:
      return true;
    default: return false;
  }
}

const char* StorageClassName(uint32_t sc) {
  switch (sc) {
    case SpvStorageClassUniformConstant: return "UniformConstant";
    case SpvStorageClassOutput: return "Output";
    case SpvStorageClassCrossWorkgroup: return "CrossWorkgroup";
    case SpvStorageClassGeneric: return "Generic";
    case SpvStorageClassAtomicCounter: return "AtomicCounter";
    case SpvStorageClassImage: return "Image";
    case SpvStorageClassPhysicalStorageBuffer: return "PhysicalStorageBuffer";
    default: return "?";
  }
}

// Opcodes that need only Shader (so the capability list does not already exclude them) or that
// would reach memory outside the bindings: images and samplers, pointer casts and arithmetic,
// and decoration groups (which would hide decorations from the interface analysis).
const char* DeniedOpcode(uint32_t op) {
  if (op >= SpvOpSampledImage && op <= SpvOpImageQuerySamples) return "image instruction";
  if (op >= SpvOpImageSparseSampleImplicitLod && op <= SpvOpImageSparseRead)
    return "sparse image instruction";
  switch (op) {
    case SpvOpTypeImage: return "OpTypeImage";
    case SpvOpTypeSampler: return "OpTypeSampler";
    case SpvOpTypeSampledImage: return "OpTypeSampledImage";
    case SpvOpTypeOpaque: return "OpTypeOpaque";
    case SpvOpTypeEvent:
    case SpvOpTypeDeviceEvent:
    case SpvOpTypeReserveId:
    case SpvOpTypeQueue:
    case SpvOpTypePipe:
    case SpvOpTypePipeStorage:
    case SpvOpTypeNamedBarrier: return "kernel type";
    case SpvOpTypeForwardPointer: return "OpTypeForwardPointer";
    case SpvOpConstantSampler: return "OpConstantSampler";
    case SpvOpImageTexelPointer: return "OpImageTexelPointer";
    case SpvOpPtrAccessChain: return "OpPtrAccessChain";
    case SpvOpInBoundsPtrAccessChain: return "OpInBoundsPtrAccessChain";
    case SpvOpGenericPtrMemSemantics: return "OpGenericPtrMemSemantics";
    case SpvOpCopyMemorySized: return "OpCopyMemorySized";
    case SpvOpConvertPtrToU: return "OpConvertPtrToU";
    case SpvOpConvertUToPtr: return "OpConvertUToPtr";
    case SpvOpPtrCastToGeneric:
    case SpvOpGenericCastToPtr:
    case SpvOpGenericCastToPtrExplicit: return "generic pointer cast";
    case SpvOpPtrEqual:
    case SpvOpPtrNotEqual:
    case SpvOpPtrDiff: return "pointer comparison";
    case SpvOpDecorationGroup:
    case SpvOpGroupDecorate:
    case SpvOpGroupMemberDecorate: return "decoration group";
    case SpvOpImageSampleFootprintNV: return "image instruction";
    default: return nullptr;
  }
}

bool BuiltInAllowed(uint32_t b) {
  switch (b) {
    case SpvBuiltInNumWorkgroups:
    case SpvBuiltInWorkgroupSize:
    case SpvBuiltInWorkgroupId:
    case SpvBuiltInLocalInvocationId:
    case SpvBuiltInGlobalInvocationId:
    case SpvBuiltInLocalInvocationIndex:
    case SpvBuiltInSubgroupSize:
    case SpvBuiltInNumSubgroups:
    case SpvBuiltInSubgroupId:
    case SpvBuiltInSubgroupLocalInvocationId:
    case SpvBuiltInSubgroupEqMask:
    case SpvBuiltInSubgroupGeMask:
    case SpvBuiltInSubgroupGtMask:
    case SpvBuiltInSubgroupLeMask:
    case SpvBuiltInSubgroupLtMask:
      return true;
    default: return false;
  }
}

bool IsTerminator(uint32_t op) {
  switch (op) {
    case SpvOpBranch:
    case SpvOpBranchConditional:
    case SpvOpSwitch:
    case SpvOpKill:
    case SpvOpReturn:
    case SpvOpReturnValue:
    case SpvOpUnreachable:
    case SpvOpTerminateInvocation:
      return true;
    default: return false;
  }
}

struct Deco {
  int64_t set = -1, binding = -1, builtIn = -1, specId = -1, arrayStride = -1;
  bool block = false, bufferBlock = false, nonWritable = false;
};
struct MemberDeco {
  int64_t offset = -1, matrixStride = -1, builtIn = -1;
  bool rowMajor = false, nonWritable = false;
};
struct Natural {
  uint64_t size = 0, align = 1;
  bool known = false;
};
struct ConstVal {
  uint64_t v;
  uint32_t width;  // bits; 1 for bool
};

uint64_t Mask(uint64_t v, uint32_t w) { return w >= 64 ? v : v & ((uint64_t(1) << w) - 1); }
int64_t Sext(uint64_t v, uint32_t w) {
  if (w >= 64 || w == 0) return int64_t(v);
  return int64_t(v << (64 - w)) >> (64 - w);
}

// Everything the analysis derives from the global section and the function bodies.
class Analyzer {
 public:
  Analyzer(const Module& m, const Operands& ops, const Limits& lim) : m_(m), ops_(ops), lim_(lim) {}

  Failure run(uint32_t entryIndex, const SpecValue* spec, size_t nspec, Analysis* a);

 private:
  const Module& m_;
  const Operands& ops_;
  const Limits& lim_;
  std::vector<uint32_t> def_;   // id → defining instruction index (UINT32_MAX: none)
  std::unordered_map<uint32_t, Deco> deco_;
  std::unordered_map<uint64_t, MemberDeco> mdeco_;
  std::unordered_map<uint32_t, uint32_t> spec_;   // SpecId → value
  std::unordered_map<uint32_t, ConstVal> consts_;
  std::unordered_map<uint32_t, Natural> natural_;
  // explicitSize memo: (type, matrix stride, row major) → size (UINT64_MAX: cannot size). Without
  // it a struct of two members of a struct of two members… would take exponential time.
  mutable std::unordered_map<uint64_t, uint64_t> explicitMemo_;
  std::unordered_map<uint32_t, uint32_t> funcIndex_;
  std::vector<uint8_t> isGlobalVar_;
  size_t firstFunction_ = 0;

  uint32_t defOp(uint32_t id) const {
    if (id >= def_.size() || def_[id] == UINT32_MAX) return 0;
    return m_.insts[def_[id]].op;
  }
  uint32_t defAt(uint32_t id, size_t k) const {
    if (id >= def_.size() || def_[id] == UINT32_MAX) return 0;
    return m_.at(def_[id], k);
  }
  const Deco* deco(uint32_t id) const {
    auto it = deco_.find(id);
    return it == deco_.end() ? nullptr : &it->second;
  }
  const MemberDeco* mdeco(uint32_t st, uint32_t member) const {
    auto it = mdeco_.find(uint64_t(st) << 32 | member);
    return it == mdeco_.end() ? nullptr : &it->second;
  }
  bool constInt(uint32_t id, uint64_t* v) const {
    auto it = consts_.find(id);
    if (it == consts_.end()) return false;
    *v = it->second.v;
    return true;
  }
  uint32_t intWidth(uint32_t type) const {
    uint32_t op = defOp(type);
    if (op == SpvOpTypeBool) return 1;
    if (op == SpvOpTypeInt) {
      uint32_t w = defAt(type, 2);
      return (w >= 1 && w <= 64) ? w : 0;
    }
    return 0;
  }
  void evalConstant(size_t i);
  void computeNatural(size_t i);
  bool explicitSize(uint32_t type, int64_t matrixStride, bool rowMajor, int depth, uint64_t* out) const;
  bool explicitSizeUncached(uint32_t type, int64_t matrixStride, bool rowMajor, int depth,
                            uint64_t* out) const;
  Failure parseFunctions(Analysis* a);
};

void Analyzer::evalConstant(size_t i) {
  uint32_t op = m_.insts[i].op;
  uint32_t type = m_.at(i, 1), id = m_.at(i, 2);
  uint32_t w = intWidth(type);
  if (w == 0) return;
  auto specOverride = [&](uint64_t* v) {
    const Deco* d = deco(id);
    if (!d || d->specId < 0) return;
    auto it = spec_.find(uint32_t(d->specId));
    if (it != spec_.end()) *v = it->second;
  };
  uint64_t v = 0;
  switch (op) {
    case SpvOpConstantTrue: v = 1; break;
    case SpvOpConstantFalse: v = 0; break;
    case SpvOpConstantNull: v = 0; break;
    case SpvOpSpecConstantTrue:
    case SpvOpSpecConstantFalse:
      v = op == SpvOpSpecConstantTrue;
      specOverride(&v);
      v = v != 0;
      break;
    case SpvOpConstant:
    case SpvOpSpecConstant:
      if (w == 1) return;
      v = m_.at(i, 3);
      if (w > 32) v |= uint64_t(m_.at(i, 4)) << 32;
      if (op == SpvOpSpecConstant) specOverride(&v);
      break;
    case SpvOpSpecConstantOp: {
      uint32_t sop = m_.at(i, 3);
      uint64_t a = 0, b = 0, c = 0;
      uint32_t wa = 0;
      auto operand = [&](size_t k, uint64_t* out) {
        uint32_t oid = m_.at(i, k);
        auto it = consts_.find(oid);
        if (it == consts_.end()) return false;
        *out = it->second.v;
        if (k == 4) wa = it->second.width;
        return true;
      };
      switch (sop) {
        case SpvOpCompositeExtract: {
          // Walk constant composites by literal indices.
          uint32_t cur = m_.at(i, 4);
          size_t k = 5;
          for (; k < m_.insts[i].wc; ++k) {
            uint32_t cop = defOp(cur);
            if (cop == SpvOpConstantNull) {
              v = 0;
              consts_[id] = {0, w};
              return;
            }
            if (cop != SpvOpConstantComposite && cop != SpvOpSpecConstantComposite) return;
            uint32_t idx = m_.at(i, k);
            uint32_t wc = m_.insts[def_[cur]].wc;
            if (uint64_t(idx) + 3 >= wc) return;
            cur = defAt(cur, 3 + idx);
          }
          if (k == 5 || !constInt(cur, &v)) return;
          break;
        }
        case SpvOpUConvert:
        case SpvOpSConvert:
        case SpvOpSNegate:
        case SpvOpNot:
        case SpvOpLogicalNot:
          if (!operand(4, &a)) return;
          if (sop == SpvOpUConvert) v = a;
          else if (sop == SpvOpSConvert) v = uint64_t(Sext(a, wa));
          else if (sop == SpvOpSNegate) v = uint64_t(-int64_t(a));
          else if (sop == SpvOpNot) v = ~a;
          else v = !a;
          break;
        case SpvOpSelect:
          if (!operand(4, &c) || !operand(5, &a) || !operand(6, &b)) return;
          v = c ? a : b;
          break;
        default: {
          if (!operand(4, &a) || !operand(5, &b)) return;
          int64_t sa = Sext(a, wa), sb = Sext(b, wa);
          switch (sop) {
            case SpvOpIAdd: v = a + b; break;
            case SpvOpISub: v = a - b; break;
            case SpvOpIMul: v = a * b; break;
            case SpvOpUDiv: if (b == 0) return; v = a / b; break;
            case SpvOpUMod: if (b == 0) return; v = a % b; break;
            case SpvOpSDiv:
            case SpvOpSRem:
            case SpvOpSMod:
              if (sb == 0 || (sb == -1 && sa == INT64_MIN)) return;
              if (sop == SpvOpSDiv) v = uint64_t(sa / sb);
              else if (sop == SpvOpSRem) v = uint64_t(sa % sb);
              else {
                int64_t r = sa % sb;
                if (r != 0 && ((r < 0) != (sb < 0))) r += sb;
                v = uint64_t(r);
              }
              break;
            case SpvOpShiftRightLogical: if (b >= wa) return; v = a >> b; break;
            case SpvOpShiftRightArithmetic: if (b >= wa) return; v = uint64_t(sa >> b); break;
            case SpvOpShiftLeftLogical: if (b >= wa) return; v = a << b; break;
            case SpvOpBitwiseOr: v = a | b; break;
            case SpvOpBitwiseXor: v = a ^ b; break;
            case SpvOpBitwiseAnd: v = a & b; break;
            case SpvOpIEqual: case SpvOpLogicalEqual: v = a == b; break;
            case SpvOpINotEqual: case SpvOpLogicalNotEqual: v = a != b; break;
            case SpvOpLogicalOr: v = a || b; break;
            case SpvOpLogicalAnd: v = a && b; break;
            case SpvOpUGreaterThan: v = a > b; break;
            case SpvOpSGreaterThan: v = sa > sb; break;
            case SpvOpUGreaterThanEqual: v = a >= b; break;
            case SpvOpSGreaterThanEqual: v = sa >= sb; break;
            case SpvOpULessThan: v = a < b; break;
            case SpvOpSLessThan: v = sa < sb; break;
            case SpvOpULessThanEqual: v = a <= b; break;
            case SpvOpSLessThanEqual: v = sa <= sb; break;
            default: return;  // not evaluable: sizes that need it are refused
          }
        }
      }
      break;
    }
    default: return;
  }
  consts_[id] = {Mask(v, w), w};
}

// Natural (std430-like) size and alignment of a type, for Workgroup/Private/Function memory.
// Types only refer to earlier ids, so one forward pass computes all of them without recursion.
void Analyzer::computeNatural(size_t i) {
  uint32_t op = m_.insts[i].op;
  uint32_t id = m_.at(i, 1);
  Natural n;
  auto get = [&](uint32_t t) {
    auto it = natural_.find(t);
    return it == natural_.end() ? Natural{} : it->second;
  };
  switch (op) {
    case SpvOpTypeBool: n = {4, 4, true}; break;
    case SpvOpTypeInt:
    case SpvOpTypeFloat: {
      uint64_t b = std::max<uint32_t>(1, m_.at(i, 2) / 8);
      n = {b, b, true};
      break;
    }
    case SpvOpTypeVector: {
      Natural c = get(m_.at(i, 2));
      uint64_t cnt = m_.at(i, 3);
      n = {SatMul(c.size, cnt), SatMul(c.size, cnt <= 2 ? cnt : 4), c.known};
      break;
    }
    case SpvOpTypeMatrix: {
      Natural c = get(m_.at(i, 2));
      n = {SatMul(RoundUp(c.size, c.align), m_.at(i, 3)), c.align, c.known};
      break;
    }
    case SpvOpTypeArray: {
      Natural e = get(m_.at(i, 2));
      uint64_t len = 0;
      bool ok = constInt(m_.at(i, 3), &len);
      n = {ok ? SatMul(RoundUp(e.size, e.align), len) : kSat, e.align, e.known && ok && len > 0};
      break;
    }
    case SpvOpTypeRuntimeArray: {
      Natural e = get(m_.at(i, 2));
      n = {0, e.align, e.known};
      break;
    }
    case SpvOpTypeStruct: {
      uint64_t off = 0, align = 1;
      bool known = true;
      for (size_t k = 2; k < m_.insts[i].wc; ++k) {
        Natural e = get(m_.at(i, k));
        known = known && e.known;
        off = SatAdd(RoundUp(off, e.align), e.size);
        align = std::max(align, e.align);
      }
      n = {RoundUp(off, align), align, known};
      break;
    }
    case SpvOpTypePointer: n = {8, 8, true}; break;
    default: return;
  }
  if (n.align == 0) n.align = 1;
  natural_[id] = n;
}

// Size of a type in an explicitly laid-out block (Offset / ArrayStride / MatrixStride), bytes up
// to the end of its last element: what the push-constant range must cover.
bool Analyzer::explicitSize(uint32_t type, int64_t matrixStride, bool rowMajor, int depth,
                            uint64_t* out) const {
  if (depth > 32) return false;
  uint64_t key = uint64_t(type) << 33 | uint64_t(uint32_t(matrixStride)) << 1 | (rowMajor ? 1 : 0);
  if (auto it = explicitMemo_.find(key); it != explicitMemo_.end()) {
    *out = it->second;
    return it->second != UINT64_MAX;
  }
  bool ok = explicitSizeUncached(type, matrixStride, rowMajor, depth, out);
  explicitMemo_[key] = ok ? *out : UINT64_MAX;
  return ok;
}

bool Analyzer::explicitSizeUncached(uint32_t type, int64_t matrixStride, bool rowMajor, int depth,
                                    uint64_t* out) const {
  switch (defOp(type)) {
    case SpvOpTypeInt:
    case SpvOpTypeFloat: *out = std::max<uint32_t>(1, defAt(type, 2) / 8); return true;
    case SpvOpTypeBool: *out = 4; return true;
    case SpvOpTypeVector: {
      uint64_t c;
      if (!explicitSize(defAt(type, 2), -1, false, depth + 1, &c)) return false;
      *out = SatMul(c, defAt(type, 3));
      return true;
    }
    case SpvOpTypeMatrix: {
      uint32_t col = defAt(type, 2), cols = defAt(type, 3);
      uint64_t rows = defAt(col, 3), comp;
      if (!explicitSize(defAt(col, 2), -1, false, depth + 1, &comp)) return false;
      if (matrixStride < 0) return false;
      uint64_t vecs = rowMajor ? rows : cols, per = rowMajor ? cols : rows;
      *out = vecs == 0 ? 0 : SatAdd(SatMul(vecs - 1, uint64_t(matrixStride)), SatMul(per, comp));
      return true;
    }
    case SpvOpTypeArray: {
      uint64_t len, e;
      if (!constInt(defAt(type, 3), &len) || len == 0) return false;
      const Deco* d = deco(type);
      if (!d || d->arrayStride < 0) return false;
      if (!explicitSize(defAt(type, 2), matrixStride, rowMajor, depth + 1, &e)) return false;
      *out = SatAdd(SatMul(len - 1, uint64_t(d->arrayStride)), e);
      return true;
    }
    case SpvOpTypeStruct: {
      uint64_t end = 0;
      size_t wc = m_.insts[def_[type]].wc;
      for (size_t k = 2; k < wc; ++k) {
        const MemberDeco* md = mdeco(type, uint32_t(k - 2));
        if (!md || md->offset < 0) return false;
        uint64_t e;
        if (!explicitSize(defAt(type, k), md->matrixStride, md->rowMajor, depth + 1, &e)) return false;
        end = std::max(end, SatAdd(uint64_t(md->offset), e));
      }
      *out = end;
      return true;
    }
    default: return false;
  }
}

Failure Analyzer::parseFunctions(Analysis* a) {
  Function* f = nullptr;
  Block* b = nullptr;
  for (size_t i = firstFunction_; i < m_.insts.size(); ++i) {
    uint32_t op = m_.insts[i].op;
    if (op == SpvOpFunction) {
      if (f) return {R_INVALID, "nested OpFunction"};
      a->functions.push_back({});
      f = &a->functions.back();
      f->id = m_.at(i, 2);
      f->typeId = m_.at(i, 1);
      f->begin = uint32_t(i);
      funcIndex_[f->id] = uint32_t(a->functions.size() - 1);
      continue;
    }
    if (!f) continue;
    if (op == SpvOpFunctionEnd) {
      if (b) return {R_INVALID, "block not terminated"};
      f->end = uint32_t(i);
      f = nullptr;
      continue;
    }
    if (op == SpvOpLabel) {
      if (b) return {R_INVALID, "block not terminated"};
      f->blocks.push_back({m_.at(i, 1), uint32_t(i), 0, UINT32_MAX});
      b = &f->blocks.back();
      continue;
    }
    if (op == SpvOpFunctionCall) f->calls.push_back(m_.at(i, 3));
    if (b && IsTerminator(op)) {
      b->term = uint32_t(i);
      if (i > b->first + 1) {
        uint32_t prev = m_.insts[i - 1].op;
        if (prev == SpvOpLoopMerge || prev == SpvOpSelectionMerge) b->mergeInst = uint32_t(i - 1);
      }
      b = nullptr;
    }
  }
  if (f) return {R_INVALID, "function not ended"};
  return {};
}

Failure Analyzer::run(uint32_t entryIndex, const SpecValue* spec, size_t nspec, Analysis* a) {
  size_t ni = m_.insts.size();
  def_.assign(size_t(ops_.maxId) + 1, UINT32_MAX);
  isGlobalVar_.assign(size_t(ops_.maxId) + 1, 0);
  firstFunction_ = ni;
  for (size_t i = 0; i < ni; ++i) {
    uint32_t r = ops_.resultId[i];
    if (r && r < def_.size()) def_[r] = uint32_t(i);
    if (m_.insts[i].op == SpvOpFunction && firstFunction_ == ni) firstFunction_ = i;
  }
  for (size_t k = 0; k < nspec; ++k) spec_[spec[k].id] = spec[k].value;

  // Module-level facts, decorations, constants and natural sizes (module order = definition order).
  for (size_t i = 0; i < firstFunction_; ++i) {
    uint32_t op = m_.insts[i].op;
    switch (op) {
      case SpvOpExtension:
        if (m_.str(i, 1) == "SPV_KHR_storage_buffer_storage_class") a->hasStorageBufferExt = true;
        break;
      case SpvOpMemoryModel: a->vulkanMemoryModel = m_.at(i, 2) == SpvMemoryModelVulkan; break;
      case SpvOpEntryPoint: a->entryPoints.push_back(uint32_t(i)); break;
      case SpvOpDecorate: {
        Deco& d = deco_[m_.at(i, 1)];
        uint32_t lit = m_.at(i, 3);
        switch (m_.at(i, 2)) {
          case SpvDecorationDescriptorSet: d.set = lit; break;
          case SpvDecorationBinding: d.binding = lit; break;
          case SpvDecorationBuiltIn: d.builtIn = lit; break;
          case SpvDecorationSpecId: d.specId = lit; break;
          case SpvDecorationArrayStride: d.arrayStride = lit; break;
          case SpvDecorationBlock: d.block = true; break;
          case SpvDecorationBufferBlock: d.bufferBlock = true; break;
          case SpvDecorationNonWritable: d.nonWritable = true; break;
          default: break;
        }
        break;
      }
      case SpvOpMemberDecorate: {
        MemberDeco& d = mdeco_[uint64_t(m_.at(i, 1)) << 32 | m_.at(i, 2)];
        uint32_t lit = m_.at(i, 4);
        switch (m_.at(i, 3)) {
          case SpvDecorationOffset: d.offset = lit; break;
          case SpvDecorationMatrixStride: d.matrixStride = lit; break;
          case SpvDecorationRowMajor: d.rowMajor = true; break;
          case SpvDecorationNonWritable: d.nonWritable = true; break;
          case SpvDecorationBuiltIn: d.builtIn = lit; break;
          default: break;
        }
        break;
      }
      case SpvOpTypeInt:
        if (m_.at(i, 2) == 32 && m_.at(i, 3) == 0) a->uintType = m_.at(i, 1);
        computeNatural(i);
        break;
      case SpvOpTypeBool:
        a->boolType = m_.at(i, 1);
        computeNatural(i);
        break;
      case SpvOpTypeVoid: a->voidType = m_.at(i, 1); break;
      case SpvOpTypeFloat:
      case SpvOpTypeVector:
      case SpvOpTypeMatrix:
      case SpvOpTypeArray:
      case SpvOpTypeRuntimeArray:
      case SpvOpTypeStruct:
      case SpvOpTypePointer:
        computeNatural(i);
        break;
      case SpvOpConstantTrue:
      case SpvOpConstantFalse:
      case SpvOpConstant:
      case SpvOpConstantNull:
      case SpvOpSpecConstantTrue:
      case SpvOpSpecConstantFalse:
      case SpvOpSpecConstant:
      case SpvOpSpecConstantOp:
        evalConstant(i);
        break;
      case SpvOpVariable: {
        uint32_t id = m_.at(i, 2);
        if (id < isGlobalVar_.size()) isGlobalVar_[id] = 1;
        break;
      }
      default: break;
    }
  }

  // The entry point: index among OpEntryPoint (all GLCompute after phase A), in module order.
  if (entryIndex >= a->entryPoints.size())
    return {R_ENTRY_POINT, "entry point " + Num(entryIndex) + " requested; the module has " +
                               Num(a->entryPoints.size()) + " GLCompute entry points"};
  size_t epi = a->entryPoints[entryIndex];
  size_t afterName = 0;
  a->entry.name = std::string(m_.str(epi, 3, &afterName));
  a->entryFunction = m_.at(epi, 2);

  if (Failure f = parseFunctions(a); f.failed()) return f;
  auto fit = funcIndex_.find(a->entryFunction);
  if (fit == funcIndex_.end()) return {R_INVALID, "entry point function not found"};

  // Call graph: no cycles (the validator does not refuse recursion in every version), and the
  // size of the entry point with every call inlined — drivers inline everything, so a tree of
  // calls that doubles at each level would expand exponentially inside the compiler.
  size_t nf = a->functions.size();
  std::vector<std::vector<uint32_t>> callees(nf);
  for (size_t k = 0; k < nf; ++k)
    for (uint32_t c : a->functions[k].calls) {
      auto it = funcIndex_.find(c);
      if (it == funcIndex_.end()) return {R_INVALID, "call to an unknown function"};
      callees[k].push_back(it->second);
    }
  std::vector<uint8_t> color(nf, 0);
  std::vector<uint64_t> inlined(nf, 0);
  std::vector<uint8_t> reachable(nf, 0);
  {
    std::vector<std::pair<uint32_t, uint32_t>> stack;  // (function, next callee)
    for (size_t root = 0; root < nf; ++root) {
      if (color[root]) continue;
      stack.push_back({uint32_t(root), 0});
      color[root] = 1;
      while (!stack.empty()) {
        auto& [fn, next] = stack.back();
        if (next < callees[fn].size()) {
          uint32_t c = callees[fn][next++];
          if (color[c] == 1) return {R_INSTRUCTION, "recursive function call"};
          if (color[c] == 0) {
            color[c] = 1;
            stack.push_back({c, 0});
          }
          continue;
        }
        const Function& F = a->functions[fn];
        uint64_t size = F.end - F.begin + 1;
        for (uint32_t c : callees[fn]) size = SatAdd(size, inlined[c]);
        inlined[fn] = size;
        color[fn] = 2;
        stack.pop_back();
      }
    }
    std::vector<uint32_t> work{fit->second};
    reachable[fit->second] = 1;
    while (!work.empty()) {
      uint32_t fn = work.back();
      work.pop_back();
      for (uint32_t c : callees[fn])
        if (!reachable[c]) reachable[c] = 1, work.push_back(c);
    }
  }
  uint64_t inlineCap = std::max<uint64_t>(lim_.maxModuleBytes / 4, 65536);
  if (inlined[fit->second] > inlineCap)
    return {R_INSTRUCTION, "the entry point expands to " + Num(inlined[fit->second]) +
                               " instructions with its calls inlined (over " + Num(inlineCap) + ")"};

  // Global variables the entry point may use: referenced from its call tree, or listed in its
  // interface (SPIR-V 1.4+ lists them all).
  std::vector<uint8_t> used(isGlobalVar_.size(), 0);
  for (size_t k = afterName; k < m_.insts[epi].wc; ++k) {
    uint32_t id = m_.at(epi, k);
    if (id < used.size()) used[id] = 1;
  }
  uint64_t privateBytes = 0;
  for (size_t k = 0; k < nf; ++k) {
    if (!reachable[k]) continue;
    const Function& F = a->functions[k];
    for (size_t i = F.begin; i <= F.end; ++i) {
      for (uint32_t j = ops_.first[i]; j < ops_.first[i + 1]; ++j) {
        uint32_t id = ops_.ids[j];
        if (id < used.size() && isGlobalVar_[id]) used[id] = 1;
      }
      if (m_.insts[i].op == SpvOpVariable) {
        Natural n = natural_[defAt(m_.at(i, 1), 3)];
        if (!n.known)
          return {R_INSTRUCTION, "function variable " + Id(m_.at(i, 2)) + " has a size the device cannot evaluate"};
        privateBytes = SatAdd(privateBytes, n.size);
      }
    }
  }

  // Workgroup size (before sizes: a spec constant 0 here also makes arrays empty): LocalSize / LocalSizeId of the entry point, overridden by a WorkgroupSize
  // built-in constant; spec constants specialized.
  uint64_t wg[3] = {0, 0, 0};
  bool haveWg = false;
  for (size_t i = 0; i < firstFunction_; ++i) {
    uint32_t op = m_.insts[i].op;
    if ((op == SpvOpExecutionMode || op == SpvOpExecutionModeId) && m_.at(i, 1) == a->entryFunction) {
      uint32_t mode = m_.at(i, 2);
      if (mode == SpvExecutionModeLocalSize) {
        for (int k = 0; k < 3; ++k) wg[k] = m_.at(i, 3 + k);
        haveWg = true;
      } else if (mode == SpvExecutionModeLocalSizeId) {
        for (int k = 0; k < 3; ++k)
          if (!constInt(m_.at(i, 3 + k), &wg[k]))
            return {R_INSTRUCTION, "LocalSizeId operand is not a constant the device can evaluate"};
        haveWg = true;
      }
    }
  }
  for (const auto& [id, d] : deco_) {
    if (d.builtIn != SpvBuiltInWorkgroupSize) continue;
    uint32_t op = defOp(id);
    if (op != SpvOpConstantComposite && op != SpvOpSpecConstantComposite)
      return {R_INSTRUCTION, "WorkgroupSize built-in is not a constant composite"};
    for (int k = 0; k < 3; ++k)
      if (!constInt(defAt(id, 3 + k), &wg[k]))
        return {R_INSTRUCTION, "WorkgroupSize component is not a constant the device can evaluate"};
    haveWg = true;
  }
  if (!haveWg) return {R_WORKGROUP_SIZE, "the entry point has no workgroup size"};
  uint64_t inv = 1;
  for (int k = 0; k < 3; ++k) {
    if (wg[k] == 0 || wg[k] > lim_.maxWgSize[k])
      return {R_WORKGROUP_SIZE, "workgroup size " + Num(wg[0]) + "x" + Num(wg[1]) + "x" + Num(wg[2]) +
                                    " is 0 or over the device's " + Num(lim_.maxWgSize[0]) + "x" +
                                    Num(lim_.maxWgSize[1]) + "x" + Num(lim_.maxWgSize[2])};
    inv *= wg[k];
  }
  if (inv > lim_.maxWgInvocations)
    return {R_WORKGROUP_SIZE, "workgroup of " + Num(inv) + " invocations (device: " +
                                  Num(lim_.maxWgInvocations) + ")"};


  // Every global variable: storage class rules, bindings, push constants, shared memory.
  uint64_t sharedBytes = 0, pushBytes = 0;
  std::unordered_map<uint32_t, bool> bindings;  // binding → writable
  for (size_t i = 0; i < firstFunction_; ++i) {
    if (m_.insts[i].op != SpvOpVariable) continue;
    uint32_t ptrType = m_.at(i, 1), id = m_.at(i, 2), sc = m_.at(i, 3);
    uint32_t pointee = defAt(ptrType, 3);
    const Deco* d = deco(id);
    bool isUsed = id < used.size() && used[id];
    switch (sc) {
      case SpvStorageClassStorageBuffer:
      case SpvStorageClassUniform: {
        uint32_t pop = defOp(pointee);
        if (pop == SpvOpTypeArray || pop == SpvOpTypeRuntimeArray)
          return {R_BINDING, "variable " + Id(id) + " is an array of buffers (one buffer per binding)"};
        const Deco* sd = deco(pointee);
        if (pop != SpvOpTypeStruct || !sd)
          return {R_BINDING, "variable " + Id(id) + " is not a buffer block"};
        if (sc == SpvStorageClassUniform && !sd->bufferBlock)
          return {R_BINDING, "variable " + Id(id) + " is a uniform buffer; the device binds storage buffers only"};
        if (!d || d->set < 0 || d->binding < 0)
          return {R_BINDING, "buffer variable " + Id(id) + " has no DescriptorSet/Binding"};
        if (d->set != 0)
          return {R_BINDING, "buffer variable " + Id(id) + " is in descriptor set " + Num(d->set) + " (only set 0)"};
        if (uint64_t(d->binding) >= lim_.maxBindings)
          return {R_BINDING, "binding " + Num(d->binding) + " is over the device's " + Num(lim_.maxBindings) + " bindings"};
        if (!isUsed) break;
        bool writable = !d->nonWritable;
        if (writable) {
          size_t wc = m_.insts[def_[pointee]].wc;
          bool all = wc > 2;
          for (size_t k = 2; k < wc; ++k) {
            const MemberDeco* md = mdeco(pointee, uint32_t(k - 2));
            if (!md || !md->nonWritable) all = false;
          }
          writable = !all;
        }
        bindings[uint32_t(d->binding)] |= writable;
        break;
      }
      case SpvStorageClassPushConstant: {
        if (!isUsed) break;
        uint64_t size;
        if (!explicitSize(pointee, -1, false, 0, &size))
          return {R_PUSH_CONSTANTS, "push-constant block " + Id(id) + " has a layout the device cannot size"};
        pushBytes = std::max(pushBytes, size);
        break;
      }
      case SpvStorageClassWorkgroup: {
        if (!isUsed) break;
        Natural n = natural_[pointee];
        if (!n.known)
          return {R_INSTRUCTION, "shared variable " + Id(id) + " has a size the device cannot evaluate"};
        sharedBytes = SatAdd(sharedBytes, n.size);
        break;
      }
      case SpvStorageClassPrivate: {
        if (!isUsed) break;
        Natural n = natural_[pointee];
        if (!n.known)
          return {R_INSTRUCTION, "private variable " + Id(id) + " has a size the device cannot evaluate"};
        privateBytes = SatAdd(privateBytes, n.size);
        break;
      }
      case SpvStorageClassInput: {
        bool builtin = d && d->builtIn >= 0 && BuiltInAllowed(uint32_t(d->builtIn));
        if (!builtin && defOp(pointee) == SpvOpTypeStruct) {
          size_t wc = m_.insts[def_[pointee]].wc;
          builtin = wc > 2;
          for (size_t k = 2; k < wc; ++k) {
            const MemberDeco* md = mdeco(pointee, uint32_t(k - 2));
            if (!md || md->builtIn < 0 || !BuiltInAllowed(uint32_t(md->builtIn))) builtin = false;
          }
        }
        if (!builtin)
          return {R_INSTRUCTION, "input variable " + Id(id) + " is not a compute built-in"};
        break;
      }
      default: break;  // Function / others: phase A refused the rest
    }
  }
  if (pushBytes > lim_.maxPushBytes)
    return {R_PUSH_CONSTANTS, "push-constant block is " + Num(pushBytes) + " bytes (device: " +
                                  Num(lim_.maxPushBytes) + ")"};
  if (sharedBytes > lim_.maxSharedBytes)
    return {R_SHARED_MEMORY, "shared variables take " + Num(sharedBytes) + " bytes (device: " +
                                 Num(lim_.maxSharedBytes) + ")"};
  if (privateBytes > kMaxPrivateBytes)
    return {R_INSTRUCTION, "private and function variables take " + Num(privateBytes) +
                               " bytes per invocation (device: " + Num(kMaxPrivateBytes) + ")"};

  for (int k = 0; k < 3; ++k) a->entry.wg[k] = uint32_t(wg[k]);
  a->entry.sharedBytes = uint32_t(sharedBytes);
  a->entry.pushBytes = uint32_t(pushBytes);
  a->entry.bindings.clear();
  for (const auto& [b, w] : bindings) a->entry.bindings.push_back({b, w});
  std::sort(a->entry.bindings.begin(), a->entry.bindings.end(),
            [](const BindingUse& x, const BindingUse& y) { return x.binding < y.binding; });
  return {};
}

}  // namespace

Failure checkAllowLists(const Module& m, const Limits& lim) {
  for (size_t i = 0; i < m.insts.size(); ++i) {
    uint32_t op = m.insts[i].op;
    switch (op) {
      case SpvOpCapability: {
        uint32_t c = m.at(i, 1);
        uint32_t missing = CapMissing(c, lim.features);
        if (missing == ~0u) return {R_CAPABILITY, "capability " + CapText(c) + " is not supported"};
        if (missing)
          return {R_CAPABILITY, "capability " + CapText(c) + " needs a device feature this device lacks"};
        break;
      }
      case SpvOpExtension: {
        std::string_view e = m.str(i, 1);
        if (!ExtensionAllowed(e))
          return {R_EXTENSION, "extension \"" + std::string(e.substr(0, 80)) + "\" is not supported"};
        break;
      }
      case SpvOpExtInstImport: {
        std::string_view e = m.str(i, 2);
        if (e != "GLSL.std.450")
          return {R_EXTENSION, "extended instruction set \"" + std::string(e.substr(0, 80)) + "\" is not supported"};
        break;
      }
      case SpvOpMemoryModel:
        if (m.at(i, 1) != SpvAddressingModelLogical)
          return {R_INSTRUCTION, "addressing model must be Logical"};
        if (m.at(i, 2) != SpvMemoryModelGLSL450 && m.at(i, 2) != SpvMemoryModelVulkan)
          return {R_INSTRUCTION, "memory model must be GLSL450 or Vulkan"};
        break;
      case SpvOpEntryPoint:
        if (m.at(i, 1) != SpvExecutionModelGLCompute)
          return {R_INSTRUCTION, "entry point \"" + std::string(m.str(i, 3).substr(0, 80)) + "\" is not GLCompute"};
        break;
      case SpvOpTypePointer:
        if (!StorageClassAllowed(m.at(i, 2)))
          return {R_INSTRUCTION, std::string("storage class ") + StorageClassName(m.at(i, 2)) + " is not allowed"};
        break;
      case SpvOpVariable:
        if (!StorageClassAllowed(m.at(i, 3)))
          return {R_INSTRUCTION, std::string("storage class ") + StorageClassName(m.at(i, 3)) + " is not allowed"};
        break;
      default:
        if (const char* what = DeniedOpcode(op))
          return {R_INSTRUCTION, std::string(what) + " (opcode " + Num(op) + ") is not allowed"};
        break;
    }
  }
  return {};
}

Failure analyze(const Module& m, const Operands& ops, uint32_t entryIndex, const SpecValue* spec,
                size_t nspec, const Limits& lim, Analysis* a) {
  Analyzer an(m, ops, lim);
  return an.run(entryIndex, spec, nspec, a);
}

}  // namespace vugpu::spirv::detail
