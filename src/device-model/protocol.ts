// vfio-user wire protocol: constants and fixed-layout structs (QEMU docs/interop/vfio-user.rst,
// libvfio-user include/vfio-user.h). All integers are little-endian. Offsets in the struct
// codecs are payload offsets (absolute offset = 16 + payload offset).

export const HEADER_SIZE = 16;

/** Command numbers (header field `command`). */
export const Command = {
  VERSION: 1,
  DMA_MAP: 2,
  DMA_UNMAP: 3,
  DEVICE_GET_INFO: 4,
  DEVICE_GET_REGION_INFO: 5,
  DEVICE_GET_REGION_IO_FDS: 6,
  DEVICE_GET_IRQ_INFO: 7,
  DEVICE_SET_IRQS: 8,
  REGION_READ: 9,
  REGION_WRITE: 10,
  DMA_READ: 11,
  DMA_WRITE: 12,
  DEVICE_RESET: 13,
  DIRTY_PAGES: 14,
  REGION_WRITE_MULTI: 15,
  DEVICE_FEATURE: 16,
  MIG_DATA_READ: 17,
  MIG_DATA_WRITE: 18,
} as const;
export type CommandNumber = (typeof Command)[keyof typeof Command];

const commandNames: string[] = [];
for (const [name, n] of Object.entries(Command)) commandNames[n] = name;
/** Name of a command number for log lines ("cmd#99" for unknown ones). */
export function commandName(cmd: number): string {
  return commandNames[cmd] ?? `cmd#${cmd}`;
}

/** Header `flags` bits. */
export const MsgFlag = {
  TYPE_MASK: 0xf,
  TYPE_COMMAND: 0,
  TYPE_REPLY: 1,
  NO_REPLY: 0x10,
  ERROR: 0x20,
} as const;

/** Positive errno values used in error replies (Linux numbering, as QEMU expects). */
export const Errno = {
  EPERM: 1,
  ENOENT: 2,
  EIO: 5,
  E2BIG: 7,
  EBADF: 9,
  EAGAIN: 11,
  ENOMEM: 12,
  EFAULT: 14,
  EBUSY: 16,
  EEXIST: 17,
  ENODEV: 19,
  EINVAL: 22,
  ENOSPC: 28,
  ENOSYS: 38,
  ENOTSUP: 95,
  ECONNRESET: 104,
  ETIMEDOUT: 110,
} as const;

/** VFIO region indices for a PCI device. */
export const RegionIndex = {
  BAR0: 0,
  BAR1: 1,
  BAR2: 2,
  BAR3: 3,
  BAR4: 4,
  BAR5: 5,
  ROM: 6,
  CONFIG: 7,
  VGA: 8,
} as const;
export const NUM_REGIONS = 9;

/** VFIO IRQ indices for a PCI device. */
export const IrqIndex = { INTX: 0, MSI: 1, MSIX: 2, ERR: 3, REQ: 4 } as const;
export const NUM_IRQS = 5;

export const DeviceInfoFlag = { RESET: 1, PCI: 2 } as const;
export const RegionInfoFlag = { READ: 1, WRITE: 2, MMAP: 4, CAPS: 8 } as const;
export const RegionCapId = { SPARSE_MMAP: 1, TYPE: 2, MSIX_MAPPABLE: 3 } as const;
export const IrqInfoFlag = { EVENTFD: 1, MASKABLE: 2, AUTOMASKED: 4, NORESIZE: 8 } as const;
export const IrqSetFlag = {
  DATA_NONE: 1,
  DATA_BOOL: 2,
  DATA_EVENTFD: 4,
  ACTION_MASK: 8,
  ACTION_UNMASK: 16,
  ACTION_TRIGGER: 32,
  DATA_TYPE_MASK: 0x7,
  ACTION_TYPE_MASK: 0x38,
} as const;
export const DmaMapFlag = { READ: 1, WRITE: 2 } as const;
export const DmaUnmapFlag = { GET_DIRTY_BITMAP: 1, ALL: 2 } as const;

