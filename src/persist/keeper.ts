// The fd keeper: a small process that holds, under stable keys, every fd that makes up the VMs'
// devices (listening and connected vfio-user sockets, DMA-map fds, IRQ eventfds, the VRAM
// memfd, the checkpoint and journal memfds), so that nothing a guest needs dies with
// `vugpu serve`: QEMU never sees EOF while a server is replaced. It speaks SOCK_SEQPACKET
// records (wire.ts) on a socket only its own user (or root) may use (SO_PEERCRED is checked,
// the file is 0600). It knows nothing of vfio-user beyond message headers: while no server is
// attached (a crash) it samples when requests arrive, so that the successor can tell requests
// QEMU has already given up on (its x-msg-timeout) from fresh ones.
//
// Roles: one `server` (whose fds these are: only it may put/remove/take), at most one
// `successor` waiting for a live upgrade, at most one `standby` (a server process started ahead
// of time, promoted the moment the server dies: a crash then costs a restore, not a process
// start), any number of `control` clients (`vugpu upgrade`).
import fs from 'node:fs';
import path from 'node:path';
import { native, EAGAIN } from '../native.ts';
import { logger, type Logger } from '../log.ts';
import { FDS_PER_RECORD, MAX_RECORD, readRecords, sendRecord, type WireRecord } from './wire.ts';

export interface KeeperOptions {
  socket: string;
  log?: Logger;
  /** Exit after this long with no server, no fds and no clients (default 60 s). */
  idleExitMs?: number;
  /** While no server is attached: how often arrivals are sampled (default 100 ms). */
  scanMs?: number;
}

type Role = 'unknown' | 'server' | 'successor' | 'standby' | 'control';

interface Conn {
  fd: number;
  watch: number;
  pid: number;
  uid: number;
  role: Role;
  closed: boolean;
}

/** vfio-user header size and the offset of msg_size in it. */
const VFU_HEADER = 16;
const PEEK_LIMIT = 2 << 20;

export function nowMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

export class Keeper {
  readonly socket: string;
  private readonly log: Logger;
  private readonly listenFd: number;
  private readonly listenWatch: number;
  private readonly fds = new Map<string, number>();
  private readonly conns = new Map<number, Conn>();
  private active: Conn | null = null;
  private successor: Conn | null = null;
  private standby: Conn | null = null;
  private readonly upgradeWaiters: Conn[] = [];
  /** Monotonic ms when the last server went away without a handover (null while one is attached). */
  private gapSince: number | null = null;
  /** Per conn key: monotonic ms at which each queued request was first seen, in queue order. */
  private readonly arrivals = new Map<string, number[]>();
  private scanTimer: NodeJS.Timeout | null = null;
  private idleTimer: NodeJS.Timeout | null = null;
  private readonly buf = new Uint8Array(MAX_RECORD);
  private readonly fdsOut = new Int32Array(254);
  private readonly peekBuf = new Uint8Array(PEEK_LIMIT);
  private readonly idleExitMs: number;
  private readonly scanMs: number;
  private closed = false;
  /** Resolves when the keeper has stopped (bye, idle, close()). */
  readonly done: Promise<void>;
  private resolveDone!: () => void;

  constructor(opts: KeeperOptions) {
    this.socket = opts.socket;
    this.log = opts.log ?? logger.child({ part: 'keeper' });
    this.idleExitMs = opts.idleExitMs ?? 60_000;
    this.scanMs = opts.scanMs ?? 100;
    this.done = new Promise((r) => (this.resolveDone = r));
    fs.mkdirSync(path.dirname(this.socket), { recursive: true, mode: 0o700 });
    const fd = native.listenUnix(this.socket, 16, true);
    if (fd < 0) throw new Error(`keeper: listen on ${this.socket} failed: errno ${-fd}`);
    fs.chmodSync(this.socket, 0o600);
    this.listenFd = fd;
    this.listenWatch = native.watch(fd, () => this.onAccept());
    this.armIdle();
    this.log.info({ socket: this.socket, pid: process.pid }, 'fd keeper listening');
  }

  /** Keys held now (tests, status). */
  keys(): string[] {
    return [...this.fds.keys()].sort();
  }

  get serverPid(): number | null {
    return this.active?.pid ?? null;
  }

