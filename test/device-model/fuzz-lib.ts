// Structure-aware fuzzer for the vfio-user server, shared by fuzz.test.ts (bounded, in CI) and
// fuzz-driver.ts (long runs). It talks to a real Endpoint through a `Wire` (a real socket, or the
// in-memory transport) and checks, after every batch of messages, the invariants a hostile
// client must not be able to break:
//   - every command that is not NO_REPLY gets exactly one reply, in order, with a valid header
//     (type reply, echoed msg_id and command; errors header-only with a positive errno; success
//     payloads of the size the command defines), and NO_REPLY commands get none;
//   - the connection stays up unless the stream is unframeable (msg_size out of range), in which
//     case the server drops it;
//   - replies carry fds only where the protocol puts them (a GET_REGION_INFO with MMAP);
//   - no internal errors (EIO from a device that never fails).
// The expected replies come from an independent model of the server's framing (`StreamModel`):
// whatever bytes we send, it knows which messages the server will see.
//
// Everything random comes from one seeded PRNG: a failure prints the seed, and the same seed
// with the same iteration count replays the same bytes.

import { readdirSync, writeSync } from 'node:fs';
import { native } from '../../src/native.ts';
import { QEMU_VERSION_JSON } from '../../src/device-model/client.ts';
import type { PciDevice } from '../../src/device-model/device.ts';
import type { Server } from '../../src/device-model/server.ts';
import { Endpoint, maxMessageSize } from '../../src/device-model/endpoint.ts';
import { MemoryTransport } from '../../src/device-model/memory-transport.ts';
import { DEFAULT_SERVER_CAPS, type ServerCapabilities } from '../../src/device-model/version.ts';
import {
  Command,
  DmaMapFlag,
  Errno,
  HEADER_SIZE,
  IrqSetFlag,
  MsgFlag,
  RegionInfoFlag,
  commandName,
  encodeMessage,
  encodeVersion,
  setU64,
} from '../../src/device-model/protocol.ts';

// ---- PRNG ---------------------------------------------------------------------------------

import { Prng } from '../prng.ts';
export { Prng };
import { MSIX_VECTORS, type TestDevice } from './helpers.ts';

// ---- interesting values -------------------------------------------------------------------

const U32_EDGES = [
  0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 19, 20, 21, 23, 24, 25, 31, 32, 33, 48, 63, 64, 65, 127, 128, 199, 200, 201,
  255, 256, 2047, 2048, 4095, 4096, 4097, 0x7fff, 0x8000, 0x8ff0, 0x9000, 0xffff, 0x10000, 0x10001, 0xfffff,
  0x100000, 0x100001, 0x100010, 0x101010, 0x7fffffff, 0x80000000, 0xfffffff0, 0xfffffffe, 0xffffffff,
];
/** [low, high] 32-bit halves. */
const U64_EDGES: [number, number][] = [
  [0, 0],
  [1, 0],
  [0x1000, 0],
  [0xfffff000, 0],
  [0, 1],
  [0xffffffff, 0x1fffff], // 2^53 - 1
  [0, 0x200000], // 2^53
  [1, 0x200000],
  [0, 0x800], // 8 TiB
  [0x1000, 0x800],
  [0, 0x100], // 1 TiB
  [0, 0x80000000], // 2^63
  [0xffffffff, 0x7fffffff],
  [0xfffff000, 0xffffffff],
  [0xffffffff, 0xffffffff],
];

function edgeU32(r: Prng): number {
  return r.chance(0.7) ? r.pick(U32_EDGES) : r.u32();
}

function setU64Halves(dv: DataView, at: number, [lo, hi]: [number, number]): void {
  dv.setUint32(at, lo >>> 0, true);
  dv.setUint32(at + 4, hi >>> 0, true);
}

// ---- fds to attach ------------------------------------------------------------------------

