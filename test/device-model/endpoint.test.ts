import { afterEach, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { PciCapId, PciReg } from '../../src/device-model/config-layout.ts';
import { VfioUserClient, type Reply } from '../../src/device-model/client.ts';
import { PciDevice } from '../../src/device-model/device.ts';
import {
  Command,
  DmaUnmapFlag,
  Errno,
  MsgFlag,
  RegionInfoFlag,
  encodeDmaMap,
  encodeDmaUnmap,
  encodeMessage,
  encodeRegionAccess,
  encodeVersion,
  encodeWriteMulti,
  setU64,
} from '../../src/device-model/protocol.ts';
import {
  BAR1_SIZE,
  MSIX_TABLE,
  connectPair,
  countFds,
  makeTestDevice,
  memfdWith,
  negotiatedPair,
  readU32,
  u32,
  uniqueName,
  type Pair,
  type TestDevice,
} from './helpers.ts';

let open: Pair[] = [];
afterEach(async () => {
  for (const p of open) {
    p.client.close();
    await p.closed;
  }
  open = [];
});

async function setup(): Promise<{ t: TestDevice; p: Pair; c: VfioUserClient }> {
  const t = makeTestDevice();
  const p = await negotiatedPair(t.device);
  open.push(p);
  return { t, p, c: p.client };
}

/** Send a hand-built message; resolves with its reply. */
function raw(c: VfioUserClient, command: number, payload?: Uint8Array, opts: { flags?: number; fds?: number[] } = {}): Promise<Reply> {
  const msgId = c.allocId();
  const p = c.expectReply(msgId);
  c.sendRaw(encodeMessage({ msgId, command, flags: opts.flags ?? 0 }, payload), opts.fds);
  return p;
}

async function expectErrno(reply: Promise<Reply>, errno: number): Promise<void> {
  const r = await reply;
  expect(r.flags & MsgFlag.ERROR, `expected errno ${errno}, got a success reply`).toBe(MsgFlag.ERROR);
  expect(r.error).toBe(errno);
  expect(r.payload.length).toBe(0); // header-only error reply
  expect(r.flags & MsgFlag.TYPE_MASK).toBe(MsgFlag.TYPE_REPLY);
}

const access = (region: number, offset: number, count: number, data: Uint8Array = new Uint8Array(0)): Uint8Array =>
  encodeRegionAccess({ offset, region, count, data });

/** A tick for anything in flight to arrive. */
const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 20));

