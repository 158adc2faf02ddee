// System-layer tests for the native addon: real sockets, real memfds, real eventfds, real
// pool threads. Kernel correctness is tested by the kernel suite.
import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { native, EAGAIN, ECANCELED } from '../src/native.ts';
import type { JobCompletion } from '../src/native.ts';

const PAGE = 4096;
const dir = mkdtempSync(path.join(tmpdir(), 'vugpu-native-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Number of open fds in this process, to check that none leak. */
function openFdCount(): number {
  return readdirSync('/proc/self/fd').length;
}

function waitFor(pred: () => boolean, ms = 2000): Promise<void> {
  return new Promise((resolve, reject) => {
    const start = Date.now();
    const tick = (): void => {
      if (pred()) return resolve();
      if (Date.now() - start > ms) return reject(new Error('timed out waiting'));
      setTimeout(tick, 2);
    };
    tick();
  });
}

describe('sockets', () => {
  it('passes a memfd and an eventfd over a socketpair and the memfd maps the same pages', () => {
    const [a, b] = native.socketpair();
    const mfd = native.memfdCreate('vugpu-test', 2 * PAGE);
    const efd = native.eventfd(0, true);
    const view = new Uint8Array(native.mmap(mfd, 2 * PAGE, 0));
    view.set([1, 2, 3, 4], PAGE + 10);

    const msg = new TextEncoder().encode('hello with fds');
    expect(native.sendmsg(a, msg, [mfd, efd])).toBe(msg.length);

    const buf = new Uint8Array(256);
    const fds = new Int32Array(9);
    const n = native.recvmsg(b, buf, fds);
    expect(n).toBe(msg.length);
    expect(new TextDecoder().decode(buf.subarray(0, n))).toBe('hello with fds');
    expect(fds[0]).toBe(2);
    const [rmfd, refd] = [fds[1], fds[2]];
    expect(rmfd).not.toBe(mfd);

    // The received memfd is the same file: its mapping shows the sender's bytes, both ways.
    const rab = native.mmap(rmfd, 2 * PAGE, 0);
    const rview = new Uint8Array(rab);
    expect([...rview.subarray(PAGE + 10, PAGE + 14)]).toEqual([1, 2, 3, 4]);
    rview[0] = 0xaa;
    expect(view[0]).toBe(0xaa);
    // The received eventfd is the same counter.
    expect(native.eventfdWrite(refd, 5)).toBe(0);
    expect(native.eventfdRead(efd)).toBe(5);

    native.munmap(rab);
    native.munmap(view.buffer as ArrayBuffer);
    for (const fd of [a, b, mfd, efd, rmfd, refd]) expect(native.close(fd)).toBe(0);
  });

  it('reports a truncated fd list as -1 and closes the fds it could not hand over', () => {
    const [a, b] = native.socketpair();
    const e1 = native.eventfd(0, false);
    const e2 = native.eventfd(0, false);
    const before = openFdCount();
    expect(native.sendmsg(a, new Uint8Array([7]), [e1, e2, e1])).toBe(1);
    const fds = new Int32Array(2); // room for one fd only
    expect(native.recvmsg(b, new Uint8Array(8), fds)).toBe(1);
    expect(fds[0]).toBe(-1);
    expect(openFdCount()).toBe(before + 1); // only fds[1] was kept
    native.close(fds[1]);
    for (const fd of [a, b, e1, e2]) native.close(fd);
  });

  it('sends large messages whole on a non-blocking socket while the peer drains', async () => {
    const [a, b] = native.socketpair();
    native.setNonblock(a, true);
    native.setNonblock(b, true);
    const big = new Uint8Array(4 << 20);
    for (let i = 0; i < big.length; i++) big[i] = (i * 7) & 0xff;
    // 4 MiB is far beyond the socket buffer: sendmsg must wait for room (bounded poll) while a
    // reader in a Worker drains the peer, and deliver every byte in order.
    const { Worker } = await import('node:worker_threads');
    const worker = new Worker(
      `const { workerData, parentPort } = require('node:worker_threads');
       const { createRequire } = require('node:module');
       const native = createRequire(workerData.root + '/')(workerData.addon);
       native.setNonblock(workerData.fd, false);
       const buf = new Uint8Array(workerData.total), fds = new Int32Array(1);
       let got = 0;
       while (got < workerData.total) {
         const n = native.recvmsg(workerData.fd, buf.subarray(got), fds);
         if (n <= 0) break;
         got += n;
       }
       let sum = 0; for (let i = 0; i < got; i++) sum = (sum + buf[i] * (i % 251 + 1)) % 1000000007;
       parentPort.postMessage({ got, sum });`,
      {
        eval: true,
        workerData: {
          fd: b,
          total: big.length,
          root: path.resolve(import.meta.dirname, '..'),
          addon: './build/Release/vugpu_native.node',
        },
      },
    );
    const result = new Promise<{ got: number; sum: number }>((resolve) => worker.on('message', resolve));
    expect(native.sendmsg(a, big)).toBe(big.length);
    const { got, sum } = await result;
    let expected = 0;
    for (let i = 0; i < big.length; i++) expected = (expected + big[i] * ((i % 251) + 1)) % 1000000007;
    expect(got).toBe(big.length);
    expect(sum).toBe(expected);
    await worker.terminate();
    native.close(a);
    native.close(b);
  });

  it('listens, accepts and connects over a UNIX socket path (replacing a stale socket file)', () => {
    const sock = path.join(dir, 'srv.sock');
    const l1 = native.listenUnix(sock, 4);
    expect(l1).toBeGreaterThanOrEqual(0);
    native.close(l1); // leaves a stale socket file behind
    const lfd = native.listenUnix(sock, 4);
    expect(lfd).toBeGreaterThanOrEqual(0);
    expect(native.accept(lfd)).toBe(-EAGAIN);
    const cfd = native.connectUnix(sock, true);
    expect(cfd).toBeGreaterThanOrEqual(0);
    const sfd = native.accept(lfd);
    expect(sfd).toBeGreaterThanOrEqual(0);
    expect(native.sendmsg(cfd, new Uint8Array([1, 2, 3]))).toBe(3);
    const buf = new Uint8Array(16);
    const fds = new Int32Array(1);
    expect(native.recvmsg(sfd, buf, fds)).toBe(3);
    expect(fds[0]).toBe(0);
    expect(native.recvmsg(sfd, buf, fds)).toBe(-EAGAIN);
    expect(native.connectUnix(path.join(dir, 'nobody.sock'), false)).toBeLessThan(0);
    for (const fd of [cfd, sfd, lfd]) native.close(fd);
  });

  it('watch fires on readable and on peer close, and unwatch works inside the callback', async () => {
    const [a, b] = native.socketpair();
    native.setNonblock(b, true);
    const seen: string[] = [];
    const buf = new Uint8Array(64);
    const fds = new Int32Array(1);
    let closed = false;
    const h = native.watch(b, (status, events) => {
      expect(status).toBe(0);
      for (;;) {
        const n = native.recvmsg(b, buf, fds);
        if (n > 0) {
          seen.push(new TextDecoder().decode(buf.subarray(0, n)));
          continue;
        }
        if (n === 0 || events & 4) {
          closed = true;
          native.unwatch(h); // inside the callback
          native.unwatch(h); // and idempotent
        }
        return;
      }
    });
    native.sendmsg(a, new TextEncoder().encode('ping'));
    await waitFor(() => seen.length === 1);
    expect(seen).toEqual(['ping']);
    native.close(a);
    await waitFor(() => closed);
    native.close(b);
  });

  it('rejects bad arguments with TypeError/RangeError instead of crashing', () => {
    const any = native as unknown as Record<string, (...args: unknown[]) => unknown>;
    expect(() => any.sendmsg('x', new Uint8Array(1))).toThrow(TypeError);
    expect(() => any.sendmsg(1.5, new Uint8Array(1))).toThrow(TypeError);
    expect(() => any.sendmsg(-1, new Uint8Array(1))).toThrow(RangeError);
    expect(() => any.sendmsg(0, 'bytes')).toThrow(TypeError);
    expect(() => any.sendmsg(0, new Uint8Array(1), [1, 'x'])).toThrow(TypeError);
    expect(() => any.recvmsg(0, new Uint8Array(4), new Uint8Array(4))).toThrow(TypeError);
    expect(() => any.recvmsg(0, new Uint8Array(4), new Int32Array(0))).toThrow(RangeError);
    expect(() => any.listenUnix('x'.repeat(200), 1)).toThrow(RangeError);
    expect(() => any.watch(0, 'not a function')).toThrow(TypeError);
    expect(() => any.mmap(0, 0, 0)).toThrow(RangeError);
    expect(() => any.mmap(0, PAGE, 1)).toThrow(RangeError);
    expect(() => any.munmap(new ArrayBuffer(8))).toThrow(TypeError);
    expect(() => any.mapWindow([{ fd: 0, offset: 0 }], false)).toThrow(TypeError);
    expect(() => any.mapWindow([], false)).toThrow(RangeError);
    expect(() => any.pagemap(1, 1)).toThrow(TypeError);
    expect(() => any.ioctl(0, 1, {})).toThrow(TypeError);
    expect(() => any.eventfdWrite(0, 0)).toThrow(RangeError);
    expect(() => any.memcpyDirect(new ArrayBuffer(4), new ArrayBuffer(8), 8)).toThrow(RangeError);
    // Syscall failures are negative errno values.
    expect(native.close(1 << 30)).toBe(-9); // EBADF
    expect(native.eventfdRead(1 << 30)).toBe(-9);
  });
});

describe('memory', () => {
  it('munmap detaches the ArrayBuffer at once and is idempotent', () => {
    const fd = native.memfdCreate('m', PAGE);
    const ab = native.mmap(fd, PAGE, 0);
    const u8 = new Uint8Array(ab);
    u8[5] = 9;
    expect(native.addressOf(ab)).toBeGreaterThan(0n);
    native.munmap(ab);
    expect(ab.byteLength).toBe(0);
    expect(u8.length).toBe(0);
    expect(u8[5]).toBeUndefined();
    native.munmap(ab); // idempotent
    const back = new Uint8Array(1);
    expect(native.pread(fd, back, 5)).toBe(1);
    expect(back[0]).toBe(9);
    native.close(fd);
  });

  it('refuses mappings beyond the end of the file (would SIGBUS)', () => {
    const fd = native.memfdCreate('short', PAGE);
    expect(() => native.mmap(fd, 2 * PAGE, 0)).toThrow(/beyond end of file/);
    expect(() => native.mapWindow([{ fd, offset: PAGE, length: PAGE }], false)).toThrow(/beyond end/);
    native.close(fd);
  });

  it('mapWindow stitches two non-adjacent extents into one contiguous view', () => {
    const fd = native.memfdCreate('win', 8 * PAGE);
    const whole = new Uint8Array(native.mmap(fd, 8 * PAGE, 0));
    whole.fill(0);
    const w = native.mapWindow(
      [
        { fd, offset: 5 * PAGE, length: 2 * PAGE },
        { fd, offset: 1 * PAGE, length: PAGE },
      ],
      false,
    );
    expect(w.length).toBe(3 * PAGE);
    const view = new Uint8Array(native.windowBuffer(w.id));
    expect(native.addressOf(view)).toBe(w.address);
    // One write across the seam between extents lands in both pieces of the file.
    view.fill(0x5a, 2 * PAGE - 8, 2 * PAGE + 8);
    expect([...whole.subarray(7 * PAGE - 8, 7 * PAGE)]).toEqual(Array(8).fill(0x5a));
    expect([...whole.subarray(PAGE, PAGE + 8)]).toEqual(Array(8).fill(0x5a));
    expect(whole[7 * PAGE]).toBe(0);
    const viaFd = new Uint8Array(8);
    expect(native.pread(fd, viaFd, PAGE)).toBe(8);
    expect([...viaFd]).toEqual(Array(8).fill(0x5a));
    // Writes through the fd show through the window.
    expect(native.pwrite(fd, new Uint8Array([1, 2, 3]), 5 * PAGE)).toBe(3);
    expect([...view.subarray(0, 3)]).toEqual([1, 2, 3]);

    native.unmapWindow(w.id);
    expect(view.length).toBe(0); // the JS view is detached with the window
    native.unmapWindow(w.id); // idempotent
    expect(() => native.mapWindow([{ fd, offset: 100, length: PAGE }], false)).toThrow(RangeError);
    native.munmap(whole.buffer as ArrayBuffer);
    native.close(fd);
  });

  it('read-only mappings see the fd but keep stray writes private', () => {
    const fd = native.memfdCreate('ro', PAGE);
    native.pwrite(fd, new Uint8Array([42]), 0);
    const ro = new Uint8Array(native.mmap(fd, PAGE, 0, true));
    expect(ro[0]).toBe(42);
    ro[0] = 1;
    const back = new Uint8Array(1);
    native.pread(fd, back, 0);
    expect(back[0]).toBe(42);
    native.munmap(ro.buffer as ArrayBuffer);
    native.close(fd);
  });

  it('pagemap reports a touched page as present', () => {
    const fd = native.memfdCreate('pm', 2 * PAGE);
    const u8 = new Uint8Array(native.mmap(fd, 2 * PAGE, 0));
    u8[0] = 1;
    const e = native.pagemap(native.addressOf(u8), 2);
    expect(e.length).toBe(2);
    expect(e[0] >> 63n).toBe(1n);
    native.munmap(u8.buffer as ArrayBuffer);
    native.close(fd);
  });

  it('eventfd counts writes and reads back -EAGAIN when empty', () => {
    const efd = native.eventfd(3, true);
    expect(native.eventfdWrite(efd, 4)).toBe(0);
    expect(native.eventfdRead(efd)).toBe(7);
    expect(native.eventfdRead(efd)).toBe(-EAGAIN);
    native.close(efd);
    const t0 = native.monotonicNs();
    expect(native.monotonicNs()).toBeGreaterThanOrEqual(t0);
  });

  it('ioctl passes integer and buffer arguments', () => {
    const [a, b] = native.socketpair();
    native.sendmsg(a, new Uint8Array(10));
    const FIONREAD = 0x541b;
    const out = new Int32Array(1);
    expect(native.ioctl(b, FIONREAD, new Uint8Array(out.buffer))).toBe(0);
    expect(out[0]).toBe(10);
    expect(native.ioctl(b, 0x7fff, 0)).toBeLessThan(0);
    native.close(a);
    native.close(b);
  });
});

describe('job pool', () => {
  const K_NOP = 0;
  const K_LOOP = 1;
  const completions = new Map<number, JobCompletion>();
  let batches = 0;

  function startPool(threads: number): void {
    native.poolStart(threads, (batch) => {
      batches++;
      for (const c of batch) completions.set(c.job, c);
    });
  }
  async function completion(job: number, ms = 20_000): Promise<JobCompletion> {
    await waitFor(() => completions.has(job), ms);
    return completions.get(job)!;
  }
  /** LOOP params: no iteration limit, stop after `ns` (so it runs until cancelled in practice). */
  function loopParams(ns: bigint): Uint8Array {
    const p = new Uint8Array(20);
    const dv = new DataView(p.buffer);
    dv.setBigUint64(0, 0n, true);
    dv.setBigUint64(8, ns, true);
    dv.setUint32(16, 1, true);
    return p;
  }

  afterAll(() => native.poolStop());

  it('copies scatter-gather between a sysmem fd and a VRAM memfd, both ways, with odd extents', async () => {
    startPool(2);
    const sys = native.memfdCreate('sysmem', 64 * 1024);
    const vram = native.memfdCreate('vram', 256 * 1024);
    const sysV = new Uint8Array(native.mmap(sys, 64 * 1024, 0));
    const vramV = new Uint8Array(native.mmap(vram, 256 * 1024, 0));
    for (let i = 0; i < sysV.length; i++) sysV[i] = (i * 31 + 7) & 0xff;

    const src = [
      { fd: sys, offset: 3, length: 1000 },
      { fd: sys, offset: 5001, length: 777 },
      { fd: sys, offset: 20000, length: 12345 },
      { fd: sys, offset: 40000, length: 0 },
    ];
    const dst = [
      { fd: vram, offset: 7, length: 5000 },
      { fd: vram, offset: 100_001, length: 9122 },
    ];
    const expected = Uint8Array.from(src.flatMap((e) => [...sysV.subarray(e.offset, e.offset + e.length)]));
    const job = native.submitCopy({ src, dst });
    const c = await completion(job);
    expect(c.status).toBe(0);
    expect(c.deviceNs).toBeGreaterThan(0);
    const got = Uint8Array.from(dst.flatMap((e) => [...vramV.subarray(e.offset, e.offset + e.length)]));
    expect(got).toEqual(expected);
    expect(vramV[6]).toBe(0); // nothing written outside the extents
    expect(vramV[5007]).toBe(0);
    expect(vramV[100_000]).toBe(0);
    expect(vramV[100_001 + 9122]).toBe(0);

    // And back, into a different layout of sysmem.
    sysV.fill(0);
    const back = native.submitCopy({
      src: dst,
      dst: [
        { fd: sys, offset: 11, length: 4099 },
        { fd: sys, offset: 30_000, length: 10_023 },
      ],
    });
    expect((await completion(back)).status).toBe(0);
    expect(Uint8Array.from([...sysV.subarray(11, 11 + 4099), ...sysV.subarray(30_000, 30_000 + 10_023)])).toEqual(
      expected,
    );
    expect(sysV[10]).toBe(0);
    expect(sysV[11 + 4099]).toBe(0);

    native.munmap(sysV.buffer as ArrayBuffer);
    native.munmap(vramV.buffer as ArrayBuffer);
    native.forgetFd(sys);
    native.forgetFd(vram);
    native.close(sys);
    native.close(vram);
  });

  it('copies large buffers at memory speed once the files are mapped (measured)', async () => {
    const size = 64 << 20;
    const a = native.memfdCreate('big-a', size);
    const b = native.memfdCreate('big-b', size);
    const av = new Uint8Array(native.mmap(a, size, 0));
    for (let i = 0; i < size; i += 4096) av[i] = i >>> 12;
    const run = async (): Promise<JobCompletion> => {
      const c = await completion(native.submitCopy({ src: [{ fd: a, offset: 0, length: size }], dst: [{ fd: b, offset: 0, length: size }] }));
      expect(c.status).toBe(0);
      return c;
    };
    const cold = await run();
    let warm = await run();
    for (let i = 0; i < 2; i++) {
      const c = await run();
      if (c.deviceNs < warm.deviceNs) warm = c;
    }
    const probe = new Uint8Array(1);
    native.pread(b, probe, 4096 * 4097);
    expect(probe[0]).toBe(4097 & 0xff);
    const gbs = (ns: number): string => (size / ns).toFixed(2);
    console.log(`pool copy 64 MiB: cold ${gbs(cold.deviceNs)} GB/s, warm ${gbs(warm.deviceNs)} GB/s`);
    // Reference: a plain memcpy between the same two (already faulted) mappings.
    const bv = new Uint8Array(native.mmap(b, size, 0));
    native.memcpyDirect(bv, av, size);
    let best = Infinity;
    for (let i = 0; i < 3; i++) {
      const t0 = native.monotonicNs();
      native.memcpyDirect(bv, av, size);
      best = Math.min(best, Number(native.monotonicNs() - t0));
    }
    console.log(`memcpyDirect 64 MiB (warm mappings): ${gbs(best)} GB/s`);
    native.munmap(av.buffer as ArrayBuffer);
    native.munmap(bv.buffer as ArrayBuffer);
    native.forgetFd(a);
    native.forgetFd(b);
    native.close(a);
    native.close(b);
  });

  it('cancels a queued job (never runs) and a running kernel', async () => {
    native.poolStop();
    startPool(1);
    const out = native.memfdCreate('loop-out', PAGE);
    const win = native.mapWindow([{ fd: out, offset: 0, length: PAGE }], false);
    const sys = native.memfdCreate('cancel-src', PAGE);
    const dstFd = native.memfdCreate('cancel-dst', PAGE);
    native.pwrite(sys, new Uint8Array([9]), 0);

    // The only thread is busy with a loop that would run for a minute.
    const loop = native.submitKernel({ kernel: K_LOOP, windows: [win.address], lengths: [PAGE], params: loopParams(60_000_000_000n) });
    const queued = native.submitCopy({ src: [{ fd: sys, offset: 0, length: 1 }], dst: [{ fd: dstFd, offset: 0, length: 1 }] });
    native.cancelJob(queued);
    await new Promise((r) => setTimeout(r, 20));
    expect(completions.has(loop)).toBe(false);
    const t0 = Date.now();
    native.cancelJob(loop);
    const lc = await completion(loop, 5000);
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(lc.status).toBe(-ECANCELED);
    expect(lc.deviceNs).toBeGreaterThan(0);
    const qc = await completion(queued);
    expect(qc.status).toBe(-ECANCELED);
    expect(qc.deviceNs).toBe(0);
    const b = new Uint8Array(1);
    native.pread(dstFd, b, 0);
    expect(b[0]).toBe(0); // the cancelled copy never ran
    native.cancelJob(queued); // finished ids are ignored
    native.cancelJob(123456789);

    // A kernel that does finish reports 0 through the same path.
    const nop = native.submitKernel({ kernel: K_NOP, windows: [], lengths: [], params: new Uint8Array(0) });
    expect((await completion(nop)).status).toBe(0);
    expect(batches).toBeGreaterThan(0);

    native.unmapWindow(win.id);
    for (const fd of [out, sys, dstFd]) native.close(fd);
  });

  it('reports fd problems of a copy as an async completion status', async () => {
    const fd = native.memfdCreate('short', PAGE);
    const ro = native.open(`/proc/self/fd/${fd}`, 0 /* O_RDONLY */);
    expect(ro).toBeGreaterThanOrEqual(0);
    const ext = (f: number, offset: number, length: number): { fd: number; offset: number; length: number } => ({ fd: f, offset, length });
    const beyond = native.submitCopy({ src: [ext(fd, PAGE - 1, 2)], dst: [ext(fd, 0, 2)] });
    const badFd = native.submitCopy({ src: [ext(1 << 30, 0, 1)], dst: [ext(fd, 0, 1)] });
    const roDst = native.submitCopy({ src: [ext(fd, 0, 1)], dst: [ext(ro, 1, 1)] });
    expect((await completion(beyond)).status).toBe(-14); // EFAULT
    expect((await completion(badFd)).status).toBe(-9); // EBADF
    expect((await completion(roDst)).status).toBe(-13); // EACCES
    native.close(ro);
    native.close(fd);
  });

  it('validates job arguments and pool state with thrown errors', () => {
    const any = native as unknown as Record<string, (...args: unknown[]) => unknown>;
    expect(() => native.poolStart(1, () => {})).toThrow(/already running/);
    expect(() => any.poolStart(0, () => {})).toThrow(RangeError);
    expect(() => any.submitCopy({ src: [{ fd: 0, offset: 0, length: 2 }], dst: [{ fd: 0, offset: 0, length: 1 }] })).toThrow(RangeError);
    expect(() => any.submitCopy({ src: 'x', dst: [] })).toThrow(TypeError);
    expect(() => any.submitCopy(null)).toThrow(TypeError);
    expect(() => any.submitKernel({ kernel: 0, windows: [1], lengths: [4] })).toThrow(TypeError);
    expect(() => any.submitKernel({ kernel: 0, windows: [1n], lengths: [] })).toThrow(RangeError);
    expect(() => any.submitKernel({ kernel: -1, windows: [], lengths: [] })).toThrow(RangeError);
    expect(() => any.cancelJob('1')).toThrow(TypeError);
    expect(() => any.sgemmDirect(2, 2, 2, new Float32Array(3), new Float32Array(4), new Float32Array(4))).toThrow(RangeError);
    expect(() => any.sgemmDirect(2, 2, 2, [1, 2, 3, 4], new Float32Array(4), new Float32Array(4))).toThrow(TypeError);
    // Kernel-side validation comes back as a status, not an exception.
    expect(native.runKernelSync({ kernel: 99, windows: [], lengths: [], params: new Uint8Array(0) })).toBe(-38);
    expect(native.runKernelSync({ kernel: K_LOOP, windows: [], lengths: [], params: new Uint8Array(20) })).toBe(-22);
    expect(native.runKernelSync({ kernel: K_NOP, windows: [], lengths: [], params: new Uint8Array(0) })).toBe(0);
  });

  it('sgemmDirect and memcpyDirect compute on JS buffers', () => {
    const a = Float32Array.from([1, 2, 3, 4, 5, 6]); // 2×3
    const b = Float32Array.from([7, 8, 9, 10, 11, 12]); // 3×2
    const c = new Float32Array(4);
    native.sgemmDirect(2, 2, 3, a, b, c);
    expect([...c]).toEqual([58, 64, 139, 154]);
    expect(typeof native.haveOpenBlas()).toBe('boolean');
    const d = new Uint8Array(8);
    native.memcpyDirect(d.buffer, Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8]).buffer, 5);
    expect([...d]).toEqual([1, 2, 3, 4, 5, 0, 0, 0]);
  });

  it('stops cleanly and can start again; an idle started pool lets the process exit', async () => {
    native.poolStop();
    native.poolStop(); // idempotent
    expect(() => native.submitCopy({ src: [], dst: [] })).toThrow(/not running/);
    startPool(2);
    const empty = native.submitCopy({ src: [], dst: [] });
    expect((await completion(empty)).status).toBe(0);

    const { spawnSync } = await import('node:child_process');
    const root = path.resolve(import.meta.dirname, '..');
    const script = `
      const n = require(${JSON.stringify(path.join(root, 'build/Release/vugpu_native.node'))});
      const fd = n.memfdCreate('x', 4096);
      n.poolStart(2, (b) => { console.log('done', b.length, b[0].status); });
      n.submitCopy({ src: [{ fd, offset: 0, length: 100 }], dst: [{ fd, offset: 200, length: 100 }] });
      // no poolStop: the pool must not keep the event loop alive once idle`;
    const r = spawnSync(path.join(root, 'node_modules/.bin/node'), ['-e', script], { timeout: 15_000, encoding: 'utf8' });
    expect(r.signal).toBeNull();
    expect(r.status).toBe(0);
    expect(r.stdout.trim()).toBe('done 1 0');
  });
});
