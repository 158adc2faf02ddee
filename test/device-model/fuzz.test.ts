// Fuzzing the vfio-user server over real sockets (see fuzz-lib.ts for the generator and the
// invariants). The seed is random unless VUGPU_FUZZ_SEED is set and is printed either way;
// VUGPU_FUZZ_ITERS sets the message count (default a few seconds' worth). Long runs:
// `node test/device-model/fuzz-driver.ts --minutes N`.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { logger } from '../../src/log.ts';
import { Server } from '../../src/device-model/server.ts';
import { VfioUserClient } from '../../src/device-model/client.ts';
import { maxMessageSize } from '../../src/device-model/endpoint.ts';
import { Command, IrqSetFlag, MsgFlag, encodeMessage } from '../../src/device-model/protocol.ts';
import { FuzzFailure, MemoryWire, Prng, SocketWire, countOpenFds, deviceActivity, fuzz, maxHeldFds } from './fuzz-lib.ts';
import { makeTestDevice, sealedMemfd, twoVms, uniqueName, type TestDevice } from './helpers.ts';

const SEED = process.env.VUGPU_FUZZ_SEED !== undefined ? Number(process.env.VUGPU_FUZZ_SEED) : Math.floor(Math.random() * 0x7fffffff);
const ITERS = Number(process.env.VUGPU_FUZZ_ITERS ?? 4000);

let dir: string;
let server: Server;
let savedLevel: string;

beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'vugpu-fuzz-'));
  server = new Server();
  // Every rejected message is logged at warn level: thousands of lines. Keep errors.
  savedLevel = logger.level;
  if (process.env.VUGPU_LOG === undefined) logger.level = 'error';
});

