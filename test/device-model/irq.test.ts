import { afterEach, describe, expect, it } from 'vitest';
import { native, EAGAIN } from '../../src/native.ts';
import { PciCapId } from '../../src/device-model/config-layout.ts';
import { VfioUserClient, type Reply } from '../../src/device-model/client.ts';
import { Command, Errno, IrqIndex, IrqSetFlag, MsgFlag, encodeIrqSet, encodeMessage } from '../../src/device-model/protocol.ts';
import { MSIX_PBA, countFds, makeTestDevice, negotiatedPair, type Pair, type TestDevice } from './helpers.ts';

const { DATA_NONE, DATA_BOOL, DATA_EVENTFD, ACTION_MASK, ACTION_UNMASK, ACTION_TRIGGER } = IrqSetFlag;
const EFD = 'anon_inode:[eventfd]';

let open: Pair[] = [];
let eventfds: number[] = [];
afterEach(async () => {
  for (const p of open) {
    p.client.close();
    await p.closed;
  }
  for (const fd of eventfds) native.close(fd);
  open = [];
  eventfds = [];
});

async function setup(): Promise<{ t: TestDevice; c: VfioUserClient; p: Pair }> {
  const t = makeTestDevice();
  const p = await negotiatedPair(t.device);
  open.push(p);
  return { t, c: p.client, p };
}

function efd(): number {
  const fd = native.eventfd(0, true);
  eventfds.push(fd);
  return fd;
}

/** Counter value of an eventfd (0 when nothing was written). */
function drain(fd: number): number {
  const v = native.eventfdRead(fd);
  if (v === -EAGAIN) return 0;
  if (v < 0) throw new Error(`eventfd read failed: ${v}`);
  return v;
}

/** Write MSI-X Message Control (enable bit 15, function mask bit 14) through config space. */
async function msixControl(c: VfioUserClient, t: TestDevice, enable: boolean, mask = false): Promise<void> {
  const cap = t.device.config.findCapability(PciCapId.MSIX);
  await c.regionWrite(7, cap + 2, Uint8Array.of(0, (enable ? 0x80 : 0) | (mask ? 0x40 : 0)));
}

function setIrqsRaw(c: VfioUserClient, s: { flags: number; index: number; start: number; count: number; data?: Uint8Array; argsz?: number }, fds?: number[]): Promise<Reply> {
  const data = s.data ?? new Uint8Array(0);
  const id = c.allocId();
  const p = c.expectReply(id);
  const payload = encodeIrqSet({ argsz: s.argsz ?? 20 + data.length, flags: s.flags, index: s.index, start: s.start, count: s.count, data });
  c.sendRaw(encodeMessage({ msgId: id, command: Command.DEVICE_SET_IRQS }, payload), fds);
  return p;
}

async function expectErrno(r: Promise<Reply>, errno: number): Promise<void> {
  const got = await r;
  expect(got.flags & MsgFlag.ERROR).toBe(MsgFlag.ERROR);
  expect(got.error).toBe(errno);
}

