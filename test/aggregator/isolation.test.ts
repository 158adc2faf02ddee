// A hostile VM next to a well-behaved one: every attack ends in the attacker's own fault or
// channel error (its virtual registers, its vector), while the co-tenant's data and results
// stay bit-exact and its interrupt state stays clean.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import * as S from '../../src/gpu/spec.ts';
import { pte } from '../support/host-driver/pte.ts';
import { GpuError } from '../support/host-driver/driver.ts';
import { busAddress } from '../../src/aggregator/guest-memory.ts';
import { buf, guest, host, type GpuBuf, type Guest, type Host } from './harness.ts';
import { params, rng } from '../gpu/helpers.ts';

let h: Host;
let evil: Guest;
let good: Guest;
/** The co-tenant's precious data and a checksum of its whole slice region. */
let secret: GpuBuf;

function fill(b: GpuBuf, seed: number): void {
  const r = rng(seed);
  b.u32.forEach((_, i) => (b.u32[i] = (r() * 2 ** 32) >>> 0));
}

/** The co-tenant computes a MADD and checks it exactly. */
async function goodWork(n = 40, seed = 5): Promise<void> {
  const a = good.vram(4 * n * n), b = good.sys(4 * n * n), c = good.vram(4 * n * n);
  fill(a, seed);
  fill(b, seed + 1);
  await good.ch.launch(K.MADD, [buf(a), buf(b), buf(c)], params(['u32', n]));
  for (let i = 0; i < n * n; i++) if (c.u32[i] !== ((a.u32[i]! + b.u32[i]!) >>> 0)) expect.fail(`co-tenant MADD element ${i}`);
}

function expectCleanCoTenant(): void {
  const c = good.vm.counters;
  expect(c.faults).toBe(0);
  expect(c.channelErrors).toBe(0);
  expect(good.rd(S.MMU_FAULT_STATUS)).toBe(0);
  for (let i = 0; i < 4; i++) expect(good.rd(S.PFIFO_ERR_PENDING + 4 * i)).toBe(0);
  const r = rng(77);
  for (let i = 0; i < secret.u32.length; i++) {
    if (secret.u32[i] !== (r() * 2 ** 32) >>> 0) expect.fail(`co-tenant secret word ${i} changed`);
  }
}

/** Expect the attacker's channel to stop with `code` (and, for MMU faults, `reason`). */
async function expectStopped(p: Promise<unknown>, code: number, reason?: number): Promise<GpuError> {
  const err = await p.then(() => null, (e: unknown) => e);
  expect(err).toBeInstanceOf(GpuError);
  const ge = err as GpuError;
  expect(S.chanErrName(ge.code)).toBe(S.chanErrName(code));
  if (reason !== undefined) expect(ge.fault && S.faultName(ge.fault.reason)).toBe(S.faultName(reason));
  return ge;
}

beforeEach(() => {
  h = host({ watchdogMs: 300 });
  evil = guest(h.agg, { name: 'evil', mode: 'fv', slice: 32 << 20, channels: 4 });
  good = guest(h.agg, { name: 'good', mode: 'fv', slice: 32 << 20 });
  secret = good.vram(64 << 10);
  const r = rng(77);
  secret.u32.forEach((_, i) => (secret.u32[i] = (r() * 2 ** 32) >>> 0));
});

afterEach(() => {
  evil.close();
  good.close();
  h.close();
});

