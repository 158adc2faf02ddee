// A first-fit range allocator over [base, base + size) with a fixed granule: VRAM slices (MiB),
// the host-reserved area (shadow instance blocks, page tables, runlists; 4 KiB) and PV
// MEM_ALLOC inside a slice all use it. The state is plain data (a sorted free list and the
// allocations by address), so it snapshots and resets like every other piece of vGPU state.

export interface FreeRange {
  start: number;
  size: number;
}

export interface AllocatorState {
  base: number;
  size: number;
  granule: number;
  /** Sorted by start, coalesced. */
  free: FreeRange[];
  /** Allocation start → size (bytes, granule multiple). */
  used: Record<string, number>;
  inUse: number;
}

export const isPow2 = (n: number): boolean => Number.isSafeInteger(n) && n > 0 && 2 ** Math.round(Math.log2(n)) === n;

export class RangeAllocator {
  readonly s: AllocatorState;

  constructor(base: number, size: number, granule: number) {
    if (!isPow2(granule)) throw new RangeError(`allocator granule must be a power of two, got ${granule}`);
    if (!Number.isSafeInteger(base) || base % granule !== 0 || !Number.isSafeInteger(size) || size < 0 || size % granule !== 0) {
      throw new RangeError(`allocator range ${base}+${size} is not ${granule}-aligned`);
    }
    this.s = { base, size, granule, free: size > 0 ? [{ start: base, size }] : [], used: {}, inUse: 0 };
  }

  get base(): number {
    return this.s.base;
  }

  get size(): number {
    return this.s.size;
  }

  get inUse(): number {
    return this.s.inUse;
  }

  /** Bytes in the largest free range. */
  get largestFree(): number {
    let m = 0;
    for (const f of this.s.free) m = Math.max(m, f.size);
    return m;
  }

  /**
   * Allocate `size` bytes (rounded up to the granule) at an `align`-aligned address (a power of
   * two; at least the granule). Returns the address, or null when nothing fits.
   */
  alloc(size: number, align = this.s.granule): number | null {
    const g = this.s.granule;
    if (!Number.isSafeInteger(size) || size <= 0 || !isPow2(align)) return null;
    const a = Math.max(align, g);
    const n = Math.ceil(size / g) * g;
    const free = this.s.free;
    for (let i = 0; i < free.length; i++) {
      const f = free[i]!;
      const start = Math.ceil(f.start / a) * a;
      const end = start + n;
      if (end > f.start + f.size) continue;
      // Split f into [f.start, start) and [end, f.end).
      const tail = f.start + f.size - end;
      const head = start - f.start;
      const repl: FreeRange[] = [];
      if (head > 0) repl.push({ start: f.start, size: head });
      if (tail > 0) repl.push({ start: end, size: tail });
      free.splice(i, 1, ...repl);
      this.s.used[start] = n;
      this.s.inUse += n;
      return start;
    }
    return null;
  }

  /** Size of the allocation that starts at addr, or 0. */
  sizeOf(addr: number): number {
    return Object.hasOwn(this.s.used, addr) ? this.s.used[addr]! : 0;
  }

  /** Free an allocation by its start address. Returns false if addr is not an allocation. */
  free(addr: number): boolean {
    const n = this.sizeOf(addr);
    if (n === 0) return false;
    delete this.s.used[addr];
    this.s.inUse -= n;
    const free = this.s.free;
    let i = 0;
    while (i < free.length && free[i]!.start < addr) i++;
    free.splice(i, 0, { start: addr, size: n });
    // Coalesce with the neighbours.
    if (i + 1 < free.length && free[i]!.start + free[i]!.size === free[i + 1]!.start) {
      free[i]!.size += free[i + 1]!.size;
      free.splice(i + 1, 1);
    }
    if (i > 0 && free[i - 1]!.start + free[i - 1]!.size === free[i]!.start) {
      free[i - 1]!.size += free[i]!.size;
      free.splice(i, 1);
    }
    return true;
  }

  /** Free everything. */
  reset(): void {
    this.s.free = this.s.size > 0 ? [{ start: this.s.base, size: this.s.size }] : [];
    this.s.used = {};
    this.s.inUse = 0;
  }

  /** Allocations as [start, size] pairs, ascending. */
  allocations(): [number, number][] {
    return Object.entries(this.s.used)
      .map(([k, v]) => [Number(k), v] as [number, number])
      .sort((x, y) => x[0] - y[0]);
  }
}
