// The transport seam (libvfio-user's tran_*): something that delivers whole vfio-user messages
// with their fds and sends whole messages with fds. The protocol code above it never sees
// sockets. SocketTransport works on any connected AF_UNIX stream fd: an accepted QEMU
// connection, a client connection, or one end of a socketpair in tests.

import { native, EAGAIN } from '../native.ts';
import { logger } from '../log.ts';
import { FramingError, MessageFramer, SCM_MAX_FD, type IncomingMessage } from './framing.ts';

const NO_REPLY = 0x10; // MsgFlag.NO_REPLY (protocol.ts)

function monoMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

function sameId(a: { msgId: number; command: number; size: number; flags: number }, m: IncomingMessage): boolean {
  return a.msgId === m.msgId && a.command === m.command && a.size === m.size && a.flags === m.flags;
}

export type CloseKind = 'eof' | 'error' | 'framing' | 'local';

export interface CloseReason {
  kind: CloseKind;
  message: string;
  errno?: number;
}

/**
 * What a successor knows about a request it finds queued on an adopted connection
 * (docs/architecture.md "Surviving a restart"). Given to the sink with the first request after
 * adoption and with every request whose arrival time the keeper sampled.
 */
export interface Recovery {
  /** Where the dead server's journal was on this very request ('none': not on it). */
  slot: 'none' | 'seen' | 'intent' | 'replied';
  /** The adopted checkpoint already holds this request's effects. */
  applied: boolean;
  /** How long the request has been waiting, ms, when known. */
  waitedMs: number | null;
}

/** The per-connection request journal the transport keeps in peek mode (src/persist/journal.ts
 * implements it in shared memory). */
export interface RequestJournal {
  seen(msgId: number, command: number, size: number, flags: number, seenAt: number): void;
  intent(): void;
  replied(): void;
  /** Replied requests left in the socket (bytes), and the first of them when it starts one. */
  backlog(bytes: number, first: { msgId: number; command: number; size: number; flags: number } | null): void;
  /** The backlog (n requests) left the socket. */
  backlogConsumed(n: number): void;
  /** The slot's state word in shared memory: when present, the addon's sendmsg marks "reply
   * intended" and "replied" itself, right around the syscall (the narrowest window a kill can
   * fall into). */
  readonly stateWord?: Uint32Array;
}

/** Adoption of a connection from a dead (or upgraded) server. */
export interface AdoptedConnection {
  /** The journal slot as the previous server left it. */
  slot: {
    state: 'idle' | 'seen' | 'intent' | 'replied'; msgId: number; command: number; size: number; flags: number; seenAt: number;
    /** Bytes of replied requests the dead server left at the head of the socket, and the first
     * of them (journal version 2; absent or 0: none). */
    backlogBytes?: number;
    backlogFirst?: { msgId: number; command: number; size: number; flags: number };
  };
  /** The request the adopted checkpoint says was being handled (its effects are in it). */
  applied: { msgId: number; command: number; size: number; flags: number } | null;
  /** Monotonic ms at which queued requests were first seen (keeper samples), in queue order. */
  arrivals: number[];
}

export interface TransportSink {
  /** One complete message. `msg` and its buffer are only valid during the call. `recovery` is
   * given for requests found queued on an adopted connection. */
  onMessage(msg: IncomingMessage, recovery?: Recovery): void;
  /** Called once, after the fd is closed. */
  onClose(reason: CloseReason): void;
}

export interface Transport {
  readonly name: string;
  readonly closed: boolean;
  start(sink: TransportSink): void;
  /** Send one whole message (header + payload) and its fds. The caller keeps ownership of the
   * fds (the kernel duplicates them; a transport that queues a message keeps using them until
   * it is out, so they must stay open). Returns false if the stream failed; the transport is
   * closed then. `data` may be reused by the caller once this returns. */
  send(data: Uint8Array, fds?: number[]): boolean;
  close(message?: string): void;
  /** Process whatever is readable now (pending messages, EOF) without waiting for the poller. */
  pump(): void;
}

