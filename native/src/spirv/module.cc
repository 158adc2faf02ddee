// Word-stream framing and operand parsing for the SPIR-V front end.
#include <spirv-tools/libspirv.h>

#include <cstring>

#include "module.h"

namespace vugpu::spirv::detail {

std::string_view Module::str(size_t i, size_t k, size_t* next) const {
  const Inst& in = insts[i];
  if (k >= in.wc) {
    if (next) *next = in.wc;
    return {};
  }
  const char* base = reinterpret_cast<const char*>(w + in.off + k);
  size_t maxBytes = size_t(in.wc - k) * 4;
  const void* nul = memchr(base, 0, maxBytes);
  if (!nul) {
    if (next) *next = in.wc;
    return {};
  }
  size_t len = static_cast<const char*>(nul) - base;
  if (next) *next = k + len / 4 + 1;
  return {base, len};
}

Failure parseShape(const uint32_t* words, size_t count, const Limits& lim, Module* m) {
  if (!words || count < 5 || count > lim.maxModuleBytes / 4)
    return {R_MODULE_SIZE, "module is " + std::to_string(count * 4) + " bytes; the device takes 20 to " +
                               std::to_string(lim.maxModuleBytes / 4 * 4)};
  if (words[0] != kMagic) {
    if (__builtin_bswap32(words[0]) == kMagic)
      return {R_INVALID, "big-endian SPIR-V is not supported"};
    return {R_INVALID, "not a SPIR-V module (bad magic number)"};
  }
  uint32_t v = words[1];
  if ((v & 0xFF0000FFu) != 0 || ((v >> 16) & 0xFF) != 1 || ((v >> 8) & 0xFF) > 5)
    return {R_INVALID, "SPIR-V version word 0x" + [&] {
              char b[16];
              snprintf(b, sizeof b, "%08x", v);
              return std::string(b);
            }() + " is not 1.0 to 1.5"};
  if (words[3] == 0 || words[3] > kMaxInputBound)
    return {R_INVALID, "id bound " + std::to_string(words[3]) + " is 0 or over " +
                           std::to_string(kMaxInputBound)};
  if (words[4] != 0) return {R_INVALID, "header schema word is not 0"};
  m->w = words;
  m->n = count;
  m->version = v;
  m->bound = words[3];
  m->insts.clear();
  m->insts.reserve(count / 3);
  size_t off = 5;
  while (off < count) {
    uint32_t first = words[off];
    uint32_t wc = first >> 16;
    if (wc == 0)
      return {R_INVALID, "instruction at word " + std::to_string(off) + " has word count 0"};
    if (wc > count - off)
      return {R_INVALID, "instruction at word " + std::to_string(off) + " runs past the end"};
    m->insts.push_back({uint32_t(off), uint16_t(wc), uint16_t(first & 0xFFFF)});
    off += wc;
  }
  if (m->insts.empty()) return {R_INVALID, "module has no instructions"};
  return {};
}

namespace {

struct ParseState {
  Operands* out;
  size_t index = 0;
  size_t expected = 0;
};

spv_result_t OnHeader(void*, spv_endianness_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t) {
  return SPV_SUCCESS;
}

spv_result_t OnInst(void* user, const spv_parsed_instruction_t* pi) {
  auto* st = static_cast<ParseState*>(user);
  if (st->index >= st->expected) return SPV_ERROR_INVALID_BINARY;
  Operands* o = st->out;
  o->resultId[st->index] = pi->result_id;
  o->typeId[st->index] = pi->type_id;
  if (pi->result_id > o->maxId) o->maxId = pi->result_id;
  for (uint16_t k = 0; k < pi->num_operands; ++k) {
    const spv_parsed_operand_t& op = pi->operands[k];
    if (op.type == SPV_OPERAND_TYPE_ID && op.num_words == 1 && op.offset < pi->num_words)
      o->ids.push_back(pi->words[op.offset]);
  }
  ++st->index;
  o->first[st->index] = uint32_t(o->ids.size());
  return SPV_SUCCESS;
}

struct ContextHolder {
  spv_context ctx = spvContextCreate(SPV_ENV_VULKAN_1_2);
  ~ContextHolder() { spvContextDestroy(ctx); }
};

}  // namespace

spv_context ThreadContext() {
  // One context per thread: contexts are cheap to keep, not documented as shareable.
  thread_local ContextHolder holder;
  return holder.ctx;
}

bool parseOperands(const Module& m, Operands* out) {
  size_t ni = m.insts.size();
  out->resultId.assign(ni, 0);
  out->typeId.assign(ni, 0);
  out->first.assign(ni + 1, 0);
  out->ids.clear();
  out->ids.reserve(m.n);
  out->maxId = 0;
  ParseState st{out, 0, ni};
  spv_diagnostic diag = nullptr;
  spv_result_t r = spvBinaryParse(ThreadContext(), &st, m.w, m.n, OnHeader, OnInst, &diag);
  if (diag) spvDiagnosticDestroy(diag);
  return r == SPV_SUCCESS && st.index == ni;
}

std::string validate(const uint32_t* words, size_t count) {
  spv_const_binary_t bin{words, count};
  spv_validator_options opts = spvValidatorOptionsCreate();
  // LocalSizeId is core in Vulkan 1.3 (maintenance4); both program devices have it.
  spvValidatorOptionsSetAllowLocalSizeId(opts, true);
  spv_diagnostic diag = nullptr;
  spv_result_t r = spvValidateWithOptions(ThreadContext(), opts, &bin, &diag);
  spvValidatorOptionsDestroy(opts);
  std::string msg;
  if (r != SPV_SUCCESS) {
    msg = diag && diag->error ? diag->error : "validation failed";
    // Keep the first line, bounded: it is logged and returned to JS.
    size_t nl = msg.find('\n');
    if (nl != std::string::npos) msg.resize(nl);
    if (msg.size() > 400) msg.resize(400);
    if (msg.empty()) msg = "validation failed";
  }
  if (diag) spvDiagnosticDestroy(diag);
  return msg;
}

}  // namespace vugpu::spirv::detail
