// Per-channel state (hw-spec §4): what the device loaded from the instance block at bind time,
// the GPFIFO cursor, the method state of the bound classes and the accounting. Plain data so
// it can be snapshotted; the segment words being executed are transient.
import { COMPUTE_MAX_BUFFERS } from './spec.ts';

export const WAIT_NONE = 0;
export const WAIT_JOB = 1;
export const WAIT_ACQUIRE = 2;
/** A program launch waits for its module to be checked and compiled (beside the device). */
export const WAIT_PROGRAM = 3;

export interface SemaphoreRegs {
  hi: number;
  lo: number;
  payload: number;
}

export interface CopyRegs extends SemaphoreRegs {
  inHi: number;
  inLo: number;
  outHi: number;
  outLo: number;
  length: number;
  lineCount: number;
}

export interface ComputeRegs extends SemaphoreRegs {
  kernel: number;
  grid: [number, number, number];
  paramHi: number;
  paramLo: number;
  paramLength: number;
  bufferCount: number;
  /** 4 words per buffer: VA upper, VA lower, length, flags. */
  buffers: number[];
  // §6.3 programs
  progHi: number;
  progLo: number;
  progLength: number;
  progEntry: number;
  specHi: number;
  specLo: number;
  specCount: number;
}

/** Decoder position inside the current pushbuffer segment. */
export interface Cursor {
  segVa: number;
  dwords: number;
  /** Next dword to read. */
  pos: number;
  /** Data words left for the current header (0 = next word is a header). */
  remaining: number;
  method: number;
  subch: number;
  op: number;
}

export interface ChannelState {
  chid: number;
  bound: boolean;
  /** Bind generation: completions of jobs from an older binding are dropped. */
  epoch: number;
  instAddr: number;
  userdTarget: number;
  userdAddr: number;
  gpBase: number;
  gpEntries: number;
  pdTarget: number;
  pdAddr: number;
  limit: number;
  gpGet: number;
  gpPut: number;
  /** A doorbell (or runnable transition) has not been served yet. */
  kicked: boolean;
  onRunlist: boolean;
  error: number;
  errorInfo: number;
  /** BAD_PROGRAM sub-reason (PFIFO_CHAN_ERR_REASON). */
  errorReason: number;
  wait: number;
  acquire: { va: number; payload: number; geq: boolean };
  subch: number[];
  host: SemaphoreRegs;
  copy: CopyRegs;
  compute: ComputeRegs;
  cursor: Cursor | null;
  /** Had work since the last idle event. */
  busy: boolean;
  /** Device ns of jobs since the last idle event, and in total. */
  busyNs: number;
  deviceNs: number;
  jobs: number;
  /** Native job id in flight, or -1. */
  job: number;
  /** Whose work this channel runs (the aggregator's VM index + 1; 0 = the one owner of pt and
   * bare engines): compiled programs are cached per owner, never shared between owners. */
  owner: number;
  /** ctxsw.ts: the context switch asked the guest program in flight to stop after its timeslice
   * for another owner (if it stops, its completion reports CTXSW_TIMEOUT). */
  ctxswCut: boolean;
}

export function newChannel(chid: number): ChannelState {
  return {
    chid, bound: false, epoch: 0, instAddr: 0,
    userdTarget: 0, userdAddr: 0, gpBase: 0, gpEntries: 0, pdTarget: 0, pdAddr: 0, limit: 0,
    gpGet: 0, gpPut: 0, kicked: false, onRunlist: false, error: 0, errorInfo: 0, errorReason: 0,
    wait: WAIT_NONE, acquire: { va: 0, payload: 0, geq: false },
    subch: [0, 0, 0, 0, 0, 0, 0, 0],
    host: { hi: 0, lo: 0, payload: 0 },
    copy: { hi: 0, lo: 0, payload: 0, inHi: 0, inLo: 0, outHi: 0, outLo: 0, length: 0, lineCount: 0 },
    compute: {
      hi: 0, lo: 0, payload: 0, kernel: 0, grid: [1, 1, 1], paramHi: 0, paramLo: 0, paramLength: 0,
      bufferCount: 0, buffers: new Array<number>(COMPUTE_MAX_BUFFERS * 4).fill(0),
      progHi: 0, progLo: 0, progLength: 0, progEntry: 0, specHi: 0, specLo: 0, specCount: 0,
    },
    cursor: null, busy: false, busyNs: 0, deviceNs: 0, jobs: 0, job: -1, owner: 0, ctxswCut: false,
  };
}

/** Forget everything learned from the instance block and methods (bind/unbind/reset). */
export function clearChannel(ch: ChannelState): void {
  const fresh = newChannel(ch.chid);
  fresh.epoch = ch.epoch + 1;
  fresh.deviceNs = ch.deviceNs;
  fresh.jobs = ch.jobs;
  fresh.onRunlist = ch.onRunlist;
  fresh.owner = ch.owner;
  Object.assign(ch, fresh);
}
