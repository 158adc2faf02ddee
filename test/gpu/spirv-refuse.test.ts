// Every BAD_PROGRAM reason the SPIR-V front end gives (hw-spec §6.3.6), each from a real minimal
// module (glslangValidator or spirv-as), and the edge of each limit accepted. UNSUPPORTED, GRID,
// BUFFER, BINDING_WRITABLE and COMPILE are decided by the engine and the backend, not here.
import { describe, expect, it } from 'vitest';
import { GLSL, R, assemble, compileGlsl, prepare } from './spirv-helpers.ts';

const HEAD = '#version 450\nlayout(local_size_x = 64) in;\n';
const OUT = 'layout(set = 0, binding = 0) buffer B { float v[]; };\n';

function reason(words: Uint32Array, opts: Parameters<typeof prepare>[1] = {}): [number, string] {
  const r = prepare(words, opts);
  expect(r.message.length > 0).toBe(r.reason !== R.OK);
  if (r.reason !== R.OK) expect(r.words).toBeUndefined();
  return [r.reason, r.message];
}

// An assembled compute module around a body (types, decorations and functions as needed).
function asm(body: string, caps = 'OpCapability Shader\n', model = 'OpMemoryModel Logical GLSL450\n'): Uint32Array {
  return assemble(`${caps}${model}OpEntryPoint GLCompute %main "main"
OpExecutionMode %main LocalSize 1 1 1
${body}`);
}
const VOID_MAIN = `%void = OpTypeVoid
%fn = OpTypeFunction %void
%main = OpFunction %void None %fn
%l = OpLabel
OpReturn
OpFunctionEnd
`;

/** The words of a compiled module with one instruction's operand replaced. */
function patch(words: Uint32Array, opcode: number, operand: number, value: number, match?: (w: Uint32Array, off: number) => boolean): Uint32Array {
  const out = words.slice();
  for (let off = 5; off < out.length; off += out[off]! >>> 16)
    if ((out[off]! & 0xffff) === opcode && (!match || match(out, off))) {
      out[off + operand] = value;
      return out;
    }
  throw new Error(`no opcode ${opcode}`);
}

