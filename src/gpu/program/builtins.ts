// The built-in kernels (docs/kernels.md) as SPIR-V programs: one GLSL compute shader per kernel
// id in native/shaders/builtins/, compiled by scripts/build-spirv.sh into build/spirv/, and here
// the plan that turns a kernel's parameter block into the launches that compute the same result.
//
// A plan is a list of dispatches the engine runs in order on the kernel's buffers (binding i =
// buffer i): a kernel that does a whole computation in one call on the CPU (LOOP's millions of
// steps, a BFS level's two phases, an LU block) may need several launches on a GPU, and every
// launch must stay under the CPU device's loop cap (lavapipe: 65,535 back-edges per subgroup;
// the device cuts loops at 65,535 passes per SIMD group and the engine fails such a launch), so each shader is written to take at most LOOP_BUDGET
// back-edges per launch and the plans cut the work to match.
//
// plan() makes the native kernel's parameter checks (null where it returns -EINVAL). It cannot
// see addresses: the engine still checks 4-byte alignment and the `noOverlap` pairs, as
// dispatch.cc and the kernels do. A plan is also null when a buffer would need 2^31 elements
// or more (the shaders index with 32-bit words); no program device binds that much
// (PROG_MAX_BUFFER_BYTES ≤ 128 MiB).
import { KERNELS, K } from '../kernels.ts';
import type { KStream } from '../../native.ts';

/** Where build-spirv.sh puts the modules; `spv` paths below are relative to it. */
export const SPIRV_DIR = new URL('../../../build/spirv/', import.meta.url);

/** Back-edges any subgroup takes in one launch of a built-in, at most (lavapipe's cap: 65,535 passes). */
export const LOOP_BUDGET = 60_000;

export interface BuiltinDispatch {
  /** Workgroup counts (each 1 … 65535). */
  grid: [number, number, number];
  /** Push constants: the kernel's parameter layout, then the words this launch needs. */
  push: Uint8Array;
  /**
   * The device-memory path may stream this launch in panels of workgroup rows (y): bytes of
   * binding i that one row of workgroups reads or writes, 0 = the whole binding. Only where
   * row r of workgroups touches exactly rows [r·b, (r+1)·b) of that binding (a GEMM's A and C).
   */
  panelRowBytes?: number[];
  /**
   * Bindings this dispatch writes every byte of (the whole window the launch binds), whatever
   * the inputs: the device-memory path then skips their upload — their device copy starts as
   * zeros — and keeps the write-back. A GEMM's C is a third of what it moves. Declare it only
   * where the shader's stores provably cover the binding (see overwritesC); the engine refuses
   * it for guest programs, whose writes cannot be trusted to. The staging buffers are shared by
   * all VMs: the native side zero-fills the skipped range so that even a launch cut short
   * (cancel, loop cap) writes back zeros, never another VM's bytes — but a declaration that is
   * not true would still hand the guest zeros where its old bytes belonged. If in doubt, leave
   * it out.
   */
  overwrites?: number[];
  /**
   * A GEMM operand read by rows of k (binding, bytes per k row) and where the launch's push
   * constants hold its k range and its accumulate flag: the device-memory path may then run the
   * first panel as slices of k, each as soon as its rows of the operand are on the device,
   * instead of waiting for all of it (native/src/vulkan/plan.cc, PlanKStream). Declare it only
   * where the shader sums exactly k in [k0, k1) (in steps of 16) and adds into C when accumulate
   * is set.
   */
  kStream?: KStream;
  /**
   * Run this launch this many times in a row (default 1). The shader keeps its progress in its
   * buffers, so the repetitions are identical launches; surplus ones change nothing. Infinity:
   * until timeLimitNs (LOOP without an iteration count).
   */
  repeat?: number;
}

export interface BuiltinPlan {
  /** In order, on the same bindings. Empty: nothing to compute (an empty launch succeeds). */
  dispatches: BuiltinDispatch[];
  /** A GPU form other than the kernel's own module (path under SPIRV_DIR): see useGpuVariants. */
  spv?: string;
  /**
   * LOOP's target_ns: stop after the launch during which this much time passed since the plan
   * started (the native kernel checks every 65,536 steps; a LOOP launch is ≤ 960,000 steps).
   */
  timeLimitNs?: bigint;
  /** Store the plan's elapsed ns (u64 LE) here when it ends, also when cancelled (LOOP's record). */
  elapsedAt?: { binding: number; offset: number };
  /** After the last launch: if (u32 at binding/offset) & mask ≠ 0 the kernel failed with -EINVAL (BFS). */
  errorWord?: { binding: number; offset: number; mask: number };
}