export interface SocketTransportOptions {
  name: string;
  maxMessageSize: number;
  /** Most fds one message may carry (the rest are closed and the message flagged). */
  maxFdsPerMessage?: number;
  /**
   * Never wait for room in the socket (a server on the shared JS thread): a message that does
   * not fit is queued with its fds (which must stay open until it is out), incoming messages
   * are not handled until the queue is out (so it holds at most one reply), and a peer that
   * leaves it unread for `unreadTimeoutMs` is dropped. Default false: send waits for room
   * (up to 2 s, then the connection fails), as a client may.
   */
  queueSends?: boolean;
  /** With queueSends: how long a queued message may wait without progress (default 5000). */
  unreadTimeoutMs?: number;
  /**
   * Journalled reads: requests are read with MSG_PEEK and consumed from the socket only after
   * their reply is out (or, for posted writes, once handled), and every step is recorded here,
   * so a successor process finds an unanswered request still queued (src/persist/journal.ts).
   */
  journal?: RequestJournal;
  /** The connection is adopted from a previous server: what it left behind. */
  adopted?: AdoptedConnection;
}

interface Queued {
  data: Uint8Array; // a copy
  fds: number[] | undefined; // sent with the first byte
  sent: number;
}

const READABLE = 1;
const WRITABLE = 2;

// Bound on recvmsg calls per readiness callback, so one busy connection cannot starve the
// others on the JS thread (uv_poll is level-triggered: we are called again).
const MAX_READS_PER_WAKEUP = 32;
// Replied requests are consumed from the socket in batches (src/persist/journal.ts): after a
// reply the server must go idle at once, since the reply wakes the client on the server's CPU
// (a UNIX socket's sync wake-up) — consuming each request after its reply made every trapped
// access slower (bench/restart.ts mmioInProcess; docs/architecture.md, "Surviving a restart").
// Bounded well below what the socket holds
// (its sender's buffer: ~200 small messages).
const BACKLOG_MAX_REQUESTS = 32;
const BACKLOG_MAX_BYTES = 16384;
// Linux SCM_MAX_FD: the receive side never truncates control data.
const MAX_FDS_PER_READ = SCM_MAX_FD;

export class SocketTransport implements Transport {
  readonly name: string;
  private readonly fd: number;
  private readonly framer: MessageFramer;
  private readonly fdsOut = new Int32Array(1 + MAX_FDS_PER_READ);
  private watchHandle = -1;
  private sink: TransportSink | null = null;
  private isClosed = false;
  private readonly queueSends: boolean;
  private readonly unreadTimeoutMs: number;
  private readonly queue: Queued[] = [];
  private stallTimer: NodeJS.Timeout | null = null;
  // Peek mode (journal): bytes of the request being handled, still to be consumed from the
  // socket once its reply is out.
  private readonly journal: RequestJournal | null;
  private readonly peek: boolean;
  private pendingConsume = 0;
  /** The request being handled (peek mode): it joins the backlog once replied. */
  private readonly head = { msgId: 0, command: 0, size: 0, flags: 0, fds: false };
  /** Replied requests still in the socket ahead of the next one (peek mode). */
  private backlogBytes = 0;
  private backlogCount = 0;
  private suspended = false;
  private delivered = 0;
  private adopted: AdoptedConnection | null;
  private scratch: Uint8Array | null = null;
  private readonly deliver = (msg: IncomingMessage): void => {
    if (this.peek) this.deliverJournalled(msg);
    else this.sink!.onMessage(msg);
  };

  constructor(fd: number, opts: SocketTransportOptions) {
    this.fd = fd;
    this.name = opts.name;
    this.framer = new MessageFramer({ maxMessageSize: opts.maxMessageSize, maxFdsPerMessage: opts.maxFdsPerMessage });
    this.queueSends = opts.queueSends ?? false;
    this.unreadTimeoutMs = opts.unreadTimeoutMs ?? 5000;
    this.journal = opts.journal ?? null;
    this.peek = this.journal !== null;
    this.adopted = opts.adopted ?? null;
  }

  /** Bytes of queued messages not yet in the socket (queueSends only). */
  get queuedBytes(): number {
    let n = 0;
    for (const q of this.queue) n += q.data.length - q.sent;
    return n;
  }

  get closed(): boolean {
    return this.isClosed;
  }

  start(sink: TransportSink): void {
    if (this.sink) throw new Error('transport already started');
    this.sink = sink;
    // The peek offset belongs to the socket, not to us: a dead predecessor (or the keeper,
    // sampling arrivals) may have left it anywhere. Nothing of this connection is buffered yet.
    if (this.peek && native.setPeekOffset(this.fd, 0) < 0) throw new Error(`${this.name}: SO_PEEK_OFF is not supported`);
    if (this.peek && this.adopted && (this.adopted.slot.backlogBytes ?? 0) > 0) this.discardBacklog(this.adopted);
    this.watchHandle = native.watch(this.fd, (status, events) => this.onReady(status, events));
  }

