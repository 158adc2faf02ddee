// The control API of a running `vugpu serve`: JSON over HTTP/1.1 on a local UNIX socket
// (default /run/vugpu/control.sock), root-only — the socket file is 0600 and every connection's
// SO_PEERCRED is checked (uid 0 or the server's own uid). Versioned by path: everything lives
// under /v1/; a request for another version gets 404 naming the versions served.
//
//   GET    /v1                      server: version, pid, policy, engine, VRAM, VM count
//   GET    /v1/vms                  every VM with its state and counters
//   POST   /v1/vms                  add a VM  {name, socket, mode?, slice?, weight?}
//   GET    /v1/vms/NAME             one VM
//   DELETE /v1/vms/NAME[?force=1]   remove (409 while its QEMU is attached, unless forced)
//   POST   /v1/vms/NAME/drain       no new client; removed when its QEMU goes (at once if none)
//   PUT    /v1/vms/NAME/weight      {weight}
//   GET    /v1/policy               the scheduling policy
//   PUT    /v1/policy               {policy, bandYieldUs?}
//
// Errors: {"error": {"code", "message"}} with 400 (bad request: the message names the field and
// the form expected), 403 (not root), 404, 405, 409 (refused: exists, attached, no room …), 413.
// Every request that changes something is one pino line (action, VM, result, peer) and one
// increment of vugpu_control_requests_total{action,result}.
import http from 'node:http';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { native } from '../native.ts';
import { logger, type Logger } from '../log.ts';
import { VmChangeError, type VmConfig, type VmMode, type Vugpu } from '../server.ts';
import { policyNames } from '../aggregator/scheduler/index.ts';
import { kinds } from './serve-config.ts';
import { nameKind, socketKind, suggest, type Kind } from './config.ts';

export const API_VERSION = 'v1';
const MAX_BODY = 64 * 1024;

export interface ControlOptions {
  /** Socket path; its directory is created (0755) if missing. */
  path: string;
  log?: Logger;
  /** Replace a live predecessor's socket (a live upgrade's successor) instead of refusing. */
  takeOver?: boolean;
}

export interface ControlServer {
  readonly path: string;
  close(): Promise<void>;
}

interface Peer {
  pid: number;
  uid: number;
  gid: number;
}

/** A refusal with an HTTP status: the message is one sentence for the `vugpu ctl` user. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

const CHANGE_STATUS: Record<VmChangeError['code'], number> = {
  'not-found': 404, exists: 409, conflict: 409, attached: 409, 'no-room': 409, invalid: 400,
};

/** Control-action counters: rendered as vugpu_control_requests_total{action,result}. */
export class ControlCounters {
  readonly counts = new Map<string, number>();
  bump(action: string, result: string): void {
    const k = `${action}\0${result}`;
    this.counts.set(k, (this.counts.get(k) ?? 0) + 1);
  }
  samples(): { labels: Record<string, string>; value: number }[] {
    return [...this.counts].map(([k, value]) => {
      const [action, result] = k.split('\0') as [string, string];
      return { labels: { action, result }, value };
    });
  }
}

/** Metric families a service exposes beside the per-VM ones: control actions and VRAM room. */
export function registerServiceMetrics(v: Vugpu, counters: ControlCounters): void {
  v.metrics.addFamily({ name: 'control_requests_total', type: 'counter', help: 'Control API requests by action and result.', samples: () => counters.samples() });
  v.metrics.addFamily({
    name: 'vram_bytes', type: 'gauge', help: 'Engine VRAM: total, the area slices come from, free in it, and its largest free range (bytes).',
    samples: () => {
      const s = v.vramStatus();
      return [
        { labels: { kind: 'total' }, value: s.totalBytes },
        { labels: { kind: 'slice_area' }, value: s.sliceAreaBytes },
        { labels: { kind: 'slice_free' }, value: s.freeBytes },
        { labels: { kind: 'slice_largest_free' }, value: s.largestFreeBytes },
      ];
    },
  });
  v.metrics.addFamily({
    name: 'vm_attached', type: 'gauge', help: 'Whether a QEMU is attached to the VM (1) or not (0).',
    samples: () => v.listVms().map((vm) => ({ labels: { vm: vm.name, state: vm.state }, value: vm.state === 'idle' ? 0 : 1 })),
  });
}

