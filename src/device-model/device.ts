// The runtime side of a declared PCI device: validated declaration, config space, IRQ and DMA
// state, and region access dispatch. It outlives connections: a client that goes away loses
// its DMA maps and IRQ fds, and the device is reset for the next one.

import { native } from '../native.ts';
import { logger } from '../log.ts';
import { buildConfigLayout } from './config-layout.ts';
import { ConfigSpace } from './config-space.ts';
import type { DeviceDeclaration, RegionDeclaration, RegionHandler, ResetReason, SparseArea } from './declaration.ts';
import { DmaTable, type DmaMappingInfo } from './dma.ts';
import { IrqController } from './irq.ts';
import { Errno, NUM_REGIONS, RegionIndex, RegionInfoFlag, setU64 } from './protocol.ts';
import type { Durability, Persist } from '../state/persist.ts';
import type { AdoptedFds } from '../state/plain.ts';
import { requestDurability, restoreDevice, saveDevice, watchDeviceFds, type DeviceFdWatcher, type DeviceState } from './persist.ts';

const PAGE = 4096;

/** What GET_REGION_INFO reports for a region. */
export interface RegionInfo {
  index: number;
  size: number;
  flags: number; // RegionInfoFlag READ/WRITE/MMAP (CAPS is added by the endpoint)
  fd: number; // -1 unless MMAP
  fdOffset: number;
  areas: SparseArea[]; // sparse-mmap capability (non-empty iff MMAP)
}

interface Range {
  start: number;
  end: number;
}

interface RegionRuntime {
  index: number;
  size: number;
  readable: boolean;
  writable: boolean;
  handler: RegionHandler | null;
  fd: number;
  fdOffset: number;
  areas: SparseArea[];
  /** Lazy mapping of the backing fd for trapped accesses to fd-backed bytes. */
  mem: Uint8Array | null;
  msixTable: Range | null;
  msixPba: Range | null;
}

export class DeclarationError extends Error {}

export class PciDevice implements Persist<DeviceState, AdoptedFds> {
  readonly name: string;
  readonly declaration: DeviceDeclaration;
  readonly config: ConfigSpace;
  readonly irq: IrqController;
  readonly dma: DmaTable;
  private readonly regions: RegionRuntime[];
  private readonly msixControlOffset: number;
  private readonly flags: number[];

  constructor(decl: DeviceDeclaration) {
    validateDeclaration(decl);
    this.name = decl.name;
    this.declaration = decl;
    const layout = buildConfigLayout(decl);
    this.config = new ConfigSpace(layout);
    const irqs = decl.irqs;
    this.irq = new IrqController([irqs.intx ?? 0, 0, irqs.msix ?? 0, irqs.err ?? 0, irqs.req ?? 0], decl.name);
    // Device callbacks must not break the table's bookkeeping: their errors are logged.
    const cb = decl.callbacks ?? {};
    const guard = (what: string, fn?: (m: DmaMappingInfo) => void) =>
      fn &&
      ((m: DmaMappingInfo): void => {
        try {
          fn.call(cb, m);
        } catch (err) {
          logger.error({ err, device: decl.name, map: m }, `device ${what} callback threw`);
        }
      });
    this.dma = new DmaTable({ onMapped: guard('dmaMapped', cb.dmaMapped), onUnmapped: guard('dmaUnmapped', cb.dmaUnmapped) });
    this.regions = [];
    for (let i = 0; i < NUM_REGIONS; i++) this.regions.push(this.buildRegion(i));
    this.flags = this.regions.map((_, i) => this.regionInfo(i).flags);

    this.msixControlOffset = layout.msix ? layout.msix.offset + 2 : -1;
    if (layout.msix) {
      this.config.onWrite(this.msixControlOffset, 2, (_old, now) => {
        this.irq.setMsixControl((now & 0x8000) !== 0, (now & 0x4000) !== 0);
      });
    }
    if (layout.pm) {
      // D1/D2 are not supported: a write asking for them leaves the power state unchanged.
      this.config.onWrite(layout.pm.offset + 4, 2, (old, now) => {
        const st = now & 3;
        return st === 1 || st === 2 ? (now & ~3) | (old & 3) : undefined;
      });
    }
  }

  /** Region description for GET_REGION_INFO. */
  // ---- surviving a restart (how: ./persist.ts) ----

