// systemd's fd store as the fd holder (src/persist/fdstore.ts), with this test standing in for
// systemd: a real AF_UNIX datagram socket as NOTIFY_SOCKET receives the server's sd_notify
// datagrams and the fds on them (FDSTORE=1 / FDNAME / FDPOLL=0, FDSTOREREMOVE=1, READY=1);
// after a SIGKILL the stored fds are passed to a new `vugpu serve --systemd` as systemd passes
// them (from fd 3, LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID = the new process), and it adopts the
// connected client, state and all, without a new handshake.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { native, EAGAIN } from '../../src/native.ts';
import { VfioUserClient } from '../../src/device-model/client.ts';
import { decodeFdName, encodeFdName, validFdName } from '../../src/persist/fdstore.ts';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const node = path.join(repo, 'node_modules/.bin/node');
const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const f of cleanup.splice(0).reverse()) f();
});

/** What systemd would hold: name → fd, in the order stored. */
class FakeSystemd {
  readonly fd: number;
  readonly store = new Map<string, number>();
  readonly notes: string[] = [];
  private readonly timer: NodeJS.Timeout;

  readonly path: string;

  constructor(p: string) {
    this.path = p;
    this.fd = native.bindDatagram(p);
    expect(this.fd).toBeGreaterThanOrEqual(0);
    this.timer = setInterval(() => this.drain(), 10);
  }

  drain(): void {
    const buf = new Uint8Array(4096);
    const fds = new Int32Array(254);
    for (;;) {
      const n = native.recvmsg(this.fd, buf, fds);
      if (n === -EAGAIN || n <= 0) return;
      const text = new TextDecoder().decode(buf.subarray(0, n));
      this.notes.push(text);
      const kv = new Map(text.split('\n').map((l) => l.split('=', 2) as [string, string]));
      const got = fds[0]! > 0 ? Array.from(fds.subarray(1, 1 + fds[0]!)) : [];
      if (kv.get('FDSTORE') === '1') {
        expect(kv.get('FDPOLL')).toBe('0');
        const name = kv.get('FDNAME')!;
        expect(validFdName(name)).toBe(true);
        const old = this.store.get(name);
        if (old !== undefined) native.close(old);
        this.store.delete(name); // re-stored: goes to the end, as systemd appends
        this.store.set(name, got[0]!);
      } else {
        for (const f of got) native.close(f);
        if (kv.get('FDSTOREREMOVE') === '1') {
          const name = kv.get('FDNAME')!;
          const old = this.store.get(name);
          if (old !== undefined) native.close(old);
          this.store.delete(name);
        }
      }
    }
  }

  close(): void {
    clearInterval(this.timer);
    native.close(this.fd);
    for (const fd of this.store.values()) native.close(fd);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end) throw new Error(`timed out: ${what}`);
    await sleep(20);
  }
}

describe('systemd fd store', () => {
  it('FDNAME escaping is reversible and never has a colon', () => {
    for (const k of ['conn:vm0', 'dma:vm:1:3', 'irq:a%b:msix:0', 'vram']) {
      const n = encodeFdName(k);
      expect(n).not.toContain(':');
      expect(validFdName(n)).toBe(true);
      expect(decodeFdName(n)).toBe(k);
    }
  });

  it('deposits every fd with sd_notify and adopts them as LISTEN_FDS after a SIGKILL', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-fdstore-'));
    const sd = new FakeSystemd(path.join(dir, 'notify.sock'));
    const procs: ReturnType<typeof spawn>[] = [];
    cleanup.push(() => {
      for (const p of procs) p.kill('SIGKILL');
      sd.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });
    const sock = path.join(dir, 'vm0.sock');
    const serve = ['src/cli.ts', 'serve', '--state-dir', dir, '--systemd', '--vm', `name=vm0,socket=${sock},mode=fv,slice=16M`, '--vram', '64M', '--engine', 'native'];
    let out = '';
    const first = spawn(node, serve, { cwd: repo, env: { ...process.env, NOTIFY_SOCKET: sd.path }, stdio: ['ignore', 'pipe', 'pipe'] });
    procs.push(first);
    first.stdout!.on('data', (d) => (out += d));
    first.stderr!.on('data', (d) => (out += d));
    await until(() => sd.notes.some((n) => n.startsWith('READY=1')), 60_000, `READY=1\n${out}`);
    expect([...sd.store.keys()].map(decodeFdName).sort()).toEqual(['checkpoint', 'journal', 'listen:vm0', 'vram']);

    const client = VfioUserClient.connect(sock);
    cleanup.push(() => client.close());
    await client.version();
    const ram = native.memfdCreate('guest-ram', 1 << 20, 7);
    await client.dmaMap({ addr: 0x100000, size: 1 << 20, fd: ram });
    const efd = native.eventfd(0, true);
    await client.setMsixEventfds(0, [efd]);
    await client.write32(0, 0x00a010, 0xc0ffee);
    await sleep(200);
    sd.drain();
    const keys = [...sd.store.keys()].map(decodeFdName).sort();
    expect(keys).toEqual(['checkpoint', 'conn:vm0', 'dma:vm0:1', 'irq:vm0:msix:0', 'journal', 'listen:vm0', 'vram']);

    first.kill('SIGKILL');
    await new Promise((r) => first.once('exit', r));
    await sleep(100);
    expect(client.isClosed).toBe(false);

    // systemd's restart: the stored fds from fd 3 on, named, for the new pid only.
    const names = [...sd.store.keys()];
    const fds = [...sd.store.values()];
    const queued = client.read32(0, 0x00a010);
    const second = spawn('sh', ['-c', 'LISTEN_PID=$$ exec "$0" "$@"', node, ...serve], {
      cwd: repo,
      env: { ...process.env, NOTIFY_SOCKET: sd.path, LISTEN_FDS: String(fds.length), LISTEN_FDNAMES: names.join(':') },
      stdio: ['ignore', 'pipe', 'pipe', ...fds],
    });
    procs.push(second);
    let out2 = '';
    second.stdout!.on('data', (d) => (out2 += d));
    second.stderr!.on('data', (d) => (out2 += d));
    expect(await queued).toBe(0xc0ffee);
    await until(() => out2.includes('restarted: serving the adopted VMs'), 30_000, out2);
    expect(await client.read32(0, 0)).toBe(await client.read32(0, 0)); // still in step
    expect(client.isClosed).toBe(false);
    expect(client.unexpected).toEqual([]);

    // A client that goes away: its fds leave the store.
    client.close();
    await until(() => { sd.drain(); return !sd.store.has(encodeFdName('conn:vm0')); }, 10_000, 'conn removed');
    expect([...sd.store.keys()].map(decodeFdName).sort()).toEqual(['checkpoint', 'journal', 'listen:vm0', 'vram']);
    native.close(ram);
    native.close(efd);
  }, 180_000);
});
