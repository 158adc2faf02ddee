import { describe, expect, it } from 'vitest';
import { ConfigSpace } from '../../src/device-model/config-space.ts';
import { PciCapId, PciReg, buildConfigLayout } from '../../src/device-model/config-layout.ts';
import type { DeviceDeclaration } from '../../src/device-model/declaration.ts';
import { PciDevice, DeclarationError } from '../../src/device-model/device.ts';

function decl(over: Partial<DeviceDeclaration> = {}): DeviceDeclaration {
  return {
    name: 'cfg',
    pci: { vendorId: 0x1de5, deviceId: 0x6b75, classCode: 0x030200, revision: 1, subsystemId: 0x1234 },
    capabilities: { msix: { bar: 0, tableOffset: 0xff0000, pbaOffset: 0xff8000 } },
    regions: {
      0: { size: 16 << 20, kind: 'mem32', handler: { read: () => 0, write: () => {} } },
      1: { size: 256 << 20, kind: 'mem64', prefetchable: true },
      4: { size: 64, kind: 'io' },
    },
    irqs: { msix: 4, err: 1 },
    ...over,
  };
}

const space = (d = decl()): ConfigSpace => new ConfigSpace(buildConfigLayout(d));

describe('PCI config space', () => {
  it('identity registers, class 0x030200, header type 0, interrupt pin 0', () => {
    const c = space();
    expect(c.size).toBe(4096);
    expect(c.readValue(PciReg.VENDOR_ID, 2)).toBe(0x1de5);
    expect(c.readValue(PciReg.DEVICE_ID, 2)).toBe(0x6b75);
    expect(c.readValue(PciReg.REVISION, 4) >>> 8).toBe(0x030200);
    expect(c.readValue(PciReg.REVISION, 1)).toBe(1);
    expect(c.readValue(PciReg.HEADER_TYPE, 1)).toBe(0);
    expect(c.readValue(PciReg.SUBSYSTEM_VENDOR_ID, 2)).toBe(0x1de5);
    expect(c.readValue(PciReg.SUBSYSTEM_ID, 2)).toBe(0x1234);
    expect(c.readValue(PciReg.INTERRUPT_PIN, 1)).toBe(0);
    c.writeValue(PciReg.VENDOR_ID, 4, 0xffffffff); // RO: ignored, no error
    expect(c.readValue(PciReg.VENDOR_ID, 4)).toBe(0x6b751de5);
    c.writeValue(PciReg.INTERRUPT_PIN, 1, 1);
    expect(c.readValue(PciReg.INTERRUPT_PIN, 1)).toBe(0);
    c.writeValue(PciReg.INTERRUPT_LINE, 1, 11); // RW scratch for the OS
    expect(c.readValue(PciReg.INTERRUPT_LINE, 1)).toBe(11);
  });

  it('COMMAND: only meaningful bits are writable', () => {
    const c = space();
    c.writeValue(PciReg.COMMAND, 2, 0xffff);
    // IO (I/O BAR declared), MEM, MASTER, PARITY, SERR; no INTx disable (no INTx), no others.
    expect(c.readValue(PciReg.COMMAND, 2)).toBe(0x0147);
    c.writeValue(PciReg.COMMAND, 2, 0);
    expect(c.readValue(PciReg.COMMAND, 2)).toBe(0);
    const noIo = space(decl({ regions: { 0: { size: 4096 } } , capabilities: {} , irqs: { intx: 1 } }));
    noIo.writeValue(PciReg.COMMAND, 2, 0xffff);
    expect(noIo.readValue(PciReg.COMMAND, 2)).toBe(0x0546);
  });

  it('STATUS: CAP_LIST is read-only set, error bits are RW1C', () => {
    const c = space();
    expect(c.readValue(PciReg.STATUS, 2)).toBe(0x0010);
    c.setRaw(PciReg.STATUS, 2, 0x0010 | 0x2000 | 0x0100); // device records errors
    c.writeValue(PciReg.STATUS, 2, 0x0100); // clear one of them
    expect(c.readValue(PciReg.STATUS, 2)).toBe(0x2010);
    c.writeValue(PciReg.STATUS, 2, 0xffff); // clears all error bits, CAP_LIST stays
    expect(c.readValue(PciReg.STATUS, 2)).toBe(0x0010);
    // A 4-byte write to COMMAND|STATUS writing 0 to STATUS leaves its bits alone.
    c.setRaw(PciReg.STATUS, 2, 0x8010);
    c.writeValue(PciReg.COMMAND, 4, 0x00000006);
    expect(c.readValue(PciReg.COMMAND, 4)).toBe(0x80100006);
  });

  it('BAR sizing: 32-bit MMIO, 64-bit prefetchable pair, I/O, unused', () => {
    const c = space();
    const bar = (i: number): number => c.readValue(PciReg.BAR0 + 4 * i, 4);
    expect(bar(0)).toBe(0);
    expect(bar(1)).toBe(0xc); // 64-bit (bits 2:1 = 10b) prefetchable
    expect(bar(4)).toBe(0x1); // I/O
    for (let i = 0; i < 6; i++) c.writeValue(PciReg.BAR0 + 4 * i, 4, 0xffffffff);
    expect(bar(0)).toBe(0xff000000); // 16 MiB
    expect(bar(1)).toBe(0xf000000c); // 256 MiB, type bits kept
    expect(bar(2)).toBe(0xffffffff); // upper half of the 64-bit BAR
    expect(bar(3)).toBe(0); // unused
    expect(bar(4)).toBe(0xffffffc1); // 64 bytes of I/O
    expect(bar(5)).toBe(0);
    c.writeValue(PciReg.BAR0, 4, 0xfe000000);
    expect(bar(0)).toBe(0xfe000000);
    c.writeValue(PciReg.BAR0 + 4, 4, 0xe0000000);
    c.writeValue(PciReg.BAR0 + 8, 4, 0x1);
    expect(bar(1)).toBe(0xe000000c);
    expect(bar(2)).toBe(1);
    // A 64-bit BAR larger than 4 GiB masks the upper dword too.
    const big = space(decl({ regions: { 0: { size: 4096 }, 2: { size: 2 ** 34, kind: 'mem64', prefetchable: true } }, capabilities: {}, irqs: {} }));
    big.writeValue(PciReg.BAR0 + 8, 4, 0xffffffff);
    big.writeValue(PciReg.BAR0 + 12, 4, 0xffffffff);
    expect(big.readValue(PciReg.BAR0 + 8, 4)).toBe(0x0000000c);
    expect(big.readValue(PciReg.BAR0 + 12, 4)).toBe(0xfffffffc);
  });

  it('ROM BAR reads 0 even after the 0xFFFFF800 sizing write when there is no ROM', () => {
    const c = space();
    c.writeValue(PciReg.ROM_ADDRESS, 4, 0xfffff800);
    expect(c.readValue(PciReg.ROM_ADDRESS, 4)).toBe(0);
    c.writeValue(PciReg.ROM_ADDRESS, 4, 0xffffffff);
    expect(c.readValue(PciReg.ROM_ADDRESS, 4)).toBe(0);
    // With a 64 KiB ROM declared the sizing works (enable bit writable).
    const withRom = space(decl({ regions: { ...decl().regions, 6: { size: 65536, handler: { read: () => 0, write: () => {} } } } }));
    withRom.writeValue(PciReg.ROM_ADDRESS, 4, 0xfffff800);
    expect(withRom.readValue(PciReg.ROM_ADDRESS, 4)).toBe(0xffff0000);
  });

  it('capability chain: PM -> MSI-X -> PCIe, walked from 0x34', () => {
    const c = space();
    const chain = c.capabilityChain();
    expect(chain.map((x) => x.id)).toEqual([PciCapId.PM, PciCapId.MSIX, PciCapId.PCIE]);
    expect(chain[0]!.offset).toBe(0x40);
    for (const cap of chain) expect(cap.offset % 4).toBe(0);
    // Extended config space has no capabilities: header at 0x100 reads 0.
    expect(c.readValue(0x100, 4)).toBe(0);
  });

  it('PCIe capability: version 2, endpoint type; other types by declaration', () => {
    const c = space();
    const p = c.findCapability(PciCapId.PCIE);
    const flags = c.readValue(p + 2, 2);
    expect(flags & 0xf).toBe(2);
    expect((flags >> 4) & 0xf).toBe(0); // PCI Express Endpoint
    c.writeValue(p + 2, 2, 0xffff);
    expect(c.readValue(p + 2, 2)).toBe(flags);
    // DevSta error bits are RW1C, DevCtl is writable (not FLR).
    c.setRaw(p + 0x0a, 2, 0x5);
    c.writeValue(p + 0x0a, 2, 0x1);
    expect(c.readValue(p + 0x0a, 2)).toBe(0x4);
    c.writeValue(p + 8, 2, 0xffff);
    expect(c.readValue(p + 8, 2)).toBe(0x7fff);
    const rc = space(decl({ capabilities: { pcie: 'rc-integrated' } , irqs: {} }));
    expect((rc.readValue(rc.findCapability(PciCapId.PCIE) + 2, 2) >> 4) & 0xf).toBe(9);
    const conventional = space(decl({ capabilities: { pcie: false, pm: false }, irqs: {} }));
    expect(conventional.size).toBe(256);
    expect(conventional.capabilityChain()).toEqual([]);
    expect(conventional.readValue(PciReg.STATUS, 2) & 0x10).toBe(0);
  });

  it('MSI-X capability: table size N-1, BIR/offsets, only enable and function mask writable', () => {
    const c = space();
    const m = c.findCapability(PciCapId.MSIX);
    expect(c.readValue(m + 2, 2)).toBe(3);
    expect(c.readValue(m + 4, 4)).toBe(0xff0000);
    expect(c.readValue(m + 8, 4)).toBe(0xff8000);
    c.writeValue(m + 2, 2, 0xffff);
    expect(c.readValue(m + 2, 2)).toBe(0xc003);
    c.writeValue(m + 4, 4, 0);
    expect(c.readValue(m + 4, 4)).toBe(0xff0000);
  });

  it('PM capability: D0/D3hot writable, D1/D2 requests ignored, reset restores D0', () => {
    const dev = new PciDevice(decl());
    const c = dev.config;
    const pm = c.findCapability(PciCapId.PM);
    c.writeValue(pm + 4, 2, 3);
    expect(c.readValue(pm + 4, 2) & 3).toBe(3);
    c.writeValue(pm + 4, 2, 1);
    expect(c.readValue(pm + 4, 2) & 3).toBe(3);
    dev.reset('server');
    expect(c.readValue(pm + 4, 2) & 3).toBe(0);
  });

  it('a writable-mask table drives everything: state round-trips through a plain object', () => {
    const c = space();
    c.writeValue(PciReg.COMMAND, 2, 6);
    const s = c.state();
    expect(JSON.parse(JSON.stringify(s))).toEqual(s);
    const d = space();
    d.restore(s);
    expect(d.readValue(PciReg.COMMAND, 2)).toBe(6);
    c.reset();
    expect(c.readValue(PciReg.COMMAND, 2)).toBe(0);
  });
});

