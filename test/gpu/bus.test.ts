// Reading guest memory through extents (src/gpu/bus.ts readExtents): through the DMA map's own
// mapping when the extent names one and it still holds the bytes, else with pread.
import { afterAll, describe, expect, it } from 'vitest';
import { readExtents } from '../../src/gpu/bus.ts';
import { native } from '../../src/native.ts';

describe('readExtents', () => {
  const fd = native.memfdCreate('bus-test', 4096);
  afterAll(() => native.close(fd));
  const vram = { fd: -1, u8: new Uint8Array(0) };
  native.pwrite(fd, Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8]), 0);

  it('reads through the mapping an extent names, with no pread', () => {
    // a mapping whose bytes differ from the fd's shows which one was read
    const mem = Uint8Array.from([9, 9, 40, 41, 42, 43]).buffer;
    const dst = new Uint8Array(4);
    expect(readExtents(vram, [{ fd, offset: 0, length: 4, mem, memOffset: 2 }], dst)).toBe(true);
    expect(Array.from(dst)).toEqual([40, 41, 42, 43]);
  });

  it('falls back to pread when the mapping no longer holds the range (unmapped: no bytes)', () => {
    const dst = new Uint8Array(4);
    expect(readExtents(vram, [{ fd, offset: 2, length: 4, mem: new ArrayBuffer(3), memOffset: 0 }], dst)).toBe(true);
    expect(Array.from(dst)).toEqual([3, 4, 5, 6]);
    expect(readExtents(vram, [{ fd, offset: 4, length: 4 }], dst)).toBe(true);
    expect(Array.from(dst)).toEqual([5, 6, 7, 8]);
  });
});
