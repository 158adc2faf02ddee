// A vfio-user client in TypeScript, speaking the protocol the way QEMU's vfio-user-pci does.
// Used by the unit tests (including malformed-input tests through sendRaw) and by the MMIO
// round-trip benchmark. Promise-based over the addon socket; replies are matched by msg_id.

import { native } from '../native.ts';
import type { IncomingMessage } from './framing.ts';
import {
  Command,
  DmaMapFlag,
  HEADER_SIZE,
  IrqSetFlag,
  MsgFlag,
  StructSize,
  commandName,
  decodeDeviceInfo,
  decodeIrqInfo,
  decodeRegionInfo,
  encodeDmaMap,
  encodeDmaUnmap,
  encodeIrqSet,
  encodeRegionAccess,
  encodeVersion,
  setU64,
  type DeviceInfoPayload,
  type IrqInfoPayload,
  type RegionInfoPayload,
} from './protocol.ts';
import { SocketTransport, type CloseReason } from './transport.ts';

export interface Reply {
  msgId: number;
  command: number;
  flags: number;
  error: number;
  payload: Uint8Array; // a copy
  fds: number[]; // the caller owns them
}

const ignore = (): void => {};

export class VfioUserError extends Error {
  readonly errno: number;
  readonly command: number;
  constructor(command: number, errno: number) {
    super(`${commandName(command)} failed with errno ${errno}`);
    this.errno = errno;
    this.command = command;
  }
}

export const QEMU_VERSION_JSON =
  '{"capabilities":{"pgsizes":4096,"max_msg_fds":16,"max_dma_maps":65535,"max_data_xfer_size":1048576,' +
  '"migration":{"max_bitmap_size":268435456,"pgsize":4096},"write_multiple":true}}';

interface Pending {
  command: number;
  resolve: (r: Reply) => void;
  reject: (e: Error) => void;
}

export interface RequestOptions {
  fds?: number[];
  noReply?: boolean;
}

export interface RegionInfoResult extends RegionInfoPayload {
  /** fd received with the reply (-1 if none); the caller owns it. */
  fd: number;
}

export class VfioUserClient {
  private readonly transport: SocketTransport;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  /** Replies nobody asked for (and server-to-client commands). A correct server leaves it empty. */
  readonly unexpected: Reply[] = [];
  /** Resolves when the connection is gone. */
  readonly closed: Promise<CloseReason>;
  private closeReason: CloseReason | null = null;
  // Pre-built REGION_READ request for read32/read64 (the benchmark path).
  private readonly rdReq = new Uint8Array(HEADER_SIZE + StructSize.REGION_ACCESS);
  private readonly rdDv = new DataView(this.rdReq.buffer);

  private constructor(fd: number, name: string) {
    this.transport = new SocketTransport(fd, { name, maxMessageSize: (1 << 20) + HEADER_SIZE + 4096 });
    let done!: (r: CloseReason) => void;
    this.closed = new Promise((res) => (done = res));
    this.transport.start({
      onMessage: (m) => this.onMessage(m),
      onClose: (reason) => {
        this.closeReason = reason;
        const err = this.closedError();
        for (const p of this.pending.values()) p.reject(err);
        this.pending.clear();
        done(reason);
      },
    });
  }

  /** Connect to a server socket (blocking connect, then non-blocking I/O). */
  static connect(path: string): VfioUserClient {
    const fd = native.connectUnix(path, true);
    if (fd < 0) throw new Error(`connect ${path} failed: errno ${-fd}`);
    return new VfioUserClient(fd, `client:${path}`);
  }

  /** Wrap an already connected stream fd (e.g. one end of a socketpair). */
  static fromFd(fd: number, name = 'client'): VfioUserClient {
    native.setNonblock(fd, true);
    return new VfioUserClient(fd, name);
  }

  get isClosed(): boolean {
    return this.closeReason !== null;
  }

  close(): void {
    this.transport.close('client closed');
  }

  /** Allocate a msg id not currently in flight. */
  allocId(): number {
    for (;;) {
      const id = this.nextId;
      this.nextId = (this.nextId + 1) & 0xffff;
      if (!this.pending.has(id)) return id;
    }
  }

  /** Send a command; resolves with the reply (error replies included, see `check`). With
   * noReply the promise resolves immediately with a synthetic empty reply. Never throws: a
   * connection that is (or goes) down rejects the promise. */
  request(command: number, payload?: Uint8Array, opts: RequestOptions = {}): Promise<Reply> {
    const msgId = this.allocId();
    const len = HEADER_SIZE + (payload?.length ?? 0);
    const buf = new Uint8Array(len);
    const dv = new DataView(buf.buffer);
    dv.setUint16(0, msgId, true);
    dv.setUint16(2, command, true);
    dv.setUint32(4, len, true);
    dv.setUint32(8, opts.noReply ? MsgFlag.NO_REPLY : 0, true);
    if (payload) buf.set(payload, HEADER_SIZE);
    if (opts.noReply) {
      if (!this.transport.send(buf, opts.fds)) return Promise.reject(this.closedError());
      return Promise.resolve({ msgId, command, flags: 0, error: 0, payload: new Uint8Array(0), fds: [] });
    }
    const p = this.expectReply(msgId, command);
    // A failed send closes the transport, whose onClose rejects `p` (already pending).
    this.transport.send(buf, opts.fds);
    return p;
  }

