// The server's side of the fd keeper (keeper.ts): find or start the keeper, say who we are,
// deposit and remove fds as the devices create and close them, take them back after a crash
// or a handover, and hear about upgrades. Deposits are fire-and-forget SEQPACKET records: once
// sendmsg returns, the record (with its fds) is in the keeper's socket and survives our death.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { native } from '../native.ts';
import { logger } from '../log.ts';
import { MAX_RECORD, readRecords, sendRecord, type WireRecord } from './wire.ts';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export type KeeperRole = 'server' | 'successor' | 'standby' | 'control';

/** What the keeper told a server that attached (or adopted after a handover). */
export interface Attached {
  /** Keys of the fds held: empty on a fresh start, the previous server's on adoption. */
  keys: string[];
  /** Monotonic ms since which no server was attached (a crash), or null. */
  gapSince: number | null;
  /** Per `conn:` key, monotonic ms at which each queued request was first seen during the gap. */
  arrivals: Record<string, number[]>;
  /** Handover: monotonic ms at which the old server stopped reading. */
  stoppedAt: number | null;
  handover: boolean;
  keeperPid: number;
}

export interface KeeperEvents {
  /** `vugpu upgrade` asked for a live upgrade. */
  upgrade?(): void;
  successorReady?(pid: number): void;
  successorGone?(pid: number): void;
  /** The standby server process went away (it is started again). */
  standbyGone?(pid: number): void;
  /** We are the successor and the old server handed over. */
  adopt?(a: Attached): void;
  /** The keeper's connection is gone (the keeper died or refused us). */
  gone?(): void;
}

export class KeeperClient {
  readonly socket: string;
  private readonly fd: number;
  private watchH: number;
  private readonly buf = new Uint8Array(MAX_RECORD);
  private readonly fdsOut = new Int32Array(254);
  private readonly waiters: { ops: string[]; resolve: (r: WireRecord) => void; reject: (e: Error) => void }[] = [];
  private isClosed = false;
  /** 'adopt' records that came before anyone waited for them. */
  private readonly early: WireRecord[] = [];
  events: KeeperEvents = {};

  private constructor(socket: string, fd: number) {
    this.socket = socket;
    this.fd = fd;
    native.setNonblock(fd, true);
    this.watchH = native.watch(fd, () => this.pump());
  }

  get closed(): boolean {
    return this.isClosed;
  }

  /** Connect to a running keeper; null if none answers. */
  static tryConnect(socket: string): KeeperClient | null {
    const fd = native.connectUnix(socket, false, true);
    if (fd < 0) return null;
    return new KeeperClient(socket, fd);
  }

  /** The status of the keeper on socket, asked over a control connection of its own; null if none answers. */
  static async statusAt(socket: string): Promise<Awaited<ReturnType<KeeperClient['status']>> | null> {
    const k = KeeperClient.tryConnect(socket);
    if (!k) return null;
    try {
      await k.hello('control');
      return await k.status();
    } finally {
      k.close();
    }
  }

