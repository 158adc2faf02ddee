import { describe, expect, it } from 'vitest';
import { FramingError, MessageFramer, type IncomingMessage } from '../../src/device-model/framing.ts';
import { Command, encodeMessage } from '../../src/device-model/protocol.ts';

interface Got {
  msgId: number;
  command: number;
  payload: number[];
  fds: number[];
}

function collector(): { got: Got[]; deliver: (m: IncomingMessage) => void } {
  const got: Got[] = [];
  return {
    got,
    deliver: (m) =>
      got.push({
        msgId: m.msgId,
        command: m.command,
        payload: Array.from(m.buf.subarray(m.payload, m.payload + m.payloadLength)),
        fds: m.fds.slice(),
      }),
  };
}

const msg = (id: number, payloadLen: number): Uint8Array =>
  encodeMessage({ msgId: id, command: Command.REGION_WRITE }, Uint8Array.from({ length: payloadLen }, (_, i) => (id + i) & 0xff));

const concat = (...parts: Uint8Array[]): Uint8Array => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
};

describe('MessageFramer', () => {
  it('reassembles a message delivered one byte at a time, fds on the first byte', () => {
    const f = new MessageFramer({ maxMessageSize: 4096, initialSize: 16 });
    const { got, deliver } = collector();
    const m = msg(5, 40);
    for (let i = 0; i < m.length; i++) {
      f.push(m.subarray(i, i + 1), i === 0 ? [100, 101] : null, deliver);
      expect(got.length).toBe(i === m.length - 1 ? 1 : 0);
    }
    expect(got[0]).toEqual({ msgId: 5, command: Command.REGION_WRITE, payload: Array.from(m.subarray(16)), fds: [100, 101] });
    expect(f.buffered).toBe(0);
  });

  it('splits several messages from one read and keeps arrival order', () => {
    const f = new MessageFramer({ maxMessageSize: 4096 });
    const { got, deliver } = collector();
    f.push(concat(msg(1, 0), msg(2, 8), msg(3, 3)), null, deliver);
    expect(got.map((g) => g.msgId)).toEqual([1, 2, 3]);
    expect(got[1]!.payload).toEqual([2, 3, 4, 5, 6, 7, 8, 9]);
  });

  it('keeps a trailing partial message and completes it with the next read', () => {
    const f = new MessageFramer({ maxMessageSize: 4096 });
    const { got, deliver } = collector();
    const b = concat(msg(1, 4), msg(2, 20));
    f.push(b.subarray(0, 30), null, deliver);
    expect(got.map((g) => g.msgId)).toEqual([1]);
    expect(f.buffered).toBe(10);
    f.push(b.subarray(30), null, deliver);
    expect(got.map((g) => g.msgId)).toEqual([1, 2]);
  });

  it('gives the fds of a read to the message holding its last byte', () => {
    // "AAAA" + "BBBB"(fd): one read, the fd belongs to B (the message whose bytes end the read).
    const f = new MessageFramer({ maxMessageSize: 4096 });
    const { got, deliver } = collector();
    f.push(concat(msg(1, 4), msg(2, 4)), [7], deliver);
    expect(got.map((g) => [g.msgId, g.fds])).toEqual([
      [1, []],
      [2, [7]],
    ]);
    // The tail of C plus the first bytes of D (with D's fd); D completes later.
    const c = msg(3, 10);
    const d = msg(4, 10);
    f.push(c.subarray(0, 5), null, deliver);
    f.push(concat(c.subarray(5), d.subarray(0, 3)), [8, 9], deliver);
    f.push(d.subarray(3), null, deliver);
    expect(got.slice(2).map((g) => [g.msgId, g.fds])).toEqual([
      [3, []],
      [4, [8, 9]],
    ]);
  });

  it('grows its buffer for a message larger than the initial size', () => {
    const f = new MessageFramer({ maxMessageSize: 1 << 20, initialSize: 64 });
    const { got, deliver } = collector();
    const big = msg(9, 100_000);
    for (let o = 0; o < big.length; o += 7000) f.push(big.subarray(o, o + 7000), null, deliver);
    expect(got.length).toBe(1);
    expect(got[0]!.payload.length).toBe(100_000);
    expect(got[0]!.payload[99_999]).toBe((9 + 99_999) & 0xff);
  });

  it('makes room for a partial message near the end of its buffer in one step', () => {
    const f = new MessageFramer({ maxMessageSize: 4096, initialSize: 64 });
    const { got, deliver } = collector();
    // 40 bytes of complete message, then 20 bytes of a 48-byte one: 4 bytes left at the end.
    const a = msg(1, 24);
    const b = msg(2, 32);
    f.push(concat(a, b.subarray(0, 20)), null, deliver);
    expect(got.length).toBe(1);
    const room = f.space();
    expect(room.length).toBeGreaterThanOrEqual(b.length - 20); // the rest fits in one read
    room.set(b.subarray(20));
    f.commit(b.length - 20, null, deliver);
    expect(got.map((g) => g.msgId)).toEqual([1, 2]);
  });

  it('rejects msg_size below the header size as a framing error', () => {
    const f = new MessageFramer({ maxMessageSize: 4096 });
    const bad = msg(1, 0);
    new DataView(bad.buffer).setUint32(4, 15, true);
    expect(() => f.push(bad, null, () => {})).toThrow(FramingError);
    expect(() => f.push(msg(2, 0), null, () => {})).toThrow(FramingError); // stays failed
  });

  it('rejects an absurd msg_size as soon as the header is complete', () => {
    const f = new MessageFramer({ maxMessageSize: 4096 });
    const bad = msg(1, 0);
    new DataView(bad.buffer).setUint32(4, 0x7fffffff, true);
    expect(() => f.push(bad, null, () => {})).toThrow(/out of range/);
  });

  it('hands back fds of messages that never completed', () => {
    const f = new MessageFramer({ maxMessageSize: 4096 });
    f.push(msg(1, 32).subarray(0, 20), [11, 12], () => {});
    expect(f.takeUndeliveredFds()).toEqual([11, 12]);
  });
});
