// The plugin's gRPC layer (src/service/k8s/grpc.ts) against itself and against raw HTTP/2:
// unary and server-streaming calls with messages from the device-plugin proto, errors as
// grpc-status (handler errors, unknown methods, bad framing, compression, oversize), stream
// cancel; and the plugin's pure helpers. (The plugin against a separately written kubelet
// stand-in: test/integration/k8s.test.ts.)
import http2 from 'node:http2';
import net from 'node:net';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FrameReader, GrpcClient, GrpcError, GrpcServer, Status, frame, loadProto, type ServerCall } from '../../src/service/k8s/grpc.ts';
import { PROTO, className, preferred } from '../../src/service/k8s/plugin.ts';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-grpc-'));
const sock = path.join(dir, 'p.sock');
const root = loadProto(PROTO);
let server: GrpcServer;
let client: GrpcClient;
let cancelled = 0;
let live: ServerCall | null = null;

beforeAll(async () => {
  server = new GrpcServer(root);
  server.addService('v1beta1.DevicePlugin', {
    GetDevicePluginOptions: () => ({ pre_start_required: true, get_preferred_allocation_available: false }),
    Allocate: (req: { container_requests: { devices_ids: string[] }[] }) => {
      const ids = req.container_requests.flatMap((c) => c.devices_ids);
      if (ids.includes('busy')) throw new GrpcError(Status.FAILED_PRECONDITION, 'device busy: try later (ünïcode, 100%)');
      if (ids.includes('boom')) throw new Error('a bug');
      return { container_responses: [{ envs: { A: ids.join(',') }, mounts: [{ container_path: '/c', host_path: '/h', read_only: true }], annotations: {}, devices: [], cdi_devices: [] }] };
    },
    ListAndWatch: (_req: object, call: ServerCall) => {
      live = call;
      call.onCancel(() => cancelled++);
      call.write({ devices: [{ ID: 'a', health: 'Healthy' }] });
      call.write({ devices: [{ ID: 'a', health: 'Unhealthy' }, { ID: 'b', health: 'Healthy' }] });
    },
  });
  await server.listen(sock);
  client = new GrpcClient(root, sock);
});