  /** Peek mode: journal the request, hand it over, and consume it once its reply is out. */
  private deliverJournalled(msg: IncomingMessage): void {
    const j = this.journal!;
    const k = this.delivered++;
    let recovery: Recovery | undefined;
    let seenAt = monoMs();
    const a = this.adopted;
    if (a !== null) {
      let slot: Recovery['slot'] = 'none';
      let applied = false;
      let first: number | undefined = a.arrivals[k];
      if (k === 0 && a.slot.state !== 'idle' && sameId(a.slot, msg)) {
        slot = a.slot.state;
        first = first === undefined ? a.slot.seenAt : Math.min(first, a.slot.seenAt);
        applied = a.applied !== null && sameId(a.applied, msg);
      }
      if (first !== undefined) seenAt = first;
      // Only requests the journal or the keeper know something about; the rest are fresh.
      if (slot !== 'none' || first !== undefined) recovery = { slot, applied, waitedMs: first === undefined ? null : monoMs() - first };
      if (k + 1 >= a.arrivals.length) this.adopted = null; // later requests are fresh
    }
    j.seen(msg.msgId, msg.command, msg.size, msg.flags, seenAt);
    this.pendingConsume = msg.size;
    const h = this.head;
    h.msgId = msg.msgId;
    h.command = msg.command;
    h.size = msg.size;
    h.flags = msg.flags;
    h.fds = msg.fds.length > 0;
    if (recovery) this.sink!.onMessage(msg, recovery);
    else this.sink!.onMessage(msg);
    if (this.isClosed || this.queue.length > 0) return; // retired once the queued reply is out
    if ((msg.flags & NO_REPLY) !== 0 || recovery !== undefined) j.replied();
    this.retire();
  }

  /** The handled request (replied) joins the backlog; the backlog leaves the socket when it is
   * full, or at once behind a request that carried fds or many bytes (rare: maps, IRQ setup),
   * whose originals the socket still holds. */
  private retire(): void {
    const size = this.pendingConsume;
    if (size === 0) return;
    this.pendingConsume = 0;
    this.journal!.backlog(this.backlogBytes + size, this.backlogCount === 0 ? this.head : null);
    this.backlogBytes += size;
    this.backlogCount++;
    if (this.head.fds || this.backlogCount >= BACKLOG_MAX_REQUESTS || this.backlogBytes >= BACKLOG_MAX_BYTES) this.consumeBacklog();
  }

  /** Remove the backlog's bytes (and the original fds, whose duplicates the peek delivered)
   * from the socket. */
  private consumeBacklog(): void {
    const n = this.backlogCount;
    if (!this.drop(this.backlogBytes, null)) return;
    this.backlogBytes = 0;
    this.backlogCount = 0;
    this.journal!.backlogConsumed(n);
  }

  /** Read `bytes` off the socket, closing the fds that come with them; count the messages in
   * them when `headers` is given (their sizes). False if the socket failed (it is shut). */
  private drop(bytes: number, headers: { count: number; at: number } | null): boolean {
    let left = bytes;
    if (this.scratch === null) this.scratch = new Uint8Array(65536);
    let pos = 0; // stream offset of scratch[0] within the dropped bytes
    while (left > 0) {
      const n = native.recvmsg(this.fd, this.scratch.subarray(0, Math.min(left, this.scratch.length)), this.fdsOut);
      if (n <= 0) {
        // The bytes were peeked, so they are queued: anything else means the socket is broken.
        this.shutdown({ kind: 'error', message: `consuming handled requests failed (${n})`, errno: n < 0 ? -n : undefined });
        return false;
      }
      const count = this.fdsOut[0]!;
      for (let i = 1; i <= count; i++) native.close(this.fdsOut[i]!);
      if (headers) {
        // Each message starts with its header; its size (u32 at +4) says where the next one does.
        while (headers.at + 8 <= pos + n) {
          if (headers.at < pos) break; // a header split across reads: not counted (arrivals only)
          const size = this.scratch[headers.at - pos + 4]! | (this.scratch[headers.at - pos + 5]! << 8) |
            (this.scratch[headers.at - pos + 6]! << 16) | (this.scratch[headers.at - pos + 7]! << 24);
          if (size < 16) break;
          headers.count++;
          headers.at += size;
        }
      }
      pos += n;
      left -= n;
    }
    return true;
  }

