// Pushbuffer encoder (hw-spec §5): method headers in the GF100 format, host methods and the
// copy/compute launch sequences. Used by the host driver, the tests and the aggregator.
import {
  BUFFER_DEVICE_CACHED, BUFFER_READ_ONLY, COMPUTE, COPY, HOST, LAUNCH, LAUNCH_PROGRAM, SEC_OP, SEM_OP, SEM_RELEASE_16BYTE, SEM_RELEASE_INTERRUPT,
} from '../../../src/gpu/spec.ts';

const TWO32 = 0x1_0000_0000;

/** Method header: SEC_OP 31:29, COUNT/immediate 28:16, SUBCHANNEL 15:13, METHOD>>2 in 11:0. */
export function header(op: number, count: number, subch: number, method: number): number {
  return ((op << 29) | ((count & 0x1fff) << 16) | ((subch & 7) << 13) | ((method >> 2) & 0xfff)) >>> 0;
}

export const hi8 = (va: number) => Math.floor(va / TWO32) & 0xff;
export const lo32 = (va: number) => va % TWO32 >>> 0;

export interface SemaphoreRelease {
  va: number;
  payload: number;
  interrupt?: boolean;
  /** 16-byte release with a timestamp. */
  timestamp?: boolean;
}

export interface CopyLaunch {
  src: number;
  dst: number;
  length: number;
  /** Release a semaphore on completion (one word, or four with timestamp). */
  semaphore?: SemaphoreRelease;
}

export interface ComputeLaunch {
  kernel: number;
  grid?: [number, number, number];
  paramVa?: number;
  paramLength?: number;
  buffers: { va: number; length: number }[];
  semaphore?: SemaphoreRelease;
}

/** A SPIR-V program launch (hw-spec §6.3): every method of it, so no state of an earlier launch leaks in. */
export interface ProgramLaunchMethods {
  /** Module VA and byte length (PROGRAM_VA, PROGRAM_LENGTH). */
  moduleVa: number;
  moduleLength: number;
  /** PROGRAM_ENTRY: index among the module's GLCompute entry points. */
  entry?: number;
  /** Workgroup counts. */
  grid?: [number, number, number];
  /** Push-constant block (PARAM_VA/LENGTH). */
  paramVa?: number;
  paramLength?: number;
  /** Specialization block: {u32 id, u32 value} pairs (SPEC_VA, SPEC_COUNT). */
  specVa?: number;
  specCount?: number;
  /** Binding i = buffer i. */
  buffers: { va: number; length: number; readOnly?: boolean; cached?: boolean }[];
  semaphore?: SemaphoreRelease;
}

/** Growable dword buffer with helpers for every method sequence the hardware accepts. */
export class Pushbuffer {
  private buf = new Uint32Array(256);
  private n = 0;

  get length(): number {
    return this.n;
  }

  /** The dwords written so far (a view; copy before reusing the encoder). */
  words(): Uint32Array {
    return this.buf.subarray(0, this.n);
  }

  clear(): this {
    this.n = 0;
    return this;
  }

  raw(...w: number[]): this {
    for (const x of w) this.push(x);
    return this;
  }

  /** INC: data[i] goes to method + 4*i. */
  inc(subch: number, method: number, ...data: number[]): this {
    this.push(header(SEC_OP.INC, data.length, subch, method));
    for (const d of data) this.push(d);
    return this;
  }

  /** NON_INC: every data word goes to the same method. */
  nonInc(subch: number, method: number, ...data: number[]): this {
    this.push(header(SEC_OP.NON_INC, data.length, subch, method));
    for (const d of data) this.push(d);
    return this;
  }

  /** INC_ONCE: first word to method, the rest to method + 4. */
  incOnce(subch: number, method: number, ...data: number[]): this {
    this.push(header(SEC_OP.INC_ONCE, data.length, subch, method));
    for (const d of data) this.push(d);
    return this;
  }

  /** IMMD: a 13-bit value in the header. */
  immd(subch: number, method: number, value: number): this {
    if (value < 0 || value > 0x1fff) throw new RangeError(`immediate ${value} does not fit 13 bits`);
    return this.push(header(SEC_OP.IMMD, value, subch, method));
  }

  end(): this {
    return this.push(header(SEC_OP.END_PB_SEGMENT, 0, 0, 0));
  }

  setObject(subch: number, cls: number): this {
    return this.inc(subch, HOST.SET_OBJECT, cls);
  }

  nop(): this {
    return this.inc(0, HOST.NOP, 0);
  }

  semaphoreRelease(s: SemaphoreRelease): this {
    let d = SEM_OP.RELEASE;
    if (s.interrupt) d |= SEM_RELEASE_INTERRUPT;
    if (s.timestamp) d |= SEM_RELEASE_16BYTE;
    return this.inc(0, HOST.SEMAPHORE_A, hi8(s.va), lo32(s.va), s.payload >>> 0, d >>> 0);
  }

