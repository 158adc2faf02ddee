// In-process fuzzer for the SPIR-V front end (native programPrepare), shared by
// spirv-fuzz.test.ts (bounded) and bench/fuzz-programs.ts (long runs). It mutates valid seed
// modules (bit flips, word replacement, instruction drops / duplicates / swaps, operand and
// literal tweaks, swapped branch targets, truncation, crossover, random bytes) under varied
// limits, and checks for every input:
//   - programPrepare returns (a crash kills the process: the runner prints the iteration, and the
//     same seed + iteration replays the same input) with a known reason and a message;
//   - an accepted module's rewritten words pass SPIRV-Tools again (programValidate), pass the
//     independent structural check below (verifyRewrite: no cycle of the CFG avoids an
//     instrumented back-edge but a small constant loop's, re-proven here; every return of the
//     entry point reports a stop, with loop-cut detection what the probe saw), and
//     its entry info is within the limits;
//   - "rewritten module failed validation" never happens (that is a front-end bug);
//   - the same input gives the same answer (checked on a sample).
import fs from 'node:fs';
import { native } from '../../src/native.ts';
import { LIMITS, R, type Limits, type Prepared } from './spirv-helpers.ts';

// ---- PRNG ----------------------------------------------------------------------------------

import { Prng } from '../prng.ts';
export { Prng };

// ---- SPIR-V word-level helpers -----------------------------------------------------------------

interface Inst {
  op: number;
  off: number;
  wc: number;
}

function instructions(w: Uint32Array): Inst[] | null {
  const out: Inst[] = [];
  let off = 5;
  while (off < w.length) {
    const wc = w[off]! >>> 16;
    if (wc === 0 || off + wc > w.length) return null;
    out.push({ op: w[off]! & 0xffff, off, wc });
    off += wc;
  }
  return out;
}

function concat(parts: Uint32Array[]): Uint32Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint32Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

// ---- mutations -----------------------------------------------------------------------------------

const EDGES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 16, 17, 24, 25, 28, 33, 34, 35, 38, 40, 63, 64, 65, 127, 128, 255, 256,
  1024, 2048, 4096, 0x7fff, 0xffff, 0x10000, 0x10001, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff];

export type Mutation = (r: Prng, w: Uint32Array, seeds: readonly Uint32Array[]) => Uint32Array;

function someWord(r: Prng, w: Uint32Array): number {
  return r.chance(0.05) ? r.int(Math.min(5, w.length)) : 5 + r.int(Math.max(1, w.length - 5));
}