export interface BuiltinProgram {
  id: number;
  name: string;
  /** Module path under SPIRV_DIR. */
  spv: string;
  /** Entry-point index (PROGRAM_ENTRY). */
  entry: 0;
  buffers: number;
  /** Bytes of the parameter block the kernel reads (a shorter one is -EINVAL). */
  minParams: number;
  /** Per binding: declared readonly (NonWritable) in the shader — the kernel's R buffers. */
  readOnly: readonly boolean[];
  /** Buffer pairs whose windows must not overlap (native -EINVAL); exact aliasing allowed elsewhere. */
  noOverlap: readonly (readonly [number, number])[];
  plan(params: Uint8Array, lengths: readonly number[]): BuiltinPlan | null;
}

// ---- shared helpers ----

const MAX_DIM = 2 ** 30;  // kMaxDim in kernel_common.h
const MAX_ELEMS = 2 ** 31;  // the GPU forms' 32-bit indexing (see above)
const MAX_GRID = 65535;
const WG = 256;  // elementwise workgroup width

/** Steps of the LCG one LOOP launch takes (loop.comp's CHUNK: 64 per back-edge, 15,000 back-edges). */
export const LOOP_CHUNK = 960_000;
/** Depth of k one GEMM launch sums (gemm.glsl: one back-edge per 16). */
const GEMM_K_SLICE = 16 * LOOP_BUDGET;
/** Depth of k one launch of fmmul_gpu.comp sums (one back-edge per 16; a multiple of 16). */
const GEMM_GPU_K_SLICE = 16 * LOOP_BUDGET;
/** Tests: both GEMM slice depths (the defaults need n > 960,000 to slice). */
let gemmKSliceOverride: number | undefined;
/** Tests: cut MMUL/FMMUL's k into slices of `k` (a positive multiple of 16), so that plans of
 * small n have accumulating launches; undefined restores the defaults. */
export function setGemmKSliceForTests(k?: number): void {
  if (k !== undefined && !(Number.isInteger(k) && k > 0 && k % 16 === 0)) throw new RangeError(`GEMM k slice ${k}`);
  gemmKSliceOverride = k;
}
/** The GPU form of FMMUL (128×128 tiles, vec4 loads, 8×8 outputs per invocation). */
export const FMMUL_GPU_SPV = 'native/shaders/builtins/fmmul_gpu.spv';
/** Its form for small n (64×64 tiles, 4×4 outputs per invocation; the same bits). */
export const FMMUL_GPU64_SPV = 'native/shaders/builtins/fmmul_gpu64.spv';
/** Below this many 128×128 workgroups FMMUL takes 64×64 tiles: a data-center GPU has more SMs
 *  than that (1024³ has 64 such workgroups), and the smaller tiles keep them busy
 *  (docs/architecture.md, the GPU plan's FMMUL forms). */
const GEMM_GPU_SMALL_GRID = 128;
/** Tests and measurement: force FMMUL's GPU tile (64 or 128); undefined restores the rule. */
let gemmGpuTileOverride: 64 | 128 | undefined;
export function setGemmGpuTile(tile?: 64 | 128): void {
  if (tile !== undefined && tile !== 64 && tile !== 128) throw new RangeError(`GEMM GPU tile ${String(tile)}`);
  gemmGpuTileOverride = tile;
}

/**
 * Kernels written for a GPU (vulkan.ts turns this on when the program device is a GPU; the
 * portable forms suit lavapipe, whose invocations are SIMD lanes of CPU threads). Process-wide:
 * there is one program device per process. VUGPU_VK_GEMM=gpu|portable overrides.
 */
