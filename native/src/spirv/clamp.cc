// Buffer index clamp (hw-spec §6.3.1 step 4). lavapipe computes a buffer access's byte offset in
// 32 bits, so an index of 2^32 / stride or more wraps back inside the binding, where robustness
// no longer catches it. Every dynamic index an OpAccessChain / OpInBoundsAccessChain into a
// StorageBuffer or Uniform block applies to an array, matrix or vector element is clamped:
//   %ok = OpULessThan %bool %idx %max ; %c = OpSelect %T %ok %idx %max
// with max = floor(2^28 / stride) in the index's own type. A clamped term is ≥ 2^28 - stride
// bytes, past any binding (≤ 2^27), so the access stays out of bounds (reads 0, writes dropped),
// and ≤ 2^28, so the terms of one chain (≤ 15 levels) cannot reach 2^32. In-range constant
// indices and descriptor-array indices (arrays without ArrayStride) are left alone.
// Cost: 2 instructions per dynamic array/matrix/vector index of a buffer access chain.
#define SPV_ENABLE_UTILITY_CODE
#include <spirv/unified1/spirv.h>

#include <map>
#include <unordered_map>

#include "module.h"

namespace vugpu::spirv::detail {

namespace {

using Words = std::vector<uint32_t>;

void Emit(Words& v, uint32_t op, std::initializer_list<uint32_t> args) {
  v.push_back(uint32_t(1 + args.size()) << 16 | op);
  v.insert(v.end(), args);
}

constexpr uint64_t kClampBytes = uint64_t(1) << 28;

struct MemberLayout {
  uint32_t matrixStride = 0;
  bool rowMajor = false;
};

}  // namespace

Failure clampBufferIndices(std::vector<uint32_t>* words) {
  // The input is the rewrite's validated output: framing cannot fail, but stay defensive.
  Module m;
  m.w = words->data();
  m.n = words->size();
  if (m.n < 5) return {R_INVALID, "module too short to clamp"};
  m.version = m.w[1];
  m.bound = m.w[3];
  for (size_t off = 5; off < m.n;) {
    uint32_t wc = m.w[off] >> 16;
    if (wc == 0 || wc > m.n - off) return {R_INVALID, "module framing broken before clamp"};
    m.insts.push_back({uint32_t(off), uint16_t(wc), uint16_t(m.w[off] & 0xFFFF)});
    off += wc;
  }
  Operands ops;
  if (!parseOperands(m, &ops)) return {R_INVALID, "module could not be parsed for the clamp"};

  std::unordered_map<uint32_t, uint32_t> def;  // id → instruction index
  std::unordered_map<uint32_t, uint32_t> arrayStride;
  std::map<std::pair<uint32_t, uint32_t>, MemberLayout> member;
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> consts;  // (type, value) → OpConstant id
  uint32_t tBool = 0;
  size_t firstFn = m.insts.size();
  for (size_t i = 0; i < m.insts.size(); ++i) {
    uint32_t op = m.insts[i].op;
    if (ops.resultId[i]) def[ops.resultId[i]] = uint32_t(i);
    if (op == SpvOpDecorate && m.at(i, 2) == SpvDecorationArrayStride) {
      arrayStride[m.at(i, 1)] = m.at(i, 3);
    } else if (op == SpvOpMemberDecorate) {
      auto key = std::make_pair(m.at(i, 1), m.at(i, 2));
      if (m.at(i, 3) == SpvDecorationMatrixStride) member[key].matrixStride = m.at(i, 4);
      if (m.at(i, 3) == SpvDecorationRowMajor) member[key].rowMajor = true;
    } else if (op == SpvOpTypeBool) {
      tBool = m.at(i, 1);
    } else if (op == SpvOpConstant && firstFn == m.insts.size()) {
      uint64_t v = m.at(i, 3) | (m.insts[i].wc > 4 ? uint64_t(m.at(i, 4)) << 32 : 0);
      consts.emplace(std::make_pair(m.at(i, 1), v), m.at(i, 2));
    } else if (op == SpvOpFunction && firstFn == m.insts.size()) {
      firstFn = i;
    }
  }
  if (firstFn == m.insts.size()) return {};

  auto opOf = [&](uint32_t id) -> uint32_t {
    auto it = def.find(id);
    return it == def.end() ? 0 : m.insts[it->second].op;
  };
  auto argOf = [&](uint32_t id, size_t k) -> uint32_t {
    auto it = def.find(id);
    return it == def.end() ? 0 : m.at(it->second, k);
  };
  auto typeOf = [&](uint32_t id) -> uint32_t {
    auto it = def.find(id);
    return it == def.end() ? 0 : ops.typeId[it->second];
  };
  // Byte size of a scalar type (the component of a vector or matrix column), 0 if unknown.
  auto scalarBytes = [&](uint32_t t) -> uint32_t {
    uint32_t op = opOf(t);
    if (op == SpvOpTypeInt || op == SpvOpTypeFloat) return argOf(t, 2) / 8;
    return 0;
  };

  uint32_t next = m.bound;
  Words globals;
  std::map<uint32_t, Words> before;                // instruction index → inserted words
  std::unordered_map<uint32_t, Words> replaced;    // instruction index → new words
  auto boolType = [&]() {
    if (!tBool) {
      tBool = next++;
      Emit(globals, SpvOpTypeBool, {tBool});
    }
    return tBool;
  };
  auto constant = [&](uint32_t type, uint64_t value) {
    auto key = std::make_pair(type, value);
    if (auto it = consts.find(key); it != consts.end()) return it->second;
    uint32_t id = next++;
    if (argOf(type, 2) == 64)
      Emit(globals, SpvOpConstant, {type, id, uint32_t(value), uint32_t(value >> 32)});
    else
      Emit(globals, SpvOpConstant, {type, id, uint32_t(value)});
    consts.emplace(key, id);
    return id;
  };

  for (size_t i = firstFn; i < m.insts.size(); ++i) {
    uint32_t op = m.insts[i].op;
    if (op != SpvOpAccessChain && op != SpvOpInBoundsAccessChain) continue;
    uint32_t ptrType = typeOf(m.at(i, 3));
    if (opOf(ptrType) != SpvOpTypePointer) continue;
    uint32_t sc = argOf(ptrType, 2);
    if (sc != SpvStorageClassStorageBuffer && sc != SpvStorageClassUniform) continue;
    uint32_t t = argOf(ptrType, 3);
    MemberLayout layout;        // of the struct member the walk last went through
    uint32_t vectorStride = 0;  // component stride of a row-major matrix's column
    Words edited;
    for (size_t k = 4; k < m.insts[i].wc; ++k) {
      uint32_t idx = m.at(i, k);
      uint32_t top = opOf(t);
      uint32_t stride = 0, elem = 0;
      if (top == SpvOpTypeStruct) {
        // Member indices are constants (validated); the member's layout applies below it.
        uint32_t mi = argOf(idx, 3);
        auto it = member.find({t, mi});
        layout = it == member.end() ? MemberLayout{} : it->second;
        vectorStride = 0;
        t = argOf(t, 2 + mi);
        continue;
      }
      if (top == SpvOpTypeArray || top == SpvOpTypeRuntimeArray) {
        elem = argOf(t, 2);
        auto it = arrayStride.find(t);
        stride = it == arrayStride.end() ? 0 : it->second;  // none: an array of descriptors
      } else if (top == SpvOpTypeMatrix) {
        elem = argOf(t, 2);
        uint32_t comp = scalarBytes(argOf(elem, 2));
        stride = layout.rowMajor ? comp : layout.matrixStride;
        vectorStride = layout.rowMajor ? layout.matrixStride : 0;
      } else if (top == SpvOpTypeVector) {
        elem = argOf(t, 2);
        stride = vectorStride ? vectorStride : scalarBytes(elem);
      } else {
        break;  // validated chains only index composites; stop rather than guess
      }
      t = elem;
      if (stride == 0) continue;
      uint32_t it = typeOf(idx);
      if (opOf(it) != SpvOpTypeInt) continue;
      uint32_t width = argOf(it, 2);
      if (width != 32 && width != 64) continue;
      uint64_t max = kClampBytes / stride;
      if (max == 0) max = 1;
      if (opOf(idx) == SpvOpConstant) {
        uint64_t v = argOf(idx, 3) | (width == 64 ? uint64_t(argOf(idx, 4)) << 32 : 0);
        if (v < max) continue;
      }
      if (edited.empty()) edited.assign(m.w + m.insts[i].off, m.w + m.insts[i].off + m.insts[i].wc);
      uint32_t cMax = constant(it, max), ok = next++, c = next++;
      Words& b = before[uint32_t(i)];
      Emit(b, SpvOpULessThan, {boolType(), ok, idx, cMax});
      Emit(b, SpvOpSelect, {it, c, ok, idx, cMax});
      edited[k] = c;
    }
    if (!edited.empty()) replaced[uint32_t(i)] = std::move(edited);
  }
  if (replaced.empty()) return {};
  if (next > kMaxOutputBound) return {R_LOOP_FORM, "too many buffer indices to clamp"};

  Words out;
  out.reserve(m.n + m.n / 4 + globals.size());
  out.insert(out.end(), {kMagic, m.version, m.w[2], next, 0});
  for (size_t i = 0; i < m.insts.size(); ++i) {
    if (i == firstFn) out.insert(out.end(), globals.begin(), globals.end());
    if (auto it = before.find(uint32_t(i)); it != before.end())
      out.insert(out.end(), it->second.begin(), it->second.end());
    if (auto it = replaced.find(uint32_t(i)); it != replaced.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
    } else {
      const Inst& in = m.insts[i];
      out.insert(out.end(), m.w + in.off, m.w + in.off + in.wc);
    }
  }
  *words = std::move(out);
  return {};
}

}  // namespace vugpu::spirv::detail