export type FdKind = 'memfd' | 'memfd-small' | 'memfd-unsealed' | 'eventfd' | 'eventfd-full' | 'devnull' | 'socket';
const FD_KINDS: readonly FdKind[] = ['memfd', 'memfd-small', 'memfd-unsealed', 'eventfd', 'eventfd-full', 'devnull', 'socket'];
/** F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW, as QEMU seals guest RAM. */
const SEALS = 7;
const EVENTFD_MAX = new Uint8Array([0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
const O_RDWR = 2;
export const FUZZ_MEMFD_SIZE = 1 << 20;

/** Create a fresh fd of a kind; the caller closes it once it is sent. */
export function makeFd(kind: FdKind): number {
  let fd: number;
  switch (kind) {
    case 'memfd':
      fd = native.memfdCreate('vugpu-fuzz', FUZZ_MEMFD_SIZE, SEALS);
      break;
    case 'memfd-small':
      fd = native.memfdCreate('vugpu-fuzz', 4096, SEALS);
      break;
    case 'memfd-unsealed': // the client could truncate it: refused by the server
      fd = native.memfdCreate('vugpu-fuzz', FUZZ_MEMFD_SIZE);
      break;
    case 'eventfd':
      fd = native.eventfd(0, true);
      break;
    case 'eventfd-full':
      // Blocking, counter at its maximum: a write of 1 would block forever.
      fd = native.eventfd(0, false);
      if (fd >= 0) writeSync(fd, EVENTFD_MAX);
      break;
    case 'devnull':
      fd = native.open('/dev/null', O_RDWR);
      break;
    case 'socket': {
      const [a, b] = native.socketpair();
      native.close(b);
      fd = a;
      break;
    }
  }
  if (fd < 0) throw new Error(`cannot create a ${kind} fd: errno ${-fd}`);
  return fd;
}

/** Entries in /proc/self/fd (the fuzzer and the server share the process). */
export function countOpenFds(): number {
  return readdirSync('/proc/self/fd').length;
}

/** Fds the server may hold for one client: both socket ends (in-process), DMA files, IRQ fds
 * (4 MSI-X + ERR), one message's fds. */
export const maxHeldFds = (s: Server): number => 2 + s.limits.dmaFiles + MSIX_VECTORS + 1 + s.caps.maxMsgFds;

/** The device side of the fuzzed VM keeps working too: it fires its interrupts into whatever
 * fds the client registered and does DMA through whatever maps it made (never throwing). */
export function deviceActivity(t: TestDevice, r: Prng): void {
  for (let v = 0; v < MSIX_VECTORS; v++) t.device.irq.msix(v);
  t.device.irq.trigger(3, 0);
  const buf = new Uint8Array(64);
  for (const m of t.device.dma.describe().slice(0, 4)) {
    const at = m.addr + r.int(Math.max(1, m.size - buf.length));
    t.device.dma.read(at, buf);
    if (m.writable) t.device.dma.write(at, buf);
    t.device.dma.translate(at, buf.length, r.chance(0.5));
  }
}

// ---- the model of the server's framing ----------------------------------------------------

/** A message the server will see, and therefore (unless NO_REPLY) answer. */
export interface SeenMessage {
  msgId: number;
  command: number;
  flags: number;
  /** The whole message (header + payload), copied. */
  bytes: Uint8Array;
}

/**
 * Independent model of how the server frames the byte stream we send: a message is msg_size
 * bytes from its first byte; a msg_size outside [16, max] breaks the stream for good (the
 * server must then drop the connection).
 */
export class StreamModel {
  private buf = new Uint8Array(1 << 16);
  private len = 0;
  broken: string | null = null;
  /** Messages the server has seen, in order, that want a reply and have not got it yet. */
  readonly expected: SeenMessage[] = [];
  /** Every complete message (with or without reply), for state tracking. */
  seen = 0;
  versionSeen = false;
  private readonly maxMessageSize: number;

  constructor(maxMessageSize: number) {
    this.maxMessageSize = maxMessageSize;
  }

  /** Bytes of a partial message the server holds. */
  get partial(): number {
    return this.len;
  }

  /** The server now holds `bytes` more of the stream. */
  push(bytes: Uint8Array): void {
    if (this.broken !== null) return;
    if (this.len + bytes.length > this.buf.length) {
      const grown = new Uint8Array(Math.max(this.buf.length * 2, this.len + bytes.length));
      grown.set(this.buf.subarray(0, this.len));
      this.buf = grown;
    }
    this.buf.set(bytes, this.len);
    this.len += bytes.length;
    let at = 0;
    const dv = new DataView(this.buf.buffer);
    while (this.len - at >= HEADER_SIZE) {
      const size = dv.getUint32(at + 4, true);
      if (size < HEADER_SIZE || size > this.maxMessageSize) {
        this.broken = `msg_size ${size} at stream message ${this.seen}`;
        this.len = 0;
        return;
      }
      if (this.len - at < size) break;
      const flags = dv.getUint32(at + 8, true);
      const m: SeenMessage = { msgId: dv.getUint16(at, true), command: dv.getUint16(at + 2, true), flags, bytes: this.buf.slice(at, at + size) };
      this.seen++;
      if (m.command === Command.VERSION && (flags & MsgFlag.TYPE_MASK) === MsgFlag.TYPE_COMMAND) this.versionSeen = true;
      if ((flags & MsgFlag.NO_REPLY) === 0) this.expected.push(m);
      at += size;
    }
    this.buf.copyWithin(0, at, this.len);
    this.len -= at;
  }

  /** Largest total size the outstanding replies can have (to keep the socket from filling). */
  outstandingReplyBytes(): number {
    let n = 0;
    for (const m of this.expected) n += worstReplySize(m);
    return n;
  }
}

function worstReplySize(m: SeenMessage): number {
  const dv = new DataView(m.bytes.buffer, m.bytes.byteOffset, m.bytes.length);
  if (m.command === Command.REGION_READ && m.bytes.length >= 32) {
    const count = dv.getUint32(28, true);
    return count <= 1 << 17 ? 32 + count : HEADER_SIZE;
  }
  if (m.command === Command.VERSION) return m.bytes.length;
  return 256;
}

// ---- reply checking -----------------------------------------------------------------------

export class InvariantError extends Error {}

interface ReplyHeader {
  msgId: number;
  command: number;
  size: number;
  flags: number;
  error: number;
}

/**
 * Parses the reply stream and checks every reply against the next expected message. fds of a
 * read belong to the reply holding the read's last byte (the server sends one sendmsg per
 * reply, fds first).
 */
export class ReplyChecker {
  private buf = new Uint8Array(1 << 16);
  private len = 0;
  private pendingFds: { at: number; fds: number[] }[] = [];
  private consumed = 0;
  readonly model: StreamModel;
  replies = 0;
  errors = 0;
  negotiated = false;
  /** Per command number: [successes, errors]. */
  readonly perCommand = new Map<number, [number, number]>();
  /** Last reply per msg id (for the well-formed steps that need results). */
  readonly results = new Map<number, { hdr: ReplyHeader; payload: Uint8Array; fds: number }>();
  /** Keep reply payloads (off for speed while fuzzing). */
  keepResults = false;

  constructor(model: StreamModel) {
    this.model = model;
  }

  /** Bytes (and fds, owned by the wire) read from the connection. Throws InvariantError on a
   * bad reply. */
  onData(bytes: Uint8Array, fds: readonly number[]): void {
    if (this.len + bytes.length > this.buf.length) {
      const grown = new Uint8Array(Math.max(this.buf.length * 2, this.len + bytes.length));
      grown.set(this.buf.subarray(0, this.len));
      this.buf = grown;
    }
    this.buf.set(bytes, this.len);
    this.len += bytes.length;
    if (fds.length > 0) {
      // The reply that holds the last byte of this read.
      const dv = new DataView(this.buf.buffer);
      let pos = 0;
      while (this.len - pos >= 8) {
        const size = dv.getUint32(pos + 4, true);
        if (size < HEADER_SIZE || pos + size >= this.len) break;
        pos += size;
      }
      this.pendingFds.push({ at: this.consumed + pos, fds: fds.slice() });
    }
    let at = 0;
    const dv = new DataView(this.buf.buffer);
    while (this.len - at >= HEADER_SIZE) {
      const hdr: ReplyHeader = {
        msgId: dv.getUint16(at, true),
        command: dv.getUint16(at + 2, true),
        size: dv.getUint32(at + 4, true),
        flags: dv.getUint32(at + 8, true),
        error: dv.getUint32(at + 12, true),
      };
      if (hdr.size < HEADER_SIZE || hdr.size > (2 << 20)) throw new InvariantError(`reply with msg_size ${hdr.size}`);
      if (this.len - at < hdr.size) break;
      let nfds = 0;
      while (this.pendingFds.length > 0 && this.pendingFds[0]!.at <= this.consumed) {
        const p = this.pendingFds.shift()!;
        if (p.at === this.consumed) nfds += p.fds.length;
      }
      this.check(hdr, this.buf.subarray(at + HEADER_SIZE, at + hdr.size), nfds);
      at += hdr.size;
      this.consumed += hdr.size;
    }
    this.buf.copyWithin(0, at, this.len);
    this.len -= at;
  }

  /** Bytes of an incomplete reply (must be 0 when all replies are in). */
  get partial(): number {
    return this.len;
  }

  private check(h: ReplyHeader, payload: Uint8Array, nfds: number): void {
    this.replies++;
    const req = this.model.expected.shift();
    const what = `reply #${this.replies} (msg_id ${h.msgId}, command ${h.command}, flags 0x${h.flags.toString(16)}, errno ${h.error}, ${payload.length} payload bytes, ${nfds} fds)`;
    if (req === undefined) throw new InvariantError(`unexpected ${what}: no command is waiting for a reply`);
    if (h.msgId !== req.msgId || h.command !== req.command) {
      throw new InvariantError(`${what} does not answer the next command (msg_id ${req.msgId}, command ${req.command})`);
    }
    let tally = this.perCommand.get(h.command);
    if (tally === undefined) this.perCommand.set(h.command, (tally = [0, 0]));
    if (h.flags === (MsgFlag.TYPE_REPLY | MsgFlag.ERROR)) {
      this.errors++;
      tally[1]++;
      if (payload.length !== 0) throw new InvariantError(`error ${what} is not header-only`);
      if (!(h.error > 0 && h.error < 4096)) throw new InvariantError(`error ${what} has no positive errno`);
      if (h.error === Errno.EIO) throw new InvariantError(`${what}: EIO means an internal error (a handler threw)`);
      if (nfds !== 0) throw new InvariantError(`error ${what} carries fds`);
      if (this.keepResults) this.results.set(h.msgId, { hdr: h, payload: payload.slice(), fds: nfds });
      return;
    }
    if (h.flags !== MsgFlag.TYPE_REPLY) throw new InvariantError(`${what}: bad flags`);
    if (h.error !== 0) throw new InvariantError(`success ${what} with a non-zero error field`);
    tally[0]++;
    this.checkSuccess(req, h, payload, nfds, what);
    if (this.keepResults) this.results.set(h.msgId, { hdr: h, payload: payload.slice(), fds: nfds });
  }

  private checkSuccess(req: SeenMessage, h: ReplyHeader, payload: Uint8Array, nfds: number, what: string): void {
    const fail = (why: string): never => {
      throw new InvariantError(`success ${what}: ${why}`);
    };
    if ((req.flags & MsgFlag.TYPE_MASK) !== MsgFlag.TYPE_COMMAND) fail('the request was not a command');
    const rq = new DataView(req.bytes.buffer, req.bytes.byteOffset, req.bytes.length);
    const rp = new DataView(payload.buffer, payload.byteOffset, payload.length);
    const reqPayload = req.bytes.length - HEADER_SIZE;
    if (h.command !== Command.VERSION && !this.model.versionSeen) fail('a command succeeded before VERSION');
    if (nfds > 0 && h.command !== Command.DEVICE_GET_REGION_INFO) fail('fds on a reply that takes none');
    switch (h.command) {
      case Command.VERSION: {
        if (this.negotiated) fail('a second VERSION succeeded');
        this.negotiated = true;
        if (payload.length < 5 || payload.length > reqPayload) fail('VERSION reply larger than the request or too small');
        if (payload[payload.length - 1] !== 0) fail('VERSION reply not NUL-terminated');
        if (rp.getUint16(0, true) !== 0 || rp.getUint16(2, true) !== 0) fail('VERSION reply is not 0.0');
        try {
          JSON.parse(new TextDecoder().decode(payload.subarray(4, payload.length - 1)));
        } catch {
          fail('VERSION reply JSON does not parse');
        }
        break;
      }
      case Command.DMA_MAP:
      case Command.DEVICE_SET_IRQS:
      case Command.DEVICE_RESET:
        if (payload.length !== 0) fail('expected a header-only reply');
        break;
      case Command.DMA_UNMAP:
        if (payload.length !== 24) fail('DMA_UNMAP reply must echo 24 bytes');
        break;
      case Command.DEVICE_GET_INFO:
      case Command.DEVICE_GET_IRQ_INFO:
        if (payload.length !== 16) fail('expected 16 bytes');
        break;
      case Command.DEVICE_GET_REGION_INFO: {
        const argsz = rq.getUint32(HEADER_SIZE, true);
        if (payload.length < 32 || payload.length > Math.max(32, argsz)) fail(`region info of ${payload.length} bytes for argsz ${argsz}`);
        if (rp.getUint32(0, true) < payload.length) fail('region info argsz smaller than the reply');
        if (nfds > 1) fail('more than one fd');
        if (nfds === 1 && (rp.getUint32(4, true) & RegionInfoFlag.MMAP) === 0) fail('an fd without MMAP');
        break;
      }
      case Command.REGION_READ: {
        const count = rq.getUint32(HEADER_SIZE + 12, true);
        if (payload.length !== 16 + count) fail(`REGION_READ of ${count} answered with ${payload.length} bytes`);
        for (let i = 0; i < 16; i++) if (payload[i] !== req.bytes[HEADER_SIZE + i]) fail('REGION_READ reply does not echo the request');
        break;
      }
      case Command.REGION_WRITE:
        if (payload.length !== 16) fail('REGION_WRITE reply must be 16 bytes');
        break;
      case Command.REGION_WRITE_MULTI:
        if (payload.length !== 8) fail('WRITE_MULTI reply must be 8 bytes');
        break;
      default:
        fail('this command must never succeed');
    }
  }
}

// ---- wires --------------------------------------------------------------------------------

/** A client connection as the fuzzer sees it. */
export interface Wire {
  readonly closed: boolean;
  /** Why the connection ended ('' while open). */
  readonly closeReason: string;
  /** One sendmsg; false if the connection is down. */
  send(bytes: Uint8Array, fds: number[]): boolean;
  close(): void;
  /** Wait until cond() holds or the connection is gone (bounded); false on timeout. */
  wait(cond: () => boolean, ms: number): Promise<boolean>;
  /** Set by the session: bytes and fds read from the connection (the wire closes the fds). */
  onData: (bytes: Uint8Array, fds: readonly number[]) => void;
  /** send() takes ownership of the fds (else the sender closes its copies after sending). */
  readonly takesFds: boolean;
  /** An exception thrown while handling received data (reported by the session). */
  readonly failure: unknown;
  /** Stop / restart reading the connection (a client that reads its replies late). */
  pauseReading?(): void;
  resumeReading?(): void;
}

const EAGAIN = 11;

/** A real AF_UNIX connection, read through uv_poll like any client. */
export class SocketWire implements Wire {
  readonly takesFds = false;
  private readonly fd: number;
  private handle: number;
  private isClosed = false;
  closeReason = '';
  onData: (bytes: Uint8Array, fds: readonly number[]) => void = () => {};
  private readonly rbuf = new Uint8Array(1 << 18);
  private readonly fdsOut = new Int32Array(254);
  private waiter: (() => void) | null = null;
  /** An exception thrown while handling data (reported by the session). */
  failure: unknown = null;

  constructor(path: string) {
    const fd = native.connectUnix(path, true);
    if (fd < 0) throw new Error(`connect ${path}: errno ${-fd}`);
    this.fd = fd;
    this.handle = native.watch(fd, (status) => this.readable(status));
  }

  get closed(): boolean {
    return this.isClosed;
  }

  send(bytes: Uint8Array, fds: number[]): boolean {
    if (this.isClosed) return false;
    const r = native.sendmsg(this.fd, bytes, fds.length > 0 ? fds : undefined);
    if (r === bytes.length) return true;
    if (r === -EAGAIN || r === -110) throw new InvariantError(`the server stopped reading (sendmsg ${r})`);
    return false; // EPIPE / ECONNRESET: the server dropped us; reading shows why
  }

  close(): void {
    if (this.isClosed) return;
    this.shut('closed by the fuzzer');
  }

  pauseReading(): void {
    if (this.isClosed || this.handle < 0) return;
    native.unwatch(this.handle);
    this.handle = -1;
  }

  resumeReading(): void {
    if (this.isClosed || this.handle >= 0) return;
    this.handle = native.watch(this.fd, (status) => this.readable(status));
    this.readable(0);
  }

  wait(cond: () => boolean, ms: number): Promise<boolean> {
    if (cond() || this.isClosed) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiter = null;
        resolve(cond() || this.isClosed);
      }, ms);
      this.waiter = () => {
        if (!cond() && !this.isClosed && this.failure === null) return;
        clearTimeout(timer);
        this.waiter = null;
        resolve(true);
      };
    });
  }

  private readable(status: number): void {
    if (this.isClosed) return;
    for (let i = 0; i < 64; i++) {
      const n = native.recvmsg(this.fd, this.rbuf, this.fdsOut);
      if (n === -EAGAIN) break;
      if (n <= 0) {
        this.shut(n === 0 ? 'eof' : `recvmsg ${n}`);
        break;
      }
      const k = this.fdsOut[0]!;
      const fds = k > 0 ? Array.from(this.fdsOut.subarray(1, 1 + k)) : [];
      try {
        this.onData(this.rbuf.subarray(0, n), fds);
      } catch (err) {
        this.failure ??= err;
        this.shut('fuzzer check failed');
        break;
      } finally {
        for (const fd of fds) native.close(fd);
      }
    }
    if (status < 0 && !this.isClosed) this.shut(`poll ${status}`);
    this.waiter?.();
  }

  private shut(reason: string): void {
    this.isClosed = true;
    this.closeReason = reason;
    if (this.handle >= 0) native.unwatch(this.handle);
    this.handle = -1;
    native.close(this.fd);
    this.waiter?.();
  }
}

