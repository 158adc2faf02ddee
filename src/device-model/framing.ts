// Reassembles vfio-user messages from a byte stream that arrives in arbitrary pieces (a message
// split over several reads, or several messages in one read) and ties received fds to the
// message they were sent with.
//
// fd attribution: the sender puts a message's fds on the sendmsg that carries its first bytes,
// and a Linux stream recvmsg stops right after the segment that carried fds. So the fds of a
// read belong to the message that contains the read's *last* byte. This holds whether the read
// starts mid-message, holds complete fd-less messages before the fd-carrying one, or is one byte.
//
// Memory a client can make us hold is bounded: the buffer grows only for a msg_size within the
// limit (an impossible one is rejected once the header is complete, before any allocation), and
// a message keeps at most `maxFdsPerMessage` fds; further fds are closed on arrival and the
// message is flagged (`droppedFds`) so the endpoint rejects it.

import { native } from '../native.ts';
import { HEADER_SIZE } from './protocol.ts';

/** A complete message as the framer hands it out. Reused between messages: copy what you keep. */
export interface IncomingMessage {
  /** Buffer holding the message; valid only during the onMessage call. */
  buf: Uint8Array;
  /** DataView over `buf` (same offsets). */
  dv: DataView;
  /** Absolute offset of the header in `buf`. */
  at: number;
  msgId: number;
  command: number;
  size: number;
  flags: number;
  error: number;
  /** Absolute offset of the payload in `buf` (at + 16). */
  payload: number;
  /** Payload length (size - 16). */
  payloadLength: number;
  /** fds received with this message. Handlers take ownership by setting an entry to -1; the
   * endpoint closes whatever is left (libvfio-user "closing unexpected fd"). */
  fds: number[];
  /** fds beyond maxFdsPerMessage that came with this message (already closed). */
  droppedFds: number;
}

export class FramingError extends Error {}

function closeAll(fds: number[] | null): void {
  if (fds) for (const fd of fds) native.close(fd);
}

const EMPTY_FDS: number[] = [];
Object.freeze(EMPTY_FDS);

interface PendingFds {
  at: number; // stream position of the message start
  fds: number[];
  dropped: number;
}

/** Linux SCM_MAX_FD: the most fds one sendmsg can carry. */
export const SCM_MAX_FD = 253;

export interface FramerOptions {
  /** Largest acceptable msg_size, header included. */
  maxMessageSize: number;
  /** Most fds kept for one message (default SCM_MAX_FD); the rest are closed on arrival. */
  maxFdsPerMessage?: number;
  /** Initial buffer size (grows up to maxMessageSize for big messages). */
  initialSize?: number;
}

export class MessageFramer {
  private buf: Uint8Array;
  private dv: DataView;
  private start = 0; // buffer offset of the first unconsumed byte
  private end = 0; // buffer offset after the last received byte
  private consumed = 0; // stream position of buf[start]
  private readonly pending: PendingFds[] = [];
  private readonly maxMessageSize: number;
  private readonly maxFds: number;
  private readonly msg: IncomingMessage;
  private failed = false;
  private paused = false;

  constructor(opts: FramerOptions) {
    this.maxMessageSize = opts.maxMessageSize;
    this.maxFds = opts.maxFdsPerMessage ?? SCM_MAX_FD;
    this.buf = new Uint8Array(Math.max(HEADER_SIZE, opts.initialSize ?? 65536));
    this.dv = new DataView(this.buf.buffer);
    this.msg = {
      buf: this.buf,
      dv: this.dv,
      at: 0,
      msgId: 0,
      command: 0,
      size: 0,
      flags: 0,
      error: 0,
      payload: 0,
      payloadLength: 0,
      fds: EMPTY_FDS,
      droppedFds: 0,
    };
  }

  /** Bytes received but not yet delivered (a partial message). */
  get buffered(): number {
    return this.end - this.start;
  }

  /** Size of the receive buffer (bounded by about twice the largest message). */
  get capacity(): number {
    return this.buf.length;
  }

  /** fds held for messages not yet delivered (at most maxFdsPerMessage per message). */
  get heldFds(): number {
    let n = 0;
    for (const p of this.pending) n += p.fds.length;
    return n;
  }

  /** Where the next read should land. Grows or compacts the buffer as needed; when nothing is
   * buffered the whole buffer is returned (no allocation on the common path). */
  space(): Uint8Array {
    if (this.start === this.end) {
      this.start = this.end = 0;
      return this.buf;
    }
    // Make room for the whole partial message at `start` now rather than reading it in slivers.
    // (An impossible size is left for drain() to reject once the header is complete.)
    const size = this.partialSize();
    const need = size !== null && size >= HEADER_SIZE && size <= this.maxMessageSize ? size : HEADER_SIZE;
    if (this.start + need > this.buf.length) {
      const partial = this.end - this.start;
      if (this.start > 0 && need <= this.buf.length) {
        this.buf.copyWithin(0, this.start, this.end);
      } else {
        const grown = new Uint8Array(Math.max(need, this.buf.length * 2, partial + 1));
        grown.set(this.buf.subarray(this.start, this.end));
        this.buf = grown;
        this.dv = new DataView(grown.buffer);
        this.msg.buf = grown;
        this.msg.dv = this.dv;
      }
      this.start = 0;
      this.end = partial;
    }
    return this.buf.subarray(this.end);
  }