describe('DEVICE_SET_IRQS and MSI-X delivery', () => {
  it('TRIGGER|EVENTFD assigns per vector; firing a vector is observed on its eventfd', async () => {
    const { t, c } = await setup();
    await msixControl(c, t, true);
    const [e0, e1] = [efd(), efd()];
    await c.setMsixEventfds(0, [e0, e1]);
    expect(t.device.irq.msix(1)).toBe(true);
    expect(t.device.irq.msix(1)).toBe(true);
    expect(drain(e1)).toBe(2);
    expect(drain(e0)).toBe(0);
    expect(t.device.irq.stats[1]).toEqual({ fired: 2, delivered: 2, latched: 0, errors: 0 });
  });

  it('a vector without an eventfd latches its PBA bit; assigning an fd delivers and clears it', async () => {
    const { t, c } = await setup();
    await msixControl(c, t, true);
    expect(t.device.irq.msix(2)).toBe(false);
    expect(await c.read32(0, MSIX_PBA)).toBe(0b100);
    expect(Array.from(await c.regionRead(0, MSIX_PBA, 1))).toEqual([4]);
    const e2 = efd();
    await c.setMsixEventfds(2, [e2]);
    expect(drain(e2)).toBe(1);
    expect(await c.read32(0, MSIX_PBA)).toBe(0);
    await c.write32(0, MSIX_PBA, 0xffffffff); // PBA writes are dropped
    expect(await c.read32(0, MSIX_PBA)).toBe(0);
  });

  it('MSI-X disabled or function-masked in config: pending until enabled and unmasked', async () => {
    const { t, c } = await setup();
    const e0 = efd();
    await c.setMsixEventfds(0, [e0]);
    expect(t.device.irq.msix(0)).toBe(false); // MSI-X not enabled yet
    expect(drain(e0)).toBe(0);
    await msixControl(c, t, true, true); // enabled but function-masked
    expect(drain(e0)).toBe(0);
    expect(t.device.irq.isPending(0)).toBe(true);
    await msixControl(c, t, true, false);
    expect(drain(e0)).toBe(1);
    expect(t.device.irq.isPending(0)).toBe(false);
    expect(t.device.irq.stats[0]).toMatchObject({ fired: 1, latched: 1, delivered: 1 });
  });

  it('replacing a vector closes the old eventfd; EVENTFD with no fds de-assigns (count > fds)', async () => {
    const { t, c } = await setup();
    await msixControl(c, t, true);
    const base = countFds(EFD);
    const [a, b, d] = [efd(), efd(), efd()];
    await c.setMsixEventfds(0, [a, b]);
    expect(countFds(EFD)).toBe(base + 3 + 2);
    await c.setMsixEventfds(1, [d]); // replaces b's duplicate
    expect(countFds(EFD)).toBe(base + 3 + 2);
    t.device.irq.msix(1);
    expect(drain(d)).toBe(1);
    expect(drain(b)).toBe(0);
    // QEMU enabling MSI-X with every vector masked: start 0, count 1, no fds.
    await c.setIrqs({ index: IrqIndex.MSIX, flags: DATA_EVENTFD | ACTION_TRIGGER, start: 0, count: 1 });
    expect(countFds(EFD)).toBe(base + 3 + 1);
    await c.setIrqs({ index: IrqIndex.MSIX, flags: DATA_EVENTFD | ACTION_TRIGGER, start: 0, count: 4 });
    expect(countFds(EFD)).toBe(base + 3);
    expect(t.device.irq.msix(1)).toBe(false);
    expect(t.device.irq.state().eventfds[IrqIndex.MSIX]).toEqual([-1, -1, -1, -1]);
  });

  it('NONE|TRIGGER with count 0 disables every vector of the index', async () => {
    const { t, c } = await setup();
    const base = countFds(EFD);
    await c.setMsixEventfds(0, [efd(), efd(), efd(), efd()]);
    await c.setIrqs({ index: IrqIndex.ERR, flags: DATA_EVENTFD | ACTION_TRIGGER, start: 0, count: 1, fds: [efd()] });
    expect(countFds(EFD)).toBe(base + 10);
    await c.setIrqs({ index: IrqIndex.MSIX, flags: DATA_NONE | ACTION_TRIGGER, start: 0, count: 0 });
    expect(countFds(EFD)).toBe(base + 6); // ERR keeps its fd
    // Also accepted for an index with no vectors (QEMU's reset path disables INTx blindly).
    await c.setIrqs({ index: IrqIndex.INTX, flags: DATA_NONE | ACTION_TRIGGER, start: 0, count: 0 });
  });

  it('NONE|TRIGGER and BOOL|TRIGGER fire vectors from the client side (loopback)', async () => {
    const { t, c } = await setup();
    await msixControl(c, t, true);
    const fds = [efd(), efd(), efd(), efd()];
    await c.setMsixEventfds(0, fds);
    await c.setIrqs({ index: IrqIndex.MSIX, flags: DATA_NONE | ACTION_TRIGGER, start: 2, count: 1 });
    await c.setIrqs({ index: IrqIndex.MSIX, flags: DATA_BOOL | ACTION_TRIGGER, start: 0, count: 2, data: Uint8Array.of(0, 1) });
    expect(fds.map(drain)).toEqual([0, 1, 1, 0]);
  });

  it('MASK/UNMASK on MSI-X vectors gate delivery; unmask delivers what was latched', async () => {
    const { t, c } = await setup();
    await msixControl(c, t, true);
    const e3 = efd();
    await c.setMsixEventfds(3, [e3]);
    await c.setIrqs({ index: IrqIndex.MSIX, flags: DATA_NONE | ACTION_MASK, start: 3, count: 1 });
    expect(t.device.irq.msix(3)).toBe(false);
    expect(drain(e3)).toBe(0);
    await c.setIrqs({ index: IrqIndex.MSIX, flags: DATA_BOOL | ACTION_UNMASK, start: 3, count: 1, data: Uint8Array.of(1) });
    expect(drain(e3)).toBe(1);
  });

  it('INTx MASK/UNMASK are tolerated (the resample fd is closed)', async () => {
    const { c } = await setup();
    const base = countFds(EFD);
    await c.setIrqs({ index: IrqIndex.INTX, flags: DATA_NONE | ACTION_MASK, start: 0, count: 1 });
    await c.setIrqs({ index: IrqIndex.INTX, flags: DATA_EVENTFD | ACTION_UNMASK, start: 0, count: 1, fds: [efd()] });
    await c.setIrqs({ index: IrqIndex.INTX, flags: DATA_NONE | ACTION_UNMASK, start: 0, count: 1 });
    expect(countFds(EFD)).toBe(base + 1);
  });

  it('ERR: one eventfd, trigger writes it', async () => {
    const { t, c } = await setup();
    const e = efd();
    await c.setIrqs({ index: IrqIndex.ERR, flags: DATA_EVENTFD | ACTION_TRIGGER, start: 0, count: 1, fds: [e] });
    expect(t.device.irq.trigger(IrqIndex.ERR, 0)).toBe(true);
    expect(drain(e)).toBe(1);
  });

  it('client disconnect closes every IRQ eventfd and clears pending state', async () => {
    const { t, c, p } = await setup();
    const base = countFds(EFD);
    await c.setMsixEventfds(0, [efd(), efd()]);
    t.device.irq.msix(3);
    expect(countFds(EFD)).toBe(base + 4);
    c.close();
    await p.closed;
    open = [];
    expect(countFds(EFD)).toBe(base + 2);
    expect(t.device.irq.state().pending).toEqual([]);
  });

  describe('invalid SET_IRQS: EINVAL, fds closed', () => {
    const M = IrqIndex.MSIX;
    it.each<[string, { flags: number; index: number; start: number; count: number; data?: Uint8Array; argsz?: number }, number]>([
      ['two actions', { flags: DATA_NONE | ACTION_MASK | ACTION_TRIGGER, index: M, start: 0, count: 1 }, 0],
      ['two data types', { flags: DATA_NONE | DATA_BOOL | ACTION_TRIGGER, index: M, start: 0, count: 1, data: Uint8Array.of(1) }, 0],
      ['no action', { flags: DATA_NONE, index: M, start: 0, count: 1 }, 0],
      ['unknown flag bits', { flags: DATA_NONE | ACTION_TRIGGER | 0x100, index: M, start: 0, count: 1 }, 0],
      ['index 5', { flags: DATA_NONE | ACTION_TRIGGER, index: 5, start: 0, count: 1 }, 0],
      ['start beyond the vectors', { flags: DATA_NONE | ACTION_TRIGGER, index: M, start: 4, count: 1 }, 0],
      ['start+count beyond the vectors', { flags: DATA_EVENTFD | ACTION_TRIGGER, index: M, start: 3, count: 2 }, 2],
      ['start+count overflowing u32', { flags: DATA_NONE | ACTION_TRIGGER, index: M, start: 1, count: 0xffffffff }, 0],
      ['count 0 with start 1', { flags: DATA_NONE | ACTION_TRIGGER, index: M, start: 1, count: 0 }, 0],
      ['count 0 with EVENTFD', { flags: DATA_EVENTFD | ACTION_TRIGGER, index: M, start: 0, count: 0 }, 0],
      ['ERR with count 2', { flags: DATA_EVENTFD | ACTION_TRIGGER, index: IrqIndex.ERR, start: 0, count: 2 }, 2],
      ['ERR with MASK', { flags: DATA_NONE | ACTION_MASK, index: IrqIndex.ERR, start: 0, count: 1 }, 0],
      ['fds with DATA_NONE', { flags: DATA_NONE | ACTION_TRIGGER, index: M, start: 0, count: 1 }, 1],
      ['fewer fds than count', { flags: DATA_EVENTFD | ACTION_TRIGGER, index: M, start: 0, count: 3 }, 2],
      ['more fds than count', { flags: DATA_EVENTFD | ACTION_TRIGGER, index: M, start: 0, count: 1 }, 2],
      ['BOOL data shorter than count', { flags: DATA_BOOL | ACTION_TRIGGER, index: M, start: 0, count: 3, data: Uint8Array.of(1) }, 0],
      ['MASK with EVENTFD on MSI-X', { flags: DATA_EVENTFD | ACTION_MASK, index: M, start: 0, count: 1 }, 1],
      ['INTx trigger (no INTx vectors)', { flags: DATA_EVENTFD | ACTION_TRIGGER, index: IrqIndex.INTX, start: 0, count: 1 }, 1],
      ['argsz < 20', { flags: DATA_NONE | ACTION_TRIGGER, index: M, start: 0, count: 1, argsz: 16 }, 0],
    ])('%s', async (_n, s, nfds) => {
      const { t, c } = await setup();
      const base = countFds(EFD);
      const fds = Array.from({ length: nfds }, () => efd());
      await expectErrno(setIrqsRaw(c, s, fds), Errno.EINVAL);
      expect(countFds(EFD)).toBe(base + nfds); // only the test's own copies remain
      expect(t.device.irq.state().eventfds[IrqIndex.MSIX]).toEqual([-1, -1, -1, -1]);
    });
  });
});
