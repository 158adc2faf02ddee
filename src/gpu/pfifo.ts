// PFIFO (hw-spec §3.4, §4, §8.2): the channel table, instance-block loading at bind time,
// the runlist, preempt, doorbell, per-channel error state and fence/error pending bits.
// Execution of what channels submit is the command processor's job (cp.ts).
import type { RegisterInfo } from './regs.ts';
import type { GpuCore } from './core.ts';
import type { Mmu } from './mmu.ts';
import { clearChannel, newChannel, WAIT_ACQUIRE, WAIT_JOB, WAIT_NONE, WAIT_PROGRAM, type ChannelState } from './channel.ts';
import {
  CHAN_ERR, CHAN_INST_MASK, CHAN_VALID, DOORBELL, GPFIFO_MAX_LOG2, INST, INST_SIZE, MAX_CHANNELS,
  PFIFO_CHAN, PFIFO_CHAN_COUNT, PFIFO_CHAN_ERR, PFIFO_CHAN_ERR_INFO, PFIFO_CHAN_ERR_REASON, PFIFO_CHAN_STATE,
  PFIFO_ERR_PENDING, PFIFO_FENCE_PENDING, PFIFO_INTR, PFIFO_INTR_CHAN_ERROR, PFIFO_INTR_EN,
  PFIFO_INTR_FENCE, PFIFO_INTR_RUNLIST_ERROR, PFIFO_PREEMPT, PFIFO_PREEMPT_PENDING,
  PFIFO_RUNLIST_BASE, PFIFO_RUNLIST_STATUS, PFIFO_RUNLIST_SUBMIT, PMC_ENABLE, PMC_ENABLE_PFIFO,
  STATE_ACQUIRE_WAIT, STATE_BUSY, STATE_ENABLE, STATE_ERROR, STATE_PROGRAM_WAIT, USERD, USERD_SIZE, VA_LIMIT,
  TARGET_VRAM,
} from './spec.ts';
import { isSysmem } from './mmu.ts';

const RO = 0xffffffff;
const TWO32 = 0x1_0000_0000;

export class Pfifo {
  readonly channels: ChannelState[];
  runlist: number[] = [];
  /** Set by the engine: make the command processor look at this channel. */
  kick: (ch: ChannelState) => void = () => {};
  /** Set by the engine: a channel stopped (drop its job, acquire wait, …). */
  stopped: (ch: ChannelState) => void = () => {};
  private core: GpuCore;
  private mmu: Mmu;

  constructor(core: GpuCore, mmu: Mmu, count: number) {
    if (!Number.isInteger(count) || count < 1 || count > MAX_CHANNELS) {
      throw new RangeError(`channel count must be 1–${MAX_CHANNELS}, got ${count}`);
    }
    this.core = core;
    this.mmu = mmu;
    this.channels = Array.from({ length: count }, (_, i) => newChannel(i));
  }

  // ---- state queries ----

  stateBits(ch: ChannelState): number {
    let v = this.core.regs.get(PFIFO_CHAN_STATE + 8 * ch.chid) & STATE_ENABLE;
    if (ch.wait === WAIT_ACQUIRE) v |= STATE_ACQUIRE_WAIT;
    else if (ch.wait === WAIT_PROGRAM) v |= STATE_PROGRAM_WAIT;
    if (ch.bound && (ch.cursor !== null || ch.gpGet !== ch.gpPut || ch.wait !== WAIT_NONE || ch.kicked)) v |= STATE_BUSY;
    if (ch.error) v |= STATE_ERROR;
    return v;
  }

  /** May the channel fetch and execute now? */
  runnable(ch: ChannelState): boolean {
    return ch.bound && ch.error === 0 && ch.onRunlist &&
      (this.core.regs.get(PFIFO_CHAN_STATE + 8 * ch.chid) & STATE_ENABLE) !== 0 &&
      (this.core.regs.get(PMC_ENABLE) & PMC_ENABLE_PFIFO) !== 0;
  }

  /** Kick every channel with an unserved doorbell (after something made channels runnable). */
  kickAll(): void {
    for (const ch of this.channels) if (ch.bound && (ch.kicked || ch.cursor || ch.gpGet !== ch.gpPut)) this.kick(ch);
  }

  // ---- bind ----

