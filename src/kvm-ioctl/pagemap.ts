// Host-physical frames behind a host-virtual range: the G-KVM KVM_GFN_TO_PFN step without a
// kernel patch. G-KVM added an ioctl so its aggregator could turn a guest frame number into a
// host page frame number for DMA. Here the server already maps each DMA_MAP region's guest-RAM
// fd, so guest-physical → host-virtual is arithmetic on that mapping, and host-virtual →
// host-physical is a read of /proc/self/pagemap (one 64-bit entry per page, through the addon).
//
// Diagnostic only. PFNs are visible only to processes with CAP_SYS_ADMIN (root here); others
// read present bits with a zero PFN (Linux ≥ 4.2). A PFN is also only a snapshot: the kernel
// may migrate or compact the page right after. The engine never uses physical addresses: it
// reaches guest memory through the fds and mappings it was given (see docs/architecture.md,
// "Bus addresses"). Use this to inspect where guest RAM landed (e.g. to check that two VMs'
// pages are distinct, or to log a DMA target) — never to program anything.
import { native } from '../native.ts';

/** x86-64 base page size: pagemap has one entry per 4 KiB page. */
export const PAGE_SIZE = 4096;

// /proc/self/pagemap entry layout (Documentation/admin-guide/mm/pagemap.rst).
const PRESENT = 1n << 63n;
const SWAPPED = 1n << 62n;
const FILE_OR_SHARED = 1n << 61n;
const EXCLUSIVE = 1n << 56n;
const SOFT_DIRTY = 1n << 55n;
const PFN_MASK = (1n << 55n) - 1n;

export interface PagemapEntry {
  present: boolean;
  swapped: boolean;
  /** File page or shared anonymous (memfd mappings are). */
  fileOrShared: boolean;
  exclusive: boolean;
  softDirty: boolean;
  /** Page frame number, or null when not present or hidden (no CAP_SYS_ADMIN). */
  pfn: bigint | null;
}

export function decodePagemapEntry(e: bigint): PagemapEntry {
  const present = (e & PRESENT) !== 0n;
  const pfn = present ? e & PFN_MASK : 0n;
  return {
    present,
    swapped: (e & SWAPPED) !== 0n,
    fileOrShared: (e & FILE_OR_SHARED) !== 0n,
    exclusive: (e & EXCLUSIVE) !== 0n,
    softDirty: (e & SOFT_DIRTY) !== 0n,
    pfn: present && pfn !== 0n ? pfn : null,
  };
}

export interface HostFrames {
  /** Page-aligned host-virtual address of the first page. */
  address: bigint;
  pages: number;
  /** Per page: frame number, or null (not present, or PFNs hidden from this process). */
  pfns: (bigint | null)[];
  present: boolean[];
  /** False when pages are present but every PFN reads 0: the process lacks CAP_SYS_ADMIN. */
  pfnsVisible: boolean;
}

export interface HostFramesOptions {
  /** Byte offset of the range in the buffer (default 0). */
  offset?: number;
  /** Byte length (default: to the end of the buffer). */
  length?: number;
  /**
   * Read one byte per page first so that every page is present (default true). A read fault
   * on a shared fd mapping (memfd guest RAM) allocates the real page; it never writes, so it
   * cannot race with the guest. (On a private anonymous mapping a read maps the shared zero
   * page instead: every such page would report the same PFN.)
   */
  touch?: boolean;
}

/** Pages a byte range [offset, offset + length) of a buffer at address base overlaps. */
function pageSpan(base: bigint, offset: number, length: number): { first: bigint; pages: number } {
  const start = base + BigInt(offset);
  const first = start - (start % BigInt(PAGE_SIZE));
  const end = start + BigInt(length);
  const pages = Number((end - first + BigInt(PAGE_SIZE - 1)) / BigInt(PAGE_SIZE));
  return { first, pages };
}

/**
 * Host frames of a range of a mapped buffer (e.g. native.mmap of a DMA_MAP region's fd).
 * Throws RangeError for a range outside the buffer.
 */
export function hostFrames(buf: ArrayBuffer | ArrayBufferView, options: HostFramesOptions = {}): HostFrames {
  const size = buf.byteLength;
  const offset = options.offset ?? 0;
  const length = options.length ?? size - offset;
  if (!Number.isInteger(offset) || !Number.isInteger(length) || offset < 0 || length <= 0 || offset + length > size) {
    throw new RangeError(`hostFrames: range [${offset}, +${length}) is outside the ${size}-byte buffer`);
  }
  const base = native.addressOf(buf);
  const { first, pages } = pageSpan(base, offset, length);
  if (options.touch ?? true) touchPages(buf, base, offset, length);
  const raw = native.pagemap(first, pages);
  const pfns: (bigint | null)[] = new Array(pages);
  const present: boolean[] = new Array(pages);
  let anyPresent = false;
  let anyPfn = false;
  for (let i = 0; i < pages; i++) {
    const e = decodePagemapEntry(raw[i]!);
    pfns[i] = e.pfn;
    present[i] = e.present;
    anyPresent ||= e.present;
    anyPfn ||= e.pfn !== null;
  }
  return { address: first, pages, pfns, present, pfnsVisible: anyPfn || !anyPresent };
}

/** Read one byte in every page of the range; returns a value so the reads are not optimized out. */
function touchPages(buf: ArrayBuffer | ArrayBufferView, base: bigint, offset: number, length: number): number {
  const bytes = ArrayBuffer.isView(buf)
    ? new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength)
    : new Uint8Array(buf);
  // First byte of the range, then the first byte of every following page.
  const misalign = Number((base + BigInt(offset)) % BigInt(PAGE_SIZE));
  let acc = bytes[offset]!;
  for (let i = offset + PAGE_SIZE - misalign; i < offset + length; i += PAGE_SIZE) acc ^= bytes[i]!;
  return acc;
}

/** A DMA-mapped guest-physical region and the server's mapping of its fd. */
export interface GuestRegionMapping {
  /** Guest-physical (IOVA) address of the region's first byte. */
  gpa: bigint;
  /** The server's mapping of the region (native.mmap of the DMA_MAP fd at its offset). */
  view: ArrayBuffer | ArrayBufferView;
}

/**
 * Host-physical address of one guest-physical address inside a mapped region, or null when the
 * address is outside the region, the page is not present or PFNs are hidden. Diagnostic only.
 */
export function gpaToHpa(region: GuestRegionMapping, gpa: bigint): bigint | null {
  const rel = gpa - region.gpa;
  if (rel < 0n || rel >= BigInt(region.view.byteLength)) return null;
  const frames = hostFrames(region.view, { offset: Number(rel), length: 1 });
  const pfn = frames.pfns[0];
  if (pfn === null || pfn === undefined) return null;
  const addr = native.addressOf(region.view) + rel;
  return pfn * BigInt(PAGE_SIZE) + (addr % BigInt(PAGE_SIZE));
}
