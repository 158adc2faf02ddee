// A VM's virtual channels and their shadow channels on the engine (GPUvm's channel::refresh,
// hw-spec §10 PFIFO_CHAN row). Binding a virtual channel takes a physical chid from the shared
// pool, copies the guest's instance block into the host-owned shadow instance block of that
// chid and rewrites everything that names memory — USERD (slice-shifted, or a bus address after
// a DMA-map check) and the page directory (the shadow PD from shadow-mmu.ts) — then binds the
// physical channel to the shadow. Channel state, error and preempt registers are read through
// the physical chid. Physically a channel is enabled only by the dispatcher (aggregator.ts).
import type { Logger } from '../log.ts';
import type { Engine } from '../gpu/engine.ts';
import type { VgpuCounters } from './counters.ts';
import { busAddress, type GuestMemory } from './guest-memory.ts';
import type { ShadowMmu, ShadowSpace, Slice } from './shadow-mmu.ts';
import {
  CHAN_ERR, CHAN_INST_MASK, CHAN_VALID, INST, INST_SIZE, PFIFO_CHAN, PFIFO_CHAN_ERR, PFIFO_CHAN_ERR_REASON,
  PFIFO_CHAN_STATE, PFIFO_PREEMPT, PFIFO_PREEMPT_PENDING, STATE_BUSY, STATE_ENABLE, STATE_ERROR,
  TARGET_SYSMEM, TARGET_SYSMEM_NC, TARGET_VRAM, USERD_SIZE,
} from '../gpu/spec.ts';

const TWO32 = 0x1_0000_0000;
/** An instance-block TARGET the engine rejects: a shadow field the guest got wrong becomes this,
 * so the engine reports BAD_INSTANCE on the physical channel and the error is routed back. */
const TARGET_INVALID = 1;

/** A virtual channel (plain data). */
export interface VChannel {
  /** Physical channel, or −1 while unbound (or refused). */
  pchid: number;
  /** The guest's STATE.ENABLE. */
  enable: boolean;
  /** Error code/info of a bind the aggregator refused itself (pool exhausted); 0 otherwise. */
  error: number;
  errorInfo: number;
  /** Key of the shadow address space in use. */
  space: string | null;
  onRunlist: boolean;
  /** A doorbell is queued for dispatch. */
  queued: boolean;
}

export function newVChannel(): VChannel {
  return { pchid: -1, enable: false, error: 0, errorInfo: 0, space: null, onRunlist: false, queued: false };
}

/** The physical resources shadow channels use (the aggregator; vgpu.ts's VgpuHost extends it).
 * Declared here so that this file does not import vgpu.ts, which imports it. */
export interface ChannelHost {
  freeChid(pchid: number): void;
  /** Engine VRAM address of the shadow instance block of a physical channel. */
  shadowInstance(pchid: number): number;
  /** Some VM's runlist or channel mapping changed: rebuild and submit the merged runlist. */
  runlistChanged(): void;
  /** Stop a physical channel from fetching (clear its physical STATE.ENABLE). */
  closeChannel(pchid: number): void;
}

export interface ChannelEnv {
  engine: Engine;
  host: ChannelHost;
  /** A physical chid from the shared pool for this VM's vchid, or −1. */
  allocChid(vchid: number): number;
  slice: Slice;
  /** Bus index of the VM. */
  index: number;
  mmu: ShadowMmu;
  guest(): GuestMemory | null;
  /** The VM's PMC_ENABLE.PFIFO. */
  pfifoEnabled(): boolean;
  counters: VgpuCounters;
  log: Logger;
  /** Raise the VM's channel error for vchid (a bind the aggregator refused). */
  refused(vchid: number, code: number): void;
  /** vchid became runnable: the device would read GP_PUT now (a submission). */
  becameRunnable(vchid: number): void;
}

export class ShadowChannels {
  readonly list: VChannel[];
  private readonly env: ChannelEnv;

  constructor(env: ChannelEnv, count: number) {
    this.env = env;
    this.list = Array.from({ length: count }, newVChannel);
  }

