// The engine's checkpoint section (docs/architecture.md "State"): everything a restarted
// process needs to carry on as the same device — the register file (PMC, PFIFO, MMU fault
// registers, PTIMER latch, PDIAG, interrupt pending bits), every channel's state (what was
// loaded from its instance block, GP_GET/GP_PUT, the decoder cursor, error, semaphore wait,
// host/copy/compute method state, device-ns accounting), the runlist, the PTIMER origin and
// the counters. VRAM is not copied: it lives in the VRAM memfd, which the restarted engine
// adopts (EngineOptions.vramFd), shadow tables included.
//
// Not state: native jobs and program compiles in flight (they die with the process: restore
// reports their channels and failLost() fails them with ENGINE_LOST, so no fence waits
// forever), the segment words being decoded (re-read from memory by resume), the command
// processor's ready set and acquire poller (rebuilt by resume from the channels), the VRAM
// window cache and the compiled-program cache (rebuilt lazily), log budgets.
import type { Engine } from './engine.ts';
import { newChannel, WAIT_ACQUIRE, WAIT_NONE, type ChannelState } from './channel.ts';
import {
  DIAG_MAGIC, DOORBELL, MMU_FAULT_STATUS, PFIFO_ERR_PENDING, PFIFO_FENCE_PENDING, PFIFO_INTR, PMC_INTR, PRAMIN_WINDOW, PRAMIN_WINDOW_SIZE,
} from './spec.ts';
import type { EngineListener } from './core.ts';
import { isNum, need, numArray, overlay, plain, section, StateError } from '../state/plain.ts';
import { Durability } from '../state/persist.ts';

export const ENGINE_STATE_VERSION = 1;

/** hw-spec 1.1 channel error ENGINE_LOST: the device lost work it had accepted (a restart). */
export const CHAN_ERR_ENGINE_LOST = 20;

export interface EngineState {
  version: number;
  vramSize: number;
  /** Stored register values by name (RegisterFile.snapshot). */
  registers: Record<string, number>;
  /** Every physical channel (ChannelState, job ids cleared). */
  channels: ChannelState[];
  runlist: number[];
  /** PTIMER: origin as hrtime ns, and the device time when saved (both decimal strings). */
  ptimer: { originNs: string; nowNs: string };
  mmuFlushes: number;
  interruptsSent: number[];
  /** Channels whose native job or program compile was in flight (lost with the process). */
  inFlight: number[];
}

/** A channel has asynchronous work outside the JS thread (a native job, a compile). */
function busyOutside(ch: ChannelState): boolean {
  return ch.wait !== WAIT_NONE && ch.wait !== WAIT_ACQUIRE;
}

export function saveEngine(engine: Engine): EngineState {
  const inFlight: number[] = [];
  const channels = engine.fifo.channels.map((ch) => {
    if (busyOutside(ch)) inFlight.push(ch.chid);
    const c = plain(ch);
    c.job = -1; // a native job id means nothing to another process
    return c;
  });
  return {
    version: ENGINE_STATE_VERSION,
    vramSize: engine.vramSize,
    registers: engine.regs.snapshot(),
    channels,
    runlist: engine.fifo.runlist.slice(),
    ptimer: { originNs: String(engine.resetAt), nowNs: String(engine.timeNs()) },
    mmuFlushes: engine.mmu.flushes,
    interruptsSent: engine.irq.sent.slice(),
    inFlight,
  };
}

export interface EngineRestore {
  /** Physical chids whose work was lost: fail them (failLost) once events can be delivered. */
  inFlight: number[];
  /** Chids the caller cannot vouch for: work may have started on them after the state was
   * saved (the request journal saw a kick). Bound ones are failed with the lost work, since
   * re-running a half-done job could change its results silently. Set before resume. */
  suspect?: readonly number[];
}

/**
 * Load a saved state into a freshly constructed engine that adopted the same VRAM memfd.
 * Nothing runs yet: call resumeEngine() once the layers above are restored too.
 */
export function restoreEngine(engine: Engine, raw: unknown): EngineRestore {
  const s = section<EngineState>('engine', raw, ENGINE_STATE_VERSION);
  need(s.vramSize === engine.vramSize, `engine state: VRAM of ${s.vramSize} bytes, this engine has ${engine.vramSize}`);
  const chans = engine.fifo.channels;
  need(Array.isArray(s.channels) && s.channels.length === chans.length,
    `engine state: ${Array.isArray(s.channels) ? s.channels.length : '?'} channels, this engine has ${chans.length}`);
  need(s.registers !== null && typeof s.registers === 'object' && Object.values(s.registers).every(isNum), 'engine state: registers');
  const runlist = numArray(s.runlist, 'engine state: runlist');
  const inFlight = numArray(s.inFlight, 'engine state: inFlight');
  need(inFlight.every((c) => Number.isInteger(c) && c >= 0 && c < chans.length), 'engine state: inFlight chid out of range');
  const sent = numArray(s.interruptsSent, 'engine state: interruptsSent', engine.irq.sent.length);
  need(isNum(s.mmuFlushes), 'engine state: mmuFlushes');
  const origin = bigintOf(s.ptimer?.originNs, 'ptimer.originNs');
  const savedNow = bigintOf(s.ptimer?.nowNs, 'ptimer.nowNs');
  // Validate every channel before changing any (a bad checkpoint must leave nothing half-done).
  const loaded = s.channels.map((c, i) => {
    const fresh = overlay(newChannel(i), c, `engine state: channel ${i}`);
    need(fresh.chid === i, `engine state: channel ${i} has chid ${fresh.chid}`);
    fresh.job = -1;
    return fresh;
  });

  engine.regs.restore(s.registers);
  // In place: register hooks and the command processor hold these objects.
  loaded.forEach((c, i) => Object.assign(chans[i]!, c));
  engine.fifo.runlist = runlist;
  engine.mmu.flushes = s.mmuFlushes;
  sent.forEach((n, i) => (engine.irq.sent[i] = n));
  // PTIMER never goes backwards: the origin is kept (same boot: the clock is shared), and moved
  // if this clock would read less than the device time already seen.
  const now = process.hrtime.bigint();
  engine.resetAt = now - origin < savedNow ? now - savedNow : origin;
  return { inFlight };
}

