// One client connection bound to one device: decodes commands, validates them the way
// libvfio-user does, applies them to the device and sends exactly one reply per command (none
// when NO_REPLY is set). Messages are handled synchronously, so strictly in arrival order.
// Every malformed message gets a header-only error reply with a positive errno; nothing a
// client sends can throw out of here.

import { native } from '../native.ts';
import { logger } from '../log.ts';
import type { PciDevice } from './device.ts';
import type { Persist } from '../state/persist.ts';
import { restoreEndpoint, saveEndpoint, type EndpointState } from './persist.ts';
import type { IncomingMessage } from './framing.ts';
import {
  Command,
  DeviceInfoFlag,
  DmaMapFlag,
  DmaUnmapFlag,
  Errno,
  HEADER_SIZE,
  IrqInfoFlag,
  IrqIndex,
  MsgFlag,
  NUM_IRQS,
  NUM_REGIONS,
  RegionCapId,
  RegionInfoFlag,
  StructSize,
  WRITE_MULTI_DATA_MAX,
  WRITE_MULTI_MAX_ENTRIES,
  commandName,
  getU64,
  setU64,
} from './protocol.ts';
import { DEFAULT_LIMITS, LogBudget, type ServerLimits } from './limits.ts';
import type { CloseReason, Recovery, Transport } from './transport.ts';
import { DEFAULT_SERVER_CAPS, buildVersionReply, parseClientVersion, type ClientCapabilities, type ServerCapabilities } from './version.ts';

export interface EndpointOptions {
  caps?: ServerCapabilities;
  /** Per-client resource limits (defaults: DEFAULT_LIMITS). */
  limits?: Partial<ServerLimits>;
  onClose?: (reason: CloseReason) => void;
  /** Adoption: the client's capabilities negotiated with the previous server (no VERSION
   * comes again), and the device is not told about a new connection. */
  adoptedClient?: ClientCapabilities;
  /** Called after each request's handler ran (posted writes too) and before its reply goes out:
   * where effects are made durable (src/persist/checkpoint.ts). region/offset: the access of a
   * REGION_WRITE (region -1 for other commands and for WRITE_MULTI). */
  handled?: (command: number, region: number, offset: number, errno: number) => void;
}

/** How long a request found queued after a restart may have waited and still be answered:
 * QEMU gives up after its x-msg-timeout (5 s by default) and a late reply with a body puts its
 * stream out of step (../shared/notes/restart.md). */
export const LATE_REQUEST_MS = 4500;

export interface EndpointStats {
  messages: number;
  errors: number; // error replies (or errors swallowed because of NO_REPLY)
  unexpectedFds: number;
}

/** Largest message we accept: a REGION_WRITE of max_data_xfer_size plus headers, with room
 * for a full REGION_WRITE_MULTI. */
export function maxMessageSize(caps: ServerCapabilities): number {
  return caps.maxDataXferSize + HEADER_SIZE + 4096;
}

type Handler = (m: IncomingMessage) => number;

export class Endpoint implements Persist<EndpointState> {
  readonly device: PciDevice;
  readonly transport: Transport;
  readonly caps: ServerCapabilities;
  readonly limits: ServerLimits;
  client: ClientCapabilities | null = null;
  readonly stats: EndpointStats = { messages: 0, errors: 0, unexpectedFds: 0 };
  private readonly handlers: (Handler | undefined)[] = [];
  private readonly onCloseCb?: (reason: CloseReason) => void;
  // Reply assembly: one growable buffer, reused; small replies use cached views of it.
  private out = new Uint8Array(4096);
  private outDv = new DataView(this.out.buffer);
  private views: (Uint8Array | undefined)[] = [];
  private replyLen = 0; // payload bytes at out[16..]
  private replyFds: number[] | undefined;
  private errReason = '';
  private readonly logBudget: LogBudget;
  private readonly adopted: boolean;
  private readonly handledHook?: (command: number, region: number, offset: number, errno: number) => void;
  /** Requests found queued after adoption, by what was done with them. */
  readonly recovered = { handled: 0, skipped: 0, errored: 0, synthesized: 0 };

