// gRPC over HTTP/2 cleartext on UNIX sockets, as much as the kubelet device-plugin API needs:
// unary and server-streaming calls, protobuf messages from a .proto loaded by reflection
// (protobufjs), no compression, status in trailers (or trailers-only for an early error).
// node:http2 does the HTTP/2; gRPC adds only the 5-byte message prefix (compressed flag, 32-bit
// big-endian length) and the grpc-status/grpc-message trailers (gRPC's PROTOCOL-HTTP2.md).
// No @grpc/grpc-js: this is ~250 lines against a dependency tree, and the plugin needs nothing
// else of gRPC (no TLS, no name resolution, no load balancing).
import http2 from 'node:http2';
import net from 'node:net';
import fs from 'node:fs';
import protobuf from 'protobufjs';
import { logger, type Logger } from '../../log.ts';

export const Status = {
  OK: 0, CANCELLED: 1, UNKNOWN: 2, INVALID_ARGUMENT: 3, NOT_FOUND: 5, ALREADY_EXISTS: 6, RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9, UNIMPLEMENTED: 12, INTERNAL: 13, UNAVAILABLE: 14,
} as const;

export class GrpcError extends Error {
  readonly code: number;
  constructor(code: number, message: string) {
    super(message);
    this.name = 'GrpcError';
    this.code = code;
  }
}

/** A .proto by reflection, field names as written (keepCase): `devices_ids`, `resource_name`. */
export function loadProto(file: string): protobuf.Root {
  const root = new protobuf.Root();
  root.loadSync(file, { keepCase: true });
  root.resolveAll();
  return root;
}

const MAX_MESSAGE = 4 << 20; // gRPC's default receive limit

/** One length-prefixed gRPC message. */
export function frame(msg: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + msg.length);
  out[0] = 0;
  out.writeUInt32BE(msg.length, 1);
  out.set(msg, 5);
  return out;
}

/** Splits a byte stream into gRPC messages (throws GrpcError on compression or oversize). */
export class FrameReader {
  private buf: Buffer = Buffer.alloc(0);
  push(chunk: Buffer): Buffer[] {
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    const out: Buffer[] = [];
    while (this.buf.length >= 5) {
      if (this.buf[0] !== 0) throw new GrpcError(Status.UNIMPLEMENTED, 'compressed messages are not supported (grpc-encoding identity only)');
      const len = this.buf.readUInt32BE(1);
      if (len > MAX_MESSAGE) throw new GrpcError(Status.RESOURCE_EXHAUSTED, `message of ${len} bytes is larger than ${MAX_MESSAGE}`);
      if (this.buf.length < 5 + len) break;
      out.push(this.buf.subarray(5, 5 + len));
      this.buf = this.buf.subarray(5 + len);
    }
    return out;
  }
  get pending(): number {
    return this.buf.length;
  }
}

function encode(t: protobuf.Type, obj: object): Uint8Array {
  const err = t.verify(obj);
  if (err) throw new GrpcError(Status.INTERNAL, `${t.name}: ${err}`);
  return t.encode(t.fromObject(obj)).finish();
}

function decode<T>(t: protobuf.Type, buf: Uint8Array): T {
  return t.toObject(t.decode(buf), { defaults: true, arrays: true, objects: true, longs: Number }) as T;
}

/** What a server-streaming handler writes to. */
export interface ServerCall {
  write(msg: object): void;
  /** End the stream with a status (OK by default). */
  end(code?: number, message?: string): void;
  readonly cancelled: boolean;
  onCancel(cb: () => void): void;
}

export type UnaryHandler = (req: any) => Promise<object> | object; // eslint-disable-line @typescript-eslint/no-explicit-any
export type StreamHandler = (req: any, call: ServerCall) => void; // eslint-disable-line @typescript-eslint/no-explicit-any

export class GrpcServer {
  private readonly root: protobuf.Root;
  private readonly log: Logger;
  private readonly methods = new Map<string, { m: protobuf.Method; handler: UnaryHandler | StreamHandler }>();
  private readonly server: http2.Http2Server;
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private path: string | null = null;

