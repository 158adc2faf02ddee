// The vfio-user server: one process object listening on any number of UNIX sockets, one per
// device (one per VM). Each accepted connection becomes an Endpoint bound to that socket's
// device. One client at a time per device: a second connection is refused (closed) while the
// first is alive. When a client goes away the device loses its maps and IRQ fds, is reset, and
// the socket accepts the next client; `Listener.idle()` / `onClientGone()` tell when that is.

import { rmSync } from 'node:fs';
import { native, EAGAIN } from '../native.ts';
import { logger } from '../log.ts';
import { PciDevice } from './device.ts';
import type { DeviceDeclaration } from './declaration.ts';
import { Endpoint, maxMessageSize } from './endpoint.ts';
import { SocketTransport, type CloseReason } from './transport.ts';
import { DEFAULT_SERVER_CAPS, type ServerCapabilities } from './version.ts';
import { DEFAULT_LIMITS, LogBudget, type ServerLimits } from './limits.ts';

export interface ServerOptions {
  caps?: ServerCapabilities;
  /** Per-client resource limits (DEFAULT_LIMITS for what is not given). */
  limits?: Partial<ServerLimits>;
}

/** What `onClientGone` hooks receive. */
export interface ClientGone {
  /** Connection name (`<path>#<n>`). */
  connection: string;
  reason: CloseReason;
}

export class Listener {
  readonly path: string;
  readonly device: PciDevice;
  private readonly server: Server;
  private readonly fd: number;
  private watchHandle: number;
  private current: Endpoint | null = null;
  private connections = 0;
  private closed = false;
  private readonly goneHooks: ((gone: ClientGone) => void)[] = [];
  private readonly refusals = new LogBudget(DEFAULT_LIMITS.logBurst, DEFAULT_LIMITS.logPerSecond);
  private idleWaiters: (() => void)[] = [];

  constructor(server: Server, path: string, device: PciDevice) {
    this.server = server;
    this.path = path;
    this.device = device;
    const fd = native.listenUnix(path, 4);
    if (fd < 0) throw new Error(`listen on ${path} failed: errno ${-fd}`);
    this.fd = fd;
    this.watchHandle = native.watch(fd, (status) => this.onAcceptable(status));
    logger.info({ device: device.name, path }, 'vfio-user socket listening');
  }

  /** The connected endpoint, if a client is attached. */
  get endpoint(): Endpoint | null {
    return this.current;
  }

  /** Number of connections accepted so far. */
  get accepted(): number {
    return this.connections;
  }

  /**
   * Resolves once no client is connected: at once if none is, else when the current client's
   * connection is gone and its state released (DMA maps, IRQ fds, device reset), so the socket
   * accepts the next client. For tools that reconnect right after a client (QEMU) exits.
   */
  idle(): Promise<void> {
    if (this.current === null) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Call `hook` each time a client's connection is gone (after its state was released).
   * Returns a function that removes the hook. Hook errors are logged, never thrown. */
  onClientGone(hook: (gone: ClientGone) => void): () => void {
    this.goneHooks.push(hook);
    return () => {
      const i = this.goneHooks.indexOf(hook);
      if (i >= 0) this.goneHooks.splice(i, 1);
    };
  }

  /** Stop listening and drop the client (if any). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    native.unwatch(this.watchHandle);
    this.watchHandle = -1;
    native.close(this.fd);
    rmSync(this.path, { force: true });
    this.current?.close('server shutting down');
    this.device.dispose();
    logger.info({ device: this.device.name, path: this.path }, 'vfio-user socket closed');
  }

  private onAcceptable(status: number): void {
    if (this.closed) return;
    if (status < 0) {
      logger.error({ path: this.path, status }, 'listening socket poll error');
      return;
    }
    for (;;) {
      const fd = native.accept(this.fd);
      if (fd === -EAGAIN) return;
      if (fd < 0) {
        logger.error({ path: this.path, errno: -fd }, 'accept failed');
        return;
      }
      // The previous client may be gone with its EOF not yet seen (a QEMU restarted right after
      // being killed): let its connection catch up first.
      if (this.current !== null) this.current.transport.pump();
      if (this.current !== null) {
        if (this.refusals.take()) {
          const suppressed = this.refusals.suppressed();
          logger.warn({ device: this.device.name, path: this.path, ...(suppressed > 0 && { suppressedWarnings: suppressed }) }, 'refusing a second client while one is connected');
        }
        native.close(fd);
        continue;
      }
      this.connections++;
      const name = `${this.path}#${this.connections}`;
      const caps = this.server.caps;
      const transport = new SocketTransport(fd, {
        name,
        maxMessageSize: maxMessageSize(caps),
        maxFdsPerMessage: caps.maxMsgFds,
        queueSends: true, // never wait on a client: this thread serves every VM
        unreadTimeoutMs: this.server.limits.unreadReplyMs,
      });
      const ep = new Endpoint(this.device, transport, {
        caps,
        limits: this.server.limits,
        onClose: (reason) => this.clientGone(ep, name, reason),
      });
      this.current = ep;
      logger.info({ device: this.device.name, connection: name }, 'client connected');
      ep.start();
    }
  }

  private clientGone(ep: Endpoint, connection: string, reason: CloseReason): void {
    if (this.current !== ep) return;
    this.current = null;
    for (const hook of this.goneHooks.slice()) {
      try {
        hook({ connection, reason });
      } catch (err) {
        logger.error({ err, device: this.device.name, connection }, 'onClientGone hook threw');
      }
    }
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }
}

export class Server {
  readonly caps: ServerCapabilities;
  readonly limits: ServerLimits;
  private readonly listeners = new Map<string, Listener>();

  constructor(opts: ServerOptions = {}) {
    this.caps = opts.caps ?? DEFAULT_SERVER_CAPS;
    this.limits = { ...DEFAULT_LIMITS, ...opts.limits };
  }

  /** Serve a device on a UNIX socket path (a stale socket file is replaced). */
  listen(path: string, device: PciDevice | DeviceDeclaration): Listener {
    if (this.listeners.has(path)) throw new Error(`already listening on ${path}`);
    const dev = device instanceof PciDevice ? device : new PciDevice(device);
    const l = new Listener(this, path, dev);
    this.listeners.set(path, l);
    return l;
  }

  listener(path: string): Listener | undefined {
    return this.listeners.get(path);
  }

  /** Stop serving one path. */
  unlisten(path: string): void {
    this.listeners.get(path)?.close();
    this.listeners.delete(path);
  }

  close(): void {
    for (const l of this.listeners.values()) l.close();
    this.listeners.clear();
  }
}