export const MUTATIONS: Record<string, Mutation> = {
  bitFlip(r, w) {
    const out = w.slice();
    const i = someWord(r, out);
    if (i < out.length) out[i]! ^= 1 << r.int(32);
    return out;
  },
  wordSet(r, w) {
    const out = w.slice();
    const i = someWord(r, out);
    if (i < out.length) out[i] = r.chance(0.6) ? r.pick(EDGES) : r.u32();
    return out;
  },
  // An operand (not the opcode word) set to another plausible id or literal: keeps framing, so it
  // reaches the validator and often passes it (a different constant, binding, storage class…).
  operand(r, w) {
    const insts = instructions(w);
    if (!insts || insts.length === 0) return w;
    const ins = r.pick(insts);
    if (ins.wc < 2) return w;
    const out = w.slice();
    const k = ins.off + 1 + r.int(ins.wc - 1);
    const bound = w[3]!;
    const v = out[k]!;
    switch (r.int(4)) {
      case 0: out[k] = (v + (r.chance(0.5) ? 1 : -1)) >>> 0; break;
      case 1: out[k] = 1 + r.int(Math.max(1, Math.min(bound, 1 << 20) - 1)); break;
      case 2: out[k] = r.int(8); break;
      default: out[k] = r.pick(EDGES);
    }
    return out;
  },
  // Literal operands that usually keep the module valid: constants, workgroup sizes, decoration
  // values (bindings, sets, offsets, strides, spec ids).
  literal(r, w) {
    const insts = instructions(w);
    if (!insts) return w;
    const cands = insts.filter((i) => (i.op === 43 && i.wc >= 4) || (i.op === 16 && i.wc >= 4) || (i.op === 71 && i.wc >= 4) || (i.op === 72 && i.wc >= 5));
    if (cands.length === 0) return w;
    const ins = r.pick(cands);
    const out = w.slice();
    const k = ins.off + (ins.op === 43 ? 3 : ins.op === 16 ? 3 + r.int(ins.wc - 3) : ins.op === 71 ? 3 : 4);
    if (k >= ins.off + ins.wc) return w;
    out[k] = r.chance(0.5) ? r.pick(EDGES) : (out[k]! + r.int(9) - 4) >>> 0;
    return out;
  },
  // The two targets of a conditional branch exchanged (condition meaning flips): turns do-while
  // back-edges around, breaks into continues, and so on — often still valid.
  swapTargets(r, w) {
    const insts = instructions(w);
    if (!insts) return w;
    const cands = insts.filter((i) => i.op === 250 && i.wc >= 4);
    if (cands.length === 0) return w;
    const ins = r.pick(cands);
    const out = w.slice();
    [out[ins.off + 2], out[ins.off + 3]] = [out[ins.off + 3]!, out[ins.off + 2]!];
    return out;
  },
  drop(r, w) {
    const insts = instructions(w);
    if (!insts || insts.length < 2) return w;
    const ins = r.pick(insts);
    return concat([w.subarray(0, ins.off), w.subarray(ins.off + ins.wc)]);
  },
  dup(r, w) {
    const insts = instructions(w);
    if (!insts || insts.length === 0) return w;
    const ins = r.pick(insts);
    const to = r.pick(insts);
    return concat([w.subarray(0, to.off), w.subarray(ins.off, ins.off + ins.wc), w.subarray(to.off)]);
  },
  swap(r, w) {
    const insts = instructions(w);
    if (!insts || insts.length < 2) return w;
    const i = r.int(insts.length - 1);
    const a = insts[i]!, b = insts[i + 1]!;
    return concat([w.subarray(0, a.off), w.subarray(b.off, b.off + b.wc), w.subarray(a.off, a.off + a.wc), w.subarray(b.off + b.wc)]);
  },
  wordCount(r, w) {
    const insts = instructions(w);
    if (!insts || insts.length === 0) return w;
    const out = w.slice();
    const ins = r.pick(insts);
    out[ins.off] = ((r.pick([0, 1, ins.wc - 1, ins.wc + 1, 0xffff]) & 0xffff) << 16) | ins.op;
    return out;
  },
  truncate(r, w) {
    return w.slice(0, r.int(w.length + 1));
  },
  // Instructions of another seed spliced in (types, constants, whole blocks).
  crossover(r, w, seeds) {
    const other = r.pick(seeds);
    const a = instructions(w), b = instructions(other);
    if (!a || !b || a.length === 0 || b.length === 0) return w;
    const at = r.pick(a);
    const from = r.int(b.length);
    const n = 1 + r.int(Math.min(8, b.length - from));
    const last = b[from + n - 1]!;
    return concat([w.subarray(0, at.off), other.subarray(b[from]!.off, last.off + last.wc), w.subarray(at.off)]);
  },
  random(r) {
    const n = r.int(64);
    const out = new Uint32Array(5 + n);
    out.set([0x07230203, r.pick([0x10000, 0x10300, 0x10500, r.u32()]), 0, 1 + r.int(64), 0]);
    for (let i = 5; i < out.length; i++) out[i] = r.chance(0.5) ? ((1 + r.int(6)) << 16) | r.int(400) : r.int(70);
    return out;
  },
};
const MUTATION_NAMES = Object.keys(MUTATIONS);

// ---- independent structural check of a rewritten module -----------------------------------------

let shapes: Map<number, { type: boolean; result: boolean }> | undefined;
/** Which opcodes have a result type / result id, from the SPIR-V grammar (spirv-headers). */
function grammar(): Map<number, { type: boolean; result: boolean }> {
  if (shapes) return shapes;
  const j = JSON.parse(fs.readFileSync('/usr/include/spirv/unified1/spirv.core.grammar.json', 'utf8')) as {
    instructions: { opcode: number; operands?: { kind: string }[] }[];
  };
  shapes = new Map();
  for (const ins of j.instructions) {
    const kinds = (ins.operands ?? []).map((o) => o.kind);
    shapes.set(ins.opcode, { type: kinds[0] === 'IdResultType', result: kinds.includes('IdResult') });
  }
  return shapes;
}

const Op = {
  EntryPoint: 15, Constant: 43, Function: 54, FunctionEnd: 56, Variable: 59, Load: 61, Store: 62,
  AccessChain: 65, Decorate: 71, IAdd: 128, IEqual: 170, ULessThan: 176, LogicalAnd: 167,
  AtomicLoad: 227, AtomicUMax: 239, LoopMerge: 246, SelectionMerge: 247, Label: 248, Branch: 249,
  Phi: 245, BitwiseAnd: 199, BitwiseOr: 197, Select: 169,
  BranchConditional: 250, Switch: 251, Return: 253, ReturnValue: 254, Unreachable: 255, TypeInt: 21,
} as const;

const TERMINATORS = new Set<number>([Op.Branch, Op.BranchConditional, Op.Switch, Op.Return, Op.ReturnValue, Op.Unreachable, 252, 4416]);


/** The rewrite leaves loops of at most this many iterations (with their unchecked enclosing
 *  ones, multiplied) unchecked when loopLimit is 0 (native/src/spirv/rewrite.cc). */
export const SMALL_TRIPS = 256;

