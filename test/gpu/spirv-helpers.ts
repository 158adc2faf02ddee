// Helpers for the SPIR-V front-end tests, the fuzzer and its bench runner: real modules from the
// real tools (glslangValidator, spirv-as, spirv-opt), checked with the real spirv-val.
import { execFileSync, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { native, type SpirvPrepared } from '../../src/native.ts';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** hw-spec §3.10 envelope, with lavapipe's loop cap when `loopLimit` is given. */
export const LIMITS = {
  maxModuleBytes: 1 << 20,
  maxBindings: 16,
  maxPushBytes: 128,
  maxSpecConstants: 64,
  maxWgInvocations: 1024,
  maxWgSize: [1024, 1024, 64] as [number, number, number],
  maxSharedBytes: 32768,
  features: 0x7f,
  loopLimit: 0,
  subgroupSize: 8,
  /** Back-edges between two cancel-word loads where loops are not cut (program.h; 0 = 64). */
  cancelEvery: 0,
};
export type Limits = typeof LIMITS;

/** BAD_PROGRAM reasons (hw-spec §6.3.6). */
export const R = {
  OK: 0, UNSUPPORTED: 1, MODULE_SIZE: 2, INVALID: 3, CAPABILITY: 4, EXTENSION: 5, INSTRUCTION: 6,
  ENTRY_POINT: 7, BINDING: 8, BINDING_WRITABLE: 9, PUSH_CONSTANTS: 10, WORKGROUP_SIZE: 11,
  SHARED_MEMORY: 12, SPEC_CONSTANTS: 13, GRID: 14, BUFFER: 15, COMPILE: 16, LOOP_FORM: 17,
} as const;

// Tool outputs are cached by content (tool, arguments, input) across runs: compiling is slow on
// a loaded machine (seconds per glslangValidator call) and the result never changes.
const cacheDir = path.join(os.tmpdir(), 'vugpu-spirv-cache');
function cached(key: unknown[], make: () => Uint32Array): Uint32Array {
  const file = path.join(cacheDir, `${crypto.createHash('sha256').update(JSON.stringify(key)).digest('hex')}.spv`);
  if (fs.existsSync(file)) return readWords(file);
  const words = make();
  fs.mkdirSync(cacheDir, { recursive: true });
  const part = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(part, words);
  fs.renameSync(part, file);
  return words;
}

let tmpDir: string | undefined;
function tmp(): string {
  tmpDir ??= fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-spirv-'));
  return tmpDir;
}
let serial = 0;

function run(cmd: string, args: string[], input?: string): { status: number; out: string } {
  const r = spawnSync(cmd, args, { encoding: 'utf8', input });
  return { status: r.status ?? -1, out: `${r.stdout ?? ''}${r.stderr ?? ''}` };
}

function readWords(file: string): Uint32Array {
  const b = fs.readFileSync(file);
  return new Uint32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
}

export type GlslTarget = 'vulkan1.0' | 'vulkan1.1' | 'vulkan1.2' | 'spirv1.5';

/** glslangValidator -V: a compute shader's source → SPIR-V words. `spirv1.5` = vulkan1.2 with
 * --target-env spirv1.5. `include` adds an include directory. */
export function compileGlsl(src: string, target: GlslTarget = 'vulkan1.1', include?: string, stage = 'comp'): Uint32Array {
  const incs = include ? fs.readdirSync(include).filter((f) => f.endsWith('.glsl')).sort().map((f) => fs.readFileSync(path.join(include, f), 'utf8')) : [];
  return cached(['glslang', target, src, incs, stage], () => compileGlslUncached(src, target, include, stage));
}

function compileGlslUncached(src: string, target: GlslTarget, include: string | undefined, stage: string): Uint32Array {
  const base = path.join(tmp(), `s${serial++}`);
  fs.writeFileSync(`${base}.${stage}`, src);
  const env = target === 'spirv1.5' ? ['--target-env', 'vulkan1.2', '--target-env', 'spirv1.5'] : ['--target-env', target];
  const r = run('glslangValidator', ['-V', ...env, ...(include ? [`-I${include}`] : []), `${base}.${stage}`, '-o', `${base}.spv`]);
  if (r.status !== 0) throw new Error(`glslangValidator failed:\n${r.out}`);
  return readWords(`${base}.spv`);
}

/** spirv-as: assembly text → words (target env e.g. 'spv1.3', 'vulkan1.1'). */
export function assemble(text: string, targetEnv = 'spv1.3'): Uint32Array {
  return cached(['spirv-as', targetEnv, text], () => assembleUncached(text, targetEnv));
}

function assembleUncached(text: string, targetEnv: string): Uint32Array {
  const base = path.join(tmp(), `a${serial++}`);
  fs.writeFileSync(`${base}.spvasm`, text);
  const r = run('spirv-as', ['--target-env', targetEnv, `${base}.spvasm`, '-o', `${base}.spv`]);
  if (r.status !== 0) throw new Error(`spirv-as failed:\n${r.out}`);
  return readWords(`${base}.spv`);
}

/** spirv-opt with the given passes (e.g. ['-O']): SSA form with OpPhi, merged blocks. */
export function optimize(words: Uint32Array, passes: string[]): Uint32Array {
  return cached(['spirv-opt', passes, Buffer.from(words.buffer, words.byteOffset, words.byteLength).toString('base64')], () => optimizeUncached(words, passes));
}

function optimizeUncached(words: Uint32Array, passes: string[]): Uint32Array {
  const base = path.join(tmp(), `o${serial++}`);
  fs.writeFileSync(`${base}.spv`, words);
  const r = run('spirv-opt', [...passes, '--target-env=vulkan1.2', `${base}.spv`, '-o', `${base}.opt.spv`]);
  if (r.status !== 0) throw new Error(`spirv-opt failed:\n${r.out}`);
  return readWords(`${base}.opt.spv`);
}

/** spirv-dis text (friendly names: %vugpu_control, %uint_0…; raw: numeric ids only). */
export function disassemble(words: Uint32Array, raw = false): string {
  const base = path.join(tmp(), `d${serial++}`);
  fs.writeFileSync(`${base}.spv`, words);
  return execFileSync('spirv-dis', [...(raw ? ['--raw-id'] : []), `${base}.spv`], { encoding: 'utf8' });
}

/** The spirv-val command line (Vulkan 1.2 environment, LocalSizeId allowed as prepare() does). */
export function spirvVal(words: Uint32Array): { ok: boolean; out: string } {
  const base = path.join(tmp(), `v${serial++}`);
  fs.writeFileSync(`${base}.spv`, words);
  const r = run('spirv-val', ['--target-env', 'vulkan1.2', '--allow-localsizeid', `${base}.spv`]);
  return { ok: r.status === 0, out: r.out };
}

export type Prepared = SpirvPrepared;

export function prepare(
  words: Uint32Array,
  opts: { entry?: number; spec?: [number, number][]; limits?: Partial<Limits> } = {},
): Prepared {
  const spec = new Uint32Array((opts.spec ?? []).flat());
  return native.programPrepare(words, opts.entry ?? 0, spec, { ...LIMITS, ...opts.limits });
}

/** Every compute shader of the repository (built-in kernels and sample guest programs). */
export function repoShaders(): { name: string; src: string; include: string }[] {
  const out: { name: string; src: string; include: string }[] = [];
  for (const dir of ['native/shaders/builtins', 'guest/programs']) {
    const abs = path.join(repoRoot, dir);
    if (!fs.existsSync(abs)) continue;
    for (const f of fs.readdirSync(abs).sort())
      if (f.endsWith('.comp'))
        out.push({ name: `${dir}/${f}`, src: fs.readFileSync(path.join(abs, f), 'utf8'), include: abs });
  }
  return out;
}

// ---- GLSL sources covering the loop and interface shapes --------------------------------------

export const GLSL: Record<string, string> = {
  forLoop: `#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer B { uint v[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
  uint s = 0;
  for (uint i = 0; i < p.n; i++) s += i * gl_GlobalInvocationID.x;
  v[gl_GlobalInvocationID.x] = s;
}`,
  whileLoop: `#version 450
layout(local_size_x = 32) in;
layout(set = 0, binding = 0) buffer B { uint v[]; };
void main() {
  uint x = gl_GlobalInvocationID.x + 1, steps = 0;
  while (x != 1) { x = (x & 1) == 0 ? x / 2 : 3 * x + 1; steps++; }
  v[gl_GlobalInvocationID.x] = steps;
}`,
  doWhile: `#version 450
layout(local_size_x = 16) in;
layout(set = 0, binding = 0) buffer B { uint v[]; };
void main() {
  uint x = v[gl_GlobalInvocationID.x];
  do { x = x * 1664525u + 1013904223u; } while ((x & 0xff) != 0);
  v[gl_GlobalInvocationID.x] = x;
}`,
  nested: `#version 450
layout(local_size_x = 8, local_size_y = 8) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) buffer C { float c[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
  float s = 0;
  for (uint i = 0; i < p.n; i++)
    for (uint j = 0; j < p.n; j++) {
      if (a[i * p.n + j] < 0) continue;
      s += a[i * p.n + j];
      if (s > 1e9) break;
    }
  c[gl_GlobalInvocationID.y * 64 + gl_GlobalInvocationID.x] = s;
}`,
  helpers: `#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer B { uint v[]; };
uint collatz(uint x) { uint n = 0; while (x > 1) { x = (x & 1) == 0 ? x / 2 : 3 * x + 1; n++; } return n; }
uint sum(uint k) { uint s = 0; for (uint i = 0; i < k; i++) s += collatz(i); return s; }
void main() { v[gl_GlobalInvocationID.x] = sum(gl_GlobalInvocationID.x); }`,
  earlyReturn: `#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer B { uint v[]; };
layout(push_constant) uniform P { uint n, limit; } p;
void main() {
  uint g = gl_GlobalInvocationID.x;
  if (g >= p.n) return;
  for (uint i = 0; i < 1000; i++) {
    if (v[i] == g) { v[g] = i; return; }
  }
  v[g] = 0xffffffffu;
}`,
  infinite: `#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer B { uint v[]; };
void main() { uint i = 0; while (true) { v[i % 16] = i; i++; } }`,
  shared: `#version 450
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) buffer B { float v[]; };
shared float tile[256];
shared vec3 pos[16];
void main() {
  uint l = gl_LocalInvocationID.x;
  tile[l] = v[gl_GlobalInvocationID.x];
  barrier();
  for (uint s = 128; s > 0; s >>= 1) { if (l < s) tile[l] += tile[l + s]; barrier(); }
  if (l < 16) pos[l] = vec3(tile[0]);
  if (l == 0) v[gl_WorkGroupID.x] = tile[0] + pos[3].y;
}`,
  pushAndBindings: `#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) buffer B { float b[]; } ;
layout(set = 0, binding = 3) buffer C { readonly float c0; readonly float c[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };
layout(push_constant) uniform P { uint n; float k; mat4 m; vec2 x[3]; } p;
void main() {
  uint g = gl_GlobalInvocationID.x;
  if (g < p.n) { b[g] = a[g] * p.k + c[g] + c0 + p.m[1][2] + p.x[2].y; d[g] = 1; }
}`,
  specSize: `#version 450
layout(local_size_x_id = 0, local_size_y_id = 1) in;
layout(constant_id = 2) const uint TILE = 16;
layout(set = 0, binding = 0) buffer B { float v[]; };
shared float tile[gl_WorkGroupSize.x * gl_WorkGroupSize.y];
shared float extra[TILE];
void main() {
  uint l = gl_LocalInvocationIndex;
  tile[l] = v[l];
  extra[l % TILE] = 1;
  barrier();
  float s = 0;
  for (uint i = 0; i < gl_WorkGroupSize.x; i++) s += tile[i] + extra[i % TILE];
  v[gl_GlobalInvocationID.x] = s;
}`,
  subgroup: `#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer B { uint v[]; };
void main() {
  uint s = 0;
  for (uint i = 0; i < 4; i++) s += subgroupAdd(v[gl_GlobalInvocationID.x] + i) + gl_SubgroupID;
  v[gl_GlobalInvocationID.x] = s;
}`,
  switchLoop: `#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer B { uint v[]; };
void main() {
  uint s = 0;
  for (uint i = 0; i < v[0]; i++) {
    switch (v[i] & 3) {
      case 0: s += 1; break;
      case 1: s *= 3; continue;
      case 2: return;
      default: s ^= i;
    }
    s++;
  }
  v[gl_GlobalInvocationID.x] = s;
}`,
};

/** Seeds for the fuzzer: every GLSL source above at several targets, some through spirv-opt -O
 * (SSA, OpPhi in merge blocks), the repository's shaders, and hand-assembled modules. */
export function buildSeeds(): { name: string; words: Uint32Array }[] {
  const seeds: { name: string; words: Uint32Array }[] = [];
  for (const [name, src] of Object.entries(GLSL)) {
    const targets: GlslTarget[] = name === 'subgroup' ? ['vulkan1.1', 'spirv1.5'] : ['vulkan1.0', 'vulkan1.1', 'spirv1.5'];
    for (const t of targets) seeds.push({ name: `${name}@${t}`, words: compileGlsl(src, t) });
    seeds.push({ name: `${name}@opt`, words: optimize(compileGlsl(src, 'vulkan1.1'), ['-O']) });
  }
  for (const s of repoShaders()) {
    try {
      seeds.push({ name: s.name, words: compileGlsl(s.src, 'vulkan1.1', s.include) });
    } catch {
      // a shader that does not compile here is another test's business
    }
  }
  for (const [name, text] of Object.entries(ASM)) seeds.push({ name: `asm:${name}`, words: assemble(text) });
  return seeds;
}

// ---- hand-assembled modules: shapes glslang does not produce --------------------------------

const ASM_HEAD = `OpCapability Shader
OpMemoryModel Logical GLSL450
`;
const ASM_TYPES = `%void = OpTypeVoid
%fn = OpTypeFunction %void
%uint = OpTypeInt 32 0
%bool = OpTypeBool
%u0 = OpConstant %uint 0
%u1 = OpConstant %uint 1
%u100 = OpConstant %uint 100
%rt = OpTypeRuntimeArray %uint
%blk = OpTypeStruct %rt
%pblk = OpTypePointer StorageBuffer %blk
%pu = OpTypePointer StorageBuffer %uint
%buf = OpVariable %pblk StorageBuffer
`;
const ASM_DECO = `OpDecorate %rt ArrayStride 4
OpMemberDecorate %blk 0 Offset 0
OpDecorate %blk Block
OpDecorate %buf DescriptorSet 0
OpDecorate %buf Binding 0
`;

export const ASM: Record<string, string> = {
  // A single-block loop whose header is its own continue target and back-edge (do-while form).
  singleBlock: `${ASM_HEAD}OpEntryPoint GLCompute %main "main"
OpExecutionMode %main LocalSize 1 1 1
${ASM_DECO}${ASM_TYPES}%main = OpFunction %void None %fn
%entry = OpLabel
OpBranch %h
%h = OpLabel
%i = OpPhi %uint %u0 %entry %i1 %h
%i1 = OpIAdd %uint %i %u1
%c = OpULessThan %bool %i1 %u100
OpLoopMerge %m %h None
OpBranchConditional %c %h %m
%m = OpLabel
%p = OpAccessChain %pu %buf %u0 %u0
OpStore %p %i1
OpReturn
OpFunctionEnd
`,
  // An infinite single-block loop: OpBranch to itself; its merge block is unreachable.
  singleBlockInfinite: `${ASM_HEAD}OpEntryPoint GLCompute %main "main"
OpExecutionMode %main LocalSize 1 1 1
${ASM_DECO}${ASM_TYPES}%main = OpFunction %void None %fn
%entry = OpLabel
OpBranch %h
%h = OpLabel
OpLoopMerge %m %h None
OpBranch %h
%m = OpLabel
OpUnreachable
OpFunctionEnd
`,
  // The back-edge's conditional branch names the merge first (continue when false), and the merge
  // block has an OpPhi.
  reversedBackEdge: `${ASM_HEAD}OpEntryPoint GLCompute %main "main"
OpExecutionMode %main LocalSize 4 1 1
${ASM_DECO}${ASM_TYPES}%main = OpFunction %void None %fn
%entry = OpLabel
OpBranch %h
%h = OpLabel
%i = OpPhi %uint %u0 %entry %i1 %cont
OpLoopMerge %m %cont None
OpBranch %body
%body = OpLabel
%i1 = OpIAdd %uint %i %u1
OpBranch %cont
%cont = OpLabel
%done = OpUGreaterThanEqual %bool %i1 %u100
OpBranchConditional %done %m %h
%m = OpLabel
%r = OpPhi %uint %i1 %cont
%p = OpAccessChain %pu %buf %u0 %u0
OpStore %p %r
OpReturn
OpFunctionEnd
`,
  // A plain back-edge (OpBranch) whose merge block has an OpPhi: the rewrite must add an incoming
  // value for the new exit edge.
  phiMerge: `${ASM_HEAD}OpEntryPoint GLCompute %main "main"
OpExecutionMode %main LocalSize 4 1 1
${ASM_DECO}${ASM_TYPES}%main = OpFunction %void None %fn
%entry = OpLabel
OpBranch %h
%h = OpLabel
%i = OpPhi %uint %u0 %entry %i1 %cont
OpLoopMerge %m %cont None
OpBranch %test
%test = OpLabel
%c = OpULessThan %bool %i %u100
OpBranchConditional %c %body %m
%body = OpLabel
%i1 = OpIAdd %uint %i %u1
OpBranch %cont
%cont = OpLabel
OpBranch %h
%m = OpLabel
%r = OpPhi %uint %i %test
%p = OpAccessChain %pu %buf %u0 %u0
OpStore %p %r
OpReturn
OpFunctionEnd
`,
  // Two GLCompute entry points sharing a helper with a loop; the second has its own size.
  twoEntries: `${ASM_HEAD}OpEntryPoint GLCompute %first "first"
OpEntryPoint GLCompute %second "second"
OpExecutionMode %first LocalSize 8 1 1
OpExecutionMode %second LocalSize 16 4 1
${ASM_DECO}${ASM_TYPES}%hfn = OpTypeFunction %uint %uint
%helper = OpFunction %uint None %hfn
%n = OpFunctionParameter %uint
%hentry = OpLabel
OpBranch %hh
%hh = OpLabel
%k = OpPhi %uint %u0 %hentry %k1 %hc
OpLoopMerge %hm %hc None
OpBranch %hb
%hb = OpLabel
%k1 = OpIAdd %uint %k %u1
OpBranch %hc
%hc = OpLabel
%more = OpULessThan %bool %k1 %n
OpBranchConditional %more %hh %hm
%hm = OpLabel
OpReturnValue %k1
OpFunctionEnd
%first = OpFunction %void None %fn
%e1 = OpLabel
%v1 = OpFunctionCall %uint %helper %u100
%p1 = OpAccessChain %pu %buf %u0 %u0
OpStore %p1 %v1
OpReturn
OpFunctionEnd
%second = OpFunction %void None %fn
%e2 = OpLabel
%p2 = OpAccessChain %pu %buf %u0 %u1
OpStore %p2 %u1
OpReturn
OpFunctionEnd
`,
};