  /** Connect, starting a keeper (detached, its log next to its socket) if none answers. */
  static async connectOrSpawn(socket: string, timeoutMs = 10_000): Promise<KeeperClient> {
    const c = KeeperClient.tryConnect(socket);
    if (c) return c;
    spawnKeeper(socket);
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const k = KeeperClient.tryConnect(socket);
      if (k) return k;
      if (performance.now() > deadline) throw new Error(`the fd keeper did not come up on ${socket} within ${timeoutMs} ms (see ${socket}.log)`);
      await sleep(20);
    }
  }

  /** Say who we are. A server gets `Attached` at once; a successor waits for the handover
   * (resolved by the 'adopt' record, also passed to events.adopt) — with `prepare`, the handover
   * waits for its ready() (take() is allowed meanwhile). */
  async hello(role: KeeperRole, parent?: number, prepare = false): Promise<Attached | { waiting: number; prepare: boolean } | { control: true; server: number | null }> {
    this.send({ op: 'hello', role, pid: process.pid, parent, prepare });
    const r = await this.expect(['welcome', 'wait', 'refused', 'error']);
    if (r.msg.op === 'refused' || r.msg.op === 'error') throw new KeeperRefused(String(r.msg.message), r.msg.standby === true);
    // prepare: false from a keeper that predates it (it told the server at once).
    if (r.msg.op === 'wait') return { waiting: Number(r.msg.server), prepare: r.msg.prepare === true };
    if (r.msg.role === 'control') return { control: true, server: (r.msg.server as number | null) ?? null };
    return attached(r.msg);
  }

  /** Wait for the handover (successor role) or the promotion (standby role; timeoutMs 0: forever). */
  async adopted(timeoutMs = 60_000): Promise<Attached> {
    if (timeoutMs === 0) timeoutMs = 2 ** 31 - 1;
    const r = await this.expect(['adopt'], timeoutMs);
    return attached(r.msg);
  }

  /** Take (duplicates of) every fd held, by key. */
  async take(): Promise<Map<string, number>> {
    this.send({ op: 'take' });
    const out = new Map<string, number>();
    for (;;) {
      const r = await this.expect(['fds', 'error']);
      if (r.msg.op === 'error') throw new Error(`keeper: ${String(r.msg.message)}`);
      const keys = (r.msg.keys as string[]) ?? [];
      keys.forEach((k, i) => {
        const fd = r.fds[i];
        if (fd !== undefined) out.set(k, fd);
      });
      for (let i = keys.length; i < r.fds.length; i++) native.close(r.fds[i]!);
      if (r.msg.done) return out;
    }
  }

  put(key: string, fd: number): boolean {
    return this.send({ op: 'put', key }, [fd]);
  }

  remove(keys: string[]): void {
    if (keys.length > 0) this.send({ op: 'remove', keys });
  }

  /** A successor that said hello with `prepare` is ready: the old server may hand over. */
  ready(): void {
    this.send({ op: 'ready' });
  }

  handover(stoppedAt: number): void {
    this.send({ op: 'handover', stoppedAt });
  }

  serving(pauseMs: number | null): void {
    this.send({ op: 'serving', pauseMs });
  }

  resume(reason: string): void {
    this.send({ op: 'resume', reason });
  }

  /** Clean stop: the keeper closes everything and exits. */
  bye(): void {
    this.send({ op: 'bye' });
  }

  /** Control: ask the attached server for a live upgrade; resolves with the new server's pid
   * and measured pause once it serves. */
  async upgrade(timeoutMs = 120_000): Promise<{ pid: number; pauseMs: number | null }> {
    this.send({ op: 'upgrade' });
    const r = await this.expect(['upgraded', 'error'], timeoutMs);
    if (r.msg.op === 'error') throw new Error(String(r.msg.message));
    return { pid: Number(r.msg.pid), pauseMs: (r.msg.pauseMs as number | null) ?? null };
  }

  async status(): Promise<{ pid: number; server: number | null; successor: number | null; standby: number | null; keys: string[] }> {
    this.send({ op: 'status' });
    const r = await this.expect(['status']);
    return r.msg as unknown as { pid: number; server: number | null; successor: number | null; standby: number | null; keys: string[] };
  }

  close(): void {
    if (this.isClosed) return;
    this.isClosed = true;
    native.unwatch(this.watchH);
    native.close(this.fd);
    for (const w of this.waiters.splice(0)) w.reject(new Error('keeper connection closed'));
  }

  private send(msg: object, fds?: number[]): boolean {
    if (this.isClosed) return false;
    const ok = sendRecord(this.fd, msg, fds);
    if (!ok) logger.error({ op: (msg as { op: string }).op }, 'keeper: send failed');
    return ok;
  }

  private expect(ops: string[], timeoutMs = 10_000): Promise<WireRecord> {
    const i = this.early.findIndex((r) => ops.includes(r.msg.op));
    if (i >= 0) return Promise.resolve(this.early.splice(i, 1)[0]!);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        const i = this.waiters.indexOf(w);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(new Error(`keeper: no ${ops.join('/')} within ${timeoutMs} ms`));
      }, timeoutMs);
      const w = {
        ops,
        resolve: (r: WireRecord) => {
          clearTimeout(timer);
          resolve(r);
        },
        reject: (e: Error) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      this.waiters.push(w);
      this.pump();
    });
  }

  private pump(): void {
    if (this.isClosed) return;
    const { records, gone } = readRecords(this.fd, this.buf, this.fdsOut);
    for (const r of records) this.dispatch(r);
    if (gone) {
      this.close();
      this.events.gone?.();
    }
  }

  private dispatch(r: WireRecord): void {
    const i = this.waiters.findIndex((w) => w.ops.includes(r.msg.op));
    if (i >= 0) {
      const [w] = this.waiters.splice(i, 1);
      w!.resolve(r);
      if (r.msg.op === 'adopt') this.events.adopt?.(attached(r.msg));
      return;
    }
    for (const f of r.fds) native.close(f);
    switch (r.msg.op) {
      case 'upgrade':
        this.events.upgrade?.();
        return;
      case 'successor-ready':
        this.events.successorReady?.(Number(r.msg.pid));
        return;
      case 'successor-gone':
        this.events.successorGone?.(Number(r.msg.pid));
        return;
      case 'standby-gone':
        this.events.standbyGone?.(Number(r.msg.pid));
        return;
      case 'adopt':
        if (this.events.adopt) this.events.adopt(attached(r.msg));
        else this.early.push({ msg: r.msg, fds: [] });
        return;
      default:
        logger.warn({ op: r.msg.op }, 'keeper: unexpected record');
    }
  }
}

export class KeeperRefused extends Error {
  override name = 'KeeperRefused';
  /** A standby that is not needed (not an error). */
  readonly standby: boolean;
  constructor(message: string, standby = false) {
    super(message);
    this.standby = standby;
  }
}

function attached(m: WireRecord['msg']): Attached {
  const handover = m.handover === true;
  return {
    keys: (m.keys as string[]) ?? [],
    gapSince: (m.gapSince as number | null) ?? null,
    arrivals: (m.arrivals as Record<string, number[]>) ?? {},
    stoppedAt: (m.stoppedAt as number | null) ?? null,
    handover,
    keeperPid: Number(m.keeperPid ?? 0),
  };
}

/** Start `vugpu keeper --socket PATH` in its own session, outliving us; its log goes to PATH.log. */
export function spawnKeeper(socket: string): number | undefined {
  fs.mkdirSync(path.dirname(socket), { recursive: true, mode: 0o700 });
  const log = fs.openSync(`${socket}.log`, 'a', 0o600);
  const node = fs.existsSync(path.join(repoRoot, 'node_modules/.bin/node')) ? path.join(repoRoot, 'node_modules/.bin/node') : process.execPath;
  const child = spawn(node, [path.join(repoRoot, 'src/cli.ts'), 'keeper', '--socket', socket], {
    detached: true,
    stdio: ['ignore', log, log],
    cwd: repoRoot,
    env: { ...process.env, NOTIFY_SOCKET: '', LISTEN_FDS: '', LISTEN_PID: '', LISTEN_FDNAMES: '' },
  });
  fs.closeSync(log);
  child.unref();
  logger.info({ socket, pid: child.pid }, 'started the fd keeper');
  return child.pid;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