  /** Config space, DMA map table and interrupt state (fds named, not inside). */
  save(): DeviceState {
    return saveDevice(this);
  }

  /** Into a freshly declared device of the same name and shape, with the adopted fds. */
  restore(raw: unknown, fds: AdoptedFds): void {
    restoreDevice(this, raw, fds);
  }

  /** Tell `w` of every DMA file and IRQ eventfd this device takes and drops, by stable name. */
  watchFds(w: DeviceFdWatcher): void {
    watchDeviceFds(this, w);
  }

  /** How soon the effect of a handled request must reach the checkpoint. */
  durability(command: number, region: number, offset: number, errno: number): Durability {
    return requestDurability(this.declaration, command, region, offset, errno);
  }

  regionInfo(index: number): RegionInfo {
    const r = this.regions[index]!;
    let flags = 0;
    if (r.size > 0) {
      if (r.readable) flags |= RegionInfoFlag.READ;
      if (r.writable) flags |= RegionInfoFlag.WRITE;
      if (r.fd >= 0 && r.areas.length > 0) flags |= RegionInfoFlag.MMAP;
    }
    const mmap = (flags & RegionInfoFlag.MMAP) !== 0;
    return { index, size: r.size, flags, fd: mmap ? r.fd : -1, fdOffset: mmap ? r.fdOffset : 0, areas: mmap ? r.areas : [] };
  }

  regionSize(index: number): number {
    return this.regions[index]!.size;
  }

  /** RegionInfoFlag bits of a region (cached; used on every access). */
  regionFlags(index: number): number {
    return this.flags[index]!;
  }

  /**
   * Trapped read of `count` bytes at `offset` of region `index` into dst[dstOff..].
   * Bounds, flags and count limits are checked by the caller (the endpoint). Returns 0 or errno.
   */
  read(index: number, offset: number, count: number, dst: Uint8Array, dv: DataView, dstOff: number): number {
    if (index === RegionIndex.CONFIG) {
      this.config.read(offset, dst, dstOff, count);
      return 0;
    }
    const r = this.regions[index]!;
    const end = offset + count;
    if (r.msixTable !== null && offset < r.msixTable.end && end > r.msixTable.start) {
      if (offset < r.msixTable.start || end > r.msixTable.end) return Errno.EINVAL;
      dst.set(this.irq.msixTable.subarray(offset - r.msixTable.start, end - r.msixTable.start), dstOff);
      return 0;
    }
    if (r.msixPba !== null && offset < r.msixPba.end && end > r.msixPba.start) {
      if (offset < r.msixPba.start || end > r.msixPba.end) return Errno.EINVAL;
      dst.set(this.irq.pba.subarray(offset - r.msixPba.start, end - r.msixPba.start), dstOff);
      return 0;
    }
    if (r.handler !== null && !(r.fd >= 0 && inAreas(r.areas, offset, end))) {
      if (count !== 1 && count !== 2 && count !== 4 && count !== 8) {
        return this.block(r, offset, dst.subarray(dstOff, dstOff + count), false);
      }
      let v: number | bigint;
      try {
        v = r.handler.read(offset, count);
      } catch (err) {
        logger.error({ err, device: this.name, region: index, offset }, 'region read handler threw');
        return Errno.EIO;
      }
      putValue(dv, dstOff, count, v);
      return 0;
    }
    if (r.fd >= 0) {
      const mem = this.backing(r);
      if (mem === null) return Errno.EIO;
      dst.set(mem.subarray(offset, end), dstOff);
      return 0;
    }
    dst.fill(0, dstOff, dstOff + count); // unbacked space reads as zero
    return 0;
  }

