// PCI configuration space layout as data: every register is a field with a reset value, the
// bits the client may write, and the bits that are write-1-to-clear. The layout is built once
// from a device declaration; ConfigSpace compiles it into byte masks.

import type { DeviceDeclaration, PcieDeviceType } from './declaration.ts';

export interface ConfigField {
  name: string;
  offset: number;
  size: 1 | 2 | 4;
  reset: number;
  writable?: number;
  rw1c?: number;
}

export interface CapabilityPlacement {
  id: number;
  name: string;
  offset: number;
  size: number;
}

export interface ConfigLayout {
  size: 256 | 4096;
  fields: ConfigField[];
  capabilities: CapabilityPlacement[];
  msix: { offset: number; vectors: number } | null;
  pm: { offset: number } | null;
}

/** Standard header register offsets (type 0). */
export const PciReg = {
  VENDOR_ID: 0x00,
  DEVICE_ID: 0x02,
  COMMAND: 0x04,
  STATUS: 0x06,
  REVISION: 0x08,
  CLASS_PROG: 0x09,
  CLASS_SUB: 0x0a,
  CLASS_BASE: 0x0b,
  CACHE_LINE_SIZE: 0x0c,
  LATENCY_TIMER: 0x0d,
  HEADER_TYPE: 0x0e,
  BIST: 0x0f,
  BAR0: 0x10,
  CARDBUS_CIS: 0x28,
  SUBSYSTEM_VENDOR_ID: 0x2c,
  SUBSYSTEM_ID: 0x2e,
  ROM_ADDRESS: 0x30,
  CAPABILITY_LIST: 0x34,
  INTERRUPT_LINE: 0x3c,
  INTERRUPT_PIN: 0x3d,
  MIN_GNT: 0x3e,
  MAX_LAT: 0x3f,
} as const;

export const PciCommand = {
  IO: 0x1,
  MEMORY: 0x2,
  MASTER: 0x4,
  PARITY: 0x40,
  SERR: 0x100,
  INTX_DISABLE: 0x400,
} as const;

export const PciStatus = {
  INTERRUPT: 0x8,
  CAP_LIST: 0x10,
  // Error bits, all RW1C: master data parity, signalled/received target abort, received master
  // abort, signalled system error, detected parity error.
  ERRORS_RW1C: 0xf900,
} as const;

export const PciCapId = { PM: 0x01, MSI: 0x05, PCIE: 0x10, MSIX: 0x11 } as const;

export const PcieType: Record<PcieDeviceType, number> = {
  endpoint: 0x0,
  'legacy-endpoint': 0x1,
  'rc-integrated': 0x9,
};

const CAPS_START = 0x40;