/** Start serving the control API; rejects with a readable Error if the socket cannot be had. */
export async function startControlServer(v: Vugpu, opts: ControlOptions, counters = new ControlCounters()): Promise<ControlServer> {
  const log = opts.log ?? logger.child({ part: 'control' });
  const sock = opts.path;
  fs.mkdirSync(path.dirname(sock), { recursive: true });
  if (opts.takeOver) fs.rmSync(sock, { force: true });
  else await refuseLiveSocket(sock);
  const peers = new WeakMap<net.Socket, Peer | null>();
  const myUid = process.geteuid?.() ?? 0;

  const server = http.createServer((req, res) => {
    const peer = peers.get(req.socket) ?? null;
    handle(v, req, res, peer, log, counters).catch((err: unknown) => {
      log.error({ err }, 'control: request failed');
      if (!res.headersSent) send(res, 500, { error: { code: 'internal', message: 'internal error (see the server log)' } });
    });
  });
  server.on('connection', (s: net.Socket) => {
    // SO_PEERCRED of the connected socket: the one authorization check (the file mode is a
    // second fence; a group that may traverse /run/vugpu must still not drive the server).
    const fd = (s as unknown as { _handle?: { fd?: number } })._handle?.fd;
    const cred = typeof fd === 'number' && fd >= 0 ? native.peerCred(fd) : -1;
    peers.set(s, typeof cred === 'number' ? null : cred);
  });
  server.on('clientError', (_err, s) => s.destroy());
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;

  const old = process.umask(0o177); // the socket is born 0600
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(sock, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new Error(`control-socket ${sock}: ${e.code === 'EACCES' ? 'permission denied' : e.code === 'EADDRINUSE' ? 'in use' : e.message}`);
  } finally {
    process.umask(old);
  }
  fs.chmodSync(sock, 0o600);
  // Ours to remove at close only while it is still this file (a successor may have replaced it).
  const ino = fs.statSync(sock).ino;
  server.on('error', (err) => log.error({ err }, 'control: server error'));
  log.info({ path: sock, api: API_VERSION, uid: myUid }, 'control API listening');

  // Root, or the server's own user (a server run unprivileged for tests).
  function allowed(peer: Peer | null): boolean {
    return peer !== null && (peer.uid === 0 || peer.uid === myUid);
  }
  const handle = async (vg: Vugpu, req: http.IncomingMessage, res: http.ServerResponse, peer: Peer | null, lg: Logger, c: ControlCounters) => {
    if (!allowed(peer)) {
      c.bump('denied', 'forbidden');
      lg.warn({ peer }, 'control: connection from a non-root user refused');
      send(res, 403, { error: { code: 'forbidden', message: `the control API is root-only (your uid is ${peer?.uid ?? 'unknown'})` } });
      return;
    }
    await route(vg, req, res, peer!, lg, c);
  };

  return {
    path: sock,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => {
          try {
            if (fs.statSync(sock).ino === ino) fs.rmSync(sock, { force: true });
          } catch {
            // already gone
          }
          log.info({ path: sock }, 'control API closed');
          resolve();
        });
      }),
  };
}

/** A socket file another live server answers on is not ours to take; a stale one is removed. */
async function refuseLiveSocket(sock: string): Promise<void> {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(sock);
  } catch {
    return;
  }
  if (!st.isSocket()) throw new Error(`control-socket ${sock}: a file that is not a socket is in the way`);
  const live = await new Promise<boolean>((resolve) => {
    const c = net.connect(sock);
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });
  if (live) throw new Error(`control-socket ${sock}: another server is answering on it (stop it, or choose another path)`);
  fs.rmSync(sock, { force: true });
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  const text = `${JSON.stringify(body)}\n`;
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