  /** Trapped write; see read(). Returns 0 or errno. */
  write(index: number, offset: number, count: number, src: Uint8Array, dv: DataView, srcOff: number): number {
    if (index === RegionIndex.CONFIG) {
      this.config.write(offset, src, srcOff, count);
      return 0;
    }
    const r = this.regions[index]!;
    const end = offset + count;
    if (r.msixTable !== null && offset < r.msixTable.end && end > r.msixTable.start) {
      if (offset < r.msixTable.start || end > r.msixTable.end) return Errno.EINVAL;
      this.irq.msixTable.set(src.subarray(srcOff, srcOff + count), offset - r.msixTable.start);
      return 0;
    }
    if (r.msixPba !== null && offset < r.msixPba.end && end > r.msixPba.start) {
      if (offset < r.msixPba.start || end > r.msixPba.end) return Errno.EINVAL;
      return 0; // the PBA is read-only
    }
    if (r.handler !== null && !(r.fd >= 0 && inAreas(r.areas, offset, end))) {
      if (count !== 1 && count !== 2 && count !== 4 && count !== 8) {
        return this.block(r, offset, src.subarray(srcOff, srcOff + count), true);
      }
      const v = count === 1 ? dv.getUint8(srcOff)
        : count === 2 ? dv.getUint16(srcOff, true)
        : count === 4 ? dv.getUint32(srcOff, true)
        : dv.getBigUint64(srcOff, true);
      try {
        r.handler.write(offset, count, v);
      } catch (err) {
        logger.error({ err, device: this.name, region: index, offset }, 'region write handler threw');
        return Errno.EIO;
      }
      return 0;
    }
    if (r.fd >= 0) {
      const mem = this.backing(r);
      if (mem === null) return Errno.EIO;
      mem.set(src.subarray(srcOff, srcOff + count), offset);
      return 0;
    }
    return 0; // unbacked space ignores writes
  }

  /** Device reset (DEVICE_RESET, client loss, or a server-side request). DMA maps and IRQ
   * eventfds are connection state and are not touched here. */
  reset(reason: ResetReason): void {
    this.config.reset();
    this.irq.reset();
    try {
      this.declaration.callbacks?.reset?.(reason);
    } catch (err) {
      logger.error({ err, device: this.name, reason }, 'device reset callback threw');
    }
  }

  /** Run `go` once the device may serve a new client (DeviceCallbacks.whenReady). */
  whenReady(go: () => void): void {
    const ready = this.declaration.callbacks?.whenReady;
    if (!ready) {
      go();
      return;
    }
    try {
      ready(go);
    } catch (err) {
      logger.error({ err, device: this.name }, 'device whenReady callback threw');
      go();
    }
  }

  /** A client connected. */
  attach(): void {
    try {
      this.declaration.callbacks?.connected?.();
    } catch (err) {
      logger.error({ err, device: this.name }, 'device connected callback threw');
    }
  }

  /** The client went away: drop its DMA maps and IRQ fds, reset the device. */
  detach(reason: string): void {
    this.dma.unmapAll();
    this.irq.closeAll();
    this.reset('disconnect');
    try {
      this.declaration.callbacks?.disconnected?.(reason);
    } catch (err) {
      logger.error({ err, device: this.name }, 'device disconnected callback threw');
    }
  }

  /** Unmap the lazily created backing views (server shutdown). */
  dispose(): void {
    for (const r of this.regions) {
      if (r.mem !== null) native.munmap(r.mem.buffer as ArrayBuffer);
      r.mem = null;
    }
  }

  /** A trapped access that is not 1/2/4/8 bytes: only handlers with block methods take it. */
  private block(r: RegionRuntime, offset: number, bytes: Uint8Array, write: boolean): number {
    const h = r.handler!;
    const fn = write ? h.writeBlock : h.readBlock;
    if (fn === undefined) return Errno.EINVAL;
    try {
      fn.call(h, offset, bytes);
    } catch (err) {
      logger.error({ err, device: this.name, region: r.index, offset }, 'region block handler threw');
      return Errno.EIO;
    }
    return 0;
  }

  private backing(r: RegionRuntime): Uint8Array | null {
    if (r.mem === null) {
      try {
        r.mem = new Uint8Array(native.mmap(r.fd, Math.ceil(r.size / PAGE) * PAGE, r.fdOffset, false));
      } catch (err) {
        logger.error({ err, device: this.name, region: r.index }, 'cannot map region backing fd');
        return null;
      }
    }
    return r.mem;
  }