/** The real Endpoint behind an in-memory transport: everything happens synchronously. */
export class MemoryWire implements Wire {
  readonly takesFds = true;
  readonly transport: MemoryTransport;
  readonly endpoint: Endpoint;
  closeReason = '';
  failure: unknown = null;
  onData: (bytes: Uint8Array, fds: readonly number[]) => void = () => {};

  constructor(device: PciDevice, caps: ServerCapabilities = DEFAULT_SERVER_CAPS) {
    this.transport = new MemoryTransport({
      name: 'fuzz-memory',
      maxMessageSize: maxMessageSize(caps),
      maxFdsPerMessage: caps.maxMsgFds,
      onSend: (data, fds) => {
        if (this.failure !== null) return;
        try {
          this.onData(data, fds); // the endpoint keeps its fds: only counted
        } catch (err) {
          this.failure = err;
        }
      },
    });
    this.endpoint = new Endpoint(device, this.transport, {
      caps,
      onClose: (r) => {
        this.closeReason ||= `${r.kind}: ${r.message}`;
      },
    });
    this.endpoint.start();
  }

  get closed(): boolean {
    return this.transport.closed;
  }

  send(bytes: Uint8Array, fds: number[]): boolean {
    return this.transport.receive(bytes, fds);
  }

  close(): void {
    if (!this.transport.closed) this.transport.end();
  }