let gpuVariants = false;
export function useGpuVariants(on: boolean): void {
  gpuVariants = on;
}
export function gpuVariantsOn(): boolean {
  return gpuVariants;
}
/** Inputs one BACKPROP_FORWARD launch sums (16 lanes, one back-edge per term each). */
const BP_I_SLICE = 16 * LOOP_BUDGET;
/** Edge ids one BFS expand launch walks (bfs.comp: ≤ 32 + 2·256 + window/256 back-edges). */
const BFS_EDGE_WINDOW = (LOOP_BUDGET - 2000) * 256;

function u32(p: Uint8Array, off: number): number {
  return (p[off] | (p[off + 1] << 8) | (p[off + 2] << 16) | (p[off + 3] << 24)) >>> 0;
}
function u64(p: Uint8Array, off: number): bigint {
  return BigInt(u32(p, off)) | (BigInt(u32(p, off + 4)) << 32n);
}

/**
 * Buffer i holds a·b elements of `elem` bytes. Exact as a decision in doubles: a product
 * above 2^53 rounds to a value still above every possible length.
 */
function fits(lengths: readonly number[], i: number, a: number, b: number, elem: number): boolean {
  return a * b * elem <= lengths[i];
}

/** Push block: the kernel's own parameter bytes (first `keep`), then extra u32 words. */
function push(params: Uint8Array, keep: number, extra: readonly number[] = []): Uint8Array {
  const out = new Uint8Array(keep + 4 * extra.length);
  out.set(params.subarray(0, keep));
  for (let i = 0; i < extra.length; i++) {
    const v = extra[i] >>> 0;
    const o = keep + 4 * i;
    out[o] = v & 0xff;
    out[o + 1] = (v >>> 8) & 0xff;
    out[o + 2] = (v >>> 16) & 0xff;
    out[o + 3] = v >>> 24;
  }
  return out;
}

/** Workgroups for `groups` numbered linearly over x then y (common.glsl's linear_id). */
function grid2d(groups: number): [number, number, number] {
  const x = Math.min(groups, MAX_GRID);
  return [x, Math.ceil(groups / x), 1];
}

/** One launch of a 256-wide elementwise shader over `count` elements (none when 0). */
function elementwise(count: number, p: Uint8Array): BuiltinPlan {
  return { dispatches: count === 0 ? [] : [{ grid: grid2d(Math.ceil(count / WG)), push: p }] };
}

function sizes(lengths: readonly number[], checks: readonly (readonly [number, number, number, number])[]): boolean {
  for (const [i, a, b, elem] of checks) if (!fits(lengths, i, a, b, elem)) return false;
  return true;
}

// ---- per kernel ----

function planNop(): BuiltinPlan {
  return { dispatches: [{ grid: [1, 1, 1], push: new Uint8Array(0) }] };
}

const LCG_MUL = 1664525;
const LCG_INC = 1013904223;

function planLoop(p: Uint8Array, lengths: readonly number[]): BuiltinPlan | null {
  const iterations = u64(p, 0);
  const targetNs = u64(p, 8);
  if (lengths[0] < 24) return null;
  if (iterations === 0n && targetNs === 0n) return null;
  const first: BuiltinDispatch = { grid: [1, 1, 1], push: push(p, 20, [1, LCG_MUL, LCG_INC]) };
  let more: number;
  if (iterations === 0n) {
    more = Infinity;
  } else {
    const launches = (iterations + BigInt(LOOP_CHUNK) - 1n) / BigInt(LOOP_CHUNK);
    // Past 2^53 launches (centuries) a count rounded down could stop early: say "unbounded".
    more = launches - 1n > BigInt(Number.MAX_SAFE_INTEGER) ? Infinity : Number(launches - 1n);
  }
  const plan: BuiltinPlan = { dispatches: [first], elapsedAt: { binding: 0, offset: 8 } };
  if (more > 0) plan.dispatches.push({ grid: [1, 1, 1], push: push(p, 20, [0, LCG_MUL, LCG_INC]), repeat: more });
  if (targetNs !== 0n) plan.timeLimitNs = targetNs;
  return plan;
}

/** n of an n×n kernel with three n² buffers (matrix.cc's square_dims), or -1. */
function squareN(p: Uint8Array, lengths: readonly number[]): number {
  const n = u32(p, 0);
  if (n > MAX_DIM) return -1;
  for (let i = 0; i < 3; i++) if (!fits(lengths, i, n, n, 4)) return -1;
  if (n * n >= MAX_ELEMS) return -1;
  return n;
}