  private buildRegion(index: number): RegionRuntime {
    const d = this.declaration;
    const base: RegionRuntime = {
      index,
      size: 0,
      readable: false,
      writable: false,
      handler: null,
      fd: -1,
      fdOffset: 0,
      areas: [],
      mem: null,
      msixTable: null,
      msixPba: null,
    };
    if (index === RegionIndex.CONFIG) {
      return { ...base, size: this.config.size, readable: true, writable: true };
    }
    const r = d.regions[index];
    if (!r || r.size === 0) return base;
    const rt: RegionRuntime = {
      ...base,
      size: r.size,
      readable: r.readable ?? true,
      writable: r.writable ?? index !== RegionIndex.ROM,
      handler: r.handler ?? null,
    };
    if (r.backing) {
      rt.fd = r.backing.fd;
      rt.fdOffset = r.backing.offset ?? 0;
      rt.areas = (r.backing.areas ?? [{ offset: 0, size: r.size }]).filter((a) => a.size > 0);
    }
    const m = d.capabilities?.msix;
    if (m && m.bar === index) {
      const n = d.irqs.msix ?? 0;
      rt.msixTable = { start: m.tableOffset, end: m.tableOffset + n * 16 };
      rt.msixPba = { start: m.pbaOffset, end: m.pbaOffset + Math.ceil(n / 64) * 8 };
    }
    return rt;
  }
}

function inAreas(areas: SparseArea[], start: number, end: number): boolean {
  for (let i = 0; i < areas.length; i++) {
    const a = areas[i]!;
    if (start >= a.offset && end <= a.offset + a.size) return true;
  }
  return false;
}

function putValue(dv: DataView, at: number, size: number, v: number | bigint): void {
  if (typeof v === 'bigint') {
    if (size === 8) {
      dv.setBigUint64(at, BigInt.asUintN(64, v), true);
      return;
    }
    v = Number(BigInt.asUintN(32, v));
  }
  if (typeof v !== 'number' || !Number.isFinite(v)) v = 0; // garbage from a handler reads as 0
  // Negative numbers are two's complement (handlers often build values with `|` and `<<`).
  if (size === 1) dv.setUint8(at, v & 0xff);
  else if (size === 2) dv.setUint16(at, v & 0xffff, true);
  else if (size === 4) dv.setUint32(at, v >>> 0, true);
  else if (v >= 0) setU64(dv, at, v);
  else dv.setBigUint64(at, BigInt.asUintN(64, BigInt(Math.trunc(v))), true);
}

const isPow2 = (n: number): boolean => Number.isSafeInteger(n) && n > 0 && 2 ** Math.round(Math.log2(n)) === n;

/** Throw a DeclarationError describing the first problem in a declaration. */
export function validateDeclaration(d: DeviceDeclaration): void {
  const bad = (msg: string): never => {
    throw new DeclarationError(`device ${d.name || '(unnamed)'}: ${msg}`);
  };
  if (!d.name) bad('name is required');
  const u16 = (v: number | undefined, what: string): void => {
    if (v !== undefined && !(Number.isInteger(v) && v >= 0 && v <= 0xffff)) bad(`${what} must be a 16-bit value`);
  };
  u16(d.pci.vendorId, 'vendorId');
  u16(d.pci.deviceId, 'deviceId');
  u16(d.pci.subsystemVendorId, 'subsystemVendorId');
  u16(d.pci.subsystemId, 'subsystemId');
  if (!(Number.isInteger(d.pci.classCode) && d.pci.classCode >= 0 && d.pci.classCode <= 0xffffff)) bad('classCode must be 24 bits');
  if (d.pci.revision !== undefined && !(Number.isInteger(d.pci.revision) && d.pci.revision >= 0 && d.pci.revision <= 0xff)) {
    bad('revision must be 8 bits');
  }

  for (const key of Object.keys(d.regions)) {
    const i = Number(key);
    if (!Number.isInteger(i) || i < 0 || i >= NUM_REGIONS) bad(`region index ${key} is not 0-8`);
    if (i === RegionIndex.CONFIG) bad('region 7 (config space) belongs to the device model');
    if (i === RegionIndex.VGA && (d.regions[i]?.size ?? 0) > 0) bad('region 8 (VGA) is not supported');
  }
  for (let i = 0; i <= RegionIndex.ROM; i++) {
    const r = d.regions[i];
    if (!r || r.size === 0) continue;
    validateRegion(i, r, d, bad);
  }

  const irqs = d.irqs;
  if (![0, 1, undefined].includes(irqs.intx)) bad('irqs.intx must be 0 or 1');
  if ((irqs.msi ?? 0) !== 0) bad('MSI is not modelled; declare MSI-X vectors instead');
  if (![0, 1, undefined].includes(irqs.err)) bad('irqs.err must be 0 or 1');
  if (![0, 1, undefined].includes(irqs.req)) bad('irqs.req must be 0 or 1');
  const n = irqs.msix ?? 0;
  if (!(Number.isInteger(n) && n >= 0 && n <= 2048)) bad('irqs.msix must be 0..2048');
  const m = d.capabilities?.msix;
  if (n > 0 && !m) bad('irqs.msix > 0 needs capabilities.msix (table and PBA placement)');
  if (m) {
    if (n === 0) bad('capabilities.msix needs irqs.msix > 0');
    const bar = d.regions[m.bar];
    if (!(m.bar >= 0 && m.bar <= 5) || !bar || bar.size === 0) bad(`MSI-X BAR ${m.bar} is not declared`);
    if (bar!.kind === 'io') bad('MSI-X structures must live in a memory BAR');
    const table = { start: m.tableOffset, end: m.tableOffset + n * 16 };
    const pba = { start: m.pbaOffset, end: m.pbaOffset + Math.ceil(n / 64) * 8 };
    for (const [what, rg] of [['table', table], ['PBA', pba]] as const) {
      if (rg.start % 8 !== 0) bad(`MSI-X ${what} offset must be 8-byte aligned`);
      if (rg.start < 0 || rg.end > bar!.size) bad(`MSI-X ${what} does not fit in BAR ${m.bar}`);
      for (const a of bar!.backing?.areas ?? (bar!.backing ? [{ offset: 0, size: bar!.size }] : [])) {
        if (rg.start < a.offset + a.size && rg.end > a.offset) bad(`MSI-X ${what} overlaps an mmap area of BAR ${m.bar}`);
      }
    }
    if (table.start < pba.end && pba.start < table.end) bad('MSI-X table and PBA overlap');
  }
}