  /** Stop: close every fd held (the VMs that still depend on them lose their device if no
   * server holds them either). */
  close(reason = 'closed'): void {
    if (this.closed) return;
    this.closed = true;
    if (this.scanTimer) clearInterval(this.scanTimer);
    if (this.idleTimer) clearTimeout(this.idleTimer);
    native.unwatch(this.listenWatch);
    native.close(this.listenFd);
    try {
      fs.rmSync(this.socket, { force: true });
    } catch {
      // gone already
    }
    for (const c of [...this.conns.values()]) this.drop(c, false);
    for (const fd of this.fds.values()) native.close(fd);
    this.fds.clear();
    this.log.info({ reason }, 'fd keeper stopped');
    this.resolveDone();
  }

  private onAccept(): void {
    for (;;) {
      const fd = native.accept(this.listenFd);
      if (fd === -EAGAIN || fd < 0) return;
      const cred = native.peerCred(fd);
      const me = process.getuid?.() ?? 0;
      if (typeof cred === 'number' || (cred.uid !== me && cred.uid !== 0)) {
        this.log.warn({ cred }, 'refused a client of another user');
        native.close(fd);
        continue;
      }
      const c: Conn = { fd, watch: -1, pid: cred.pid, uid: cred.uid, role: 'unknown', closed: false };
      c.watch = native.watch(fd, () => this.pump(c));
      this.conns.set(fd, c);
      this.armIdle();
    }
  }

  /** Handle everything a client has sent (and its EOF). */
  private pump(c: Conn): void {
    if (c.closed) return;
    const { records, gone } = readRecords(c.fd, this.buf, this.fdsOut);
    for (const r of records) {
      try {
        this.handle(c, r);
      } catch (err) {
        this.log.error({ err, op: r.msg.op }, 'keeper: request failed');
        for (const f of r.fds) if (f >= 0) native.close(f);
      }
    }
    if (gone) this.drop(c, true);
  }

  private handle(c: Conn, r: WireRecord): void {
    const m = r.msg;
    const stray = (): void => {
      for (const f of r.fds) native.close(f);
    };
    switch (m.op) {
      case 'hello':
        stray();
        return this.hello(c, String(m.role ?? ''), typeof m.parent === 'number' ? m.parent : null, m.prepare === true);
      case 'put': {
        const key = String(m.key ?? '');
        if (c !== this.active || r.fds.length !== 1 || key === '') {
          stray();
          if (c !== this.active) this.log.warn({ pid: c.pid, key }, 'put from a client that is not the server: ignored');
          return;
        }
        const old = this.fds.get(key);
        if (old !== undefined) native.close(old);
        this.fds.set(key, r.fds[0]!);
        return;
      }
      case 'remove': {
        stray();
        if (c !== this.active) return;
        const keys = Array.isArray(m.keys) ? m.keys.map(String) : [String(m.key ?? '')];
        for (const key of keys) {
          const fd = this.fds.get(key);
          if (fd === undefined) continue;
          native.close(fd);
          this.fds.delete(key);
        }
        return;
      }
      case 'take':
        stray();
        // A waiting successor may take duplicates ahead of the handover, to build its server
        // while the old one still serves (it gets them all at the handover anyway).
        if (c !== this.active && c !== this.successor) {
          sendRecord(c.fd, { op: 'error', message: 'only the attached server may take the fds' });
          return;
        }
        return this.take(c);
      case 'ready':
        // A successor that prepared (hello with prepare) is ready for the handover.
        stray();
        if (c === this.successor && this.active) {
          sendRecord(this.active.fd, { op: 'successor-ready', pid: c.pid });
          this.log.info({ server: this.active.pid, successor: c.pid }, 'successor ready for the handover');
        }
        return;
      case 'handover':
        stray();
        return this.handover(c, typeof m.stoppedAt === 'number' ? m.stoppedAt : null);
      case 'serving':
        stray();
        if (c !== this.active) return;
        for (const w of this.upgradeWaiters.splice(0)) {
          sendRecord(w.fd, { op: 'upgraded', pid: c.pid, pauseMs: m.pauseMs ?? null });
        }
        return;
      case 'upgrade':
        stray();
        return this.upgrade(c);
      case 'resume':
        // The old server gave up on an upgrade (the successor failed): it keeps the role.
        stray();
        if (c === this.active && this.successor) this.drop(this.successor, false);
        for (const w of this.upgradeWaiters.splice(0)) sendRecord(w.fd, { op: 'error', message: String(m.reason ?? 'upgrade abandoned') });
        return;
      case 'status':
        stray();
        sendRecord(c.fd, {
          op: 'status', pid: process.pid, server: this.active?.pid ?? null, successor: this.successor?.pid ?? null, standby: this.standby?.pid ?? null,
          keys: this.keys(), gapSince: this.gapSince,
        });
        return;
      case 'bye':
        stray();
        if (c !== this.active) return;
        this.close('the server stopped cleanly');
        return;
      default:
        stray();
        sendRecord(c.fd, { op: 'error', message: `unknown op ${m.op}` });
    }
  }