  constructor(device: PciDevice, transport: Transport, opts: EndpointOptions = {}) {
    this.device = device;
    this.transport = transport;
    this.caps = opts.caps ?? DEFAULT_SERVER_CAPS;
    this.limits = { ...DEFAULT_LIMITS, ...opts.limits };
    this.logBudget = new LogBudget(this.limits.logBurst, this.limits.logPerSecond);
    this.onCloseCb = opts.onClose;
    this.adopted = opts.adoptedClient !== undefined;
    if (opts.adoptedClient) this.client = opts.adoptedClient;
    this.handledHook = opts.handled;
    const h = this.handlers;
    h[Command.VERSION] = (m) => this.version(m);
    h[Command.DMA_MAP] = (m) => this.dmaMap(m);
    h[Command.DMA_UNMAP] = (m) => this.dmaUnmap(m);
    h[Command.DEVICE_GET_INFO] = (m) => this.getInfo(m);
    h[Command.DEVICE_GET_REGION_INFO] = (m) => this.getRegionInfo(m);
    h[Command.DEVICE_GET_REGION_IO_FDS] = () => this.fail(Errno.ENOTSUP, 'GET_REGION_IO_FDS is not supported');
    h[Command.DEVICE_GET_IRQ_INFO] = (m) => this.getIrqInfo(m);
    h[Command.DEVICE_SET_IRQS] = (m) => this.setIrqs(m);
    h[Command.REGION_READ] = (m) => this.regionRead(m);
    h[Command.REGION_WRITE] = (m) => this.regionWrite(m);
    h[Command.DMA_READ] = () => this.fail(Errno.EINVAL, 'DMA_READ is a server-to-client command');
    h[Command.DMA_WRITE] = () => this.fail(Errno.EINVAL, 'DMA_WRITE is a server-to-client command');
    h[Command.DEVICE_RESET] = () => this.reset();
    h[Command.REGION_WRITE_MULTI] = (m) => this.writeMulti(m);
    h[Command.DEVICE_FEATURE] = () => this.fail(Errno.ENOTSUP, 'DEVICE_FEATURE (migration, dirty logging) is not supported');
    h[Command.MIG_DATA_READ] = () => this.fail(Errno.ENOTSUP, 'migration is not supported');
    h[Command.MIG_DATA_WRITE] = () => this.fail(Errno.ENOTSUP, 'migration is not supported');
  }

  start(): void {
    // The DMA table belongs to the device, the limits to this client (one client at a time).
    this.device.dma.setLimits({
      maxMaps: this.caps.maxDmaMaps,
      maxBytes: this.limits.dmaBytes,
      maxFiles: this.limits.dmaFiles,
      requireSealed: this.limits.dmaRequireSealed,
    });
    if (!this.adopted) this.device.attach();
    this.transport.start({
      onMessage: (m, recovery) => this.onMessage(m, recovery),
      onClose: (reason) => this.onClose(reason),
    });
  }

  // ---- surviving a restart (how: ./persist.ts) ----

  /** The negotiated client capabilities and the counters. */
  save(): EndpointState {
    return saveEndpoint(this);
  }

  /** Into an endpoint over an adopted connection, before it handles a message: the client does
   * not negotiate again (QEMU never repeats VERSION). */
  restore(raw: unknown): void {
    restoreEndpoint(this, raw);
  }

  close(message = 'endpoint closed'): void {
    this.transport.close(message);
  }

  private onClose(reason: CloseReason): void {
    const log = reason.kind === 'eof' || reason.kind === 'local' ? logger.info.bind(logger) : logger.warn.bind(logger);
    const suppressed = this.logBudget.suppressed();
    log(
      { event: 'client-gone', device: this.device.name, transport: this.transport.name, kind: reason.kind, errno: reason.errno, ...(suppressed > 0 && { suppressedWarnings: suppressed }) },
      `client gone: ${reason.message}`,
    );
    this.device.detach(reason.message);
    this.onCloseCb?.(reason);
  }