describe('device declaration validation', () => {
  it.each<[string, Partial<DeviceDeclaration>]>([
    ['non power-of-two BAR', { regions: { 0: { size: 3000 } }, capabilities: {}, irqs: {} }],
    ['64-bit BAR whose upper index is used', { regions: { 0: { size: 4096, kind: 'mem64' }, 1: { size: 4096 } }, capabilities: {}, irqs: {} }],
    ['64-bit BAR5', { regions: { 5: { size: 4096, kind: 'mem64' } }, capabilities: {}, irqs: {} }],
    ['config region declared', { regions: { 7: { size: 256 } }, capabilities: {}, irqs: {} }],
    ['MSI-X table outside its BAR', { capabilities: { msix: { bar: 0, tableOffset: 0xfffff0, pbaOffset: 0xff8000 } } }],
    ['MSI-X table and PBA overlapping', { capabilities: { msix: { bar: 0, tableOffset: 0x1000, pbaOffset: 0x1010 } } }],
    ['MSI-X vectors without the capability', { capabilities: {} }],
    ['MSI vectors', { irqs: { msi: 1 as 0 } }],
    ['unaligned sparse area', { regions: { 0: { size: 16 << 20 }, 1: { size: 65536, backing: { fd: 0, areas: [{ offset: 100, size: 4096 }] } } } }],
  ])('rejects %s', (_n, over) => {
    expect(() => new PciDevice(decl(over))).toThrow(DeclarationError);
  });
});