function planAdd(p: Uint8Array, lengths: readonly number[]): BuiltinPlan | null {
  const n = squareN(p, lengths);
  return n < 0 ? null : elementwise(n * n, push(p, 4));
}

/** GEMM launches for an m×m tile grid summing k in [0, depth): slices of `slice` (a tile of
 * `tile` rows). `panels`: the panel rows of each launch (see BuiltinDispatch.panelRowBytes). */
function gemmLaunches(m: number, depth: number, pushFor: (k0: number, k1: number, i: number) => Uint8Array,
                      tile = 64, slice = GEMM_K_SLICE, panels?: number[]): BuiltinDispatch[] {
  const tiles = Math.ceil(m / tile);
  const out: BuiltinDispatch[] = [];
  if (m === 0) return out;
  let k0 = 0;
  do {
    const k1 = Math.min(depth, k0 + slice);
    const d: BuiltinDispatch = { grid: [tiles, tiles, 1], push: pushFor(k0, k1, out.length) };
    if (panels) d.panelRowBytes = panels;
    out.push(d);
    k0 = k1;
  } while (k0 < depth);
  return out;
}

/**
 * MMUL/FMMUL's first launch (accumulate = 0) overwrites C when C's binding is exactly its n·n
 * elements: each shader stores every element of its workgroup's tile — gemm.glsl (mmul.comp,
 * fmmul.comp): rows row0 + ty + 16·i and columns col0 + tx + 16·j, i, j < 4, a 64×64 tile;
 * fmmul_gpu.comp: rows ty·4 + i and 64 + ty·4 + i, column quads tx and 16 + tx, a 128×128 tile;
 * fmmul_gpu64.comp: rows ty·4 + i, column quad tx, a 64×64 tile
 * (n % 4 == 0, so a quad is all in or all out) — skipping only rows or columns ≥ n, with no
 * other condition on the store; the grid is ceil(n / tile) tiles each way (gemmLaunches), so
 * the stores cover all n×n. Later slices add into C (accumulate = 1) and read it: not declared.
 * A longer binding has bytes past n·n that no launch writes: not declared either.
 */
function overwritesC(dispatches: BuiltinDispatch[], n: number, lengths: readonly number[]): BuiltinDispatch[] {
  if (dispatches.length > 0 && n > 0 && lengths[2] === 4 * n * n) dispatches[0]!.overwrites = [2];
  return dispatches;
}

function planMul(p: Uint8Array, lengths: readonly number[]): BuiltinPlan | null {
  const n = squareN(p, lengths);
  if (n < 0) return null;
  // Later slices add into C (accumulate = 1); n = 0 launches nothing. Workgroup row r reads
  // rows [r·tile, (r+1)·tile) of A and writes those of C: panels of rows can stream.
  const pushFor = (k0: number, k1: number, i: number) => push(p, 4, [k0, k1, i > 0 ? 1 : 0]);
  const slice = gemmKSliceOverride ?? GEMM_K_SLICE;
  return { dispatches: overwritesC(gemmLaunches(n, n, pushFor, 64, slice, [64 * 4 * n, 0, 64 * 4 * n]), n, lengths) };
}

/** FMMUL: the GPU form where it applies (n % 4 == 0), else the portable one. */
function planFmul(p: Uint8Array, lengths: readonly number[]): BuiltinPlan | null {
  const plan = planMul(p, lengths);
  if (!plan || !gpuVariants) return plan;
  const n = u32(p, 0);
  if (n % 4 !== 0) return plan;
  const pushFor = (k0: number, k1: number, i: number) => push(p, 4, [k0, k1, i > 0 ? 1 : 0]);
  const slice = gemmKSliceOverride ?? GEMM_GPU_K_SLICE;
  // fmmul_gpu(64).comp sums k in [k0, k1) (push bytes 4, 8; loads past k1 are zero) and adds
  // into C when accumulate (byte 12) is set: B (binding 1) can stream by its rows.
  const kStream: KStream = { binding: 1, rowBytes: 4 * n, k0Offset: 4, k1Offset: 8, accumulateOffset: 12 };
  const tile = gemmGpuTileOverride ?? (Math.ceil(n / 128) ** 2 < GEMM_GPU_SMALL_GRID ? 64 : 128);
  const dispatches = overwritesC(gemmLaunches(n, n, pushFor, tile, slice, [tile * 4 * n, 0, tile * 4 * n]), n, lengths);
  for (const d of dispatches) d.kStream = kStream;
  return { spv: tile === 64 ? FMMUL_GPU64_SPV : FMMUL_GPU_SPV, dispatches };
}

