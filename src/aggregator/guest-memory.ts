// A VM's system memory as the aggregator sees it (the device model's DMA map table), the bus
// addresses that stand for it in shadow structures, and the one bus resolver the engine uses
// for all mediated VMs (docs/architecture.md "Bus addresses"): VM k's guest-physical address g
// is bus address (k+1)·2^44 + g, and it resolves through VM k's DMA map only.
import type { BusResolver, Extent } from '../gpu/bus.ts';
import type { DmaFault, DmaMappingInfo, TranslateResult, ViewResult } from '../device-model/dma.ts';

/** What the aggregator needs of a VM's DMA map table (src/device-model/dma.ts DmaTable). */
export interface GuestMemory {
  translate(gpa: number, len: number, write: boolean): TranslateResult;
  view(gpa: number, len: number, write?: boolean): ViewResult;
  read(gpa: number, dst: Uint8Array): DmaFault | null;
  write(gpa: number, src: Uint8Array): DmaFault | null;
  describe(): DmaMappingInfo[];
}

/** Guest-physical addresses a VM can name: below 2^44 (16 TiB). */
export const GPA_LIMIT = 2 ** 44;
/** Highest VM index whose bus addresses stay exact as JS numbers ((k+1)·2^44 < 2^53). */
export const MAX_BUS_VMS = 2 ** 9 - 1;

export function busAddress(vmIndex: number, gpa: number): number {
  return (vmIndex + 1) * GPA_LIMIT + gpa;
}

/** Split a bus address into [vm index, gpa]; vm index −1 for addresses below the first VM. */
export function splitBus(bus: number): [number, number] {
  const k = Math.floor(bus / GPA_LIMIT) - 1;
  return [k, bus - (k + 1) * GPA_LIMIT];
}

/**
 * A snapshot of a DMA map table's ranges for validating many pages at once (shadow rebuilds
 * check every sysmem PTE; one describe() and a binary search each beats a translate() per
 * page). Only fd-backed maps count: fd-less ones cannot be reached by the engine.
 */
export class GuestRanges {
  private readonly starts: number[] = [];
  private readonly ends: number[] = [];
  private readonly writable: boolean[] = [];

  private sig: string | null = null;

  constructor(maps: DmaMappingInfo[]) {
    const sorted = maps.filter((m) => m.hasFd && m.readable).sort((a, b) => a.addr - b.addr);
    for (const m of sorted) {
      const last = this.ends.length - 1;
      // Merge adjacent maps with the same writability (QEMU splits RAM around holes).
      if (last >= 0 && this.ends[last] === m.addr && this.writable[last] === m.writable) {
        this.ends[last] = m.addr + m.size;
      } else {
        this.starts.push(m.addr);
        this.ends.push(m.addr + m.size);
        this.writable.push(m.writable);
      }
    }
  }

  /** The ranges as text: two snapshots with the same signature validate every page alike.
   * Computed on first use (shadow rescans ask; the PV calls' snapshots never do). */
  get signature(): string {
    if (this.sig === null) {
      let sig = '';
      for (let i = 0; i < this.starts.length; i++) sig += `${this.starts[i]}-${this.ends[i]}${this.writable[i] ? 'w' : 'r'},`;
      this.sig = sig;
    }
    return this.sig;
  }

  /** 0: [gpa, gpa+len) not (entirely) mapped; 1: mapped read-only; 2: mapped writable. */
  access(gpa: number, len: number): 0 | 1 | 2 {
    if (!(len > 0) || gpa < 0 || gpa + len > GPA_LIMIT) return 0;
    let lo = 0;
    let hi = this.starts.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.starts[mid]! <= gpa) lo = mid + 1;
      else hi = mid;
    }
    let i = lo - 1;
    if (i < 0) return 0;
    let at = gpa;
    let rw = true;
    const end = gpa + len;
    // A page may straddle two adjacent maps of different writability.
    while (at < end) {
      if (i >= this.starts.length || this.starts[i]! > at || this.ends[i]! <= at) return 0;
      rw &&= this.writable[i]!;
      at = this.ends[i]!;
      i++;
    }
    return rw ? 2 : 1;
  }
}

/**
 * The engine's bus resolver in mediated modes: decodes the VM index from the bus address and
 * resolves the guest-physical part through that VM's DMA map at access time, so a map that went
 * away (DMA_UNMAP, VM exit) makes the access fault instead of reaching freed memory.
 */
export class MediatedBus implements BusResolver {
  private readonly vms: (GuestMemory | null)[] = [];

  attach(index: number, mem: GuestMemory): void {
    if (!Number.isInteger(index) || index < 0 || index >= MAX_BUS_VMS) throw new RangeError(`bad VM bus index ${index}`);
    this.vms[index] = mem;
  }

  detach(index: number): void {
    if (index >= 0 && index < this.vms.length) this.vms[index] = null;
  }

  resolve(busAddr: number, length: number, write: boolean): Extent[] | null {
    if (!(length > 0) || !Number.isSafeInteger(busAddr)) return null;
    const [k, gpa] = splitBus(busAddr);
    if (k < 0 || gpa + length > GPA_LIMIT) return null;
    const mem = this.vms[k];
    if (!mem) return null;
    const r = mem.translate(gpa, length, write);
    return r.ok ? r.extents : null;
  }
}