  wait(cond: () => boolean): Promise<boolean> {
    return Promise.resolve(cond() || this.closed);
  }
}

// ---- message generation -------------------------------------------------------------------

/** What the generator knows about the device under test (helpers.ts makeTestDevice). */
export const REGION_SIZES = [0x10000, 0x10000, 0, 16, 0, 0, 0, 4096, 0];

export interface Draft {
  command: number;
  flags: number;
  payload: Uint8Array;
  fds: FdKind[];
  /** Override msg_size (a framing lie); undefined = exact. */
  size?: number;
  error?: number;
}

interface GenContext {
  r: Prng;
  maps: { addr: number; size: number }[];
}

const VERSION_JSONS = [
  QEMU_VERSION_JSON,
  '{}',
  '{"capabilities":{}}',
  '{"capabilities":{"max_msg_fds":1,"max_data_xfer_size":1048576,"migration":{"pgsize":4096}}}',
  '{"capabilities":{"max_msg_fds":1025}}',
  '{"capabilities":{"max_data_xfer_size":0}}',
  '{"capabilities":{"pgsizes":"4096"}}',
  '{"capabilities":{"migration":[]}}',
  '{"capabilities":{"twin_socket":{"supported":true}}}',
  '{"capabilities":{"write_multiple":1}}',
  '[]',
  'null',
  '{"capabilities":',
  '{"a":' + '['.repeat(2000) + ']'.repeat(2000) + '}',
];

function u8(n: number): Uint8Array {
  return new Uint8Array(n);
}

function payloadView(p: Uint8Array): DataView {
  return new DataView(p.buffer, p.byteOffset, p.length);
}

function regionAccess(c: GenContext, write: boolean): Uint8Array {
  const r = c.r;
  const region = r.chance(0.85) ? r.pick([0, 0, 0, 1, 1, 7, 7, 3]) : r.chance(0.5) ? r.range(0, 9) : edgeU32(r);
  const rsize = REGION_SIZES[region] ?? 0;
  const count = r.chance(0.8) ? r.pick([1, 2, 4, 8, 4, 4]) : r.chance(0.7) ? r.pick([0, 3, 16, 64, 256, 2048, 4096, 0x8000]) : edgeU32(r);
  let offset: number;
  if (rsize > 0 && r.chance(0.85)) {
    offset = r.int(Math.max(1, rsize - Math.min(count, rsize) + 1));
    if (r.chance(0.8)) offset -= offset % Math.min(8, Math.max(1, count));
    if (region === 0 && r.chance(0.15)) offset = r.pick([0x8000, 0x8008, 0x800c, 0x8030, 0x9000, 0x8ffc, 0x9004]);
  } else {
    offset = r.chance(0.5) ? r.pick([0, rsize, rsize - 1, 2 ** 32, 2 ** 53, 2 ** 64 - 8]) : r.u32();
  }
  const dataLen = write ? (count <= 0x10000 ? count : r.int(64)) : 0;
  const p = u8(16 + dataLen);
  const dv = payloadView(p);
  if (offset >= 2 ** 53) setU64Halves(dv, 0, r.pick(U64_EDGES));
  else setU64(dv, 0, Math.max(0, offset));
  dv.setUint32(8, region >>> 0, true);
  dv.setUint32(12, count >>> 0, true);
  if (dataLen > 0) p.set(r.bytes(dataLen), 16);
  return p;
}