  /**
   * Adopted with a backlog: if the first request of it is still at the head of the socket, the
   * dead server had replied to all of it and not consumed it — drop it without replying (and
   * the keeper's arrival samples for it). Otherwise the batch had left the socket already.
   */
  private discardBacklog(a: AdoptedConnection): void {
    const first = a.slot.backlogFirst;
    const probe = new Uint8Array(16);
    const n = native.recvmsg(this.fd, probe, this.fdsOut, true);
    for (let i = 1; i <= Math.max(0, this.fdsOut[0]!); i++) native.close(this.fdsOut[i]!); // peeked duplicates
    native.setPeekOffset(this.fd, 0);
    const dv = new DataView(probe.buffer);
    const at = n < 16 ? null : { msgId: dv.getUint16(0, true), command: dv.getUint16(2, true), size: dv.getUint32(4, true), flags: dv.getUint32(8, true) };
    if (!at || !first || at.msgId !== first.msgId || at.command !== first.command || at.size !== first.size || at.flags !== first.flags) {
      this.journal!.backlogConsumed(0); // it had left the socket
      return;
    }
    const headers = { count: 0, at: 0 };
    if (!this.drop(a.slot.backlogBytes!, headers)) return;
    this.journal!.backlogConsumed(headers.count);
    logger.info({ transport: this.name, requests: headers.count, bytes: a.slot.backlogBytes }, 'adopted connection: dropped the replied requests the previous server left queued');
    this.adopted = { ...a, arrivals: a.arrivals.slice(headers.count) };
  }

  send(data: Uint8Array, fds?: number[]): boolean {
    if (this.isClosed) return false;
    const withFds = fds !== undefined && fds.length > 0 ? fds : undefined;
    const journalled = this.peek && this.pendingConsume > 0;
    const word = journalled ? this.journal!.stateWord : undefined;
    if (journalled && word === undefined) this.journal!.intent();
    if (!this.queueSends) {
      const r = native.sendmsg(this.fd, data, withFds, undefined, word);
      if (r === data.length) {
        if (journalled && word === undefined) this.journal!.replied();
        return true;
      }
      // The addon waits (bounded) for buffer space; anything short of a whole message leaves
      // the stream out of frame, so the connection is over.
      return this.failSend(r);
    }
    if (this.queue.length > 0) {
      this.enqueue(data, withFds, 0);
      return true;
    }
    const r = native.sendmsg(this.fd, data, withFds, 0, word);
    if (r === data.length) {
      if (journalled && word === undefined) this.journal!.replied();
      return true;
    }
    if (r === -EAGAIN) this.enqueue(data, withFds, 0);
    else if (r > 0) this.enqueue(data, undefined, r); // the fds went with the first bytes
    else return this.failSend(r);
    return true;
  }

  private failSend(r: number): false {
    this.shutdown({ kind: 'error', message: `sendmsg failed (${r})`, errno: r < 0 ? -r : undefined });
    return false;
  }

  /** The peer is not reading: keep the rest of the message, stop handling its requests, wait
   * for room (and drop the peer if none comes). */
  private enqueue(data: Uint8Array, fds: number[] | undefined, sent: number): void {
    this.queue.push({ data: data.slice(), fds: fds?.slice(), sent });
    if (this.queue.length > 1) return;
    this.framer.pause();
    if (this.watchHandle >= 0) native.watchEvents(this.watchHandle, WRITABLE);
    this.armStallTimer();
  }

  private armStallTimer(): void {
    if (this.stallTimer !== null) clearTimeout(this.stallTimer);
    this.stallTimer = setTimeout(() => {
      this.stallTimer = null;
      this.shutdown({ kind: 'error', message: `peer left ${this.queuedBytes} bytes of replies unread for ${this.unreadTimeoutMs} ms` });
    }, this.unreadTimeoutMs);
    this.stallTimer.unref();
  }

  /** Writable again: send what is queued; once it is out, handle requests again. */
  private flush(): void {
    while (this.queue.length > 0 && !this.isClosed) {
      const q = this.queue[0]!;
      const r = native.sendmsg(this.fd, q.data.subarray(q.sent), q.sent === 0 ? q.fds : undefined, 0);
      if (r === -EAGAIN) return;
      if (r <= 0) {
        this.failSend(r);
        return;
      }
      q.sent += r;
      this.armStallTimer(); // progress: the peer is reading
      if (q.sent < q.data.length) return;
      this.queue.shift();
    }
    if (this.isClosed) return;
    if (this.stallTimer !== null) clearTimeout(this.stallTimer);
    this.stallTimer = null;
    if (this.peek && this.pendingConsume > 0) {
      this.journal!.replied();
      this.retire();
      if (this.isClosed) return;
    }
    if (this.suspended) {
      if (this.watchHandle >= 0) native.unwatch(this.watchHandle);
      this.watchHandle = -1;
      return;
    }
    if (this.watchHandle >= 0) native.watchEvents(this.watchHandle, READABLE);
    // Messages already read but held back; handling them may queue a reply (and pause) again.
    try {
      this.framer.resume(this.deliver);
    } catch (err) {
      this.onCommitError(err);
    }
  }