  constructor(root: protobuf.Root, log: Logger = logger.child({ part: 'grpc' })) {
    this.root = root;
    this.log = log;
    this.server = http2.createServer();
    this.server.on('session', (s) => {
      this.sessions.add(s);
      s.on('close', () => this.sessions.delete(s));
      s.on('error', () => {});
    });
    this.server.on('stream', (stream, headers) => this.onStream(stream, headers));
  }

  /** Serve `service` (e.g. 'v1beta1.DevicePlugin') with one handler per method name. */
  addService(service: string, impl: Record<string, UnaryHandler | StreamHandler>): void {
    const svc = this.root.lookupService(service);
    for (const [name, m] of Object.entries(svc.methods)) {
      const handler = impl[name] as UnaryHandler | StreamHandler | undefined;
      if (handler) this.methods.set(`/${service}/${name}`, { m: m.resolve() as protobuf.Method, handler });
    }
  }

  listen(path: string): Promise<void> {
    fs.rmSync(path, { force: true });
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(path, () => {
        this.server.off('error', reject);
        this.path = path;
        resolve();
      });
    });
  }

  close(): Promise<void> {
    for (const s of this.sessions) s.destroy();
    return new Promise((resolve) => {
      if (!this.server.listening) return resolve();
      this.server.close(() => resolve());
    });
  }

  get listening(): string | null {
    return this.server.listening ? this.path : null;
  }

  private onStream(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    stream.on('error', () => {});
    const fail = (code: number, message: string) => {
      if (stream.headersSent || stream.destroyed) return;
      stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': String(code), 'grpc-message': encodeURIComponent(message) }, { endStream: true });
    };
    if (headers[':method'] !== 'POST' || !String(headers['content-type'] ?? '').startsWith('application/grpc')) {
      if (!stream.headersSent) stream.respond({ ':status': 415 }, { endStream: true });
      return;
    }
    const path = String(headers[':path']);
    const entry = this.methods.get(path);
    if (!entry) {
      fail(Status.UNIMPLEMENTED, `unknown method ${path}`);
      return;
    }
    const { m, handler } = entry;
    const reader = new FrameReader();
    const msgs: Buffer[] = [];
    stream.on('data', (c: Buffer) => {
      try {
        msgs.push(...reader.push(c));
      } catch (err) {
        fail((err as GrpcError).code ?? Status.INTERNAL, (err as Error).message);
        stream.close();
      }
    });
    stream.on('end', () => {
      if (stream.headersSent || stream.destroyed) return;
      if (msgs.length !== 1 || reader.pending !== 0) {
        fail(Status.INVALID_ARGUMENT, `expected one request message, got ${msgs.length}`);
        return;
      }
      let req: object;
      try {
        req = decode(m.resolvedRequestType!, msgs[0]!);
      } catch (err) {
        fail(Status.INVALID_ARGUMENT, `cannot decode ${m.requestType}: ${(err as Error).message}`);
        return;
      }
      if (m.responseStream) this.stream(stream, m, handler as StreamHandler, req);
      else void this.unary(stream, m, handler as UnaryHandler, req, fail);
    });
  }

  private async unary(stream: http2.ServerHttp2Stream, m: protobuf.Method, handler: UnaryHandler, req: object, fail: (c: number, msg: string) => void): Promise<void> {
    let body: Uint8Array;
    try {
      body = encode(m.resolvedResponseType!, await handler(req));
    } catch (err) {
      if (!(err instanceof GrpcError)) this.log.error({ err, method: m.name }, 'grpc handler failed');
      fail(err instanceof GrpcError ? err.code : Status.INTERNAL, (err as Error).message);
      return;
    }
    if (stream.destroyed) return;
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
    stream.end(frame(body));
  }

  private stream(stream: http2.ServerHttp2Stream, m: protobuf.Method, handler: StreamHandler, req: object): void {
    let ended = false;
    let status = { code: 0, message: '' };
    const cancelHooks: (() => void)[] = [];
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': String(status.code), ...(status.message && { 'grpc-message': encodeURIComponent(status.message) }) }));
    stream.on('close', () => {
      if (ended) return;
      ended = true;
      for (const cb of cancelHooks) cb();
    });
    const call: ServerCall = {
      write: (msg) => {
        if (!ended && !stream.destroyed) stream.write(frame(encode(m.resolvedResponseType!, msg)));
      },
      end: (code = 0, message = '') => {
        if (ended) return;
        ended = true;
        status = { code, message };
        if (!stream.destroyed) stream.end();
      },
      get cancelled() {
        return ended;
      },
      onCancel: (cb) => cancelHooks.push(cb),
    };
    try {
      handler(req, call);
    } catch (err) {
      this.log.error({ err, method: m.name }, 'grpc stream handler failed');
      call.end(Status.INTERNAL, (err as Error).message);
    }
  }
}