function bigintOf(v: unknown, what: string): bigint {
  if (typeof v !== 'string' || !/^-?\d+$/.test(v)) throw new StateError(`engine state: ${what} is not a decimal string`);
  return BigInt(v);
}

/**
 * Let a restored engine run: re-read the pushbuffer segment of every channel stopped inside
 * one, re-arm the semaphore-acquire poll, fail the channels whose work was lost (ENGINE_LOST,
 * with the usual interrupt and listener events) and kick every channel with work left.
 */
export function resumeEngine(engine: Engine, lost: readonly number[]): void {
  const lostSet = new Set(lost);
  for (const ch of engine.fifo.channels) {
    if (ch.bound && !lostSet.has(ch.chid)) engine.cp.resumeChannel(ch);
  }
  failLost(engine, lost);
  engine.fifo.kickAll();
}

/** The channels a restore gives up on: the work that died, and the bound suspects. */
export function lostChannels(engine: Engine, r: EngineRestore): number[] {
  const lost = new Set(r.inFlight);
  for (const chid of r.suspect ?? []) if (engine.fifo.channels[chid]?.bound) lost.add(chid);
  return [...lost].sort((a, b) => a - b);
}

/** Fail the channels whose work died with the old process (ENGINE_LOST). */
export function failLost(engine: Engine, lost: readonly number[]): void {
  for (const chid of lost) {
    const ch = engine.fifo.channels[chid];
    if (!ch || !ch.bound || ch.error !== 0) continue;
    engine.fifo.fail(ch, CHAN_ERR_ENGINE_LOST, (ch.gpGet & 0xffff) << 16);
  }
}

// ---- what a checkpoint must follow ----

/**
 * How soon a write to BAR0 at `offset` must reach the checkpoint (the register map of
 * docs/hw-spec.md, which a vGPU's register view shares). Coalesced: writes whose loss only
 * brings back an acknowledged interrupt bit, a doorbell the request journal's channel marks
 * cover, or a diagnostic. Every other register write changes state the guest relies on once the
 * write returns. The PRAMIN window is VRAM itself, which lives in the shared memfd.
 */
export function registerDurability(offset: number): Durability {
  if (offset >= PRAMIN_WINDOW && offset < PRAMIN_WINDOW + PRAMIN_WINDOW_SIZE) return Durability.none;
  if (offset === DOORBELL || offset === PFIFO_INTR || offset === PMC_INTR || offset === MMU_FAULT_STATUS) return Durability.later;
  if (offset >= PFIFO_FENCE_PENDING && offset < PFIFO_FENCE_PENDING + 16) return Durability.later;
  if (offset >= PFIFO_ERR_PENDING && offset < PFIFO_ERR_PENDING + 16) return Durability.later;
  if (offset >= DIAG_MAGIC && offset < DIAG_MAGIC + 0x100) return Durability.later; // PDIAG
  return Durability.now;
}

/** Nothing is going on in the channel: a checkpoint's view of it is exact. */
function channelIdle(ch: ChannelState): boolean {
  return !ch.bound || (ch.cursor === null && ch.gpGet === ch.gpPut && ch.wait === WAIT_NONE && ch.job < 0 && !ch.kicked);
}

/** The chids whose state a checkpoint taken now describes exactly. */
export function idleChannels(engine: Engine): number[] {
  const out: number[] = [];
  for (const ch of engine.fifo.channels) if (channelIdle(ch)) out.push(ch.chid);
  return out;
}

/** Who follows the engine for a checkpoint (src/persist). */
export interface EngineObserver {
  /** The engine may start work on channel `chid` next (a kick: doorbell, runlist, enable,
   * PFIFO enable); called before the work can start. */
  kicking(chid: number): void;
  /** Channel state changed (the kick was taken, or a channel event was delivered). */
  changed(): void;
}

/**
 * Follow the engine: every kick and every channel event reaches `o`. The listener is wrapped
 * as it is now, so the layers above set theirs first (a server observes once it is composed).
 */
export function observeEngine(engine: Engine, o: EngineObserver): void {
  const kick = engine.fifo.kick;
  engine.fifo.kick = (ch) => {
    o.kicking(ch.chid);
    kick(ch);
    o.changed();
  };
  const l = engine.listener as Record<string, ((...a: unknown[]) => void) | undefined>;
  const wrapped: Record<string, (...a: unknown[]) => void> = {};
  for (const k of new Set([...Object.keys(l), 'channelIdle', 'fence', 'channelError', 'fault'])) {
    const f = l[k];
    wrapped[k] = (...a: unknown[]) => {
      f?.(...a);
      o.changed();
    };
  }
  engine.listener = wrapped as EngineListener;
}
