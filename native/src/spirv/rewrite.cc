// The loop rewrite (hw-spec §6.3.5): every back-edge of every function continues only while the
// launch's cancel word is 0; with Limits::loopLimit > 0 (a device that silently leaves loops at
// its own cap: lavapipe) the program also detects each such cut and reports it; the entry point's
// returns report why it stopped in the control block.
//
// What it adds (new ids from the header bound; OpTypeInt 32 0 / OpTypeBool reused when present):
//   control block  set 1 binding 0: struct { uint cancel; uint status; } (Block in StorageBuffer;
//                  BufferBlock in Uniform for SPIR-V < 1.3 without the storage-buffer extension)
//   back-edge      cancel = atomic load (Relaxed; Device scope, QueueFamily under the Vulkan memory
//                  model) — an atomic load cannot be hoisted out of the loop; the branch becomes
//                  OpBranchConditional (cancel == 0) header merge (cond && ok for a do-while).
//   entry returns  status = cancel != 0 ? 1 : the probe saw a cut (below) ? 2 : 0; if nonzero,
//                  atomicMax into control.status inside a small selection construct before the
//                  OpReturn.
//   OpUnreachable  becomes a return (an early loop exit may now reach a block that was unreachable).
//   small loops    a loop whose trip count is a proven constant keeps its back-edge as is, when
//                  that count times the counts of every enclosing loop left so is ≤ kSmallTrips:
//                  a check there stops NVIDIA's compiler from unrolling it (SGEMM's 16-step inner
//                  loop ran many times slower: docs/programs.md), and an enclosing checked loop (or the launch's end) still
//                  stops it within kSmallTrips iterations. Proven = see Rewriter::constTrip;
//                  anything else is checked. A cut of such a loop on lavapipe is seen by the
//                  probe like any other. The skipped headers are reported (Prepared::uncheckedLoops).
//   (Limits::cancelLoadEarly, a benchmark switch: the atomic load moves to the loop header, after
//   its OpPhis — the header dominates the back-edge — and only the compare stays at the back-edge.)
//   every 2^k       a back-edge block B without a merge instruction loads the word only every
//                   Limits::cancelEvery-th checked back-edge of the invocation (kCancelEvery by
//                   default): on a GPU the load is an L2 round trip that a loop with barriers
//                   cannot overlap (checking every iteration slowed the SGEMM sample); on lavapipe
//                   a loop over the SIMD lanes, where loading at every back-edge measured within
//                   noise of this (bench/rewrite-cost.ts; figures in docs/programs.md).
//                   B counts in a Private uint and branches:
//                     B: n1 = vugpu_backedges + 1; store; due = (n1 & (every-1)) == 0
//                        OpSelectionMerge M; OpBranchConditional due L M
//                     L: cw = atomic load; OpBranch M
//                     M: w = OpPhi(cw L, 0 B); ok = w == 0; the back-edge branch, from M
//                   A cancel is then seen within `every` back-edges of checked loops.
//
// Loop-cut detection (loopLimit > 0). lavapipe ends a loop when a limiter shared by all loops of a
// SIMD group reaches 0, at the end of a pass, as if the loop had exited — and passes run with every
// lane masked off (a loop in a branch no lane took) count too, so no counter in the program can
// mirror it. But the limiter only goes down, and once spent it ends every later loop at its first
// end-of-pass (measured). So each return of the entry point asks it, once per invocation, with a
// probe loop whose trip count the compiler cannot know:
//     n = cancel | kProbePasses;  for (i = 0; i < n; i++) {}   (DontUnroll; back-edge checked)
//     i < n after it = the device cut the probe = the limiter was spent → status 2.
// A cut that changed nothing (the loop's last pass) may go unseen, and reports can come a few
// passes before the cap. Nothing of the detection runs inside the program's loops.
#define SPV_ENABLE_UTILITY_CODE
#include <spirv/unified1/spirv.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "module.h"

namespace vugpu::spirv::detail {

namespace {

// The periodic check: the cancel word is loaded every kCancelEvery-th checked
// back-edge by default, at most every kMaxCancelEvery-th (Limits::cancelEvery overrides).
constexpr uint32_t kCancelEvery = 64;
constexpr uint32_t kMaxCancelEvery = 1024;

using Words = std::vector<uint32_t>;

void Emit(Words& v, uint32_t op, std::initializer_list<uint32_t> args) {
  v.push_back(uint32_t(1 + args.size()) << 16 | op);
  v.insert(v.end(), args);
}

void EmitStr(Words& v, uint32_t op, std::initializer_list<uint32_t> pre, std::string_view s) {
  size_t strWords = s.size() / 4 + 1;
  v.push_back(uint32_t(1 + pre.size() + strWords) << 16 | op);
  v.insert(v.end(), pre);
  size_t base = v.size();
  v.resize(base + strWords, 0);
  for (size_t k = 0; k < s.size(); ++k) v[base + k / 4] |= uint32_t(uint8_t(s[k])) << (8 * (k % 4));
}

bool InNamesSection(uint32_t op) {
  switch (op) {
    case SpvOpCapability:
    case SpvOpExtension:
    case SpvOpExtInstImport:
    case SpvOpMemoryModel:
    case SpvOpEntryPoint:
    case SpvOpExecutionMode:
    case SpvOpExecutionModeId:
    case SpvOpString:
    case SpvOpSourceExtension:
    case SpvOpSource:
    case SpvOpSourceContinued:
    case SpvOpName:
    case SpvOpMemberName:
      return true;
    default: return false;
  }
}

bool InAnnotationSection(uint32_t op) {
  switch (op) {
    case SpvOpModuleProcessed:
    case SpvOpDecorate:
    case SpvOpMemberDecorate:
    case SpvOpDecorateId:
    case SpvOpDecorateString:
    case SpvOpMemberDecorateString:
    case SpvOpDecorationGroup:
    case SpvOpGroupDecorate:
    case SpvOpGroupMemberDecorate:
      return true;
    default: return false;
  }
}

constexpr uint32_t kSmallTrips = 256;
// Passes of the loop-cut probe (file comment): enough that a compiler peeling an iteration or two
// off it still leaves a continuing end-of-pass inside the loop for a spent limiter to cut.
constexpr uint32_t kProbePasses = 4;

class Rewriter {
 public:
  Rewriter(const Module& m, const Operands& ops, const Analysis& a, const Limits& lim)
      : m_(m), ops_(ops), a_(a), lim_(lim), next_(m.bound) {}
  Failure run(Words* out);
  std::vector<uint32_t> unchecked;  // headers of loops left without a check, in module order