  private onMessage(m: IncomingMessage, recovery?: Recovery): void {
    this.stats.messages++;
    this.replyLen = 0;
    this.replyFds = undefined;
    let errno: number;
    const recover = recovery ? this.recover(m, recovery) : 'handle';
    if (recover !== 'handle') {
      // Nothing runs: the previous server did (or the client gave up on) this request.
      for (let i = 0; i < m.fds.length; i++) if (m.fds[i]! >= 0) native.close(m.fds[i]!);
      if (recover === 'skip' || (m.flags & MsgFlag.NO_REPLY) !== 0) return;
      errno = recover === 'error' ? Errno.EIO : 0;
      this.sendReply(m, errno);
      return;
    }
    if (m.droppedFds > 0) {
      errno = this.fail(Errno.EINVAL, `more than max_msg_fds (${this.caps.maxMsgFds}) fds: ${m.droppedFds} closed on arrival`);
    } else if ((m.flags & MsgFlag.TYPE_MASK) !== MsgFlag.TYPE_COMMAND) {
      errno = this.fail(Errno.EINVAL, `message type ${m.flags & MsgFlag.TYPE_MASK} where a command was expected`);
    } else if (m.payloadLength === 0 && m.command !== Command.DEVICE_RESET) {
      errno = this.fail(Errno.EINVAL, 'command without payload');
    } else if (this.client === null && m.command !== Command.VERSION) {
      errno = this.fail(Errno.EINVAL, 'command before VERSION negotiation');
    } else {
      const h = this.handlers[m.command];
      if (h === undefined) {
        errno = this.fail(Errno.ENOSYS, 'unknown command');
      } else {
        try {
          errno = h(m);
        } catch (err) {
          logger.error({ err, device: this.device.name, command: commandName(m.command) }, 'command handler threw');
          errno = Errno.EIO;
          this.errReason = 'internal error';
        }
      }
    }
    // fds nobody took ownership of (libvfio-user: "closing unexpected fd").
    let stray = 0;
    for (let i = 0; i < m.fds.length; i++) {
      if (m.fds[i]! >= 0) {
        native.close(m.fds[i]!);
        stray++;
      }
    }
    if (stray > 0) {
      this.stats.unexpectedFds += stray;
      this.warn({ command: commandName(m.command), msgId: m.msgId, fds: stray }, 'closed unexpected fds');
    }
    if (errno !== 0) {
      this.stats.errors++;
      this.warn({ command: commandName(m.command), msgId: m.msgId, errno }, `rejected: ${this.errReason}`);
    }
    if (this.handledHook !== undefined) {
      let region = -1;
      let offset = 0;
      if (m.command === Command.REGION_WRITE && m.payloadLength >= StructSize.REGION_ACCESS) {
        offset = getU64(m.dv, m.payload);
        region = m.dv.getUint32(m.payload + 8, true);
      }
      try {
        this.handledHook(m.command, region, offset, errno);
      } catch (err) {
        logger.error({ err, device: this.device.name }, 'handled hook threw');
      }
    }
    if ((m.flags & MsgFlag.NO_REPLY) !== 0) return; // never reply, not even with an error
    this.sendReply(m, errno);
  }

