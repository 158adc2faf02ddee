// Copy class 0x90b5 (hw-spec §6.1): a subset of GF100_DMA_COPY. Source and destination VA
// ranges are translated completely before the job starts; the native pool moves the bytes
// scatter-gather between VRAM and system-memory extents.
import type { ChannelState } from './channel.ts';
import { CONTINUE, STOP, type Step, type ClassContext } from './step.ts';
import { jobPool } from './jobs.ts';
import { CHAN_ERR, COPY, UNIT } from './spec.ts';

const TWO32 = 0x1_0000_0000;
/** LAUNCH_DMA bits a launch may set: transfer type, flush, semaphore, interrupt, layouts. */
const LAUNCH_ALLOWED = 0x1ff;

export function copyMethod(cp: ClassContext, ch: ChannelState, method: number, data: number): Step {
  const c = ch.copy;
  switch (method) {
    case COPY.SET_SEMAPHORE_A: c.hi = data & 0xff; return CONTINUE;
    case COPY.SET_SEMAPHORE_B: c.lo = data >>> 0; return CONTINUE;
    case COPY.SET_SEMAPHORE_PAYLOAD: c.payload = data >>> 0; return CONTINUE;
    case COPY.OFFSET_IN_UPPER: c.inHi = data & 0xff; return CONTINUE;
    case COPY.OFFSET_IN_LOWER: c.inLo = data >>> 0; return CONTINUE;
    case COPY.OFFSET_OUT_UPPER: c.outHi = data & 0xff; return CONTINUE;
    case COPY.OFFSET_OUT_LOWER: c.outLo = data >>> 0; return CONTINUE;
    case COPY.LINE_LENGTH_IN: c.length = data >>> 0; return CONTINUE;
    case COPY.LINE_COUNT:
      if (data > 1) return cp.error(ch, CHAN_ERR.BAD_METHOD_DATA);
      c.lineCount = data;
      return CONTINUE;
    case COPY.LAUNCH_DMA:
      return launch(cp, ch, data >>> 0);
    default:
      return cp.error(ch, CHAN_ERR.BAD_METHOD);
  }
}

function launch(cp: ClassContext, ch: ChannelState, flags: number): Step {
  const c = ch.copy;
  const transfer = flags & 3;
  const post = cp.postOp(flags, c);
  if ((flags & ~LAUNCH_ALLOWED) !== 0 || transfer === 3 || !post) return cp.error(ch, CHAN_ERR.BAD_METHOD_DATA);
  if (transfer === 0) return cp.completeNow(ch, post);
  if (c.length === 0) return cp.error(ch, CHAN_ERR.BAD_METHOD_DATA);
  const src = cp.translate(ch, c.inHi * TWO32 + c.inLo, c.length, false, UNIT.COPY);
  if (!src) return STOP;
  const dst = cp.translate(ch, c.outHi * TWO32 + c.outLo, c.length, true, UNIT.COPY);
  if (!dst) return STOP;
  // Resident copies of dst are stale: dropped now, and again when the bytes have landed (a
  // launch of the same VM on another channel may have uploaded them meanwhile).
  const vram = cp.core.vram;
  vram.wroteExtents(dst);
  return cp.startJob(ch, (wd, done) => jobPool.submitCopy({ src, dst, way: ch.owner }, wd, done), post, () => vram.wroteExtents(dst));
}