const CMP: Record<number, (a: number, b: number) => boolean> = {
  170: (a, b) => a === b, 171: (a, b) => a !== b,  // OpIEqual, OpINotEqual
  172: (a, b) => a > b, 173: (a, b) => (a | 0) > (b | 0), 174: (a, b) => a >= b, 175: (a, b) => (a | 0) >= (b | 0),
  176: (a, b) => a < b, 177: (a, b) => (a | 0) < (b | 0), 178: (a, b) => a <= b, 179: (a, b) => (a | 0) <= (b | 0),
};
// Words of an instruction that are literals, never ids (from this index on), for the ops that
// can sit in a function and carry literals next to ids.
const LITERALS_FROM: Record<number, number> = { 8: 2, 61: 4, 62: 3, 79: 5, 81: 4, 82: 5, 246: 3, 247: 2 };

/** Checks what the rewrite promises, from the output alone: returns null or what is wrong.
 *  - exactly one control variable (set 1, binding 0) and no OpUnreachable;
 *  - every cycle of every function's CFG passes through a back-edge whose branch condition is an
 *    AND-tree containing (atomic load of control.cancel) == 0 (Kahn's algorithm after removing
 *    those edges leaves nothing) — the load may be the periodic one: an OpPhi of
 *    it from a block L and of 0 from the block B that branches to L when its back-edge count
 *    ((vugpu_backedges + 1) & (2^k − 1), k ≤ 10, the variable only ever stored its value + 1)
 *    is 0; an unchecked back-edge (a plain OpBranch to its header) is cut too when this file
 *    proves the loop's trip count constant (smallTrips) and its product with those of the
 *    enclosing unchecked loops ≤ SMALL_TRIPS;
 *  - every return of the entry point is the merge of a selection whose arm does
 *    atomicMax(control.status);
 *  - with loop-cut detection (loopLimit > 0): the value that arm reports is
 *    select(cancel == 0, select(i < n, 2, 0), 1), where i is the OpPhi of a DontUnroll loop header
 *    (0 from outside, i + 1 from inside) that leaves when !(i < n), and n = atomic load of
 *    control.cancel | a constant ≥ 2: the probe of lavapipe's spent loop limiter. */