function layerDims(p: Uint8Array): [number, number] | null {
  const nIn = u32(p, 0), nOut = u32(p, 4);
  return nIn < MAX_DIM && nOut <= MAX_DIM ? [nIn, nOut] : null;
}

function planBpForward(p: Uint8Array, lengths: readonly number[]): BuiltinPlan | null {
  const d = layerDims(p);
  if (!d) return null;
  const [nIn, nOut] = d;
  if (!sizes(lengths, [[0, nIn, 1, 4], [1, nIn + 1, nOut, 4], [2, nOut, 1, 4]])) return null;
  if ((nIn + 1) * nOut >= MAX_ELEMS) return null;
  if (nOut === 0) return { dispatches: [] };
  const grid = grid2d(Math.ceil(nOut / 16));
  const dispatches: BuiltinDispatch[] = [];
  let i0 = 0;
  do {  // n_in = 0 still takes one launch: y = sigmoid(bias)
    const i1 = Math.min(nIn, i0 + BP_I_SLICE);
    dispatches.push({ grid, push: push(p, 8, [i0, i1, i0 === 0 ? 1 : 0, i1 === nIn ? 1 : 0]) });
    i0 = i1;
  } while (i0 < nIn);
  return { dispatches };
}

function planBpAdjust(p: Uint8Array, lengths: readonly number[]): BuiltinPlan | null {
  const d = layerDims(p);
  if (!d) return null;
  const [nIn, nOut] = d;
  if (!sizes(lengths, [[0, nOut, 1, 4], [1, nIn, 1, 4], [2, nIn + 1, nOut, 4], [3, nIn + 1, nOut, 4]])) return null;
  const total = (nIn + 1) * nOut;
  if (total >= MAX_ELEMS) return null;
  return elementwise(total, push(p, 16));
}

function planBfs(p: Uint8Array, lengths: readonly number[]): BuiltinPlan | null {
  const n = u32(p, 0), m = u32(p, 4);
  if (!sizes(lengths, [[0, n + 1, 1, 4], [1, m, 1, 4], [2, n, 1, 1], [3, n, 1, 1], [4, n, 1, 1],
    [5, n, 1, 4], [6, 1, 1, 4]])) return null;
  if (n + 1 >= MAX_ELEMS || m >= MAX_ELEMS) return null;
  const phase = (ph: number, eLo = 0, eHi = 0): Uint8Array => push(p, 8, [ph, eLo, eHi]);
  const plan: BuiltinPlan = {
    dispatches: [{ grid: [1, 1, 1], push: phase(0) }],
    errorWord: { binding: 6, offset: 0, mask: 2 },
  };
  if (n === 0) return plan;  // changed = 0, as the native kernel writes
  const grid = grid2d(Math.ceil(n / WG));
  let lo = 0;
  do {  // m = 0 still expands once: a frontier node's offsets are checked
    const hi = Math.min(m, lo + BFS_EDGE_WINDOW);
    plan.dispatches.push({ grid, push: phase(1, lo, hi) });
    lo = hi;
  } while (lo < m);
  plan.dispatches.push({ grid, push: phase(2) });
  return plan;
}

function planHotspot(p: Uint8Array, lengths: readonly number[]): BuiltinPlan | null {
  const rows = u32(p, 0), cols = u32(p, 4);
  if (rows > MAX_DIM || cols > MAX_DIM) return null;
  if (!sizes(lengths, [[0, rows, cols, 4], [1, rows, cols, 4], [2, rows, cols, 4]])) return null;
  if (rows * cols >= MAX_ELEMS) return null;
  return elementwise(rows * cols, push(p, 32));
}

