// A first-fit range allocator with alignment (VRAM and GPU VA). Free ranges are kept sorted and
// coalesced; state is a plain list, so it snapshots trivially.

export interface Range {
  start: number;
  size: number;
}

export class RangeAllocator {
  private free: Range[];
  readonly base: number;
  readonly size: number;

  constructor(base: number, size: number) {
    this.base = base;
    this.size = size;
    this.free = [{ start: base, size }];
  }

  /** Allocate `size` bytes aligned to `align` (power of two); null when nothing fits. */
  alloc(size: number, align = 4096): number | null {
    if (!(size > 0)) throw new RangeError(`allocation size must be > 0, got ${size}`);
    for (let i = 0; i < this.free.length; i++) {
      const r = this.free[i]!;
      const start = Math.ceil(r.start / align) * align;
      const pad = start - r.start;
      if (pad + size > r.size) continue;
      const pieces: Range[] = [];
      if (pad > 0) pieces.push({ start: r.start, size: pad });
      const rest = r.size - pad - size;
      if (rest > 0) pieces.push({ start: start + size, size: rest });
      this.free.splice(i, 1, ...pieces);
      return start;
    }
    return null;
  }

  release(start: number, size: number): void {
    let i = 0;
    while (i < this.free.length && this.free[i]!.start < start) i++;
    this.free.splice(i, 0, { start, size });
    // Coalesce with neighbours.
    const merged: Range[] = [];
    for (const r of this.free) {
      const last = merged[merged.length - 1];
      if (last && last.start + last.size === r.start) last.size += r.size;
      else merged.push({ ...r });
    }
    this.free = merged;
  }

  get freeBytes(): number {
    return this.free.reduce((a, r) => a + r.size, 0);
  }
}