  /**
   * A request found queued on an adopted connection (src/persist, docs/architecture.md):
   * 'skip' it (its reply went out), answer it with a header-only 'error' (it may have been
   * answered, or the client has given up on it: a reply with a body could be a duplicate),
   * 'synthesize' the success reply its handler would have sent (its effects are in the adopted
   * checkpoint; every such command's success reply is a function of the request), or 'handle'
   * it as new.
   */
  private recover(m: IncomingMessage, r: Recovery): 'skip' | 'error' | 'synthesize' | 'handle' {
    let what: 'skip' | 'error' | 'synthesize' | 'handle';
    const posted = (m.flags & MsgFlag.NO_REPLY) !== 0;
    if (r.slot === 'replied') what = 'skip';
    else if (r.slot === 'intent') what = posted ? 'skip' : 'error';
    else if (r.slot === 'seen' && r.applied) what = posted ? 'skip' : this.synthesize(m) ? 'synthesize' : 'error';
    else if (!posted && r.waitedMs !== null && r.waitedMs > LATE_REQUEST_MS) what = 'error';
    else what = 'handle';
    if (what === 'handle') this.recovered.handled++;
    else if (what === 'skip') this.recovered.skipped++;
    else if (what === 'error') this.recovered.errored++;
    else this.recovered.synthesized++;
    logger.info(
      { event: 'recovered-request', device: this.device.name, command: commandName(m.command), msgId: m.msgId, slot: r.slot, applied: r.applied, waitedMs: r.waitedMs === null ? null : Math.round(r.waitedMs), action: what },
      'request found queued after a restart',
    );
    return what;
  }

  /** Build the success reply of a state-changing command from the request alone; false for
   * commands whose reply depends on more (reads, queries). */
  private synthesize(m: IncomingMessage): boolean {
    const p = m.payload;
    switch (m.command) {
      case Command.VERSION: {
        // The checkpoint holds the negotiated caps; the reply depends only on ours and the request size.
        const reply = this.client !== null ? buildVersionReply(this.caps, m.payloadLength) : null;
        if (reply === null) return false;
        this.reserve(reply.length);
        this.out.set(reply, HEADER_SIZE);
        this.replyLen = reply.length;
        return true;
      }
      case Command.DMA_MAP:
      case Command.DEVICE_SET_IRQS:
      case Command.DEVICE_RESET:
        this.replyLen = 0;
        return true;
      case Command.DMA_UNMAP:
        if (m.payloadLength < StructSize.DMA_UNMAP) return false;
        this.out.set(m.buf.subarray(p, p + StructSize.DMA_UNMAP), HEADER_SIZE);
        this.replyLen = StructSize.DMA_UNMAP;
        return true;
      case Command.REGION_WRITE:
        if (m.payloadLength < StructSize.REGION_ACCESS) return false;
        this.echoAccess(m.dv, p);
        this.replyLen = StructSize.REGION_ACCESS;
        return true;
      case Command.REGION_WRITE_MULTI:
        if (m.payloadLength < StructSize.WRITE_MULTI_HEADER) return false;
        setU64(this.outDv, HEADER_SIZE, getU64(m.dv, p));
        this.replyLen = 8;
        return true;
      default:
        return false;
    }
  }

  private sendReply(m: IncomingMessage, errno: number): void {
    const len = HEADER_SIZE + (errno === 0 ? this.replyLen : 0);
    const dv = this.outDv;
    dv.setUint16(0, m.msgId, true);
    dv.setUint16(2, m.command, true);
    dv.setUint32(4, len, true);
    dv.setUint32(8, errno === 0 ? MsgFlag.TYPE_REPLY : MsgFlag.TYPE_REPLY | MsgFlag.ERROR, true);
    dv.setUint32(12, errno, true);
    this.transport.send(this.view(len), errno === 0 ? this.replyFds : undefined);
  }

  /** A warning about the client's input, within the connection's log budget (a hostile client
   * must not be able to fill the disk); the next line that gets through says how many were
   * dropped. */
  private warn(fields: Record<string, unknown>, msg: string): void {
    if (!logger.isLevelEnabled('warn') || !this.logBudget.take()) return;
    const suppressed = this.logBudget.suppressed();
    logger.warn({ device: this.device.name, ...fields, ...(suppressed > 0 && { suppressedWarnings: suppressed }) }, msg);
  }

  /** Record why a command failed (logged once by onMessage) and return its errno. */
  private fail(errno: number, reason: string): number {
    this.errReason = reason;
    return errno;
  }

