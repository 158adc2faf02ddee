// The device model's checkpoint sections (docs/architecture.md "State"): per device its PCI
// config space, DMA map table and interrupt state, and per connected endpoint the negotiated
// protocol state. Plain JSON: bytes as base64, fds never inside — a DMA file is named
// `dma:<device>:<file id>` (the id is the table's, stable for the file's life) and an eventfd
// `irq:<device>:<index name>:<vector>`; restore receives the adopted fds by these names.
//
// Not state: guest memory itself (it lives in the DMA fds), lazily created mappings of region
// backing fds (rebuilt on first use), the reply buffer and log budgets of an endpoint, and the
// sockets (the fd keeper holds them; adopting a connection is its job).
import type { PciDevice } from './device.ts';
import type { Endpoint, EndpointStats } from './endpoint.ts';
import type { DmaMapRecord } from './dma.ts';
import type { VectorStats } from './irq.ts';
import type { ClientCapabilities } from './version.ts';
import type { DeviceDeclaration } from './declaration.ts';
import { Command, RegionIndex } from './protocol.ts';
import {
  adoptedFd, fromBase64, isNum, need, section, toBase64, type AdoptedFds,
} from '../state/plain.ts';
import { Durability } from '../state/persist.ts';

export const DEVICE_STATE_VERSION = 1;
export const ENDPOINT_STATE_VERSION = 1;

/** IRQ index names in fd keys (vfio-user's INTX, MSI, MSIX, ERR, REQ). */
export const IRQ_INDEX_NAMES = ['intx', 'msi', 'msix', 'err', 'req'] as const;

export function dmaFdName(device: string, fileId: number): string {
  return `dma:${device}:${fileId}`;
}

export function irqFdName(device: string, index: number, vector: number): string {
  return `irq:${device}:${IRQ_INDEX_NAMES[index] ?? index}:${vector}`;
}

export interface DeviceState {
  version: number;
  name: string;
  /** Config space bytes (base64). */
  config: string;
  dma: {
    maps: DmaMapRecord[];
    nextFileId: number;
    limits: { maxMaps: number; maxBytes: number; maxFiles: number; requireSealed: boolean };
  };
  irq: {
    /** Per IRQ index, the vectors that hold an eventfd. */
    eventfds: number[][];
    masked: number[][];
    pba: string;
    msixTable: string;
    msixEnabled: boolean;
    msixFunctionMasked: boolean;
    stats: VectorStats[];
  };
}

export function saveDevice(dev: PciDevice): DeviceState {
  const irq = dev.irq.record();
  return {
    version: DEVICE_STATE_VERSION,
    name: dev.name,
    config: toBase64(dev.config.bytes),
    dma: dev.dma.record(),
    irq: {
      eventfds: irq.eventfds.map((row) => row.flatMap((has, v) => (has ? [v] : []))),
      masked: irq.masked,
      pba: toBase64(irq.pba),
      msixTable: toBase64(irq.msixTable),
      msixEnabled: irq.msixEnabled,
      msixFunctionMasked: irq.msixFunctionMasked,
      stats: irq.stats,
    },
  };
}

/** The fd names restoreDevice needs. */
export function deviceFdNames(raw: unknown): string[] {
  const s = section<DeviceState>('device', raw, DEVICE_STATE_VERSION);
  const names = new Set<string>();
  for (const m of s.dma.maps) if (m.file !== 0) names.add(dmaFdName(s.name, m.file));
  s.irq.eventfds.forEach((vs, index) => vs.forEach((v) => names.add(irqFdName(s.name, index, v))));
  return [...names];
}

/** Who holds a device's fds outside the process (a restartable server's fd holder). */
export interface DeviceFdWatcher {
  /** The device took the file or eventfd `fd`, named `key` (dmaFdName, irqFdName). */
  put(key: string, fd: number): void;
  /** The guest dropped the fd named `key` (a DMA unmap, an eventfd replaced or removed). */
  drop(key: string): void;
}

/** Tell `w` of every DMA file and IRQ eventfd the device takes and drops, by its stable name. */
export function watchDeviceFds(dev: PciDevice, w: DeviceFdWatcher): void {
  const name = dev.name;
  dev.dma.fileHook = (ev, id, fd) => {
    if (ev === 'open') w.put(dmaFdName(name, id), fd);
    else w.drop(dmaFdName(name, id));
  };
  dev.irq.fdHook = (index, vector, fd) => {
    if (fd >= 0) w.put(irqFdName(name, index, vector), fd);
    else w.drop(irqFdName(name, index, vector));
  };
}

/**
 * Load a device's state into a freshly declared device of the same name and shape (no client
 * yet): config space, the DMA table (maps mmapped again from the adopted fds, which the table
 * then owns) and the interrupt state (adopted eventfds). Nothing is signalled.
 */