export function verifyRewrite(w: Uint32Array, opts: { loopLimit: number; entryIndex: number }): string | null {
  const framed = instructions(w);
  if (!framed) return 'bad framing';
  const insts: Inst[] = framed;
  const def = new Map<number, Inst>();
  const consts = new Map<number, number>();
  const intWidth = new Map<number, number>();
  const names = new Map<string, number>();
  const sets = new Map<number, number>(), bindings = new Map<number, number>();
  const entries: number[] = [];
  const g = grammar();
  for (const ins of insts) {
    const a = (k: number) => w[ins.off + k]!;
    if (ins.op === Op.Decorate && ins.wc >= 4) {
      if (a(2) === 34) sets.set(a(1), a(3));
      if (a(2) === 33) bindings.set(a(1), a(3));
    }
    if (ins.op === 5 /* OpName */) {
      const bytes = Buffer.from(w.buffer, w.byteOffset + (ins.off + 2) * 4, (ins.wc - 2) * 4);
      names.set(bytes.subarray(0, bytes.indexOf(0)).toString(), a(1));
    }
    if (ins.op === Op.EntryPoint) entries.push(a(2));
    if (ins.op === Op.TypeInt) intWidth.set(a(1), a(2));
    const shape = g.get(ins.op);
    if (shape?.result) def.set(a(shape.type ? 2 : 1), ins);
    if (ins.op === Op.Constant) consts.set(a(2), a(3));
    if (ins.op === Op.Unreachable) return 'OpUnreachable left in the module';
  }
  const control = [...sets.keys()].filter((id) => sets.get(id) === 1 && bindings.get(id) === 0);
  if (control.length !== 1) return `expected one control variable at set 1 binding 0, found ${control.length}`;
  const ctl = control[0]!;
  const word = (ins: Inst, k: number) => (k < ins.wc ? w[ins.off + k]! : -1);
  const isConst = (id: number, v: number) => consts.get(id) === v;
  const chainOf = (ptr: number, base: number, idx?: number): boolean => {
    const d = def.get(ptr);
    return !!d && d.op === Op.AccessChain && word(d, 3) === base && (idx === undefined || isConst(word(d, 4), idx));
  };
  const isCancelLoad = (id: number): boolean => {
    const l = def.get(id);
    return !!l && l.op === Op.AtomicLoad && chainOf(word(l, 3), ctl, 0);
  };
  // The periodic check (loopLimit 0): the back-edge counter is a Private variable that is only
  // ever stored its own value + 1; `due` = ((counter + 1) & (2^k - 1)) == 0 with k ≤ 10.
  const edgesVar = names.get('vugpu_backedges');
  const index = new Map<Inst, number>();
  insts.forEach((x, i) => index.set(x, i));
  const isStep = (id: number): boolean => {
    const d = def.get(id);
    if (!d || d.op !== Op.IAdd || edgesVar === undefined) return false;
    for (const [x, y] of [[word(d, 3), word(d, 4)], [word(d, 4), word(d, 3)]] as const) {
      const l = def.get(x);
      if (l && l.op === Op.Load && word(l, 3) === edgesVar && consts.get(y) === 1) return true;
    }
    return false;
  };
  const stored = new Set<number>();
  for (const ins of insts)
    if (ins.op === Op.Store && edgesVar !== undefined && word(ins, 1) === edgesVar) {
      if (!isStep(word(ins, 2))) return 'vugpu_backedges is stored something other than its value + 1';
      stored.add(word(ins, 2));
    }
  const isDue = (id: number): boolean => {
    const d = def.get(id);
    if (!d || d.op !== Op.IEqual) return false;
    for (const [x, y] of [[word(d, 3), word(d, 4)], [word(d, 4), word(d, 3)]] as const) {
      const a = def.get(x);
      if (!isConst(y, 0) || !a || a.op !== Op.BitwiseAnd) continue;
      for (const [n, m] of [[word(a, 3), word(a, 4)], [word(a, 4), word(a, 3)]] as const) {
        const mask = consts.get(m);
        if (mask !== undefined && mask < 1024 && (mask & (mask + 1)) === 0 && isStep(n) && stored.has(n)) return true;
      }
    }
    return false;
  };
  /** The terminator of the block labelled `label`. */
  const termOf = (label: number): Inst | undefined => {
    const d = def.get(label);
    if (!d || d.op !== Op.Label) return undefined;
    for (let i = index.get(d)! + 1; i < insts.length; i++) if (TERMINATORS.has(insts[i]!.op)) return insts[i];
    return undefined;
  };
  const labelOf = (ins: Inst): number => {
    for (let i = index.get(ins)!; i >= 0; i--) if (insts[i]!.op === Op.Label) return word(insts[i]!, 1);
    return -1;
  };
  // OpPhi(load of control.cancel from L, 0 from B), in M: B branches on `due` to L or M, L to M.
  const isPeriodicLoad = (id: number): boolean => {
    const d = def.get(id);
    if (!d || d.op !== Op.Phi || d.wc !== 7) return false;
    const m = labelOf(d);
    for (const [v, from, z, zFrom] of [[word(d, 3), word(d, 4), word(d, 5), word(d, 6)], [word(d, 5), word(d, 6), word(d, 3), word(d, 4)]] as const) {
      if (!isCancelLoad(v) || !isConst(z, 0)) continue;
      const tl = termOf(from), tb = termOf(zFrom);
      if (!tl || tl.op !== Op.Branch || word(tl, 1) !== m) continue;
      if (!tb || tb.op !== Op.BranchConditional || !isDue(word(tb, 1)) || word(tb, 2) !== from || word(tb, 3) !== m) continue;
      if (labelOf(def.get(v)!) !== from) continue;
      return true;
    }
    return false;
  };
  // cancel check: OpIEqual(OpAtomicLoad(&control.cancel), 0), or of the periodic check's OpPhi
  const isCancel = (id: number): boolean => {
    const d = def.get(id);
    if (!d || d.op !== Op.IEqual) return false;
    for (const [x, y] of [[word(d, 3), word(d, 4)], [word(d, 4), word(d, 3)]] as const)
      if (isConst(y, 0) && (isCancelLoad(x) || isPeriodicLoad(x))) return true;
    return false;
  };
  // The probe's report (loopLimit > 0): select(cancel == 0, select(i < n, 2, 0), 1) with i the
  // counter of a DontUnroll loop that runs while i < n, n = cancel | K (K ≥ 2, a constant).
  const isProbeStatus = (st: number): boolean => {
    const sel = def.get(st);
    if (!sel || sel.op !== Op.Select || !isCancel(word(sel, 3)) || !isConst(word(sel, 5), 1)) return false;
    const cut = def.get(word(sel, 4));
    if (!cut || cut.op !== Op.Select || !isConst(word(cut, 4), 2) || !isConst(word(cut, 5), 0)) return false;
    const left = def.get(word(cut, 3));
    if (!left || left.op !== Op.ULessThan) return false;
    const i = word(left, 3), n = word(left, 4);
    const nd = def.get(n);
    if (!nd || nd.op !== Op.BitwiseOr || !isCancelLoad(word(nd, 3)) || (consts.get(word(nd, 4)) ?? 0) < 2) return false;
    const phi = def.get(i);
    if (!phi || phi.op !== Op.Phi || phi.wc !== 7) return false;
    // the phi's block: a loop header (DontUnroll) whose branch goes on while i < n
    let k = index.get(phi)!;
    while (k < insts.length && insts[k]!.op !== Op.LoopMerge && !TERMINATORS.has(insts[k]!.op)) k++;
    const lm = insts[k], br = insts[k + 1];
    if (!lm || lm.op !== Op.LoopMerge || (word(lm, 3) & 3) !== 2 || !br || br.op !== Op.BranchConditional) return false;
    const cond = def.get(word(br, 1));
    if (!cond || cond.op !== Op.ULessThan || word(cond, 3) !== i || word(cond, 4) !== n || word(br, 3) !== word(lm, 1)) return false;
    const header = labelOf(phi);
    if (labelOf(lm) !== header) return false;
    let zero = false, step = false;
    for (const [v, from] of [[word(phi, 3), word(phi, 4)], [word(phi, 5), word(phi, 6)]] as const) {
      const d = def.get(v);
      if (isConst(v, 0) && from !== word(lm, 2)) zero = true;
      else if (d && d.op === Op.IAdd && word(d, 3) === i && isConst(word(d, 4), 1) && from === word(lm, 2)) step = true;
    }
    return zero && step;
  };
  const leaves = (id: number, out: number[], depth = 0): void => {
    const d = def.get(id);
    if (d && d.op === Op.LogicalAnd && depth < 8) {
      leaves(word(d, 3), out, depth + 1);
      leaves(word(d, 4), out, depth + 1);
    } else out.push(id);
  };


  const const32 = (id: number): number | undefined => {
    const d = def.get(id);
    if (!d || d.op !== Op.Constant || d.wc !== 4 || intWidth.get(word(d, 1)) !== 32) return undefined;
    return word(d, 3);
  };
  // Headers whose back-edge may stay unchecked: constant trip count, product with the enclosing
  // such loops ≤ SMALL_TRIPS. Everything not proven is left out (and then fails the cycle check).
  function smallLoops(f: { id: number; blocks: { label: number; start: number; end: number }[] },
    headers: Map<number, number>, index: Map<number, number>): Map<number, number> {
    const targets = (k: number): number[] => {
      const t = insts[f.blocks[k]!.end]!;
      if (t.op === Op.Branch) return [word(t, 1)];
      if (t.op === Op.BranchConditional) return [word(t, 2), word(t, 3)];
      if (t.op === Op.Switch) { const o: number[] = []; for (let i = 2; i < t.wc; i++) if (index.has(word(t, i))) o.push(word(t, i)); return o; }
      return [];
    };
    const preds = new Map<number, number[]>();
    f.blocks.forEach((_, k) => { for (const x of targets(k)) if (index.has(x)) preds.set(x, [...(preds.get(x) ?? []), k]); });
    const fnStart = f.blocks[0]?.start ?? 0, fnEnd = f.blocks.at(-1)?.end ?? 0;
    const inBlock = (d: Inst | undefined, k: number) => {
      if (!d) return false;
      const i = insts.indexOf(d);
      return i > f.blocks[k]!.start && i < f.blocks[k]!.end;
    };
    const bodyOf = (h: number, m: number): Set<number> => {
      const body = new Set<number>([index.get(h)!]);
      const work = [index.get(h)!];
      while (work.length) for (const x of targets(work.pop()!)) {
        const j = index.get(x);
        if (j !== undefined && x !== m && !body.has(j)) { body.add(j); work.push(j); }
      }
      return body;
    };
    const trips = (h: number, m: number, body: Set<number>): number | undefined => {
      const hk = index.get(h)!, hb = f.blocks[hk]!;
      const lm = insts[hb.end - 1]!;
      const cont = word(lm, 2), ck = index.get(cont);
      if (ck === undefined || cont === h) return undefined;
      const ct = insts[f.blocks[ck]!.end]!;
      if (ct.op !== Op.Branch || word(ct, 1) !== h) return undefined;
      const hp = preds.get(h) ?? [];
      const outside = hp.filter((p) => !body.has(p));
      if (hp.length !== 2 || outside.length !== 1 || !hp.includes(ck)) return undefined;
      const pre = outside[0]!;
      let xk = hk;
      const ht = insts[hb.end]!;
      if (ht.op === Op.Branch) {
        const y = word(ht, 1), yk = index.get(y);
        if (yk === undefined || !body.has(yk) || y === cont || y === m || (preds.get(y) ?? []).length !== 1) return undefined;
        xk = yk;
      }
      const xt = insts[f.blocks[xk]!.end]!;
      if (xt.op !== Op.BranchConditional || (word(xt, 2) === m) === (word(xt, 3) === m)) return undefined;
      const stay = word(xt, 3) === m;
      const c = def.get(word(xt, 1));
      if (!c || !(c.op in CMP)) return undefined;
      let bound = const32(word(c, 4)), iv = word(c, 3), left = true;
      if (bound === undefined) { bound = const32(word(c, 3)); iv = word(c, 4); left = false; }
      if (bound === undefined) return undefined;
      const d = def.get(iv);
      if (!d) return undefined;
      const stepOf = (id: number, isX: (x: number) => boolean): number | undefined => {
        const e = def.get(id);
        if (!e || e.wc !== 5) return undefined;
        const a = word(e, 3), b = word(e, 4);
        if (e.op === Op.IAdd && isX(a) && const32(b) !== undefined) return const32(b);
        if (e.op === Op.IAdd && isX(b) && const32(a) !== undefined) return const32(a);
        if (e.op === 130 /* OpISub */ && isX(a) && const32(b) !== undefined) return (0 - const32(b)!) >>> 0;
        return undefined;
      };
      let init: number | undefined, step: number | undefined;
      if (d.op === 245 /* OpPhi */) {
        if (!inBlock(d, hk) || d.wc !== 7) return undefined;
        const pairs = [[word(d, 3), word(d, 4)], [word(d, 5), word(d, 6)]];
        const a = pairs.find((p) => p[1] === f.blocks[pre]!.label), b = pairs.find((p) => p[1] === cont);
        if (!a || !b || a === b) return undefined;
        init = const32(a[0]!);
        step = stepOf(b[0]!, (x) => x === iv);
      } else if (d.op === Op.Load) {
        if (!inBlock(d, xk)) return undefined;
        const v = word(d, 3), vd = def.get(v);
        const vi = vd ? insts.indexOf(vd) : -1;
        if (!vd || vd.op !== Op.Variable || word(vd, 3) !== 7 /* Function */ || vi < fnStart - 1 || vi > fnEnd) return undefined;
        const g = grammar();
        const stores: number[] = [];
        for (let i = fnStart; i <= fnEnd; i++) {
          const s = insts[i]!;
          if (s.op === Op.Load && word(s, 3) === v) continue;
          if (s.op === Op.Store && word(s, 1) === v && word(s, 2) !== v) { stores.push(i); continue; }
          const shape = g.get(s.op);
          const from = (shape?.type ? 1 : 0) + (shape?.result ? 1 : 0) + 1;
          const to = LITERALS_FROM[s.op] ?? s.wc;
          for (let k2 = from; k2 < to; k2++) if (word(s, k2) === v) return undefined;
        }
        const within = (i: number, k: number) => i > f.blocks[k]!.start && i < f.blocks[k]!.end;
        const a = stores.find((i) => within(i, pre)), b = stores.find((i) => within(i, ck));
        if (stores.length !== 2 || a === undefined || b === undefined) return undefined;
        init = const32(word(insts[a]!, 2));
        step = stepOf(word(insts[b]!, 2), (x) => {
          const l = def.get(x);
          const li = l ? insts.indexOf(l) : -1;
          return !!l && l.op === Op.Load && word(l, 3) === v && within(li, ck) && li < b;
        });
      }
      if (init === undefined || step === undefined) return undefined;
      // calls into functions with loops would multiply the bound: none allowed (conservative:
      // any call whose callee has an OpLoopMerge anywhere, or calls further)
      for (const k of body)
        for (let i = f.blocks[k]!.start; i < f.blocks[k]!.end; i++)
          if (insts[i]!.op === 57 /* OpFunctionCall */ && loopFns.has(word(insts[i]!, 3))) return undefined;
      const holds = (x: number) => CMP[c.op]!(left ? x : bound!, left ? bound! : x) === stay;
      let n = 0;
      for (let x = init; holds(x); x = (x + step) >>> 0) if (++n > SMALL_TRIPS) return undefined;
      return n;
    };
    const found = new Map<number, number>();
    const loops = [...headers].map(([h, m]) => ({ h, m, body: bodyOf(h, m), n: trips(h, m, bodyOf(h, m)) }))
      .sort((a, b) => index.get(a.h)! - index.get(b.h)!);
    for (const l of loops) {
      if (l.n === undefined) continue;
      let product = l.n;
      for (const o of loops) if (o !== l && found.has(o.h) && o.body.has(index.get(l.h)!)) product *= Math.max(o.n!, 1);
      if (product <= SMALL_TRIPS) found.set(l.h, l.n);
    }
    return found;
  }
  // Functions with a loop, or calling one (transitively).
  const loopFns = new Set<number>();
  {
    const calls = new Map<number, number[]>();
    let cur = -1;
    for (const ins of insts) {
      if (ins.op === Op.Function) cur = word(ins, 2);
      else if (ins.op === Op.LoopMerge) loopFns.add(cur);
      else if (ins.op === 57) calls.set(cur, [...(calls.get(cur) ?? []), word(ins, 3)]);
    }
    for (let grew = true; grew;) {
      grew = false;
      for (const [fid, cs] of calls) if (!loopFns.has(fid) && cs.some((x) => loopFns.has(x))) { loopFns.add(fid); grew = true; }
    }
  }
  interface Blk { label: number; start: number; end: number }
  interface Fn { id: number; blocks: Blk[] }
  let fn: Fn | null = null;
  const functions: Fn[] = [];
  let open: Blk | null = null;
  for (let i = 0; i < insts.length; i++) {
    const ins = insts[i]!;
    if (ins.op === Op.Function) fn = { id: word(ins, 2), blocks: [] };
    else if (ins.op === Op.FunctionEnd && fn) {
      functions.push(fn);
      fn = null;
    } else if (ins.op === Op.Label && fn) open = { label: word(ins, 1), start: i, end: -1 };
    else if (open && fn && TERMINATORS.has(ins.op)) {
      open.end = i;
      fn.blocks.push(open);
      open = null;
    }
  }
  const entryFn = entries[opts.entryIndex];
  for (const f of functions) {
    const index = new Map<number, number>(f.blocks.map((b, k) => [b.label, k]));
    const headers = new Map<number, number>();  // header label → merge label
    for (const b of f.blocks) {
      const prev = insts[b.end - 1]!;
      if (b.end - 1 > b.start && prev.op === Op.LoopMerge) headers.set(b.label, word(prev, 1));
    }
    // Unchecked small loops: header label → trip count, proven here from the output words alone:
    // the same pattern as the rewrite's (Rewriter::constTrip), written anew.
    const small = smallLoops(f, headers, index);
    const succ: number[][] = f.blocks.map(() => []);
    const cancelExits = new Set<string>();  // "from→merge" edges that only a cancel takes
    const targetsOf = (k: number): number[] => {
      const t = insts[f.blocks[k]!.end]!;
      if (t.op === Op.Branch) return [word(t, 1)];
      if (t.op === Op.BranchConditional) return [word(t, 2), word(t, 3)];
      if (t.op === Op.Switch) {
        const sel = def.get(word(t, 1));
        const wide = sel ? intWidth.get(word(sel, 1)) === 64 : false;
        const out = [word(t, 2)];
        for (let k2 = 3; k2 < t.wc; k2 += wide ? 3 : 2) out.push(word(t, k2 + (wide ? 2 : 1)));
        return out;
      }
      return [];
    };
    for (let k = 0; k < f.blocks.length; k++) {
      const b = f.blocks[k]!;
      const t = insts[b.end]!;
      let targets = targetsOf(k);
      if (t.op === Op.BranchConditional) {
        const h = word(t, 2);
        if (headers.has(h) && index.get(h)! <= k && word(t, 3) === headers.get(h)) {
          const ls: number[] = [];
          leaves(word(t, 1), ls);
          if (ls.some(isCancel)) {
            targets = [word(t, 3)];  // the instrumented back-edge: not a cycle edge
            if (ls.length === 1) cancelExits.add(`${b.label}>${word(t, 3)}`);
          }
        }
      }
      // an unchecked back-edge of a proven small loop: not a cycle edge either
      if (t.op === Op.Branch && small.has(word(t, 1)) && index.get(word(t, 1))! <= k) targets = [];
      for (const x of targets) {
        const j = index.get(x);
        if (j !== undefined) succ[k]!.push(j);
      }
      if (f.id === entryFn && t.op === Op.Return) {
        // the block must be the merge of a selection whose other arm does atomicMax(status)
        const ok = f.blocks.some((h) => {
          const m = insts[h.end - 1]!, br = insts[h.end]!;
          if (m.op !== Op.SelectionMerge || word(m, 1) !== b.label || br.op !== Op.BranchConditional) return false;
          const arm = f.blocks[index.get(word(br, 2)) ?? -1];
          if (!arm) return false;
          for (let i = arm.start; i < arm.end; i++)
            if (insts[i]!.op === Op.AtomicUMax && chainOf(word(insts[i]!, 3), ctl, 1))
              return opts.loopLimit === 0 || isProbeStatus(word(insts[i]!, 6));
          return false;
        });
        if (!ok) return `entry point return in block %${b.label} does not report a stop${opts.loopLimit ? ' (and the probe)' : ''}`;
      }
    }
    // Kahn: any block left is on a cycle that no instrumented back-edge cuts.
    const indeg = new Array<number>(f.blocks.length).fill(0);
    for (const sc of succ) for (const j of sc) indeg[j]!++;
    const queue = indeg.flatMap((d, k) => (d === 0 ? [k] : []));
    let seen = 0;
    while (queue.length) {
      const k = queue.pop()!;
      seen++;
      for (const j of succ[k]!) if (--indeg[j]! === 0) queue.push(j);
    }
    if (seen !== f.blocks.length) return `function %${f.id} has a loop without the stop check`;

  }
  return null;
}