/** A well-formed (or nearly) message of `command`. */
function build(c: GenContext, command: number): Draft {
  const r = c.r;
  const d: Draft = { command, flags: 0, payload: u8(0), fds: [] };
  switch (command) {
    case Command.VERSION:
      d.payload = encodeVersion({ major: 0, minor: r.chance(0.8) ? 0 : r.range(0, 3), json: r.pick(VERSION_JSONS) });
      break;
    case Command.DMA_MAP: {
      const p = u8(32);
      const dv = payloadView(p);
      const withFd = r.chance(0.7);
      const size = r.pick([4096, 8192, 0x10000, 0x40000, FUZZ_MEMFD_SIZE]);
      const addr = r.chance(0.3) && c.maps.length > 0 ? r.pick(c.maps).addr : r.int(1 << 20) * 4096;
      dv.setUint32(0, 32, true);
      dv.setUint32(4, r.chance(0.8) ? DmaMapFlag.READ | DmaMapFlag.WRITE : DmaMapFlag.READ, true);
      setU64(dv, 8, withFd ? r.int((FUZZ_MEMFD_SIZE - size) / 4096 + 1) * 4096 : 0);
      setU64(dv, 16, addr);
      setU64(dv, 24, size);
      if (withFd) d.fds.push(r.chance(0.95) ? 'memfd' : r.pick(FD_KINDS));
      c.maps.push({ addr, size });
      if (c.maps.length > 64) c.maps.shift();
      d.payload = p;
      break;
    }
    case Command.DMA_UNMAP: {
      const p = u8(24);
      const dv = payloadView(p);
      dv.setUint32(0, 24, true);
      if (r.chance(0.08)) {
        dv.setUint32(4, 2, true); // UNMAP_ALL
      } else {
        const m = c.maps.length > 0 && r.chance(0.8) ? r.pick(c.maps) : { addr: r.int(1 << 20) * 4096, size: 4096 };
        setU64(dv, 8, m.addr);
        setU64(dv, 16, m.size);
      }
      d.payload = p;
      break;
    }
    case Command.DEVICE_GET_INFO:
      d.payload = u8(16);
      payloadView(d.payload).setUint32(0, 16, true);
      break;
    case Command.DEVICE_GET_REGION_INFO: {
      d.payload = u8(32);
      const dv = payloadView(d.payload);
      dv.setUint32(0, r.pick([32, 32, 64, 48, 80, 1024]), true);
      dv.setUint32(8, r.range(0, 8), true);
      break;
    }
    case Command.DEVICE_GET_REGION_IO_FDS: {
      d.payload = u8(16);
      const dv = payloadView(d.payload);
      dv.setUint32(0, 16, true);
      dv.setUint32(8, r.range(0, 8), true);
      dv.setUint32(12, r.range(0, 4), true);
      break;
    }
    case Command.DEVICE_GET_IRQ_INFO:
      d.payload = u8(16);
      payloadView(d.payload).setUint32(0, 16, true);
      payloadView(d.payload).setUint32(8, r.range(0, 4), true);
      break;
    case Command.DEVICE_SET_IRQS: {
      const shape = r.int(7);
      let flags: number;
      let index = 2;
      let start = 0;
      let count = 1;
      let data = u8(0);
      if (shape === 0 || shape === 1) {
        index = 2;
        start = r.int(MSIX_VECTORS);
        count = r.range(1, MSIX_VECTORS - start);
        flags = IrqSetFlag.DATA_EVENTFD | IrqSetFlag.ACTION_TRIGGER;
        if (shape === 0) for (let i = 0; i < count; i++) d.fds.push('eventfd');
      } else if (shape === 2) {
        index = r.range(0, 4);
        count = 0;
        flags = IrqSetFlag.DATA_NONE | IrqSetFlag.ACTION_TRIGGER;
      } else if (shape === 3) {
        index = 3;
        flags = IrqSetFlag.DATA_EVENTFD | IrqSetFlag.ACTION_TRIGGER;
        d.fds.push('eventfd');
      } else if (shape === 4) {
        index = r.pick([2, 3]);
        start = 0;
        count = index === 2 ? r.range(1, MSIX_VECTORS) : 1;
        flags = IrqSetFlag.DATA_BOOL | r.pick([IrqSetFlag.ACTION_TRIGGER, IrqSetFlag.ACTION_MASK, IrqSetFlag.ACTION_UNMASK]);
        data = r.bytes(count);
      } else if (shape === 5) {
        index = r.pick([0, 2]);
        start = index === 2 ? r.int(MSIX_VECTORS) : 0;
        flags = IrqSetFlag.DATA_NONE | r.pick([IrqSetFlag.ACTION_MASK, IrqSetFlag.ACTION_UNMASK, IrqSetFlag.ACTION_TRIGGER]);
      } else {
        index = 0;
        flags = IrqSetFlag.DATA_EVENTFD | r.pick([IrqSetFlag.ACTION_TRIGGER, IrqSetFlag.ACTION_UNMASK]);
        d.fds.push('eventfd');
      }
      d.payload = u8(20 + data.length);
      const dv = payloadView(d.payload);
      dv.setUint32(0, 20 + data.length, true);
      dv.setUint32(4, flags, true);
      dv.setUint32(8, index, true);
      dv.setUint32(12, start, true);
      dv.setUint32(16, count, true);
      d.payload.set(data, 20);
      break;
    }
    case Command.REGION_READ:
      d.payload = regionAccess(c, false);
      break;
    case Command.REGION_WRITE:
      d.payload = regionAccess(c, true);
      if (r.chance(0.5)) d.flags |= MsgFlag.NO_REPLY; // posted writes, as QEMU sends them
      break;
    case Command.DMA_READ:
    case Command.DMA_WRITE:
      d.payload = r.bytes(r.pick([16, 24, 28, 32, 48]));
      break;
    case Command.DEVICE_RESET:
      break;
    case Command.REGION_WRITE_MULTI: {
      const n = r.chance(0.9) ? r.range(1, 6) : r.pick([0, 199, 200, 201]);
      d.payload = u8(8 + 24 * n);
      const dv = payloadView(d.payload);
      setU64(dv, 0, n);
      for (let i = 0; i < n; i++) {
        const e = 8 + 24 * i;
        const count = r.chance(0.9) ? r.pick([1, 2, 4, 8]) : edgeU32(r);
        setU64(dv, e, r.int(0x800) * 8);
        dv.setUint32(e + 8, r.chance(0.9) ? 0 : r.range(0, 9), true);
        dv.setUint32(e + 12, count >>> 0, true);
        d.payload.set(r.bytes(8), e + 16);
      }
      if (r.chance(0.7)) d.flags |= MsgFlag.NO_REPLY;
      break;
    }
    case Command.DEVICE_FEATURE:
    case Command.MIG_DATA_READ:
    case Command.MIG_DATA_WRITE:
      d.payload = r.bytes(r.pick([8, 16, 24, 64]));
      payloadView(d.payload).setUint32(0, d.payload.length, true);
      break;
    default:
      d.payload = r.bytes(r.int(64));
  }
  return d;
}