interface LudStep { n: number; o: number; b: number; rest: number }

/** lud.cc's lud_step: n ≥ 1, bs ≥ 1, the matrix fits, step < ceil(n/bs). */
function ludStep(p: Uint8Array, lengths: readonly number[]): LudStep | null {
  const n = u32(p, 0), bs = u32(p, 4), step = u32(p, 8);
  if (n === 0 || n > MAX_DIM || bs === 0 || !fits(lengths, 0, n, n, 4)) return null;
  if (step >= Math.ceil(n / bs)) return null;
  if (n * n >= MAX_ELEMS) return null;
  const o = step * bs;
  const b = Math.min(bs, n - o);
  return { n, o, b, rest: o + b };
}

/** Back-edges of lud_diagonal.comp for pivot k over `rows` rows below it (a subgroup's worst). */
function ludDiagCost(b: number, k: number, rows: number): number {
  const r = Math.ceil(rows / 16), c = Math.ceil((b - k - 1) / 16);
  return 1 + Math.ceil(rows / 256) + r + r * c;
}

function planLudDiagonal(p: Uint8Array, lengths: readonly number[]): BuiltinPlan | null {
  const s = ludStep(p, lengths);
  if (!s) return null;
  const { b } = s;
  const dispatches: BuiltinDispatch[] = [];
  const launch = (k0: number, k1: number, r0: number, r1: number): void => {
    dispatches.push({ grid: [1, 1, 1], push: push(p, 12, [k0, k1, r0, r1]) });
  };
  let k0 = 0, used = 0;
  for (let k = 0; k < b; k++) {
    const cost = ludDiagCost(b, k, b - k - 1);
    if (cost <= LOOP_BUDGET - used) {
      used += cost;
      continue;
    }
    if (k > k0) launch(k0, k, 0, b);
    k0 = k;
    used = 0;
    if (cost <= LOOP_BUDGET) {
      used = cost;
      continue;
    }
    // One pivot too big for a launch: its rows are independent, cut them.
    // With rows = 16·r: cost ≈ 1 + r/16 + r·(1 + c); take the largest r that fits.
    const c = Math.ceil((b - k - 1) / 16);
    let rowsPer = 16 * Math.max(1, Math.floor((LOOP_BUDGET - 1 - LOOP_BUDGET / 16) / (1 + c)));
    while (rowsPer > 16 && ludDiagCost(b, k, rowsPer) > LOOP_BUDGET) rowsPer -= 16;
    for (let r0 = k + 1; r0 < b; r0 += rowsPer) launch(k, k + 1, r0, Math.min(b, r0 + rowsPer));
    k0 = k + 1;
  }
  if (b > k0) launch(k0, b, 0, b);
  return { dispatches };
}

function planLudPerimeter(p: Uint8Array, lengths: readonly number[]): BuiltinPlan | null {
  const s = ludStep(p, lengths);
  if (!s) return null;
  const { n, b, rest } = s;
  if (rest >= n) return { dispatches: [] };
  // A subgroup may hold column and row tasks: pivot p costs (1 + p) + (1 + b − p − 1) = b + 1.
  const per = Math.max(1, Math.floor(LOOP_BUDGET / (b + 1)));
  const grid = grid2d(Math.ceil((2 * (n - rest)) / WG));
  const dispatches: BuiltinDispatch[] = [];
  for (let p0 = 0; p0 < b; p0 += per) dispatches.push({ grid, push: push(p, 12, [p0, Math.min(b, p0 + per)]) });
  return { dispatches };
}

function planLudInternal(p: Uint8Array, lengths: readonly number[]): BuiltinPlan | null {
  const s = ludStep(p, lengths);
  if (!s) return null;
  const { n, b, rest } = s;
  if (rest >= n) return { dispatches: [] };
  return { dispatches: gemmLaunches(n - rest, b, (k0, k1) => push(p, 12, [k0, k1])) };
}

function planSrad(p: Uint8Array, lengths: readonly number[]): BuiltinPlan | null {
  const rows = u32(p, 0), cols = u32(p, 4);
  if (rows > MAX_DIM || cols > MAX_DIM) return null;
  for (let i = 0; i < 6; i++) if (!fits(lengths, i, rows, cols, 4)) return null;
  if (rows * cols >= MAX_ELEMS) return null;
  return elementwise(rows * cols, push(p, 12));
}

