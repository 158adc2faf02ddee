// The fd keeper (src/persist/keeper.ts) with real sockets and real processes: who may talk to
// it (SO_PEERCRED: same uid or root, checked against a client running as another user), fds
// deposited, taken back (the same files) and removed, a server that dies (SIGKILL of a real
// child process) leaving its fds held for a successor that finds them, arrivals sampled while
// no server is attached, a refused second server, and the live-upgrade handover.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { Keeper } from '../../src/persist/keeper.ts';
import { KeeperClient, KeeperRefused, type Attached } from '../../src/persist/keeper-client.ts';
import { FdDepot } from '../../src/persist/depot.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '../..');
const node = path.join(repo, 'node_modules/.bin/node');

const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const f of cleanup.splice(0).reverse()) f();
});

function tmpDir(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-keeper-'));
  fs.chmodSync(d, 0o755);
  cleanup.push(() => fs.rmSync(d, { recursive: true, force: true }));
  return d;
}

function startKeeper(opts: { scanMs?: number } = {}): Keeper {
  const k = new Keeper({ socket: path.join(tmpDir(), 'keeper.sock'), scanMs: opts.scanMs });
  cleanup.push(() => k.close('test over'));
  return k;
}

function client(k: Keeper): KeeperClient {
  const c = KeeperClient.tryConnect(k.socket);
  expect(c).not.toBeNull();
  cleanup.push(() => c!.close());
  return c!;
}

/** A memfd holding `text`. */
function memfdWith(text: string): number {
  const fd = native.memfdCreate('keeper-test', 4096);
  native.pwrite(fd, new TextEncoder().encode(text), 0);
  return fd;
}

function contents(fd: number, n: number): string {
  const b = new Uint8Array(n);
  native.pread(fd, b, 0);
  return new TextDecoder().decode(b);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end) throw new Error('condition not met in time');
    await sleep(10);
  }
}