export function restoreDevice(dev: PciDevice, raw: unknown, fds: AdoptedFds): void {
  const s = checkDevice(dev, raw);
  const config = new Uint8Array(dev.config.size);
  fromBase64(s.config, config, `device ${dev.name} config`);
  const irq = s.irq;
  need(irq && Array.isArray(irq.eventfds) && Array.isArray(irq.masked) && Array.isArray(irq.stats), `device ${dev.name}: irq`);
  const counts = dev.irq.counts;
  need(irq.eventfds.length === counts.length && irq.eventfds.every((vs, i) => Array.isArray(vs) && vs.every((v) => Number.isInteger(v) && v >= 0 && v < counts[i]!)),
    `device ${dev.name}: eventfd vectors out of range`);
  const pba = new Uint8Array(dev.irq.pba.length);
  const table = new Uint8Array(dev.irq.msixTable.length);
  fromBase64(irq.pba, pba, `device ${dev.name} PBA`);
  fromBase64(irq.msixTable, table, `device ${dev.name} MSI-X table`);
  // Every fd is looked up before anything is loaded: a missing one changes nothing.
  for (const n of deviceFdNames(s)) adoptedFd(fds, n);

  const has = counts.map((n, i) => {
    const row = new Array<boolean>(n).fill(false);
    for (const v of irq.eventfds[i]!) row[v] = true;
    return row;
  });
  dev.irq.load(
    { eventfds: has, masked: irq.masked, pba, msixTable: table, msixEnabled: irq.msixEnabled === true, msixFunctionMasked: irq.msixFunctionMasked === true, stats: irq.stats },
    (index, v) => adoptedFd(fds, irqFdName(dev.name, index, v)),
  );
  try {
    dev.dma.reload(s.dma, (id) => adoptedFd(fds, dmaFdName(dev.name, id)));
  } catch (err) {
    throw new Error(`device ${dev.name}: ${(err as Error).message}`);
  }
  dev.config.bytes.set(config);
}

/**
 * Map a device's DMA files ahead of its restore, from an earlier state of the same device (an
 * upgrade's successor, while its predecessor still serves): restoreDevice() then keeps every map
 * whose record did not change. Returns the fd names the DMA table owns from now on.
 */
export function preloadDeviceDma(dev: PciDevice, raw: unknown, fds: AdoptedFds): string[] {
  const s = checkDevice(dev, raw);
  dev.dma.reload(s.dma, (id) => adoptedFd(fds, dmaFdName(dev.name, id)));
  return [...new Set(s.dma.maps.filter((m) => m.file !== 0).map((m) => m.file))].map((id) => dmaFdName(dev.name, id));
}

/** A device state for `dev`: its section, name and DMA records checked. */
function checkDevice(dev: PciDevice, raw: unknown): DeviceState {
  const s = section<DeviceState>('device', raw, DEVICE_STATE_VERSION);
  need(s.name === dev.name, `device state is for ${String(s.name)}, not ${dev.name}`);
  need(s.dma && Array.isArray(s.dma.maps) && isNum(s.dma.nextFileId), `device ${dev.name}: dma`);
  for (const m of s.dma.maps) {
    need(m && isNum(m.addr) && isNum(m.size) && isNum(m.offset) && isNum(m.file) &&
      typeof m.readable === 'boolean' && typeof m.writable === 'boolean', `device ${dev.name}: a DMA map record is malformed`);
  }
  return s;
}

export interface EndpointState {
  version: number;
  /** Capabilities the client negotiated (VERSION); null before negotiation. */
  client: ClientCapabilities | null;
  stats: EndpointStats;
}

export function saveEndpoint(ep: Endpoint): EndpointState {
  return { version: ENDPOINT_STATE_VERSION, client: ep.client ? { ...ep.client } : null, stats: { ...ep.stats } };
}

/** Load into an endpoint created over the adopted connection, before it handles a message: the
 * client does not negotiate again (QEMU never repeats VERSION). */
export function restoreEndpoint(ep: Endpoint, raw: unknown): void {
  const s = section<EndpointState>('endpoint', raw, ENDPOINT_STATE_VERSION);
  const c = s.client;
  need(c === null || (c && isNum(c.maxMsgFds) && isNum(c.maxDataXferSize) && isNum(c.pgsizes) && typeof c.writeMultiple === 'boolean'),
    'endpoint state: client capabilities');
  ep.client = c === null ? null : { maxMsgFds: c.maxMsgFds, maxDataXferSize: c.maxDataXferSize, pgsizes: c.pgsizes, writeMultiple: c.writeMultiple };
  if (s.stats) Object.assign(ep.stats, s.stats);
}

/**
 * What a handled request needs from a restartable server's checkpoint (docs/architecture.md
 * has the table). The protocol's requests that change device state (DMA maps, eventfds, reset,
 * negotiation) and config space writes are needed before the reply; a region write asks the
 * region's own declaration (the device knows its registers), coalesced when it does not say;
 * a failed request changed at most a counter.
 */
export function requestDurability(decl: DeviceDeclaration, command: number, region: number, offset: number, errno: number): Durability {
  switch (command) {
    case Command.REGION_READ:
    case Command.DEVICE_GET_INFO:
    case Command.DEVICE_GET_REGION_INFO:
    case Command.DEVICE_GET_IRQ_INFO:
      return Durability.none;
    case Command.REGION_WRITE:
      if (errno !== 0) return Durability.later;
      if (region === RegionIndex.CONFIG) return Durability.now;
      return decl.regions[region]?.durability?.(offset) ?? Durability.later;
    case Command.VERSION:
    case Command.DMA_MAP:
    case Command.DMA_UNMAP:
    case Command.DEVICE_SET_IRQS:
    case Command.DEVICE_RESET:
    case Command.REGION_WRITE_MULTI:
      return errno === 0 ? Durability.now : Durability.later;
    default:
      return Durability.none;
  }
}