  /** Make sure the reply buffer holds `payload` bytes after the header. */
  private reserve(payload: number): void {
    const need = HEADER_SIZE + payload;
    if (need <= this.out.length) return;
    let n = this.out.length;
    while (n < need) n *= 2;
    this.out = new Uint8Array(n);
    this.outDv = new DataView(this.out.buffer);
    this.views = [];
  }

  private view(len: number): Uint8Array {
    if (len > 64) return this.out.subarray(0, len);
    return (this.views[len] ??= this.out.subarray(0, len));
  }

  // ---- commands ---------------------------------------------------------------------------

  private version(m: IncomingMessage): number {
    if (this.client !== null) return this.fail(Errno.EINVAL, 'VERSION after negotiation');
    if (m.fds.length > 0) return this.fail(Errno.EINVAL, 'VERSION with fds');
    const parsed = parseClientVersion(m.buf.subarray(m.payload, m.payload + m.payloadLength));
    if (!parsed.ok) return this.fail(parsed.errno, parsed.reason);
    const reply = buildVersionReply(this.caps, m.payloadLength);
    if (reply === null) return this.fail(Errno.EINVAL, 'VERSION request too small for any reply');
    this.reserve(reply.length);
    this.out.set(reply, HEADER_SIZE);
    this.replyLen = reply.length;
    this.client = parsed.caps;
    logger.info({ device: this.device.name, transport: this.transport.name, client: parsed.caps }, 'vfio-user version negotiated');
    return 0;
  }

  private dmaMap(m: IncomingMessage): number {
    const dv = m.dv;
    const p = m.payload;
    if (m.payloadLength < StructSize.DMA_MAP) return this.fail(Errno.EINVAL, 'DMA_MAP payload too short');
    if (dv.getUint32(p, true) < StructSize.DMA_MAP) return this.fail(Errno.EINVAL, 'DMA_MAP argsz too small');
    if (m.fds.length > 1) return this.fail(Errno.EINVAL, 'DMA_MAP with more than one fd');
    const flags = dv.getUint32(p + 4, true);
    if ((flags & ~(DmaMapFlag.READ | DmaMapFlag.WRITE)) !== 0) return this.fail(Errno.EINVAL, `DMA_MAP flags 0x${flags.toString(16)}`);
    const fd = m.fds.length === 1 ? m.fds[0]! : -1;
    const req = {
      offset: getU64(dv, p + 8),
      addr: getU64(dv, p + 16),
      size: getU64(dv, p + 24),
      readable: (flags & DmaMapFlag.READ) !== 0,
      writable: (flags & DmaMapFlag.WRITE) !== 0,
      fd,
    };
    const e = this.device.dma.map(req);
    if (e !== 0) return this.fail(e, `DMA_MAP [0x${req.addr.toString(16)}, +0x${req.size.toString(16)}) refused`);
    if (fd >= 0) m.fds[0] = -1; // the table owns it now
    return 0;
  }

  private dmaUnmap(m: IncomingMessage): number {
    const dv = m.dv;
    const p = m.payload;
    if (m.payloadLength < StructSize.DMA_UNMAP) return this.fail(Errno.EINVAL, 'DMA_UNMAP payload too short');
    const argsz = dv.getUint32(p, true);
    if (argsz < StructSize.DMA_UNMAP || argsz > this.caps.maxDataXferSize) return this.fail(Errno.EINVAL, `DMA_UNMAP argsz ${argsz}`);
    const flags = dv.getUint32(p + 4, true);
    const addr = getU64(dv, p + 8);
    const size = getU64(dv, p + 16);
    if (flags === DmaUnmapFlag.ALL) {
      if (addr !== 0 || size !== 0) return this.fail(Errno.EINVAL, 'DMA_UNMAP_ALL with a non-zero range');
      this.device.dma.unmapAll();
    } else if (flags === 0) {
      const e = this.device.dma.unmap(addr, size);
      if (e !== 0) return this.fail(e, `DMA_UNMAP [0x${addr.toString(16)}, +0x${size.toString(16)}) matches no map`);
    } else if (flags === DmaUnmapFlag.GET_DIRTY_BITMAP) {
      return this.fail(Errno.ENOTSUP, 'dirty page tracking is not supported');
    } else {
      return this.fail(Errno.EINVAL, `DMA_UNMAP flags 0x${flags.toString(16)}`);
    }
    // Echo the 24-byte payload (cloud-hypervisor reads exactly that much).
    this.out.set(m.buf.subarray(p, p + StructSize.DMA_UNMAP), HEADER_SIZE);
    this.replyLen = StructSize.DMA_UNMAP;
    return 0;
  }