describe('programPrepare: refusals', () => {
  const good = compileGlsl(GLSL.forLoop!, 'vulkan1.1');

  it('MODULE_SIZE: shorter than a header, or over the device limit', () => {
    expect(reason(good.subarray(0, 4))[0]).toBe(R.MODULE_SIZE);
    expect(reason(new Uint32Array(0))[0]).toBe(R.MODULE_SIZE);
    expect(reason(good, { limits: { maxModuleBytes: good.length * 4 - 4 } })[0]).toBe(R.MODULE_SIZE);
    expect(reason(good, { limits: { maxModuleBytes: good.length * 4 } })[0]).toBe(R.OK);
  });

  it('INVALID: not SPIR-V, a version outside 1.0–1.5, bad framing, or the validator says no', () => {
    const p = (i: number, v: number) => { const w = good.slice(); w[i] = v; return w; };
    expect(reason(p(0, 0x12345678))).toEqual([R.INVALID, 'not a SPIR-V module (bad magic number)']);
    expect(reason(p(0, 0x03022307))[1]).toMatch(/big-endian/);
    expect(reason(p(1, 0x10600))[1]).toMatch(/not 1\.0 to 1\.5/);
    expect(reason(p(1, 0x20000))[0]).toBe(R.INVALID);
    expect(reason(p(3, 0))[1]).toMatch(/bound/);
    expect(reason(p(3, (1 << 21) + 1))[1]).toMatch(/bound/);
    expect(reason(p(5, good[5]! & 0xffff))[1]).toMatch(/word count 0/);
    expect(reason(p(5, (0xffff << 16) | (good[5]! & 0xffff)))[1]).toMatch(/runs past the end/);
    // a valid frame the validator refuses: an id used but never defined
    const [r, msg] = reason(patch(good, 62 /* OpStore */, 2, good[3]! + 5));
    expect(r).toBe(R.INVALID);
    expect(msg).toMatch(/^validator: /);
    // recursion (SPIR-V for Vulkan has none)
    expect(reason(asm(`%void = OpTypeVoid
%fn = OpTypeFunction %void
%f = OpFunction %void None %fn
%fl = OpLabel
%x = OpFunctionCall %void %f
OpReturn
OpFunctionEnd
%main = OpFunction %void None %fn
%l = OpLabel
%y = OpFunctionCall %void %f
OpReturn
OpFunctionEnd
`))[0]).toBe(R.INVALID);
  });

  it('CAPABILITY: outside the list, or without the PROG_FEATURES bit', () => {
    expect(reason(assemble('OpCapability Kernel\nOpCapability Addresses\nOpMemoryModel Physical64 OpenCL\n'))).toEqual([
      R.CAPABILITY, 'capability Kernel is not supported']);
    const bufref = compileGlsl(`#version 450
#extension GL_EXT_buffer_reference : require
layout(local_size_x = 1) in;
layout(buffer_reference) buffer Ptr { uint v; };
layout(push_constant) uniform P { Ptr p; } pc;
void main() { pc.p.v = 1; }`, 'vulkan1.2');
    expect(reason(bufref)).toEqual([R.CAPABILITY, 'capability PhysicalStorageBufferAddresses is not supported']);
    const dbl = compileGlsl(`${HEAD}layout(set = 0, binding = 0) buffer B { double v[]; };\nvoid main() { v[0] = 1.0lf; }`);
    expect(reason(dbl, { limits: { features: 0 } })[0]).toBe(R.CAPABILITY);
    expect(reason(dbl, { limits: { features: 1 /* FLOAT64 */ } })[0]).toBe(R.OK);
    const arith = compileGlsl(`#version 450
#extension GL_KHR_shader_subgroup_arithmetic : require
${HEAD.split('\n')[1]}
${OUT}void main() { v[0] = subgroupAdd(v[1]); }`);
    expect(reason(arith, { limits: { features: 0 } })[1]).toMatch(/GroupNonUniformArithmetic needs a device feature/);
    expect(reason(arith, { limits: { features: 1 << 5 /* SUBGROUP */ } })[0]).toBe(R.OK);
  });

  it('EXTENSION: an extension or extended instruction set outside the list', () => {
    expect(reason(assemble(`OpCapability Shader
%1 = OpExtInstImport "OpenCL.std"
OpMemoryModel Logical GLSL450
OpEntryPoint GLCompute %main "main"
OpExecutionMode %main LocalSize 1 1 1
${VOID_MAIN}`))).toEqual([R.EXTENSION, 'extended instruction set "OpenCL.std" is not supported']);
    expect(reason(asm(VOID_MAIN, 'OpCapability Shader\nOpExtension "SPV_EXT_descriptor_indexing"\n'))[0]).toBe(R.EXTENSION);
    expect(reason(asm(VOID_MAIN, 'OpCapability Shader\nOpExtension "SPV_KHR_storage_buffer_storage_class"\n'))[0]).toBe(R.OK);
  });

  it('INSTRUCTION: images, memory model, other stages, storage classes, inputs, huge locals, call trees', () => {
    const image = compileGlsl(`${HEAD}layout(set = 0, binding = 0, r32f) uniform image2D img;\nvoid main() { imageStore(img, ivec2(0), vec4(1)); }`);
    expect(reason(image)).toEqual([R.INSTRUCTION, 'OpTypeImage (opcode 25) is not allowed']);
    expect(reason(asm(VOID_MAIN, 'OpCapability Shader\n', 'OpMemoryModel Logical Simple\n'))[1]).toMatch(/memory model/);
    const frag = compileGlsl('#version 450\nlayout(location = 0) out vec4 c;\nvoid main() { c = vec4(1); }', 'vulkan1.1', undefined, 'frag');
    expect(reason(frag)[1]).toMatch(/is not GLCompute/);
    const output = asm(`%void = OpTypeVoid
%fn = OpTypeFunction %void
%float = OpTypeFloat 32
%po = OpTypePointer Output %float
%o = OpVariable %po Output
${VOID_MAIN.split('\n').slice(2).join('\n')}`);
    expect(reason(output)[1]).toMatch(/storage class Output/);
    const input = assemble(`OpCapability Shader
OpMemoryModel Logical GLSL450
OpEntryPoint GLCompute %main "main" %in
OpExecutionMode %main LocalSize 1 1 1
OpDecorate %in Location 0
%void = OpTypeVoid
%fn = OpTypeFunction %void
%float = OpTypeFloat 32
%pi = OpTypePointer Input %float
%in = OpVariable %pi Input
%main = OpFunction %void None %fn
%l = OpLabel
%x = OpLoad %float %in
OpReturn
OpFunctionEnd
`);
    expect(reason(input)[1]).toMatch(/not a compute built-in/);
    const big = compileGlsl(`${HEAD}${OUT}void main() { float t[20000]; for (int i = 0; i < 20000; i++) t[i] = v[i]; v[0] = t[int(v[1])]; }`);
    expect(reason(big)[1]).toMatch(/private and function variables take 80004 bytes/);
    const group = asm(`%g = OpDecorationGroup
%void = OpTypeVoid
%fn = OpTypeFunction %void
%main = OpFunction %void None %fn
%l = OpLabel
OpReturn
OpFunctionEnd
`.replace('%g = OpDecorationGroup\n', 'OpDecorate %g Restrict\n%g = OpDecorationGroup\n'));
    expect(reason(group)[1]).toMatch(/decoration group/);
    // 24 levels of functions each calling the next twice: 2^24 calls once inlined
    let calls = '';
    for (let k = 1; k <= 24; k++)
      calls += `%f${k} = OpFunction %void None %fn\n%l${k} = OpLabel\n%a${k} = OpFunctionCall %void %f${k - 1}\n%b${k} = OpFunctionCall %void %f${k - 1}\nOpReturn\nOpFunctionEnd\n`;
    const tree = asm(`%void = OpTypeVoid
%fn = OpTypeFunction %void
%f0 = OpFunction %void None %fn
%l0 = OpLabel
OpReturn
OpFunctionEnd
${calls}%main = OpFunction %void None %fn
%l = OpLabel
%c = OpFunctionCall %void %f24
OpReturn
OpFunctionEnd
`);
    expect(reason(tree)[1]).toMatch(/expands to \d+ instructions with its calls inlined/);
  });

  it('ENTRY_POINT: an index past the GLCompute entry points', () => {
    expect(reason(good, { entry: 1 })).toEqual([R.ENTRY_POINT, 'entry point 1 requested; the module has 1 GLCompute entry points']);
  });

  it('BINDING: uniform buffers, other sets, bindings past the limit, arrays of buffers', () => {
    const ubo = compileGlsl(`${HEAD}layout(set = 0, binding = 0) uniform U { float x; } u;\nlayout(set = 0, binding = 1) buffer B { float v[]; };\nvoid main() { v[0] = u.x; }`);
    expect(reason(ubo)[1]).toMatch(/uniform buffer/);
    expect(reason(compileGlsl(`${HEAD}layout(set = 2, binding = 0) buffer B { float v[]; };\nvoid main() { v[0] = 1; }`))[1]).toMatch(/descriptor set 2/);
    const b15 = compileGlsl(`${HEAD}layout(set = 0, binding = 15) buffer B { float v[]; };\nvoid main() { v[0] = 1; }`);
    expect(reason(b15)[0]).toBe(R.OK);
    expect(reason(b15, { limits: { maxBindings: 15 } })[1]).toMatch(/binding 15 is over/);
    const arr = compileGlsl(`${HEAD}layout(set = 0, binding = 0) buffer B { float v[]; } b[2];\nvoid main() { b[1].v[0] = 1; }`);
    expect(reason(arr)[1]).toMatch(/array of buffers/);
  });

  it('PUSH_CONSTANTS: a block larger than the device limit', () => {
    const src = (n: number) => `${HEAD}layout(push_constant) uniform P { float x[${n}]; } p;\n${OUT}void main() { v[0] = p.x[${n - 1}]; }`;
    expect(reason(compileGlsl(src(32)))[0]).toBe(R.OK);
    expect(reason(compileGlsl(src(33)))).toEqual([R.PUSH_CONSTANTS, 'push-constant block is 132 bytes (device: 128)']);
    expect(reason(compileGlsl(src(64)))[0]).toBe(R.PUSH_CONSTANTS);
  });

  it('WORKGROUP_SIZE: a dimension or the invocation count over the limit', () => {
    // (assembled: glslang also emits a WorkgroupSize constant, which overrides LocalSize)
    const size = (x: number, y: number, z: number) => assemble(`OpCapability Shader
OpMemoryModel Logical GLSL450
OpEntryPoint GLCompute %main "main"
OpExecutionMode %main LocalSize ${x} ${y} ${z}
${VOID_MAIN}`);
    expect(reason(size(2048, 1, 1))[1]).toMatch(/workgroup size 2048x1x1/);
    expect(reason(size(1, 1, 65))[0]).toBe(R.WORKGROUP_SIZE);
    expect(reason(size(1024, 2, 1))[1]).toMatch(/workgroup of 2048 invocations/);
    expect(reason(size(1024, 1, 1))[0]).toBe(R.OK);
    expect(reason(size(8, 8, 16))[0]).toBe(R.OK);
  });

  it('SHARED_MEMORY: Workgroup variables over the limit, exactly at it accepted', () => {
    const src = (n: number) => `${HEAD}shared float big[${n}];\n${OUT}void main() { big[gl_LocalInvocationID.x] = 1; barrier(); v[0] = big[3]; }`;
    expect(reason(compileGlsl(src(8192)))[0]).toBe(R.OK);
    expect(reason(compileGlsl(src(8193)))).toEqual([R.SHARED_MEMORY, 'shared variables take 32772 bytes (device: 32768)']);
    expect(reason(compileGlsl(src(65536)))[1]).toMatch(/262144 bytes/);
  });

  it('SPEC_CONSTANTS: more pairs than the device takes', () => {
    const spec = Array.from({ length: 65 }, (_, i) => [i, 1] as [number, number]);
    expect(reason(good, { spec })).toEqual([R.SPEC_CONSTANTS, '65 specialization constants (device: 64)']);
    expect(reason(good, { spec: spec.slice(0, 64) })[0]).toBe(R.OK);
  });

  it('LOOP_FORM: the validator already refuses every back-edge the rewrite could not handle', () => {
    // A back-edge by OpSwitch, and a continue construct left other than by its back-edge: the
    // two shapes LOOP_FORM exists for are invalid SPIR-V (SPIRV-Tools 2023.1), so they stop at
    // INVALID; LOOP_FORM remains for the front end's own failures (a rewrite that does not
    // validate), which the fuzzer checks never happen.
    const sw = asm(`%void = OpTypeVoid
%fn = OpTypeFunction %void
%uint = OpTypeInt 32 0
%u0 = OpConstant %uint 0
%main = OpFunction %void None %fn
%entry = OpLabel
OpBranch %h
%h = OpLabel
OpLoopMerge %m %c None
OpBranch %c
%c = OpLabel
OpSwitch %u0 %h 1 %m
%m = OpLabel
OpReturn
OpFunctionEnd
`);
    expect(reason(sw)[0]).toBe(R.INVALID);
    const exit = asm(`%void = OpTypeVoid
%fn = OpTypeFunction %void
%bool = OpTypeBool
%t = OpConstantTrue %bool
%main = OpFunction %void None %fn
%entry = OpLabel
OpBranch %h
%h = OpLabel
OpLoopMerge %m %c None
OpBranch %c
%c = OpLabel
OpBranchConditional %t %h %x
%x = OpLabel
OpBranch %m
%m = OpLabel
OpReturn
OpFunctionEnd
`);
    expect(reason(exit)[1]).toMatch(/continue/);
  });
});
