// Interrupt state of one device: the eventfds the client registered per IRQ index and vector
// (DEVICE_SET_IRQS), MSI-X enable / function mask as the client wrote them into config space,
// the MSI-X table and PBA bytes, and delivery counters.
//
// Firing MSI-X vector n writes the 8-byte value 1 to that vector's eventfd (with KVM irqfd this
// injects straight into the guest). When the vector has no eventfd, MSI-X is disabled or
// function-masked, or the vector was masked through SET_IRQS, the PBA pending bit is set
// instead; it is delivered when the condition clears (PCI semantics for a masked vector).
//
// QEMU emulates the MSI-X table itself (per-vector masking is done by swapping in its own
// eventfd), so the table's vector-control mask bits are stored but never gate delivery.

import { existsSync, readlinkSync } from 'node:fs';
import { native } from '../native.ts';
import { logger } from '../log.ts';
import { Errno, IrqIndex, IrqSetFlag, NUM_IRQS } from './protocol.ts';

export interface IrqSetRequest {
  flags: number;
  index: number;
  start: number;
  count: number;
  /** DATA_BOOL payload (count bytes); ignored otherwise. */
  data: Uint8Array;
}

export interface VectorStats {
  fired: number; // fire() calls
  delivered: number; // eventfd writes that succeeded
  latched: number; // times the pending bit was set instead
  errors: number; // eventfd writes that failed
}

/** Plain description of the interrupt state, for logs and tests. */
export interface IrqState {
  counts: number[];
  eventfds: number[][]; // -1 where none
  msixEnabled: boolean;
  msixFunctionMasked: boolean;
  pending: number[]; // MSI-X vectors with the PBA bit set
}

/** The interrupt state as a checkpoint holds it (src/device-model/persist.ts): which slots
 * hold an eventfd (the fds themselves travel by name), masks, MSI-X table, PBA, counters. */
export interface IrqRecord {
  /** Per IRQ index, per vector: an eventfd is registered. */
  eventfds: boolean[][];
  masked: number[][];
  pba: Uint8Array;
  msixTable: Uint8Array;
  msixEnabled: boolean;
  msixFunctionMasked: boolean;
  stats: VectorStats[];
}

/** Told when an eventfd slot changes (fd −1: emptied), so an fd keeper can mirror it. */
export type IrqFdHook = (index: number, vector: number, fd: number) => void;

const CAN_CHECK_FD_TYPE = existsSync('/proc/self/fd');

/**
 * Whether `fd` can be kept as an interrupt fd: it must be an eventfd (firing writes to it on the
 * JS thread, and a socket or pipe the client never reads would block that write), and it is
 * made non-blocking (a blocking eventfd whose counter the client set near its maximum would
 * block too). QEMU's eventfds are already non-blocking, and KVM's irqfd does not care.
 */
