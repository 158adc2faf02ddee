// An in-memory Transport (libvfio-user's tran_pipe): the peer hands bytes in with receive() and
// gets the endpoint's messages through a callback. No socket, no syscalls on the data path, so
// a fuzz driver can push hundreds of thousands of messages a second through the real Endpoint,
// and tests can script exact byte splits. fds (optional) are plain numbers handed over with
// receive(); they are attributed the way a socket read attributes them (to the message holding
// the chunk's last byte).

import { native } from '../native.ts';
import { logger } from '../log.ts';
import { FramingError, MessageFramer, type IncomingMessage } from './framing.ts';
import type { CloseReason, Transport, TransportSink } from './transport.ts';

export interface MemoryTransportOptions {
  name?: string;
  maxMessageSize: number;
  maxFdsPerMessage?: number;
  /** Each message the endpoint sends. `data` is only valid during the call; `fds` stay owned
   * by the endpoint (dup or ignore them, do not close them). */
  onSend(data: Uint8Array, fds: readonly number[]): void;
}

const NO_FDS: readonly number[] = Object.freeze([]);

export class MemoryTransport implements Transport {
  readonly name: string;
  private readonly framer: MessageFramer;
  private readonly onSend: (data: Uint8Array, fds: readonly number[]) => void;
  private sink: TransportSink | null = null;
  private isClosed = false;
  private readonly deliver = (msg: IncomingMessage): void => {
    this.sink!.onMessage(msg);
  };

  constructor(opts: MemoryTransportOptions) {
    this.name = opts.name ?? 'memory';
    this.onSend = opts.onSend;
    this.framer = new MessageFramer({ maxMessageSize: opts.maxMessageSize, maxFdsPerMessage: opts.maxFdsPerMessage });
  }

  get closed(): boolean {
    return this.isClosed;
  }

  start(sink: TransportSink): void {
    if (this.sink) throw new Error('transport already started');
    this.sink = sink;
  }

  /**
   * Bytes from the peer, handled synchronously (replies go out through onSend before this
   * returns). The transport owns `fds` from here on, also when it is closed (they are closed
   * then). Returns false if the connection is closed (now or before).
   */
  receive(bytes: Uint8Array, fds?: number[]): boolean {
    if (this.isClosed || this.sink === null) {
      if (fds) for (const fd of fds) native.close(fd);
      return false;
    }
    if (bytes.length === 0) {
      if (fds) for (const fd of fds) native.close(fd);
      return true;
    }
    try {
      this.framer.push(bytes, fds && fds.length > 0 ? fds : null, this.deliver);
    } catch (err) {
      if (err instanceof FramingError) {
        this.shutdown({ kind: 'framing', message: err.message });
      } else {
        logger.error({ err, transport: this.name }, 'message handler threw; dropping connection');
        this.shutdown({ kind: 'error', message: `handler error: ${(err as Error).message}` });
      }
    }
    return !this.isClosed;
  }

  /** The peer hung up (EOF). */
  end(): void {
    this.shutdown({ kind: 'eof', message: 'peer closed the connection' });
  }

  send(data: Uint8Array, fds?: number[]): boolean {
    if (this.isClosed) return false;
    this.onSend(data, fds ?? NO_FDS);
    return true;
  }

  close(message = 'closed locally'): void {
    this.shutdown({ kind: 'local', message });
  }

  pump(): void {}

  private shutdown(reason: CloseReason): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.framer.fail();
    for (const fd of this.framer.takeUndeliveredFds()) native.close(fd);
    this.sink?.onClose(reason);
  }
}