/** Build the config-space layout for a declaration (which must already be validated). */
export function buildConfigLayout(decl: DeviceDeclaration): ConfigLayout {
  const caps = decl.capabilities ?? {};
  const pcie = caps.pcie === undefined ? 'endpoint' : caps.pcie;
  const size: 256 | 4096 = pcie === false ? 256 : 4096;
  const fields: ConfigField[] = [];
  const placements: CapabilityPlacement[] = [];
  const f = (name: string, offset: number, size: 1 | 2 | 4, reset: number, writable = 0, rw1c = 0): void => {
    fields.push({ name, offset, size, reset: reset >>> 0, writable: writable >>> 0, rw1c: rw1c >>> 0 });
  };

  let pmAt = -1;
  let msixAt = -1;
  const hasIoBar = [0, 1, 2, 3, 4, 5].some((i) => decl.regions[i]?.kind === 'io');
  const intx = decl.irqs.intx ?? 0;

  // ---- capability placement (linked in declaration order: PM, MSI-X, PCIe) ----
  type CapBuilder = { id: number; name: string; size: number; build: (at: number, next: number) => void };
  const builders: CapBuilder[] = [];
  if (caps.pm !== false) builders.push({ id: PciCapId.PM, name: 'pm', size: 8, build: pmFields });
  if (caps.msix) builders.push({ id: PciCapId.MSIX, name: 'msix', size: 12, build: msixFields });
  if (pcie !== false) builders.push({ id: PciCapId.PCIE, name: 'pcie', size: 0x3c, build: pcieFields });
  let at = CAPS_START;
  const offsets = builders.map((b) => {
    const o = at;
    at = (at + b.size + 0xf) & ~0xf; // 16-byte aligned starts keep dumps readable
    return o;
  });
  builders.forEach((b, i) => {
    b.build(offsets[i]!, offsets[i + 1] ?? 0);
    placements.push({ id: b.id, name: b.name, offset: offsets[i]!, size: b.size });
  });

  // ---- type 0 header ----
  const p = decl.pci;
  f('vendor_id', PciReg.VENDOR_ID, 2, p.vendorId);
  f('device_id', PciReg.DEVICE_ID, 2, p.deviceId);
  // Only the bits that mean something for this device are writable.
  const cmdWritable =
    PciCommand.MEMORY | PciCommand.MASTER | PciCommand.PARITY | PciCommand.SERR |
    (hasIoBar ? PciCommand.IO : 0) | (intx ? PciCommand.INTX_DISABLE : 0);
  f('command', PciReg.COMMAND, 2, 0, cmdWritable);
  f('status', PciReg.STATUS, 2, builders.length > 0 ? PciStatus.CAP_LIST : 0, 0, PciStatus.ERRORS_RW1C);
  f('revision', PciReg.REVISION, 1, p.revision ?? 0);
  f('class_prog', PciReg.CLASS_PROG, 1, p.classCode & 0xff);
  f('class_sub', PciReg.CLASS_SUB, 1, (p.classCode >> 8) & 0xff);
  f('class_base', PciReg.CLASS_BASE, 1, (p.classCode >> 16) & 0xff);
  f('cache_line_size', PciReg.CACHE_LINE_SIZE, 1, 0, 0xff);
  f('latency_timer', PciReg.LATENCY_TIMER, 1, 0);
  f('header_type', PciReg.HEADER_TYPE, 1, 0);
  f('bist', PciReg.BIST, 1, 0);
  barFields(decl, f);
  f('cardbus_cis', PciReg.CARDBUS_CIS, 4, 0);
  f('subsystem_vendor_id', PciReg.SUBSYSTEM_VENDOR_ID, 2, p.subsystemVendorId ?? p.vendorId);
  f('subsystem_id', PciReg.SUBSYSTEM_ID, 2, p.subsystemId ?? 0);
  // Expansion ROM: without region 6 nothing is writable, so the 0xFFFFF800 sizing write reads
  // back 0 (QEMU would otherwise see a 2 KiB ROM).
  const rom = decl.regions[6];
  if (rom && rom.size > 0) f('rom_address', PciReg.ROM_ADDRESS, 4, 0, (~(rom.size - 1) & 0xfffff800) | 1);
  else f('rom_address', PciReg.ROM_ADDRESS, 4, 0);
  f('capabilities', PciReg.CAPABILITY_LIST, 1, builders.length > 0 ? CAPS_START : 0);
  f('interrupt_line', PciReg.INTERRUPT_LINE, 1, 0, 0xff);
  f('interrupt_pin', PciReg.INTERRUPT_PIN, 1, intx ? 1 : 0); // 0: no INTx, MSI-X only
  f('min_gnt', PciReg.MIN_GNT, 1, 0);
  f('max_lat', PciReg.MAX_LAT, 1, 0);

  function pmFields(o: number, next: number): void {
    f('pm.id', o, 1, PciCapId.PM);
    f('pm.next', o + 1, 1, next);
    f('pm.pmc', o + 2, 2, 0x0003); // PM spec 1.2, no D1/D2, no PME
    // PMCSR: PowerState RW (D1/D2 writes are ignored, see ConfigSpace hooks), No_Soft_Reset set
    // so a D3hot->D0 transition keeps the device configured, PME_Status RW1C.
    f('pm.pmcsr', o + 4, 2, 0x0008, 0x0003, 0x8000);
    f('pm.bridge_ext', o + 6, 1, 0);
    f('pm.data', o + 7, 1, 0);
    pmAt = o;
  }

  function msixFields(o: number, next: number): void {
    const m = caps.msix!;
    const n = decl.irqs.msix ?? 0;
    f('msix.id', o, 1, PciCapId.MSIX);
    f('msix.next', o + 1, 1, next);
    // Message Control: table size N-1 (RO), function mask (bit 14) and enable (bit 15) RW.
    f('msix.control', o + 2, 2, (n - 1) & 0x7ff, 0xc000);
    f('msix.table', o + 4, 4, (m.tableOffset & ~7) | m.bar);
    f('msix.pba', o + 8, 4, (m.pbaOffset & ~7) | m.bar);
    msixAt = o;
  }

  function pcieFields(o: number, next: number): void {
    const type = PcieType[pcie as PcieDeviceType];
    f('pcie.id', o, 1, PciCapId.PCIE);
    f('pcie.next', o + 1, 1, next);
    f('pcie.flags', o + 2, 2, (type << 4) | 0x2); // capability version 2
    // DevCap: 128-byte max payload, unlimited L0s/L1 latency, role-based error reporting.
    f('pcie.devcap', o + 0x04, 4, (7 << 6) | (7 << 9) | (1 << 15));
    // DevCtl: everything but Initiate FLR (no FLR) is a plain RW setting; reset: relaxed
    // ordering, no snoop, 512-byte max read request.
    f('pcie.devctl', o + 0x08, 2, 0x2810, 0x7fff);
    f('pcie.devsta', o + 0x0a, 2, 0, 0, 0x000f); // error detected bits RW1C
    f('pcie.lnkcap', o + 0x0c, 4, 0x00000011); // 2.5 GT/s, x1, no ASPM
    f('pcie.lnkctl', o + 0x10, 2, 0, 0x00c3); // ASPM control, common clock, extended synch
    f('pcie.lnksta', o + 0x12, 2, 0x0011); // 2.5 GT/s, x1
    f('pcie.sltcap', o + 0x14, 4, 0);
    f('pcie.sltctl', o + 0x18, 2, 0);
    f('pcie.sltsta', o + 0x1a, 2, 0);
    f('pcie.rtctl', o + 0x1c, 2, 0);
    f('pcie.rtcap', o + 0x1e, 2, 0);
    f('pcie.rtsta', o + 0x20, 4, 0);
    f('pcie.devcap2', o + 0x24, 4, 0);
    f('pcie.devctl2', o + 0x28, 2, 0);
    f('pcie.devsta2', o + 0x2a, 2, 0);
    f('pcie.lnkcap2', o + 0x2c, 4, 0x2); // supported speeds: 2.5 GT/s
    f('pcie.lnkctl2', o + 0x30, 2, 0x1, 0x000f); // target link speed
    f('pcie.lnksta2', o + 0x32, 2, 0);
    f('pcie.sltcap2', o + 0x34, 4, 0);
    f('pcie.sltctl2', o + 0x38, 2, 0);
    f('pcie.sltsta2', o + 0x3a, 2, 0);
  }

  return {
    size,
    fields,
    capabilities: placements,
    msix: msixAt >= 0 ? { offset: msixAt, vectors: decl.irqs.msix ?? 0 } : null,
    pm: pmAt >= 0 ? { offset: pmAt } : null,
  };
}

