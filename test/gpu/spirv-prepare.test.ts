// The SPIR-V front end on modules it must accept: every loop shape at every SPIR-V target, with
// and without loop-cut detection, rewritten into modules that SPIRV-Tools (addon and spirv-val
// command line) accepts and whose structure verifyRewrite checks independently; the interface
// it reports; specialization; entry points.
import { beforeAll, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import fs from 'node:fs';
import path from 'node:path';
import { verifyRewrite } from './spirv-fuzz.ts';
import {
  ASM, GLSL, LIMITS, R, assemble, buildSeeds, compileGlsl, disassemble, optimize, prepare, repoRoot, spirvVal, type Limits,
} from './spirv-helpers.ts';

const LAVAPIPE_CAP = 65535;

let seeds: { name: string; words: Uint32Array }[] = [];
beforeAll(() => {
  seeds = buildSeeds();
}, 900_000);

function accepted(words: Uint32Array, opts: Parameters<typeof prepare>[1] = {}) {
  const r = prepare(words, opts);
  expect(r.message).toBe('');
  expect(r.reason).toBe(R.OK);
  return { entry: r.entry!, words: r.words! };
}

describe('programPrepare: accepted modules', () => {
  it('accepts every seed; the rewrite validates and carries the checks, with and without detection', () => {
    expect(seeds.length).toBeGreaterThan(60);
    const cliChecked = new Set<string>();
    for (const s of seeds) {
      for (const loopLimit of [0, LAVAPIPE_CAP]) {
        const r = prepare(s.words, { limits: { loopLimit } });
        expect(`${s.name}: ${r.reason} ${r.message}`).toBe(`${s.name}: 0 `);
        expect(native.programValidate(r.words!), s.name).toBeNull();
        expect(verifyRewrite(r.words!, { loopLimit, entryIndex: 0 }), s.name).toBeNull();
        // The command-line validator too, once per source family and mode (it is slow to start).
        const family = `${s.name.split('@')[0]}:${loopLimit}`;
        if (!cliChecked.has(family)) {
          cliChecked.add(family);
          const v = spirvVal(r.words!);
          expect(v.out, s.name).toBe('');
          expect(v.ok).toBe(true);
        }
      }
    }
  });

  it('the structural check notices what is missing (negative controls)', () => {
    const src = compileGlsl(GLSL.nested!, 'vulkan1.1');
    expect(verifyRewrite(src, { loopLimit: 0, entryIndex: 0 })).toMatch(/control variable/);
    const plain = accepted(src).words;
    expect(verifyRewrite(plain, { loopLimit: 0, entryIndex: 0 })).toBeNull();
    expect(verifyRewrite(plain, { loopLimit: LAVAPIPE_CAP, entryIndex: 0 })).toMatch(/probe/);
    // with detection: the probe that lost its DontUnroll (NIR could unroll it: nothing to cut)
    const probed = accepted(src, { limits: { loopLimit: LAVAPIPE_CAP } }).words;
    expect(verifyRewrite(probed, { loopLimit: LAVAPIPE_CAP, entryIndex: 0 })).toBeNull();
    const unrollable = probed.slice();
    let dont = 0;
    for (let off = 5; off < unrollable.length; off += unrollable[off]! >>> 16)
      if ((unrollable[off]! & 0xffff) === 246 /* OpLoopMerge */ && unrollable[off + 3] === 2) { unrollable[off + 3] = 0; dont++; }
    expect(dont).toBe(1);
    expect(verifyRewrite(unrollable, { loopLimit: LAVAPIPE_CAP, entryIndex: 0 })).toMatch(/probe/);
    // Point every access to control.cancel at control.status instead: no cycle is cut any more.
    const broken = plain.slice();
    let control = -1, one = -1;
    const zero = new Set<number>();
    for (let off = 5; off < broken.length; off += broken[off]! >>> 16) {
      const op = broken[off]! & 0xffff;
      if (op === 71 && broken[off + 2] === 34 && broken[off + 3] === 1) control = broken[off + 1]!;  // DescriptorSet 1
      if (op === 43 && broken[off + 3] === 0) zero.add(broken[off + 2]!);
      if (op === 43 && broken[off + 3] === 1) one = broken[off + 2]!;
    }
    let patched = 0;
    for (let off = 5; off < broken.length; off += broken[off]! >>> 16)
      if ((broken[off]! & 0xffff) === 65 && broken[off + 3] === control && zero.has(broken[off + 4]!)) {
        broken[off + 4] = one;
        patched++;
      }
    expect(patched).toBeGreaterThan(2);
    expect(verifyRewrite(broken, { loopLimit: 0, entryIndex: 0 })).toMatch(/without the stop check/);
  });

  it('rewrites a back-edge into a conditional exit that reads the cancel word atomically', () => {
    const { words } = accepted(compileGlsl(GLSL.forLoop!, 'vulkan1.1'));
    const text = disassemble(words);
    expect(text).toMatch(/OpName %\w+ "vugpu_control"/);
    expect(text).toMatch(/OpDecorate %\w+ DescriptorSet 1/);
    expect(text).toMatch(/OpAtomicLoad/);
    expect(text).toMatch(/OpAtomicUMax/);
    expect(text).not.toMatch(/DontUnroll/);
    // with loop-cut detection: the probe before the return, for (i = 0; i < (cancel | 4); i++),
    // and nothing else (no shared memory, no built-in)
    const detect = disassemble(accepted(compileGlsl(GLSL.forLoop!, 'vulkan1.1'), { limits: { loopLimit: LAVAPIPE_CAP } }).words);
    expect(detect).toMatch(/%(\w+) = OpAtomicLoad[^\n]*\s+%\w+ = OpIEqual %bool %\1 %uint_0\w*\s+%(\w+) = OpBitwiseOr %uint %\1 %uint_4\w*\s+OpBranch %(\w+)\s+%\3 = OpLabel\s+%(\w+) = OpPhi %uint %uint_0\w* %\w+ %\w+ %\w+\s+%(\w+) = OpULessThan %bool %\4 %\2\s+OpLoopMerge %\w+ %\w+ DontUnroll\s+OpBranchConditional %\5 /);
    expect(detect).not.toMatch(/OpVariable %\S+ Workgroup|LocalInvocationIndex/);
  });

  it('adds 3 instructions per back-edge (4 for a do-while); detection adds none to any loop', () => {
    const check = String.raw`%(\w+) = OpAccessChain %\S+ %vugpu_control %uint_0\w*\s+%(\w+) = OpAtomicLoad %uint %\1 %\w+ %\w+\s+%(\w+) = OpIEqual %bool %\2 %\w+\s+`;
    // cancelEvery 1: every back-edge loads the word (GPUs load it every 64th: the next test)
    const text = (src: string, loopLimit: number) =>
      disassemble(accepted(compileGlsl(src, 'vulkan1.1'), { limits: { loopLimit, cancelEvery: 1 } }).words);
    // for: …; cancel check; OpBranchConditional %ok %header %merge
    const forBack = new RegExp(`${check}OpBranchConditional %\\3 %\\w+ %\\w+\n`);
    expect(text(GLSL.forLoop!, 0)).toMatch(forBack);
    expect(text(GLSL.forLoop!, LAVAPIPE_CAP)).toMatch(forBack);
    // do-while: cond && ok
    const doBack = new RegExp(`${check}%(\\w+) = OpLogicalAnd %bool %\\w+ %\\3\\s+OpBranchConditional %\\4 `);
    expect(text(GLSL.doWhile!, 0)).toMatch(doBack);
    expect(text(GLSL.doWhile!, LAVAPIPE_CAP)).toMatch(doBack);
  });

  it('a back-edge loads the cancel word every 2^k-th time: a counter, a selection, an OpPhi', () => {
    const periodic = (mask: number) => new RegExp(String.raw`%(\w+) = OpLoad %uint %vugpu_backedges\s+%(\w+) = OpIAdd %uint %\1 %uint_1\w*\s+` +
      String.raw`OpStore %vugpu_backedges %\2\s+%(\w+) = OpBitwiseAnd %uint %\2 %uint_${mask}\w*\s+%(\w+) = OpIEqual %bool %\3 %uint_0\w*\s+` +
      String.raw`OpSelectionMerge %(\w+) None\s+OpBranchConditional %\4 %(\w+) %\5\s+%\6 = OpLabel\s+%(\w+) = OpAccessChain %\S+ %vugpu_control %uint_0\w*\s+` +
      String.raw`%(\w+) = OpAtomicLoad %uint %\7 %\w+ %\w+\s+OpBranch %\5\s+%\5 = OpLabel\s+%(\w+) = OpPhi %uint %\8 %\6 %uint_0\w* %\w+\s+` +
      String.raw`%(\w+) = OpIEqual %bool %\9 %uint_0\w*\s+`);
    const text = (src: string, limits: Partial<Limits>) => disassemble(accepted(compileGlsl(src, 'vulkan1.1'), { limits }).words);
    for (const [cancelEvery, mask] of [[0, 63], [8, 7], [100, 63], [4096, 1023]] as const) {
      const t = text(GLSL.forLoop!, { loopLimit: 0, cancelEvery });
      expect(t, `cancelEvery ${cancelEvery}`).toMatch(new RegExp(periodic(mask).source + String.raw`OpBranchConditional %\10 %\w+ %\w+\n`));
      expect(t).toMatch(/OpVariable %_ptr_Private_uint Private %uint_0/);
    }
    // do-while: cond && ok in the new block
    expect(text(GLSL.doWhile!, { loopLimit: 0 })).toMatch(new RegExp(periodic(63).source + String.raw`%(\w+) = OpLogicalAnd %bool %\w+ %\10\s+OpBranchConditional %\11 `));
    // With loop-cut detection (lavapipe) too (measured cheaper there since the detection is a
    // probe at the returns); the probe itself loads the word once
    expect(text(GLSL.forLoop!, { loopLimit: LAVAPIPE_CAP })).toMatch(new RegExp(periodic(63).source + String.raw`OpBranchConditional %\10 %\w+ %\w+\n`));
    // The structural check insists on the counter: one that stepped by 2 would not pass.
    const words = accepted(compileGlsl(GLSL.forLoop!, 'vulkan1.1'), { limits: { loopLimit: 0 } }).words;
    expect(verifyRewrite(words, { loopLimit: 0, entryIndex: 0 })).toBeNull();
    const broken = words.slice();
    let patched = 0;
    for (let off = 5; off < broken.length; off += broken[off]! >>> 16)
      if ((broken[off]! & 0xffff) === 43 && broken[off + 3] === 1) { broken[off + 3] = 2; patched++; }
    expect(patched).toBeGreaterThan(0);
    expect(verifyRewrite(broken, { loopLimit: 0, entryIndex: 0 })).not.toBeNull();
  });

  it('cancelLoadEarly (a benchmark switch) loads the cancel word in the loop header and keeps every check', () => {
    for (const s of seeds)
      for (const loopLimit of [0, LAVAPIPE_CAP]) {
        const r = native.programPrepare(s.words, 0, new Uint32Array(0), { ...LIMITS, loopLimit, cancelLoadEarly: 1 });
        expect(`${s.name}: ${r.reason} ${r.message}`).toBe(`${s.name}: 0 `);
        expect(native.programValidate(r.words!), s.name).toBeNull();
        expect(verifyRewrite(r.words!, { loopLimit, entryIndex: 0 }), s.name).toBeNull();
      }
    // the load follows the header's label (and OpPhis); the back-edge only compares
    const text = disassemble(native.programPrepare(compileGlsl(GLSL.forLoop!, 'vulkan1.1'), 0, new Uint32Array(0), { loopLimit: 0, cancelLoadEarly: 1 }).words!);
    expect(text).toMatch(/%(\w+) = OpLabel\s+%\w+ = OpAccessChain %\S+ %vugpu_control %uint_0\w*\s+%(\w+) = OpAtomicLoad[^\n]*\s+OpLoopMerge/);
    expect(text).toMatch(/%(\w+) = OpIEqual %bool %\w+ %uint_0\w*\s+OpBranchConditional %\1 /);
  });

  it('reports bindings (NonWritable on the variable or all members), push-constant and shared sizes', () => {
    for (const target of ['vulkan1.0', 'vulkan1.1', 'spirv1.5'] as const) {
      const { entry } = accepted(compileGlsl(GLSL.pushAndBindings!, target));
      expect(entry.name).toBe('main');
      expect(entry.wg).toEqual([64, 1, 1]);
      // uint n @0, float k @4, mat4 m @16 (stride 16), vec2 x[3] @80 (stride 8): 80 + 2·8 + 8
      expect(entry.pushBytes).toBe(104);
      expect(entry.bindings).toEqual([
        { binding: 0, writable: false },  // readonly buffer
        { binding: 1, writable: true },
        { binding: 3, writable: false },  // every member readonly
        { binding: 5, writable: true },   // writeonly is still written
      ]);
      // float tile[256] + vec3 pos[16] (vec3 array stride 16)
      expect(accepted(compileGlsl(GLSL.shared!, target)).entry.sharedBytes).toBe(256 * 4 + 16 * 16);
    }
  });

  it('specializes the workgroup size and shared arrays sized by spec constants', () => {
    const words = compileGlsl(GLSL.specSize!, 'vulkan1.1');
    let e = accepted(words).entry;
    expect(e.wg).toEqual([1, 1, 1]);
    expect(e.sharedBytes).toBe(1 * 4 + 16 * 4);  // tile[wg.x * wg.y] + extra[TILE]
    e = accepted(words, { spec: [[0, 16], [1, 4], [2, 100]] }).entry;
    expect(e.wg).toEqual([16, 4, 1]);
    expect(e.sharedBytes).toBe(64 * 4 + 100 * 4);
    expect(prepare(words, { spec: [[0, 2048]] }).reason).toBe(R.WORKGROUP_SIZE);
    expect(prepare(words, { spec: [[0, 0]] }).reason).toBe(R.WORKGROUP_SIZE);
    expect(prepare(words, { spec: [[0, 64], [1, 32]] }).reason).toBe(R.WORKGROUP_SIZE);  // 2048 invocations
    expect(prepare(words, { spec: [[2, 9000]] }).reason).toBe(R.SHARED_MEMORY);
    // The rewrite does not depend on the values (the backend passes them to Vulkan).
    expect(accepted(words, { spec: [[0, 16]] }).words).toEqual(accepted(words).words);
  });

  it('picks the entry point by index among the GLCompute entry points, instrumenting shared helpers', () => {
    const words = assemble(ASM.twoEntries!);
    const first = accepted(words, { entry: 0, limits: { loopLimit: LAVAPIPE_CAP } });
    expect(first.entry.name).toBe('first');
    expect(first.entry.wg).toEqual([8, 1, 1]);
    const second = accepted(words, { entry: 1, limits: { loopLimit: LAVAPIPE_CAP } });
    expect(second.entry.name).toBe('second');
    expect(second.entry.wg).toEqual([16, 4, 1]);
    expect(verifyRewrite(second.words, { loopLimit: LAVAPIPE_CAP, entryIndex: 1 })).toBeNull();
    expect(spirvVal(second.words).ok).toBe(true);
    expect(prepare(words, { entry: 2 }).reason).toBe(R.ENTRY_POINT);
  });

  it('handles single-block loops, reversed back-edges, OpPhi merges and unreachable merges', () => {
    for (const name of ['singleBlock', 'singleBlockInfinite', 'reversedBackEdge', 'phiMerge']) {
      for (const loopLimit of [0, LAVAPIPE_CAP]) {
        const { words } = accepted(assemble(ASM[name]!), { limits: { loopLimit } });
        expect(spirvVal(words).ok, name).toBe(true);
        expect(verifyRewrite(words, { loopLimit, entryIndex: 0 }), name).toBeNull();
        const text = disassemble(words);
        expect(text).not.toMatch(/OpUnreachable/);
        if (name === 'phiMerge') expect(text).toMatch(/OpPhi %\w+ %\w+ %\w+ %\w+ %\w+/);  // + undef from the new exit
      }
    }
    // spirv-opt output (SSA, merged blocks) of every shape
    for (const src of [GLSL.nested!, GLSL.switchLoop!, GLSL.doWhile!]) {
      const { words } = accepted(optimize(compileGlsl(src, 'vulkan1.1'), ['-O']), { limits: { loopLimit: LAVAPIPE_CAP } });
      expect(spirvVal(words).ok).toBe(true);
    }
  });

  it('keeps the SPIR-V version and spells the control block for it', () => {
    const v10 = accepted(compileGlsl(GLSL.forLoop!, 'vulkan1.0')).words;
    expect(v10[1]).toBe(0x10000);
    expect(disassemble(v10)).toMatch(/OpDecorate %\w+ BufferBlock/);  // SPIR-V 1.0: Uniform + BufferBlock
    const v15 = accepted(compileGlsl(GLSL.forLoop!, 'spirv1.5'), { limits: { loopLimit: 0 } }).words;
    expect(v15[1]).toBe(0x10500);
    // SPIR-V 1.4+: every global the entry point uses is in its interface, ours included
    const ep = disassemble(v15).split('\n').find((l) => l.includes('OpEntryPoint'))!;
    expect(ep).toMatch(/ %vugpu_control\b/);
    expect(ep).toMatch(/ %vugpu_backedges\b/);
    expect(disassemble(v10).split('\n').find((l) => l.includes('OpEntryPoint'))).not.toMatch(/vugpu/);
  });

  it('is deterministic, leaves its input alone, and never reads past a truncated module', () => {
    const words = compileGlsl(GLSL.helpers!, 'vulkan1.1');
    const copy = words.slice();
    const a = accepted(words, { limits: { loopLimit: LAVAPIPE_CAP } }).words;
    const b = accepted(words, { limits: { loopLimit: LAVAPIPE_CAP } }).words;
    expect(a).toEqual(b);
    expect(words).toEqual(copy);
    for (let n = 0; n < words.length; n++) {
      const r = prepare(words.subarray(0, n));
      expect(r.reason === R.MODULE_SIZE || r.reason === R.INVALID, `length ${n}`).toBe(true);
      expect(r.words).toBeUndefined();
    }
  });

  it('accepts the limits object partially, or not at all, and checks argument types', () => {
    const words = compileGlsl(GLSL.forLoop!, 'vulkan1.1');
    expect(native.programPrepare(words, 0, new Uint32Array(0), {}).reason).toBe(R.OK);
    expect(native.programPrepare(words, 0, new Uint32Array(0), { maxPushBytes: 2 }).reason).toBe(R.PUSH_CONSTANTS);
    expect(() => native.programPrepare(new Uint8Array(8) as unknown as Uint32Array, 0, new Uint32Array(0), {})).toThrow(TypeError);
    expect(() => native.programPrepare(words, 0, new Uint32Array(3), {})).toThrow(RangeError);
    expect(() => native.programPrepare(words, 0, new Uint32Array(0), { maxWgSize: [1, 2] as never })).toThrow(TypeError);
    expect(LIMITS.maxSharedBytes).toBe(32768);
  });
});

// Loop headers of a module in order, and how each one's back-edge branches: 'checked' (the
// rewrite's OpBranchConditional to the header or its merge) or 'plain' (the input's OpBranch).
function backEdges(w: Uint32Array): { header: number; kind: 'checked' | 'plain' }[] {
  const out: { header: number; kind: 'checked' | 'plain' }[] = [];
  const seen = new Set<number>();
  let label = 0;
  for (let off = 5; off < w.length; off += w[off]! >>> 16) {
    const op = w[off]! & 0xffff;
    if (op === 248) {
      label = w[off + 1]!;
      seen.add(label);
    }
    if (op === 246) out.push({ header: label, kind: 'plain' });
    const back = (t: number) => out.find((l) => l.header === t && seen.has(t));
    if (op === 249 && back(w[off + 1]!)) back(w[off + 1]!)!.kind = 'plain';
    if (op === 250 && (back(w[off + 2]!) || back(w[off + 3]!))) (back(w[off + 2]!) ?? back(w[off + 3]!))!.kind = 'checked';
  }
  return out;
}

const loopShader = (body: string) => `#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer B { float v[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
  uint g = gl_GlobalInvocationID.x;
  ${body}
}`;

describe('programPrepare: small constant loops on devices that do not cut loops', () => {
  const sgemm = () => compileGlsl(fs.readFileSync(path.join(repoRoot, 'guest/programs/sgemm.comp'), 'utf8'), 'vulkan1.1');
  const run = (words: Uint32Array, loopLimit: number) => {
    const r = prepare(words, { limits: { loopLimit } });
    expect(r.message).toBe('');
    expect(native.programValidate(r.words!)).toBeNull();
    expect(verifyRewrite(r.words!, { loopLimit, entryIndex: 0 })).toBeNull();
    return { unchecked: [...r.uncheckedLoops!], edges: backEdges(r.words!), words: r.words! };
  };

  it('sgemm: the 16-step inner loop keeps its plain back-edge, the k0 loop (bound: a push constant) is checked', () => {
    const r = run(sgemm(), 0);
    expect(r.edges.map((e) => e.kind)).toEqual(['checked', 'plain']);
    expect(r.unchecked).toEqual([r.edges[1]!.header]);
    // with loop-cut detection (lavapipe) too; the third loop is the probe before the return
    const d = run(sgemm(), LAVAPIPE_CAP);
    expect(d.edges.map((e) => e.kind)).toEqual(['checked', 'plain', 'checked']);
    expect(d.unchecked).toEqual([d.edges[1]!.header]);
    // negative control: TILE = 1000 in the rewritten words — the checker no longer proves the
    // inner loop small, so its cycle is one without a stop check
    const broken = r.words.slice();
    let patched = 0;
    for (let off = 5; off < broken.length; off += broken[off]! >>> 16)
      if ((broken[off]! & 0xffff) === 43 && broken[off]! >>> 16 === 4 && broken[off + 3] === 16) {
        broken[off + 3] = 1000;
        patched++;
      }
    expect(patched).toBe(1);
    expect(verifyRewrite(broken, { loopLimit: 0, entryIndex: 0 })).toMatch(/without the stop check/);
  });

  it('keeps the check on loops over 256 iterations, push-constant bounds and spec-constant bounds', () => {
    const over = run(compileGlsl(loopShader('for (uint i = 0u; i < 1000u; i++) v[g] += float(i);')), 0);
    expect(over.edges.map((e) => e.kind)).toEqual(['checked']);
    const at = run(compileGlsl(loopShader('for (uint i = 0u; i < 256u; i++) v[g] += float(i);')), 0);
    expect(at.edges.map((e) => e.kind)).toEqual(['plain']);
    const push = run(compileGlsl(loopShader('for (uint i = 0u; i < p.n; i++) v[g] += float(i);')), 0);
    expect(push.edges.map((e) => e.kind)).toEqual(['checked']);
    const spec = run(compileGlsl(loopShader('for (uint i = 0u; i < K; i++) v[g] += float(i);')
      .replace('void main', 'layout(constant_id = 3) const uint K = 8u;\nvoid main')), 0);
    expect(spec.edges.map((e) => e.kind)).toEqual(['checked']);
    // a step of 0 never ends; a loop that writes its counter in the body is not the pattern
    const still = run(compileGlsl(loopShader('for (uint i = 0u; i < 8u; i += 0u) v[g] += 1.0;')), 0);
    expect(still.edges.map((e) => e.kind)).toEqual(['checked']);
    const bodyWrite = run(compileGlsl(loopShader('for (uint i = 0u; i < 8u; i++) { v[g] += 1.0; if (v[g] > 3.0) i = 0u; }')), 0);
    expect(bodyWrite.edges.map((e) => e.kind)).toEqual(['checked']);
    // signed, counting down: 10 iterations
    const down = run(compileGlsl(loopShader('for (int i = 10; i > 0; i--) v[g] += float(i);')), 0);
    expect(down.edges.map((e) => e.kind)).toEqual(['plain']);
  });

  it('nested constant loops: the product of unchecked trip counts stays ≤ 256', () => {
    const body = (a: number, b: number) => `for (uint i = 0u; i < ${a}u; i++) for (uint j = 0u; j < ${b}u; j++) v[g] += float(i * j);`;
    const big = run(compileGlsl(loopShader(body(16, 32))), 0);  // 512: the inner one is checked
    expect(big.edges.map((e) => e.kind)).toEqual(['plain', 'checked']);
    const fits = run(compileGlsl(loopShader(body(16, 16))), 0);  // 256: neither
    expect(fits.edges.map((e) => e.kind)).toEqual(['plain', 'plain']);
    expect(fits.unchecked).toEqual(fits.edges.map((e) => e.header));
    // an unbounded loop around a small one: the small one is unchecked, the outer one checked
    const outer = run(compileGlsl(loopShader('for (uint i = 0u; i < p.n; i++) for (uint j = 0u; j < 16u; j++) v[g] += 1.0;')), 0);
    expect(outer.edges.map((e) => e.kind)).toEqual(['checked', 'plain']);
    // a small loop calling a function with a loop is checked (the bound would multiply)
    const call = run(compileGlsl(loopShader('for (uint i = 0u; i < 4u; i++) v[g] += f(i);')
      .replace('void main', 'float f(uint k) { float s = 0.0; for (uint j = 0u; j < p.n; j++) s += float(j * k); return s; }\nvoid main')), 0);
    expect(call.edges.filter((e) => e.kind === 'plain')).toEqual([]);
  });

  it('recognises the SSA form (OpPhi counter) of optimized modules', () => {
    const src = compileGlsl(loopShader('for (uint i = 0u; i < 100u; i++) v[g + i] += float(i);'));
    const ssa = optimize(src, ['--eliminate-local-single-block', '--eliminate-local-multi-store', '--eliminate-dead-code-aggressive']);
    expect(disassemble(ssa)).toMatch(/OpPhi/);
    const r = run(ssa, 0);
    expect(r.edges.map((e) => e.kind)).toEqual(['plain']);
    expect(run(ssa, LAVAPIPE_CAP).edges.map((e) => e.kind)).toEqual(['plain', 'checked']);  // + the probe
  });
});

describe('programPrepare: small constant loops on devices that cut loops (lavapipe)', () => {
  // The same rule as on GPUs: the probe at each return sees a cut of any loop, checked or not
  // (test/gpu/vulkan-direct.test.ts cuts inside an unchecked one).
  const run = (words: Uint32Array) => {
    const r = prepare(words, { limits: { loopLimit: LAVAPIPE_CAP } });
    expect(r.message).toBe('');
    expect(native.programValidate(r.words!)).toBeNull();
    expect(verifyRewrite(r.words!, { loopLimit: LAVAPIPE_CAP, entryIndex: 0 })).toBeNull();
    // the last loop is the probe (one per return of the entry point)
    return { unchecked: [...r.uncheckedLoops!], kinds: backEdges(r.words!).map((e) => e.kind).slice(0, -1), words: r.words! };
  };
  const shader = (body: string) => compileGlsl(loopShader(body));
  const inner = 'for (uint j = 0u; j < 16u; j++) v[g] += float(i * j);';

  it('a small loop keeps its plain back-edge wherever it is; only the probe gets DontUnroll', () => {
    const r = run(shader(`for (uint i = 0u; i < p.n; i++) { ${inner} }`));
    expect(r.kinds).toEqual(['checked', 'plain']);
    expect(r.unchecked).toHaveLength(1);
    expect(disassemble(r.words).match(/OpLoopMerge %\w+ %\w+ DontUnroll/g)).toHaveLength(1);
    expect(run(shader(inner.replace('i * j', 'j'))).kinds).toEqual(['plain']);
    expect(run(shader(`for (uint i = 0u; i < p.n; i++) { ${inner} if (v[g] > 9.0) break; }`)).kinds).toEqual(['checked', 'plain']);
    expect(run(shader(`uint i = 0u; do { ${inner} i++; } while (i < p.n);`)).kinds).toEqual(['checked', 'plain']);
  });

  it('puts a probe before every return of the entry point, and none in other functions', () => {
    const early = prepare(shader(`for (uint i = 0u; i < p.n; i++) { ${inner} if (v[g] > 9.0) return; }`), { limits: { loopLimit: LAVAPIPE_CAP } });
    expect(disassemble(early.words!).match(/DontUnroll/g)).toHaveLength(2);
    const helper = prepare(compileGlsl(GLSL.helpers!, 'vulkan1.1'), { limits: { loopLimit: LAVAPIPE_CAP } });
    expect(verifyRewrite(helper.words!, { loopLimit: LAVAPIPE_CAP, entryIndex: 0 })).toBeNull();
    expect(disassemble(helper.words!).match(/DontUnroll/g)).toHaveLength(1);
  });

  it('sgemm: nothing of the detection runs inside its loops', () => {
    const r = run(compileGlsl(fs.readFileSync(path.join(repoRoot, 'guest/programs/sgemm.comp'), 'utf8'), 'vulkan1.1'));
    expect(r.kinds).toEqual(['checked', 'plain']);
    const lines = disassemble(r.words).split('\n').map((l) => l.trim());
    // the same stores and atomics as the GPU's rewrite: the probe reuses the return's load
    const gpu = disassemble(prepare(compileGlsl(fs.readFileSync(path.join(repoRoot, 'guest/programs/sgemm.comp'), 'utf8'), 'vulkan1.1'),
      { limits: { loopLimit: 0 } }).words!).split('\n').map((l) => l.trim());
    const probe = lines.findIndex((l) => /OpBitwiseOr %uint %\w+ %uint_4/.test(l));
    expect(probe).toBeGreaterThan(0);
    expect(lines.filter((l) => /OpStore|OpAtomic/.test(l)).length).toBe(gpu.filter((l) => /OpStore|OpAtomic/.test(l)).length);
  });
});