describe('fd keeper', () => {
  it('a file the guest dropped stays with the keeper until the next committed checkpoint (FdDepot.retire)', async () => {
    const k = startKeeper();
    const a = client(k);
    await a.hello('server');
    const depot = new FdDepot(a);
    const fd1 = memfdWith('one');
    const fd2 = memfdWith('two');
    depot.put('dma:vm0:1', fd1);
    depot.put('irq:vm0:msix:0', fd2);
    // Unmapped: this process forgets it at once (its fd is closed next) ...
    depot.retire('dma:vm0:1');
    native.close(fd1);
    expect([...depot.held.keys()]).toEqual(['irq:vm0:msix:0']);
    // ... but a successor started from the checkpoint before the unmap still finds the file.
    let got = await a.take();
    expect([...got.keys()].sort()).toEqual(['dma:vm0:1', 'irq:vm0:msix:0']);
    expect(contents(got.get('dma:vm0:1')!, 3)).toBe('one');
    for (const fd of got.values()) native.close(fd);
    // An eventfd replaced under the same key before the commit: the new one is kept.
    depot.retire('irq:vm0:msix:0');
    const fd3 = memfdWith('three');
    depot.put('irq:vm0:msix:0', fd3);
    depot.commitRetired();
    got = await a.take();
    expect([...got.keys()]).toEqual(['irq:vm0:msix:0']);
    expect(contents(got.get('irq:vm0:msix:0')!, 5)).toBe('three');
    for (const fd of [...got.values(), fd2, fd3]) native.close(fd);
    expect(k.keys()).toEqual(['irq:vm0:msix:0']);
  });

  it('holds deposited fds: a server takes back the same files, removes some, and the rest stay', async () => {
    const k = startKeeper();
    const a = client(k);
    const hello = (await a.hello('server')) as Attached;
    expect(hello.keys).toEqual([]);
    const fa = memfdWith('alpha');
    const fb = memfdWith('bravo');
    const fc = memfdWith('charlie');
    expect(a.put('vram', fa)).toBe(true);
    expect(a.put('dma:vm0:1', fb)).toBe(true);
    a.put('irq:vm0:msix:0', fc);
    // Our copies can go: the keeper holds its own.
    for (const fd of [fa, fb, fc]) native.close(fd);
    a.remove(['irq:vm0:msix:0']);
    const got = await a.take();
    expect([...got.keys()].sort()).toEqual(['dma:vm0:1', 'vram']);
    expect(contents(got.get('vram')!, 5)).toBe('alpha');
    expect(contents(got.get('dma:vm0:1')!, 5)).toBe('bravo');
    // Replacing a key closes the old fd in the keeper and keeps the new file.
    a.put('vram', memfdWith('delta'));
    const again = await a.take();
    expect(contents(again.get('vram')!, 5)).toBe('delta');
    for (const fd of [...got.values(), ...again.values()]) native.close(fd);
    expect(k.keys()).toEqual(['dma:vm0:1', 'vram']);
  });

  // Running a client as another user needs root (CI runs as root).
  const root = process.getuid?.() === 0;
  it.skipIf(!root)(`refuses a client of another user (SO_PEERCRED), even when the socket file lets it connect${root ? '' : ' (skipped: needs root to run a client as another user)'}`, async () => {
    const k = startKeeper();
    const a = client(k);
    await a.hello('server');
    a.put('vram', memfdWith('secret'));
    // Loosen the file mode so the kernel lets `nobody` connect: only the credential check stands.
    fs.chmodSync(k.socket, 0o666);
    const probe = `
      import { native } from ${JSON.stringify(path.join(repo, 'src/native.ts'))};
      const fd = native.connectUnix(${JSON.stringify(k.socket)}, false, true);
      if (fd < 0) { console.log('connect-failed', fd); process.exit(0); }
      native.sendmsg(fd, new TextEncoder().encode(JSON.stringify({ op: 'hello', role: 'server', pid: process.pid })), undefined);
      native.sendmsg(fd, new TextEncoder().encode(JSON.stringify({ op: 'take' })), undefined);
      const buf = new Uint8Array(65536); const fds = new Int32Array(254);
      const n = native.recvmsg(fd, buf, fds);
      console.log('recv', n, 'fds', fds[0]);
    `;
    // Asynchronously: the keeper runs on this thread and must answer meanwhile.
    const p = spawn(node, ['--input-type=module', '-e', probe], { uid: 65534, gid: 65534, stdio: ['ignore', 'pipe', 'pipe'] });
    cleanup.push(() => p.kill('SIGKILL'));
    const r = { stdout: '', stderr: '' };
    p.stdout!.on('data', (d) => (r.stdout += d));
    p.stderr!.on('data', (d) => (r.stderr += d));
    await new Promise((res) => p.once('close', res));
    expect(r.stderr).toBe('');
    // The keeper closed the connection at once: EOF (0 bytes) or a reset, and no fd came back.
    expect(r.stdout.trim()).toMatch(/^recv (0|-104) fds 0$/);
    expect(k.keys()).toEqual(['vram']);
    expect(k.serverPid).toBe(process.pid);
  });

  it('keeps the fds of a server killed with SIGKILL; the next server finds them and when it died', async () => {
    const k = startKeeper();
    // A real server process: deposits a memfd and a socket, then waits to be killed.
    const child = `
      import { native } from ${JSON.stringify(path.join(repo, 'src/native.ts'))};
      import { KeeperClient } from ${JSON.stringify(path.join(repo, 'src/persist/keeper-client.ts'))};
      const c = KeeperClient.tryConnect(${JSON.stringify(k.socket)});
      await c.hello('server');
      const fd = native.memfdCreate('child', 4096);
      native.pwrite(fd, new TextEncoder().encode('from the dead'), 0);
      c.put('checkpoint', fd);
      const [s0, s1] = native.socketpair();
      c.put('conn:vm0', s0);
      c.put('peer:vm0', s1);
      console.log('deposited');
      setInterval(() => {}, 1000);
    `;
    const p = spawn(node, ['--input-type=module', '-e', child], { stdio: ['ignore', 'pipe', 'inherit'] });
    cleanup.push(() => p.kill('SIGKILL'));
    let out = '';
    p.stdout!.on('data', (d) => (out += d));
    await until(() => out.includes('deposited'), 30_000);
    await until(() => k.keys().length === 3);
    const died = performance.now();
    p.kill('SIGKILL');
    await new Promise((r) => p.once('exit', r));
    // The connection still works although its server died: nothing saw EOF.
    const s = client(k);
    const hello = (await s.hello('server')) as Attached;
    expect(hello.keys.sort()).toEqual(['checkpoint', 'conn:vm0', 'peer:vm0']);
    expect(hello.gapSince).not.toBeNull();
    expect(hello.handover).toBe(false);
    const got = await s.take();
    expect(contents(got.get('checkpoint')!, 13)).toBe('from the dead');
    const conn = got.get('conn:vm0')!;
    const peer = got.get('peer:vm0')!;
    expect(native.sendmsg(peer, new Uint8Array([7]), undefined)).toBe(1);
    const b = new Uint8Array(4);
    expect(native.recvmsg(conn, b, new Int32Array(2))).toBe(1);
    expect(b[0]).toBe(7);
    expect(performance.now() - died).toBeLessThan(30_000);
    for (const fd of got.values()) native.close(fd);
  });

  it('samples when requests arrive while no server is attached', async () => {
    const k = startKeeper({ scanMs: 20 });
    const a = client(k);
    await a.hello('server');
    const [ours, qemu] = native.socketpair();
    a.put('conn:vm0', ours);
    native.close(ours);
    await until(() => k.keys().length === 1);
    a.close(); // the server is gone
    await sleep(50);
    // Two vfio-user requests (16-byte headers, msg_size 16 and 24) arrive during the gap.
    const req = (id: number, size: number) => {
      const m = new Uint8Array(size);
      const dv = new DataView(m.buffer);
      dv.setUint16(0, id, true);
      dv.setUint16(2, 9, true);
      dv.setUint32(4, size, true);
      return m;
    };
    const t0 = Number(process.hrtime.bigint()) / 1e6;
    native.sendmsg(qemu, req(1, 16), undefined);
    await sleep(150);
    native.sendmsg(qemu, req(2, 24), undefined);
    await sleep(100);
    const b = client(k);
    const hello = (await b.hello('server')) as Attached;
    const times = hello.arrivals['conn:vm0']!;
    expect(times.length).toBe(2);
    expect(times[0]!).toBeGreaterThanOrEqual(t0 - 1);
    expect(times[1]! - times[0]!).toBeGreaterThan(100);
    // Sampling peeked: the requests are still queued, whole, for the server.
    const got = await b.take();
    const buf = new Uint8Array(64);
    expect(native.recvmsg(got.get('conn:vm0')!, buf, new Int32Array(2))).toBe(40);
    native.close(qemu);
    for (const fd of got.values()) native.close(fd);
  });

  it('refuses a second server while one is attached; only the attached server may deposit', async () => {
    const k = startKeeper();
    const a = client(k);
    await a.hello('server');
    const b = client(k);
    await expect(b.hello('server')).rejects.toBeInstanceOf(KeeperRefused);
    const c = client(k);
    await c.hello('control');
    c.put('vram', memfdWith('intruder'));
    await sleep(50);
    expect(k.keys()).toEqual([]);
  });

  it('promotes the waiting standby the moment the server dies; refuses a standby of another server', async () => {
    const k = startKeeper();
    const srv = client(k);
    await srv.hello('server');
    srv.put('vram', memfdWith('kept'));
    const stale = client(k);
    await expect(stale.hello('standby', process.pid + 1)).rejects.toMatchObject({ standby: true });
    const sb = client(k);
    expect(await sb.hello('standby', process.pid)).toEqual({ waiting: process.pid, prepare: false });
    const second = client(k);
    await expect(second.hello('standby', process.pid)).rejects.toMatchObject({ standby: true });
    const promoted = sb.adopted(0);
    srv.close(); // the server dies
    const a = await promoted;
    expect(a.keys).toEqual(['vram']);
    expect(a.handover).toBe(false); // a crash: the successor rules of the journal apply
    expect(a.gapSince).not.toBeNull();
    expect(k.serverPid).toBe(process.pid);
    const got = await sb.take();
    expect(contents(got.get('vram')!, 4)).toBe('kept');
    for (const fd of got.values()) native.close(fd);
  });

  it('hands over from a server to a waiting successor on request of an upgrade', async () => {
    const k = startKeeper();
    const old = client(k);
    await old.hello('server');
    old.put('vram', memfdWith('kept'));
    const events: string[] = [];
    old.events = {
      upgrade: () => events.push('upgrade'),
      successorReady: (pid) => {
        events.push(`ready:${pid}`);
        old.handover(1234.5);
      },
    };
    const ctl = client(k);
    await ctl.hello('control');
    const upgraded = ctl.upgrade(10_000);
    await until(() => events.includes('upgrade'));
    const next = client(k);
    const w = await next.hello('successor');
    expect(w).toEqual({ waiting: process.pid, prepare: false });
    const adopted = await next.adopted(10_000);
    expect(adopted.handover).toBe(true);
    expect(adopted.stoppedAt).toBe(1234.5);
    expect(adopted.keys).toEqual(['vram']);
    next.serving(42);
    expect(await upgraded).toEqual({ pid: process.pid, pauseMs: 42 });
    // The old server has no rights any more; the successor does.
    old.put('stale', memfdWith('old'));
    next.put('fresh', memfdWith('new'));
    await until(() => k.keys().includes('fresh'));
    expect(k.keys()).toEqual(['fresh', 'vram']);
  });
  it('lets a preparing successor take the fds while the server serves, and hands over only once it is ready', async () => {
    const k = startKeeper();
    const old = client(k);
    await old.hello('server');
    old.put('vram', memfdWith('kept'));
    const events: string[] = [];
    old.events = { successorReady: (pid) => events.push(`ready:${pid}`) };
    const next = client(k);
    expect(await next.hello('successor', undefined, true)).toEqual({ waiting: process.pid, prepare: true });
    // Ahead of the handover: duplicates of what is held; the server has not been told yet.
    const early = await next.take();
    expect(contents(early.get('vram')!, 4)).toBe('kept');
    for (const fd of early.values()) native.close(fd);
    old.put('late', memfdWith('late'));
    await until(() => k.keys().includes('late'));
    expect(events).toEqual([]);
    // A control client is still refused the fds.
    const ctl = client(k);
    await ctl.hello('control');
    await expect(ctl.take()).rejects.toThrow(/only the attached server/);
    next.ready();
    await until(() => events.length > 0);
    expect(events).toEqual([`ready:${process.pid}`]);
    old.handover(99);
    const adopted = await next.adopted(10_000);
    expect(adopted.keys).toEqual(['late', 'vram']);
    const got = await next.take();
    expect(contents(got.get('late')!, 4)).toBe('late');
    for (const fd of got.values()) native.close(fd);
  });
});