const COMMANDS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18];
/** Weighted toward the commands with the most state behind them. */
const COMMAND_WEIGHTS = [1, 6, 4, 1, 3, 1, 2, 6, 8, 8, 1, 1, 1, 1, 3, 1, 1, 1];
const WEIGHTED: number[] = COMMANDS.flatMap((cmd, i) => Array<number>(COMMAND_WEIGHTS[i]!).fill(cmd));

/** Apply 0..n structural mutations. */
function mutate(c: GenContext, d: Draft): void {
  const r = c.r;
  const n = r.chance(0.25) ? 0 : r.range(1, 3);
  for (let k = 0; k < n; k++) {
    const dv = payloadView(d.payload);
    switch (r.int(12)) {
      case 0:
      case 1:
      case 2: // a 32-bit field (argsz, flags, index, start, count, region, ...)
        if (d.payload.length >= 4) dv.setUint32(r.int(d.payload.length >> 2) * 4, edgeU32(r), true);
        break;
      case 3: // a 64-bit field (offset, addr, size)
        if (d.payload.length >= 8) setU64Halves(dv, r.int(d.payload.length >> 3) * 8, r.pick(U64_EDGES));
        break;
      case 4: // truncation
        if (d.payload.length > 0) d.payload = d.payload.slice(0, r.int(d.payload.length));
        break;
      case 5: {
        // extension
        const extra = r.chance(0.9) ? r.range(1, 64) : r.range(65, 8192);
        const p = u8(d.payload.length + extra);
        p.set(d.payload);
        p.set(r.bytes(extra), d.payload.length);
        d.payload = p;
        break;
      }
      case 6: // random byte
        if (d.payload.length > 0) d.payload[r.int(d.payload.length)] = r.u32() & 0xff;
        break;
      case 7: // header flags
        d.flags = r.chance(0.6) ? d.flags ^ MsgFlag.NO_REPLY : r.chance(0.5) ? r.pick([1, 2, 0xf, 0x20, 0x30, 0x21]) : r.u32();
        break;
      case 8: // fds where none belong, or extra ones
        for (let i = r.range(1, 3); i > 0; i--) d.fds.push(r.pick(FD_KINDS));
        break;
      case 9: // fds missing or of the wrong kind
        if (d.fds.length > 0) {
          if (r.chance(0.5)) d.fds.pop();
          else d.fds[r.int(d.fds.length)] = r.pick(FD_KINDS);
        }
        break;
      case 10: // another command's payload
        d.command = r.chance(0.8) ? r.pick(COMMANDS) : r.chance(0.5) ? r.pick([0, 19, 20, 255, 0xffff]) : r.int(0x10000);
        break;
      case 11: // header error field
        d.error = edgeU32(r);
        break;
    }
  }
}

/** A message to send: mostly a mutated well-formed command. */
export function generate(c: GenContext): Draft {
  const r = c.r;
  const d = build(c, r.chance(0.97) ? r.pick(WEIGHTED) : r.int(0x10000));
  if (r.chance(0.8)) mutate(c, d);
  return d;
}

export function encodeDraft(d: Draft, msgId: number): Uint8Array {
  const bytes = encodeMessage({ msgId, command: d.command, flags: d.flags, error: d.error ?? 0 }, d.payload);
  if (d.size !== undefined) new DataView(bytes.buffer).setUint32(4, d.size >>> 0, true);
  return bytes;
}

// ---- sessions -----------------------------------------------------------------------------

export interface FuzzOptions {
  seed: number;
  /** Messages to send in total (fuzzed and well-formed). */
  iterations: number;
  /** Largest msg_size the server accepts. */
  maxMessageSize: number;
  /** A new client connection to the device under test. */
  connect(): Wire;
  /** Resolves when the server has released the last connection (bounded by the caller). */
  idle(): Promise<void>;
  /** Called after every batch while a session is up (e.g. the other VM's register check). */
  between?(): Promise<void>;
  /** After each session, with the fd count before it and now. */
  afterSession?(info: SessionResult): void | Promise<void>;
  /** Count open fds (default /proc/self/fd); null: do not check. */
  countFds?: (() => number) | null;
  /** Most fds the server may hold for one client beyond the count before it connected
   * (checked after every batch): connection sockets, DMA files, IRQ fds, one message's fds. */
  maxHeldFds?: number;
  log?(line: string): void;
}

export interface SessionResult {
  index: number;
  mode: 'mutate' | 'bytes' | 'valid-then-garbage';
  messages: number;
  replies: number;
  errorReplies: number;
  dropped: string | null;
  fdsBefore: number;
  fdsAfter: number;
}

export interface FuzzStats {
  seed: number;
  sessions: number;
  messages: number;
  replies: number;
  errorReplies: number;
  framingDrops: number;
  bytesSent: number;
  ms: number;
  /** Replies per command name: successes / errors. */
  perCommand: Record<string, string>;
}

/** Thrown with everything needed to reproduce. */
export class FuzzFailure extends Error {
  readonly seed: number;
  constructor(seed: number, session: number, message: string, trace: string[]) {
    super(`fuzz seed ${seed} (replay: VUGPU_FUZZ_SEED=${seed}), session ${session}: ${message}\nlast chunks sent:\n${trace.join('\n')}`);
    this.seed = seed;
  }
}

const hex = (b: Uint8Array, max = 96): string =>
  Array.from(b.subarray(0, max), (x) => x.toString(16).padStart(2, '0')).join('') + (b.length > max ? `…(+${b.length - max})` : '');

class Session {
  readonly model: StreamModel;
  readonly checker: ReplyChecker;
  readonly wire: Wire;
  private readonly r: Prng;
  private readonly trace: string[];
  nextId = 1;
  messages = 0;
  bytesSent = 0;
  bytesInBatch = 0; // sent since the last sync

  constructor(wire: Wire, r: Prng, maxMessageSize: number, trace: string[]) {
    this.wire = wire;
    this.r = r;
    this.trace = trace;
    this.model = new StreamModel(maxMessageSize);
    this.checker = new ReplyChecker(this.model);
    wire.onData = (b, f) => this.checker.onData(b, f);
  }

  /** Send one chunk of the stream with fds of the given kinds (created now, closed after). */
  sendChunk(bytes: Uint8Array, kinds: readonly FdKind[]): boolean {
    const fds = kinds.map(makeFd);
    this.trace.push(`${bytes.length}B${fds.length ? ` +${kinds.join(',')}` : ''} ${hex(bytes)}`);
    if (this.trace.length > 24) this.trace.shift();
    // The model first: an in-memory wire answers inside send(). (If the send fails the server
    // is gone, and the model's expectations make any unexplained drop an error.)
    this.model.push(bytes);
    let ok: boolean;
    try {
      ok = this.wire.send(bytes, fds);
    } finally {
      if (!this.wire.takesFds) for (const fd of fds) native.close(fd);
    }
    if (ok) {
      this.bytesSent += bytes.length;
      this.bytesInBatch += bytes.length;
    }
    return ok;
  }

