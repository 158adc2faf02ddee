// Page-directory and page-table entry encoders (hw-spec §7), shared by the host driver and the
// aggregator's shadow page tables.
import {
  ENTRY_TARGET_SHIFT, LARGE_PAGE, PD_SHIFT, PDE_LARGE, PDE_PRESENT, PTE_PRESENT, PTE_READ_ONLY,
  SMALL_PAGE, LARGE_SHIFT, SMALL_SHIFT, TARGET_VRAM,
} from '../../../src/gpu/spec.ts';

const TWO32 = 0x1_0000_0000;

/** A 64-bit entry as [lo, hi] dwords. */
export type Entry = [number, number];

function withAddr(addr: number, low: number): Entry {
  if (!Number.isSafeInteger(addr) || addr < 0 || addr % SMALL_PAGE !== 0) {
    throw new RangeError(`entry address 0x${addr.toString(16)} is not a 4 KiB aligned safe integer`);
  }
  return [((addr % TWO32) | low) >>> 0, Math.floor(addr / TWO32) >>> 0];
}

export function pde(ptAddr: number, opts: { target?: number; large?: boolean } = {}): Entry {
  return withAddr(ptAddr, PDE_PRESENT | (opts.large ? PDE_LARGE : 0) | ((opts.target ?? TARGET_VRAM) << ENTRY_TARGET_SHIFT));
}

export function pte(pageAddr: number, opts: { target?: number; readOnly?: boolean } = {}): Entry {
  return withAddr(pageAddr, PTE_PRESENT | (opts.readOnly ? PTE_READ_ONLY : 0) | ((opts.target ?? TARGET_VRAM) << ENTRY_TARGET_SHIFT));
}

export interface DecodedEntry {
  present: boolean;
  large: boolean;   // PDE only
  readOnly: boolean; // PTE only
  target: number;
  addr: number;
}

export function decodeEntry(lo: number, hi: number): DecodedEntry {
  return {
    present: (lo & 1) !== 0,
    large: (lo & PDE_LARGE) !== 0,
    readOnly: (lo & PTE_READ_ONLY) !== 0,
    target: (lo >>> ENTRY_TARGET_SHIFT) & 3,
    addr: ((lo & 0xfffff000) >>> 0) + hi * TWO32,
  };
}

/** Index helpers. */
export const pdIndex = (va: number) => Math.floor(va / 2 ** PD_SHIFT);
export const smallIndex = (va: number) => Math.floor((va % 2 ** PD_SHIFT) / 2 ** SMALL_SHIFT);
export const largeIndex = (va: number) => Math.floor((va % 2 ** PD_SHIFT) / 2 ** LARGE_SHIFT);
export { LARGE_PAGE, SMALL_PAGE };
