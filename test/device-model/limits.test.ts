// What a hostile client can make the server hold, through a real server socket: DMA maps
// (count, bytes, files), fds per message, interrupt fds that could block the JS thread, the
// receive buffer, and log lines. Each limit is hit and the connection keeps working after.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, mkdtempSync, rmSync, writeSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { native } from '../../src/native.ts';
import { logger } from '../../src/log.ts';
import { Server, type ServerOptions } from '../../src/device-model/server.ts';
import { PciDevice } from '../../src/device-model/device.ts';
import { VfioUserClient, VfioUserError } from '../../src/device-model/client.ts';
import { MessageFramer } from '../../src/device-model/framing.ts';
import { LogBudget } from '../../src/device-model/limits.ts';
import { maxMessageSize } from '../../src/device-model/endpoint.ts';
import { DEFAULT_SERVER_CAPS } from '../../src/device-model/version.ts';
import { Command, Errno, IrqSetFlag, encodeMessage, encodeRegionAccess, encodeVersion } from '../../src/device-model/protocol.ts';
import { QEMU_SEALS, countFds, makeTestDevice, memfdWith, sealedMemfd, twoVms, uniqueName, until, type TestDevice } from './helpers.ts';

const MiB = 1 << 20;
const here = path.dirname(fileURLToPath(import.meta.url));
const children: ChildProcess[] = [];
let dir: string;
let server: Server;
let clients: VfioUserClient[] = [];

beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'vugpu-limits-'));
});

afterEach(() => {
  for (const ch of children.splice(0)) ch.kill('SIGKILL');
  for (const c of clients) c.close();
  clients = [];
  server?.close();
  rmSync(dir, { recursive: true, force: true });
});

async function serve(opts: ServerOptions = {}): Promise<{ t: TestDevice; c: VfioUserClient; sock: string }> {
  server = new Server(opts);
  const t = makeTestDevice();
  const sock = path.join(dir, 'dev.sock');
  server.listen(sock, t.device);
  const c = VfioUserClient.connect(sock);
  clients.push(c);
  await c.version();
  return { t, c, sock };
}

async function errnoOf(p: Promise<unknown>): Promise<number> {
  try {
    await p;
    return 0;
  } catch (err) {
    if (err instanceof VfioUserError) return err.errno;
    throw err;
  }
}

/** O_NONBLOCK set on an fd of this process? */
function isNonblocking(fd: number): boolean {
  const m = /^flags:\s*([0-7]+)/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'latin1'));
  return (Number.parseInt(m![1]!, 8) & 0o4000) !== 0;
}