  /** Send one message: whole, or in fragments (fds on the first, as a conforming sender does). */
  async sendMessage(bytes: Uint8Array, kinds: readonly FdKind[]): Promise<boolean> {
    this.messages++;
    const split = bytes.length > 0xc000 || this.r.chance(0.15);
    if (!split) return this.sendChunk(bytes, kinds);
    let at = 0;
    let first = true;
    while (at < bytes.length) {
      const n = bytes.length - at > 0xc000 ? 0x8000 : this.r.chance(0.3) ? bytes.length - at : this.r.range(1, bytes.length - at);
      if (!this.sendChunk(bytes.subarray(at, at + n), first ? kinds : [])) return false;
      first = false;
      at += n;
      // Big messages: let the server read between pieces (one thread runs both ends).
      if (bytes.length > 0xc000) await this.settle();
    }
    return true;
  }

  private async settle(): Promise<void> {
    await new Promise((r) => setImmediate(r));
  }

  /** Wait for every expected reply (or the drop the model predicts). */
  async sync(ms = 5000): Promise<void> {
    const done = (): boolean => this.model.expected.length === 0 && this.checker.partial === 0;
    await this.wire.wait(done, ms);
    this.rethrow();
    this.bytesInBatch = 0;
    const next = this.model.expected[0];
    const missing = `${this.model.expected.length} replies missing (next: msg_id ${next?.msgId}, command ${next?.command})`;
    if (!done()) {
      if (!this.wire.closed) throw new InvariantError(`${missing} after ${ms} ms`);
      if (this.model.broken !== null) throw new InvariantError(`${missing} before the drop for a framing error (${this.model.broken})`);
      throw new InvariantError(`connection dropped (${this.wire.closeReason}) with ${missing}`);
    }
    if (this.wire.closed && this.model.broken === null) {
      throw new InvariantError(`connection dropped (${this.wire.closeReason}) without a framing error`);
    }
  }

  rethrow(): void {
    if (this.wire.failure) throw this.wire.failure;
  }

  id(): number {
    const id = this.nextId;
    this.nextId = (this.nextId + 1) & 0xffff;
    return id;
  }

  /** Keep the bytes in flight either way small: one thread runs both ends of the socket, so
   * neither side may fill it. */
  async throttle(): Promise<void> {
    if (this.model.outstandingReplyBytes() > 0x10000 || this.bytesInBatch > 0x10000) await this.sync();
  }
}

/** Run the fuzzer; throws FuzzFailure on the first broken invariant. */
export async function fuzz(opts: FuzzOptions): Promise<FuzzStats> {
  const r = new Prng(opts.seed);
  const countFds = opts.countFds === undefined ? countOpenFds : opts.countFds;
  const stats: FuzzStats = { seed: opts.seed, sessions: 0, messages: 0, replies: 0, errorReplies: 0, framingDrops: 0, bytesSent: 0, ms: 0, perCommand: {} };
  const perCommand = new Map<number, [number, number]>();
  const t0 = performance.now();
  const trace: string[] = [];
  while (stats.messages < opts.iterations) {
    const index = stats.sessions++;
    const mode = r.chance(0.6) ? 'mutate' : r.chance(0.5) ? 'valid-then-garbage' : 'bytes';
    const fdsBefore = countFds ? countFds() : 0;
    const wire = opts.connect();
    const s = new Session(wire, r, opts.maxMessageSize, trace);
    const ctx: GenContext = { r, maps: [] };
    try {
      if (mode === 'valid-then-garbage') await validSession(s, r);
      else if (r.chance(0.9)) await sendWhole(s, build(ctx, Command.VERSION), r.chance(0.95) ? null : []);
      const budget = Math.min(opts.iterations - stats.messages, r.range(5, 120));
      let sent = 0;
      while (sent < budget && !wire.closed && s.model.broken === null) {
        const batch = r.range(1, 8);
        for (let i = 0; i < batch && sent < budget && !wire.closed && s.model.broken === null; i++, sent++) {
          if (mode === 'bytes' || (mode === 'valid-then-garbage' && r.chance(0.5))) await sendGarbage(s, r, opts.maxMessageSize);
          else await sendWhole(s, generate(ctx), null);
          await s.throttle();
        }
        if (wire.pauseReading && !wire.closed && s.model.broken === null && s.model.partial === 0 && r.chance(0.05)) {
          // Read late: big replies pile up beyond the socket buffer, the server queues them and
          // stops handling requests; everything must still arrive whole and in order.
          await s.sync();
          wire.pauseReading();
          for (let i = r.range(3, 8); i > 0; i--) {
            const req = u8(16);
            const dv = payloadView(req);
            dv.setUint32(8, 1, true);
            dv.setUint32(12, 0x10000, true);
            await s.sendMessage(encodeMessage({ msgId: s.id(), command: Command.REGION_READ }, req), []);
          }
          await new Promise((res) => setTimeout(res, r.range(1, 20)));
          wire.resumeReading!();
        }
        await s.sync();
        if (countFds && opts.maxHeldFds !== undefined) {
          const held = countFds() - fdsBefore;
          if (held > opts.maxHeldFds) throw new InvariantError(`the server holds ${held} fds for one client (bound ${opts.maxHeldFds})`);
        }
        // (Not once the stream is broken: the server is dropping this client right now.)
        if (opts.between && !wire.closed && s.model.broken === null) await opts.between();
      }
      // Some clients hang up with commands in flight: the server's replies then hit a closed
      // socket (EPIPE) and it must clean up all the same.
      const abandon = !wire.closed && s.model.broken === null && r.chance(0.05);
      if (abandon) {
        for (let i = r.range(1, 6); i > 0; i--) await sendWhole(s, generate(ctx), null);
        wire.close();
      }
      // No reply may be left over: a final probe answers after everything else.
      if (!wire.closed && s.model.broken === null && s.model.partial === 0) {
        await sendWhole(s, build(ctx, Command.DEVICE_GET_INFO), []);
        await s.sync();
      }
      if (s.model.broken !== null && !abandon) {
        // The server must drop a stream it cannot frame.
        await wire.wait(() => wire.closed, 3000);
        s.rethrow();
        if (!wire.closed) throw new InvariantError(`no drop after a framing error (${s.model.broken})`);
        stats.framingDrops++;
      }
      wire.close();
      await withTimeout(opts.idle(), 3000, 'the server did not release the connection');
      const fdsAfter = countFds ? countFds() : 0;
      if (countFds && fdsAfter !== fdsBefore) throw new InvariantError(`fd leak: ${fdsBefore} fds before the session, ${fdsAfter} after`);
      stats.messages += s.messages;
      stats.replies += s.checker.replies;
      stats.errorReplies += s.checker.errors;
      stats.bytesSent += s.bytesSent;
      for (const [cmd, [ok, bad]] of s.checker.perCommand) {
        const t = perCommand.get(cmd) ?? [0, 0];
        perCommand.set(cmd, [t[0] + ok, t[1] + bad]);
      }
      await opts.afterSession?.({
        index,
        mode,
        messages: s.messages,
        replies: s.checker.replies,
        errorReplies: s.checker.errors,
        dropped: s.model.broken,
        fdsBefore,
        fdsAfter,
      });
    } catch (err) {
      wire.close();
      if (err instanceof FuzzFailure) throw err;
      throw new FuzzFailure(opts.seed, index, `${mode}: ${(err as Error).message}`, trace.slice());
    }
  }
  stats.ms = performance.now() - t0;
  for (const [cmd, [ok, bad]] of [...perCommand].sort((x, y) => x[0] - y[0])) {
    if (cmd <= 18) stats.perCommand[commandName(cmd)] = `${ok}/${bad}`;
  }
  return stats;
}