  private hello(c: Conn, role: string, parent: number | null, prepare = false): void {
    if (role === 'control') {
      c.role = 'control';
      sendRecord(c.fd, { op: 'welcome', role: 'control', server: this.active?.pid ?? null });
      return;
    }
    if (role !== 'server' && role !== 'successor' && role !== 'standby') {
      sendRecord(c.fd, { op: 'error', message: `unknown role ${role}` });
      return;
    }
    // A server that died may have left puts unread in its connection: take them first.
    for (const o of [...this.conns.values()]) if (o !== c) this.pump(o);
    if (this.active !== null) {
      if (role === 'standby' && (this.standby !== null || (parent !== null && parent !== this.active.pid))) {
        // Started by an earlier server (a build an upgrade replaced), or one is waiting already.
        sendRecord(c.fd, { op: 'refused', standby: true, message: this.standby !== null ? 'a standby is already waiting' : `started by server ${parent}, not by the attached server ${this.active.pid}` });
        return;
      }
      if (role === 'standby') {
        c.role = 'standby';
        this.standby = c;
        sendRecord(c.fd, { op: 'wait', server: this.active.pid });
        this.log.info({ server: this.active.pid, standby: c.pid }, 'standby server waiting');
        return;
      }
      if (role === 'successor' && this.successor === null) {
        c.role = 'successor';
        this.successor = c;
        sendRecord(c.fd, { op: 'wait', server: this.active.pid, prepare });
        // prepare: the successor says 'ready' when it has built its server (ahead of the pause).
        if (!prepare) sendRecord(this.active.fd, { op: 'successor-ready', pid: c.pid });
        this.log.info({ server: this.active.pid, successor: c.pid, prepare }, 'successor waiting for the handover');
        return;
      }
      sendRecord(c.fd, {
        op: 'refused',
        message: `another vugpu serve (pid ${this.active.pid}) holds this keeper's fds`,
      });
      return;
    }
    this.attach(c, false, null);
  }

  /** Make c the server; it learns what is held (adoption if anything is). `waiting`: c waits
   * for an 'adopt' record (a successor or standby), else it gets the 'welcome' answer. */
  private attach(c: Conn, handover: boolean, stoppedAt: number | null, waiting = handover): void {
    c.role = 'server';
    if (c === this.standby) this.standby = null;
    this.active = c;
    this.stopScan();
    const arrivals = Object.fromEntries(this.arrivals);
    this.arrivals.clear();
    sendRecord(c.fd, {
      op: waiting ? 'adopt' : 'welcome', role: 'server', keys: this.keys(), gapSince: this.gapSince, arrivals, stoppedAt,
      handover, keeperPid: process.pid,
    });
    this.log.info({ pid: c.pid, keys: this.fds.size, handover, gapMs: this.gapSince === null ? null : Math.round(nowMs() - this.gapSince) }, 'server attached');
    this.gapSince = null;
  }

  private take(c: Conn): void {
    const entries = [...this.fds.entries()];
    if (entries.length === 0) {
      sendRecord(c.fd, { op: 'fds', keys: [], done: true });
      return;
    }
    for (let i = 0; i < entries.length; i += FDS_PER_RECORD) {
      const part = entries.slice(i, i + FDS_PER_RECORD);
      const done = i + FDS_PER_RECORD >= entries.length;
      if (!sendRecord(c.fd, { op: 'fds', keys: part.map((e) => e[0]), done }, part.map((e) => e[1]))) {
        this.log.error({ pid: c.pid }, 'could not hand fds to the server');
        return;
      }
    }
  }

  private upgrade(c: Conn): void {
    c.role = 'control';
    if (this.active === null) {
      sendRecord(c.fd, { op: 'error', message: 'no vugpu serve is attached to this keeper' });
      return;
    }
    if (this.successor !== null) {
      sendRecord(c.fd, { op: 'error', message: `an upgrade is already under way (successor pid ${this.successor.pid})` });
      return;
    }
    this.upgradeWaiters.push(c);
    sendRecord(this.active.fd, { op: 'upgrade' });
    this.log.info({ server: this.active.pid }, 'upgrade requested');
  }

  private handover(c: Conn, stoppedAt: number | null): void {
    if (c !== this.active || this.successor === null) return;
    const next = this.successor;
    this.successor = null;
    this.active = null;
    c.role = 'control'; // the old server may still say goodbye; it holds no rights now
    this.log.info({ from: c.pid, to: next.pid }, 'handover');
    // A standby runs the old build: retire it (the new server starts its own).
    if (this.standby) this.drop(this.standby, false);
    this.attach(next, true, stoppedAt);
  }