describe('per-client DMA limits', () => {
  it('max_dma_maps is 4096: advertised in the VERSION reply, the 4097th map is ENOSPC', async () => {
    server = new Server();
    const t = makeTestDevice();
    const sock = path.join(dir, 'maps.sock');
    server.listen(sock, t.device);
    const c = VfioUserClient.connect(sock);
    clients.push(c);
    const v = await c.version();
    expect(JSON.parse(v.json).capabilities.max_dma_maps).toBe(4096);
    // Pipelined, as QEMU sends them inside a memory transaction (in batches: both ends share
    // this thread, so the socket must not fill before the server gets to read).
    for (let i = 0; i < 4096; i += 128) {
      const maps: Promise<void>[] = [];
      for (let k = i; k < i + 128; k++) maps.push(c.dmaMap({ addr: k * 0x10000, size: 4096 }));
      await Promise.all(maps);
    }
    expect(t.device.dma.count).toBe(4096);
    expect(await errnoOf(c.dmaMap({ addr: 0x7000_0000, size: 4096 }))).toBe(Errno.ENOSPC);
    // An identical re-map is still a no-op, an unmap makes room again.
    await c.dmaMap({ addr: 0, size: 4096 });
    await c.dmaUnmap({ addr: 0, size: 4096 });
    await c.dmaMap({ addr: 0x7000_0000, size: 4096 });
    expect(await c.read32(0, 0)).toBe(0);
  });

  it('total mapped bytes per client: ENOSPC beyond limits.dmaBytes; released on disconnect', async () => {
    const { t, c, sock } = await serve({ limits: { dmaBytes: 64 * MiB } });
    await c.dmaMap({ addr: 0, size: 48 * MiB });
    expect(await errnoOf(c.dmaMap({ addr: 64 * MiB, size: 32 * MiB }))).toBe(Errno.ENOSPC);
    await c.dmaMap({ addr: 64 * MiB, size: 16 * MiB });
    expect(t.device.dma.mappedBytes).toBe(64 * MiB);
    c.close();
    await server.listener(sock)!.idle();
    expect(t.device.dma.mappedBytes).toBe(0);
    // The next client starts from zero.
    const c2 = VfioUserClient.connect(sock);
    clients.push(c2);
    await c2.version();
    await c2.dmaMap({ addr: 0, size: 64 * MiB });
  });

  it('one fd per file: 70 maps of one memfd (each sent with its own fd, as QEMU does) hold one fd', async () => {
    const { t, c } = await serve();
    const name = uniqueName('qemu-ram');
    const ram = sealedMemfd(name, 80 * MiB);
    for (let i = 0; i < 70; i++) await c.dmaMap({ addr: i * 2 * MiB, size: MiB, offset: i * MiB, fd: ram });
    native.close(ram);
    expect(t.device.dma.count).toBe(70);
    expect(countFds(name)).toBe(1);
    const r = t.device.dma.translate(69 * 2 * MiB, 8, true);
    expect(r.ok && r.extents[0]!.offset).toBe(69 * MiB);
    await c.dmaUnmap({ addr: 0, size: 0, flags: 2 });
    expect(countFds(name)).toBe(0);
  });

  it('distinct files per client: ENOSPC beyond limits.dmaFiles, and the refused fd is closed', async () => {
    const { t, c } = await serve({ limits: { dmaFiles: 4 } });
    const name = uniqueName('many-files');
    for (let i = 0; i < 4; i++) {
      const fd = sealedMemfd(name, 4096);
      await c.dmaMap({ addr: i * 4096, size: 4096, fd });
      native.close(fd);
    }
    const fd = sealedMemfd(name, 4096);
    expect(await errnoOf(c.dmaMap({ addr: 0x100000, size: 4096, fd }))).toBe(Errno.ENOSPC);
    native.close(fd);
    expect(countFds(name)).toBe(4);
    expect(t.device.dma.fileCount).toBe(4);
  });

  it('guest RAM must be sealed against shrinking (EPERM otherwise): a truncated mapping would SIGBUS the server', async () => {
    const { t, c } = await serve();
    const name = uniqueName('unsealed');
    const unsealed = memfdWith(name, MiB);
    expect(await errnoOf(c.dmaMap({ addr: 0, size: MiB, fd: unsealed }))).toBe(Errno.EPERM);
    native.close(unsealed);
    expect(countFds(name)).toBe(0);
    // Sealed as QEMU seals it: accepted, and the client can no longer pull the pages away.
    const sealed = sealedMemfd(uniqueName('sealed'), MiB);
    await c.dmaMap({ addr: 0, size: MiB, fd: sealed });
    expect(native.ftruncate(sealed, 0)).toBeLessThan(0); // EPERM from the kernel
    const buf = new Uint8Array(64).fill(0xa5);
    expect(t.device.dma.write(MiB - 64, buf)).toBeNull();
    native.close(sealed);
  });

  it('limits.dmaRequireSealed false accepts unsealed files (memory-backend-file guests)', async () => {
    const { t, c } = await serve({ limits: { dmaRequireSealed: false } });
    const fd = memfdWith(uniqueName('file-backed'), MiB);
    await c.dmaMap({ addr: 0, size: MiB, fd });
    native.close(fd);
    expect(t.device.dma.count).toBe(1);
    expect(native.getSeals(sealedMemfd(uniqueName('x'), 4096)) & 2).toBe(2);
    expect(QEMU_SEALS).toBe(7);
  });

  it('fds that are not regular files (/dev/zero, eventfd, socket) are EINVAL and closed', async () => {
    const { t, c } = await serve();
    const [s1, s2] = native.socketpair();
    for (const fd of [native.open('/dev/zero', 2), native.eventfd(0, true), s1]) {
      expect(await errnoOf(c.dmaMap({ addr: 0, size: 4096, fd }))).toBe(Errno.EINVAL);
      native.close(fd);
    }
    native.close(s2);
    expect(t.device.dma.count).toBe(0);
  });
});