  /** Send arbitrary bytes (possibly malformed, possibly several messages or a fragment).
   * Throws if the connection is down (replies awaited with expectReply reject then too). */
  sendRaw(bytes: Uint8Array, fds?: number[]): void {
    if (!this.transport.send(bytes, fds)) throw this.closedError();
  }

  /** Wait for the reply with this msg id (for messages sent with sendRaw). Rejects when the
   * connection goes away first; a rejection nobody awaits is not reported as unhandled. */
  expectReply(msgId: number, command = -1): Promise<Reply> {
    if (this.closeReason) return Promise.reject(this.closedError());
    const p = new Promise<Reply>((resolve, reject) => this.pending.set(msgId, { command, resolve, reject }));
    p.catch(ignore); // the caller sees the rejection through `p`; this only marks it handled
    return p;
  }

  private closedError(): Error {
    return new Error(`vfio-user connection closed: ${this.closeReason?.message ?? 'connection is down'}`);
  }

  /** Throw VfioUserError if the reply carries the ERROR flag. */
  static check(r: Reply): Reply {
    if (r.flags & MsgFlag.ERROR) {
      for (const fd of r.fds) native.close(fd);
      throw new VfioUserError(r.command, r.error);
    }
    return r;
  }

  private async call(command: number, payload?: Uint8Array, opts?: RequestOptions): Promise<Reply> {
    return VfioUserClient.check(await this.request(command, payload, opts));
  }

  private onMessage(m: IncomingMessage): void {
    const r: Reply = {
      msgId: m.msgId,
      command: m.command,
      flags: m.flags,
      error: m.error,
      payload: m.buf.slice(m.payload, m.payload + m.payloadLength),
      fds: m.fds.slice(),
    };
    const p = (m.flags & MsgFlag.TYPE_MASK) === MsgFlag.TYPE_REPLY ? this.pending.get(m.msgId) : undefined;
    if (p === undefined || (p.command >= 0 && p.command !== m.command)) {
      this.unexpected.push(r);
      return;
    }
    this.pending.delete(m.msgId);
    p.resolve(r);
  }

  // ---- commands -----------------------------------------------------------------------------

  async version(json = QEMU_VERSION_JSON, major = 0, minor = 0): Promise<{ major: number; minor: number; json: string; raw: Uint8Array }> {
    const r = await this.call(Command.VERSION, encodeVersion({ major, minor, json }));
    const dv = new DataView(r.payload.buffer, r.payload.byteOffset, r.payload.length);
    if (r.payload.length < 5 || r.payload[r.payload.length - 1] !== 0) throw new Error('corrupt VERSION reply');
    return {
      major: dv.getUint16(0, true),
      minor: dv.getUint16(2, true),
      json: new TextDecoder().decode(r.payload.subarray(4, r.payload.length - 1)),
      raw: r.payload,
    };
  }

  async dmaMap(m: { addr: number; size: number; offset?: number; flags?: number; fd?: number }): Promise<void> {
    await this.call(
      Command.DMA_MAP,
      encodeDmaMap({
        argsz: StructSize.DMA_MAP,
        flags: m.flags ?? DmaMapFlag.READ | DmaMapFlag.WRITE,
        offset: m.offset ?? 0,
        addr: m.addr,
        size: m.size,
      }),
      { fds: m.fd !== undefined && m.fd >= 0 ? [m.fd] : undefined },
    );
  }

  /** Returns the reply payload (the server echoes the 24-byte request). */
  async dmaUnmap(m: { addr: number; size: number; flags?: number }): Promise<Uint8Array> {
    const r = await this.call(
      Command.DMA_UNMAP,
      encodeDmaUnmap({ argsz: StructSize.DMA_UNMAP, flags: m.flags ?? 0, addr: m.addr, size: m.size }),
    );
    return r.payload;
  }

  async getInfo(): Promise<DeviceInfoPayload> {
    const req = new Uint8Array(StructSize.DEVICE_INFO);
    new DataView(req.buffer).setUint32(0, StructSize.DEVICE_INFO, true);
    const r = await this.call(Command.DEVICE_GET_INFO, req);
    return decodeDeviceInfo(new DataView(r.payload.buffer), 0);
  }

