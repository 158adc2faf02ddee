import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { Server } from '../../src/device-model/server.ts';
import { VfioUserClient } from '../../src/device-model/client.ts';
import { countFds, makeTestDevice, sealedMemfd, twoVms, uniqueName, until } from './helpers.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
let dir: string;
let server: Server;
const children: ChildProcess[] = [];

beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'vugpu-dm-'));
  server = new Server();
});

afterEach(() => {
  server.close();
  for (const ch of children.splice(0)) ch.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

function spawnFixture(script: string, arg: string, ready: string): Promise<ChildProcess> {
  const ch = spawn(process.execPath, [path.join(here, 'fixtures', script), arg], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(ch);
  return new Promise((resolve, reject) => {
    let out = '';
    ch.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes(ready)) resolve(ch);
    });
    ch.on('exit', (code) => reject(new Error(`${script} exited early (${code})`)));
  });
}

describe('vfio-user server', () => {
  it('a client that disconnects loses its DMA maps and IRQ fds; the socket accepts the next client', async () => {
    const t = makeTestDevice();
    const sock = path.join(dir, 'a.sock');
    const l = server.listen(sock, t.device);
    const c1 = VfioUserClient.connect(sock);
    await c1.version();
    const name = uniqueName('ram');
    const ram = sealedMemfd(name, 1 << 20);
    await c1.dmaMap({ addr: 0, size: 1 << 20, fd: ram });
    native.close(ram);
    const e = native.eventfd(0, true);
    await c1.setMsixEventfds(0, [e]);
    expect(countFds(name)).toBe(1);
    expect(l.endpoint).not.toBeNull();
    c1.close();
    await until(() => l.endpoint === null);
    expect(countFds(name)).toBe(0);
    expect(t.device.dma.count).toBe(0);
    expect(t.device.irq.state().eventfds[2]).toEqual([-1, -1, -1, -1]);
    expect(t.events).toEqual(['connected', 'mapped', 'unmapped', 'reset:disconnect', 'disconnected']);
    native.close(e);

    const c2 = VfioUserClient.connect(sock);
    await c2.version();
    expect(await c2.getInfo()).toMatchObject({ numRegions: 9 });
    expect(l.accepted).toBe(2);
    c2.close();
  });

  it('a device that is not ready holds an accepted client until it is (whenReady)', async () => {
    let release: (() => void) | null = null;
    const t = makeTestDevice({ callbacks: { whenReady: (go) => (release = go) } });
    const sock = path.join(dir, 'w.sock');
    const l = server.listen(sock, t.device);
    const c = VfioUserClient.connect(sock);
    let answered = false;
    const v = c.version().then(() => (answered = true));
    await until(() => release !== null);
    await new Promise((r) => setTimeout(r, 50));
    expect(answered).toBe(false); // accepted, not served
    expect(l.accepted).toBe(1);
    release!();
    await v;
    expect(await c.read32(0, 0)).toBe(0);
    c.close();
  });

  it('a SIGKILLed client process (QEMU dying) is cleaned up the same way', async () => {
    const t = makeTestDevice();
    const sock = path.join(dir, 'k.sock');
    const l = server.listen(sock, t.device);
    const ch = await spawnFixture('client-child.ts', sock, 'ready');
    await until(() => t.device.dma.count === 1 && t.device.irq.state().eventfds[2]![0]! >= 0);
    expect(countFds(`child-ram-${ch.pid}`)).toBe(1); // our duplicate of the child's memfd
    ch.kill('SIGKILL');
    await until(() => l.endpoint === null);
    expect(countFds(`child-ram-${ch.pid}`)).toBe(0);
    expect(t.device.irq.state().eventfds[2]![0]).toBe(-1);
    expect(t.resets).toEqual(['disconnect']);
    const c = VfioUserClient.connect(sock);
    await c.version();
    expect(await c.read32(0, 0)).toBe(0);
    c.close();
  });

  it('one server serves two sockets with independent devices', async () => {
    const { a, b, sa, sb } = twoVms(server, dir, ['vm1', 'vm2']);
    const ca = VfioUserClient.connect(sa);
    const cb = VfioUserClient.connect(sb);
    await Promise.all([ca.version(), cb.version()]);
    await ca.write32(0, 0x20, 0xaaaa);
    await cb.write32(0, 0x20, 0xbbbb);
    expect(await ca.read32(0, 0x20)).toBe(0xaaaa);
    expect(await cb.read32(0, 0x20)).toBe(0xbbbb);
    expect(a.regs.getUint32(0x20, true)).toBe(0xaaaa);
    expect(b.regs.getUint32(0x20, true)).toBe(0xbbbb);
    // Dropping one VM's client does not disturb the other.
    ca.close();
    await until(() => server.listener(sa)!.endpoint === null);
    expect(await cb.read32(0, 0x20)).toBe(0xbbbb);
    cb.close();
  });

  it('a second client for a busy device is refused; the first keeps working', async () => {
    const t = makeTestDevice();
    const sock = path.join(dir, 'busy.sock');
    server.listen(sock, t.device);
    const c1 = VfioUserClient.connect(sock);
    await c1.version();
    const c2 = VfioUserClient.connect(sock);
    const reason = await c2.closed;
    expect(reason.kind).toBe('eof');
    expect(await c1.read32(0, 0)).toBe(0);
    c1.close();
  });

  it('a client that reconnects before its EOF was processed is not refused', async () => {
    const t = makeTestDevice();
    const sock = path.join(dir, 'quick.sock');
    const l = server.listen(sock, t.device);
    const c1 = VfioUserClient.connect(sock);
    await c1.version();
    await c1.dmaMap({ addr: 0, size: 4096 });
    // Connect, then close the old client, synchronously: the server sees the new connection
    // before the old one's EOF (the epoll ready list is in event order).
    const c2 = VfioUserClient.connect(sock);
    c1.close();
    await c2.version();
    expect(t.device.dma.count).toBe(0);
    expect(l.accepted).toBe(2);
    c2.close();
  });

  it('closing the server drops clients and removes the socket file', async () => {
    const t = makeTestDevice();
    const sock = path.join(dir, 'bye.sock');
    server.listen(sock, t.device);
    const c = VfioUserClient.connect(sock);
    await c.version();
    server.close();
    expect((await c.closed).kind).toBe('eof');
    expect(native.connectUnix(sock, true)).toBeLessThan(0);
  });
});