describe('fds and interrupts', () => {
  it('a partial message fed 200 fds per byte holds at most max_msg_fds; the message is EINVAL', async () => {
    const { t, c } = await serve();
    const marker = uniqueName('flood');
    const fds = Array.from({ length: 200 }, () => memfdWith(marker, 0));
    const msg = encodeMessage({ msgId: 0x4000, command: Command.DEVICE_SET_IRQS }, new Uint8Array(20));
    const reply = c.expectReply(0x4000);
    for (let i = 0; i < msg.length - 1; i++) {
      c.sendRaw(msg.subarray(i, i + 1), fds);
      await new Promise((r) => setImmediate(r)); // let the server read each piece
    }
    await until(() => countFds(marker) <= 200 + DEFAULT_SERVER_CAPS.maxMsgFds);
    expect(countFds(marker) - 200).toBeLessThanOrEqual(DEFAULT_SERVER_CAPS.maxMsgFds); // not 35 × 200
    c.sendRaw(msg.subarray(msg.length - 1));
    const r = await reply;
    expect(r.error).toBe(Errno.EINVAL);
    for (const fd of fds) native.close(fd);
    expect(countFds(marker)).toBe(0);
    expect(t.device.irq.state().eventfds[2]).toEqual([-1, -1, -1, -1]);
    expect(await c.read32(0, 0)).toBe(0); // the connection is fine
  });

  it('interrupt fds must be eventfds: a socket, memfd or /dev/null is EINVAL (it could block the thread)', async () => {
    const { t, c } = await serve();
    const [s1, s2] = native.socketpair();
    for (const fd of [s1, memfdWith('not-an-eventfd', 4096), native.open('/dev/null', 2)]) {
      expect(await errnoOf(c.setMsixEventfds(0, [fd]))).toBe(Errno.EINVAL);
      expect(await errnoOf(c.setIrqs({ index: 3, flags: IrqSetFlag.DATA_EVENTFD | IrqSetFlag.ACTION_TRIGGER, start: 0, count: 1, fds: [fd] }))).toBe(Errno.EINVAL);
      native.close(fd);
    }
    native.close(s2);
    // One bad fd among good ones: nothing is taken.
    const good = native.eventfd(0, true);
    const bad = native.open('/dev/null', 2);
    expect(await errnoOf(c.setMsixEventfds(0, [good, bad]))).toBe(Errno.EINVAL);
    expect(t.device.irq.state().eventfds[2]).toEqual([-1, -1, -1, -1]);
    native.close(good);
    native.close(bad);
  });

  it('a blocking eventfd with its counter at the maximum cannot block MSI-X delivery', async () => {
    const { t, c } = await serve();
    const efd = native.eventfd(0, false); // blocking, as a hostile client would send it
    const max = Buffer.alloc(8);
    max.writeBigUInt64LE(0xfffffffffffffffen);
    writeSync(efd, max); // the next write of 1 would block until someone reads
    await c.setMsixEventfds(0, [efd]);
    const held = t.device.irq.state().eventfds[2]![0]!;
    expect(isNonblocking(held)).toBe(true); // checked before firing: a blocking write would hang here
    const cfg = await c.regionRead(7, 0, 256);
    let cap = cfg[0x34]!;
    while (cap !== 0 && cfg[cap] !== 0x11) cap = cfg[cap + 1]!;
    await c.regionWrite(7, cap + 2, new Uint8Array([0, 0x80])); // MSI-X enable
    expect(t.device.irq.msix(0)).toBe(false); // EAGAIN: latched, not delivered
    expect(t.device.irq.stats[0]).toMatchObject({ errors: 1, delivered: 0 });
    expect(t.device.irq.isPending(0)).toBe(true);
    native.close(efd);
  });
});

