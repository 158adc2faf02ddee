import { describe, expect, it } from 'vitest';
import {
  Command,
  HEADER_SIZE,
  MsgFlag,
  RegionCapId,
  RegionInfoFlag,
  commandName,
  decodeDeviceInfo,
  decodeDmaMap,
  decodeDmaUnmap,
  decodeHeader,
  decodeIrqInfo,
  decodeIrqSet,
  decodeRegionAccess,
  decodeRegionInfo,
  encodeDeviceInfo,
  encodeDmaMap,
  encodeDmaUnmap,
  encodeHeader,
  encodeIrqInfo,
  encodeIrqSet,
  encodeMessage,
  encodeRegionAccess,
  encodeVersion,
  encodeWriteMulti,
  getU64,
  isSafeU64,
  setU64,
} from '../../src/device-model/protocol.ts';
import { buildVersionReply, parseClientVersion, DEFAULT_SERVER_CAPS } from '../../src/device-model/version.ts';
import { QEMU_VERSION_JSON } from '../../src/device-model/client.ts';

const dvOf = (b: Uint8Array): DataView => new DataView(b.buffer, b.byteOffset, b.length);

describe('codec round trips', () => {
  it('header', () => {
    const b = new Uint8Array(HEADER_SIZE);
    const h = { msgId: 0xfffe, command: Command.REGION_WRITE, size: 0x12345, flags: MsgFlag.TYPE_REPLY | MsgFlag.ERROR, error: 22 };
    encodeHeader(dvOf(b), 0, h);
    expect(decodeHeader(dvOf(b))).toEqual(h);
    // byte layout: <HHIII little-endian
    expect(Array.from(b.subarray(0, 4))).toEqual([0xfe, 0xff, 10, 0]);
  });

  it('u64 helpers are exact below 2^53 and flag larger values', () => {
    const b = new Uint8Array(8);
    for (const v of [0, 1, 0xffffffff, 0x1_0000_0000, 2 ** 52 + 12345, Number.MAX_SAFE_INTEGER]) {
      setU64(dvOf(b), 0, v);
      expect(getU64(dvOf(b), 0)).toBe(v);
      expect(isSafeU64(dvOf(b), 0)).toBe(true);
    }
    dvOf(b).setBigUint64(0, 2n ** 60n, true);
    expect(isSafeU64(dvOf(b), 0)).toBe(false);
    expect(getU64(dvOf(b), 0)).toBeGreaterThan(Number.MAX_SAFE_INTEGER);
  });

  it('DMA_MAP and DMA_UNMAP', () => {
    const m = { argsz: 32, flags: 3, offset: 0xc0000, addr: 0x1_0000_0000, size: 511 * 2 ** 20 };
    expect(decodeDmaMap(dvOf(encodeDmaMap(m)), 0)).toEqual(m);
    const u = { argsz: 24, flags: 2, addr: 0, size: 0 };
    expect(encodeDmaUnmap(u).length).toBe(24);
    expect(decodeDmaUnmap(dvOf(encodeDmaUnmap(u)), 0)).toEqual(u);
  });

  it('DEVICE_GET_INFO and GET_IRQ_INFO', () => {
    const d = { argsz: 16, flags: 3, numRegions: 9, numIrqs: 5 };
    expect(decodeDeviceInfo(dvOf(encodeDeviceInfo(d)), 0)).toEqual(d);
    const i = { argsz: 16, flags: 1, index: 2, count: 4 };
    expect(decodeIrqInfo(dvOf(encodeIrqInfo(i)), 0)).toEqual(i);
  });

  it('SET_IRQS with and without bool data', () => {
    const s = { argsz: 23, flags: 0x22, index: 2, start: 1, count: 3, data: new Uint8Array([1, 0, 1]) };
    const b = encodeIrqSet(s);
    expect(decodeIrqSet(dvOf(b), 0, b.length)).toEqual(s);
    const e = { argsz: 20, flags: 0x24, index: 2, start: 0, count: 1, data: new Uint8Array(0) };
    expect(decodeIrqSet(dvOf(encodeIrqSet(e)), 0, 20)).toEqual(e);
  });

  it('REGION_READ / REGION_WRITE access struct', () => {
    const a = { offset: 0xff0000, region: 0, count: 4, data: new Uint8Array([1, 2, 3, 4]) };
    const b = encodeRegionAccess(a);
    expect(b.length).toBe(20);
    expect(decodeRegionAccess(dvOf(b), 0, b.length)).toEqual(a);
  });

  it('REGION_INFO with a sparse-mmap capability chain', () => {
    const b = new Uint8Array(32 + 16 + 32);
    const dv = dvOf(b);
    dv.setUint32(0, b.length, true);
    dv.setUint32(4, RegionInfoFlag.READ | RegionInfoFlag.WRITE | RegionInfoFlag.MMAP | RegionInfoFlag.CAPS, true);
    dv.setUint32(8, 1, true);
    dv.setUint32(12, 32, true);
    setU64(dv, 16, 2 ** 30);
    setU64(dv, 24, 4096);
    dv.setUint16(32, RegionCapId.SPARSE_MMAP, true);
    dv.setUint16(34, 1, true);
    dv.setUint32(40, 2, true);
    setU64(dv, 48, 0);
    setU64(dv, 56, 8192);
    setU64(dv, 64, 16384);
    setU64(dv, 72, 4096);
    expect(decodeRegionInfo(dv, 0, b.length)).toEqual({
      argsz: 80,
      flags: 15,
      index: 1,
      capOffset: 32,
      size: 2 ** 30,
      offset: 4096,
      sparse: [
        { offset: 0, size: 8192 },
        { offset: 16384, size: 4096 },
      ],
    });
    // A chain pointing at itself terminates (hop limit) and a truncated cap is ignored.
    dv.setUint32(36, 32, true);
    expect(decodeRegionInfo(dv, 0, 40).sparse).toBeUndefined();
  });

  it('REGION_WRITE_MULTI', () => {
    const b = encodeWriteMulti([
      { offset: 8, region: 0, count: 4, data: new Uint8Array([1, 2, 3, 4]) },
      { offset: 16, region: 1, count: 8, data: new Uint8Array(8).fill(9) },
    ]);
    expect(b.length).toBe(8 + 2 * 24);
    expect(getU64(dvOf(b), 0)).toBe(2);
    expect(getU64(dvOf(b), 8 + 24)).toBe(16);
    expect(dvOf(b).getUint32(8 + 24 + 12, true)).toBe(8);
  });

  it('whole message: size includes the header', () => {
    const m = encodeMessage({ msgId: 7, command: Command.DEVICE_RESET });
    expect(decodeHeader(dvOf(m))).toEqual({ msgId: 7, command: 13, size: 16, flags: 0, error: 0 });
    expect(commandName(13)).toBe('DEVICE_RESET');
    expect(commandName(99)).toBe('cmd#99');
  });
});