async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer!: NodeJS.Timeout;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new InvariantError(`${what} within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, t]);
  } finally {
    clearTimeout(timer);
  }
}

/** Send a draft (optionally with a given fd list instead of its own). */
async function sendWhole(s: Session, d: Draft, fds: FdKind[] | null): Promise<void> {
  await s.sendMessage(encodeDraft(d, s.id()), fds ?? d.fds);
}

/** Random bytes: pure noise, or header-shaped noise whose size field the server believes. */
async function sendGarbage(s: Session, r: Prng, maxMessageSize: number): Promise<void> {
  let bytes: Uint8Array;
  const shape = r.int(10);
  if (shape < 2) {
    bytes = r.bytes(r.range(1, 256)); // noise: usually an impossible msg_size
  } else if (shape < 3) {
    // a msg_size lie: claims more (or less, or an impossible amount) than follows
    bytes = r.bytes(r.range(16, 128));
    const dv = new DataView(bytes.buffer);
    dv.setUint32(4, r.pick([0, 1, 15, 16, 17, bytes.length + 1, bytes.length + 4096, maxMessageSize, maxMessageSize + 1, 0xffffffff, bytes.length - 1]) >>> 0, true);
  } else {
    // a plausible header with a random body
    const len = r.chance(0.9) ? r.range(0, 96) : r.range(97, 4096);
    bytes = r.bytes(HEADER_SIZE + len);
    const dv = new DataView(bytes.buffer);
    dv.setUint16(2, r.chance(0.9) ? r.range(0, 19) : r.u32() & 0xffff, true);
    dv.setUint32(4, bytes.length, true);
    dv.setUint32(8, r.chance(0.7) ? r.pick([0, 0x10]) : r.u32(), true);
  }
  let kinds: FdKind[] = r.chance(0.15) ? [r.pick(FD_KINDS)] : [];
  if (r.chance(0.03)) kinds = Array<FdKind>(r.range(17, 120)).fill(r.pick(FD_KINDS)); // an fd flood
  s.messages++;
  s.sendChunk(bytes, kinds);
}

/** A correct session with checked results (like QEMU's realize plus some guest activity). */
async function validSession(s: Session, r: Prng): Promise<void> {
  s.checker.keepResults = true;
  const call = async (command: number, payload: Uint8Array, fds: FdKind[] = [], flags = 0): Promise<Uint8Array> => {
    const id = s.id();
    await s.sendMessage(encodeMessage({ msgId: id, command, flags }, payload), fds);
    await s.sync();
    if (flags & MsgFlag.NO_REPLY) return u8(0);
    const res = s.checker.results.get(id);
    if (!res) throw new InvariantError(`no result for ${command}`);
    if (res.hdr.flags & MsgFlag.ERROR) throw new InvariantError(`well-formed command ${command} failed with errno ${res.hdr.error}`);
    return res.payload;
  };
  const ctx: GenContext = { r, maps: [] };
  await call(Command.VERSION, encodeVersion({ major: 0, minor: 0, json: QEMU_VERSION_JSON }));
  const map = u8(32);
  const mv = payloadView(map);
  mv.setUint32(0, 32, true);
  mv.setUint32(4, DmaMapFlag.READ | DmaMapFlag.WRITE, true);
  setU64(mv, 16, 0x100000);
  setU64(mv, 24, FUZZ_MEMFD_SIZE);
  await call(Command.DMA_MAP, map, ['memfd']);
  await call(Command.DEVICE_GET_INFO, build(ctx, Command.DEVICE_GET_INFO).payload);
  for (const i of [0, 1, 2, 3, 4, 5, 7]) {
    const p = u8(32);
    payloadView(p).setUint32(0, 64, true);
    payloadView(p).setUint32(8, i, true);
    const info = await call(Command.DEVICE_GET_REGION_INFO, p);
    const size = Number(payloadView(info).getBigUint64(16, true));
    if (size !== REGION_SIZES[i]) throw new InvariantError(`region ${i} size ${size}`);
  }
  const set = u8(20);
  const sv = payloadView(set);
  sv.setUint32(0, 20, true);
  sv.setUint32(4, IrqSetFlag.DATA_EVENTFD | IrqSetFlag.ACTION_TRIGGER, true);
  sv.setUint32(8, 2, true);
  sv.setUint32(16, MSIX_VECTORS, true);
  await call(Command.DEVICE_SET_IRQS, set, Array<FdKind>(MSIX_VECTORS).fill('eventfd'));
  // Register and VRAM round trips with checked values.
  for (let i = 0; i < 8; i++) {
    const region = r.pick([0, 1]);
    const offset = region === 0 ? r.int(0x7ff0 >> 2) * 4 : r.int(0x10000 >> 2) * 4;
    const value = r.u32();
    const w = u8(20);
    const wv = payloadView(w);
    setU64(wv, 0, offset);
    wv.setUint32(8, region, true);
    wv.setUint32(12, 4, true);
    wv.setUint32(16, value, true);
    await call(Command.REGION_WRITE, w, [], r.chance(0.5) ? MsgFlag.NO_REPLY : 0);
    const rd = u8(16);
    const rv = payloadView(rd);
    setU64(rv, 0, offset);
    rv.setUint32(8, region, true);
    rv.setUint32(12, 4, true);
    const got = payloadView(await call(Command.REGION_READ, rd)).getUint32(16, true);
    if (got !== value) throw new InvariantError(`region ${region} offset 0x${offset.toString(16)}: wrote 0x${value.toString(16)}, read 0x${got.toString(16)}`);
  }
  const un = u8(24);
  payloadView(un).setUint32(0, 24, true);
  setU64(payloadView(un), 8, 0x100000);
  setU64(payloadView(un), 16, FUZZ_MEMFD_SIZE);
  if (r.chance(0.5)) await call(Command.DMA_UNMAP, un);
  s.checker.keepResults = false;
}
