// vugpu::spirv::prepare(): check, rewrite, re-validate (native/include/program.h).
#include <exception>
#include <new>

#include "module.h"

namespace vugpu::spirv {

namespace {

Prepared Refuse(const detail::Failure& f) {
  Prepared p;
  p.reason = f.reason;
  p.message = f.message;
  return p;
}

Prepared PrepareImpl(const uint32_t* input, size_t count, uint32_t entryIndex, const SpecValue* spec,
                     size_t nspec, const Limits& lim) {
  using namespace detail;
  if (nspec > lim.maxSpecConstants)
    return Refuse({R_SPEC_CONSTANTS, std::to_string(nspec) + " specialization constants (device: " +
                                         std::to_string(lim.maxSpecConstants) + ")"});
  if (nspec && !spec) return Refuse({R_SPEC_CONSTANTS, "specialization constants missing"});
  if (!input || count < 5 || count > lim.maxModuleBytes / 4) {
    Module m;
    return Refuse(parseShape(input, count, lim, &m));
  }
  // Work on a private copy: the caller's words may live in memory the guest can still write.
  std::vector<uint32_t> words(input, input + count);
  Module m;
  if (Failure f = parseShape(words.data(), words.size(), lim, &m); f.failed()) return Refuse(f);
  if (Failure f = checkAllowLists(m, lim); f.failed()) return Refuse(f);
  if (std::string v = validate(words.data(), words.size()); !v.empty())
    return Refuse({R_INVALID, "validator: " + v});
  Operands ops;
  if (!parseOperands(m, &ops)) return Refuse({R_INVALID, "module could not be parsed"});
  Analysis a;
  if (Failure f = analyze(m, ops, entryIndex, spec, nspec, lim, &a); f.failed()) return Refuse(f);
  Prepared p;
  if (lim.benchParts & 2) p.words = words;
  else if (Failure f = rewrite(m, ops, a, lim, &p.words, &p.uncheckedLoops); f.failed()) return Refuse(f);
  if (!(lim.benchParts & 1))
    if (Failure f = clampBufferIndices(&p.words); f.failed()) return Refuse(f);
  if (std::string v = validate(p.words.data(), p.words.size()); !v.empty())
    return Refuse({R_LOOP_FORM, "rewritten module failed validation (device bug): " + v});
  p.entry = std::move(a.entry);
  return p;
}

}  // namespace

Prepared prepare(const uint32_t* words, size_t count, uint32_t entryIndex, const SpecValue* spec,
                 size_t nspec, const Limits& lim) {
  try {
    return PrepareImpl(words, count, entryIndex, spec, nspec, lim);
  } catch (const std::bad_alloc&) {
    return Refuse({R_INVALID, "out of memory while checking the module"});
  } catch (const std::exception& e) {
    return Refuse({R_INVALID, std::string("internal error while checking the module: ") + e.what()});
  } catch (...) {
    return Refuse({R_INVALID, "internal error while checking the module"});
  }
}

}  // namespace vugpu::spirv
