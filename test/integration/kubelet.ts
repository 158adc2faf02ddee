// A stand-in for the kubelet's side of the device-plugin API (no kubelet runs here): it serves
// Registration on kubelet.sock and calls a plugin's DevicePlugin service, from the same
// api.proto, over HTTP/2 cleartext on UNIX sockets. Written separately from
// src/service/k8s/grpc.ts on purpose (node:http2 directly, its own gRPC framing), so that the
// plugin is checked against a second implementation of the wire format, not against itself.
import http2 from 'node:http2';
import net from 'node:net';
import fs from 'node:fs';
import path from 'node:path';
import protobuf from 'protobufjs';

const PROTO = path.resolve(import.meta.dirname, '../../src/service/k8s/api.proto');

type Msg = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

export class GrpcStatusError extends Error {
  readonly code: number;
  constructor(code: number, message: string) {
    super(`grpc status ${code}: ${message}`);
    this.code = code;
  }
}

export class KubeletStandIn {
  readonly dir: string;
  readonly root: protobuf.Root;
  readonly registrations: Msg[] = [];
  private server: http2.Http2Server | null = null;
  private readonly waiters: (() => void)[] = [];

  constructor(dir: string) {
    this.dir = dir;
    this.root = new protobuf.Root();
    this.root.loadSync(PROTO, { keepCase: true });
  }

  private type(name: string): protobuf.Type {
    return this.root.lookupType(`v1beta1.${name}`);
  }

  /** Serve Registration on DIR/kubelet.sock (a fresh socket, as a restarted kubelet makes). */
  async start(): Promise<void> {
    const sock = path.join(this.dir, 'kubelet.sock');
    fs.rmSync(sock, { force: true });
    const server = http2.createServer();
    server.on('stream', (stream, headers) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const body = Buffer.concat(chunks);
        if (headers[':path'] !== '/v1beta1.Registration/Register' || headers['content-type'] !== 'application/grpc' || body[0] !== 0) {
          stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '12', 'grpc-message': 'unimplemented' }, { endStream: true });
          return;
        }
        const len = body.readUInt32BE(1);
        const req = this.type('RegisterRequest').toObject(this.type('RegisterRequest').decode(body.subarray(5, 5 + len)), { defaults: true });
        this.registrations.push(req);
        for (const w of this.waiters.splice(0)) w();
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
        stream.end(Buffer.from([0, 0, 0, 0, 0])); // Empty
      });
    });
    await new Promise<void>((r) => server.listen(sock, r));
    this.server = server;
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = null;
    if (s) await new Promise<void>((r) => s.close(() => r()));
  }

  /** Resolves once `n` Register requests arrived in all. */
  async registered(n: number, timeoutMs = 30_000): Promise<Msg[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.registrations.length < n) {
      if (Date.now() > deadline) throw new Error(`only ${this.registrations.length} of ${n} registrations after ${timeoutMs} ms`);
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 200);
      });
    }
    return this.registrations;
  }

  /** Connect to a plugin's endpoint (the file name it registered) as the kubelet does. */
  plugin(endpoint: string): PluginConn {
    return new PluginConn(this, path.join(this.dir, endpoint));
  }
}

export class PluginConn {
  private readonly k: KubeletStandIn;
  private readonly session: http2.ClientHttp2Session;

  constructor(k: KubeletStandIn, sock: string) {
    this.k = k;
    this.session = http2.connect('http://localhost', { createConnection: () => net.connect(sock) });
    this.session.on('error', () => {});
  }

  private method(name: string): protobuf.Method {
    return this.k.root.lookupService('v1beta1.DevicePlugin').methods[name]!.resolve() as protobuf.Method;
  }

  /** A call; each response message goes to onMessage; resolves with the final status. */
  call(name: string, req: Msg, onMessage: (m: Msg) => void): { status: Promise<{ code: number; message: string }>; cancel(): void } {
    const m = this.method(name);
    const reqType = m.resolvedRequestType!;
    const resType = m.resolvedResponseType!;
    const s = this.session.request({ ':method': 'POST', ':path': `/v1beta1.DevicePlugin/${name}`, 'content-type': 'application/grpc', te: 'trailers' });
    let buf = Buffer.alloc(0);
    let code: number | null = null;
    let message = '';
    const grab = (h: http2.IncomingHttpHeaders) => {
      if (h['grpc-status'] !== undefined) {
        code = Number(h['grpc-status']);
        message = decodeURIComponent(String(h['grpc-message'] ?? ''));
      }
    };
    s.on('response', grab);
    s.on('trailers', grab);
    s.on('data', (c: Buffer) => {
      buf = Buffer.concat([buf, c]);
      while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
        const len = buf.readUInt32BE(1);
        onMessage(resType.toObject(resType.decode(buf.subarray(5, 5 + len)), { defaults: true, arrays: true, objects: true }));
        buf = buf.subarray(5 + len);
      }
    });
    s.on('error', () => {});
    const status = new Promise<{ code: number; message: string }>((resolve) => s.on('close', () => resolve({ code: code ?? -1, message })));
    const body = reqType.encode(reqType.fromObject(req)).finish();
    const head = Buffer.alloc(5);
    head.writeUInt32BE(body.length, 1);
    s.end(Buffer.concat([head, body]));
    return { status, cancel: () => s.close(http2.constants.NGHTTP2_CANCEL) };
  }

  async unary(name: string, req: Msg): Promise<Msg> {
    const out: Msg[] = [];
    const st = await this.call(name, req, (m) => out.push(m)).status;
    if (st.code !== 0) throw new GrpcStatusError(st.code, st.message);
    if (out.length !== 1) throw new Error(`${name}: ${out.length} response messages`);
    return out[0]!;
  }

  close(): void {
    this.session.close();
  }
}