  semaphoreAcquire(va: number, payload: number, geq = false): this {
    return this.inc(0, HOST.SEMAPHORE_A, hi8(va), lo32(va), payload >>> 0, geq ? SEM_OP.ACQ_GEQ : SEM_OP.ACQUIRE);
  }

  nonStallInterrupt(): this {
    return this.inc(0, HOST.NON_STALL_INTERRUPT, 0);
  }

  setReference(value: number): this {
    return this.inc(0, HOST.SET_REFERENCE, value >>> 0);
  }

  /** Copy on `subch` (bound to 0x90b5): offsets, length, LAUNCH_DMA (+ semaphore). */
  copy(subch: number, c: CopyLaunch): this {
    this.inc(subch, COPY.OFFSET_IN_UPPER, hi8(c.src), lo32(c.src), hi8(c.dst), lo32(c.dst));
    this.inc(subch, COPY.LINE_LENGTH_IN, c.length >>> 0, 1);
    return this.inc(subch, COPY.LAUNCH_DMA, launchFlags(1, c.semaphore, this, subch, COPY.SET_SEMAPHORE_A));
  }

  /** Compute on `subch` (bound to 0x90c0): kernel, grid, params, buffers, LAUNCH (+ semaphore). */
  compute(subch: number, k: ComputeLaunch): this {
    const g = k.grid ?? [1, 1, 1];
    this.inc(subch, COMPUTE.KERNEL_ID, k.kernel, g[0], g[1], g[2]);
    const pva = k.paramVa ?? 0;
    this.inc(subch, COMPUTE.PARAM_VA_UPPER, hi8(pva), lo32(pva), k.paramLength ?? 0);
    this.inc(subch, COMPUTE.BUFFER_COUNT, k.buffers.length);
    if (k.buffers.length > 0) {
      const words: number[] = [];
      for (const b of k.buffers) words.push(hi8(b.va), lo32(b.va), b.length >>> 0, 0);
      this.inc(subch, COMPUTE.BUFFER_BASE, ...words);
    }
    return this.inc(subch, COMPUTE.LAUNCH, launchFlags(0, k.semaphore, this, subch, COMPUTE.SET_SEMAPHORE_A));
  }

  /** A program launch on `subch` (bound to 0x90c0): grid, push block, module, spec block, buffers, LAUNCH|PROGRAM. */
  program(subch: number, k: ProgramLaunchMethods): this {
    const g = k.grid ?? [1, 1, 1];
    const pva = k.paramVa ?? 0;
    const sva = k.specVa ?? 0;
    this.inc(subch, COMPUTE.GRID_X, g[0], g[1], g[2], hi8(pva), lo32(pva), k.paramLength ?? 0);
    this.inc(subch, COMPUTE.PROGRAM_VA_UPPER, hi8(k.moduleVa), lo32(k.moduleVa), k.moduleLength >>> 0, k.entry ?? 0);
    this.inc(subch, COMPUTE.BUFFER_COUNT, k.buffers.length);
    this.inc(subch, COMPUTE.SPEC_VA_UPPER, hi8(sva), lo32(sva), k.specCount ?? 0);
    if (k.buffers.length > 0) {
      const words: number[] = [];
      for (const b of k.buffers) words.push(hi8(b.va), lo32(b.va), b.length >>> 0, (b.readOnly ? BUFFER_READ_ONLY : 0) | (b.cached ? BUFFER_DEVICE_CACHED : 0));
      this.inc(subch, COMPUTE.BUFFER_BASE, ...words);
    }
    return this.inc(subch, COMPUTE.LAUNCH, (launchFlags(0, k.semaphore, this, subch, COMPUTE.SET_SEMAPHORE_A) | LAUNCH_PROGRAM) >>> 0);
  }

  private push(w: number): this {
    if (this.n === this.buf.length) {
      const b = new Uint32Array(this.buf.length * 2);
      b.set(this.buf);
      this.buf = b;
    }
    this.buf[this.n++] = w >>> 0;
    return this;
  }
}

/** LAUNCH flags; emits the class's SET_SEMAPHORE_A/B/PAYLOAD first when a release is wanted. */
function launchFlags(transfer: number, s: SemaphoreRelease | undefined, pb: Pushbuffer, subch: number, semA: number): number {
  let f = transfer;
  if (s) {
    pb.inc(subch, semA, hi8(s.va), lo32(s.va), s.payload >>> 0);
    f |= (s.timestamp ? LAUNCH.SEM_FOUR_WORD : LAUNCH.SEM_ONE_WORD) << LAUNCH.SEM_SHIFT;
    if (s.interrupt) f |= 2 << LAUNCH.INTR_SHIFT;
  }
  return f;
}

/** GPFIFO entry (hw-spec §4.3) as two dwords. */
export function gpfifoEntry(va: number, dwords: number): [number, number] {
  return [(lo32(va) & ~3) >>> 0, (hi8(va) | ((dwords & 0x1fffff) << 10)) >>> 0];
}
