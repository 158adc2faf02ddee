// The Vulkan program backend on a real device (lavapipe here): real GLSL compute shaders
// compiled with glslangValidator, real memfd-backed windows imported zero-copy, real pool
// threads. Skipped only when the Vulkan loader sees no device.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { native, ECANCELED } from '../src/native.ts';
import type { JobCompletion, MapWindow, VulkanDeviceInfo } from '../src/native.ts';

const PAGE = 4096;
const EINVAL = 22;
const ELOOP = 40;
const R_INVALID = 3;
const R_MODULE_SIZE = 2;
const R_ENTRY_POINT = 7;

const devices = native.vulkanDevices();
if (devices.length === 0) console.log(`native-vulkan: skipped, no Vulkan device (${devices.reason ?? 'unknown'})`);

const dir = mkdtempSync(path.join(tmpdir(), 'vugpu-vk-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Compile GLSL compute source to SPIR-V words with glslangValidator (Vulkan 1.1 target). */
function glsl(name: string, src: string): Uint32Array {
  const file = path.join(dir, `${name}.comp`);
  const out = path.join(dir, `${name}.spv`);
  writeFileSync(file, src);
  execFileSync('glslangValidator', ['-V', '--target-env', 'vulkan1.1', '-o', out, file], { stdio: 'pipe' });
  const b = readFileSync(out);
  return new Uint32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
}

const VADD = `#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) writeonly buffer C { float c[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < p.n) c[i] = a[i] + b[i];
}`;

describe.skipIf(devices.length === 0)('Vulkan program backend', () => {
  let info: VulkanDeviceInfo;
  const completions = new Map<number, JobCompletion>();
  let nextSlot = 1;
  // One memfd as "guest memory": a JS view (mmap) and an engine-style window (mapWindow).
  const MEM = 64 * PAGE;
  let memFd = -1;
  let mem: Uint8Array;
  let win: MapWindow;

  const waiting = new Map<number, (c: JobCompletion) => void>();
  /** The job's completion: resolved from the pool's callback (no polling, so latency is real). */
  function completion(job: number, ms = 30_000): Promise<JobCompletion> {
    const c = completions.get(job);
    if (c) return Promise.resolve(c);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`job ${job}: no completion in ${ms} ms`)), ms);
      waiting.set(job, (x) => {
        clearTimeout(t);
        resolve(x);
      });
    });
  }

  async function compile(words: Uint32Array, opts: { spec?: number[]; entryIndex?: number } = {}): Promise<{ slot: number; c: JobCompletion }> {
    const slot = nextSlot++;
    const job = native.submitProgramCompile({
      slot,
      words,
      entryIndex: opts.entryIndex ?? 0,
      spec: opts.spec ? Uint32Array.from(opts.spec) : undefined,
    });
    return { slot, c: await completion(job) };
  }

  async function compileOk(words: Uint32Array, opts: { spec?: number[] } = {}): Promise<number> {
    const { slot, c } = await compile(words, opts);
    expect(native.programInfo(slot)?.message ?? 'pending').toBe('');
    expect(c.status).toBe(0);
    return slot;
  }

  /** Address inside the window of byte offset `off` of the memfd. */
  const at = (off: number): bigint => win.address + BigInt(off);
  const u32 = (off: number, n: number): Uint32Array => new Uint32Array(mem.buffer, off, n);
  const f32 = (off: number, n: number): Float32Array => new Float32Array(mem.buffer, off, n);

  function dispatch(slot: number, bufs: [number, number][], grid: [number, number, number], params?: Uint8Array): number {
    return native.submitDispatch({
      slot,
      windows: bufs.map(([o]) => at(o)),
      lengths: bufs.map(([, l]) => l),
      params,
      grid,
    });
  }

  const u32Params = (...v: number[]): Uint8Array => new Uint8Array(Uint32Array.from(v).buffer);

  beforeAll(() => {
    const lavapipe = devices.find((d) => d.driver === 'llvmpipe');
    const r = native.vulkanOpen(lavapipe ? { device: 'llvmpipe' } : {});
    if (!r.ok) throw new Error(`vulkanOpen: ${r.error}`);
    info = r.info;
    native.poolStart(2, (batch) => {
      for (const c of batch) {
        completions.set(c.job, c);
        waiting.get(c.job)?.(c);
        waiting.delete(c.job);
      }
    });
    memFd = native.memfdCreate('vk-guest-mem', MEM);
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

  it('opens the device and reports features and limits within the envelope', () => {
    console.log(`vulkan device: ${info.name}, ${info.driver} ${info.driverInfo}, API ${info.api}, ` +
      `features 0x${info.limits.features.toString(16)}, subgroup ${info.limits.subgroupSize}, loop limit ${info.limits.loopLimit}`);
    const l = info.limits;
    expect(l.maxBindings).toBeGreaterThan(0);
    expect(l.maxBindings).toBeLessThanOrEqual(16);
    expect(l.maxPushBytes).toBeLessThanOrEqual(128);
    expect(l.maxWgInvocations).toBeLessThanOrEqual(1024);
    expect(l.maxSharedBytes).toBeLessThanOrEqual(32768);
    expect(l.maxBufferBytes).toBeLessThanOrEqual(128 << 20);
    expect(l.maxGrid.every((g) => g > 0 && g <= 65535)).toBe(true);
    expect(l.bufferAlign).toBeGreaterThanOrEqual(16);
    expect(l.subgroupSize).toBeGreaterThan(0);
    expect(info.importAlign).toBeGreaterThan(0);
    if (info.driverId === 13 /* VK_DRIVER_ID_MESA_LLVMPIPE */) {
      expect(l.loopLimit).toBe(65535);
      expect(info.type).toBe('cpu');
      expect(l.features & 0b11111).toBe(0b11111); // FLOAT64 INT64 FLOAT16 INT8 INT16
    }
    // Idempotent while open; a non-matching name is refused rather than silently ignored.
    const again = native.vulkanOpen();
    expect(again.ok && again.info.name).toBe(info.name);
    const other = native.vulkanOpen({ device: 'no-such-device-xyz' });
    expect(other.ok).toBe(false);
  });

  it('adds vectors in a memfd-backed window at unaligned-to-page offsets (zero copy)', async () => {
    const slot = await compileOk(glsl('vadd', VADD));
    const pi = native.programInfo(slot)!;
    expect(pi.reason).toBe(0);
    expect(pi.entry?.name).toBe('main');
    expect(pi.entry?.bindings.map((b) => b.binding).sort()).toEqual([0, 1, 2]);
    const n = 3000; // 12000 bytes: each buffer spans page boundaries
    const [oa, ob, oc] = [48, 16400, 40016];
    mem.fill(0xee, oc - 64, oc + 4 * n + 64);
    const a = f32(oa, n), b = f32(ob, n);
    for (let i = 0; i < n; i++) {
      a[i] = i * 0.5;
      b[i] = 1000 - i;
    }
    const job = dispatch(slot, [[oa, 4 * n], [ob, 4 * n], [oc, 4 * n]], [Math.ceil(n / 64), 1, 1], u32Params(n));
    const c = await completion(job);
    expect(c.status).toBe(0);
    expect(c.deviceNs).toBeGreaterThan(0);
    const out = f32(oc, n);
    let bad = 0;
    for (let i = 0; i < n; i++) if (out[i] !== i * 0.5 + 1000 - i) bad++;
    expect(bad).toBe(0);
    expect([...mem.subarray(oc - 64, oc)].every((x) => x === 0xee)).toBe(true);
    expect([...mem.subarray(oc + 4 * n, oc + 4 * n + 64)].every((x) => x === 0xee)).toBe(true);
    native.programRelease(slot);
    expect(native.programInfo(slot)).toBeNull();
  });

  it('parses the VUGPU_VK_* knobs at open and when asked again, a malformed value as its default', () => {
    expect(info.tuning).toEqual(native.vulkanReadTuning());  // the environment has not changed since open
    const saved = { ...process.env };
    process.env.VUGPU_VK_SPIN_US = '250';
    process.env.VUGPU_VK_MAX_PANELS = '99';      // over the cap: the cap
    process.env.VUGPU_VK_PANEL_BYTES = 'lots';   // not a count: the default
    process.env.VUGPU_VK_NO_REPLAY = '1';
    process.env.VUGPU_VK_MEMORY = 'device';
    try {
      expect(native.vulkanReadTuning()).toMatchObject({ SPIN_US: 250, MAX_PANELS: 16, PANEL_BYTES: 8 << 20, NO_REPLAY: true, MEMORY: 'device' });
    } finally {
      for (const k of ['VUGPU_VK_SPIN_US', 'VUGPU_VK_MAX_PANELS', 'VUGPU_VK_PANEL_BYTES', 'VUGPU_VK_NO_REPLAY', 'VUGPU_VK_MEMORY']) {
        if (saved[k] === undefined) delete process.env[k]; else process.env[k] = saved[k];
      }
    }
    expect(native.vulkanReadTuning()).toEqual(info.tuning);
  });

  it('dispatches each new pipeline once on a private warm-up device first (CPU devices), and only then launches it', async () => {
    // lavapipe JITs a pipeline at its first dispatch, on the one queue every VM shares: the
    // compile lane does that first dispatch on a device of its own (program.cc, WarmUp).
    const cacheOff = /^(1|true|yes)$/i.test(process.env.MESA_SHADER_CACHE_DISABLE ?? '');
    expect(info.warmUp).toBe(info.type === 'cpu' && !cacheOff && process.env.VUGPU_VK_WARMUP !== '0');
    const seed = (Date.now() & 0xffff) * 0x10000; // a shader Mesa's disk cache has not seen
    const src = (k: number) => `#version 450
layout(local_size_x = 32) in;
layout(set = 0, binding = 0) buffer O { uint o[]; };
void main() { o[gl_GlobalInvocationID.x] = gl_GlobalInvocationID.x * 7u + ${k}u; }`;
    const off = 24576;
    for (const [k, warm] of [[seed + 1, true], [seed + 2, false]] as const) {
      if (!warm) process.env.VUGPU_VK_WARMUP = '0';
      native.vulkanReadTuning();  // compiles read the knobs parsed at open, or parsed again here
      try {
        const before = native.vulkanStats().warmUps;
        const slot = await compileOk(glsl(`warm${k}`, src(k)));
        expect(native.vulkanStats().warmUps - before).toBe(warm && info.warmUp ? 1 : 0);
        for (let rep = 0; rep < 2; rep++) {
          u32(off, 64).fill(0);
          const c = await completion(dispatch(slot, [[off, 256]], [2, 1, 1]));
          expect(c.status).toBe(0);
          expect([...u32(off, 64)]).toEqual(Array.from({ length: 64 }, (_, i) => (i * 7 + k) >>> 0));
        }
        // Launches never warm up again: only compiles do.
        expect(native.vulkanStats().warmUps - before).toBe(warm && info.warmUp ? 1 : 0);
        native.programRelease(slot);
      } finally {
        delete process.env.VUGPU_VK_WARMUP;
        native.vulkanReadTuning();
      }
    }
  });

  it('a rewrite without loop-cut detection (a GPU\'s) leaves a loop within cancelEvery back-edges once the cancel word is set', () => {
    // Where loops are not cut (loopLimit 0), the back-edges load the cancel word only every 2^k-th
    // time (rewrite.cc): run here on the CPU device with a loop far under its cut.
    const raw = glsl('stop-within', `#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer O { uint o[]; };
layout(push_constant) uniform P { uint n; } p;
void main() { uint i = 0u; for (; i < p.n; i++) o[1] += 1u; o[0] = i; }`);
    for (const [cancelEvery, cancelled, iterations, status] of [[0, false, 1000, 0], [0, true, 64, 1], [8, true, 8, 1], [1, true, 1, 1], [8, false, 1000, 0]] as const) {
      const pp = native.programPrepare(raw, 0, new Uint32Array(0), { ...info.limits, loopLimit: 0, cancelEvery });
      expect(pp.reason).toBe(0);
      const out = new Uint32Array(4);
      const r = native.vulkanDirectRun({ words: pp.words!, buffers: [out], writable: [true], push: u32Params(1000), grid: [1, 1, 1], control: true, cancelled, entry: pp.entry!.name, reps: 1 });
      expect({ cancelEvery, cancelled, iterations: out[0], body: out[1], status: r.status })
        .toEqual({ cancelEvery, cancelled, iterations, body: iterations, status });
    }
  });

  it('passes push constants of several types', async () => {
    const slot = await compileOk(glsl('push', `#version 450
layout(local_size_x = 16) in;
layout(set = 0, binding = 0) buffer O { float o[]; };
layout(push_constant) uniform P { float scale; float bias; uint n; int k; } p;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < p.n) o[i] = float(i) * p.scale + p.bias + float(p.k);
}`));
    expect(native.programInfo(slot)!.entry!.pushBytes).toBe(16);
    const off = 8192 + 32;
    const params = new Uint8Array(16);
    const dv = new DataView(params.buffer);
    dv.setFloat32(0, 2.5, true);
    dv.setFloat32(4, -1, true);
    dv.setUint32(8, 40, true);
    dv.setInt32(12, -7, true);
    f32(off, 48).fill(123);
    const c = await completion(dispatch(slot, [[off, 48 * 4]], [3, 1, 1], params));
    expect(c.status).toBe(0);
    const o = f32(off, 48);
    for (let i = 0; i < 40; i++) expect(o[i]).toBe(i * 2.5 - 1 - 7);
    for (let i = 40; i < 48; i++) expect(o[i]).toBe(123);
    // Parameters shorter than the push-constant block: refused, nothing runs.
    const short = await completion(dispatch(slot, [[off, 48 * 4]], [3, 1, 1], params.subarray(0, 8)));
    expect(short.status).toBe(-EINVAL);
    native.programRelease(slot);
  });

  it('applies specialization constants (values and workgroup size)', async () => {
    const words = glsl('spec', `#version 450
layout(local_size_x_id = 1) in;
layout(constant_id = 0) const uint K = 1u;
layout(set = 0, binding = 0) buffer O { uint o[]; };
void main() { o[gl_GlobalInvocationID.x] = K * gl_GlobalInvocationID.x + gl_WorkGroupSize.x; }`);
    const slot = await compileOk(words, { spec: [0, 7, 1, 32] });
    expect(native.programInfo(slot)!.entry!.wg).toEqual([32, 1, 1]);
    const off = 12288;
    u32(off, 64).fill(0);
    expect((await completion(dispatch(slot, [[off, 256]], [2, 1, 1]))).status).toBe(0);
    const o = u32(off, 64);
    for (let i = 0; i < 64; i++) expect(o[i]).toBe(7 * i + 32);
    // Defaults without spec values.
    const dflt = await compileOk(words);
    expect(native.programInfo(dflt)!.entry!.wg[0]).toBe(1);
    native.programRelease(slot);
    native.programRelease(dflt);
  });

  it('bounds every access to exactly its binding (out-of-bounds writes change nothing, reads give 0)', async () => {
    const slot = await compileOk(glsl('oob', `#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer O { uint o[]; };
layout(set = 0, binding = 1) buffer I { uint v[]; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  o[i] = 0x1000u + i + v[i];   // i runs far past both bindings
  o[i + 100000u] = 0xdeadu;
}`));
    const base = 5 * PAGE;
    mem.fill(0xaa, base - PAGE, base + 4 * PAGE);
    const oOff = base + 64, oLen = 60; // 15 words
    const iOff = base + 2 * PAGE + 16, iLen = 32; // 8 words
    u32(iOff, 8).set([1, 2, 3, 4, 5, 6, 7, 8]);
    const c = await completion(dispatch(slot, [[oOff, oLen], [iOff, iLen]], [16, 1, 1]));
    expect(c.status).toBe(0);
    const o = u32(oOff, 15);
    for (let i = 0; i < 15; i++) expect(o[i]).toBe(0x1000 + i + (i < 8 ? i + 1 : 0));
    // Everything else in the four pages around is untouched (the input too).
    const check = new Uint8Array(mem.buffer, base - PAGE, 5 * PAGE).slice();
    check.fill(0, PAGE + 64, PAGE + 64 + oLen);
    check.fill(0, 3 * PAGE + 16, 3 * PAGE + 16 + iLen);
    let touched = 0;
    for (let i = 0; i < check.length; i++) {
      const inO = i >= PAGE + 64 && i < PAGE + 64 + oLen;
      const inI = i >= 3 * PAGE + 16 && i < 3 * PAGE + 16 + iLen;
      if (!inO && !inI && check[i] !== 0xaa) touched++;
    }
    expect(touched).toBe(0);
    expect([...u32(iOff, 8)]).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    native.programRelease(slot);
  });

  it('cancels an endless program through its cancel word; the device works afterwards', async () => {
    // Each invocation loops below the loop limit (a heavy body: 48 xorshift steps that cannot
    // be folded), over so many workgroups that the launch would run for minutes: only the
    // cancel word ends it early; after it every workgroup left runs one iteration.
    const slot = await compileOk(glsl('spin', `#version 450
layout(local_size_x = 8) in;
layout(set = 0, binding = 0) buffer O { uint o[]; };
#define S acc ^= acc << 13; acc ^= acc >> 17; acc ^= acc << 5;
#define S8 S S S S S S S S
void main() {
  uint acc = gl_GlobalInvocationID.x + 1u;
  for (uint k = 0u; k < 60000u; k++) { S8 S8 S8 S8 S8 S8 }
  atomicAdd(o[0], 1u);
  o[1 + (acc & 7u)] = acc;
}`));
    const off = 20 * PAGE;
    u32(off, 16).fill(0);
    const job = dispatch(slot, [[off, 64]], [65535, 1, 1]);
    await new Promise((r) => setTimeout(r, 200));
    expect(completions.has(job)).toBe(false);
    const t0 = performance.now();
    native.cancelJob(job);
    const c = await completion(job, 10_000);
    const ms = performance.now() - t0;
    console.log(`cancel → completion: ${ms.toFixed(1)} ms (${u32(off, 1)[0]} invocations had finished)`);
    expect(c.status).toBe(-ECANCELED);
    expect(ms).toBeLessThan(2000);
    // Still works.
    const again = await compileOk(glsl('vadd', VADD));
    const n = 64;
    f32(off, n).fill(1);
    f32(off + 256, n).fill(2);
    const ok = await completion(dispatch(again, [[off, 256], [off + 256, 256], [off + 512, 256]], [1, 1, 1], u32Params(n)));
    expect(ok.status).toBe(0);
    expect([...f32(off + 512, n)].every((x) => x === 3)).toBe(true);
    native.programRelease(slot);
    native.programRelease(again);
  });

  it('stops a loop over the device loop limit with -ELOOP instead of a wrong answer', async () => {
    const slot = await compileOk(glsl('long', `#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer O { uint o[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
  uint c = 0u;
  for (uint k = 0u; k < p.n; k++) c++;
  o[0] = c;
}`));
    const off = 24 * PAGE;
    u32(off, 1)[0] = 0;
    const small = await completion(dispatch(slot, [[off, 4]], [1, 1, 1], u32Params(1000)));
    expect(small.status).toBe(0);
    expect(u32(off, 1)[0]).toBe(1000);
    const big = await completion(dispatch(slot, [[off, 4]], [1, 1, 1], u32Params(100_000)));
    if (info.limits.loopLimit > 0) {
      expect(big.status).toBe(-ELOOP);
    } else {
      expect(big.status).toBe(0);
      expect(u32(off, 1)[0]).toBe(100_000);
    }
    native.programRelease(slot);
  });

  it('refuses bad modules with -EINVAL and a reason; bad launches with -EINVAL or a thrown error', async () => {
    const junk = await compile(Uint32Array.from([1, 2, 3, 4, 5, 6]));
    expect(junk.c.status).toBe(-EINVAL);
    expect(native.programInfo(junk.slot)!.reason).toBe(R_INVALID);
    expect(native.programInfo(junk.slot)!.message.length).toBeGreaterThan(0);
    const vadd = glsl('vadd', VADD);
    const noEntry = await compile(vadd, { entryIndex: 1 });
    expect(noEntry.c.status).toBe(-EINVAL);
    expect(native.programInfo(noEntry.slot)!.reason).toBe(R_ENTRY_POINT);
    const huge = await compile(new Uint32Array((1 << 20) / 4 + 1));
    expect(huge.c.status).toBe(-EINVAL);
    expect(native.programInfo(huge.slot)!.reason).toBe(R_MODULE_SIZE);
    // Launching a refused program completes with -EINVAL.
    expect((await completion(dispatch(junk.slot, [], [1, 1, 1]))).status).toBe(-EINVAL);

    const ok = await compileOk(vadd);
    // Too few windows for the entry's bindings, misaligned window, grid over the limit.
    expect((await completion(dispatch(ok, [[0, 16], [64, 16]], [1, 1, 1], u32Params(4)))).status).toBe(-EINVAL);
    expect((await completion(dispatch(ok, [[0, 16], [64, 16], [132, 16]], [1, 1, 1], u32Params(4)))).status).toBe(-EINVAL);
    expect((await completion(dispatch(ok, [[0, 16], [64, 16], [128, 16]], [info.limits.maxGrid[0] + 1, 1, 1], u32Params(4)))).status).toBe(-EINVAL);

    const any = native as unknown as Record<string, (...args: unknown[]) => unknown>;
    expect(() => native.submitDispatch({ slot: 999_999, windows: [], lengths: [], grid: [1, 1, 1] })).toThrow(RangeError);
    expect(() => native.submitProgramCompile({ slot: ok, words: vadd, entryIndex: 0 })).toThrow(/in use/);
    expect(() => any.submitProgramCompile({ slot: 5000, words: [1, 2], entryIndex: 0 })).toThrow(TypeError);
    expect(() => any.submitProgramCompile({ slot: 5000, words: vadd, entryIndex: 0, spec: Uint32Array.of(1) })).toThrow(RangeError);
    expect(() => any.submitDispatch({ slot: ok, windows: [1], lengths: [4], grid: [1, 1, 1] })).toThrow(TypeError);
    expect(() => any.submitDispatch({ slot: ok, windows: [], lengths: [], grid: [1, 1] })).toThrow(TypeError);
    expect(() => any.programInfo(-1)).toThrow(RangeError);
    for (const s of [junk.slot, noEntry.slot, huge.slot, ok]) native.programRelease(s);
    native.programRelease(ok); // idempotent
  });

  it('runs launches from both pool threads at once, each on its own buffers', async () => {
    const slot = await compileOk(glsl('vadd', VADD));
    const n = 256, jobs: { job: number; oc: number; k: number }[] = [];
    for (let k = 0; k < 16; k++) {
      const base = 32 * PAGE + k * 3 * 1024;
      f32(base, n).fill(k);
      f32(base + 1024, n).fill(100);
      const oc = base + 2048;
      jobs.push({ job: dispatch(slot, [[base, 1024], [base + 1024, 1024], [oc, 1024]], [4, 1, 1], u32Params(n)), oc, k });
    }
    for (const j of jobs) {
      expect((await completion(j.job)).status).toBe(0);
      expect([...f32(j.oc, n)].every((x) => x === j.k + 100)).toBe(true);
    }
    native.programRelease(slot);
  });

  it('measures: empty-dispatch latency, import cost per window, compile time', async () => {
    const t0 = performance.now();
    const { slot, c } = await compile(glsl('empty', `#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer O { uint o[]; };
void main() { if (gl_GlobalInvocationID.x == 0xffffffffu) o[0] = 1u; }`));
    const compileWall = performance.now() - t0;
    expect(c.status).toBe(0);
    const off = 40 * PAGE;
    const lat: number[] = [];
    const dev: number[] = [];
    const s0 = native.vulkanStats();
    for (let i = 0; i < 1000; i++) {
      const t = process.hrtime.bigint();
      const job = dispatch(slot, [[off, 64]], [1, 1, 1]);
      const r = await completion(job);
      lat.push(Number(process.hrtime.bigint() - t) / 1000);
      expect(r.status).toBe(0);
      dev.push(r.deviceNs / 1000);
    }
    const s1 = native.vulkanStats();
    // Every dispatch is counted once in the phase sums, and the phases fit in the launches' time.
    const ph = (k: keyof typeof s1.dispatchPhases) => s1.dispatchPhases[k] - s0.dispatchPhases[k];
    expect(ph('dispatches')).toBe(1000);
    for (const k of ['setupNs', 'recordNs', 'queueSubmitNs', 'waitNs'] as const) expect(ph(k)).toBeGreaterThan(0);
    const phaseUs = (ph('setupNs') + ph('recordNs') + ph('queueSubmitNs') + ph('waitNs') + ph('finishNs')) / 1000;
    expect(phaseUs).toBeLessThanOrEqual(lat.reduce((a, b) => a + b, 0));
    const med = (v: number[]): number => [...v].sort((x, y) => x - y)[v.length >> 1];
    const p99 = (v: number[]): number => [...v].sort((x, y) => x - y)[Math.floor(v.length * 0.99)];
    const perImport = (s1.importNs - s0.importNs) / (s1.imports - s0.imports) / 1000;
    console.log(`compile (small shader): ${(c.deviceNs / 1e6).toFixed(2)} ms on the pool (${compileWall.toFixed(1)} ms incl. glslang)`);
    console.log(`empty dispatch submit→completion: median ${med(lat).toFixed(0)} µs, p99 ${p99(lat).toFixed(0)} µs; device ${med(dev).toFixed(1)} µs`);
    console.log(`import per window (1 page): ${perImport.toFixed(1)} µs over ${s1.imports - s0.imports} imports`);
    // A larger window: 16 MiB.
    const bigFd = native.memfdCreate('vk-big', 16 << 20);
    const bigWin = native.mapWindow([{ fd: bigFd, offset: 0, length: 16 << 20 }], false);
    const s2 = native.vulkanStats();
    for (let i = 0; i < 20; i++) {
      const r = await completion(native.submitDispatch({ slot, windows: [bigWin.address], lengths: [16 << 20], grid: [1, 1, 1] }));
      expect(r.status).toBe(0);
    }
    const s3 = native.vulkanStats();
    console.log(`import per window (16 MiB): ${((s3.importNs - s2.importNs) / (s3.imports - s2.imports) / 1000).toFixed(1)} µs`);
    native.unmapWindow(bigWin.id);
    native.close(bigFd);
    expect(med(lat)).toBeGreaterThan(0);
    native.programRelease(slot);
  });

  it('keeps a released program alive for its queued launches; close and reopen', async () => {
    const slot = await compileOk(glsl('vadd', VADD));
    const off = 44 * PAGE;
    f32(off, 4).fill(1);
    f32(off + 16, 4).fill(2);
    const job = dispatch(slot, [[off, 16], [off + 16, 16], [off + 32, 16]], [1, 1, 1], u32Params(4));
    native.programRelease(slot);
    expect((await completion(job)).status).toBe(0);
    expect([...f32(off + 32, 4)]).toEqual([3, 3, 3, 3]);

    native.vulkanClose();
    const nodev = await compile(glsl('vadd', VADD));
    expect(nodev.c.status).toBe(-19); // ENODEV
    expect(native.programInfo(nodev.slot)!.reason).toBe(1); // UNSUPPORTED
    native.programRelease(nodev.slot);
    const r = native.vulkanOpen(info.driver === 'llvmpipe' ? { device: 'llvmpipe' } : {});
    expect(r.ok).toBe(true);
    const again = await compileOk(glsl('vadd', VADD));
    f32(off + 32, 4).fill(0);
    expect((await completion(dispatch(again, [[off, 16], [off + 16, 16], [off + 32, 16]], [1, 1, 1], u32Params(4)))).status).toBe(0);
    expect([...f32(off + 32, 4)]).toEqual([3, 3, 3, 3]);
    native.programRelease(again);
  });
});