  private drop(c: Conn, eof: boolean): void {
    if (c.closed) return;
    c.closed = true;
    native.unwatch(c.watch);
    native.close(c.fd);
    this.conns.delete(c.fd);
    const i = this.upgradeWaiters.indexOf(c);
    if (i >= 0) this.upgradeWaiters.splice(i, 1);
    if (c === this.standby) {
      this.standby = null;
      // Not retired by us: tell the server, which starts another.
      if (eof && this.active) sendRecord(this.active.fd, { op: 'standby-gone', pid: c.pid });
    }
    if (c === this.successor) {
      this.successor = null;
      if (this.active) sendRecord(this.active.fd, { op: 'successor-gone', pid: c.pid });
      if (eof) this.log.warn({ pid: c.pid }, 'successor went away before the handover');
    }
    if (c === this.active) {
      this.active = null;
      if (this.closed) return;
      if (this.successor !== null) {
        // The old server died during an upgrade: the successor adopts as after a crash.
        const next = this.successor;
        this.successor = null;
        this.gapSince = nowMs();
        this.log.warn({ pid: c.pid, successor: next.pid }, 'server gone during the upgrade; the successor adopts');
        this.attach(next, true, null);
      } else if (this.standby !== null) {
        const next = this.standby;
        this.gapSince = nowMs();
        this.log.warn({ pid: c.pid, standby: next.pid, keys: this.fds.size }, 'server gone without a handover: the standby takes over');
        this.attach(next, false, null, true);
      } else {
        this.gapSince = nowMs();
        this.log.warn({ pid: c.pid, keys: this.fds.size }, 'server gone without a handover: holding its fds for a successor');
        this.startScan();
      }
    }
    this.armIdle();
  }

  // ---- arrivals while no server is attached ----

  private startScan(): void {
    if (this.scanTimer) return;
    this.scan();
    this.scanTimer = setInterval(() => this.scan(), this.scanMs);
  }

  private stopScan(): void {
    if (this.scanTimer) clearInterval(this.scanTimer);
    this.scanTimer = null;
  }

  /** Peek each connection's queue and note when each request was first seen. */
  private scan(): void {
    const t = nowMs();
    for (const [key, fd] of this.fds) {
      if (!key.startsWith('conn:')) continue;
      const n = this.queuedMessages(fd);
      if (n < 0) continue;
      const seen = this.arrivals.get(key) ?? [];
      while (seen.length < n) seen.push(t);
      this.arrivals.set(key, seen);
    }
  }

  /** Number of vfio-user messages (whole or begun) queued on a connected socket, or -1. */
  private queuedMessages(fd: number): number {
    // Never block the keeper on an empty queue (servers use these sockets non-blocking anyway).
    try {
      native.setNonblock(fd, true);
    } catch {
      return -1;
    }
    if (native.setPeekOffset(fd, 0) < 0) return -1;
    let have = 0;
    for (;;) {
      if (have >= this.peekBuf.length) break;
      const n = native.recvmsg(fd, this.peekBuf.subarray(have), this.fdsOut, true);
      if (n <= 0) break;
      const k = this.fdsOut[0]!;
      for (let i = 1; i <= k; i++) native.close(this.fdsOut[i]!); // peeked duplicates
      have += n;
    }
    native.setPeekOffset(fd, 0);
    const dv = new DataView(this.peekBuf.buffer, 0, have);
    let count = 0;
    let at = 0;
    while (at < have) {
      count++;
      if (have - at < 8) break;
      const size = dv.getUint32(at + 4, true);
      if (size < VFU_HEADER) break;
      at += size;
    }
    return count;
  }

  private armIdle(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    if (this.closed || this.conns.size > 0 || this.fds.size > 0) return;
    this.idleTimer = setTimeout(() => this.close(`idle for ${this.idleExitMs} ms with nothing to hold`), this.idleExitMs);
    this.idleTimer.unref();
  }
}

/** `vugpu keeper --socket PATH`: run until told to stop. Exits 0 at once if a keeper already
 * answers on that socket. */
export async function runKeeper(socket: string): Promise<number> {
  const probe = native.connectUnix(socket, false, true);
  if (probe >= 0) {
    native.close(probe);
    logger.info({ socket }, 'a keeper is already running on this socket');
    return 0;
  }
  const k = new Keeper({ socket });
  const stop = (sig: string): void => k.close(`signal ${sig}`);
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
  process.on('SIGHUP', () => {}); // the terminal that started a server may go away
  await k.done;
  return 0;
}