// ---- the fuzz loop --------------------------------------------------------------------------------

export interface FuzzStats {
  iterations: number;
  accepted: number;
  byReason: Record<string, number>;
  byMutation: Record<string, { runs: number; accepted: number }>;
  validatorPassedInputs: number;  // inputs that certainly passed the validator (accepted, or refused by the analysis)
  uncheckedLoops: number;  // accepted modules with small constant loops left unchecked
  findings: { iteration: number; problem: string; mutations: string[] }[];
  ms: number;
}

// Reasons only the analysis after validation gives (INSTRUCTION comes from both sides: not counted).
const PAST_VALIDATOR = new Set<number>([R.OK, R.ENTRY_POINT, R.BINDING, R.PUSH_CONSTANTS, R.WORKGROUP_SIZE, R.SHARED_MEMORY, R.LOOP_FORM]);
const REASON_NAME = Object.fromEntries(Object.entries(R).map(([k, v]) => [v, k]));

function limitsFor(r: Prng): Limits & { cancelLoadEarly?: number } {
  const l: Limits & { cancelLoadEarly?: number } = { ...LIMITS, maxWgSize: [...LIMITS.maxWgSize] as [number, number, number] };
  l.loopLimit = r.chance(0.5) ? 65535 : r.chance(0.2) ? 1 + r.int(100) : 0;
  if (r.chance(0.2)) l.features = r.int(128);
  if (r.chance(0.1)) l.maxSharedBytes = r.int(40000);
  if (r.chance(0.1)) l.maxPushBytes = r.int(256);
  if (r.chance(0.1)) l.maxBindings = r.int(20);
  if (r.chance(0.1)) l.maxWgInvocations = 1 + r.int(2048);
  if (r.chance(0.1)) l.subgroupSize = r.pick([1, 4, 8, 32, 64]);
  if (r.chance(0.25)) l.cancelLoadEarly = 1; // the benchmark's variant must be as sound
  if (r.chance(0.3)) l.cancelEvery = r.pick([1, 2, 3, 64, 1000, 5000, 0xffffffff]); // the periodic check, any interval
  return l;
}