describe('hostile VM', () => {
  it('a PTE into the co-tenant slice becomes non-present: reads and writes fault in the attacker', async () => {
    // Where the co-tenant's secret would be if guest VRAM addresses were not slice-relative.
    const target = good.vm.slice.base - evil.vm.slice.base + secret.addr;
    expect(target).toBeGreaterThanOrEqual(evil.vm.slice.size);
    const probe = evil.vram(4096);
    const mine = evil.vram(4096);
    evil.gvm.setPte(probe.va, pte(target));
    evil.drv.flushTlb(evil.gvm.pd);
    const before = evil.vm.counters.faults;
    const e = await expectStopped(evil.ch.copy(mine.va, probe.va, 4096), S.CHAN_ERR.MMU_FAULT, S.FAULT.PTE_NOT_PRESENT);
    expect(e.fault!.va).toBe(probe.va);
    expect(e.fault!.chid).toBe(evil.ch.chid); // the attacker's virtual chid, not the physical one
    expect(evil.vm.counters.faults).toBe(before + 1);
    expect(mine.u32.every((v) => v === 0)).toBe(true);
    evil.ch.bind();
    await expectStopped(evil.ch.copy(probe.va, mine.va, 4096), S.CHAN_ERR.MMU_FAULT, S.FAULT.PTE_NOT_PRESENT);
    // Also a large page and a PTE with the slice-straddling last page.
    evil.ch.bind();
    evil.gvm.setPte(probe.va, pte(evil.vm.slice.size - 4096 + 4096));
    evil.drv.flushTlb(evil.gvm.pd);
    await expectStopped(evil.ch.copy(mine.va, probe.va, 16), S.CHAN_ERR.MMU_FAULT, S.FAULT.PTE_NOT_PRESENT);
    await goodWork();
    expectCleanCoTenant();
  });

  it('system-memory PTEs outside the DMA map (unmapped gpa, another VM’s bus address) fault', async () => {
    const probe = evil.vram(4096);
    const mine = evil.vram(4096);
    evil.gvm.setPte(probe.va, pte(0x7_0000_0000, { target: S.TARGET_SYSMEM }));
    evil.drv.flushTlb(evil.gvm.pd);
    await expectStopped(evil.ch.copy(mine.va, probe.va, 64), S.CHAN_ERR.MMU_FAULT, S.FAULT.PTE_NOT_PRESENT);
    // The co-tenant's sysmem buffer as a bus address: a guest cannot name another VM's memory.
    const gs = good.sys(4096);
    gs.u32.fill(0xabcdef01);
    evil.ch.bind();
    evil.gvm.setPte(probe.va, pte(busAddress(good.vm.index, gs.addr), { target: S.TARGET_SYSMEM }));
    evil.drv.flushTlb(evil.gvm.pd);
    await expectStopped(evil.ch.copy(probe.va, mine.va, 64), S.CHAN_ERR.MMU_FAULT, S.FAULT.PTE_NOT_PRESENT);
    expect(gs.u32.every((v) => v === 0xabcdef01)).toBe(true);
    await goodWork();
    expectCleanCoTenant();
  });

  it('read-only is preserved, and a read-only DMA map makes the shadow read-only', async () => {
    const ro = evil.vram(4096, { readOnly: true });
    const mine = evil.vram(4096);
    mine.u32.fill(7);
    await expectStopped(evil.ch.copy(ro.va, mine.va, 64), S.CHAN_ERR.MMU_FAULT, S.FAULT.WRITE_TO_READ_ONLY);
    expect(ro.u32[0]).toBe(0);
    // Guest RAM the VMM mapped read-only, which the guest maps read-write.
    evil.ch.bind();
    const gpa = 0x9000_0000;
    const ram = evil.ram(gpa, 8192, false);
    ram.fill(3);
    const va = evil.gvm.map(gpa, 8192, { target: S.TARGET_SYSMEM });
    await evil.ch.copy(mine.va, va, 64); // reading is fine
    expect(mine.u8[0]).toBe(3);
    await expectStopped(evil.ch.copy(va, mine.va, 64), S.CHAN_ERR.MMU_FAULT, S.FAULT.WRITE_TO_READ_ONLY);
    expect(ram[0]).toBe(3);
    expectCleanCoTenant();
  });

  it('foreign and out-of-range channel ids reach nothing', async () => {
    const gp = good.vm.s.channels[good.ch.chid]!.pchid;
    const goodState = h.engine.mmioRead(S.PFIFO_CHAN_STATE + 8 * gp, 4);
    const goodInst = h.engine.mmioRead(S.PFIFO_CHAN + 8 * gp, 4);
    for (const id of [gp, 3, 4, 63, 127]) {
      evil.wr(S.DOORBELL, id);
      evil.wr(S.PFIFO_PREEMPT, id);
      evil.wr(S.PFIFO_CHAN_STATE + 8 * id, 0);
      evil.wr(S.PFIFO_CHAN + 8 * id, 0);
    }
    // Virtual chids ≥ the VM's channel count do not exist.
    expect(evil.rd(S.PFIFO_CHAN + 8 * 4)).toBe(0);
    expect(evil.rd(S.PFIFO_CHAN_ERR + 8 * 63)).toBe(0);
    // A runlist naming every id: only the attacker's own bound channels end up on the engine.
    const rl = evil.vram(4096);
    for (let i = 0; i < 128; i++) rl.u32[2 * i] = i;
    evil.wr(S.PFIFO_RUNLIST_BASE, rl.addr / 4096);
    evil.wr(S.PFIFO_RUNLIST_SUBMIT, 4);
    expect(evil.vm.s.runlist.length).toBe(4);
    expect(h.engine.mmioRead(S.PFIFO_CHAN_STATE + 8 * gp, 4)).toBe(goodState);
    expect(h.engine.mmioRead(S.PFIFO_CHAN + 8 * gp, 4)).toBe(goodInst);
    await goodWork();
    expectCleanCoTenant();
  });

  it('a garbage pushbuffer stops only the attacker’s channel (its CHAN_ERR, its vector 2)', async () => {
    const r = rng(99);
    const garbage = new Uint32Array(256).map(() => (r() * 2 ** 32) >>> 0);
    garbage[0] = 0x0000_0000; // SEC_OP 0
    const irqBefore = evil.vm.counters.interrupts;
    evil.ch.submit(garbage);
    const run = goodWork();
    await expectStopped(evil.ch.fence(), S.CHAN_ERR.BAD_OPCODE);
    await run;
    expect(evil.vm.counters.channelErrors).toBe(1);
    expect(evil.vm.counters.interrupts).toBeGreaterThan(irqBefore);
    expect(evil.rd(S.PFIFO_CHAN_ERR + 8 * evil.ch.chid)).toBe(S.CHAN_ERR.BAD_OPCODE);
    expect(evil.rd(S.PFIFO_CHAN_STATE + 8 * evil.ch.chid) & S.STATE_ERROR).toBe(S.STATE_ERROR);
    // A rebind recovers the attacker's channel.
    evil.ch.bind();
    await evil.ch.launch(K.NOP, []);
    expectCleanCoTenant();
  });

  it('an endless kernel is cancelled by the watchdog; the co-tenant finishes its work exactly', async () => {
    const out = evil.vram(64);
    const endless = expectStopped(
      evil.ch.launch(K.LOOP, [buf(out)], params(['u64', 0n], ['u64', 60_000_000_000n], ['u32', 1])),
      S.CHAN_ERR.WATCHDOG,
    );
    const t0 = Date.now();
    await Promise.all([goodWork(40, 11), goodWork(32, 12)]);
    await endless;
    expect(Date.now() - t0).toBeLessThan(5000);
    expectCleanCoTenant();
  });

  it('instance blocks, runlists, PRAMIN and PDIAG are confined to the slice', async () => {
    const outside = evil.vm.slice.size;
    // Instance block beyond the slice: BAD_INSTANCE on the attacker's virtual channel 1.
    evil.wr(S.PFIFO_CHAN + 8 * 1, S.CHAN_VALID | (outside / 4096));
    expect(evil.rd(S.PFIFO_CHAN_ERR + 8 * 1)).toBe(S.CHAN_ERR.BAD_INSTANCE);
    expect(evil.rd(S.PFIFO_ERR_PENDING) & 2).toBe(2);
    evil.wr(S.PFIFO_CHAN + 8 * 1, 0);
    // Runlist beyond the slice: the attacker's RUNLIST_ERROR.
    evil.wr(S.PFIFO_RUNLIST_BASE, outside / 4096);
    evil.wr(S.PFIFO_RUNLIST_SUBMIT, 1);
    expect(evil.rd(S.PFIFO_INTR) & S.PFIFO_INTR_RUNLIST_ERROR).toBe(S.PFIFO_INTR_RUNLIST_ERROR);
    // PRAMIN: inside the slice it is the slice; beyond it reads 0 and ignores writes.
    evil.wr(S.PRAMIN_BASE, 0x10);
    evil.vm.mmioWrite(S.PRAMIN_WINDOW + 8, 4, 0x1234_5678);
    expect(new DataView(evil.bar1.buffer, evil.bar1.byteOffset).getUint32(0x100008, true)).toBe(0x1234_5678);
    for (let base = outside >> 16; base < (outside >> 16) + 2048; base += 64) {
      evil.wr(S.PRAMIN_BASE, base);
      for (let x = 0; x < S.PRAMIN_WINDOW_SIZE; x += 0x10000) {
        evil.vm.mmioWrite(S.PRAMIN_WINDOW + x, 4, 0xdeadbeef);
        expect(Number(evil.vm.mmioRead(S.PRAMIN_WINDOW + x, 4))).toBe(0);
      }
    }
    // PDIAG: VRAM offsets beyond the slice are EINVAL, unmapped guest memory EFAULT.
    evil.wr(S.DIAG_DMA_LEN, 64);
    evil.wr(S.DIAG_DMA_VRAM_OFF, outside - 32);
    evil.wr(S.DIAG_DMA_CTRL, 2);
    expect(evil.rd(S.DIAG_DMA_ERROR)).toBe(22);
    evil.wr(S.DIAG_DMA_VRAM_OFF, 0);
    evil.wr(S.DIAG_DMA_ADDR_LO, 0x4000_0000);
    evil.wr(S.DIAG_DMA_CTRL, 1);
    expect(evil.rd(S.DIAG_DMA_ERROR)).toBe(14);
    // DIAG_VRAM_PEEK/POKE stay inside the slice too.
    evil.wr(S.DIAG_VRAM_OFF, outside);
    evil.wr(S.DIAG_VRAM_POKE, 0xfeedface);
    expect(evil.rd(S.DIAG_VRAM_PEEK)).toBe(0);
    await goodWork();
    expectCleanCoTenant();
  });
});