  /** PFIFO_CHAN(vchid) written: bind (shadow the instance block) or unbind. */
  bind(vchid: number, value: number): void {
    const env = this.env;
    const vc = this.list[vchid]!;
    if ((value & CHAN_VALID) === 0) {
      this.unbind(vc);
      return;
    }
    if (vc.pchid < 0) {
      const pchid = env.allocChid(vchid);
      if (pchid < 0) {
        env.counters.poolExhausted++;
        env.log.warn({ vchid }, 'physical channel pool exhausted: bind refused');
        vc.error = CHAN_ERR.BAD_INSTANCE;
        vc.errorInfo = 0;
        vc.enable = false;
        env.refused(vchid, CHAN_ERR.BAD_INSTANCE);
        return;
      }
      vc.pchid = pchid;
    }
    vc.error = 0;
    vc.errorInfo = 0;
    const old = vc.space;
    const shadow = env.host.shadowInstance(vc.pchid);
    const sp = this.shadowInstance((value & CHAN_INST_MASK) * 4096, shadow);
    vc.space = sp ? sp.key : null;
    if (old !== null) this.releaseSpace(old);
    env.host.closeChannel(vc.pchid);
    env.engine.mmioWrite(PFIFO_CHAN + 8 * vc.pchid, 4, (CHAN_VALID | shadow / 4096) >>> 0);
    if (vc.onRunlist) env.host.runlistChanged();
  }

  unbind(vc: VChannel): void {
    const env = this.env;
    if (vc.pchid >= 0) {
      env.host.closeChannel(vc.pchid);
      env.engine.mmioWrite(PFIFO_CHAN + 8 * vc.pchid, 4, 0);
      env.host.freeChid(vc.pchid);
      vc.pchid = -1;
      if (vc.onRunlist) env.host.runlistChanged();
    }
    vc.enable = false;
    vc.error = 0;
    vc.errorInfo = 0;
    if (vc.space !== null) this.releaseSpace(vc.space);
    vc.space = null;
  }

  /** Unbind everything and forget runlist and queue flags (VM reset). */
  reset(): void {
    for (const vc of this.list) {
      vc.onRunlist = false;
      vc.queued = false;
      this.unbind(vc);
    }
  }

  /**
   * Copy the guest's instance block into the channel's shadow instance block and rewrite what
   * names memory: USERD and the page directory. A field the VM has no right to becomes an
   * invalid TARGET, so the engine refuses the bind with BAD_INSTANCE. Returns the shadow space
   * in use, or null.
   */
  private shadowInstance(inst: number, shadow: number): ShadowSpace | null {
    const { engine, slice, mmu } = this.env;
    const vram = engine.vram;
    vram.u8.fill(0, shadow, shadow + INST_SIZE);
    if (!(inst + INST_SIZE <= slice.size)) {
      vram.write32(shadow + INST.USERD_LO, TARGET_INVALID);
      return null;
    }
    const g = (o: number) => vram.read32(slice.base + inst + o);
    const w = (o: number, v: number) => vram.write32(shadow + o, v);
    for (const o of [INST.MAGIC, INST.GP_BASE_LO, INST.GP_BASE_HI, INST.LIMIT_LO, INST.LIMIT_HI]) w(o, g(o));

    const uLo = g(INST.USERD_LO);
    const uTarget = uLo & 3;
    const uAddr = ((uLo & 0xfffffe00) >>> 0) + g(INST.USERD_HI) * TWO32;
    const userd = this.physical(uTarget, uAddr, USERD_SIZE, true);
    if (userd < 0) {
      w(INST.USERD_LO, TARGET_INVALID);
      return null;
    }
    w(INST.USERD_LO, ((userd % TWO32) | uTarget) >>> 0);
    w(INST.USERD_HI, Math.floor(userd / TWO32));

    const pLo = g(INST.PD_LO);
    const pTarget = pLo & 3;
    const pAddr = ((pLo & 0xfffff000) >>> 0) + g(INST.PD_HI) * TWO32;
    const sp = pTarget === TARGET_INVALID ? null : mmu.acquire(pTarget, pAddr);
    if (!sp) {
      w(INST.PD_LO, TARGET_INVALID);
      return null;
    }
    w(INST.PD_LO, (sp.pd | TARGET_VRAM) >>> 0);
    w(INST.PD_HI, 0);
    return sp;
  }