/** Block the JS thread (the event loop cannot notice anything meanwhile). */
function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

describe('client and listener lifecycle', () => {
  it('a client dropped by the server during version() rejects cleanly; no rejection goes unhandled', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => {
      unhandled.push(reason);
    };
    process.on('unhandledRejection', onUnhandled);
    try {
      const sock = path.join(dir, 'drop.sock');
      await spawnFixture('server-child.ts', sock, 'listening');
      const c1 = VfioUserClient.connect(sock);
      await c1.version();
      // The busy server (another process) accepts and closes c2 while this thread is blocked, so
      // c2's VERSION goes to a closed peer: sendmsg fails with EPIPE before any EOF is seen.
      const c2 = VfioUserClient.connect(sock);
      sleepSync(300);
      await expect(c2.version()).rejects.toThrow(/vfio-user connection closed/);
      await expect(c2.getInfo()).rejects.toThrow(/vfio-user connection closed/);
      await expect(c2.request(4, new Uint8Array(16), { noReply: true })).rejects.toThrow(/connection closed/);
      // Pipelined requests: every one of them rejects (the first send fails, the rest find the
      // connection down), and the client's internal promises stay handled.
      const c3 = VfioUserClient.connect(sock);
      sleepSync(300);
      const all = await Promise.allSettled([c3.read32(0, 0), c3.read32(0, 4), c3.getInfo(), c3.reset()]);
      expect(all.map((r) => r.status)).toEqual(['rejected', 'rejected', 'rejected', 'rejected']);
      await new Promise((r) => setTimeout(r, 50)); // unhandled rejections are reported after a tick
      expect(unhandled).toEqual([]);
      expect(await c1.read32(0, 0)).toBe(0);
      c1.close();
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('Listener.idle() resolves once the client is gone and its state released; onClientGone reports it', async () => {
    const t = makeTestDevice();
    const sock = path.join(dir, 'idle.sock');
    const l = server.listen(sock, t.device);
    await l.idle(); // nobody connected: at once
    const gone: string[] = [];
    const off = l.onClientGone((g) => gone.push(`${g.connection}:${g.reason.kind}:${t.device.dma.count}`));
    const c = VfioUserClient.connect(sock);
    await c.version();
    await c.dmaMap({ addr: 0, size: 4096 });
    let idle = false;
    const p = l.idle().then(() => (idle = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(idle).toBe(false);
    c.close();
    await p;
    expect(l.endpoint).toBeNull();
    expect(gone).toEqual([`${sock}#1:eof:0`]); // maps already released when the hook runs
    // The next client is accepted right away.
    const c2 = VfioUserClient.connect(sock);
    await c2.version();
    off();
    c2.close();
    await l.idle();
    expect(gone).toHaveLength(1);
  });

  it('a throwing onClientGone hook is logged and does not stop the others or idle()', async () => {
    const t = makeTestDevice();
    const sock = path.join(dir, 'hook.sock');
    const l = server.listen(sock, t.device);
    let second = 0;
    l.onClientGone(() => {
      throw new Error('hook bug');
    });
    l.onClientGone(() => second++);
    const c = VfioUserClient.connect(sock);
    await c.version();
    const idle = l.idle();
    c.close();
    await idle;
    expect(second).toBe(1);
  });

  it('server.close() resolves idle() of a connected listener', async () => {
    const t = makeTestDevice();
    const sock = path.join(dir, 'shut.sock');
    const l = server.listen(sock, t.device);
    const c = VfioUserClient.connect(sock);
    await c.version();
    const idle = l.idle();
    server.close();
    await idle;
    await c.closed;
  });
});

describe('round trip', () => {
  it('REGION_READ of a trivial register: client and server in separate processes', async () => {
    const sock = path.join(dir, 'rtt.sock');
    await spawnFixture('server-child.ts', sock, 'listening');
    const c = VfioUserClient.connect(sock);
    await c.version();
    await c.write32(0, 0x40, 0x12345678);
    const n = 2000;
    for (let i = 0; i < 200; i++) await c.read32(0, 0x40); // warm up
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) if ((await c.read32(0, 0x40)) !== 0x12345678) throw new Error('bad value');
    const us = Number(process.hrtime.bigint() - t0) / n / 1000;
    console.log(`vfio-user REGION_READ round trip (cross-process, mean of ${n}): ${us.toFixed(1)} µs`);
    expect(us).toBeLessThan(2000); // sanity only: the benchmark script measures properly
    c.close();
  });
});