/** Fixed payload sizes (the `argsz` a well-formed request carries). */
export const StructSize = {
  DMA_MAP: 32,
  DMA_UNMAP: 24,
  DEVICE_INFO: 16,
  REGION_INFO: 32,
  IRQ_INFO: 16,
  IRQ_SET: 20,
  REGION_ACCESS: 16,
  WRITE_MULTI_HEADER: 8,
  WRITE_MULTI_ENTRY: 24,
  SPARSE_MMAP_HEADER: 16,
  SPARSE_MMAP_AREA: 16,
} as const;

/** QEMU's VFIO_USER_MULTI_MAX and per-entry data size. */
export const WRITE_MULTI_MAX_ENTRIES = 200;
export const WRITE_MULTI_DATA_MAX = 8;

// ---------------------------------------------------------------------------------------------
// Header

export interface Header {
  msgId: number;
  command: number;
  size: number; // whole message, header included
  flags: number;
  error: number;
}

export function decodeHeader(dv: DataView, at = 0): Header {
  return {
    msgId: dv.getUint16(at, true),
    command: dv.getUint16(at + 2, true),
    size: dv.getUint32(at + 4, true),
    flags: dv.getUint32(at + 8, true),
    error: dv.getUint32(at + 12, true),
  };
}

export function encodeHeader(dv: DataView, at: number, h: Header): void {
  dv.setUint16(at, h.msgId, true);
  dv.setUint16(at + 2, h.command, true);
  dv.setUint32(at + 4, h.size, true);
  dv.setUint32(at + 8, h.flags, true);
  dv.setUint32(at + 12, h.error, true);
}

// ---------------------------------------------------------------------------------------------
// u64 helpers. Addresses and sizes are carried as JS numbers: every value this project handles
// (guest-physical addresses, region sizes) is far below 2^53. Values above that decode to an
// inexact number that is still larger than any limit, so range checks reject them.

export function getU64(dv: DataView, at: number): number {
  return dv.getUint32(at + 4, true) * 0x1_0000_0000 + dv.getUint32(at, true);
}

export function setU64(dv: DataView, at: number, v: number): void {
  dv.setUint32(at, v >>> 0, true);
  dv.setUint32(at + 4, Math.floor(v / 0x1_0000_0000) >>> 0, true);
}

/** True when the u64 at `at` is exactly representable as a JS number. */
export function isSafeU64(dv: DataView, at: number): boolean {
  return dv.getUint32(at + 4, true) < 0x20_0000;
}

// ---------------------------------------------------------------------------------------------
// Payload structs. `decode*` reads a payload that starts at `at`; `encode*` writes one.

export interface VersionPayload {
  major: number;
  minor: number;
  json: string; // without the terminating NUL
}

export function encodeVersion(v: VersionPayload): Uint8Array {
  const text = new TextEncoder().encode(v.json);
  const out = new Uint8Array(4 + text.length + 1);
  const dv = new DataView(out.buffer);
  dv.setUint16(0, v.major, true);
  dv.setUint16(2, v.minor, true);
  out.set(text, 4); // the final byte stays 0: the NUL terminator
  return out;
}

export interface DmaMapPayload {
  argsz: number;
  flags: number;
  offset: number;
  addr: number;
  size: number;
}

export function decodeDmaMap(dv: DataView, at: number): DmaMapPayload {
  return {
    argsz: dv.getUint32(at, true),
    flags: dv.getUint32(at + 4, true),
    offset: getU64(dv, at + 8),
    addr: getU64(dv, at + 16),
    size: getU64(dv, at + 24),
  };
}

export function encodeDmaMap(p: DmaMapPayload): Uint8Array {
  const out = new Uint8Array(StructSize.DMA_MAP);
  const dv = new DataView(out.buffer);
  dv.setUint32(0, p.argsz, true);
  dv.setUint32(4, p.flags, true);
  setU64(dv, 8, p.offset);
  setU64(dv, 16, p.addr);
  setU64(dv, 24, p.size);
  return out;
}