  /** Engine address of [addr, addr+len) of the VM's memory (VRAM: slice-shifted; sysmem: bus
   * address after a DMA-map check), or −1. */
  private physical(target: number, addr: number, len: number, write: boolean): number {
    const { slice } = this.env;
    if (target === TARGET_VRAM) return addr >= 0 && addr + len <= slice.size ? slice.base + addr : -1;
    const mem = this.env.guest();
    if ((target !== TARGET_SYSMEM && target !== TARGET_SYSMEM_NC) || !mem) return -1;
    return mem.translate(addr, len, write).ok ? busAddress(this.env.index, addr) : -1;
  }

  private releaseSpace(key: string): void {
    const sp = this.env.mmu.spaces.get(key);
    if (sp) this.env.mmu.release(sp);
  }

  // ---- state ----

  /** May the channel run when dispatched: bound, enabled by the guest, the VM's PFIFO on. */
  dispatchable(vchid: number): boolean {
    const vc = this.list[vchid];
    return vc !== undefined && vc.pchid >= 0 && vc.enable && this.env.pfifoEnabled();
  }

  /** The guest (or its PMC_ENABLE) stopped a channel: it must not fetch any more. */
  applyEnable(vc: VChannel): void {
    if (vc.pchid >= 0 && !(vc.enable && this.env.pfifoEnabled())) this.env.host.closeChannel(vc.pchid);
  }

  /** PFIFO_CHAN_STATE(vchid).ENABLE written. */
  setEnable(vchid: number, on: boolean): void {
    const vc = this.list[vchid]!;
    // A channel in the error state cannot be enabled (rebind to recover), as on the engine.
    if (vc.error !== 0) return;
    if (vc.pchid >= 0 && (this.env.engine.mmioRead(PFIFO_CHAN_STATE + 8 * vc.pchid, 4) & STATE_ERROR) !== 0) {
      vc.enable = false;
      return;
    }
    const was = vc.enable;
    vc.enable = on;
    this.applyEnable(vc);
    if (on && !was && vc.onRunlist) this.env.becameRunnable(vchid);
  }

  /** PFIFO_CHAN_STATE(vchid) as the guest reads it: the engine's bits, the guest's ENABLE. */
  state(vchid: number): number {
    const vc = this.list[vchid]!;
    const en = vc.enable ? STATE_ENABLE : 0;
    if (vc.pchid < 0) return en | (vc.error ? STATE_ERROR : 0);
    return ((this.env.engine.mmioRead(PFIFO_CHAN_STATE + 8 * vc.pchid, 4) & ~STATE_ENABLE) | en) >>> 0;
  }

  /** PFIFO_CHAN_ERR / PFIFO_CHAN_ERR_INFO of vchid (reg = which). */
  error(vchid: number, reg: number): number {
    const vc = this.list[vchid]!;
    if (vc.pchid < 0) return reg === PFIFO_CHAN_ERR ? vc.error : vc.errorInfo;
    return this.env.engine.mmioRead(reg + 8 * vc.pchid, 4);
  }

  /** PFIFO_CHAN_ERR_REASON of vchid (hw-spec §6.3.6). */
  errorReason(vchid: number): number {
    const vc = this.list[vchid]!;
    return vc.pchid < 0 ? 0 : this.env.engine.mmioRead(PFIFO_CHAN_ERR_REASON + 4 * vc.pchid, 4);
  }

  /** Any of the VM's channels has work or a job in flight (its PGRAPH_STATUS.BUSY). */
  busy(): boolean {
    for (const vc of this.list) {
      if (vc.pchid >= 0 && (this.env.engine.mmioRead(PFIFO_CHAN_STATE + 8 * vc.pchid, 4) & STATE_BUSY) !== 0) return true;
    }
    return false;
  }

  preempt(vchid: number): void {
    const vc = this.list[vchid];
    if (vc && vc.pchid >= 0) this.env.engine.mmioWrite(PFIFO_PREEMPT, 4, vc.pchid);
  }

  preemptPending(vchid: number): boolean {
    const vc = this.list[vchid];
    if (!vc || vc.pchid < 0) return false;
    // PFIFO_PREEMPT stores the chid and reports PENDING for it; the write has no other effect.
    const engine = this.env.engine;
    engine.mmioWrite(PFIFO_PREEMPT, 4, vc.pchid);
    return (engine.mmioRead(PFIFO_PREEMPT, 4) & PFIFO_PREEMPT_PENDING) !== 0;
  }
}