  private getInfo(m: IncomingMessage): number {
    if (m.payloadLength < StructSize.DEVICE_INFO || m.dv.getUint32(m.payload, true) < StructSize.DEVICE_INFO) {
      return this.fail(Errno.EINVAL, 'DEVICE_GET_INFO argsz too small');
    }
    const dv = this.outDv;
    dv.setUint32(HEADER_SIZE, StructSize.DEVICE_INFO, true);
    dv.setUint32(HEADER_SIZE + 4, DeviceInfoFlag.PCI | DeviceInfoFlag.RESET, true);
    dv.setUint32(HEADER_SIZE + 8, NUM_REGIONS, true);
    dv.setUint32(HEADER_SIZE + 12, NUM_IRQS, true);
    this.replyLen = StructSize.DEVICE_INFO;
    return 0;
  }

  private getRegionInfo(m: IncomingMessage): number {
    if (m.payloadLength < StructSize.REGION_INFO) return this.fail(Errno.EINVAL, 'GET_REGION_INFO payload too short');
    const argsz = m.dv.getUint32(m.payload, true);
    if (argsz < StructSize.REGION_INFO) return this.fail(Errno.EINVAL, `GET_REGION_INFO argsz ${argsz}`);
    const index = m.dv.getUint32(m.payload + 8, true);
    if (index >= NUM_REGIONS) return this.fail(Errno.EINVAL, `GET_REGION_INFO index ${index}`);
    const info = this.device.regionInfo(index);
    const capsSize = info.areas.length > 0 ? StructSize.SPARSE_MMAP_HEADER + info.areas.length * StructSize.SPARSE_MMAP_AREA : 0;
    const needed = StructSize.REGION_INFO + capsSize;
    // The reply must fit the client's buffer (argsz). If the caps do not fit, send the bare
    // struct with the argsz needed and no CAPS flag (nor fd): the client asks again.
    const fits = argsz >= needed;
    const len = fits ? needed : StructSize.REGION_INFO;
    this.reserve(len);
    const dv = this.outDv;
    const o = HEADER_SIZE;
    this.out.fill(0, o, o + len);
    dv.setUint32(o, needed, true);
    dv.setUint32(o + 4, info.flags | (fits && capsSize > 0 ? RegionInfoFlag.CAPS : 0), true);
    dv.setUint32(o + 8, index, true);
    dv.setUint32(o + 12, fits && capsSize > 0 ? StructSize.REGION_INFO : 0, true);
    setU64(dv, o + 16, info.size);
    setU64(dv, o + 24, info.fdOffset);
    if (fits && capsSize > 0) {
      const c = o + StructSize.REGION_INFO;
      dv.setUint16(c, RegionCapId.SPARSE_MMAP, true);
      dv.setUint16(c + 2, 1, true); // version
      dv.setUint32(c + 4, 0, true); // next: end of chain
      dv.setUint32(c + 8, info.areas.length, true);
      info.areas.forEach((a, i) => {
        setU64(dv, c + 16 + 16 * i, a.offset);
        setU64(dv, c + 24 + 16 * i, a.size);
      });
      this.replyFds = [info.fd];
    }
    this.replyLen = len;
    return 0;
  }