afterAll(async () => {
  await client.close();
  await server.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** A raw HTTP/2 request with a hand-made body; returns status headers and trailers. */
function raw(pathName: string, body: Buffer, headers: Record<string, string> = {}): Promise<Record<string, unknown>> {
  return new Promise((resolve) => {
    const s = http2.connect('http://localhost', { createConnection: () => net.connect(sock) });
    const req = s.request({ ':method': 'POST', ':path': pathName, 'content-type': 'application/grpc', te: 'trailers', ...headers });
    const out: Record<string, unknown> = {};
    req.on('response', (h) => Object.assign(out, h));
    req.on('trailers', (h) => Object.assign(out, h));
    req.on('data', () => {});
    req.on('close', () => {
      s.close();
      resolve(out);
    });
    req.end(body);
  });
}

describe('gRPC over HTTP/2 (grpc.ts)', () => {
  it('unary calls: messages both ways, map and repeated fields, defaults', async () => {
    expect(await client.unary('v1beta1.DevicePlugin', 'GetDevicePluginOptions', {})).toEqual({ pre_start_required: true, get_preferred_allocation_available: false });
    const r = await client.unary('v1beta1.DevicePlugin', 'Allocate', { container_requests: [{ devices_ids: ['x', 'y'] }] });
    expect(r).toEqual({ container_responses: [{ envs: { A: 'x,y' }, mounts: [{ container_path: '/c', host_path: '/h', read_only: true }], annotations: {}, devices: [], cdi_devices: [] }] });
  });

  it('errors: the status and message arrive; a handler bug is INTERNAL; unknown methods UNIMPLEMENTED', async () => {
    const busy = await client.unary('v1beta1.DevicePlugin', 'Allocate', { container_requests: [{ devices_ids: ['busy'] }] }).catch((e: unknown) => e);
    expect(busy).toMatchObject({ code: Status.FAILED_PRECONDITION, message: 'device busy: try later (ünïcode, 100%)' });
    const boom = await client.unary('v1beta1.DevicePlugin', 'Allocate', { container_requests: [{ devices_ids: ['boom'] }] }).catch((e: unknown) => e);
    expect(boom).toMatchObject({ code: Status.INTERNAL, message: 'a bug' });
    const un = await client.unary('v1beta1.DevicePlugin', 'PreStartContainer', { devices_ids: [] }).catch((e: unknown) => e);
    expect(un).toMatchObject({ code: Status.UNIMPLEMENTED });
  });

  it('server streaming: messages in order, then the client cancels and the server hears it', async () => {
    const got: unknown[] = [];
    const c = client.call('v1beta1.DevicePlugin', 'ListAndWatch', {}, (m) => got.push(m));
    await expect.poll(() => got.length).toBe(2);
    expect(got).toEqual([
      { devices: [{ ID: 'a', health: 'Healthy', topology: null }] },
      { devices: [{ ID: 'a', health: 'Unhealthy', topology: null }, { ID: 'b', health: 'Healthy', topology: null }] },
    ]);
    live!.write({ devices: [] });
    await expect.poll(() => got.length).toBe(3);
    c.cancel();
    await expect(c.done).rejects.toBeInstanceOf(GrpcError);
    await expect.poll(() => cancelled).toBe(1);
  });

  it('a stream the server ends carries its status', async () => {
    const got: unknown[] = [];
    const c = client.call('v1beta1.DevicePlugin', 'ListAndWatch', {}, (m) => got.push(m));
    await expect.poll(() => got.length).toBe(2);
    live!.end(Status.UNAVAILABLE, 'going away');
    await expect(c.done).rejects.toMatchObject({ code: Status.UNAVAILABLE, message: 'going away' });
  });

  it('bad framing: two messages, a compressed flag, an oversized length, a truncated body', async () => {
    const one = frame(new Uint8Array(0));
    expect(await raw('/v1beta1.DevicePlugin/GetDevicePluginOptions', Buffer.concat([one, one]))).toMatchObject({ 'grpc-status': String(Status.INVALID_ARGUMENT) });
    expect(await raw('/v1beta1.DevicePlugin/GetDevicePluginOptions', Buffer.from([1, 0, 0, 0, 0]))).toMatchObject({ 'grpc-status': String(Status.UNIMPLEMENTED) });
    expect(await raw('/v1beta1.DevicePlugin/GetDevicePluginOptions', Buffer.from([0, 0x7f, 0, 0, 0]))).toMatchObject({ 'grpc-status': String(Status.RESOURCE_EXHAUSTED) });
    expect(await raw('/v1beta1.DevicePlugin/GetDevicePluginOptions', Buffer.from([0, 0, 0, 0, 9, 1]))).toMatchObject({ 'grpc-status': String(Status.INVALID_ARGUMENT) });
    expect(await raw('/v1beta1.DevicePlugin/Allocate', Buffer.from([0, 0, 0, 0, 2, 0xff, 0xff]))).toMatchObject({ 'grpc-status': String(Status.INVALID_ARGUMENT) });
    // Not gRPC at all.
    expect(await raw('/v1beta1.DevicePlugin/Allocate', one, { 'content-type': 'text/plain' })).toMatchObject({ ':status': 415 });
    // The server is still fine.
    expect(await client.unary('v1beta1.DevicePlugin', 'GetDevicePluginOptions', {})).toMatchObject({ pre_start_required: true });
  });

  it('frame reader: split and coalesced chunks', () => {
    const r = new FrameReader();
    const a = frame(Uint8Array.from([1, 2, 3]));
    const b = frame(Uint8Array.from([4]));
    const all = Buffer.concat([a, b]);
    expect(r.push(all.subarray(0, 2))).toEqual([]);
    expect(r.push(all.subarray(2, 8)).map((x) => [...x])).toEqual([[1, 2, 3]]);
    expect(r.push(all.subarray(8)).map((x) => [...x])).toEqual([[4]]);
    expect(r.pending).toBe(0);
  });
});

describe('device plugin helpers', () => {
  it('resource names by slice size; preferred allocations', () => {
    expect([className(64 << 20), className(1 << 30), className(512 << 20)]).toEqual(['vgpu-64m', 'vgpu-1g', 'vgpu-512m']);
    expect(preferred({ available_deviceIDs: ['vgpu-1g-10', 'vgpu-1g-2', 'vgpu-1g-3'], must_include_deviceIDs: [], allocation_size: 2 })).toEqual(['vgpu-1g-2', 'vgpu-1g-3']);
    expect(preferred({ available_deviceIDs: ['vgpu-1g-0', 'vgpu-1g-1'], must_include_deviceIDs: ['vgpu-1g-1'], allocation_size: 1 })).toEqual(['vgpu-1g-1']);
  });
});