 private:
  const Module& m_;
  const Operands& ops_;
  const Analysis& a_;
  const Limits& lim_;
  uint32_t next_;
  bool detect_ = false;

  Words caps_, exts_, names_, decos_, globals_;
  std::map<uint32_t, Words> before_;               // instruction index → words inserted before it
  std::unordered_map<uint32_t, Words> replace_;    // instruction index → its replacement
  std::unordered_map<uint32_t, uint32_t> undef_;   // type → OpUndef id
  std::unordered_map<uint32_t, uint32_t> defIdx_;  // id → defining instruction (lazily)

  // ids
  uint32_t tUint_ = 0, tBool_ = 0, c0_ = 0, c1_ = 0, c2_ = 0, cScope_ = 0, tPtrCtlUint_ = 0,
           vCtl_ = 0, cProbe_ = 0;
  // The periodic check (every_ > 1): the invocation's back-edge counter and the mask.
  uint32_t every_ = 1, vEdges_ = 0, cMask_ = 0;

  uint32_t fresh() { return next_++; }
  uint32_t constant(uint32_t value) {
    uint32_t id = fresh();
    Emit(globals_, SpvOpConstant, {tUint_, id, value});
    return id;
  }
  uint32_t undefOf(uint32_t type) {
    auto it = undef_.find(type);
    if (it != undef_.end()) return it->second;
    uint32_t id = fresh();
    Emit(globals_, SpvOpUndef, {type, id});
    undef_[type] = id;
    return id;
  }
  // Defining instruction of an id (built on first use: only OpSwitch exits need it).
  const uint32_t* defInst(uint32_t id) {
    if (defIdx_.empty())
      for (size_t i = 0; i < m_.insts.size(); ++i)
        if (ops_.resultId[i]) defIdx_[ops_.resultId[i]] = uint32_t(i);
    auto it = defIdx_.find(id);
    return it == defIdx_.end() ? nullptr : &it->second;
  }
  uint32_t typeOf(uint32_t id) {
    const uint32_t* i = defInst(id);
    return i ? ops_.typeId[*i] : 0;
  }
  uint32_t defOp(uint32_t id) {
    const uint32_t* i = defInst(id);
    return i ? m_.insts[*i].op : 0;
  }
  uint32_t defAt(uint32_t id, size_t k) {
    const uint32_t* i = defInst(id);
    return i ? m_.at(*i, k) : 0;
  }
  uint32_t loadCancel(Words& v, uint32_t cw = 0);  // the cancel word's atomic load (into cw if given)
  uint32_t cancelledNot(Words& v, uint32_t* cw = nullptr);  // bool: cancel word == 0
  std::unordered_set<uint32_t> loopFns_;  // functions that contain or call (transitively) a loop
  bool constU32(uint32_t id, uint32_t* v);
  uint32_t constTrip(const Function& f, const std::unordered_map<uint32_t, uint32_t>& pos,
                     const std::vector<std::vector<uint32_t>>& succ, uint32_t hp,
                     const std::unordered_set<uint32_t>& body);
  std::unordered_set<uint32_t> smallLoops(const Function& f, const std::unordered_map<uint32_t, uint32_t>& pos);
  std::unordered_map<uint32_t, uint32_t> earlyLoad_;  // header label → its cancel word load (cancelLoadEarly)
  void declareGlobals();
  void emitStatus(Words& v, uint32_t label);
  Failure rewriteFunction(const Function& f);
  Failure patchEntryPoints();
};

void Rewriter::declareGlobals() {
  if (a_.uintType) {
    tUint_ = a_.uintType;
  } else {
    tUint_ = fresh();
    Emit(globals_, SpvOpTypeInt, {tUint_, 32, 0});
  }
  if (a_.boolType) {
    tBool_ = a_.boolType;
  } else {
    tBool_ = fresh();
    Emit(globals_, SpvOpTypeBool, {tBool_});
  }
  c0_ = constant(0);
  c1_ = constant(1);
  c2_ = constant(STATUS_LOOP_LIMIT);
  if (detect_) cProbe_ = constant(kProbePasses);
  cScope_ = a_.vulkanMemoryModel ? constant(SpvScopeQueueFamily) : constant(SpvScopeDevice);

  // StorageBuffer is core from SPIR-V 1.3 (or with its extension); before that a storage buffer
  // is a BufferBlock in Uniform (BufferBlock itself is gone from 1.4).
  bool sb = m_.version >= 0x00010300 || a_.hasStorageBufferExt;
  uint32_t sc = sb ? SpvStorageClassStorageBuffer : SpvStorageClassUniform;
  uint32_t tCtl = fresh(), tPtrCtl = fresh();
  tPtrCtlUint_ = fresh();
  vCtl_ = fresh();
  Emit(globals_, SpvOpTypeStruct, {tCtl, tUint_, tUint_});
  Emit(globals_, SpvOpTypePointer, {tPtrCtl, sc, tCtl});
  Emit(globals_, SpvOpTypePointer, {tPtrCtlUint_, sc, tUint_});
  Emit(globals_, SpvOpVariable, {tPtrCtl, vCtl_, sc});
  Emit(decos_, SpvOpDecorate, {tCtl, sb ? SpvDecorationBlock : SpvDecorationBufferBlock});
  Emit(decos_, SpvOpMemberDecorate, {tCtl, 0, SpvDecorationOffset, 0});
  Emit(decos_, SpvOpMemberDecorate, {tCtl, 1, SpvDecorationOffset, 4});
  Emit(decos_, SpvOpDecorate, {vCtl_, SpvDecorationDescriptorSet, CONTROL_SET});
  Emit(decos_, SpvOpDecorate, {vCtl_, SpvDecorationBinding, CONTROL_BINDING});
  EmitStr(names_, SpvOpName, {tCtl}, "vugpu_control_t");
  EmitStr(names_, SpvOpMemberName, {tCtl, 0}, "cancel");
  EmitStr(names_, SpvOpMemberName, {tCtl, 1}, "status");
  EmitStr(names_, SpvOpName, {vCtl_}, "vugpu_control");

  if (every_ > 1) {
    uint32_t tPtrPriv = fresh();
    vEdges_ = fresh();
    cMask_ = constant(every_ - 1);
    Emit(globals_, SpvOpTypePointer, {tPtrPriv, SpvStorageClassPrivate, tUint_});
    Emit(globals_, SpvOpVariable, {tPtrPriv, vEdges_, SpvStorageClassPrivate, c0_});
    EmitStr(names_, SpvOpName, {vEdges_}, "vugpu_backedges");
  }
}

uint32_t Rewriter::loadCancel(Words& v, uint32_t cw) {
  uint32_t pc = fresh();
  if (!cw) cw = fresh();
  Emit(v, SpvOpAccessChain, {tPtrCtlUint_, pc, vCtl_, c0_});
  Emit(v, SpvOpAtomicLoad, {tUint_, cw, pc, cScope_, c0_});
  return cw;
}

uint32_t Rewriter::cancelledNot(Words& v, uint32_t* word) {
  uint32_t cw = loadCancel(v), ok = fresh();
  Emit(v, SpvOpIEqual, {tBool_, ok, cw, c0_});
  if (word) *word = cw;
  return ok;
}

// Replaces an OpReturn of the entry point (in the block labelled `label`): report a stop in the
// control block, then return. With detection the probe loop (file comment) comes first.
void Rewriter::emitStatus(Words& v, uint32_t label) {
  uint32_t cw = 0, cut = c0_;
  const uint32_t ok = cancelledNot(v, &cw);
  if (detect_) {
    // for (i = 0; i < n; i++) with n = cancel | kProbePasses, the back-edge checked like any
    // other; i < n after it = the device cut it (the file comment).
    uint32_t n = fresh(), h = fresh(), c = fresh(), m = fresh(), i = fresh(), i1 = fresh(),
             more = fresh(), left = fresh();
    cut = fresh();
    Emit(v, SpvOpBitwiseOr, {tUint_, n, cw, cProbe_});
    Emit(v, SpvOpBranch, {h});
    Emit(v, SpvOpLabel, {h});
    Emit(v, SpvOpPhi, {tUint_, i, c0_, label, i1, c});
    Emit(v, SpvOpULessThan, {tBool_, more, i, n});
    Emit(v, SpvOpLoopMerge, {m, c, SpvLoopControlDontUnrollMask});
    Emit(v, SpvOpBranchConditional, {more, c, m});
    Emit(v, SpvOpLabel, {c});
    Emit(v, SpvOpIAdd, {tUint_, i1, i, c1_});
    Emit(v, SpvOpBranchConditional, {ok, h, m});
    Emit(v, SpvOpLabel, {m});
    Emit(v, SpvOpULessThan, {tBool_, left, i, n});
    Emit(v, SpvOpSelect, {tUint_, cut, left, c2_, c0_});
  }
  // cancelled: 1; else the probe's verdict (0 or 2)
  uint32_t st = fresh();
  Emit(v, SpvOpSelect, {tUint_, st, ok, cut, c1_});
  uint32_t any = fresh(), write = fresh(), merge = fresh(), ps = fresh(), old = fresh();
  Emit(v, SpvOpINotEqual, {tBool_, any, st, c0_});
  Emit(v, SpvOpSelectionMerge, {merge, SpvSelectionControlMaskNone});
  Emit(v, SpvOpBranchConditional, {any, write, merge});
  Emit(v, SpvOpLabel, {write});
  Emit(v, SpvOpAccessChain, {tPtrCtlUint_, ps, vCtl_, c1_});
  Emit(v, SpvOpAtomicUMax, {tUint_, old, ps, cScope_, c0_, st});
  Emit(v, SpvOpBranch, {merge});
  Emit(v, SpvOpLabel, {merge});
  Emit(v, SpvOpReturn, {});
}

// A 32-bit integer OpConstant (never a specialization constant: its value is the pipeline's).
bool Rewriter::constU32(uint32_t id, uint32_t* v) {
  const uint32_t* i = defInst(id);
  if (!i || m_.insts[*i].op != SpvOpConstant || m_.insts[*i].wc != 4) return false;
  uint32_t t = ops_.typeId[*i];
  if (defOp(t) != SpvOpTypeInt || defAt(t, 2) != 32) return false;
  *v = m_.at(*i, 3);
  return true;
}

// The trip count of the loop headed by block hp when it is a proven constant ≤ kSmallTrips, else
// UINT32_MAX. Proven: the header has two predecessors, one outside the loop (pre) and its continue
// target c (≠ header), which ends in OpBranch header; the header, or the one block it branches to
// (whose only predecessor it is), ends in OpBranchConditional (i cmp K) between the loop and its
// merge, K an OpConstant; i is either
//   - OpPhi [init, pre] [next, c] in the header, next = i + s / s + i / i - s, or
//   - an OpLoad of a Function variable that is used only by OpLoad and OpStore, stored twice: a
//     constant in pre, and in c (OpLoad of it in c) + s or - s —
// init and s OpConstants. Then the count is simulated in 32-bit arithmetic, wrap-around included.
// body: the loop's blocks (for calls into functions with loops: those would multiply the bound).
uint32_t Rewriter::constTrip(const Function& f, const std::unordered_map<uint32_t, uint32_t>& pos,
                             const std::vector<std::vector<uint32_t>>& succ, uint32_t hp,
                             const std::unordered_set<uint32_t>& body) {
  constexpr uint32_t kNo = UINT32_MAX;
  const Block& hb = f.blocks[hp];
  const uint32_t header = hb.label, merge = m_.at(hb.mergeInst, 1), cont = m_.at(hb.mergeInst, 2);
  auto cp = pos.find(cont);
  if (cont == header || cp == pos.end()) return kNo;
  const Block& cb = f.blocks[cp->second];
  if (m_.insts[cb.term].op != SpvOpBranch || m_.at(cb.term, 1) != header) return kNo;
  // predecessors of the header, and of the block after it
  uint32_t pre = UINT32_MAX, nHeaderPreds = 0;
  uint32_t xp = hp;
  if (m_.insts[hb.term].op == SpvOpBranch) {
    auto yp = pos.find(m_.at(hb.term, 1));
    if (yp == pos.end() || !body.count(yp->second) || yp->first == cont || yp->first == merge) return kNo;
    xp = yp->second;
  }
  uint32_t nXPreds = 0;
  for (uint32_t q = 0; q < f.blocks.size(); ++q)
    for (uint32_t s : succ[q]) {
      if (s == hp) {
        ++nHeaderPreds;
        if (q != cp->second) pre = q;
      }
      if (xp != hp && s == xp) ++nXPreds;
    }
  if (nHeaderPreds != 2 || pre == UINT32_MAX || body.count(pre) || (xp != hp && nXPreds != 1)) return kNo;
  const Block& xb = f.blocks[xp];
  if (m_.insts[xb.term].op != SpvOpBranchConditional) return kNo;
  uint32_t condId = m_.at(xb.term, 1), t1 = m_.at(xb.term, 2), t2 = m_.at(xb.term, 3);
  if ((t1 == merge) == (t2 == merge)) return kNo;
  const bool stayIfTrue = t2 == merge;
  const uint32_t* ci = defInst(condId);
  if (!ci) return kNo;
  const uint32_t cop = m_.insts[*ci].op;
  switch (cop) {
    case SpvOpIEqual: case SpvOpINotEqual: case SpvOpULessThan: case SpvOpSLessThan:
    case SpvOpULessThanEqual: case SpvOpSLessThanEqual: case SpvOpUGreaterThan:
    case SpvOpSGreaterThan: case SpvOpUGreaterThanEqual: case SpvOpSGreaterThanEqual: break;
    default: return kNo;
  }
  uint32_t bound = 0, iv = 0;
  bool ivLeft;
  if (constU32(m_.at(*ci, 4), &bound)) iv = m_.at(*ci, 3), ivLeft = true;
  else if (constU32(m_.at(*ci, 3), &bound)) iv = m_.at(*ci, 4), ivLeft = false;
  else return kNo;
  const uint32_t* ii = defInst(iv);
  if (!ii || *ii <= f.begin || *ii >= f.end) return kNo;
  // step: OpIAdd(x, s) / OpIAdd(s, x) / OpISub(x, s) with x satisfying isX
  auto stepOf = [&](uint32_t id, auto&& isX, uint32_t* step) {
    const uint32_t* d = defInst(id);
    if (!d || m_.insts[*d].wc != 5) return false;
    uint32_t op = m_.insts[*d].op, a = m_.at(*d, 3), b = m_.at(*d, 4), s;
    if (op == SpvOpIAdd && isX(a, *d) && constU32(b, &s)) return *step = s, true;
    if (op == SpvOpIAdd && isX(b, *d) && constU32(a, &s)) return *step = s, true;
    if (op == SpvOpISub && isX(a, *d) && constU32(b, &s)) return *step = 0u - s, true;
    return false;
  };
  auto inBlock = [&](uint32_t inst, const Block& b) { return inst > b.first && inst < b.term; };
  uint32_t init = 0, step = 0;
  if (m_.insts[*ii].op == SpvOpPhi) {
    if (!inBlock(*ii, hb) || m_.insts[*ii].wc != 7) return kNo;
    uint32_t v[2] = {m_.at(*ii, 3), m_.at(*ii, 5)}, from[2] = {m_.at(*ii, 4), m_.at(*ii, 6)};
    int k = from[0] == f.blocks[pre].label ? 0 : 1;
    if (from[k] != f.blocks[pre].label || from[1 - k] != cont || !constU32(v[k], &init)) return kNo;
    if (!stepOf(v[1 - k], [&](uint32_t x, uint32_t) { return x == iv; }, &step)) return kNo;
  } else if (m_.insts[*ii].op == SpvOpLoad) {
    if (!inBlock(*ii, xb)) return kNo;
    const uint32_t var = m_.at(*ii, 3);
    const uint32_t* vi = defInst(var);
    if (!vi || m_.insts[*vi].op != SpvOpVariable || m_.at(*vi, 3) != SpvStorageClassFunction ||
        *vi <= f.begin || *vi >= f.end)
      return kNo;
    uint32_t stores = 0, initStore = 0, incStore = 0;
    for (uint32_t i = f.begin; i < f.end; ++i) {
      bool uses = false;
      for (uint32_t j = ops_.first[i]; j < ops_.first[i + 1]; ++j) uses = uses || ops_.ids[j] == var;
      if (!uses) continue;
      uint32_t op = m_.insts[i].op;
      if (op == SpvOpLoad && m_.at(i, 3) == var) continue;
      if (op != SpvOpStore || m_.at(i, 1) != var || m_.at(i, 2) == var) return kNo;
      ++stores;
      if (inBlock(i, f.blocks[pre])) initStore = i;
      else if (inBlock(i, cb)) incStore = i;
    }
    if (stores != 2 || !initStore || !incStore || !constU32(m_.at(initStore, 2), &init)) return kNo;
    auto loadInC = [&](uint32_t x, uint32_t) {
      const uint32_t* d = defInst(x);
      return d && m_.insts[*d].op == SpvOpLoad && m_.at(*d, 3) == var && inBlock(*d, cb) && *d < incStore;
    };
    if (!stepOf(m_.at(incStore, 2), loadInC, &step)) return kNo;
  } else {
    return kNo;
  }
  // No call into a function with loops (its iterations would multiply ours unseen).
  for (uint32_t q : body)
    for (uint32_t i = f.blocks[q].first; i < f.blocks[q].term; ++i)
      if (m_.insts[i].op == SpvOpFunctionCall && loopFns_.count(m_.at(i, 3))) return kNo;
  auto holds = [&](uint32_t x) {
    uint32_t a = ivLeft ? x : bound, b = ivLeft ? bound : x;
    int32_t sa = int32_t(a), sb = int32_t(b);
    bool r = false;
    switch (cop) {
      case SpvOpIEqual: r = a == b; break;
      case SpvOpINotEqual: r = a != b; break;
      case SpvOpULessThan: r = a < b; break;
      case SpvOpSLessThan: r = sa < sb; break;
      case SpvOpULessThanEqual: r = a <= b; break;
      case SpvOpSLessThanEqual: r = sa <= sb; break;
      case SpvOpUGreaterThan: r = a > b; break;
      case SpvOpSGreaterThan: r = sa > sb; break;
      case SpvOpUGreaterThanEqual: r = a >= b; break;
      case SpvOpSGreaterThanEqual: r = sa >= sb; break;
    }
    return r == stayIfTrue;
  };
  uint32_t trips = 0;
  for (uint32_t x = init; holds(x); x += step)
    if (++trips > kSmallTrips) return kNo;
  return trips;
}

// Loop headers of f whose back-edges keep no check (see the file comment).
std::unordered_set<uint32_t> Rewriter::smallLoops(const Function& f,
                                                  const std::unordered_map<uint32_t, uint32_t>& pos) {
  const uint32_t nb = uint32_t(f.blocks.size());
  std::vector<std::vector<uint32_t>> succ(nb);
  for (uint32_t p = 0; p < nb; ++p) {
    uint32_t t = f.blocks[p].term, op = m_.insts[t].op;
    if (op != SpvOpBranch && op != SpvOpBranchConditional && op != SpvOpSwitch) continue;
    for (uint32_t j = ops_.first[t]; j < ops_.first[t + 1]; ++j)
      if (auto it = pos.find(ops_.ids[j]); it != pos.end()) succ[p].push_back(it->second);
  }
  struct L {
    uint32_t hp, trips, mp;
    std::unordered_set<uint32_t> body;
  };
  std::vector<L> loops;
  for (uint32_t p = 0; p < nb; ++p) {
    const Block& b = f.blocks[p];
    if (b.mergeInst == UINT32_MAX || m_.insts[b.mergeInst].op != SpvOpLoopMerge) continue;
    auto mp = pos.find(m_.at(b.mergeInst, 1));
    L l{p, 0, mp == pos.end() ? UINT32_MAX : mp->second, {}};
    // the loop's blocks: reachable from the header without passing its merge
    std::vector<uint32_t> work{p};
    l.body.insert(p);
    while (!work.empty()) {
      uint32_t q = work.back();
      work.pop_back();
      for (uint32_t s : succ[q])
        if ((mp == pos.end() || s != mp->second) && l.body.insert(s).second) work.push_back(s);
    }
    l.trips = constTrip(f, pos, succ, p, l.body);
    loops.push_back(std::move(l));
  }
  std::unordered_set<uint32_t> out;
  // Outer loops come first (a header precedes the blocks it dominates).
  std::vector<bool> skipped(loops.size(), false);
  for (size_t k = 0; k < loops.size(); ++k) {
    if (loops[k].trips == UINT32_MAX) continue;
    uint64_t product = loops[k].trips;
    for (size_t o = 0; o < loops.size(); ++o)
      if (o != k && skipped[o] && loops[o].body.count(loops[k].hp)) product *= std::max<uint32_t>(loops[o].trips, 1);
    if (product > kSmallTrips) continue;
    skipped[k] = true;
    out.insert(f.blocks[loops[k].hp].label);
    unchecked.push_back(f.blocks[loops[k].hp].label);
  }
  return out;
}

Failure Rewriter::rewriteFunction(const Function& f) {
  const bool isEntry = f.id == a_.entryFunction;
  const uint32_t nb = uint32_t(f.blocks.size());
  if (nb == 0) return {};
  std::unordered_map<uint32_t, uint32_t> pos;  // label → block position
  struct Loop {
    uint32_t header, merge;
  };
  std::vector<Loop> loops;
  std::unordered_map<uint32_t, uint32_t> loopOfHeader;  // label → index in loops
  for (uint32_t p = 0; p < nb; ++p) {
    const Block& b = f.blocks[p];
    pos[b.label] = p;
    if (b.mergeInst != UINT32_MAX && m_.insts[b.mergeInst].op == SpvOpLoopMerge) {
      loopOfHeader[b.label] = uint32_t(loops.size());
      loops.push_back({b.label, m_.at(b.mergeInst, 1)});
    }
  }
  // A back-edge goes to a loop header from the header itself or a block after it (blocks appear
  // after their dominators, and a loop's header dominates it). A hostile module that branches to
  // a header from elsewhere gets a rewrite that the final validation refuses.
  auto isBackTarget = [&](uint32_t target, uint32_t p) {
    auto it = pos.find(target);
    return it != pos.end() && it->second <= p && loopOfHeader.count(target);
  };
  // Small constant loops keep their back-edge.
  const std::unordered_set<uint32_t> small = loops.empty() ? std::unordered_set<uint32_t>{} : smallLoops(f, pos);
  auto isChecked = [&](uint32_t target, uint32_t p) { return isBackTarget(target, p) && !small.count(target); };
  // The back-edge's "cancel == 0" (its load in the header with cancelLoadEarly).
  auto backEdgeOk = [&](Words& v, uint32_t header) -> uint32_t {
    if (!lim_.cancelLoadEarly) return cancelledNot(v);
    uint32_t& cw = earlyLoad_[header];
    if (!cw) {
      const Block& hb = f.blocks[pos[header]];
      uint32_t at = hb.first + 1;
      while (at < hb.term && (m_.insts[at].op == SpvOpPhi || m_.insts[at].op == SpvOpLine ||
                              m_.insts[at].op == SpvOpNoLine))
        ++at;
      cw = loadCancel(before_[at]);
    }
    uint32_t ok = fresh();
    Emit(v, SpvOpIEqual, {tBool_, ok, cw, c0_});
    return ok;
  };
  std::vector<std::pair<uint32_t, uint32_t>> newEdges;  // (merge label, from label): OpPhi + undef
  struct Rename {
    uint32_t target, from, to;
  };
  std::vector<Rename> renames;  // split edges: OpPhis of target name `to` instead of `from`
  for (uint32_t p = 0; p < nb; ++p) {
    const Block& b = f.blocks[p];
    uint32_t t = b.term;
    uint32_t op = m_.insts[t].op;
    uint32_t insertAt = b.mergeInst != UINT32_MAX ? b.mergeInst : t;

    Words& v = before_[insertAt];

    // The back-edge rewrite; fin is the block's final terminator (words), refusal the merge its
    // new cancel exit goes to (0: none).
    Words fin(m_.w + m_.insts[t].off, m_.w + m_.insts[t].off + m_.insts[t].wc);
    bool backEdge = false;
    // The periodic check (every_ > 1; see the top): the back-edge moves to a new block M after
    // the selection; `w` is where what needs `ok` goes (M's body, or this block).
    const bool periodic = every_ > 1 && b.mergeInst == UINT32_MAX;
    Words mBody;
    Words& w = periodic ? mBody : v;
    uint32_t mLabel = 0, lLabel = 0, due = 0, cwLoad = 0;
    auto checkOk = [&](uint32_t header) -> uint32_t {
      if (!periodic) return backEdgeOk(v, header);
      uint32_t n = fresh(), n1 = fresh(), lo = fresh(), cw = fresh(), ok = fresh();
      due = fresh();
      cwLoad = fresh();
      lLabel = fresh();
      mLabel = fresh();
      Emit(v, SpvOpLoad, {tUint_, n, vEdges_});
      Emit(v, SpvOpIAdd, {tUint_, n1, n, c1_});
      Emit(v, SpvOpStore, {vEdges_, n1});
      Emit(v, SpvOpBitwiseAnd, {tUint_, lo, n1, cMask_});
      Emit(v, SpvOpIEqual, {tBool_, due, lo, c0_});
      Emit(mBody, SpvOpPhi, {tUint_, cw, cwLoad, lLabel, c0_, b.label});
      Emit(mBody, SpvOpIEqual, {tBool_, ok, cw, c0_});
      // Edges that left this block now leave M.
      renames.push_back({header, b.label, mLabel});
      return ok;
    };
    auto newEdgeFrom = [&]() { return periodic ? mLabel : b.label; };
    if (op == SpvOpBranch) {
      uint32_t target = m_.at(t, 1);
      if (isChecked(target, p)) {
        uint32_t merge = loops[loopOfHeader[target]].merge;
        uint32_t ok = checkOk(target);
        fin.clear();
        Emit(fin, SpvOpBranchConditional, {ok, target, merge});
        newEdges.push_back({merge, newEdgeFrom()});
        backEdge = true;
      }
    } else if (op == SpvOpBranchConditional) {
      uint32_t cond = m_.at(t, 1), t1 = m_.at(t, 2), t2 = m_.at(t, 3);
      bool h1 = isChecked(t1, p), h2 = isChecked(t2, p);
      if (h1 || h2) {
        backEdge = true;
        uint32_t header = h1 ? t1 : t2;
        uint32_t merge = loops[loopOfHeader[header]].merge;
        uint32_t ok = checkOk(header);
        fin.clear();
        if (t1 == t2) {
          Emit(fin, SpvOpBranchConditional, {ok, header, merge});
          newEdges.push_back({merge, newEdgeFrom()});
        } else if (h1 && !h2 && t2 == merge) {
          uint32_t c2 = fresh();
          Emit(w, SpvOpLogicalAnd, {tBool_, c2, cond, ok});
          if (m_.insts[t].wc == 6) Emit(fin, SpvOpBranchConditional, {c2, t1, t2, m_.at(t, 4), m_.at(t, 5)});
          else Emit(fin, SpvOpBranchConditional, {c2, t1, t2});
          if (periodic) renames.push_back({merge, b.label, mLabel});
        } else if (h2 && !h1 && t1 == merge) {
          uint32_t nc = fresh(), c2 = fresh();
          Emit(w, SpvOpLogicalNot, {tBool_, nc, cond});
          Emit(w, SpvOpLogicalAnd, {tBool_, c2, nc, ok});
          if (periodic) renames.push_back({merge, b.label, mLabel});
          if (m_.insts[t].wc == 6) Emit(fin, SpvOpBranchConditional, {c2, t2, t1, m_.at(t, 5), m_.at(t, 4)});
          else Emit(fin, SpvOpBranchConditional, {c2, t2, t1});
        } else {
          return {R_LOOP_FORM, "back-edge to loop header %" + std::to_string(header) + " from %" +
                                   std::to_string(b.label) + " branches elsewhere than the loop's merge"};
        }
      }
    } else if (op == SpvOpSwitch) {
      for (uint32_t j = ops_.first[t]; j < ops_.first[t + 1]; ++j)
        if (isBackTarget(ops_.ids[j], p))
          return {R_LOOP_FORM, "back-edge to loop header %" + std::to_string(ops_.ids[j]) +
                                   " is an OpSwitch"};
    }

    if (periodic && backEdge) {
      // B ends in the selection; L loads the word; M takes the (rewritten) back-edge branch.
      Words sel;
      Emit(sel, SpvOpSelectionMerge, {mLabel, SpvSelectionControlMaskNone});
      Emit(sel, SpvOpBranchConditional, {due, lLabel, mLabel});
      Emit(sel, SpvOpLabel, {lLabel});
      loadCancel(sel, cwLoad);
      Emit(sel, SpvOpBranch, {mLabel});
      Emit(sel, SpvOpLabel, {mLabel});
      sel.insert(sel.end(), mBody.begin(), mBody.end());
      sel.insert(sel.end(), fin.begin(), fin.end());
      fin = std::move(sel);
    }
    if (op == SpvOpUnreachable || op == SpvOpReturn || op == SpvOpReturnValue) {
      fin.clear();
      if (isEntry && op != SpvOpReturnValue) {
        emitStatus(fin, b.label);
      } else {
        if (op != SpvOpUnreachable) continue;
        if (f.typeId == a_.voidType && a_.voidType) Emit(fin, SpvOpReturn, {});
        else Emit(fin, SpvOpReturnValue, {undefOf(f.typeId)});
      }
    }
    bool same = fin.size() == m_.insts[t].wc && std::equal(fin.begin(), fin.end(), m_.w + m_.insts[t].off);
    if (!same) replace_[t] = std::move(fin);
  }

  // OpPhis of blocks that gained or changed a predecessor.
  auto phis = [&](uint32_t label, auto&& edit) -> Failure {
    auto it = pos.find(label);
    if (it == pos.end()) return {R_LOOP_FORM, "branch target not found"};
    const Block& mb = f.blocks[it->second];
    for (uint32_t i = mb.first + 1; i < mb.term; ++i) {
      uint32_t op = m_.insts[i].op;
      if (op == SpvOpLine || op == SpvOpNoLine) continue;
      if (op != SpvOpPhi) break;
      Words& r = replace_[i];
      if (r.empty()) r.assign(m_.w + m_.insts[i].off, m_.w + m_.insts[i].off + m_.insts[i].wc);
      edit(r);
      if (r.size() > 0xFFFF) return {R_LOOP_FORM, "OpPhi too large to extend"};
      r[0] = uint32_t(r.size()) << 16 | SpvOpPhi;
    }
    return {};
  };
  // A back-edge that can now exit adds a predecessor to the merge block: its OpPhis get an
  // (undefined) value for it — the loop was stopped, the result is reported wrong anyway.
  for (auto [merge, from] : newEdges)
    if (Failure e = phis(merge, [&](Words& r) { r.insert(r.end(), {undefOf(r[1]), from}); }); e.failed())
      return e;
  for (const Rename& rn : renames)
    if (Failure e = phis(rn.target, [&](Words& r) {
          for (size_t k = 4; k < r.size(); k += 2)
            if (r[k] == rn.from) r[k] = rn.to;
        });
        e.failed())
      return e;
  return {};
}

Failure Rewriter::patchEntryPoints() {
  std::vector<uint32_t> ours{vCtl_};
  if (vEdges_) ours.push_back(vEdges_);
  // Before SPIR-V 1.4 the interface lists only Input/Output variables (none of ours).
  if (m_.version < 0x00010400) return {};
  for (uint32_t e : a_.entryPoints) {
    size_t afterName = 0;
    m_.str(e, 3, &afterName);
    Words r(m_.w + m_.insts[e].off, m_.w + m_.insts[e].off + m_.insts[e].wc);
    for (uint32_t id : ours)
      if (std::find(r.begin() + std::min(afterName, r.size()), r.end(), id) == r.end()) r.push_back(id);
    if (r.size() > 0xFFFF) return {R_LOOP_FORM, "entry point interface too large"};
    r[0] = uint32_t(r.size()) << 16 | SpvOpEntryPoint;
    replace_[e] = std::move(r);
  }
  return {};
}

Failure Rewriter::run(Words* out) {
  detect_ = lim_.loopLimit > 0;
  if (!lim_.cancelLoadEarly) {
    uint32_t e = lim_.cancelEvery ? lim_.cancelEvery : kCancelEvery;
    every_ = 1;
    while (every_ * 2 <= std::min<uint32_t>(e, kMaxCancelEvery)) every_ *= 2;  // a power of two
  }
  {
    // Functions with a loop, then their callers, to a fixed point (no recursion in SPIR-V).
    for (const Function& f : a_.functions)
      for (const Block& b : f.blocks)
        if (b.mergeInst != UINT32_MAX && m_.insts[b.mergeInst].op == SpvOpLoopMerge) loopFns_.insert(f.id);
    for (bool grew = true; grew;) {
      grew = false;
      for (const Function& f : a_.functions)
        if (!loopFns_.count(f.id))
          for (uint32_t c : f.calls)
            if (loopFns_.count(c)) {
              loopFns_.insert(f.id);
              grew = true;
              break;
            }
    }
  }
  declareGlobals();
  if (Failure f = patchEntryPoints(); f.failed()) return f;
  for (const Function& f : a_.functions)
    if (Failure r = rewriteFunction(f); r.failed()) return r;
  if (next_ > kMaxOutputBound) return {R_LOOP_FORM, "too many loops and returns to rewrite"};

  // Section boundaries: capabilities, extensions, debug names, annotations, then types/globals up
  // to the first function.
  size_t ni = m_.insts.size(), capEnd = 0, namesEnd, annotEnd, firstFn = ni;
  while (capEnd < ni && m_.insts[capEnd].op == SpvOpCapability) ++capEnd;
  namesEnd = capEnd;
  while (namesEnd < ni && InNamesSection(m_.insts[namesEnd].op)) ++namesEnd;
  annotEnd = namesEnd;
  while (annotEnd < ni && InAnnotationSection(m_.insts[annotEnd].op)) ++annotEnd;
  for (size_t i = annotEnd; i < ni; ++i)
    if (m_.insts[i].op == SpvOpFunction) {
      firstFn = i;
      break;
    }
  if (firstFn == ni) return {R_LOOP_FORM, "module has no function"};
  // Prepended last section first, so coinciding indices still come out in section order.
  auto prepend = [&](size_t at, const Words& w) {
    Words& v = before_[uint32_t(at)];
    v.insert(v.begin(), w.begin(), w.end());
  };
  prepend(firstFn, globals_);
  prepend(annotEnd, decos_);
  prepend(namesEnd, names_);
  prepend(capEnd, caps_);

  out->clear();
  out->reserve(m_.n + m_.n / 4 + 256);
  out->insert(out->end(), {kMagic, m_.version, m_.w[2], next_, 0});
  for (size_t i = 0; i < ni; ++i) {
    if (auto it = before_.find(uint32_t(i)); it != before_.end())
      out->insert(out->end(), it->second.begin(), it->second.end());
    if (auto it = replace_.find(uint32_t(i)); it != replace_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
    } else {
      const Inst& in = m_.insts[i];
      out->insert(out->end(), m_.w + in.off, m_.w + in.off + in.wc);
    }
  }
  return {};
}

}  // namespace

Failure rewrite(const Module& m, const Operands& ops, const Analysis& a, const Limits& lim,
                Words* out, std::vector<uint32_t>* unchecked) {
  Rewriter r(m, ops, a, lim);
  Failure f = r.run(out);
  if (unchecked) *unchecked = std::move(r.unchecked);
  return f;
}

}  // namespace vugpu::spirv::detail