  /** GET_REGION_INFO; like QEMU, retries once with the argsz the server asks for (closing the
   * fd of the first reply) unless `retry` is false. */
  async getRegionInfo(index: number, argsz: number = StructSize.REGION_INFO, retry = true): Promise<RegionInfoResult> {
    const req = new Uint8Array(Math.max(argsz, StructSize.REGION_INFO));
    const dv = new DataView(req.buffer);
    dv.setUint32(0, argsz, true);
    dv.setUint32(8, index, true);
    const r = await this.call(Command.DEVICE_GET_REGION_INFO, req.subarray(0, StructSize.REGION_INFO));
    const info = decodeRegionInfo(new DataView(r.payload.buffer), 0, r.payload.length);
    if (r.fds.length > 1) {
      for (const fd of r.fds) native.close(fd);
      throw new Error(`GET_REGION_INFO reply with ${r.fds.length} fds`);
    }
    const fd = r.fds[0] ?? -1;
    if (retry && info.argsz > argsz) {
      if (fd >= 0) native.close(fd);
      return this.getRegionInfo(index, info.argsz, false);
    }
    return { ...info, fd };
  }

  /** mmap a region received with getRegionInfo (the whole region at the reply's offset). */
  mmapRegion(info: RegionInfoResult): ArrayBuffer {
    if (info.fd < 0) throw new Error(`region ${info.index} came without an fd`);
    return native.mmap(info.fd, info.size, info.offset, false);
  }

  async getIrqInfo(index: number): Promise<IrqInfoPayload> {
    const req = new Uint8Array(StructSize.IRQ_INFO);
    const dv = new DataView(req.buffer);
    dv.setUint32(0, StructSize.IRQ_INFO, true);
    dv.setUint32(8, index, true);
    const r = await this.call(Command.DEVICE_GET_IRQ_INFO, req);
    return decodeIrqInfo(new DataView(r.payload.buffer), 0);
  }

  async setIrqs(s: { index: number; flags: number; start: number; count: number; fds?: number[]; data?: Uint8Array }): Promise<void> {
    const data = s.data ?? new Uint8Array(0);
    await this.call(
      Command.DEVICE_SET_IRQS,
      encodeIrqSet({ argsz: StructSize.IRQ_SET + data.length, flags: s.flags, index: s.index, start: s.start, count: s.count, data }),
      { fds: s.fds },
    );
  }

  /** Convenience: SET_IRQS(MSIX, EVENTFD|TRIGGER) for [start, start+fds.length). */
  setMsixEventfds(start: number, fds: number[]): Promise<void> {
    return this.setIrqs({
      index: 2,
      flags: IrqSetFlag.DATA_EVENTFD | IrqSetFlag.ACTION_TRIGGER,
      start,
      count: fds.length,
      fds,
    });
  }

  async regionRead(region: number, offset: number, count: number): Promise<Uint8Array> {
    const r = await this.call(Command.REGION_READ, encodeRegionAccess({ offset, region, count, data: new Uint8Array(0) }));
    const got = new DataView(r.payload.buffer).getUint32(12, true);
    if (got > count || r.payload.length !== StructSize.REGION_ACCESS + got) throw new Error('malformed REGION_READ reply');
    return r.payload.subarray(StructSize.REGION_ACCESS);
  }

  async regionWrite(region: number, offset: number, data: Uint8Array, opts: { noReply?: boolean } = {}): Promise<void> {
    await this.call(Command.REGION_WRITE, encodeRegionAccess({ offset, region, count: data.length, data }), opts);
  }

  /** 32-bit register read through a pre-built request (allocation-light; the benchmark path). */
  async read32(region: number, offset: number): Promise<number> {
    const r = await this.sendAccess(region, offset, 4);
    return new DataView(r.payload.buffer).getUint32(StructSize.REGION_ACCESS, true);
  }

  async write32(region: number, offset: number, value: number, opts: { noReply?: boolean } = {}): Promise<void> {
    const data = new Uint8Array(4);
    new DataView(data.buffer).setUint32(0, value >>> 0, true);
    await this.regionWrite(region, offset, data, opts);
  }

  async reset(): Promise<void> {
    await this.call(Command.DEVICE_RESET);
  }

  private async sendAccess(region: number, offset: number, count: number): Promise<Reply> {
    const msgId = this.allocId();
    const dv = this.rdDv;
    dv.setUint16(0, msgId, true);
    dv.setUint16(2, Command.REGION_READ, true);
    dv.setUint32(4, HEADER_SIZE + StructSize.REGION_ACCESS, true);
    dv.setUint32(8, 0, true);
    setU64(dv, HEADER_SIZE, offset);
    dv.setUint32(HEADER_SIZE + 8, region, true);
    dv.setUint32(HEADER_SIZE + 12, count, true);
    const p = this.expectReply(msgId, Command.REGION_READ);
    this.transport.send(this.rdReq); // failure rejects p
    return VfioUserClient.check(await p);
  }
}

