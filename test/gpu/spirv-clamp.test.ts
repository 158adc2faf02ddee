// The buffer index clamp (native/src/spirv/clamp.cc, hw-spec §6.3.1 step 4): lavapipe computes
// buffer offsets in 32 bits, so d[g + 0x3fffffff] on a uint array wrapped back to d[g - 1]. The
// front end clamps every dynamic buffer element index to 2^28 / stride, which stays out of bounds.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import type { JobCompletion, MapWindow } from '../../src/native.ts';
import { R, assemble, compileGlsl, disassemble, prepare, spirvVal } from './spirv-helpers.ts';

const FAR = `#version 450
layout(local_size_x = 32) in;
layout(set = 0, binding = 0) buffer D { uint d[]; };
layout(set = 0, binding = 1) buffer O { uint o[]; };
layout(set = 0, binding = 2) buffer V { vec4 v[]; };
void main() {
  uint g = gl_GlobalInvocationID.x;
  o[g] = d[g + 0x3fffffffu];          // wrapped to d[g - 1]
  o[32u + g] = d[g];                  // in bounds: must still read
  o[64u + g] = uint(v[g + 0x10000000u].y);  // vec4 stride 16: wrapped to v[g]
  o[96u + g] = d[5];                  // constant in range: left alone
  d[g + 0x40000000u] = 0xdeadbeefu;   // wrapped to d[g]
  v[g + 0x10000000u].x = 7.0;         // wrapped to v[g]
}`;

describe('buffer index clamp: the module', () => {
  it('clamps dynamic buffer indices with OpULessThan/OpSelect before the chain; stays valid', () => {
    const r = prepare(compileGlsl(FAR));
    expect(r.message).toBe('');
    expect(r.reason).toBe(R.OK);
    const words = r.words!;
    expect(native.programValidate(words)).toBeNull();
    expect(spirvVal(words).ok).toBe(true);
    const dis = disassemble(words, true).split('\n');
    const chains = dis.filter((l) => /Op(InBounds)?AccessChain/.test(l));
    // Each clamped chain uses a select result defined two lines above it, after an OpULessThan.
    let clamped = 0;
    for (let i = 0; i < dis.length; i++) {
      const m = /OpAccessChain %\d+ %\d+ (.*)$/.exec(dis[i]);
      if (!m) continue;
      for (const id of m[1].split(' ')) {
        const def = dis.findIndex((l) => l.trim().startsWith(`${id} = OpSelect`));
        if (def < 0) continue;
        expect(def).toBeLessThan(i);
        const cmp = /OpSelect %\d+ (%\d+) /.exec(dis[def])![1];
        expect(dis[def - 1].trim().startsWith(`${cmp} = OpULessThan`)).toBe(true);
        clamped++;
      }
    }
    // d[g + 0x3fffffff], o[32 + g], o[64 + g], v[g + 0x10000000] twice, o[96 + g], d[g + 0x40000000],
    // o[g], d[g]: every dynamic element index; d[5] is not among them.
    expect(clamped).toBe(9);
    expect(chains.length).toBeGreaterThanOrEqual(clamped);
    // The maxima: 2^28 / 4 for uint, 2^28 / 16 for vec4 (and the vec4 component is constant).
    const text = dis.join('\n');
    expect(text).toMatch(/OpConstant %\d+ 67108864\b/);
    expect(text).toMatch(/OpConstant %\d+ 16777216\b/);
  });

  it('clamps 64-bit indices with a 64-bit constant', () => {
    // GLSL cannot index with a 64-bit integer; SPIR-V can (a signed one: negative = huge).
    const r = prepare(assemble(`
OpCapability Shader
OpCapability Int64
OpMemoryModel Logical GLSL450
OpEntryPoint GLCompute %main "main"
OpExecutionMode %main LocalSize 1 1 1
OpDecorate %arr ArrayStride 4
OpMemberDecorate %D 0 Offset 0
OpDecorate %D Block
OpDecorate %buf DescriptorSet 0
OpDecorate %buf Binding 0
OpMemberDecorate %P 0 Offset 0
OpDecorate %P Block
%void = OpTypeVoid
%fn = OpTypeFunction %void
%uint = OpTypeInt 32 0
%long = OpTypeInt 64 1
%arr = OpTypeRuntimeArray %uint
%D = OpTypeStruct %arr
%pD = OpTypePointer StorageBuffer %D
%buf = OpVariable %pD StorageBuffer
%P = OpTypeStruct %long
%pP = OpTypePointer PushConstant %P
%pc = OpVariable %pP PushConstant
%pPl = OpTypePointer PushConstant %long
%pU = OpTypePointer StorageBuffer %uint
%c0 = OpConstant %uint 0
%c1 = OpConstant %uint 1
%main = OpFunction %void None %fn
%e = OpLabel
%pi = OpAccessChain %pPl %pc %c0
%i = OpLoad %long %pi
%p = OpAccessChain %pU %buf %c0 %i
OpStore %p %c1
OpReturn
OpFunctionEnd
`));
    expect(r.message).toBe('');
    expect(native.programValidate(r.words!)).toBeNull();
    const dis = disassemble(r.words!);
    expect(dis).toMatch(/OpULessThan/);
    expect(dis).toMatch(/OpConstant %long 67108864\b/);
    expect(dis).toMatch(/OpSelect %long/);
  });
});