export interface DmaUnmapPayload {
  argsz: number;
  flags: number;
  addr: number;
  size: number;
}

export function decodeDmaUnmap(dv: DataView, at: number): DmaUnmapPayload {
  return {
    argsz: dv.getUint32(at, true),
    flags: dv.getUint32(at + 4, true),
    addr: getU64(dv, at + 8),
    size: getU64(dv, at + 16),
  };
}

export function encodeDmaUnmap(p: DmaUnmapPayload): Uint8Array {
  const out = new Uint8Array(StructSize.DMA_UNMAP);
  const dv = new DataView(out.buffer);
  dv.setUint32(0, p.argsz, true);
  dv.setUint32(4, p.flags, true);
  setU64(dv, 8, p.addr);
  setU64(dv, 16, p.size);
  return out;
}

export interface DeviceInfoPayload {
  argsz: number;
  flags: number;
  numRegions: number;
  numIrqs: number;
}

export function decodeDeviceInfo(dv: DataView, at: number): DeviceInfoPayload {
  return {
    argsz: dv.getUint32(at, true),
    flags: dv.getUint32(at + 4, true),
    numRegions: dv.getUint32(at + 8, true),
    numIrqs: dv.getUint32(at + 12, true),
  };
}

export function encodeDeviceInfo(p: DeviceInfoPayload): Uint8Array {
  const out = new Uint8Array(StructSize.DEVICE_INFO);
  const dv = new DataView(out.buffer);
  dv.setUint32(0, p.argsz, true);
  dv.setUint32(4, p.flags, true);
  dv.setUint32(8, p.numRegions, true);
  dv.setUint32(12, p.numIrqs, true);
  return out;
}

export interface SparseMmapArea {
  offset: number;
  size: number;
}

export interface RegionInfoPayload {
  argsz: number;
  flags: number;
  index: number;
  capOffset: number;
  size: number;
  offset: number;
  /** Decoded SPARSE_MMAP capability, when the CAPS flag is set and the chain holds one. */
  sparse?: SparseMmapArea[];
}

export function decodeRegionInfo(dv: DataView, at: number, length: number): RegionInfoPayload {
  const p: RegionInfoPayload = {
    argsz: dv.getUint32(at, true),
    flags: dv.getUint32(at + 4, true),
    index: dv.getUint32(at + 8, true),
    capOffset: dv.getUint32(at + 12, true),
    size: getU64(dv, at + 16),
    offset: getU64(dv, at + 24),
  };
  if (p.flags & RegionInfoFlag.CAPS) {
    // Walk the chain; offsets count from the payload start. Bounded by the payload length and a
    // hop limit so a hostile chain cannot loop.
    let off = p.capOffset;
    for (let hops = 0; off !== 0 && hops < 16; hops++) {
      if (off < StructSize.REGION_INFO || off + 8 > length) break;
      const id = dv.getUint16(at + off, true);
      const next = dv.getUint32(at + off + 4, true);
      if (id === RegionCapId.SPARSE_MMAP && off + 16 <= length) {
        const n = dv.getUint32(at + off + 8, true);
        const areas: SparseMmapArea[] = [];
        for (let i = 0; i < n && off + 16 + 16 * (i + 1) <= length; i++) {
          const a = at + off + 16 + 16 * i;
          areas.push({ offset: getU64(dv, a), size: getU64(dv, a + 8) });
        }
        p.sparse = areas;
      }
      off = next;
    }
  }
  return p;
}

export interface IrqInfoPayload {
  argsz: number;
  flags: number;
  index: number;
  count: number;
}

export function decodeIrqInfo(dv: DataView, at: number): IrqInfoPayload {
  return {
    argsz: dv.getUint32(at, true),
    flags: dv.getUint32(at + 4, true),
    index: dv.getUint32(at + 8, true),
    count: dv.getUint32(at + 12, true),
  };
}