function validateRegion(i: number, r: RegionDeclaration, d: DeviceDeclaration, bad: (m: string) => never): void {
  if (!isPow2(r.size)) bad(`region ${i}: size ${r.size} is not a power of two`);
  if (i === RegionIndex.ROM) {
    if (r.size < 2048) bad('ROM size must be at least 2 KiB');
    if (r.writable) bad('ROM cannot be writable');
    if (r.kind && r.kind !== 'mem32') bad('ROM has no BAR type');
  } else {
    const kind = r.kind ?? 'mem32';
    if (kind === 'io') {
      if (r.size < 4 || r.size > 256) bad(`region ${i}: I/O BAR size must be 4..256`);
      if (r.prefetchable) bad(`region ${i}: I/O BARs cannot be prefetchable`);
      if (r.backing) bad(`region ${i}: I/O BARs cannot be mmapped`);
    } else {
      if (r.size < 16) bad(`region ${i}: memory BAR size must be at least 16`);
      if (kind === 'mem32' && r.size > 2 ** 31) bad(`region ${i}: a 32-bit BAR is at most 2 GiB`);
    }
    if (kind === 'mem64') {
      if (i === 5) bad('BAR5 cannot be 64-bit (it would need index 6)');
      if ((d.regions[i + 1]?.size ?? 0) > 0) bad(`region ${i + 1} is the upper half of 64-bit BAR${i} and must be empty`);
    }
    if (i > 0 && d.regions[i - 1]?.kind === 'mem64' && (d.regions[i - 1]?.size ?? 0) > 0) {
      bad(`region ${i} is the upper half of 64-bit BAR${i - 1} and must be empty`);
    }
  }
  const b = r.backing;
  if (b) {
    if (!(Number.isInteger(b.fd) && b.fd >= 0)) bad(`region ${i}: backing fd is invalid`);
    const off = b.offset ?? 0;
    if (!(Number.isSafeInteger(off) && off >= 0 && off % PAGE === 0)) bad(`region ${i}: backing offset must be page aligned`);
    if (r.size < PAGE) bad(`region ${i}: an mmapped region must be at least ${PAGE} bytes`);
    const areas = [...(b.areas ?? [{ offset: 0, size: r.size }])].sort((x, y) => x.offset - y.offset);
    let prevEnd = 0;
    for (const a of areas) {
      if (a.offset % PAGE !== 0 || a.size % PAGE !== 0) bad(`region ${i}: sparse mmap areas must be page aligned`);
      if (a.offset < prevEnd || a.offset + a.size > r.size) bad(`region ${i}: sparse mmap areas overlap or exceed the region`);
      prevEnd = a.offset + a.size;
    }
  }
  // A region with neither handler nor backing is accepted: it reads as zero (an MSI-X-only BAR
  // is legal).
}