function adoptEventfd(fd: number): boolean {
  if (CAN_CHECK_FD_TYPE) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`) !== 'anon_inode:[eventfd]') return false;
    } catch {
      return false;
    }
  }
  try {
    native.setNonblock(fd, true);
  } catch {
    return false;
  }
  return true;
}

const ACTION_OF: Record<number, 'mask' | 'unmask' | 'trigger'> = {
  [IrqSetFlag.ACTION_MASK]: 'mask',
  [IrqSetFlag.ACTION_UNMASK]: 'unmask',
  [IrqSetFlag.ACTION_TRIGGER]: 'trigger',
};
const DATA_OF: Record<number, 'none' | 'bool' | 'eventfd'> = {
  [IrqSetFlag.DATA_NONE]: 'none',
  [IrqSetFlag.DATA_BOOL]: 'bool',
  [IrqSetFlag.DATA_EVENTFD]: 'eventfd',
};

export class IrqController {
  readonly counts: readonly number[];
  private readonly fds: Int32Array[];
  private readonly masked: Uint8Array[]; // per-vector mask set through SET_IRQS MASK/UNMASK
  /** MSI-X PBA bytes as the BAR exposes them (bit n = vector n pending). */
  readonly pba: Uint8Array;
  /** MSI-X table bytes (16 per vector), stored for clients that access it through the BAR. */
  readonly msixTable: Uint8Array;
  private msixEnabled = false;
  private msixFunctionMasked = false;
  readonly stats: VectorStats[];
  private readonly deviceName: string;
  /** Called whenever an eventfd slot is set or emptied. */
  fdHook: IrqFdHook | null = null;

  constructor(counts: number[], deviceName = 'device') {
    if (counts.length !== NUM_IRQS) throw new RangeError(`need ${NUM_IRQS} irq counts`);
    this.counts = counts.slice();
    this.deviceName = deviceName;
    this.fds = counts.map((n) => new Int32Array(n).fill(-1));
    this.masked = counts.map((n) => new Uint8Array(n));
    const nMsix = counts[IrqIndex.MSIX]!;
    this.pba = new Uint8Array(Math.ceil(nMsix / 64) * 8);
    this.msixTable = new Uint8Array(nMsix * 16);
    this.stats = Array.from({ length: nMsix }, () => ({ fired: 0, delivered: 0, latched: 0, errors: 0 }));
    this.resetTable();
  }

  /**
   * Apply DEVICE_SET_IRQS. Returns 0 or a positive errno. Takes ownership of the fds it keeps by
   * setting their entries in `fds` to -1; the caller closes whatever remains.
   * Checks follow libvfio-user's device_set_irqs_validate, with two documented relaxations:
   * count 0 with NONE|TRIGGER (disable all) is accepted even for an index with no vectors, and
   * INTx MASK/UNMASK is accepted as a no-op (we never assert INTx level-style).
   */
  setIrqs(req: IrqSetRequest, fds: number[]): number {
    const { index, start, count } = req;
    const action = ACTION_OF[req.flags & IrqSetFlag.ACTION_TYPE_MASK];
    const data = DATA_OF[req.flags & IrqSetFlag.DATA_TYPE_MASK];
    if (action === undefined || data === undefined) return Errno.EINVAL; // not exactly one of each
    if ((req.flags & ~(IrqSetFlag.ACTION_TYPE_MASK | IrqSetFlag.DATA_TYPE_MASK)) !== 0) return Errno.EINVAL;
    if (index >= NUM_IRQS) return Errno.EINVAL;
    if (data === 'bool' && req.data.length !== count) return Errno.EINVAL;
    if (fds.length > 0 && data !== 'eventfd') return Errno.EINVAL;
    if (count === 0) {
      if (start !== 0 || action !== 'trigger' || data !== 'none') return Errno.EINVAL;
      this.disable(index, 0, this.counts[index]!);
      return 0;
    }
    if (index === IrqIndex.INTX && action !== 'trigger') {
      // QEMU's INTx mask/unmask (and the KVM resample fd, UNMASK|EVENTFD): nothing to do for a
      // device that never asserts INTx as a level. Any fd is closed by the caller.
      return start === 0 && count === 1 ? 0 : Errno.EINVAL;
    }
    const n = this.counts[index]!;
    if (start >= n || start + count > n) return Errno.EINVAL;
    if ((index === IrqIndex.ERR || index === IrqIndex.REQ) && (action !== 'trigger' || count > 1)) return Errno.EINVAL;
    if (data === 'eventfd' && fds.length !== 0 && fds.length !== count) return Errno.EINVAL;

    if (action === 'mask' || action === 'unmask') {
      if (data === 'eventfd') return Errno.EINVAL;
      const m = this.masked[index]!;
      for (let i = 0; i < count; i++) {
        if (data === 'bool' && req.data[i] === 0) continue;
        m[start + i] = action === 'mask' ? 1 : 0;
      }
      if (action === 'unmask') this.flushPending();
      return 0;
    }
    // TRIGGER
    if (data === 'eventfd') {
      if (fds.length === 0) {
        this.disable(index, start, count); // de-assign [start, start+count)
        return 0;
      }
      for (let i = 0; i < count; i++) if (!adoptEventfd(fds[i]!)) return Errno.EINVAL;
      const v = this.fds[index]!;
      for (let i = 0; i < count; i++) {
        const old = v[start + i]!;
        if (old >= 0) native.close(old);
        v[start + i] = fds[i]!;
        this.fdHook?.(index, start + i, fds[i]!);
        fds[i] = -1; // now ours
      }
      if (index === IrqIndex.MSIX) this.flushPending();
      return 0;
    }
    // NONE / BOOL: loopback trigger, as VFIO defines it.
    for (let i = 0; i < count; i++) {
      if (data === 'bool' && req.data[i] === 0) continue;
      this.trigger(index, start + i);
    }
    return 0;
  }

  /** Fire MSI-X vector `vector`. Returns true if an eventfd was signalled, false if latched. */
  msix(vector: number): boolean {
    return this.trigger(IrqIndex.MSIX, vector);
  }

  /** Fire a vector of any index. Non-MSI-X indices have no pending state: without an eventfd
   * the interrupt is dropped (and false returned). */
  trigger(index: number, vector: number): boolean {
    const fds = this.fds[index];
    if (fds === undefined || vector < 0 || vector >= fds.length) return false;
    if (index !== IrqIndex.MSIX) {
      const fd = fds[vector]!;
      return fd >= 0 && native.eventfdWrite(fd, 1) >= 0;
    }
    const st = this.stats[vector]!;
    st.fired++;
    const fd = fds[vector]!;
    if (fd < 0 || !this.msixEnabled || this.msixFunctionMasked || this.masked[index]![vector]) {
      this.setPending(vector);
      st.latched++;
      return false;
    }
    if (native.eventfdWrite(fd, 1) < 0) {
      st.errors++;
      this.setPending(vector);
      return false;
    }
    st.delivered++;
    return true;
  }

  isPending(vector: number): boolean {
    return (this.pba[vector >> 3]! & (1 << (vector & 7))) !== 0;
  }

  /** Config-space MSI-X Message Control changed (enable bit 15, function mask bit 14). */
  setMsixControl(enabled: boolean, functionMasked: boolean): void {
    this.msixEnabled = enabled;
    this.msixFunctionMasked = functionMasked;
    this.flushPending();
  }

  /** Device reset: pending bits, masks and the MSI-X table go back to their reset state; the
   * registered eventfds stay (the client set them up and will not repeat it). */
  reset(): void {
    this.pba.fill(0);
    for (const m of this.masked) m.fill(0);
    this.msixEnabled = false;
    this.msixFunctionMasked = false;
    this.resetTable();
  }

  /** Client gone: close every eventfd. */
  closeAll(): void {
    for (let i = 0; i < NUM_IRQS; i++) this.disable(i, 0, this.counts[i]!);
  }

  state(): IrqState {
    const pending: number[] = [];
    for (let v = 0; v < this.counts[IrqIndex.MSIX]!; v++) if (this.isPending(v)) pending.push(v);
    return {
      counts: this.counts.slice(),
      eventfds: this.fds.map((a) => Array.from(a)),
      msixEnabled: this.msixEnabled,
      msixFunctionMasked: this.msixFunctionMasked,
      pending,
    };
  }

  private disable(index: number, start: number, count: number): void {
    const v = this.fds[index]!;
    for (let i = start; i < start + count; i++) {
      if (v[i]! >= 0) {
        native.close(v[i]!);
        this.fdHook?.(index, i, -1);
      }
      v[i] = -1;
    }
  }

  /** The state as a checkpoint holds it (copies). */
  record(): IrqRecord {
    return {
      eventfds: this.fds.map((a) => Array.from(a, (fd) => fd >= 0)),
      masked: this.masked.map((m) => Array.from(m)),
      pba: this.pba.slice(),
      msixTable: this.msixTable.slice(),
      msixEnabled: this.msixEnabled,
      msixFunctionMasked: this.msixFunctionMasked,
      stats: this.stats.map((st) => ({ ...st })),
    };
  }

  /**
   * Load a record into this controller (a restart). fdOf(index, vector) gives the adopted
   * eventfd of each slot the record marks; the controller owns it from then on (it is made
   * non-blocking again). Nothing is delivered: pending bits stay pending, as they were. The
   * record's shape is checked first; on an error nothing has changed.
   */
  load(r: IrqRecord, fdOf: (index: number, vector: number) => number): void {
    const same = (a: ArrayLike<unknown>[], what: string) => {
      if (a.length !== this.counts.length || a.some((x, i) => x.length !== this.counts[i])) throw new Error(`IRQ record: ${what} does not match the vector counts`);
    };
    same(r.eventfds, 'eventfds');
    same(r.masked, 'masks');
    if (r.pba.length !== this.pba.length || r.msixTable.length !== this.msixTable.length || r.stats.length !== this.stats.length) {
      throw new Error('IRQ record: MSI-X sizes do not match');
    }
    const fds = r.eventfds.map((row, index) => row.map((has, v) => (has ? fdOf(index, v) : -1)));
    for (const row of fds) for (const fd of row) if (fd >= 0 && !adoptEventfd(fd)) throw new Error(`IRQ record: fd ${fd} is not an eventfd`);
    this.closeAll();
    fds.forEach((row, index) => row.forEach((fd, v) => {
      this.fds[index]![v] = fd;
      if (fd >= 0) this.fdHook?.(index, v, fd);
    }));
    r.masked.forEach((row, index) => this.masked[index]!.set(row.map((x) => (x ? 1 : 0))));
    this.pba.set(r.pba);
    this.msixTable.set(r.msixTable);
    this.msixEnabled = r.msixEnabled;
    this.msixFunctionMasked = r.msixFunctionMasked;
    r.stats.forEach((st, v) => Object.assign(this.stats[v]!, st));
  }

  private setPending(vector: number): void {
    this.pba[vector >> 3]! |= 1 << (vector & 7);
  }

  /** Deliver latched MSI-X vectors whose blocking condition has cleared. */
  private flushPending(): void {
    if (!this.msixEnabled || this.msixFunctionMasked) return;
    const fds = this.fds[IrqIndex.MSIX]!;
    const masked = this.masked[IrqIndex.MSIX]!;
    for (let v = 0; v < fds.length; v++) {
      if (!this.isPending(v) || fds[v]! < 0 || masked[v]) continue;
      if (native.eventfdWrite(fds[v]!, 1) < 0) {
        this.stats[v]!.errors++;
        logger.warn({ device: this.deviceName, vector: v }, 'eventfd write failed for a pending MSI-X vector');
        continue;
      }
      this.pba[v >> 3]! &= ~(1 << (v & 7));
      this.stats[v]!.delivered++;
    }
  }

  private resetTable(): void {
    // Vector Control mask bit (bit 0 of dword 3) is set at reset, as the PCI spec requires.
    this.msixTable.fill(0);
    for (let v = 0; v < this.stats.length; v++) this.msixTable[v * 16 + 12] = 1;
  }
}
