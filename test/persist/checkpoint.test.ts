// The checkpoint container (src/persist/checkpoint.ts, docs/checkpoint.md): round trip through
// a memfd adopted by fd as a successor would, a write torn by a kill leaving the previous
// checkpoint current, growth beyond the first slot size, a corrupt payload, and versioning — a
// newer format or container layout is refused with one sentence naming the writer. Then the
// process-level contract: `vugpu serve --state-dir` that finds a checkpoint it cannot read
// exits 2 with that sentence and loses nothing (the keeper keeps every fd, and the same
// checkpoint is adopted once it is readable again).
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import {
  CHECKPOINT_VERSION, CheckpointError, Checkpointer, CheckpointStore, crc32, decodeCheckpoint, encodeCheckpoint,
} from '../../src/persist/checkpoint.ts';
import { KeeperClient, type Attached } from '../../src/persist/keeper-client.ts';
import { VfioUserClient } from '../../src/device-model/client.ts';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const node = path.join(repo, 'node_modules/.bin/node');

const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const f of cleanup.splice(0).reverse()) f();
});

function dupOf(fd: number): number {
  // A second fd for the same memfd, as the keeper would hand it back.
  const [a, b] = native.socketpair();
  native.sendmsg(a, new Uint8Array([0]), [fd]);
  const fds = new Int32Array(4);
  native.recvmsg(b, new Uint8Array(1), fds);
  native.close(a);
  native.close(b);
  return fds[1]!;
}

