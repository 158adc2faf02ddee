// The transport seam (libvfio-user's tran_*): something that delivers whole vfio-user messages
// with their fds and sends whole messages with fds. The protocol code above it never sees
// sockets. SocketTransport works on any connected AF_UNIX stream fd: an accepted QEMU
// connection, a client connection, or one end of a socketpair in tests.

import { native, EAGAIN } from '../native.ts';
import { logger } from '../log.ts';
import { FramingError, MessageFramer, SCM_MAX_FD, type IncomingMessage } from './framing.ts';

export type CloseKind = 'eof' | 'error' | 'framing' | 'local';

export interface CloseReason {
  kind: CloseKind;
  message: string;
  errno?: number;
}

export interface TransportSink {
  /** One complete message. `msg` and its buffer are only valid during the call. */
  onMessage(msg: IncomingMessage): void;
  /** Called once, after the fd is closed. */
  onClose(reason: CloseReason): void;
}

export interface Transport {
  readonly name: string;
  readonly closed: boolean;
  start(sink: TransportSink): void;
  /** Send one whole message (header + payload) and its fds in one sendmsg. The caller keeps
   * ownership of the fds (the kernel duplicates them). Returns false if the stream failed;
   * the transport is closed then. */
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
}

// Bound on recvmsg calls per readiness callback, so one busy connection cannot starve the
// others on the JS thread (uv_poll is level-triggered: we are called again).
const MAX_READS_PER_WAKEUP = 32;
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
  private readonly deliver = (msg: IncomingMessage): void => {
    this.sink!.onMessage(msg);
  };

  constructor(fd: number, opts: SocketTransportOptions) {
    this.fd = fd;
    this.name = opts.name;
    this.framer = new MessageFramer({ maxMessageSize: opts.maxMessageSize, maxFdsPerMessage: opts.maxFdsPerMessage });
  }

  get closed(): boolean {
    return this.isClosed;
  }

  start(sink: TransportSink): void {
    if (this.sink) throw new Error('transport already started');
    this.sink = sink;
    this.watchHandle = native.watch(this.fd, (status, events) => this.onReady(status, events));
  }

  send(data: Uint8Array, fds?: number[]): boolean {
    if (this.isClosed) return false;
    const r = native.sendmsg(this.fd, data, fds !== undefined && fds.length > 0 ? fds : undefined);
    if (r === data.length) return true;
    // The addon waits (bounded) for buffer space; anything short of a whole message leaves the
    // stream out of frame, so the connection is over.
    this.shutdown({ kind: 'error', message: `sendmsg failed (${r})`, errno: r < 0 ? -r : undefined });
    return false;
  }

  close(message = 'closed locally'): void {
    this.shutdown({ kind: 'local', message });
  }

  pump(): void {
    if (this.sink !== null) this.onReady(0, 1);
  }

  private onReady(status: number, _events: number): void {
    if (this.isClosed) return;
    // libuv reports EPOLLERR as UV_EBADF and stops the watcher. For a UNIX socket that means
    // the peer went away with data unread (ECONNRESET): read what is left, which yields the
    // real error or EOF, then close in any case.
    this.readSome(status < 0 ? Infinity : MAX_READS_PER_WAKEUP);
    if (status < 0) this.shutdown({ kind: 'error', message: `poll error ${status}`, errno: -status });
  }

  private readSome(maxReads: number): void {
    for (let i = 0; i < maxReads && !this.isClosed; i++) {
      const space = this.framer.space();
      const n = native.recvmsg(this.fd, space, this.fdsOut);
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
        if (err instanceof FramingError) {
          this.shutdown({ kind: 'framing', message: err.message });
        } else {
          logger.error({ err, transport: this.name }, 'message handler threw; dropping connection');
          this.shutdown({ kind: 'error', message: `handler error: ${(err as Error).message}` });
        }
        return;
      }
      // A short read means drained (or stopped at an fd boundary: poll calls again).
      if (n < space.length && maxReads !== Infinity) return;
    }
  }

  private shutdown(reason: CloseReason): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.framer.fail();
    if (this.watchHandle >= 0) native.unwatch(this.watchHandle);
    this.watchHandle = -1;
    native.close(this.fd);
    for (const fd of this.framer.takeUndeliveredFds()) native.close(fd);
    this.sink?.onClose(reason);
  }
}