  private getIrqInfo(m: IncomingMessage): number {
    if (m.payloadLength < StructSize.IRQ_INFO || m.dv.getUint32(m.payload, true) < StructSize.IRQ_INFO) {
      return this.fail(Errno.EINVAL, 'GET_IRQ_INFO argsz too small');
    }
    const index = m.dv.getUint32(m.payload + 8, true);
    if (index >= NUM_IRQS) return this.fail(Errno.EINVAL, `GET_IRQ_INFO index ${index}`);
    const dv = this.outDv;
    dv.setUint32(HEADER_SIZE, StructSize.IRQ_INFO, true);
    dv.setUint32(HEADER_SIZE + 4, IrqInfoFlag.EVENTFD, true); // as libvfio-user: no NORESIZE
    dv.setUint32(HEADER_SIZE + 8, index, true);
    dv.setUint32(HEADER_SIZE + 12, this.device.irq.counts[index]!, true);
    this.replyLen = StructSize.IRQ_INFO;
    return 0;
  }

  private setIrqs(m: IncomingMessage): number {
    if (m.payloadLength < StructSize.IRQ_SET || m.dv.getUint32(m.payload, true) < StructSize.IRQ_SET) {
      return this.fail(Errno.EINVAL, 'SET_IRQS argsz too small');
    }
    const dv = m.dv;
    const p = m.payload;
    const req = {
      flags: dv.getUint32(p + 4, true),
      index: dv.getUint32(p + 8, true),
      start: dv.getUint32(p + 12, true),
      count: dv.getUint32(p + 16, true),
      data: m.buf.subarray(p + StructSize.IRQ_SET, p + m.payloadLength),
    };
    const e = this.device.irq.setIrqs(req, m.fds);
    if (e !== 0) {
      return this.fail(e, `SET_IRQS index ${req.index} flags 0x${req.flags.toString(16)} start ${req.start} count ${req.count} with ${m.fds.length} fds`);
    }
    if (req.index === IrqIndex.MSIX || req.index === IrqIndex.ERR) {
      logger.debug({ device: this.device.name, ...req, data: undefined, fds: m.fds.length }, 'SET_IRQS');
    }
    return 0;
  }

  /** Copy the 16-byte region access struct into the reply (no allocation). */
  private echoAccess(dv: DataView, p: number): void {
    const o = this.outDv;
    o.setUint32(HEADER_SIZE, dv.getUint32(p, true), true);
    o.setUint32(HEADER_SIZE + 4, dv.getUint32(p + 4, true), true);
    o.setUint32(HEADER_SIZE + 8, dv.getUint32(p + 8, true), true);
    o.setUint32(HEADER_SIZE + 12, dv.getUint32(p + 12, true), true);
  }

  /** Shared checks for REGION_READ / REGION_WRITE (libvfio-user is_valid_region_access). */
  private checkAccess(region: number, offset: number, count: number): number {
    if (count > this.caps.maxDataXferSize) return this.fail(Errno.EINVAL, `region access of ${count} bytes`);
    if (region >= NUM_REGIONS) return this.fail(Errno.EINVAL, `region index ${region}`);
    if (offset + count > this.device.regionSize(region)) {
      return this.fail(Errno.EINVAL, `region ${region} access [0x${offset.toString(16)}, +${count}) out of bounds`);
    }
    return 0;
  }

  private regionRead(m: IncomingMessage): number {
    if (m.payloadLength < StructSize.REGION_ACCESS) return this.fail(Errno.EINVAL, 'REGION_READ payload too short');
    const dv = m.dv;
    const p = m.payload;
    const offset = getU64(dv, p);
    const region = dv.getUint32(p + 8, true);
    const count = dv.getUint32(p + 12, true);
    const e = this.checkAccess(region, offset, count);
    if (e !== 0) return e;
    if ((this.device.regionFlags(region) & RegionInfoFlag.READ) === 0 && count > 0) {
      return this.fail(Errno.EINVAL, `region ${region} is not readable`);
    }
    this.reserve(StructSize.REGION_ACCESS + count);
    this.echoAccess(dv, p); // offset, region, count; the data follows
    const at = HEADER_SIZE + StructSize.REGION_ACCESS;
    if (count > 0) {
      const r = this.device.read(region, offset, count, this.out, this.outDv, at);
      if (r !== 0) return this.fail(r, `region ${region} read [0x${offset.toString(16)}, +${count}) failed`);
    }
    this.replyLen = StructSize.REGION_ACCESS + count;
    return 0;
  }

