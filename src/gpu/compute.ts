// Compute class 0x90c0 (hw-spec §6.2): launches a built-in kernel by id. At LAUNCH every buffer
// VA range is translated (write access for the buffers the kernel writes), mapped into one
// contiguous host window each, and the kernel runs on the native pool; the windows are
// unmapped when it completes. Nothing runs if any translation faults.
import type { WindowRef } from './windows.ts';
import type { ChannelState } from './channel.ts';
import { CONTINUE, STOP, type CommandProcessor, type Step } from './cp.ts';
import { jobPool } from './jobs.ts';
import { KERNELS } from './kernels.ts';
import { CHAN_ERR, COMPUTE, COMPUTE_MAX_BUFFERS, COMPUTE_MAX_PARAMS, SMALL_PAGE, UNIT } from './spec.ts';

const TWO32 = 0x1_0000_0000;
/** LAUNCH bits a compute launch may set: flush, semaphore type, interrupt type. */
const LAUNCH_ALLOWED = 0x7c;
const BUF_END = COMPUTE.BUFFER_BASE + COMPUTE_MAX_BUFFERS * COMPUTE.BUFFER_STRIDE;

export function computeMethod(cp: CommandProcessor, ch: ChannelState, method: number, data: number): Step {
  const k = ch.compute;
  if (method >= COMPUTE.BUFFER_BASE && method < BUF_END) {
    const word = (method - COMPUTE.BUFFER_BASE) >> 2;
    if ((word & 3) === 0) data &= 0xff; // VA upper
    else if ((word & 3) === 3 && data !== 0) return cp.error(ch, CHAN_ERR.BAD_METHOD_DATA); // flags
    k.buffers[word] = data >>> 0;
    return CONTINUE;
  }
  switch (method) {
    case COMPUTE.KERNEL_ID: k.kernel = data >>> 0; return CONTINUE;
    case COMPUTE.GRID_X:
    case COMPUTE.GRID_Y:
    case COMPUTE.GRID_Z:
      if (data === 0) return cp.error(ch, CHAN_ERR.BAD_METHOD_DATA);
      k.grid[(method - COMPUTE.GRID_X) >> 2] = data >>> 0;
      return CONTINUE;
    case COMPUTE.PARAM_VA_UPPER: k.paramHi = data & 0xff; return CONTINUE;
    case COMPUTE.PARAM_VA_LOWER: k.paramLo = data >>> 0; return CONTINUE;
    case COMPUTE.PARAM_LENGTH: k.paramLength = data >>> 0; return CONTINUE;
    case COMPUTE.BUFFER_COUNT: k.bufferCount = data >>> 0; return CONTINUE;
    case COMPUTE.SET_SEMAPHORE_A: k.hi = data & 0xff; return CONTINUE;
    case COMPUTE.SET_SEMAPHORE_B: k.lo = data >>> 0; return CONTINUE;
    case COMPUTE.SET_SEMAPHORE_PAYLOAD: k.payload = data >>> 0; return CONTINUE;
    case COMPUTE.LAUNCH: return launch(cp, ch, data >>> 0);
    default: return cp.error(ch, CHAN_ERR.BAD_METHOD);
  }
}

function launch(cp: CommandProcessor, ch: ChannelState, flags: number): Step {
  const k = ch.compute;
  const post = cp.postOp(flags, k);
  if ((flags & ~LAUNCH_ALLOWED) !== 0 || !post) return cp.error(ch, CHAN_ERR.BAD_METHOD_DATA);
  const info = KERNELS[k.kernel];
  if (!info || k.bufferCount !== info.buffers || k.paramLength > COMPUTE_MAX_PARAMS) {
    return cp.error(ch, CHAN_ERR.BAD_LAUNCH);
  }
  let params = new Uint8Array(0);
  if (k.paramLength > 0) {
    const p = cp.readVa(ch, k.paramHi * TWO32 + k.paramLo, k.paramLength, UNIT.COMPUTE);
    if (!p) return STOP;
    params = p.slice(); // the job keeps its own copy (the guest may reuse the memory)
  }

  // Translate every buffer before mapping any (a fault must leave nothing behind).
  const ranges: { extents: import('../native.ts').Extent[]; offset: number; length: number; write: boolean }[] = [];
  for (let i = 0; i < info.buffers; i++) {
    const va = k.buffers[4 * i]! * TWO32 + k.buffers[4 * i + 1]!;
    const len = k.buffers[4 * i + 2]!;
    if (len === 0) return cp.error(ch, CHAN_ERR.BAD_METHOD_DATA);
    // Windows are mapped with page granularity; the kernel sees exactly [va, va + len).
    const start = va - (va % SMALL_PAGE);
    const end = Math.ceil((va + len) / SMALL_PAGE) * SMALL_PAGE;
    const write = ((info.writes >>> i) & 1) === 1;
    const extents = cp.translate(ch, start, end - start, write, UNIT.COMPUTE);
    if (!extents) return STOP;
    ranges.push({ extents, offset: va - start, length: len, write });
  }

  const maps: WindowRef[] = [];
  const unmap = () => {
    for (const m of maps) m.release();
    maps.length = 0;
  };
  try {
    for (const r of ranges) maps.push(cp.windows.acquire(r.extents, !r.write));
  } catch (err) {
    unmap();
    cp.core.log.warn({ chid: ch.chid, err: (err as Error).message }, 'gpu compute: mapWindow failed');
    return cp.error(ch, CHAN_ERR.KERNEL_ERROR);
  }
  const job = {
    kernel: k.kernel,
    windows: maps.map((m, i) => m.address + BigInt(ranges[i]!.offset)),
    lengths: ranges.map((r) => r.length),
    params,
  };
  return cp.startJob(ch, (wd, done) => jobPool.submitKernel(job, wd, done), post, unmap);
}