async function readBody(req: http.IncomingMessage): Promise<Record<string, unknown>> {
  const type = req.headers['content-type'] ?? '';
  let size = 0;
  const chunks: Buffer[] = [];
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) throw new ApiError(413, 'too-large', `the request body is larger than ${MAX_BODY} bytes`);
    chunks.push(chunk as Buffer);
  }
  if (size === 0) return {};
  if (!/^application\/json\b/.test(type)) throw new ApiError(415, 'content-type', 'the request body must be JSON (content-type: application/json)');
  let body: unknown;
  try {
    body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new ApiError(400, 'bad-json', 'the request body is not valid JSON');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new ApiError(400, 'bad-json', 'the request body must be a JSON object');
  return body as Record<string, unknown>;
}

function field<T>(body: Record<string, unknown>, key: string, kind: Kind<T>, required: true): T;
function field<T>(body: Record<string, unknown>, key: string, kind: Kind<T>, required?: false): T | undefined;
function field<T>(body: Record<string, unknown>, key: string, kind: Kind<T>, required = false): T | undefined {
  const raw = body[key];
  if (raw === undefined || raw === null) {
    if (required) throw new ApiError(400, 'missing', `${key} is required (${kind.form})`);
    return undefined;
  }
  const v = typeof raw === 'string' || typeof raw === 'number' || typeof raw === 'boolean' ? kind.parse(raw) : undefined;
  if (v === undefined) throw new ApiError(400, 'invalid', `${key} ${JSON.stringify(raw)}: expected ${kind.form}`);
  return v;
}

function onlyKeys(body: Record<string, unknown>, keys: readonly string[]): void {
  for (const k of Object.keys(body)) {
    if (!keys.includes(k)) {
      const s = suggest(k, keys);
      throw new ApiError(400, 'unknown-field', `unknown field ${k} (${s ? `did you mean ${s}?` : `fields: ${keys.join(', ')}`})`);
    }
  }
}

const ADD_KEYS = ['name', 'socket', 'mode', 'slice', 'weight'] as const;