  close(message = 'closed locally'): void {
    this.shutdown({ kind: 'local', message });
  }

  /** Stop reading (a live upgrade hands the connection over): nothing more is handled until
   * resume(); the fd stays open. Replies still queued keep going out. */
  suspend(): void {
    if (this.isClosed || this.watchHandle < 0 || this.suspended) return;
    this.suspended = true;
    if (this.queue.length === 0) {
      native.unwatch(this.watchHandle);
      this.watchHandle = -1;
    }
  }

  /** Read again after suspend() (the upgrade was abandoned). */
  resume(): void {
    if (this.isClosed || !this.suspended) return;
    this.suspended = false;
    if (this.watchHandle < 0) this.watchHandle = native.watch(this.fd, (status, events) => this.onReady(status, events));
  }

  /** Nothing waits to go out and no request is half handled. */
  get quiet(): boolean {
    return this.queue.length === 0 && this.pendingConsume === 0;
  }

  pump(): void {
    if (this.sink !== null && !this.suspended) this.onReady(0, this.queue.length > 0 ? WRITABLE : READABLE);
  }

  private onReady(status: number, events: number): void {
    if (this.isClosed) return;
    if (this.suspended && this.queue.length === 0) return;
    if (this.queue.length > 0) {
      // Only writability matters while a reply waits (requests are not read meanwhile); a
      // peer that went away shows up as a send error.
      if ((events & WRITABLE) !== 0 || status < 0) this.flush();
      if (status < 0) this.shutdown({ kind: 'error', message: `poll error ${status}`, errno: -status });
      return;
    }
    // libuv reports EPOLLERR as UV_EBADF and stops the watcher. For a UNIX socket that means
    // the peer went away with data unread (ECONNRESET): read what is left, which yields the
    // real error or EOF, then close in any case.
    this.readSome(status < 0 ? Infinity : MAX_READS_PER_WAKEUP);
    if (status < 0) this.shutdown({ kind: 'error', message: `poll error ${status}`, errno: -status });
  }

  private readSome(maxReads: number): void {
    for (let i = 0; i < maxReads && !this.isClosed && this.queue.length === 0; i++) {
      const space = this.framer.space();
      const n = native.recvmsg(this.fd, space, this.fdsOut, this.peek);
      if (n === -EAGAIN) return;
      if (n < 0) {
        this.shutdown({ kind: 'error', message: `recvmsg failed (${n})`, errno: -n });
        return;
      }
      if (n === 0) {
        this.shutdown({ kind: 'eof', message: 'peer closed the connection' });
        return;
      }
      const count = this.fdsOut[0]!;
      if (count < 0) {
        // Control data truncated: some fds are lost and the rest cannot be attributed.
        this.shutdown({ kind: 'framing', message: 'received fds were truncated' });
        return;
      }
      const fds = count > 0 ? Array.from(this.fdsOut.subarray(1, 1 + count)) : null;
      try {
        this.framer.commit(n, fds, this.deliver);
      } catch (err) {
        this.onCommitError(err);
        return;
      }
      // A short read means drained (or stopped at an fd boundary: poll calls again).
      if (n < space.length && maxReads !== Infinity) return;
    }
  }

  private onCommitError(err: unknown): void {
    if (err instanceof FramingError) {
      this.shutdown({ kind: 'framing', message: err.message });
    } else {
      logger.error({ err, transport: this.name }, 'message handler threw; dropping connection');
      this.shutdown({ kind: 'error', message: `handler error: ${(err as Error).message}` });
    }
  }

  private shutdown(reason: CloseReason): void {
    if (this.isClosed) return;
    this.isClosed = true;
    if (this.stallTimer !== null) clearTimeout(this.stallTimer);
    this.stallTimer = null;
    this.queue.length = 0;
    this.framer.fail();
    if (this.watchHandle >= 0) native.unwatch(this.watchHandle);
    this.watchHandle = -1;
    native.close(this.fd);
    for (const fd of this.framer.takeUndeliveredFds()) native.close(fd);
    this.sink?.onClose(reason);
  }
}