  /**
   * Account for `n` bytes just written into space() and the fds received with them, then deliver
   * every complete message in order. Throws FramingError on an impossible msg_size; the stream
   * cannot be resynchronised after that and the caller must drop the connection.
   */
  commit(n: number, fds: number[] | null, deliver: (msg: IncomingMessage) => void): void {
    if (this.failed) {
      closeAll(fds); // nobody else will
      throw new FramingError('framer already failed');
    }
    this.end += n;
    if (fds !== null && fds.length > 0) this.attach(fds);
    this.drain(deliver);
  }

  /** Copy bytes in (for transports that do not read into space() directly). */
  push(bytes: Uint8Array, fds: number[] | null, deliver: (msg: IncomingMessage) => void): void {
    let off = 0;
    if (bytes.length === 0 && fds && fds.length > 0) {
      closeAll(fds);
      throw new FramingError('fds without data');
    }
    let handed = false;
    try {
      while (off < bytes.length) {
        const room = this.space();
        const k = Math.min(room.length, bytes.length - off);
        room.set(bytes.subarray(off, off + k));
        off += k;
        // fds belong to the message holding the last byte of the whole chunk, so attach them
        // only with the final piece.
        handed = off === bytes.length;
        this.commit(k, handed ? fds : null, deliver);
      }
    } catch (err) {
      if (!handed) closeAll(fds); // an earlier piece failed: the fds were never attached
      throw err;
    }
  }

  /** Take every fd that was received but not delivered (for closing on teardown). */
  takeUndeliveredFds(): number[] {
    const out: number[] = [];
    for (const p of this.pending) out.push(...p.fds);
    this.pending.length = 0;
    return out;
  }

  private partialSize(): number | null {
    if (this.end - this.start < 8) return null;
    return this.dv.getUint32(this.start + 4, true);
  }

  private attach(fds: number[]): void {
    // Find the start of the message that holds the last received byte by walking the sizes of
    // the buffered messages (headers are validated again in drain()).
    let pos = this.start;
    for (;;) {
      if (this.end - pos < 8) break;
      const size = this.dv.getUint32(pos + 4, true);
      if (size < HEADER_SIZE || pos + size >= this.end) break;
      pos += size;
    }
    const at = this.consumed + (pos - this.start);
    let entry = this.pending[this.pending.length - 1];
    if (entry === undefined || entry.at !== at) {
      entry = { at, fds: [], dropped: 0 };
      this.pending.push(entry);
    }
    for (let i = 0; i < fds.length; i++) {
      if (entry.fds.length < this.maxFds) {
        entry.fds.push(fds[i]!);
      } else {
        native.close(fds[i]!);
        entry.dropped++;
      }
    }
  }

  private drain(deliver: (msg: IncomingMessage) => void): void {
    const dv = this.dv;
    while (this.end - this.start >= HEADER_SIZE) {
      const at = this.start;
      const size = dv.getUint32(at + 4, true);
      if (size < HEADER_SIZE || size > this.maxMessageSize) {
        this.failed = true;
        throw new FramingError(
          `message size ${size} out of range [${HEADER_SIZE}, ${this.maxMessageSize}] (msg_id ${dv.getUint16(at, true)}, command ${dv.getUint16(at + 2, true)})`,
        );
      }
      if (this.end - at < size) break;
      const m = this.msg;
      m.at = at;
      m.msgId = dv.getUint16(at, true);
      m.command = dv.getUint16(at + 2, true);
      m.size = size;
      m.flags = dv.getUint32(at + 8, true);
      m.error = dv.getUint32(at + 12, true);
      m.payload = at + HEADER_SIZE;
      m.payloadLength = size - HEADER_SIZE;
      m.fds = EMPTY_FDS;
      m.droppedFds = 0;
      if (this.pending.length > 0 && this.pending[0]!.at === this.consumed) {
        const p = this.pending.shift()!;
        m.fds = p.fds;
        m.droppedFds = p.dropped;
      }
      this.start += size;
      this.consumed += size;
      deliver(m);
      if (this.failed || this.paused) return; // the handler closed the connection or paused us
    }
  }

  /** Stop delivering after the current message (the owner cannot reply for now); received
   * bytes stay buffered. */
  pause(): void {
    this.paused = true;
  }

  /** Deliver what was held back by pause(). Throws FramingError like commit(). */
  resume(deliver: (msg: IncomingMessage) => void): void {
    if (!this.paused || this.failed) return;
    this.paused = false;
    this.drain(deliver);
  }

  /** Stop delivering: the owner is closing. */
  fail(): void {
    this.failed = true;
  }
}