async function route(v: Vugpu, req: http.IncomingMessage, res: http.ServerResponse, peer: Peer, log: Logger, c: ControlCounters): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://vugpu');
  const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
  const method = req.method ?? 'GET';
  let action = 'unknown';
  let vmName: string | undefined;
  const t0 = performance.now();
  const changes = method !== 'GET' && method !== 'HEAD';
  try {
    if (parts[0] !== API_VERSION) {
      throw new ApiError(404, 'not-found', `no such API: this server speaks /${API_VERSION}/ (vugpu ctl of the same version)`);
    }
    const body = changes ? await readBody(req) : {};
    const [, coll, name, sub] = parts;
    vmName = coll === 'vms' ? name : undefined;
    if (coll === undefined) {
      action = 'status';
      allow(method, ['GET']);
      return send(res, 200, status(v));
    }
    if (coll === 'vms' && name === undefined) {
      if (method === 'GET') {
        action = 'list';
        return send(res, 200, { vms: v.listVms() });
      }
      allow(method, ['GET', 'POST']);
      action = 'add';
      onlyKeys(body, ADD_KEYS);
      const vm: VmConfig = {
        name: field(body, 'name', nameKind, true),
        socket: field(body, 'socket', socketKind, true),
        mode: (field(body, 'mode', kinds.mediatedMode) ?? 'fv') as VmMode,
        slice: field(body, 'slice', kinds.slice),
        weight: field(body, 'weight', kinds.weight),
      };
      vmName = vm.name;
      const cfg = v.addVm(vm);
      c.bump(action, 'ok');
      log.info({ action, vm: vm.name, mode: cfg.mode, socket: cfg.socket, sliceMiB: cfg.slice! / (1 << 20), weight: cfg.weight ?? 1, peer, ms: ms(t0) }, `control: VM ${vm.name} added`);
      return send(res, 201, { vm: v.listVms().find((x) => x.name === vm.name) });
    }
    if (coll === 'vms' && name !== undefined && sub === undefined) {
      if (method === 'GET') {
        action = 'get';
        const vm = v.listVms().find((x) => x.name === name);
        if (!vm) throw new ApiError(404, 'not-found', `there is no VM named ${name}`);
        return send(res, 200, { vm });
      }
      allow(method, ['GET', 'DELETE']);
      action = 'remove';
      const force = ['1', 'true', 'yes'].includes(url.searchParams.get('force') ?? '');
      const r = v.removeVm(name, force);
      c.bump(action, 'ok');
      log.info({ action, vm: name, force, hadClient: r.hadClient, peer, ms: ms(t0) }, `control: VM ${name} removed${r.hadClient ? ' (forced: its QEMU lost the device)' : ''}`);
      return send(res, 200, { removed: name, hadClient: r.hadClient });
    }
    if (coll === 'vms' && name !== undefined && sub === 'drain' && parts.length === 4) {
      allow(method, ['POST']);
      action = 'drain';
      onlyKeys(body, []);
      const state = v.drainVm(name);
      c.bump(action, 'ok');
      log.info({ action, vm: name, state, peer, ms: ms(t0) }, state === 'removed' ? `control: VM ${name} drained (no client: removed)` : `control: VM ${name} draining (removed when its QEMU goes)`);
      return send(res, 200, { vm: name, state });
    }
    if (coll === 'vms' && name !== undefined && sub === 'weight' && parts.length === 4) {
      allow(method, ['PUT']);
      action = 'weight';
      onlyKeys(body, ['weight']);
      const weight = field(body, 'weight', kinds.weight, true);
      v.setWeight(name, weight);
      c.bump(action, 'ok');
      log.info({ action, vm: name, weight, peer, ms: ms(t0) }, `control: VM ${name} weight ${weight}`);
      return send(res, 200, { vm: v.listVms().find((x) => x.name === name) });
    }
    if (coll === 'policy' && name === undefined) {
      if (method === 'GET') {
        action = 'get-policy';
        return send(res, 200, { policy: v.policyName, active: v.aggregator?.policy.name ?? v.policyName, policies: policyNames });
      }
      allow(method, ['GET', 'PUT']);
      action = 'policy';
      onlyKeys(body, ['policy', 'bandYieldUs']);
      const policy = field(body, 'policy', kinds.policy, true);
      const yieldUs = field(body, 'bandYieldUs', kinds.bandYieldUs);
      if (yieldUs !== undefined && policy !== 'band') throw new ApiError(400, 'invalid', `bandYieldUs applies to policy band only (asked for ${policy})`);
      const r = v.setPolicy(policy, yieldUs !== undefined ? { yieldNs: yieldUs * 1000 } : undefined);
      c.bump(action, 'ok');
      log.info({ action, policy, bandYieldUs: yieldUs, switched: r.switched, peer, ms: ms(t0) }, `control: policy ${policy}${r.switched ? '' : ' (after the submission on the device)'}`);
      return send(res, 200, { policy, switched: r.switched });
    }
    throw new ApiError(404, 'not-found', `no such resource: ${url.pathname}`);
  } catch (err) {
    let e: ApiError;
    if (err instanceof ApiError) e = err;
    else if (err instanceof VmChangeError) e = new ApiError(CHANGE_STATUS[err.code], err.code, err.message);
    else throw err;
    if (changes || e.status >= 500) {
      c.bump(action, e.code);
      log.info({ action, vm: vmName, result: e.code, status: e.status, error: e.message, peer, ms: ms(t0) }, `control: ${action} refused: ${e.message}`);
    }
    send(res, e.status, { error: { code: e.code, message: e.message } });
  }
}

function allow(method: string, methods: string[]): void {
  if (!methods.includes(method)) throw new ApiError(405, 'method', `${method} is not allowed here (allowed: ${methods.join(', ')})`);
}

function ms(t0: number): number {
  return Math.round((performance.now() - t0) * 100) / 100;
}

function status(v: Vugpu): Record<string, unknown> {
  const vms = v.listVms();
  return {
    api: API_VERSION,
    pid: process.pid,
    policy: v.policyName,
    engine: v.metrics.snapshot().engine ?? null,
    programDevice: v.programDeviceHealth(),
    vram: v.vramStatus(),
    vms: vms.length,
    attached: vms.filter((x) => x.state !== 'idle').length,
  };
}