describe('checkpoint container', () => {
  it('round-trips through the memfd; a successor adopting the fd reads the latest commit', () => {
    const s = CheckpointStore.create(4096);
    expect(s.read()).toBeNull();
    s.write(encodeCheckpoint(1, { a: { n: 1 } }));
    s.write(encodeCheckpoint(2, { a: { n: 2 } }));
    const t = CheckpointStore.adopt(dupOf(s.fd));
    const c = decodeCheckpoint(t.read()!);
    expect(c.format).toBe('vugpu-checkpoint');
    expect(c.version).toBe(CHECKPOINT_VERSION);
    expect(c.seq).toBe(2);
    expect(c.writer.pid).toBe(process.pid);
    expect(c.sections).toEqual({ a: { n: 2 } });
    t.close();
    s.close();
  });

  it('a write torn by a kill leaves the previous checkpoint current', () => {
    const s = CheckpointStore.create(4096);
    s.write(encodeCheckpoint(1, { v: 'old' }));
    // The inactive slot gets half-written garbage and the commit store never happens.
    const buf = native.mmap(s.fd, s.bytes, 0);
    const u8 = new Uint8Array(buf);
    const slot1 = new DataView(buf).getFloat64(16 + 32, true);
    u8.fill(0x7b, slot1, slot1 + 2000);
    native.munmap(buf);
    const t = CheckpointStore.adopt(dupOf(s.fd));
    expect(decodeCheckpoint(t.read()!).sections).toEqual({ v: 'old' });
    t.close();
    s.close();
  });

  it('grows past its slot size; the old slot stays valid until the new one commits', () => {
    const s = CheckpointStore.create(4096);
    s.write(encodeCheckpoint(1, { small: true }));
    const big = { blob: 'x'.repeat(100_000) };
    s.write(encodeCheckpoint(2, big));
    s.write(encodeCheckpoint(3, { ...big, n: 3 }));
    const t = CheckpointStore.adopt(dupOf(s.fd));
    const c = decodeCheckpoint(t.read()!);
    expect(c.seq).toBe(3);
    expect((c.sections.blob as string).length).toBe(100_000);
    t.close();
    s.close();
  });

  it('a payload that fails its checksum is an error, not a silent restore', () => {
    const s = CheckpointStore.create(4096);
    s.write(encodeCheckpoint(1, { v: 1 }));
    const buf = native.mmap(s.fd, s.bytes, 0);
    const dv = new DataView(buf);
    const active = dv.getUint32(12, true);
    const off = dv.getFloat64(16 + 32 * active, true);
    new Uint8Array(buf)[off + 20] ^= 0xff;
    native.munmap(buf);
    expect(() => s.read()).toThrow(/checksum/);
    expect(crc32(new TextEncoder().encode('123456789'))).toBe(0xcbf43926);
    s.close();
  });

  it('refuses a newer format version or container layout with one sentence naming the writer', () => {
    const newer = new TextEncoder().encode(JSON.stringify({
      format: 'vugpu-checkpoint', version: CHECKPOINT_VERSION + 1, writer: { build: '9.9.9+future', node: 'v99', pid: 1 },
      time: new Date().toISOString(), seq: 1, sections: {},
    }));
    let err: unknown;
    try {
      decodeCheckpoint(newer);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(CheckpointError);
    expect((err as Error).message).toMatch(/written by vugpu 9\.9\.9\+future in format version 2; this build .* reads versions up to 1/);
    expect((err as Error).message.split('. ').length).toBe(1);
    expect(() => decodeCheckpoint(new TextEncoder().encode('{"format":"other","version":1}'))).toThrow(CheckpointError);
    expect(() => decodeCheckpoint(new TextEncoder().encode('not json'))).toThrow(/not valid UTF-8 JSON/);
    // A container written with another superblock layout.
    const s = CheckpointStore.create(4096);
    const l = new Uint8Array(4);
    new DataView(l.buffer).setUint32(0, 2, true);
    native.pwrite(s.fd, l, 8);
    expect(() => CheckpointStore.adopt(dupOf(s.fd))).toThrow(/layout 2; this build reads layout 1 \(written by a newer vugpu\)/);
    s.close();
  });

  it('coalesces changes into one write per interval, writes at once when a reply needs it', async () => {
    const s = CheckpointStore.create(4096);
    let n = 0;
    const c = new Checkpointer(s, { intervalMs: 30, produce: () => ({ n: ++n }) });
    for (let i = 0; i < 100; i++) c.dirty();
    expect(c.stats.writes).toBe(0);
    await new Promise((r) => setTimeout(r, 80));
    expect(c.stats.writes).toBe(1);
    c.needSync();
    c.flushIfNeeded();
    expect(c.stats.writes).toBe(2);
    c.flushIfNeeded(); // nothing new: no write
    expect(c.stats.writes).toBe(2);
    expect(decodeCheckpoint(s.read()!).sections).toEqual({ n: 2 });
    c.stop();
    s.close();
  });
});

describe('serve --state-dir with a checkpoint it cannot read', () => {
  it('exits 2 with one sentence and keeps every fd; the running VM is adopted once it is readable', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-ckpt-'));
    const sock = path.join(dir, 'vm0.sock');
    const keeperSock = path.join(dir, 'keeper.sock');
    const args = [path.join(repo, 'src/cli.ts'), 'serve', '--state-dir', dir, '--vm', `name=vm0,socket=${sock},mode=fv,slice=16M`, '--vram', '64M', '--engine', 'native'];
    const procs: ReturnType<typeof spawn>[] = [];
    cleanup.push(() => {
      for (const p of procs) p.kill('SIGKILL');
      // The keeper outlives its servers by design: end this test's one (an async bye raced the
      // end of the test file and left keepers running).
      spawnSync('pkill', ['-KILL', '-f', `keeper --socket ${keeperSock}`]);
      fs.rmSync(dir, { recursive: true, force: true });
    });
    const run = () => {
      const p = spawn(node, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      procs.push(p);
      const out = { text: '' };
      p.stdout!.on('data', (d) => (out.text += d));
      p.stderr!.on('data', (d) => (out.text += d));
      const exited = new Promise<number | null>((r) => p.once('exit', (code) => r(code)));
      return { p, out, exited };
    };
    const waitFor = async (cond: () => boolean, ms: number) => {
      const end = performance.now() + ms;
      while (!cond()) {
        if (performance.now() > end) throw new Error('timed out');
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    const first = run();
    await waitFor(() => first.out.text.includes('restartable serving'), 60_000);
    const client = VfioUserClient.connect(sock);
    cleanup.push(() => client.close());
    await client.version();
    await client.write32(0, 0x00a010, 0xfeed); // PDIAG scratch
    await new Promise((r) => setTimeout(r, 100)); // its coalesced checkpoint
    first.p.kill('SIGKILL');
    await first.exited;

    // Stand in for a newer vugpu that rewrote the checkpoint in a format this build cannot read.
    const k = KeeperClient.tryConnect(keeperSock)!;
    const hello = (await k.hello('server')) as Attached;
    const keys = hello.keys.slice().sort();
    expect(keys).toEqual(expect.arrayContaining(['checkpoint', 'conn:vm0', 'journal', 'listen:vm0', 'vram']));
    const fds = await k.take();
    const store = CheckpointStore.adopt(fds.get('checkpoint')!);
    const good = store.read()!;
    const future = JSON.parse(new TextDecoder().decode(good)) as { version: number; writer: { build: string } };
    future.version = CHECKPOINT_VERSION + 1;
    future.writer.build = '2.0.0+future';
    store.write(new TextEncoder().encode(JSON.stringify(future)));
    k.close(); // EOF, not bye: the keeper keeps everything

    const second = run();
    expect(await second.exited).toBe(2);
    expect(second.out.text).toMatch(/vugpu: cannot adopt the running VMs: the checkpoint was written by vugpu 2\.0\.0\+future in format version 2; this build \(.*\) reads versions up to 1: run that build \(or a newer one\) against this state\n/);
    expect(client.isClosed).toBe(false);

    // The "newer build" puts back what it can read: this build adopts the VM, state and all.
    const k2 = KeeperClient.tryConnect(keeperSock)!;
    const h2 = (await k2.hello('server')) as Attached;
    expect(h2.keys.slice().sort()).toEqual(keys);
    store.write(good);
    k2.close();
    const third = run();
    // serve.ts logs "restarted" one event-loop turn after resuming (after the guests' waiting
    // requests), so it may come after "restartable serving": wait for both.
    await waitFor(() => third.out.text.includes('restartable serving') && third.out.text.includes('restarted: serving'), 60_000);
    expect(third.out.text).toContain('restarted: serving the adopted VMs');
    expect(await client.read32(0, 0x00a010)).toBe(0xfeed);
    expect(client.isClosed).toBe(false);
    store.close();
    for (const [key, fd] of fds) if (key !== 'checkpoint') native.close(fd);
  }, 180_000);
});