describe('a client that stops reading its replies', () => {
  it('does not stall the thread that serves the other VMs; it is dropped once its replies stay unread', async () => {
    server = new Server({ limits: { unreadReplyMs: 1500 } });
    const { a: hostile, b: other, sa: sh, sb: so, la: lh } = twoVms(server, dir, ['hostile', 'other']);
    const vm2 = VfioUserClient.connect(so);
    clients.push(vm2);
    await vm2.version();
    const gone = lh.idle();
    let dropped = false;
    void gone.then(() => (dropped = true));
    // 16 × 64 KiB of replies nobody reads: far more than a socket buffer holds. The other VM's
    // register reads are timed from before the child connects until well after.
    const ch = spawn(process.execPath, [path.join(here, 'fixtures', 'slow-reader.ts'), sh, '16'], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(ch);
    let sent = false;
    ch.stdout!.on('data', (d: Buffer) => (sent ||= d.toString().includes('sent')));
    let worst = 0; // longest time between two successive reads of the other VM (5 ms apart)
    const t0 = performance.now();
    let last = t0;
    while (performance.now() - t0 < 3500) {
      expect(await vm2.read32(0, 0x40)).toBe(0);
      const now = performance.now();
      worst = Math.max(worst, now - last);
      last = now;
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(sent).toBe(true);
    console.log(`other VM: longest gap between register reads ${worst.toFixed(1)} ms while a client left its replies unread`);
    expect(worst).toBeLessThan(250); // the addon's blocking send used to stall it ~2000 ms
    expect(dropped).toBe(true); // after unreadReplyMs
  });
});

describe('a client that reads its replies late', () => {
  it('gets every reply (1 MiB each, several socket buffers), whole and in order, once it reads; requests wait meanwhile', async () => {
    server = new Server();
    // A 1 MiB BAR backed by a memfd, read through the socket (no mmap areas): each reply is
    // five times the socket buffer, so it goes out in pieces as the client reads.
    const vram = memfdWith(uniqueName('vram-1m'), MiB);
    const pattern = new Uint8Array(MiB).map((_, i) => (i * 7 + (i >> 8)) & 0xff);
    expect(native.pwrite(vram, pattern, 0)).toBe(MiB);
    const device = new PciDevice({
      name: 'late',
      pci: { vendorId: 0x1de5, deviceId: 0x7e57, classCode: 0x030200 },
      regions: { 0: { size: MiB, backing: { fd: vram, areas: [] } } },
      irqs: {},
    });
    const sock = path.join(dir, 'late.sock');
    const l = server.listen(sock, device);
    const fd = native.connectUnix(sock, true);
    const version = encodeMessage({ msgId: 1, command: Command.VERSION }, encodeVersion({ major: 0, minor: 0, json: '{}' }));
    expect(native.sendmsg(fd, version)).toBe(version.length);
    const n = 6;
    for (let i = 0; i < n; i++) {
      const req = encodeMessage({ msgId: 100 + i, command: Command.REGION_READ }, encodeRegionAccess({ offset: 0, region: 0, count: MiB, data: new Uint8Array(0) }));
      expect(native.sendmsg(fd, req)).toBe(req.length);
    }
    // A write after the reads: it must not be applied before the reads are answered.
    const write = encodeMessage({ msgId: 200, command: Command.REGION_WRITE }, encodeRegionAccess({ offset: 0, region: 0, count: 4, data: new Uint8Array([1, 2, 3, 4]) }));
    expect(native.sendmsg(fd, write)).toBe(write.length);
    await new Promise((r) => setTimeout(r, 300)); // not reading: the server queues and waits
    expect(l.endpoint).not.toBeNull();
    const head = new Uint8Array(4);
    native.pread(vram, head, 0);
    expect(Array.from(head)).toEqual(Array.from(pattern.subarray(0, 4))); // the write still waits
    // Now read everything, in small reads.
    const got = new Uint8Array(8 * MiB);
    const dv = new DataView(got.buffer);
    let have = 0;
    const fdsOut = new Int32Array(2);
    const deadline = Date.now() + 10000;
    const want = (): number => (have >= 8 ? dv.getUint32(4, true) : 16) + n * (32 + MiB) + 32;
    while (have < want() && Date.now() < deadline) {
      const r = native.recvmsg(fd, got.subarray(have, Math.min(want(), have + 65536)), fdsOut);
      if (r > 0) have += r;
      else await new Promise((res) => setTimeout(res, 1));
    }
    native.close(fd);
    expect(have).toBe(want());
    let at = dv.getUint32(4, true); // skip the VERSION reply
    for (let i = 0; i < n; i++) {
      expect(dv.getUint16(at, true)).toBe(100 + i);
      expect(dv.getUint32(4 + at, true)).toBe(32 + MiB);
      expect(dv.getUint32(8 + at, true)).toBe(1); // a success reply
      expect(got.subarray(at + 32, at + 32 + MiB).every((b, k) => b === pattern[k])).toBe(true);
      at += 32 + MiB;
    }
    expect(dv.getUint16(at, true)).toBe(200);
    expect(at + 32).toBe(have);
    native.pread(vram, head, 0);
    expect(Array.from(head)).toEqual([1, 2, 3, 4]);
    await l.idle();
    native.close(vram);
  });
});

describe('memory and log volume', () => {
  it('a huge msg_size claim is refused before anything is allocated; the largest legal one stays bounded', () => {
    const max = maxMessageSize(DEFAULT_SERVER_CAPS);
    const f = new MessageFramer({ maxMessageSize: max });
    const start = f.capacity;
    const hdr = encodeMessage({ msgId: 1, command: Command.REGION_WRITE }, new Uint8Array(0));
    new DataView(hdr.buffer).setUint32(4, 0xffffffff, true);
    f.push(hdr.subarray(0, 8), null, () => {});
    f.space();
    expect(f.capacity).toBe(start); // the claim is known, nothing grew
    expect(() => f.push(hdr.subarray(8), null, () => {})).toThrow(/out of range/);
    expect(f.capacity).toBe(start);
    // A legal maximum-size claim grows the buffer to hold it once, no more.
    const g = new MessageFramer({ maxMessageSize: max });
    new DataView(hdr.buffer).setUint32(4, max, true);
    g.push(hdr, null, () => {});
    for (let i = 0; i < 100; i++) g.push(new Uint8Array(1000), null, () => {});
    expect(g.capacity).toBeGreaterThanOrEqual(max);
    expect(g.capacity).toBeLessThanOrEqual(2 * max);
  });

  it('over the socket: an absurd msg_size drops the client at once; a partial legal one is freed on EOF', async () => {
    const { t, c, sock } = await serve();
    const hdr = encodeMessage({ msgId: 9, command: Command.REGION_WRITE }, new Uint8Array(0));
    new DataView(hdr.buffer).setUint32(4, 0x7fffffff, true);
    c.sendRaw(hdr);
    expect((await c.closed).kind).toBe('eof');
    await server.listener(sock)!.idle();
    expect(t.resets).toEqual(['disconnect']);
  });

  it('warnings about a client are rate-limited; the next line says how many were suppressed', async () => {
    const { c } = await serve();
    const level = logger.level;
    logger.level = 'warn';
    const warn = vi.spyOn(logger, 'warn').mockImplementation(() => {}); // count, do not print
    try {
      for (let i = 0; i < 2000; i += 100) {
        const replies: Promise<unknown>[] = [];
        for (let k = 0; k < 100; k++) replies.push(c.request(0x4242, new Uint8Array(4))); // unknown command
        await Promise.all(replies);
      }
      const rejected = () => warn.mock.calls.filter((a) => String(a[1]).startsWith('rejected'));
      const n = rejected().length;
      expect(n).toBeGreaterThanOrEqual(50); // the burst
      expect(n).toBeLessThanOrEqual(60); // burst 50 + 10/s
      await new Promise((r) => setTimeout(r, 150));
      await c.request(0x4242, new Uint8Array(4));
      const last = rejected().at(-1)![0] as { suppressedWarnings?: number };
      expect(last.suppressedWarnings).toBe(2000 - n);
    } finally {
      warn.mockRestore();
      logger.level = level;
    }
  });

  it('LogBudget: burst, then a steady rate, and a count of what was dropped', async () => {
    const b = new LogBudget(3, 100);
    expect([b.take(), b.take(), b.take(), b.take(), b.take()]).toEqual([true, true, true, false, false]);
    expect(b.suppressed()).toBe(2);
    expect(b.suppressed()).toBe(0);
    await new Promise((r) => setTimeout(r, 30)); // ~3 tokens back at 100/s
    expect(b.take()).toBe(true);
  });
});