describe('vfio-user endpoint: commands', () => {
  it('VERSION: 0.0, compact JSON, NUL-terminated, not larger than the request', async () => {
    const t = makeTestDevice();
    const p = connectPair(t.device);
    open.push(p);
    const v = await p.client.version();
    expect([v.major, v.minor]).toEqual([0, 0]);
    expect(JSON.parse(v.json)).toEqual({
      capabilities: { max_msg_fds: 16, max_data_xfer_size: 1048576, pgsizes: 4096, max_dma_maps: 4096 },
    });
    expect(v.raw.length).toBeLessThan(encodeVersion({ major: 0, minor: 0, json: '' }).length + 200);
    expect(p.endpoint.client?.maxMsgFds).toBe(16);
    // A client with a tiny request gets a reply trimmed to fit.
    const q = connectPair(makeTestDevice().device);
    open.push(q);
    const small = await q.client.version('{"capabilities":{"max_msg_fds":1,"x":"yyyyyyyyyyyyy"}}');
    expect(small.raw.length).toBeLessThanOrEqual(4 + 54);
    expect(JSON.parse(small.json).capabilities.max_msg_fds).toBe(16);
  });

  it('DEVICE_GET_INFO: PCI|RESET, 9 regions, 5 irqs', async () => {
    const { c } = await setup();
    expect(await c.getInfo()).toEqual({ argsz: 16, flags: 3, numRegions: 9, numIrqs: 5 });
  });

  it('GET_REGION_INFO: argsz negotiation, sparse-mmap cap at 32, region fd, mmap sees the memfd', async () => {
    const { t, c } = await setup();
    const first = await c.getRegionInfo(1, 32, false);
    expect(first).toMatchObject({ argsz: 64, index: 1, capOffset: 0, size: BAR1_SIZE, fd: -1 });
    expect(first.flags & RegionInfoFlag.CAPS).toBe(0);
    expect(first.flags & RegionInfoFlag.MMAP).toBe(RegionInfoFlag.MMAP);
    const full = await c.getRegionInfo(1, 64, false);
    expect(full).toMatchObject({ argsz: 64, capOffset: 32, offset: 0, sparse: [{ offset: 0, size: BAR1_SIZE / 2 }] });
    expect(full.flags).toBe(RegionInfoFlag.READ | RegionInfoFlag.WRITE | RegionInfoFlag.MMAP | RegionInfoFlag.CAPS);
    expect(full.fd).toBeGreaterThanOrEqual(0);
    const mem = new Uint8Array(c.mmapRegion(full));
    mem.set([0xca, 0xfe, 0xf0, 0x0d], 0x100);
    // The device sees it through its memfd, and a trapped read of that spot returns it too.
    const b = new Uint8Array(4);
    native.pread(t.vramFd, b, 0x100);
    expect(Array.from(b)).toEqual([0xca, 0xfe, 0xf0, 0x0d]);
    expect(readU32(await c.regionRead(1, 0x100, 4))).toBe(0x0df0feca);
    native.munmap(mem.buffer as ArrayBuffer);
    native.close(full.fd);
    // A bigger argsz than needed gets exactly the needed size back.
    const big = await c.getRegionInfo(1, 200, false);
    expect(big.argsz).toBe(64);
    native.close(big.fd);
  });

  it('GET_REGION_INFO: config 4 KiB RW, trapped BAR0 without MMAP, unused regions empty', async () => {
    const { c } = await setup();
    expect(await c.getRegionInfo(7)).toMatchObject({ size: 4096, flags: RegionInfoFlag.READ | RegionInfoFlag.WRITE, fd: -1 });
    expect(await c.getRegionInfo(0)).toMatchObject({ size: 0x10000, flags: RegionInfoFlag.READ | RegionInfoFlag.WRITE, fd: -1 });
    for (const i of [2, 4, 5, 6, 8]) expect(await c.getRegionInfo(i)).toMatchObject({ size: 0, flags: 0, fd: -1 });
  });

  it('GET_IRQ_INFO: counts per index, EVENTFD only', async () => {
    const { c } = await setup();
    const counts = [];
    for (let i = 0; i < 5; i++) {
      const info = await c.getIrqInfo(i);
      expect(info.flags).toBe(1);
      expect(info.index).toBe(i);
      counts.push(info.count);
    }
    expect(counts).toEqual([0, 0, 4, 1, 0]);
  });

  it('REGION_READ/WRITE of 1/2/4/8 bytes reach the BAR0 handler with the right values', async () => {
    const { t, c } = await setup();
    await c.regionWrite(0, 0x10, Uint8Array.of(0xab));
    await c.regionWrite(0, 0x12, Uint8Array.of(0x34, 0x12));
    await c.regionWrite(0, 0x14, u32(0xdeadbeef));
    await c.regionWrite(0, 0x18, Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 0x88));
    expect(t.accesses.slice(-4)).toEqual([
      ['w', 0x10, 1, 0xab],
      ['w', 0x12, 2, 0x1234],
      ['w', 0x14, 4, 0xdeadbeef],
      ['w', 0x18, 8, 0x8807060504030201n],
    ]);
    expect(Array.from(await c.regionRead(0, 0x10, 1))).toEqual([0xab]);
    expect(Array.from(await c.regionRead(0, 0x12, 2))).toEqual([0x34, 0x12]);
    expect(await c.read32(0, 0x14)).toBe(0xdeadbeef);
    expect(Array.from(await c.regionRead(0, 0x18, 8))).toEqual([1, 2, 3, 4, 5, 6, 7, 0x88]);
    // count 0 is accepted and answered with no data.
    expect((await c.regionRead(0, 0x10, 0)).length).toBe(0);
  });

  it('config space: 256- and 4096-byte snapshots, COMMAND write through the socket', async () => {
    const { c } = await setup();
    const s256 = await c.regionRead(7, 0, 256);
    const s4k = await c.regionRead(7, 0, 4096);
    expect(s256.length).toBe(256);
    expect(s4k.subarray(0, 256)).toEqual(s256);
    expect(readU32(s256, 0)).toBe(0x7e571de5);
    expect(readU32(s256, 8) >>> 8).toBe(0x030200);
    await c.regionWrite(7, PciReg.COMMAND, Uint8Array.of(0x06, 0x00));
    expect(Array.from(await c.regionRead(7, PciReg.COMMAND, 2))).toEqual([6, 0]);
    // ROM sizing as QEMU does it: read, write 0xFFFFF800, read (0), restore.
    await c.regionWrite(7, PciReg.ROM_ADDRESS, u32(0xfffff800));
    expect(readU32(await c.regionRead(7, PciReg.ROM_ADDRESS, 4))).toBe(0);
    // BAR sizing writes are accepted and read back the masks.
    await c.regionWrite(7, PciReg.BAR0 + 4, u32(0xffffffff));
    expect(readU32(await c.regionRead(7, PciReg.BAR0 + 4, 4))).toBe(0xffff000c);
    // Odd sizes and offsets are fine in config space.
    expect((await c.regionRead(7, 0x3d, 3)).length).toBe(3);
  });

  it('BAR1 trapped access outside the sparse area uses the memfd; BAR3 (unbacked) reads 0', async () => {
    const { t, c } = await setup();
    await c.regionWrite(1, 0xc000, u32(0x11223344));
    const b = new Uint8Array(4);
    native.pread(t.vramFd, b, 0xc000);
    expect(readU32(b)).toBe(0x11223344);
    expect(await c.read32(1, 0xc000)).toBe(0x11223344);
    await c.regionWrite(3, 0, u32(5));
    expect(await c.read32(3, 0)).toBe(0);
  });

  it('an expansion ROM (region 6) served by a block handler: whole-ROM read, ROM BAR sizing', async () => {
    const rom = Uint8Array.from({ length: 65536 }, (_, i) => (i * 7) & 0xff);
    rom[0] = 0x55;
    rom[1] = 0xaa;
    const t = makeTestDevice();
    t.decl.regions[6] = {
      size: rom.length,
      handler: {
        read: (o, s) => (s === 1 ? rom[o]! : new DataView(rom.buffer).getUint32(o, true)),
        write: () => {},
        readBlock: (o, dst) => dst.set(rom.subarray(o, o + dst.length)),
      },
    };
    const dev = new PciDevice(t.decl);
    const p = await negotiatedPair(dev);
    open.push(p);
    expect(await p.client.getRegionInfo(6)).toMatchObject({ size: 65536, flags: RegionInfoFlag.READ });
    expect(await p.client.regionRead(6, 0, rom.length)).toEqual(rom);
    await p.client.regionWrite(7, PciReg.ROM_ADDRESS, u32(0xfffff800));
    expect(readU32(await p.client.regionRead(7, PciReg.ROM_ADDRESS, 4))).toBe(0xffff0000);
    await expectErrno(raw(p.client, Command.REGION_WRITE, access(6, 0, 4, u32(1))), Errno.EINVAL); // read-only
    // BAR0's handler has no block methods: a 16-byte access is refused.
    await expectErrno(raw(p.client, Command.REGION_READ, access(0, 0, 16)), Errno.EINVAL);
  });

  it('MSI-X table accesses on BAR0 are stored; vector control starts masked', async () => {
    const { t, c } = await setup();
    expect(await c.read32(0, MSIX_TABLE + 12)).toBe(1);
    await c.write32(0, MSIX_TABLE + 16, 0xfee00000);
    expect(await c.read32(0, MSIX_TABLE + 16)).toBe(0xfee00000);
    expect(t.accesses.length).toBe(0); // never reached the device handler
  });

  it('DEVICE_RESET: reset callback, config back to reset values, reply header-only', async () => {
    const { t, c } = await setup();
    await c.regionWrite(7, PciReg.COMMAND, Uint8Array.of(0x06, 0x00));
    const r = await raw(c, Command.DEVICE_RESET);
    expect(r.flags).toBe(MsgFlag.TYPE_REPLY);
    expect(r.payload.length).toBe(0);
    expect(t.resets).toEqual(['client']);
    expect(t.device.config.readValue(PciReg.COMMAND, 2)).toBe(0);
  });

  it('DMA_MAP with and without fd, DMA_UNMAP echoes the 24-byte payload, UNMAP_ALL', async () => {
    const { t, c } = await setup();
    const name = uniqueName('guest');
    const fd = memfdWith(name, 1 << 20);
    await c.dmaMap({ addr: 0, size: 1 << 20, fd });
    native.close(fd); // the server holds its own reference
    await c.dmaMap({ addr: 0xfffc0000, size: 0x40000, flags: 1 });
    expect(t.maps.map((m) => [m.addr, m.hasFd, m.writable])).toEqual([
      [0, true, true],
      [0xfffc0000, false, false],
    ]);
    expect(countFds(name)).toBe(1);
    const echo = await c.dmaUnmap({ addr: 0xfffc0000, size: 0x40000 });
    expect(echo).toEqual(encodeDmaUnmap({ argsz: 24, flags: 0, addr: 0xfffc0000, size: 0x40000 }));
    const all = await c.dmaUnmap({ addr: 0, size: 0, flags: DmaUnmapFlag.ALL });
    expect(all.length).toBe(24);
    expect(t.maps).toEqual([]);
    expect(countFds(name)).toBe(0);
  });

  it('messages are handled in arrival order, several per read', async () => {
    const { t, c } = await setup();
    const ids: number[] = [];
    const parts: Uint8Array[] = [];
    const replies: Promise<Reply>[] = [];
    for (let i = 0; i < 50; i++) {
      const id = c.allocId();
      ids.push(id);
      replies.push(c.expectReply(id));
      parts.push(encodeMessage({ msgId: id, command: Command.REGION_WRITE }, access(0, 0x100, 4, u32(i))));
      const rid = c.allocId();
      ids.push(rid);
      replies.push(c.expectReply(rid));
      parts.push(encodeMessage({ msgId: rid, command: Command.REGION_READ }, access(0, 0x100, 4)));
    }
    const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let o = 0;
    for (const p of parts) {
      all.set(p, o);
      o += p.length;
    }
    c.sendRaw(all);
    const got = await Promise.all(replies);
    for (let i = 0; i < 50; i++) expect(readU32(got[2 * i + 1]!.payload, 16)).toBe(i);
    expect(t.accesses.filter((a) => a[0] === 'w').length).toBe(50);
  });

  it('a message split byte by byte through the socket, fd on the first byte, is reassembled', async () => {
    const { t, c } = await setup();
    const name = uniqueName('split');
    const fd = memfdWith(name, 1 << 16);
    const id = c.allocId();
    const reply = c.expectReply(id);
    const msg = encodeMessage(
      { msgId: id, command: Command.DMA_MAP },
      encodeDmaMap({ argsz: 32, flags: 3, offset: 0, addr: 0x40000, size: 1 << 16 }),
    );
    for (let i = 0; i < msg.length; i++) {
      c.sendRaw(msg.subarray(i, i + 1), i === 0 ? [fd] : undefined);
      if (i % 7 === 0) await settle(); // let the server see the partial message
    }
    expect((await reply).flags).toBe(MsgFlag.TYPE_REPLY);
    expect(t.maps).toEqual([{ addr: 0x40000, size: 1 << 16, offset: 0, readable: true, writable: true, hasFd: true }]);
    native.close(fd);
    expect(countFds(name)).toBe(1);
  });

  it('NO_REPLY commands get no reply, not even an error', async () => {
    const { t, c } = await setup();
    await c.regionWrite(0, 0x40, u32(0x1234), { noReply: true });
    c.sendRaw(encodeMessage({ msgId: 999, command: Command.REGION_WRITE, flags: MsgFlag.NO_REPLY }, access(9, 0, 4, u32(1))));
    c.sendRaw(encodeMessage({ msgId: 998, command: 77, flags: MsgFlag.NO_REPLY }, new Uint8Array(4)));
    expect(await c.read32(0, 0x40)).toBe(0x1234); // processed, in order
    await settle();
    expect(c.unexpected).toEqual([]);
    expect(t.accesses.filter((a) => a[0] === 'w')).toEqual([['w', 0x40, 4, 0x1234]]);
  });

  it('REGION_WRITE_MULTI (NO_REPLY) applies every entry in order; a replied one answers wr_cnt', async () => {
    const { t, c } = await setup();
    const body = encodeWriteMulti([
      { offset: 0x200, region: 0, count: 4, data: u32(1) },
      { offset: 0x200, region: 0, count: 4, data: u32(2) },
      { offset: 0x204, region: 0, count: 2, data: Uint8Array.of(7, 0) },
      { offset: PciReg.COMMAND, region: 7, count: 2, data: Uint8Array.of(2, 0) },
    ]);
    await c.request(Command.REGION_WRITE_MULTI, body, { noReply: true });
    expect(await c.read32(0, 0x200)).toBe(2);
    expect(t.device.config.readValue(PciReg.COMMAND, 2)).toBe(2);
    expect(t.accesses.filter((a) => a[0] === 'w').map((a) => a[3])).toEqual([1, 2, 7]);
    const r = await c.request(Command.REGION_WRITE_MULTI, body);
    expect(r.flags).toBe(MsgFlag.TYPE_REPLY);
    expect(Array.from(r.payload)).toEqual([4, 0, 0, 0, 0, 0, 0, 0]);
    await settle();
    expect(c.unexpected).toEqual([]);
  });

  it('fds sent with commands that take none are closed; the command still succeeds', async () => {
    const { c } = await setup();
    const name = uniqueName('stray');
    const fd = memfdWith(name, 4096);
    const r = await raw(c, Command.REGION_WRITE, access(0, 0, 4, u32(1)), { fds: [fd] });
    expect(r.flags).toBe(MsgFlag.TYPE_REPLY);
    native.close(fd);
    expect(countFds(name)).toBe(0);
  });
});