export function fuzz(
  seeds: readonly Uint32Array[],
  opts: { iterations: number; seed: number; onProgress?: (i: number, s: FuzzStats) => void; progressEvery?: number },
): FuzzStats {
  const stats: FuzzStats = {
    iterations: 0, accepted: 0, byReason: {}, byMutation: {}, validatorPassedInputs: 0, uncheckedLoops: 0, findings: [], ms: 0,
  };
  for (const m of MUTATION_NAMES) stats.byMutation[m] = { runs: 0, accepted: 0 };
  const t0 = performance.now();
  for (let it = 0; it < opts.iterations; it++) {
    const r = new Prng((opts.seed ^ Math.imul(it + 1, 0x9e3779b1)) >>> 0);
    let w = r.pick(seeds);
    const applied: string[] = [];
    const n = 1 + (r.chance(0.3) ? r.int(4) : 0);
    for (let k = 0; k < n; k++) {
      const name = r.pick(MUTATION_NAMES);
      applied.push(name);
      w = MUTATIONS[name]!(r, w, seeds);
    }
    const lim = limitsFor(r);
    const entry = r.chance(0.9) ? 0 : r.int(3);
    const spec = r.chance(0.2) ? new Uint32Array([0, 1 + r.int(64), 1, 1 + r.int(16), 2, r.int(64)]) : new Uint32Array(0);
    const res: Prepared = native.programPrepare(w, entry, spec, lim);
    const problem = check(res, w, entry, lim);
    const name = REASON_NAME[res.reason] ?? `reason${res.reason}`;
    stats.byReason[name] = (stats.byReason[name] ?? 0) + 1;
    if (PAST_VALIDATOR.has(res.reason)) stats.validatorPassedInputs++;
    for (const m of new Set(applied)) {
      stats.byMutation[m]!.runs++;
      if (res.reason === 0) stats.byMutation[m]!.accepted++;
    }
    if (res.reason === 0) stats.accepted++;
    if (res.reason === 0 && res.uncheckedLoops?.length) stats.uncheckedLoops++;
    let p = problem;
    if (!p && it % 97 === 0) {
      const again = native.programPrepare(w, entry, spec, lim);
      if (again.reason !== res.reason || again.message !== res.message ||
          (res.words && (!again.words || Buffer.compare(Buffer.from(res.words.buffer), Buffer.from(again.words.buffer)) !== 0)))
        p = 'not deterministic';
    }
    if (p && stats.findings.length < 50) stats.findings.push({ iteration: it, problem: p, mutations: applied });
    stats.iterations = it + 1;
    if (opts.onProgress && (it + 1) % (opts.progressEvery ?? 10000) === 0) opts.onProgress(it + 1, stats);
  }
  stats.ms = performance.now() - t0;
  return stats;
}

