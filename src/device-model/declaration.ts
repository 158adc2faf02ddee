// What a device author declares (libvfio-user style: vfu_pci_init + vfu_setup_region +
// vfu_setup_device_nr_irqs + callbacks). The library owns the protocol, config space, DMA table
// and IRQ fds; the device only supplies identity, region handlers and callbacks.

import type { DmaMappingInfo } from './dma.ts';
import type { Durability } from '../state/persist.ts';

/** Trapped register access. `value` / the result is a number for 1-, 2- and 4-byte accesses and
 * a bigint for 8-byte ones (a number is accepted back for 8-byte reads too). */
export interface RegionHandler {
  read(offset: number, size: number): number | bigint;
  write(offset: number, size: number, value: number | bigint): void;
  /** Accesses of other sizes (e.g. QEMU reads a whole expansion ROM in one REGION_READ). Without
   * these, such accesses fail with EINVAL. */
  readBlock?(offset: number, dst: Uint8Array): void;
  writeBlock?(offset: number, src: Uint8Array): void;
}

export interface SparseArea {
  offset: number; // within the region
  size: number;
}

/** The region's bytes live in an fd (e.g. a VRAM memfd), which the client may mmap. */
export interface RegionBacking {
  fd: number;
  /** Offset of region byte 0 within the fd (page aligned). */
  offset?: number;
  /** Parts the client may mmap (default: the whole region). Accesses elsewhere reach the
   * region's handler if it has one, else the fd contents. */
  areas?: SparseArea[];
}

export type BarKind = 'mem32' | 'mem64' | 'io';

export interface RegionDeclaration {
  /** Bytes. BARs: a power of two (≥ 16 for memory, ≥ 4 for I/O); ROM: a power of two ≥ 2 KiB. */
  size: number;
  readable?: boolean; // default true
  writable?: boolean; // default true (ROM: false)
  /** BAR type (regions 0-5). A mem64 BAR at index n also uses index n+1, which stays empty. */
  kind?: BarKind;
  prefetchable?: boolean;
  handler?: RegionHandler;
  backing?: RegionBacking;
  /** How soon a guest's write at `offset` must reach a restartable server's checkpoint (the
   * device knows its registers; src/state/persist.ts). Default: coalesced. */
  durability?: (offset: number) => Durability;
}

export interface PciIdentity {
  vendorId: number;
  deviceId: number;
  subsystemVendorId?: number; // default vendorId
  subsystemId?: number; // default 0
  /** 24-bit class code: base class << 16 | subclass << 8 | prog-if (e.g. 0x030200, 3D controller). */
  classCode: number;
  revision?: number;
}

/** MSI-X table and PBA placement; the vector count comes from `irqs.msix`. */
export interface MsixDeclaration {
  bar: number;
  tableOffset: number; // 8-byte aligned, N*16 bytes
  pbaOffset: number; // 8-byte aligned, ceil(N/64)*8 bytes
}

export type PcieDeviceType = 'endpoint' | 'legacy-endpoint' | 'rc-integrated';

export interface CapabilityDeclaration {
  /** Power management capability (D0/D3hot). Default true. */
  pm?: boolean;
  msix?: MsixDeclaration;
  /** PCIe capability (version 2) and a 4 KiB config space. Default: endpoint. false gives a
   * conventional PCI device with a 256-byte config space. */
  pcie?: PcieDeviceType | false;
}

export interface IrqCounts {
  intx?: 0 | 1;
  msi?: 0; // MSI is not modelled (no MSI capability); use MSI-X
  msix?: number;
  err?: 0 | 1;
  req?: 0 | 1;
}

export type ResetReason = 'client' | 'disconnect' | 'server';

export interface DeviceCallbacks {
  /** A DMA_MAP was accepted (also fd-less ones). */
  dmaMapped?(map: DmaMappingInfo): void;
  /** A map is about to go away (DMA_UNMAP, UNMAP_ALL, disconnect): drop every reference to it. */
  dmaUnmapped?(map: DmaMappingInfo): void;
  /** Load the device's reset state. Config space and pending IRQs are reset by the library. */
  reset?(reason: ResetReason): void;
  connected?(): void;
  disconnected?(reason: string): void;
  /**
   * Call `go` once the device may serve a new client (at once if it may now). The listener
   * holds an accepted client's messages until then: e.g. while the previous client's data is
   * still being erased.
   */
  whenReady?(go: () => void): void;
}

export interface DeviceDeclaration {
  name: string;
  pci: PciIdentity;
  capabilities?: CapabilityDeclaration;
  /** Regions by index: 0-5 BARs, 6 expansion ROM. 7 (config) belongs to the library, 8 (VGA)
   * is not supported. */
  regions: Partial<Record<number, RegionDeclaration>>;
  irqs: IrqCounts;
  callbacks?: DeviceCallbacks;
}
