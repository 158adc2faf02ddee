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
import { SocketTransport, type AdoptedConnection, type CloseReason, type RequestJournal } from './transport.ts';
import { DEFAULT_SERVER_CAPS, type ClientCapabilities, type ServerCapabilities } from './version.ts';
import { DEFAULT_LIMITS, LogBudget, type ServerLimits } from './limits.ts';
import type { Durability } from '../state/persist.ts';

export interface ServerOptions {
  caps?: ServerCapabilities;
  /** Per-client resource limits (DEFAULT_LIMITS for what is not given). */
  limits?: Partial<ServerLimits>;
  /** Restartable serving (src/persist): where sockets are deposited, the request journal. */
  persistence?: ServerPersistence;
}

/**
 * What a restartable server (src/persist/serve.ts) plugs in: every socket fd is deposited with
 * the fd keeper (or systemd's fd store) under `listen:<device>` / `conn:<device>` while it is
 * open, each connection reads through its device's request journal, and the checkpoint hears
 * about handled requests and about clients coming and going.
 */
export interface ServerPersistence {
  put(key: string, fd: number): void;
  remove(key: string): void;
  /** The request journal of a device's connection (one slot per device). */
  journal(device: string): RequestJournal & { reset(): void };
  /** After a request's handler ran, before its reply (endpoint.ts EndpointOptions.handled),
   * with how soon its effect must be in the checkpoint (the device says: PciDevice.durability). */
  handled(device: string, durability: Durability): void;
  /** A client connected or went away (device state changed: checkpoint before going on). */
  clientChanged(device: string): void;
}

/** A connected client taken over from a previous server process. */
export interface AdoptedClient {
  fd: number;
  /** Negotiated with the previous server (null: VERSION not answered yet, it comes again). */
  client: ClientCapabilities | null;
  adopted: AdoptedConnection;
  /** Accepted-connection counter of the previous server (connection names stay distinct). */
  accepted?: number;
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
  private readonly persistence: ServerPersistence | null;

  /** adopt: serve on a listening socket (and a connected client) a previous server left. */
  constructor(server: Server, path: string, device: PciDevice, adopt?: { listenFd: number; conn?: AdoptedClient }) {
    this.server = server;
    this.path = path;
    this.device = device;
    this.persistence = server.persistence;
    let fd: number;
    if (adopt) {
      fd = adopt.listenFd;
      native.setNonblock(fd, true);
    } else {
      fd = native.listenUnix(path, 4);
      if (fd < 0) throw new Error(`listen on ${path} failed: errno ${-fd}`);
      this.persistence?.put(`listen:${device.name}`, fd);
    }
    this.fd = fd;
    this.watchHandle = native.watch(fd, (status) => this.onAcceptable(status));
    if (adopt?.conn) this.adoptClient(adopt.conn);
    logger.info({ device: device.name, path, adopted: adopt !== undefined }, 'vfio-user socket listening');
  }

  /** The transport options every connection of this listener gets. */
  private transportFor(fd: number, name: string, adopted?: AdoptedConnection): SocketTransport {
    const caps = this.server.caps;
    return new SocketTransport(fd, {
      name,
      maxMessageSize: maxMessageSize(caps),
      maxFdsPerMessage: caps.maxMsgFds,
      queueSends: true, // never wait on a client: this thread serves every VM
      unreadTimeoutMs: this.server.limits.unreadReplyMs,
      journal: this.persistence?.journal(this.device.name),
      adopted,
    });
  }

  private endpointFor(transport: SocketTransport, name: string, client?: ClientCapabilities): Endpoint {
    const p = this.persistence;
    const dev = this.device.name;
    const ep: Endpoint = new Endpoint(this.device, transport, {
      caps: this.server.caps,
      limits: this.server.limits,
      onClose: (reason) => this.clientGone(ep, name, reason),
      adoptedClient: client,
      handled: p ? (command, region, offset, errno) => p.handled(dev, this.device.durability(command, region, offset, errno)) : undefined,
    });
    return ep;
  }

  /** Carry on serving a client a previous server process was serving (no new handshake). */
  private adoptClient(a: AdoptedClient): void {
    native.setNonblock(a.fd, true);
    this.connections = Math.max(this.connections, a.accepted ?? 0) + 1;
    const name = `${this.path}#${this.connections}`;
    const ep = this.endpointFor(this.transportFor(a.fd, name, a.adopted), name, a.client ?? undefined);
    this.current = ep;
    logger.info({ device: this.device.name, connection: name }, 'client adopted from the previous server');
    this.startWhenReady(ep);
  }

  /** Serve ep once the device is ready for it (its messages wait in the socket until then). */
  private startWhenReady(ep: Endpoint): void {
    this.device.whenReady(() => {
      if (this.current === ep && !this.closed) ep.start();
    });
  }

  /** Stop handling requests (a live upgrade hands the connections over); see resume(). */
  suspend(): void {
    (this.current?.transport as SocketTransport | undefined)?.suspend();
  }

  resume(): void {
    (this.current?.transport as SocketTransport | undefined)?.resume();
  }

  /** No reply waits to go out and no request is half handled. */
  get quiet(): boolean {
    const t = this.current?.transport as SocketTransport | undefined;
    return t === undefined || t.quiet;
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
    this.persistence?.remove(`listen:${this.device.name}`);
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
      const p = this.persistence;
      p?.journal(this.device.name).reset();
      const ep = this.endpointFor(this.transportFor(fd, name), name);
      this.current = ep;
      logger.info({ device: this.device.name, connection: name }, 'client connected');
      p?.put(`conn:${this.device.name}`, fd);
      this.startWhenReady(ep);
      p?.clientChanged(this.device.name);
    }
  }

  private clientGone(ep: Endpoint, connection: string, reason: CloseReason): void {
    if (this.current !== ep) return;
    this.current = null;
    if (this.persistence) {
      this.persistence.remove(`conn:${this.device.name}`);
      this.persistence.journal(this.device.name).reset();
      this.persistence.clientChanged(this.device.name);
    }
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
  readonly persistence: ServerPersistence | null;
  private readonly listeners = new Map<string, Listener>();

  constructor(opts: ServerOptions = {}) {
    this.caps = opts.caps ?? DEFAULT_SERVER_CAPS;
    this.limits = { ...DEFAULT_LIMITS, ...opts.limits };
    this.persistence = opts.persistence ?? null;
  }

  /** Serve a device on a listening socket (and connected client) adopted from a previous
   * server process. */
  adopt(path: string, device: PciDevice, listenFd: number, conn?: AdoptedClient): Listener {
    if (this.listeners.has(path)) throw new Error(`already listening on ${path}`);
    const l = new Listener(this, path, device, { listenFd, conn });
    this.listeners.set(path, l);
    return l;
  }

  /** Every listener (a live upgrade suspends them all). */
  all(): Listener[] {
    return [...this.listeners.values()];
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