function check(res: Prepared, input: Uint32Array, entry: number, lim: Limits): string | null {
  if (typeof res !== 'object' || typeof res.reason !== 'number' || typeof res.message !== 'string') return 'malformed result';
  if (res.reason < 0 || res.reason > 17) return `unknown reason ${res.reason}`;
  if (res.message.includes('device bug')) return `rewrite invalid: ${res.message}`;
  if (res.reason !== 0) {
    if (res.words || res.entry) return 'refusal with words';
    if (!res.message) return 'refusal without a message';
    return null;
  }
  if (!res.words || !res.entry) return 'accepted without words/entry';
  const v = native.programValidate(res.words);
  if (v !== null) return `rewritten words fail validation: ${v}`;
  const e = res.entry;
  const inv = e.wg[0] * e.wg[1] * e.wg[2];
  if (e.wg.some((x, k) => x < 1 || x > lim.maxWgSize[k]!) || inv > lim.maxWgInvocations) return `workgroup ${e.wg} over limits`;
  if (e.sharedBytes > lim.maxSharedBytes) return 'shared over limit';
  if (e.pushBytes > lim.maxPushBytes) return 'push constants over limit';
  for (let k = 0; k < e.bindings.length; k++) {
    const b = e.bindings[k]!;
    if (b.binding >= lim.maxBindings || (k > 0 && b.binding <= e.bindings[k - 1]!.binding)) return 'bad bindings';
  }
  const s = verifyRewrite(res.words, { loopLimit: lim.loopLimit, entryIndex: entry });
  if (s) return `structure: ${s}`;
  if (res.words.length < input.length) return 'rewritten module shorter than the input';
  return null;
}