const devices = native.vulkanDevices();
const lavapipe = devices.find((d) => d.driver === 'llvmpipe');

describe.skipIf(!lavapipe)('buffer index clamp: on lavapipe', () => {
  const PAGE = 4096;
  const MEM = 16 * PAGE;
  let memFd = -1;
  let mem: Uint8Array;
  let win: MapWindow;
  const done = new Map<number, JobCompletion>();
  const waiting = new Map<number, (c: JobCompletion) => void>();
  const completion = (job: number): Promise<JobCompletion> =>
    done.has(job) ? Promise.resolve(done.get(job)!) : new Promise((res) => waiting.set(job, res));

  beforeAll(() => {
    const r = native.vulkanOpen({ device: 'llvmpipe' });
    if (!r.ok) throw new Error(`vulkanOpen: ${r.error}`);
    native.poolStart(1, (batch) => {
      for (const c of batch) {
        done.set(c.job, c);
        waiting.get(c.job)?.(c);
        waiting.delete(c.job);
      }
    });
    memFd = native.memfdCreate('clamp-mem', MEM);
    mem = new Uint8Array(native.mmap(memFd, MEM, 0));
    win = native.mapWindow([{ fd: memFd, offset: 0, length: MEM }], false);
  });

  afterAll(() => {
    native.poolStop();
    native.vulkanClose();
    if (win) native.unmapWindow(win.id);
    if (mem) native.munmap(mem.buffer as ArrayBuffer);
    if (memFd >= 0) native.close(memFd);
  });

  it('far reads return 0 and far writes change nothing, inside or outside the binding', async () => {
    const slot = 1;
    const c = await completion(native.submitProgramCompile({ slot, words: compileGlsl(FAR), entryIndex: 0 }));
    expect(native.programInfo(slot)?.message).toBe('');
    expect(c.status).toBe(0);
    // Bindings with guard bytes around each: d is 4128 bytes (1032 words), v 32 vec4s.
    const [od, oo, ov] = [256, 8192, 12288];
    const dLen = 4128, oLen = 128 * 4, vLen = 32 * 16;
    mem.fill(0xee);
    const d = new Uint32Array(mem.buffer, od, dLen / 4);
    for (let i = 0; i < d.length; i++) d[i] = 0x1000 + i;
    const v = new Float32Array(mem.buffer, ov, vLen / 4);
    for (let i = 0; i < v.length; i++) v[i] = 100 + i;
    const before = mem.slice();
    const job = native.submitDispatch({
      slot,
      windows: [od, oo, ov].map((o) => win.address + BigInt(o)),
      lengths: [dLen, oLen, vLen],
      grid: [1, 1, 1],
    });
    const r = await completion(job);
    expect(r.status).toBe(0);
    const o = new Uint32Array(mem.buffer, oo, 128);
    const expected = new Uint32Array(128);
    for (let g = 0; g < 32; g++) {
      expected[32 + g] = 0x1000 + g;
      expected[96 + g] = 0x1000 + 5;
    }
    expect([...o]).toEqual([...expected]);
    // Nothing else in memory changed: d and v keep their words, the guards their bytes.
    let changed = 0;
    for (let i = 0; i < MEM; i++) if ((i < oo || i >= oo + oLen) && mem[i] !== before[i]) changed++;
    expect(changed).toBe(0);
    native.programRelease(slot);
  });
});
