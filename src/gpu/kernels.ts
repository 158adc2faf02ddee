// What the engine needs to know about each compute kernel (docs/kernels.md): how many buffers
// it takes and which ones it writes. Written buffers need writable pages (a read-only page
// faults) and are mapped read-write; the others are mapped read-only, so a trusted kernel can
// never scribble on memory the guest marked read-only.

export interface KernelInfo {
  name: string;
  buffers: number;
  /** Bit i set = the kernel writes buffer i. */
  writes: number;
}

/** Indexed by kernel id (native/include/kernels.h). */
export const KERNELS: readonly KernelInfo[] = [
  { name: 'NOP', buffers: 0, writes: 0 },
  { name: 'LOOP', buffers: 1, writes: 0b1 },
  { name: 'MADD', buffers: 3, writes: 0b100 },
  { name: 'FMADD', buffers: 3, writes: 0b100 },
  { name: 'MMUL', buffers: 3, writes: 0b100 },
  { name: 'FMMUL', buffers: 3, writes: 0b100 },
  { name: 'BACKPROP_FORWARD', buffers: 3, writes: 0b100 },
  { name: 'BACKPROP_ADJUST', buffers: 4, writes: 0b1100 },
  { name: 'BFS', buffers: 7, writes: 0b1111100 },
  { name: 'HOTSPOT', buffers: 3, writes: 0b100 },
  { name: 'LUD_DIAGONAL', buffers: 1, writes: 0b1 },
  { name: 'LUD_PERIMETER', buffers: 1, writes: 0b1 },
  { name: 'LUD_INTERNAL', buffers: 1, writes: 0b1 },
  { name: 'SRAD1', buffers: 6, writes: 0b111110 },
  { name: 'SRAD2', buffers: 6, writes: 0b1 },
  { name: 'MEMSET', buffers: 1, writes: 0b1 },
];

export const K = {
  NOP: 0, LOOP: 1, MADD: 2, FMADD: 3, MMUL: 4, FMMUL: 5, BACKPROP_FORWARD: 6, BACKPROP_ADJUST: 7,
  BFS: 8, HOTSPOT: 9, LUD_DIAGONAL: 10, LUD_PERIMETER: 11, LUD_INTERNAL: 12, SRAD1: 13, SRAD2: 14,
  MEMSET: 15,
} as const;