  private bind(ch: ChannelState, inst: number): void {
    this.stopped(ch);
    clearChannel(ch);
    ch.instAddr = inst;
    const vram = this.core.vram;
    const bad = () => this.fail(ch, CHAN_ERR.BAD_INSTANCE, 0);
    if (!vram.contains(inst, INST_SIZE)) return bad();
    const r = (o: number) => vram.read32(inst + o);
    const userdLo = r(INST.USERD_LO);
    ch.userdTarget = userdLo & 3;
    ch.userdAddr = ((userdLo & 0xfffffe00) >>> 0) + r(INST.USERD_HI) * TWO32;
    const gpLo = r(INST.GP_BASE_LO);
    const gpHi = r(INST.GP_BASE_HI);
    const log2 = (gpHi >>> 16) & 0x1f;
    ch.gpBase = gpLo + (gpHi & 0xff) * TWO32;
    ch.gpEntries = 2 ** log2;
    const pdLo = r(INST.PD_LO);
    ch.pdTarget = pdLo & 3;
    ch.pdAddr = ((pdLo & 0xfffff000) >>> 0) + r(INST.PD_HI) * TWO32;
    const limit = r(INST.LIMIT_LO) + (r(INST.LIMIT_HI) & 0xff) * TWO32;
    ch.limit = limit === 0 ? VA_LIMIT - 1 : limit;
    const targetOk = (t: number) => t === TARGET_VRAM || isSysmem(t);
    if (!targetOk(ch.userdTarget) || !targetOk(ch.pdTarget) || (gpLo & 7) !== 0 ||
        (gpHi & ~0x001f00ff) !== 0 || log2 < 1 || log2 > GPFIFO_MAX_LOG2) {
      return bad();
    }
    // USERD must be reachable now; the device resets GP_GET in it.
    if (!this.mmu.physExtents(ch.userdTarget, ch.userdAddr, USERD_SIZE, true)) return bad();
    if (!this.mmu.physWrite(ch.userdTarget, ch.userdAddr + USERD.GP_GET, new Uint8Array(4))) return bad();
    ch.bound = true;
  }

  private unbind(ch: ChannelState): void {
    this.stopped(ch);
    clearChannel(ch);
    this.core.regs.clearBits(PFIFO_CHAN_STATE + 8 * ch.chid, STATE_ENABLE);
  }

  // ---- errors and fences ----

  /** Put a channel into the error state (hw-spec §8.2). */
  fail(ch: ChannelState, code: number, info: number, reason = 0): void {
    if (ch.error) return;
    ch.error = code;
    ch.errorInfo = info >>> 0;
    ch.errorReason = reason;
    const regs = this.core.regs;
    regs.clearBits(PFIFO_CHAN_STATE + 8 * ch.chid, STATE_ENABLE);
    regs.setBits(PFIFO_ERR_PENDING + 4 * (ch.chid >> 5), 1 << (ch.chid & 31));
    this.stopped(ch);
    this.core.guestWarnings.warn(ch.chid, { chid: ch.chid, code, info: `0x${ch.errorInfo.toString(16)}` }, 'gpu channel error');
    if (code !== CHAN_ERR.MMU_FAULT) this.core.irq.raiseFifo(PFIFO_INTR_CHAN_ERROR);
    this.core.listener.channelError?.(ch.chid, code, ch.errorInfo);
  }

  fence(ch: ChannelState): void {
    this.core.regs.setBits(PFIFO_FENCE_PENDING + 4 * (ch.chid >> 5), 1 << (ch.chid & 31));
    this.core.irq.raiseFifo(PFIFO_INTR_FENCE);
    this.core.listener.fence?.(ch.chid);
  }

  // ---- runlist ----

  private submitRunlist(entries: number): void {
    const base = this.core.regs.get(PFIFO_RUNLIST_BASE) * 4096;
    const vram = this.core.vram;
    if (entries > this.channels.length || !vram.contains(base, entries * 8)) {
      this.core.guestWarnings.warn('runlist', { entries, base }, 'gpu runlist rejected');
      this.core.irq.raiseFifo(PFIFO_INTR_RUNLIST_ERROR);
      return;
    }
    const list: number[] = [];
    for (let i = 0; i < entries; i++) {
      const chid = vram.read32(base + 8 * i) & 0x7f;
      if (chid < this.channels.length && !list.includes(chid)) list.push(chid);
    }
    this.runlist = list;
    for (const ch of this.channels) ch.onRunlist = false;
    for (const chid of list) {
      const ch = this.channels[chid]!;
      ch.onRunlist = true;
      ch.kicked = true;
    }
    this.kickAll();
  }