function planMemset(p: Uint8Array, lengths: readonly number[]): BuiltinPlan | null {
  const count = u64(p, 8);
  if (count * 4n > BigInt(lengths[0])) return null;
  if (count >= BigInt(MAX_ELEMS)) return null;
  return elementwise(Number(count), push(p, 16));
}

// ---- the table ----

const ALL_PAIRS_6: [number, number][] = [];
for (let i = 0; i < 6; i++) for (let j = i + 1; j < 6; j++) ALL_PAIRS_6.push([i, j]);

interface Row {
  file: string;
  minParams: number;
  noOverlap?: [number, number][];
  plan(params: Uint8Array, lengths: readonly number[]): BuiltinPlan | null;
}

const ROWS: Record<number, Row> = {
  [K.NOP]: { file: 'nop', minParams: 0, plan: planNop },
  [K.LOOP]: { file: 'loop', minParams: 20, plan: planLoop },
  [K.MADD]: { file: 'madd', minParams: 4, plan: planAdd },
  [K.FMADD]: { file: 'fmadd', minParams: 4, plan: planAdd },
  [K.MMUL]: { file: 'mmul', minParams: 4, noOverlap: [[2, 0], [2, 1]], plan: planMul },
  [K.FMMUL]: { file: 'fmmul', minParams: 4, noOverlap: [[2, 0], [2, 1]], plan: planFmul },
  [K.BACKPROP_FORWARD]: { file: 'backprop_forward', minParams: 8, noOverlap: [[2, 0], [2, 1]], plan: planBpForward },
  [K.BACKPROP_ADJUST]: {
    file: 'backprop_adjust', minParams: 16, noOverlap: [[2, 0], [2, 1], [2, 3], [3, 0], [3, 1]], plan: planBpAdjust,
  },
  [K.BFS]: { file: 'bfs', minParams: 8, plan: planBfs },
  [K.HOTSPOT]: { file: 'hotspot', minParams: 32, noOverlap: [[2, 0], [2, 1]], plan: planHotspot },
  [K.LUD_DIAGONAL]: { file: 'lud_diagonal', minParams: 12, plan: planLudDiagonal },
  [K.LUD_PERIMETER]: { file: 'lud_perimeter', minParams: 12, plan: planLudPerimeter },
  [K.LUD_INTERNAL]: { file: 'lud_internal', minParams: 12, plan: planLudInternal },
  [K.SRAD1]: { file: 'srad1', minParams: 12, noOverlap: ALL_PAIRS_6, plan: planSrad },
  [K.SRAD2]: { file: 'srad2', minParams: 12, noOverlap: ALL_PAIRS_6, plan: planSrad },
  [K.MEMSET]: { file: 'memset', minParams: 16, plan: planMemset },
};

/** Indexed by kernel id (0–15). */
export const BUILTIN_PROGRAMS: readonly BuiltinProgram[] = KERNELS.map((k, id): BuiltinProgram => {
  const row = ROWS[id];
  return {
    id,
    name: k.name,
    spv: `native/shaders/builtins/${row.file}.spv`,
    entry: 0,
    buffers: k.buffers,
    minParams: row.minParams,
    readOnly: Array.from({ length: k.buffers }, (_, i) => (k.writes & (1 << i)) === 0),
    noOverlap: row.noOverlap ?? [],
    // dispatch.cc's common checks (buffer count, parameter size), then the kernel's own.
    plan(params, lengths) {
      if (lengths.length !== k.buffers || params.length < row.minParams) return null;
      return row.plan(params, lengths);
    },
  };
});

/** The plan for kernel `id`, or null (-EINVAL); undefined for an id with no kernel (-ENOSYS). */
export function builtinPlan(id: number, params: Uint8Array, lengths: readonly number[]): BuiltinPlan | null | undefined {
  return BUILTIN_PROGRAMS[id]?.plan(params, lengths);
}

/** Absolute path of kernel `id`'s module. */
export function builtinSpvPath(id: number): string {
  return new URL(BUILTIN_PROGRAMS[id].spv, SPIRV_DIR).pathname;
}
