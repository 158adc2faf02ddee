// Vram.zero: what a scrub uses. It zeroes every written byte of the range and leaves the memfd's
// holes (pages never written) unallocated, so a scrub costs what the VM used, not its slice.
import { afterEach, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { Vram } from '../../src/gpu/vram.ts';

const ENXIO = -6;
const PAGE = 4096;
let vram: Vram | null = null;
afterEach(() => {
  vram?.close();
  vram = null;
});

/** The memfd's data extents as [start, end) pairs. */
function extents(v: Vram): [number, number][] {
  const out: [number, number][] = [];
  for (let at = 0; at < v.size;) {
    const d = native.seekData(v.fd, at, 0);
    if (d === ENXIO) break;
    expect(d).toBeGreaterThanOrEqual(0);
    const h = native.seekData(v.fd, d, 1);
    out.push([d, h]);
    at = h;
  }
  return out;
}

describe('Vram.zero', () => {
  it('zeroes the written bytes of the range, keeps the rest, and allocates no hole', () => {
    vram = new Vram(64 << 20);
    const u8 = vram.u8;
    expect(extents(vram)).toEqual([]); // a fresh memfd is all hole
    // Written: a byte in page 3, pages 100–101, the last page of the range, one page after it.
    const written = [3 * PAGE + 17, 100 * PAGE, 101 * PAGE + 4095, (16 << 20) - 1, (16 << 20) + 5];
    for (const at of written) u8[at] = 0x5a;
    expect(extents(vram)).toEqual([[3 * PAGE, 4 * PAGE], [100 * PAGE, 102 * PAGE], [(16 << 20) - PAGE, (16 << 20) + PAGE]]);
    vram.zero(PAGE, (16 << 20) - PAGE); // pages 1 … the range's end
    for (const at of written.slice(0, 4)) expect(u8[at], `byte ${at}`).toBe(0);
    expect(u8[(16 << 20) + 5]).toBe(0x5a); // past the range: untouched
    // No new data: the holes stayed holes (pages 0, 4–99, 102–… were never faulted in).
    expect(extents(vram)).toEqual([[3 * PAGE, 4 * PAGE], [100 * PAGE, 102 * PAGE], [(16 << 20) - PAGE, (16 << 20) + PAGE]]);
  });

  it('handles ranges that start inside data and end inside a hole, and an empty range', () => {
    vram = new Vram(8 << 20);
    vram.u8.fill(0xee, 0, 2 * PAGE);
    vram.zero(PAGE + 100, 4 << 20);
    expect(vram.u8[PAGE + 99]).toBe(0xee);
    expect(vram.u8.subarray(PAGE + 100, 2 * PAGE).every((b) => b === 0)).toBe(true);
    vram.zero(0, 0);
    expect(vram.u8[0]).toBe(0xee);
  });
});