  doorbell(chid: number): void {
    const ch = this.channels[chid];
    if (!ch || !ch.bound) return;
    ch.kicked = true;
    this.kick(ch);
  }

  // ---- registers ----

  registers(): RegisterInfo[] {
    const out: RegisterInfo[] = [
      { addr: PFIFO_CHAN_COUNT, name: 'PFIFO_CHAN_COUNT', reset: this.channels.length, ro: RO },
      { addr: PFIFO_INTR, name: 'PFIFO_INTR', reset: 0, ro: ~7, w1c: 7 },
      { addr: PFIFO_INTR_EN, name: 'PFIFO_INTR_EN', reset: 7, ro: ~7 },
      { addr: PFIFO_RUNLIST_BASE, name: 'PFIFO_RUNLIST_BASE', reset: 0, ro: 0xf0000000 },
      {
        addr: PFIFO_RUNLIST_SUBMIT, name: 'PFIFO_RUNLIST_SUBMIT', reset: 0, ro: RO,
        postWrite: (_s, w) => this.submitRunlist(w & 0xfff),
      },
      {
        addr: PFIFO_RUNLIST_STATUS, name: 'PFIFO_RUNLIST_STATUS', reset: 0, ro: RO,
        postRead: () => this.runlist.length,
      },
      {
        addr: PFIFO_PREEMPT, name: 'PFIFO_PREEMPT', reset: 0, ro: ~0x7f,
        postRead: (v) => {
          const ch = this.channels[v & 0x7f];
          return ch && ch.wait === WAIT_JOB ? v | PFIFO_PREEMPT_PENDING : v;
        },
      },
      {
        addr: DOORBELL, name: 'DOORBELL', reset: 0, ro: RO,
        postWrite: (_s, w) => this.doorbell(w & 0x7f),
      },
    ];
    for (let i = 0; i < 4; i++) {
      out.push({ addr: PFIFO_FENCE_PENDING + 4 * i, name: `PFIFO_FENCE_PENDING${i}`, reset: 0, ro: 0, w1c: RO });
      out.push({ addr: PFIFO_ERR_PENDING + 4 * i, name: `PFIFO_ERR_PENDING${i}`, reset: 0, ro: 0, w1c: RO });
    }
    for (const ch of this.channels) {
      const c = ch.chid;
      out.push(
        { addr: PFIFO_CHAN_ERR + 8 * c, name: `PFIFO_CHAN_ERR${c}`, reset: 0, ro: RO, postRead: () => ch.error },
        { addr: PFIFO_CHAN_ERR_INFO + 8 * c, name: `PFIFO_CHAN_ERR_INFO${c}`, reset: 0, ro: RO, postRead: () => ch.errorInfo },
        { addr: PFIFO_CHAN_ERR_REASON + 4 * c, name: `PFIFO_CHAN_ERR_REASON${c}`, reset: 0, ro: RO, postRead: () => ch.errorReason },
        {
          addr: PFIFO_CHAN + 8 * c, name: `PFIFO_CHAN${c}`, reset: 0, ro: 0x70000000,
          postWrite: (v) => {
            if (v & CHAN_VALID) this.bind(ch, (v & CHAN_INST_MASK) * 4096);
            else this.unbind(ch);
          },
        },
        {
          addr: PFIFO_CHAN_STATE + 8 * c, name: `PFIFO_CHAN_STATE${c}`, reset: 0, ro: ~STATE_ENABLE,
          // A channel in the error state cannot be enabled (rebind it to recover).
          preWrite: (v) => (ch.error ? v & ~STATE_ENABLE : v),
          postWrite: (v, _w, old) => {
            if (v & STATE_ENABLE && !(old & STATE_ENABLE) && ch.bound) {
              ch.kicked = true; // becoming runnable re-reads GP_PUT
              this.kick(ch);
            }
          },
          postRead: () => this.stateBits(ch),
        },
      );
    }
    return out;
  }

  /** Device reset: unbind everything. */
  reset(): void {
    for (const ch of this.channels) {
      this.stopped(ch);
      clearChannel(ch);
      ch.onRunlist = false;
      ch.deviceNs = 0;
      ch.busyNs = 0;
    }
    this.runlist = [];
  }
}