  private regionWrite(m: IncomingMessage): number {
    if (m.payloadLength < StructSize.REGION_ACCESS) return this.fail(Errno.EINVAL, 'REGION_WRITE payload too short');
    const dv = m.dv;
    const p = m.payload;
    const offset = getU64(dv, p);
    const region = dv.getUint32(p + 8, true);
    const count = dv.getUint32(p + 12, true);
    if (m.payloadLength - StructSize.REGION_ACCESS !== count) {
      return this.fail(Errno.EINVAL, `REGION_WRITE count ${count} but ${m.payloadLength - StructSize.REGION_ACCESS} data bytes`);
    }
    const e = this.checkAccess(region, offset, count);
    if (e !== 0) return e;
    if ((this.device.regionFlags(region) & RegionInfoFlag.WRITE) === 0 && count > 0) {
      return this.fail(Errno.EINVAL, `region ${region} is not writable`);
    }
    if (count > 0) {
      const r = this.device.write(region, offset, count, m.buf, dv, p + StructSize.REGION_ACCESS);
      if (r !== 0) return this.fail(r, `region ${region} write [0x${offset.toString(16)}, +${count}) failed`);
    }
    this.echoAccess(dv, p);
    this.replyLen = StructSize.REGION_ACCESS;
    return 0;
  }

  /** REGION_WRITE_MULTI (QEMU, NO_REPLY, posted writes under load). Validated completely
   * before any write is applied. */
  private writeMulti(m: IncomingMessage): number {
    const dv = m.dv;
    const p = m.payload;
    if (m.payloadLength < StructSize.WRITE_MULTI_HEADER) return this.fail(Errno.EINVAL, 'WRITE_MULTI payload too short');
    const n = getU64(dv, p);
    if (n === 0 || n > WRITE_MULTI_MAX_ENTRIES) return this.fail(Errno.EINVAL, `WRITE_MULTI with ${n} entries`);
    if (m.payloadLength !== StructSize.WRITE_MULTI_HEADER + n * StructSize.WRITE_MULTI_ENTRY) {
      return this.fail(Errno.EINVAL, `WRITE_MULTI of ${n} entries in ${m.payloadLength} bytes`);
    }
    for (let i = 0; i < n; i++) {
      const a = p + StructSize.WRITE_MULTI_HEADER + i * StructSize.WRITE_MULTI_ENTRY;
      const count = dv.getUint32(a + 12, true);
      const region = dv.getUint32(a + 8, true);
      if (count === 0 || count > WRITE_MULTI_DATA_MAX) return this.fail(Errno.EINVAL, `WRITE_MULTI entry ${i} count ${count}`);
      const e = this.checkAccess(region, getU64(dv, a), count);
      if (e !== 0) return e;
      if ((this.device.regionFlags(region) & RegionInfoFlag.WRITE) === 0) return this.fail(Errno.EINVAL, `region ${region} is not writable`);
    }
    for (let i = 0; i < n; i++) {
      const a = p + StructSize.WRITE_MULTI_HEADER + i * StructSize.WRITE_MULTI_ENTRY;
      const r = this.device.write(dv.getUint32(a + 8, true), getU64(dv, a), dv.getUint32(a + 12, true), m.buf, dv, a + 16);
      if (r !== 0) return this.fail(r, `WRITE_MULTI entry ${i} failed`);
    }
    setU64(this.outDv, HEADER_SIZE, n);
    this.replyLen = 8;
    return 0;
  }

  private reset(): number {
    logger.info({ device: this.device.name }, 'device reset by client');
    this.device.reset('client');
    return 0;
  }
}