afterEach(() => {
  logger.level = savedLevel;
  server.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The other VM: a well-behaved client on another socket of the same server. Its register
 * writes must read back correctly whatever the fuzzed client does. */
async function otherVm(sock: string, t: TestDevice, seed: number): Promise<{ client: VfioUserClient; check: () => Promise<void>; checks: () => number }> {
  const client = VfioUserClient.connect(sock);
  await client.version();
  const r = new Prng(seed ^ 0x5a5a5a5a);
  let n = 0;
  return {
    client,
    checks: () => n,
    check: async () => {
      const off = r.int(0x7ff0 >> 2) * 4;
      const v = r.u32();
      await client.write32(0, off, v, { noReply: r.chance(0.5) });
      const got = await client.read32(0, off);
      if (got !== v || t.regs.getUint32(off, true) !== v) {
        throw new Error(`the other VM read 0x${got.toString(16)} at 0x${off.toString(16)} after writing 0x${v.toString(16)}`);
      }
      n++;
    },
  };
}

/** Another process connecting to the busy socket is refused (closed) and changes nothing. */
async function intruder(sock: string): Promise<void> {
  const w = new SocketWire(sock); // sends nothing: only a refusal closes it
  try {
    if (!(await w.wait(() => w.closed, 2000)) || !w.closed) throw new Error('a second client was not refused');
  } finally {
    w.close();
  }
}

/** A well-formed session as QEMU would run it, with results checked. */
async function cleanSession(sock: string, t: TestDevice): Promise<void> {
  const c = VfioUserClient.connect(sock);
  await c.version();
  const name = uniqueName('clean-ram');
  const ram = sealedMemfd(name, 1 << 20);
  await c.dmaMap({ addr: 0x200000, size: 1 << 20, fd: ram });
  native.close(ram);
  expect(t.device.dma.count).toBe(1);
  expect(await c.getInfo()).toMatchObject({ numRegions: 9, numIrqs: 5 });
  const bar1 = await c.getRegionInfo(1);
  expect(bar1.size).toBe(0x10000);
  expect(bar1.fd).toBeGreaterThanOrEqual(0);
  native.close(bar1.fd);
  const efd = native.eventfd(0, true);
  await c.setMsixEventfds(0, [efd]);
  // Enable MSI-X through config space (control word at cap + 2) and fire vector 0.
  const cfg = await c.regionRead(7, 0, 256);
  let cap = cfg[0x34]!;
  while (cap !== 0 && cfg[cap] !== 0x11) cap = cfg[cap + 1]!;
  expect(cap).not.toBe(0);
  await c.regionWrite(7, cap + 2, new Uint8Array([0, 0x80]));
  expect(t.device.irq.msix(0)).toBe(true);
  expect(native.eventfdRead(efd)).toBe(1);
  native.close(efd);
  await c.write32(0, 0x40, 0xfeedf00d);
  expect(await c.read32(0, 0x40)).toBe(0xfeedf00d);
  await c.dmaUnmap({ addr: 0x200000, size: 1 << 20 });
  expect(t.device.dma.count).toBe(0);
  expect(c.unexpected).toEqual([]);
  c.close();
  await server.listener(sock)!.idle();
}

describe('vfio-user server under fuzzing', () => {
  it(`keeps every invariant under mutated commands, random bytes and garbage after valid sessions (seed ${SEED}, ${ITERS} messages)`, async () => {
    console.log(`fuzz seed ${SEED} (replay with VUGPU_FUZZ_SEED=${SEED} VUGPU_FUZZ_ITERS=${ITERS})`);
    const { a, b, sa, sb, la } = twoVms(server, dir, ['fuzzed', 'other']);
    const vm2 = await otherVm(sb, b, SEED);
    const fdsAtStart = countOpenFds();
    const activity = new Prng(SEED ^ 0x3c3c3c3c);
    let stats;
    try {
      stats = await fuzz({
        seed: SEED,
        iterations: ITERS,
        maxMessageSize: maxMessageSize(server.caps),
        connect: () => new SocketWire(sa),
        idle: () => la.idle(),
        maxHeldFds: maxHeldFds(server),
        between: async () => {
          deviceActivity(a, activity);
          await vm2.check();
          if (activity.chance(0.03)) await intruder(sa);
        },
      });
    } catch (err) {
      if (err instanceof FuzzFailure) console.error(err.message);
      throw err;
    }
    const rate = Math.round((stats.messages / stats.ms) * 1000);
    console.log(
      `fuzz: ${stats.messages} messages in ${stats.sessions} sessions, ${stats.replies} replies (${stats.errorReplies} errors), ` +
        `${stats.framingDrops} framing drops, ${stats.bytesSent} bytes, ${Math.round(stats.ms)} ms (${rate} msg/s); ` +
        `other VM checked ${vm2.checks()} times\nreplies ok/error per command: ${JSON.stringify(stats.perCommand)}`,
    );
    expect(stats.messages).toBeGreaterThanOrEqual(ITERS);
    expect(stats.framingDrops).toBeGreaterThan(0); // the generator does reach the framing errors
    expect(stats.errorReplies).toBeGreaterThan(0);
    expect(stats.replies - stats.errorReplies).toBeGreaterThan(0);
    expect(vm2.checks()).toBeGreaterThan(10);
    expect(countOpenFds()).toBe(fdsAtStart);
    // The device is back to its idle state, and a well-formed client runs a clean session.
    expect(a.device.dma.count).toBe(0);
    expect(a.device.irq.state().eventfds.flat().every((fd) => fd === -1)).toBe(true);
    await cleanSession(sa, a);
    await vm2.check();
    expect(vm2.client.unexpected).toEqual([]);
    vm2.client.close();
  });

  it(`the same through the in-memory transport, no sockets (seed ${SEED})`, async () => {
    const a = makeTestDevice();
    const activity = new Prng(SEED ^ 0x77);
    const fdsAtStart = countOpenFds();
    let stats;
    try {
      stats = await fuzz({
        seed: SEED ^ 0x1234,
        iterations: ITERS,
        maxMessageSize: maxMessageSize(server.caps),
        connect: () => new MemoryWire(a.device),
        idle: async () => {},
        maxHeldFds: maxHeldFds(server) - 2,
        between: async () => deviceActivity(a, activity),
      });
    } catch (err) {
      if (err instanceof FuzzFailure) console.error(err.message);
      throw err;
    }
    console.log(`fuzz (memory transport): ${stats.messages} messages, ${stats.replies} replies, ${stats.framingDrops} framing drops, ${Math.round(stats.ms)} ms (${Math.round((stats.messages / stats.ms) * 1000)} msg/s)`);
    expect(stats.framingDrops).toBeGreaterThan(0);
    expect(countOpenFds()).toBe(fdsAtStart);
    expect(a.device.dma.count).toBe(0);
  });

  it('a NO_REPLY command is never answered, even an invalid one', async () => {
    const a = makeTestDevice();
    const sa = path.join(dir, 'noreply.sock');
    server.listen(sa, a.device);
    const c = VfioUserClient.connect(sa);
    await c.version();
    // Invalid SET_IRQS (bad flags) and an unknown command, both NO_REPLY, then a probe.
    const bad = new Uint8Array(20);
    new DataView(bad.buffer).setUint32(4, IrqSetFlag.DATA_NONE | IrqSetFlag.DATA_BOOL, true);
    c.sendRaw(encodeMessage({ msgId: 0x100, command: Command.DEVICE_SET_IRQS, flags: MsgFlag.NO_REPLY }, bad));
    c.sendRaw(encodeMessage({ msgId: 0x101, command: 0x4242, flags: MsgFlag.NO_REPLY }, new Uint8Array(8)));
    await c.getInfo();
    expect(c.unexpected).toEqual([]);
    c.close();
  });

  it('sessions that hang up mid-message, with an fd on the partial message, leak nothing', async () => {
    const a = makeTestDevice();
    const sa = path.join(dir, 'partial.sock');
    const la = server.listen(sa, a.device);
    const before = countOpenFds();
    for (let i = 0; i < 20; i++) {
      const w = new SocketWire(sa);
      const hdr = encodeMessage({ msgId: i, command: Command.DMA_MAP }, new Uint8Array(32));
      new DataView(hdr.buffer).setUint32(4, 4096, true); // claims 4 KiB, sends 48 bytes
      const fd = native.memfdCreate('partial', 4096);
      expect(w.send(hdr, [fd])).toBe(true);
      native.close(fd);
      await new Promise((r) => setTimeout(r, 1));
      w.close();
      await la.idle();
    }
    expect(countOpenFds()).toBe(before);
  });
});