export function encodeIrqInfo(p: IrqInfoPayload): Uint8Array {
  const out = new Uint8Array(StructSize.IRQ_INFO);
  const dv = new DataView(out.buffer);
  dv.setUint32(0, p.argsz, true);
  dv.setUint32(4, p.flags, true);
  dv.setUint32(8, p.index, true);
  dv.setUint32(12, p.count, true);
  return out;
}

export interface IrqSetPayload {
  argsz: number;
  flags: number;
  index: number;
  start: number;
  count: number;
  /** In-band data (DATA_BOOL: one byte per vector); empty otherwise. */
  data: Uint8Array;
}

export function decodeIrqSet(dv: DataView, at: number, length: number): IrqSetPayload {
  return {
    argsz: dv.getUint32(at, true),
    flags: dv.getUint32(at + 4, true),
    index: dv.getUint32(at + 8, true),
    start: dv.getUint32(at + 12, true),
    count: dv.getUint32(at + 16, true),
    data: new Uint8Array(dv.buffer, dv.byteOffset + at + StructSize.IRQ_SET, length - StructSize.IRQ_SET).slice(),
  };
}

export function encodeIrqSet(p: IrqSetPayload): Uint8Array {
  const out = new Uint8Array(StructSize.IRQ_SET + p.data.length);
  const dv = new DataView(out.buffer);
  dv.setUint32(0, p.argsz, true);
  dv.setUint32(4, p.flags, true);
  dv.setUint32(8, p.index, true);
  dv.setUint32(12, p.start, true);
  dv.setUint32(16, p.count, true);
  out.set(p.data, StructSize.IRQ_SET);
  return out;
}

export interface RegionAccessPayload {
  offset: number;
  region: number;
  count: number;
  /** REGION_WRITE request / REGION_READ reply data; empty otherwise. */
  data: Uint8Array;
}

export function decodeRegionAccess(dv: DataView, at: number, length: number): RegionAccessPayload {
  return {
    offset: getU64(dv, at),
    region: dv.getUint32(at + 8, true),
    count: dv.getUint32(at + 12, true),
    data: new Uint8Array(dv.buffer, dv.byteOffset + at + 16, length - 16).slice(),
  };
}

export function encodeRegionAccess(p: RegionAccessPayload): Uint8Array {
  const out = new Uint8Array(StructSize.REGION_ACCESS + p.data.length);
  const dv = new DataView(out.buffer);
  setU64(dv, 0, p.offset);
  dv.setUint32(8, p.region, true);
  dv.setUint32(12, p.count, true);
  out.set(p.data, StructSize.REGION_ACCESS);
  return out;
}

export interface WriteMultiEntry {
  offset: number;
  region: number;
  count: number;
  data: Uint8Array; // count bytes (≤ 8)
}

export function encodeWriteMulti(entries: WriteMultiEntry[]): Uint8Array {
  const out = new Uint8Array(StructSize.WRITE_MULTI_HEADER + entries.length * StructSize.WRITE_MULTI_ENTRY);
  const dv = new DataView(out.buffer);
  setU64(dv, 0, entries.length);
  entries.forEach((e, i) => {
    const a = StructSize.WRITE_MULTI_HEADER + i * StructSize.WRITE_MULTI_ENTRY;
    setU64(dv, a, e.offset);
    dv.setUint32(a + 8, e.region, true);
    dv.setUint32(a + 12, e.count, true);
    out.set(e.data.subarray(0, WRITE_MULTI_DATA_MAX), a + 16);
  });
  return out;
}

/** Build a whole message: header + payload. `size` is computed. */
export function encodeMessage(
  h: { msgId: number; command: number; flags?: number; error?: number },
  payload?: Uint8Array,
): Uint8Array {
  const len = HEADER_SIZE + (payload?.length ?? 0);
  const out = new Uint8Array(len);
  encodeHeader(new DataView(out.buffer), 0, {
    msgId: h.msgId,
    command: h.command,
    size: len,
    flags: h.flags ?? 0,
    error: h.error ?? 0,
  });
  if (payload) out.set(payload, HEADER_SIZE);
  return out;
}