/** A gRPC client on a UNIX socket (h2c with prior knowledge, as kubelet and plugins speak it). */
export class GrpcClient {
  private readonly root: protobuf.Root;
  readonly session: http2.ClientHttp2Session;
  private readonly closedP: Promise<void>;

  constructor(root: protobuf.Root, socketPath: string) {
    this.root = root;
    this.session = http2.connect('http://localhost', { createConnection: () => net.connect(socketPath) });
    this.session.on('error', () => {});
    this.closedP = new Promise((r) => this.session.once('close', () => r()));
  }

  /** One call; onMessage sees each response message (a stream may deliver many). */
  call(service: string, method: string, req: object, onMessage: (msg: any) => void, timeoutMs = 0): { done: Promise<void>; cancel(): void } { // eslint-disable-line @typescript-eslint/no-explicit-any
    const m = this.root.lookupService(service).methods[method]!.resolve() as protobuf.Method;
    const stream = this.session.request({
      ':method': 'POST', ':path': `/${service}/${method}`, 'content-type': 'application/grpc', te: 'trailers', 'user-agent': 'vugpu-grpc/1',
      ...(timeoutMs > 0 && { 'grpc-timeout': `${timeoutMs}m` }),
    });
    const reader = new FrameReader();
    let status: { code: number; message: string } | null = null;
    const take = (h: http2.IncomingHttpHeaders) => {
      if (h['grpc-status'] !== undefined) status = { code: Number(h['grpc-status']), message: decodeURIComponent(String(h['grpc-message'] ?? '')) };
    };
    const done = new Promise<void>((resolve, reject) => {
      stream.on('response', (h) => {
        if (h[':status'] !== 200) status = { code: Status.UNKNOWN, message: `HTTP status ${h[':status']}` };
        else take(h);
      });
      stream.on('trailers', take);
      stream.on('data', (c: Buffer) => {
        try {
          for (const msg of reader.push(c)) onMessage(decode(m.resolvedResponseType!, msg));
        } catch (err) {
          stream.close(http2.constants.NGHTTP2_CANCEL);
          reject(err);
        }
      });
      stream.on('error', (err) => reject(new GrpcError(Status.UNAVAILABLE, err.message)));
      stream.on('close', () => {
        const s = status as { code: number; message: string } | null;
        if (s === null) reject(new GrpcError(Status.UNAVAILABLE, 'the stream closed without a status'));
        else if (s.code !== 0) reject(new GrpcError(s.code, s.message));
        else resolve();
      });
    });
    stream.end(frame(encode(m.resolvedRequestType!, req)));
    return { done, cancel: () => stream.close(http2.constants.NGHTTP2_CANCEL) };
  }

  async unary<T>(service: string, method: string, req: object, timeoutMs = 10_000): Promise<T> {
    let out: T | undefined;
    let n = 0;
    await this.call(service, method, req, (msg) => {
      out = msg as T;
      n++;
    }, timeoutMs).done;
    if (n !== 1) throw new GrpcError(Status.INTERNAL, `expected one response message, got ${n}`);
    return out!;
  }

  close(): Promise<void> {
    this.session.close();
    return this.closedP;
  }
}