describe('VERSION negotiation', () => {
  it("parses QEMU's capabilities", () => {
    const r = parseClientVersion(encodeVersion({ major: 0, minor: 0, json: QEMU_VERSION_JSON }));
    expect(r).toEqual({ ok: true, caps: { maxMsgFds: 16, maxDataXferSize: 1048576, pgsizes: 4096, writeMultiple: true } });
  });

  it('accepts a bare version and uses the spec defaults', () => {
    const r = parseClientVersion(new Uint8Array(4));
    expect(r.ok && r.caps.maxMsgFds).toBe(1);
  });

  it.each([
    ['major 1', encodeVersion({ major: 1, minor: 0, json: '{}' })],
    ['no NUL', new TextEncoder().encode('\0\0\0\0{}')],
    ['not JSON', encodeVersion({ major: 0, minor: 0, json: '{capabilities' })],
    ['not an object', encodeVersion({ major: 0, minor: 0, json: '[1]' })],
    ['capabilities not an object', encodeVersion({ major: 0, minor: 0, json: '{"capabilities":3}' })],
    ['max_msg_fds too large', encodeVersion({ major: 0, minor: 0, json: '{"capabilities":{"max_msg_fds":4096}}' })],
    ['max_msg_fds negative', encodeVersion({ major: 0, minor: 0, json: '{"capabilities":{"max_msg_fds":-1}}' })],
    ['max_data_xfer_size string', encodeVersion({ major: 0, minor: 0, json: '{"capabilities":{"max_data_xfer_size":"1M"}}' })],
    ['migration not an object', encodeVersion({ major: 0, minor: 0, json: '{"capabilities":{"migration":true}}' })],
    ['write_multiple not bool', encodeVersion({ major: 0, minor: 0, json: '{"capabilities":{"write_multiple":1}}' })],
    ['invalid UTF-8', new Uint8Array([0, 0, 0, 0, 0xff, 0xfe, 0])],
    ['short payload', new Uint8Array(3)],
  ])('rejects %s with EINVAL', (_name, payload) => {
    const r = parseClientVersion(payload);
    expect(r.ok).toBe(false);
    expect(!r.ok && r.errno).toBe(22);
  });

  it('reply is 0.0, compact, NUL-terminated and never larger than the request', () => {
    const qemu = encodeVersion({ major: 0, minor: 0, json: QEMU_VERSION_JSON });
    const full = buildVersionReply(DEFAULT_SERVER_CAPS, qemu.length)!;
    expect(full[0]! | full[1]! | full[2]! | full[3]!).toBe(0);
    expect(full[full.length - 1]).toBe(0);
    expect(new TextDecoder().decode(full.subarray(4, -1))).toBe(
      '{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":4096}}',
    );
    expect(full.length).toBeLessThanOrEqual(qemu.length);
    // A smaller request gets a trimmed reply that still fits.
    for (const limit of [90, 60, 40, 7]) {
      const r = buildVersionReply(DEFAULT_SERVER_CAPS, limit)!;
      expect(r.length).toBeLessThanOrEqual(limit);
      expect(() => JSON.parse(new TextDecoder().decode(r.subarray(4, -1)))).not.toThrow();
    }
    expect(buildVersionReply(DEFAULT_SERVER_CAPS, 6)).toBeNull();
  });
});
