// The device model's checkpoint sections (src/device-model/persist.ts): a real endpoint driven
// over a socket by the vfio-user client builds the state (DMA maps of two memfds — two maps
// sharing one file, a read-only one — and an fd-less map; MSI-X and ERR eventfds; a masked
// vector with its PBA bit pending; MSI-X enabled in config space; an MSI-X table entry). The
// fds are mirrored into a stand-in keeper through the tables' hooks. Save → JSON → restore into
// a fresh device with the keeper's duplicates and a fresh endpoint on a new connection → save
// again (equal); then the restored device and one that never restarted answer the same
// requests and signal the same eventfds identically.
import { afterEach, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { PciDevice } from '../../src/device-model/device.ts';
import { Endpoint, maxMessageSize } from '../../src/device-model/endpoint.ts';
import { SocketTransport } from '../../src/device-model/transport.ts';
import { VfioUserClient } from '../../src/device-model/client.ts';
import { DEFAULT_SERVER_CAPS } from '../../src/device-model/version.ts';
import { PciCapId } from '../../src/device-model/config-layout.ts';
import { DmaMapFlag, IrqIndex, IrqSetFlag } from '../../src/device-model/protocol.ts';
import {
  DEVICE_STATE_VERSION, deviceFdNames, dmaFdName, irqFdName, restoreDevice, restoreEndpoint, saveDevice, saveEndpoint,
} from '../../src/device-model/persist.ts';
import { BAR1_SIZE, MSIX_PBA, MSIX_TABLE, connectPair, makeTestDevice, memfdWith, type Pair, type TestDevice } from '../device-model/helpers.ts';
import { FdBox } from './fds.ts';

const cleanup: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const json = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

interface World {
  t: TestDevice;
  p: Pair;
  box: FdBox;
  ram: { fd: number; u8: Uint8Array }[];
  events: number[];
  err: number;
}

/** A keeper's hooks on a device: every fd the tables take is mirrored under its stable name. */
function mirror(dev: PciDevice, box: FdBox): void {
  dev.dma.fileHook = (ev, id, fd) => (ev === 'open' ? box.put(dmaFdName(dev.name, id), fd) : box.drop(dmaFdName(dev.name, id)));
  dev.irq.fdHook = (index, v, fd) => (fd >= 0 ? box.put(irqFdName(dev.name, index, v), fd) : box.drop(irqFdName(dev.name, index, v)));
}

async function build(): Promise<World> {
  const t = makeTestDevice();
  const box = new FdBox();
  mirror(t.device, box);
  const p = connectPair(t.device);
  cleanup.push(async () => {
    p.client.close();
    await p.closed;
    box.close();
  });
  const c = p.client;
  await c.version();
  const ram = [0, 1].map((k) => {
    const fd = memfdWith('guest-ram', 0x10000);
    const u8 = new Uint8Array(native.mmap(fd, 0x10000, 0));
    for (let i = 0; i < u8.length; i++) u8[i] = (i * 13 + k * 101) & 0xff;
    return { fd, u8 };
  });
  cleanup.push(() => ram.forEach((r) => native.close(r.fd)));
  const rw = DmaMapFlag.READ | DmaMapFlag.WRITE;
  await c.dmaMap({ addr: 0x10000, size: 0x4000, offset: 0, flags: rw, fd: ram[0]!.fd });
  await c.dmaMap({ addr: 0x20000, size: 0x4000, offset: 0x8000, flags: rw, fd: ram[0]!.fd }); // same file
  await c.dmaMap({ addr: 0x40000, size: 0x2000, offset: 0x1000, flags: DmaMapFlag.READ, fd: ram[1]!.fd });
  await c.dmaMap({ addr: 0x80000, size: 0x1000, flags: rw }); // no fd
  const events = [0, 1, 2, 3].map(() => native.eventfd(0, true));
  const err = native.eventfd(0, true);
  cleanup.push(() => [...events, err].forEach((fd) => native.close(fd)));
  await c.setMsixEventfds(0, events);
  await c.setIrqs({ index: IrqIndex.ERR, flags: IrqSetFlag.DATA_EVENTFD | IrqSetFlag.ACTION_TRIGGER, start: 0, count: 1, fds: [err] });
  await c.setIrqs({ index: IrqIndex.MSIX, flags: IrqSetFlag.DATA_NONE | IrqSetFlag.ACTION_MASK, start: 2, count: 1 });
  const msix = t.device.config.findCapability(PciCapId.MSIX);
  await c.regionWrite(7, msix + 2, new Uint8Array([0, 0x80])); // MSI-X enable
  await c.regionWrite(7, 4, new Uint8Array([6, 0])); // memory space + bus master
  const entry = new Uint8Array(16);
  new DataView(entry.buffer).setUint32(0, 0xfee01000, true);
  new DataView(entry.buffer).setUint32(8, 0x4041, true);
  await c.regionWrite(0, MSIX_TABLE + 16, entry);
  t.device.irq.msix(2); // masked: latched in the PBA
  t.device.irq.msix(1); // delivered
  expect(native.eventfdRead(events[1]!)).toBe(1);
  return { t, p, box, ram, events, err };
}

/** A new connection to `dev` with an endpoint restored from `ep` (no VERSION again). */
function reconnect(dev: PciDevice, ep: unknown): { client: VfioUserClient; endpoint: Endpoint } {
  const [a, b] = native.socketpair();
  native.setNonblock(a, true);
  const transport = new SocketTransport(a, { name: 'restored', maxMessageSize: maxMessageSize(DEFAULT_SERVER_CAPS) });
  let done!: () => void;
  const closed = new Promise<void>((r) => (done = r));
  const endpoint = new Endpoint(dev, transport, { onClose: () => done(), limits: { dmaRequireSealed: false } });
  restoreEndpoint(endpoint, ep);
  endpoint.start();
  const client = VfioUserClient.fromFd(b, 'restored-client');
  cleanup.push(async () => {
    client.close();
    await closed;
  });
  return { client, endpoint };
}

/** The same requests to either device; everything a client and a guest could observe. */
async function act(dev: PciDevice, c: VfioUserClient, w: World) {
  const b64 = (u8: Uint8Array) => Buffer.from(u8).toString('base64');
  const out: Record<string, unknown> = {};
  out.config = b64(await c.regionRead(7, 0, 256));
  out.pbaBefore = b64(await c.regionRead(0, MSIX_PBA, 8));
  out.entry = b64(await c.regionRead(0, MSIX_TABLE + 16, 16));
  dev.irq.msix(1);
  dev.irq.msix(3);
  dev.irq.msix(2); // still masked: latched again
  out.counts1 = w.events.map((fd) => native.eventfdRead(fd));
  await c.setIrqs({ index: IrqIndex.MSIX, flags: IrqSetFlag.DATA_NONE | IrqSetFlag.ACTION_UNMASK, start: 2, count: 1 });
  out.counts2 = w.events.map((fd) => native.eventfdRead(fd));
  out.pbaAfter = b64(await c.regionRead(0, MSIX_PBA, 8));
  dev.irq.trigger(IrqIndex.ERR, 0);
  out.err = native.eventfdRead(w.err);
  const buf = new Uint8Array(0x5000);
  out.readGap = dev.dma.read(0x13000, buf)?.kind ?? null; // runs off the first map
  const got = new Uint8Array(64);
  out.read = [dev.dma.read(0x20010, got), b64(got)];
  dev.dma.write(0x10100, new Uint8Array([1, 2, 3, 4]));
  out.ram = b64(w.ram[0]!.u8.subarray(0x100, 0x104));
  out.ro = dev.dma.translate(0x40000, 16, true);
  out.noFd = dev.dma.translate(0x80000, 16, false);
  out.ext = (() => {
    const r = dev.dma.translate(0x40800, 0x100, false);
    return r.ok ? r.extents.map((e) => [e.offset, e.length]) : r.fault.kind;
  })();
  await c.dmaUnmap({ addr: 0x10000, size: 0x4000 });
  out.after = dev.dma.describe();
  out.files = dev.dma.fileCount;
  out.stats = dev.irq.stats;
  return out;
}

describe('device-model state', () => {
  it('round-trips through JSON with adopted fds and answers as before', async () => {
    const w1 = await build();
    const w2 = await build();
    const first = json({ dev: saveDevice(w1.t.device), ep: saveEndpoint(w1.p.endpoint) });
    expect(first.dev.version).toBe(DEVICE_STATE_VERSION);
    expect(first.dev.dma.maps.map((m) => m.file)).toEqual([1, 1, 2, 0]);
    expect(first.dev.irq.eventfds).toEqual([[], [], [0, 1, 2, 3], [0], []]);
    expect(first.dev.irq.msixEnabled).toBe(true);
    expect(first.ep.client?.maxMsgFds).toBeGreaterThan(0);
    expect(deviceFdNames(first.dev).sort()).toEqual([...w1.box.held.keys()].sort());
    // The old process dies. The keeper hands its duplicates to the successor; the old
    // connection goes (the keeper would have kept it: here the restored device gets a new one).
    const fds = w1.box.take();
    w1.p.client.close();
    await w1.p.closed;

    const dev = new PciDevice(w1.t.decl);
    cleanup.push(() => {
      dev.dma.unmapAll();
      dev.irq.closeAll();
    });
    restoreDevice(dev, first.dev, fds);
    const { client, endpoint } = reconnect(dev, first.ep);
    const second = json({ dev: saveDevice(dev), ep: saveEndpoint(endpoint) });
    expect(second).toEqual(first);

    const r1 = await act(dev, client, w1);
    const r2 = await act(w2.t.device, w2.p.client, w2);
    expect(r1).toEqual(r2);
    expect(r1.counts2).toEqual([-11, -11, 1, -11]); // the latched vector, delivered on unmask
    expect(r1.err).toBe(1);
  });

  it('refuses missing fds, wrong devices and newer versions, changing nothing', async () => {
    const w = await build();
    const s = json(saveDevice(w.t.device));
    const dev = new PciDevice(w.t.decl);
    const fds = w.box.take();
    cleanup.push(() => fds.forEach((fd) => native.close(fd)));
    const partial = new Map(fds);
    partial.delete(dmaFdName('testdev', 2));
    expect(() => restoreDevice(dev, s, partial)).toThrow(/no adopted fd named dma:testdev:2/);
    expect(() => restoreDevice(dev, { ...s, version: DEVICE_STATE_VERSION + 1 }, fds)).toThrow(/newer vugpu/);
    expect(() => restoreDevice(dev, { ...s, name: 'other' }, fds)).toThrow(/for other/);
    expect(() => restoreDevice(dev, { ...s, config: 'AAAA' }, fds)).toThrow(/config/);
    const wrong = new Map(fds);
    wrong.set(irqFdName('testdev', IrqIndex.MSIX, 0), fds.get(dmaFdName('testdev', 1))!);
    expect(() => restoreDevice(dev, s, wrong)).toThrow(/not an eventfd/);
    expect(dev.dma.count).toBe(0);
    expect(dev.irq.state().eventfds.flat().every((fd) => fd === -1)).toBe(true);
    expect(Buffer.from(dev.config.bytes)).not.toEqual(Buffer.from(w.t.device.config.bytes));
    void BAR1_SIZE;
  });
});
