// GPA→HPA via /proc/self/pagemap on real memfd mappings.
import { afterEach, describe, expect, it } from 'vitest';
import { native } from '../src/native.ts';
import { PAGE_SIZE, decodePagemapEntry, gpaToHpa, hostFrames } from '../src/kvm-ioctl/pagemap.ts';

const privileged = process.getuid?.() === 0; // PFNs need CAP_SYS_ADMIN; root has it here
const PAGES = 32;

describe('hostFrames', () => {
  const cleanup: (() => void)[] = [];
  afterEach(() => {
    while (cleanup.length) cleanup.pop()!();
  });

  function memfdMapping(pages: number): { fd: number; buf: ArrayBuffer } {
    const fd = native.memfdCreate('vugpu-pagemap-test', pages * PAGE_SIZE);
    expect(fd).toBeGreaterThanOrEqual(0);
    const buf = native.mmap(fd, pages * PAGE_SIZE, 0);
    cleanup.push(() => {
      native.munmap(buf);
      native.close(fd);
    });
    return { fd, buf };
  }

  it('touches the pages of a memfd mapping and returns a present, distinct PFN per page', () => {
    const { buf } = memfdMapping(PAGES);
    const f = hostFrames(buf);
    expect(f.pages).toBe(PAGES);
    expect(f.address % BigInt(PAGE_SIZE)).toBe(0n);
    expect(f.present.every(Boolean)).toBe(true);
    if (privileged) {
      expect(f.pfnsVisible).toBe(true);
      expect(f.pfns.every((p) => p !== null && p > 0n)).toBe(true);
      expect(new Set(f.pfns).size).toBe(PAGES);
    } else {
      expect(f.pfnsVisible).toBe(false);
      expect(f.pfns.every((p) => p === null)).toBe(true);
    }
  });

  it('without touching, the pages of a fresh memfd are not present', () => {
    const { buf } = memfdMapping(4);
    const f = hostFrames(buf, { touch: false });
    expect(f.present).toEqual([false, false, false, false]);
    expect(f.pfns).toEqual([null, null, null, null]);
  });

  it.runIf(privileged)('a second mapping of the same memfd sees the same frames (they are the shared pages)', () => {
    const { fd, buf } = memfdMapping(8);
    const again = native.mmap(fd, 4 * PAGE_SIZE, 2 * PAGE_SIZE); // pages 2..5
    cleanup.push(() => native.munmap(again));
    const a = hostFrames(buf);
    const b = hostFrames(again);
    expect(b.pfns).toEqual(a.pfns.slice(2, 6));
  });

  it('covers exactly the pages a sub-range overlaps, for views too', () => {
    const { buf } = memfdMapping(8);
    const all = hostFrames(buf);
    // 10 bytes straddling the boundary of pages 2 and 3
    const r = hostFrames(buf, { offset: 3 * PAGE_SIZE - 5, length: 10 });
    expect(r.pages).toBe(2);
    expect(r.address).toBe(all.address + 2n * BigInt(PAGE_SIZE));
    expect(r.pfns).toEqual(all.pfns.slice(2, 4));
    const view = new Uint8Array(buf, 5 * PAGE_SIZE + 100, 2 * PAGE_SIZE);
    const v = hostFrames(view);
    expect(v.pages).toBe(3);
    expect(v.pfns).toEqual(all.pfns.slice(5, 8));
    expect(() => hostFrames(buf, { offset: 8 * PAGE_SIZE - 1, length: 2 })).toThrow(RangeError);
    expect(() => hostFrames(buf, { offset: -1, length: 2 })).toThrow(RangeError);
    expect(() => hostFrames(buf, { length: 0 })).toThrow(RangeError);
  });

  it('gpaToHpa maps a guest-physical address inside a DMA-mapped region, null outside', () => {
    const { buf } = memfdMapping(8);
    const region = { gpa: 0x10_0000n, view: buf };
    const all = hostFrames(buf);
    const hpa = gpaToHpa(region, 0x10_0000n + 3n * BigInt(PAGE_SIZE) + 0x123n);
    if (privileged) expect(hpa).toBe(all.pfns[3]! * BigInt(PAGE_SIZE) + 0x123n);
    else expect(hpa).toBeNull();
    expect(gpaToHpa(region, 0x0f_ffffn)).toBeNull();
    expect(gpaToHpa(region, 0x10_0000n + 8n * BigInt(PAGE_SIZE))).toBeNull();
  });

  it('decodes pagemap entry bits', () => {
    const e = decodePagemapEntry((1n << 63n) | (1n << 61n) | (1n << 56n) | 0x1234n);
    expect(e).toEqual({ present: true, swapped: false, fileOrShared: true, exclusive: true, softDirty: false, pfn: 0x1234n });
    expect(decodePagemapEntry(1n << 63n).pfn).toBeNull(); // present, PFN hidden
    expect(decodePagemapEntry((1n << 62n) | 0x55n)).toMatchObject({ present: false, swapped: true, pfn: null });
  });
});