/** BAR registers: the type bits are read-only, the address bits above the size are writable,
 * so a sizing write of all ones reads back the size mask with the type bits. */
function barFields(
  decl: DeviceDeclaration,
  f: (name: string, offset: number, size: 1 | 2 | 4, reset: number, writable?: number) => void,
): void {
  for (let i = 0; i < 6; i++) {
    const off = PciReg.BAR0 + 4 * i;
    const r = decl.regions[i];
    if (!r || r.size === 0) {
      // Upper half of a 64-bit BAR, or no BAR: reads 0, writes ignored.
      if (i > 0 && decl.regions[i - 1]?.kind === 'mem64') continue;
      f(`bar${i}`, off, 4, 0);
      continue;
    }
    if (r.kind === 'io') {
      f(`bar${i}`, off, 4, 0x1, ~(r.size - 1) & 0xfffffffc);
    } else if (r.kind === 'mem64') {
      const mask = ~(BigInt(r.size) - 1n) & 0xffff_ffff_ffff_ffffn;
      const type = 0x4 | (r.prefetchable ? 0x8 : 0);
      f(`bar${i}`, off, 4, type, Number(mask & 0xffff_fff0n));
      f(`bar${i}.upper`, off + 4, 4, 0, Number(mask >> 32n));
    } else {
      f(`bar${i}`, off, 4, r.prefetchable ? 0x8 : 0, ~(r.size - 1) & 0xfffffff0);
    }
  }
}