describe('vfio-user endpoint: malformed input gets a header-only error reply', () => {
  it('a reply where a command is expected: EINVAL', async () => {
    const { c } = await setup();
    await expectErrno(raw(c, Command.DEVICE_GET_INFO, new Uint8Array(16), { flags: MsgFlag.TYPE_REPLY }), Errno.EINVAL);
  });

  it('a header-only command other than DEVICE_RESET: EINVAL', async () => {
    const { c } = await setup();
    await expectErrno(raw(c, Command.DEVICE_GET_INFO), Errno.EINVAL);
  });

  it('a command before VERSION: EINVAL, then VERSION still works', async () => {
    const p = connectPair(makeTestDevice().device);
    open.push(p);
    await expectErrno(raw(p.client, Command.DEVICE_GET_INFO, new Uint8Array(16)), Errno.EINVAL);
    await p.client.version();
  });

  it('VERSION twice: EINVAL', async () => {
    const { c } = await setup();
    await expectErrno(raw(c, Command.VERSION, encodeVersion({ major: 0, minor: 0, json: '{}' })), Errno.EINVAL);
  });

  it('VERSION with an fd: EINVAL and the fd is closed', async () => {
    const p = connectPair(makeTestDevice().device);
    open.push(p);
    const name = uniqueName('vfd');
    const fd = memfdWith(name, 4096);
    await expectErrno(raw(p.client, Command.VERSION, encodeVersion({ major: 0, minor: 0, json: '{}' }), { fds: [fd] }), Errno.EINVAL);
    native.close(fd);
    expect(countFds(name)).toBe(0);
  });

  it('VERSION with a bad major or corrupt JSON: EINVAL', async () => {
    const p = connectPair(makeTestDevice().device);
    open.push(p);
    await expectErrno(raw(p.client, Command.VERSION, encodeVersion({ major: 1, minor: 0, json: '{}' })), Errno.EINVAL);
    await expectErrno(raw(p.client, Command.VERSION, new TextEncoder().encode('\0\0\0\0{"a":1}')), Errno.EINVAL);
  });

  it.each([
    ['an unknown command', 99, Errno.ENOSYS],
    ['DIRTY_PAGES (obsolete)', Command.DIRTY_PAGES, Errno.ENOSYS],
    ['GET_REGION_IO_FDS', Command.DEVICE_GET_REGION_IO_FDS, Errno.ENOTSUP],
    ['DEVICE_FEATURE', Command.DEVICE_FEATURE, Errno.ENOTSUP],
    ['MIG_DATA_READ', Command.MIG_DATA_READ, Errno.ENOTSUP],
    ['DMA_READ from the client', Command.DMA_READ, Errno.EINVAL],
  ])('%s: errno %i', async (_n, cmd, errno) => {
    const { c } = await setup();
    await expectErrno(raw(c, cmd, new Uint8Array(16)), errno);
  });

  const dmaMap = (f: Partial<{ argsz: number; flags: number; offset: number; addr: number; size: number }>): Uint8Array =>
    encodeDmaMap({ argsz: 32, flags: 3, offset: 0, addr: 0x100000, size: 0x10000, ...f });

  it('DMA_MAP: short payload, small argsz, unknown flags: EINVAL (fd closed)', async () => {
    const { c, t } = await setup();
    const name = uniqueName('badmap');
    const fd = memfdWith(name, 0x10000);
    await expectErrno(raw(c, Command.DMA_MAP, dmaMap({}).subarray(0, 24), { fds: [fd] }), Errno.EINVAL);
    await expectErrno(raw(c, Command.DMA_MAP, dmaMap({ argsz: 16 }), { fds: [fd] }), Errno.EINVAL);
    await expectErrno(raw(c, Command.DMA_MAP, dmaMap({ flags: 0x7 }), { fds: [fd] }), Errno.EINVAL);
    native.close(fd);
    expect(countFds(name)).toBe(0);
    expect(t.maps).toEqual([]);
  });

  it('DMA_MAP: two fds: EINVAL, both closed', async () => {
    const { c } = await setup();
    const name = uniqueName('twofd');
    const a = memfdWith(name, 0x10000);
    const b = memfdWith(name, 0x10000);
    await expectErrno(raw(c, Command.DMA_MAP, dmaMap({}), { fds: [a, b] }), Errno.EINVAL);
    native.close(a);
    native.close(b);
    expect(countFds(name)).toBe(0);
  });

  it('DMA_MAP: overlap EINVAL, identical re-map accepted, too large ENOSPC, beyond the fd EINVAL', async () => {
    const { c } = await setup();
    await c.dmaMap({ addr: 0x100000, size: 0x10000 });
    await c.dmaMap({ addr: 0x100000, size: 0x10000 }); // no-op
    await expectErrno(raw(c, Command.DMA_MAP, dmaMap({ addr: 0x108000 })), Errno.EINVAL);
    await expectErrno(raw(c, Command.DMA_MAP, dmaMap({ addr: 0x200000, size: 2 ** 44 })), Errno.ENOSPC);
    const fd = memfdWith(uniqueName('short'), 4096);
    await expectErrno(raw(c, Command.DMA_MAP, dmaMap({ addr: 0x300000 }), { fds: [fd] }), Errno.EINVAL);
    native.close(fd);
  });

  it('DMA_UNMAP: short payload, bad argsz, UNMAP_ALL with a range, unknown flags: EINVAL; no match: ENOENT; dirty bitmap: ENOTSUP', async () => {
    const { c } = await setup();
    const u = (f: Partial<{ argsz: number; flags: number; addr: number; size: number }>): Uint8Array =>
      encodeDmaUnmap({ argsz: 24, flags: 0, addr: 0x100000, size: 0x10000, ...f });
    await expectErrno(raw(c, Command.DMA_UNMAP, u({}).subarray(0, 16)), Errno.EINVAL);
    await expectErrno(raw(c, Command.DMA_UNMAP, u({ argsz: 8 })), Errno.EINVAL);
    await expectErrno(raw(c, Command.DMA_UNMAP, u({ argsz: 0xffffffff })), Errno.EINVAL);
    await expectErrno(raw(c, Command.DMA_UNMAP, u({ flags: DmaUnmapFlag.ALL })), Errno.EINVAL);
    await expectErrno(raw(c, Command.DMA_UNMAP, u({ flags: 8 })), Errno.EINVAL);
    await expectErrno(raw(c, Command.DMA_UNMAP, u({})), Errno.ENOENT);
    await expectErrno(raw(c, Command.DMA_UNMAP, u({ flags: DmaUnmapFlag.GET_DIRTY_BITMAP, argsz: 40 })), Errno.ENOTSUP);
  });

  it('DEVICE_GET_INFO with argsz < 16: EINVAL', async () => {
    const { c } = await setup();
    const argsz8 = new Uint8Array(16);
    argsz8[0] = 8;
    await expectErrno(raw(c, Command.DEVICE_GET_INFO, argsz8), Errno.EINVAL);
    await expectErrno(raw(c, Command.DEVICE_GET_INFO, u32(16)), Errno.EINVAL); // payload shorter than the struct
  });

  it('GET_REGION_INFO: argsz < 32 or index ≥ 9: EINVAL', async () => {
    const { c } = await setup();
    const ri = (argsz: number, index: number): Uint8Array => {
      const b = new Uint8Array(32);
      const dv = new DataView(b.buffer);
      dv.setUint32(0, argsz, true);
      dv.setUint32(8, index, true);
      return b;
    };
    await expectErrno(raw(c, Command.DEVICE_GET_REGION_INFO, ri(16, 0)), Errno.EINVAL);
    await expectErrno(raw(c, Command.DEVICE_GET_REGION_INFO, ri(32, 9)), Errno.EINVAL);
    await expectErrno(raw(c, Command.DEVICE_GET_REGION_INFO, ri(32, 0).subarray(0, 20)), Errno.EINVAL);
  });

  it('GET_IRQ_INFO: argsz < 16 or index ≥ 5: EINVAL', async () => {
    const { c } = await setup();
    const ii = (argsz: number, index: number): Uint8Array => {
      const b = new Uint8Array(16);
      const dv = new DataView(b.buffer);
      dv.setUint32(0, argsz, true);
      dv.setUint32(8, index, true);
      return b;
    };
    await expectErrno(raw(c, Command.DEVICE_GET_IRQ_INFO, ii(8, 2)), Errno.EINVAL);
    await expectErrno(raw(c, Command.DEVICE_GET_IRQ_INFO, ii(16, 5)), Errno.EINVAL);
  });

  it('REGION_READ/WRITE: bad index, out of bounds, offset overflow, too large, count mismatch, odd BAR size: EINVAL', async () => {
    const { c } = await setup();
    await expectErrno(raw(c, Command.REGION_READ, access(9, 0, 4)), Errno.EINVAL);
    await expectErrno(raw(c, Command.REGION_READ, access(0, 0x10000 - 2, 4)), Errno.EINVAL);
    await expectErrno(raw(c, Command.REGION_READ, access(7, 4095, 2)), Errno.EINVAL);
    await expectErrno(raw(c, Command.REGION_READ, access(6, 0, 4)), Errno.EINVAL); // no ROM: size 0
    const overflow = access(0, 0, 4);
    setU64(new DataView(overflow.buffer), 0, 2 ** 64 - 2);
    new DataView(overflow.buffer).setUint32(4, 0xffffffff, true);
    await expectErrno(raw(c, Command.REGION_READ, overflow), Errno.EINVAL);
    await expectErrno(raw(c, Command.REGION_READ, access(7, 0, (1 << 20) + 1)), Errno.EINVAL);
    await expectErrno(raw(c, Command.REGION_READ, access(0, 0, 4).subarray(0, 12)), Errno.EINVAL);
    await expectErrno(raw(c, Command.REGION_WRITE, access(0, 0, 4, Uint8Array.of(1, 2))), Errno.EINVAL);
    await expectErrno(raw(c, Command.REGION_WRITE, access(0, 0, 2, u32(1))), Errno.EINVAL);
    await expectErrno(raw(c, Command.REGION_READ, access(0, 0, 3)), Errno.EINVAL); // trapped: 1/2/4/8 only
    await expectErrno(raw(c, Command.REGION_READ, access(0, 0, 16)), Errno.EINVAL);
    // MSI-X table access straddling its end.
    await expectErrno(raw(c, Command.REGION_READ, access(0, MSIX_TABLE + 4 * 16 - 4, 8)), Errno.EINVAL);
  });

  it('REGION_WRITE_MULTI: zero or > 200 entries, length mismatch, count > 8, bad region: EINVAL, nothing applied', async () => {
    const { t, c } = await setup();
    const one = { offset: 0x300, region: 0, count: 4, data: u32(5) };
    const bad = (e: Partial<typeof one>): Uint8Array => encodeWriteMulti([one, { ...one, ...e }]);
    await expectErrno(raw(c, Command.REGION_WRITE_MULTI, new Uint8Array(8)), Errno.EINVAL);
    const many = encodeWriteMulti(Array.from({ length: 201 }, () => one));
    await expectErrno(raw(c, Command.REGION_WRITE_MULTI, many), Errno.EINVAL);
    await expectErrno(raw(c, Command.REGION_WRITE_MULTI, bad({}).subarray(0, 40)), Errno.EINVAL);
    await expectErrno(raw(c, Command.REGION_WRITE_MULTI, bad({ count: 9 })), Errno.EINVAL);
    await expectErrno(raw(c, Command.REGION_WRITE_MULTI, bad({ region: 12 })), Errno.EINVAL);
    await expectErrno(raw(c, Command.REGION_WRITE_MULTI, bad({ offset: 0x10000 - 2 })), Errno.EINVAL);
    expect(t.accesses).toEqual([]);
  });

  it('handler results: negative numbers are two\'s complement, 8-byte reads accept numbers, garbage reads 0', async () => {
    const values: Record<number, unknown> = { 0x0: 0xdeadbeef | 0, 0x8: 2 ** 40 + 5, 0x10: -1, 0x18: 'x', 0x20: 0x1_0000_0001n };
    const t = makeTestDevice();
    t.decl.regions[0]!.handler!.read = (o) => values[o] as number;
    const p = await negotiatedPair(t.device);
    open.push(p);
    expect(await p.client.read32(0, 0x0)).toBe(0xdeadbeef);
    expect(new DataView((await p.client.regionRead(0, 0x8, 8)).slice().buffer).getBigUint64(0, true)).toBe(2n ** 40n + 5n);
    expect(Array.from(await p.client.regionRead(0, 0x10, 8))).toEqual(new Array(8).fill(0xff));
    expect(await p.client.read32(0, 0x18)).toBe(0);
    expect(await p.client.read32(0, 0x20)).toBe(1); // a bigint for a 4-byte read is truncated
  });

  it('a handler that throws: EIO, and the connection keeps working', async () => {
    const t = makeTestDevice();
    const h = t.decl.regions[0]!.handler!;
    const orig = h.read;
    h.read = (o, s) => {
      if (o === 0x666) throw new Error('boom');
      return orig(o, s);
    };
    const p = await negotiatedPair(t.device);
    open.push(p);
    await expectErrno(raw(p.client, Command.REGION_READ, access(0, 0x666, 2)), Errno.EIO);
    expect(await p.client.read32(0, 0)).toBe(0);
  });

  it('msg_size < 16 is a framing error: the connection is dropped, the device reset', async () => {
    const t = makeTestDevice();
    const p = await negotiatedPair(t.device);
    await p.client.dmaMap({ addr: 0, size: 4096 });
    const bad = encodeMessage({ msgId: 1, command: Command.REGION_READ }, access(0, 0, 4));
    new DataView(bad.buffer).setUint32(4, 8, true);
    p.client.sendRaw(bad);
    await p.closed;
    const reason = await p.client.closed;
    expect(reason.kind).toBe('eof');
    expect(t.events.slice(-2)).toEqual(['reset:disconnect', 'disconnected']);
    expect(t.device.dma.count).toBe(0);
  });

  it('an absurd msg_size is a framing error too', async () => {
    const t = makeTestDevice();
    const p = await negotiatedPair(t.device);
    const bad = encodeMessage({ msgId: 1, command: Command.REGION_WRITE }, access(0, 0, 4, u32(0)));
    new DataView(bad.buffer).setUint32(4, 0x40000000, true);
    p.client.sendRaw(bad);
    await p.closed;
    expect((await p.client.closed).kind).toBe('eof');
  });
});

describe('capability chain through the socket', () => {
  it('walks PM -> MSI-X -> PCIe from the config snapshot, PCIe type endpoint', async () => {
    const { c } = await setup();
    const cfg = await c.regionRead(7, 0, 256);
    const ids: number[] = [];
    for (let p = cfg[PciReg.CAPABILITY_LIST]!; p !== 0; p = cfg[p + 1]!) ids.push(cfg[p]!);
    expect(ids).toEqual([PciCapId.PM, PciCapId.MSIX, PciCapId.PCIE]);
  });
});
