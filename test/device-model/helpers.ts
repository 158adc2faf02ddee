// Shared fixtures for the device-model tests: a declared test device (register-file BAR0 with
// MSI-X, memfd-backed 64-bit BAR1 with a sparse-mmap half), a socketpair connecting an Endpoint
// to the TypeScript client, and fd accounting through /proc/self/fd.

import { readdirSync, readlinkSync } from 'node:fs';
import path from 'node:path';
import { native } from '../../src/native.ts';
import {
  DEFAULT_SERVER_CAPS,
  Endpoint,
  PciDevice,
  SocketTransport,
  type Listener,
  type Server,
  VfioUserClient,
  maxMessageSize,
  type DeviceDeclaration,
  type DmaMappingInfo,
  type ResetReason,
} from '../../src/device-model/index.ts';

export const BAR0_SIZE = 0x10000;
export const BAR1_SIZE = 0x10000;
export const MSIX_TABLE = 0x8000;
export const MSIX_PBA = 0x9000;
export const MSIX_VECTORS = 4;

export interface TestDevice {
  decl: DeviceDeclaration;
  device: PciDevice;
  /** BAR0 register file (what the handler stores). */
  regs: DataView;
  vramFd: number;
  events: string[];
  maps: DmaMappingInfo[];
  resets: ResetReason[];
  /** Accesses seen by the BAR0 handler: [kind, offset, size, value]. */
  accesses: [string, number, number, number | bigint][];
}

let memfdSeq = 0;
export function uniqueName(prefix: string): string {
  return `${prefix}-${process.pid}-${++memfdSeq}`;
}

export function makeTestDevice(overrides: Partial<DeviceDeclaration> = {}): TestDevice {
  const regs = new DataView(new ArrayBuffer(BAR0_SIZE));
  const vramFd = native.memfdCreate(uniqueName('vram'), BAR1_SIZE);
  const t: Partial<TestDevice> = { regs, vramFd, events: [], maps: [], resets: [], accesses: [] };
  const decl: DeviceDeclaration = {
    name: 'testdev',
    pci: { vendorId: 0x1de5, deviceId: 0x7e57, subsystemId: 0x0042, classCode: 0x030200, revision: 3 },
    capabilities: { msix: { bar: 0, tableOffset: MSIX_TABLE, pbaOffset: MSIX_PBA } },
    regions: {
      0: {
        size: BAR0_SIZE,
        kind: 'mem32',
        handler: {
          read(offset, size) {
            t.accesses!.push(['r', offset, size, 0]);
            if (size === 1) return regs.getUint8(offset);
            if (size === 2) return regs.getUint16(offset, true);
            if (size === 4) return regs.getUint32(offset, true);
            return regs.getBigUint64(offset, true);
          },
          write(offset, size, value) {
            t.accesses!.push(['w', offset, size, value]);
            if (size === 8) regs.setBigUint64(offset, value as bigint, true);
            else if (size === 4) regs.setUint32(offset, value as number, true);
            else if (size === 2) regs.setUint16(offset, value as number, true);
            else regs.setUint8(offset, value as number);
          },
        },
      },
      1: {
        size: BAR1_SIZE,
        kind: 'mem64',
        prefetchable: true,
        backing: { fd: vramFd, offset: 0, areas: [{ offset: 0, size: BAR1_SIZE / 2 }] },
      },
      3: { size: 16, kind: 'mem32' },
    },
    irqs: { msix: MSIX_VECTORS, err: 1 },
    callbacks: {
      dmaMapped: (m) => {
        t.events!.push('mapped');
        t.maps!.push(m);
      },
      dmaUnmapped: (m) => {
        t.events!.push('unmapped');
        t.maps!.splice(t.maps!.findIndex((x) => x.addr === m.addr), 1);
      },
      reset: (r) => {
        t.events!.push(`reset:${r}`);
        t.resets!.push(r);
      },
      connected: () => t.events!.push('connected'),
      disconnected: () => t.events!.push('disconnected'),
    },
    ...overrides,
  };
  t.decl = decl;
  t.device = new PciDevice(decl);
  return t as TestDevice;
}

/** Two test devices, each served by `server` on its own socket `dir/<name>.sock`: a VM (a, on
 * listener la) and another VM beside it (b). */
export function twoVms(server: Server, dir: string, names: [string, string]): { a: TestDevice; b: TestDevice; sa: string; sb: string; la: Listener } {
  const a = makeTestDevice();
  const b = makeTestDevice();
  const sa = path.join(dir, `${names[0]}.sock`);
  const sb = path.join(dir, `${names[1]}.sock`);
  const la = server.listen(sa, a.device);
  server.listen(sb, b.device);
  return { a, b, sa, sb, la };
}

export interface Pair {
  client: VfioUserClient;
  endpoint: Endpoint;
  closed: Promise<void>;
}

/** Endpoint on one end of a socketpair, client on the other. */
export function connectPair(device: PciDevice): Pair {
  const [a, b] = native.socketpair();
  native.setNonblock(a, true);
  const transport = new SocketTransport(a, { name: 'test-endpoint', maxMessageSize: maxMessageSize(DEFAULT_SERVER_CAPS) });
  let done!: () => void;
  const closed = new Promise<void>((r) => (done = r));
  // A unit-test harness: unsealed memfds (native.memfdCreate without seals) may back DMA maps
  // here; the Server requires sealed ones (see sealedMemfd).
  const endpoint = new Endpoint(device, transport, { onClose: () => done(), limits: { dmaRequireSealed: false } });
  endpoint.start();
  const client = VfioUserClient.fromFd(b, 'test-client');
  return { client, endpoint, closed };
}

/** Connected and negotiated. */
export async function negotiatedPair(device: PciDevice): Promise<Pair> {
  const p = connectPair(device);
  await p.client.version();
  return p;
}

/** How many of this process's fds point at the given link target (substring match). */
export function countFds(target: string): number {
  let n = 0;
  for (const e of readdirSync('/proc/self/fd')) {
    try {
      if (readlinkSync(`/proc/self/fd/${e}`).includes(target)) n++;
    } catch {
      // raced with a close
    }
  }
  return n;
}

/** Let the event loop run until `cond` holds (bounded). */
export async function until(cond: () => boolean, ms = 2000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 2));
  }
}

export function memfdWith(name: string, size: number): number {
  const fd = native.memfdCreate(name, size);
  if (fd < 0) throw new Error(`memfd_create failed: ${fd}`);
  return fd;
}

/** F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW: what QEMU's memory-backend-memfd applies. */
export const QEMU_SEALS = 7;

/** Guest RAM as QEMU makes it: a memfd sealed against resizing (the Server requires it). */
export function sealedMemfd(name: string, size: number): number {
  const fd = native.memfdCreate(name, size, QEMU_SEALS);
  if (fd < 0) throw new Error(`memfd_create failed: ${fd}`);
  return fd;
}

export function u32(v: number): Uint8Array {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, v >>> 0, true);
  return b;
}

export function readU32(b: Uint8Array, at = 0): number {
  return new DataView(b.buffer, b.byteOffset, b.length).getUint32(at, true);
}
