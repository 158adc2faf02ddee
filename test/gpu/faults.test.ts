// MMU fault paths (hw-spec §7, §8.1): hostile or missing page-table entries raise an MMU fault
// with the right VA, channel, reason, access and unit; the faulting channel stops and its fence
// waits fail; nothing moves — VRAM and every byte of system memory (mapped or guard) are
// unchanged; other channels keep working.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { K } from '../../src/gpu/kernels.ts';
import { GpuError, type HostChannel } from '../support/host-driver/driver.ts';
import { pde, pte } from '../support/host-driver/pte.ts';
import { Pushbuffer, gpfifoEntry } from '../support/host-driver/pushbuf.ts';
import * as S from '../../src/gpu/spec.ts';
import { buf, params, rig, type Rig } from './helpers.ts';

const VRAM = 32 << 20;
const GUARD_BUS = 0x40_0000_0000; // a bus window with a mapped middle page only

describe('MMU faults', () => {
  let r: Rig;
  let guardFd: number;
  let guardBuf: ArrayBuffer;
  let guard: Uint8Array;
  const vectors: number[] = [];

  beforeAll(() => {
    r = rig({ vramSize: VRAM, channels: 64 });
    // 3 pages of "system memory"; only the middle one is in the bus resolver.
    guardFd = native.memfdCreate('guard', 3 * 4096);
    guardBuf = native.mmap(guardFd, 3 * 4096, 0);
    guard = new Uint8Array(guardBuf);
    guard.fill(0xee);
    r.drv.bus.add({ bus: GUARD_BUS + 4096, length: 4096, fd: guardFd, offset: 4096, writable: true });
    const handler = r.engine.irq.sink;
    r.engine.onInterrupt = (v) => {
      vectors.push(v);
      handler(v);
    };
  });
  afterAll(() => {
    r.close();
    native.munmap(guardBuf);
    native.close(guardFd);
  });

  /** A fresh channel on the shared VM (faults stop channels). */
  const chan = () => r.drv.createChannel(r.vm);

  async function expectFault(p: Promise<unknown>, ch: HostChannel, reason: number, va: number, write: boolean, unit: number): Promise<GpuError> {
    const err = (await p.then(() => null, (e: unknown) => e)) as GpuError;
    expect(err).toBeInstanceOf(GpuError);
    expect(S.chanErrName(err.code)).toBe('MMU_FAULT');
    expect(err.chid).toBe(ch.chid);
    expect(err.fault).toBeDefined();
    expect({ reason: S.faultName(err.fault!.reason), va: err.fault!.va.toString(16), write: err.fault!.write, unit: err.fault!.unit })
      .toEqual({ reason: S.faultName(reason), va: va.toString(16), write, unit });
    expect(ch.state & S.STATE_ERROR).toBeTruthy();
    expect(ch.state & S.STATE_ENABLE).toBe(0);
    expect(r.drv.rd(S.PFIFO_CHAN_ERR + 8 * ch.chid)).toBe(S.CHAN_ERR.MMU_FAULT);
    return err;
  }

  it('a PTE pointing past the end of VRAM faults (VRAM_OUT_OF_RANGE) and nothing moves', async () => {
    const ch = chan();
    const src = r.vram(8192);
    src.u8.fill(0x42);
    const badVa = r.vm.map(0, 2 * 4096); // two pages: first valid VRAM page 0, second hostile
    r.vm.setPte(badVa + 4096, pte(VRAM)); // first page beyond VRAM
    r.drv.flushTlb(r.vm.pd);
    const before = Buffer.from(r.engine.vram.u8);
    vectors.length = 0;
    await expectFault(ch.copy(badVa, src.va, 8192), ch, S.FAULT.VRAM_OUT_OF_RANGE, badVa + 4096, true, S.UNIT.COPY);
    // Nothing changed in VRAM — not even the valid first page — except the channel's own
    // driver structures (pushbuffer ring, GPFIFO, USERD), which the submission itself wrote.
    const own = [[ch.pb, ch.pbSize], [ch.gpfifo, ch.entries * 8], [ch.userd, S.USERD_SIZE]] as const;
    const after = r.engine.vram.u8;
    for (let i = 0; i < VRAM; i += 4096) {
      if (Buffer.compare(before.subarray(i, i + 4096), after.subarray(i, i + 4096)) === 0) continue;
      expect(own.some(([a, n]) => i >= a - 4095 && i < a + n), `VRAM page 0x${i.toString(16)} changed`).toBe(true);
    }
    expect(vectors).toContain(S.IRQ_MMU_FAULT);
    expect(vectors).not.toContain(S.IRQ_CHAN_ERROR); // a fault is reported once, on vector 1
  });

  it('a sysmem PTE to an unmapped bus address faults (SYSMEM_UNMAPPED); guard pages untouched', async () => {
    const ch = chan();
    const src = r.vram(3 * 4096);
    src.u8.fill(0x77);
    // VA → [guard page 0 (unmapped), page 1 (mapped), page 2 (unmapped)], contiguous bus addresses.
    const va = r.vm.map(GUARD_BUS, 3 * 4096, { target: S.TARGET_SYSMEM });
    await expectFault(ch.copy(va + 4096, src.va, 2 * 4096), ch, S.FAULT.SYSMEM_UNMAPPED, va + 2 * 4096, true, S.UNIT.COPY);
    expect(guard.every((b) => b === 0xee)).toBe(true); // the mapped page did not get the first half either
    const ch2 = chan();
    await expectFault(ch2.copy(src.va, va, 4096), ch2, S.FAULT.SYSMEM_UNMAPPED, va, false, S.UNIT.COPY);
    // The mapped middle page works.
    const ch3 = chan();
    await ch3.copy(va + 4096, src.va, 4096);
    expect(guard.subarray(4096, 8192).every((b) => b === 0x77)).toBe(true);
    expect(guard.subarray(0, 4096).every((b) => b === 0xee)).toBe(true);
    expect(guard.subarray(8192).every((b) => b === 0xee)).toBe(true);
  });

  it('non-present PTE and PDE, bad target, read-only writes, VA limit', async () => {
    const a = r.vram(4096);
    const unmappedVa = r.vm.map(0, 2 * 4096);
    r.vm.unmap(unmappedVa + 4096, 4096);
    let ch = chan();
    await expectFault(ch.copy(a.va, unmappedVa, 8192), ch, S.FAULT.PTE_NOT_PRESENT, unmappedVa + 4096, false, S.UNIT.COPY);

    ch = chan();
    const farVa = 0x80_0000_0000; // a 128 MiB region with no PDE
    await expectFault(ch.copy(a.va, farVa + 0x123, 16), ch, S.FAULT.PDE_NOT_PRESENT, farVa, false, S.UNIT.COPY);

    ch = chan();
    const badTarget = r.vm.map(0, 4096);
    r.vm.setPte(badTarget, [((pte(0)[0] & ~0x30) | (1 << 4)) >>> 0, 0]); // TARGET 1 is invalid
    r.drv.flushTlb(r.vm.pd);
    await expectFault(ch.copy(a.va, badTarget, 4), ch, S.FAULT.BAD_PTE, badTarget, false, S.UNIT.COPY);

    ch = chan();
    const ro = r.vram(4096, { readOnly: true });
    await expectFault(ch.copy(ro.va, a.va, 4), ch, S.FAULT.WRITE_TO_READ_ONLY, ro.va, true, S.UNIT.COPY);
    ch = chan();
    await ch.copy(a.va, ro.va, 4); // reading a read-only page is fine

    ch = chan();
    await expectFault(ch.copy(a.va, 2 ** 40 - 8, 16), ch, S.FAULT.VA_OUT_OF_RANGE, 2 ** 40, false, S.UNIT.COPY);
  });

  it('compute: an output on a read-only page faults before the kernel runs; inputs may be read-only', async () => {
    const n = 8;
    const ro = r.vram(4 * n * n, { readOnly: true });
    const rw = r.vram(4 * n * n);
    ro.u32.fill(3);
    rw.u32.fill(9);
    let ch = chan();
    await expectFault(ch.launch(K.MADD, [buf(rw), buf(rw), buf(ro)], params(['u32', n])), ch, S.FAULT.WRITE_TO_READ_ONLY, ro.va, true, S.UNIT.COMPUTE);
    expect(ro.u32.every((v) => v === 3)).toBe(true);
    ch = chan();
    await ch.launch(K.MADD, [buf(ro), buf(ro), buf(rw)], params(['u32', n]));
    expect(rw.u32.every((v) => v === 6)).toBe(true);
    // A parameter block on an unmapped page faults with unit COMPUTE.
    ch = chan();
    const words = new Pushbuffer().compute(S.SUBCH_COMPUTE, { kernel: K.NOP, paramVa: 0x90_0000_0000, paramLength: 8, buffers: [], semaphore: ch.nextRelease() }).words();
    ch.submit(words);
    await expectFault(ch.wait(ch.seq), ch, S.FAULT.PDE_NOT_PRESENT, 0x90_0000_0000, false, S.UNIT.COMPUTE);
  });

  it('semaphore release and pushbuffer fetch faults carry their units; the fence wait fails, not hangs', async () => {
    let ch = chan();
    ch.submit(new Pushbuffer().semaphoreRelease({ va: 0xa0_0000_0000, payload: 1, interrupt: true }).words());
    const p = ch.fence();
    await expectFault(p, ch, S.FAULT.PDE_NOT_PRESENT, 0xa0_0000_0000, true, S.UNIT.SEMAPHORE);
    await expect(ch.fence()).rejects.toThrow(/MMU_FAULT/); // later waits fail at once

    // A GPFIFO entry whose segment VA is unmapped: the fetch faults (unit HOST).
    ch = chan();
    const seg = 0xb0_0000_0000;
    await placeRawEntry(ch, gpfifoEntry(seg, 4));
    await expectFault(ch.fence(), ch, S.FAULT.PDE_NOT_PRESENT, seg, false, S.UNIT.HOST);
  });

  it('page tables in system memory work; a PD in unmapped system memory is BAD_PAGE_TABLE', async () => {
    // Build a tiny address space by hand: PD and one small PT in sysmem, mapping one VRAM page.
    const pdMem = r.drv.allocSysmem(S.PD_SIZE);
    const ptMem = r.drv.allocSysmem(S.SMALL_PT_ENTRIES * 8);
    const target = r.vram(4096);
    target.u32.fill(0x5a5a5a5a);
    const va = 3 * 2 ** 27 + 5 * 4096;
    const put64 = (m: Uint8Array, off: number, e: [number, number]) => {
      new DataView(m.buffer, m.byteOffset).setUint32(off, e[0], true);
      new DataView(m.buffer, m.byteOffset).setUint32(off + 4, e[1], true);
    };
    put64(pdMem.u8, 3 * 8, pde(ptMem.bus, { target: S.TARGET_SYSMEM }));
    put64(ptMem.u8, 5 * 8, pte(vramAddrOf(target)));
    // A channel whose instance block names the sysmem PD; the driver's ring lives in its own VM,
    // so copy the ring mappings into this hand-built space for the fetch to work.
    const ch = chan();
    const inst = ch.inst;
    r.drv.vramWrite32(inst + S.INST.PD_LO, (pdMem.bus % 2 ** 32) | S.TARGET_SYSMEM);
    r.drv.vramWrite32(inst + S.INST.PD_HI, Math.floor(pdMem.bus / 2 ** 32));
    mirrorRing(ch, pdMem.u8, put64);
    ch.bind();
    const out = r.vram(4096);
    // `out` is in the driver's VM; map it into the sysmem space at the same VA too.
    mirror(out.va, vramAddrOf(out), pdMem.u8, put64);
    await ch.copy(out.va, va, 4096);
    expect(out.u32.every((v) => v === 0x5a5a5a5a)).toBe(true);

    const ch2 = chan();
    r.drv.vramWrite32(ch2.inst + S.INST.PD_LO, (0x7f_0000_0000 % 2 ** 32) | S.TARGET_SYSMEM);
    r.drv.vramWrite32(ch2.inst + S.INST.PD_HI, 0x7f);
    ch2.bind(); // the engine re-reads the instance block: its PD is now unreachable
    await expectFault(ch2.fence(), ch2, S.FAULT.BAD_PAGE_TABLE, ch2.gpfifoVa, false, S.UNIT.HOST);

    function mirrorRing(c: HostChannel, pd: Uint8Array, p64: typeof put64): void {
      mirror(c.gpfifoVa, c.gpfifo, pd, p64, c.entries * 8);
      mirror(c.pbVa, c.pb, pd, p64, c.pbSize);
      mirror(c.semVa, c.sem, pd, p64);
    }
    function mirror(v: number, phys: number, pd: Uint8Array, p64: typeof put64, size = 4096): void {
      for (let off = 0; off < size; off += 4096) {
        const pdi = Math.floor((v + off) / 2 ** 27);
        let pt = sysTables.get(pdi);
        if (!pt) {
          pt = r.drv.allocSysmem(S.SMALL_PT_ENTRIES * 8);
          sysTables.set(pdi, pt);
          p64(pd, pdi * 8, pde(pt.bus, { target: S.TARGET_SYSMEM }));
        }
        p64(pt.u8, Math.floor(((v + off) % 2 ** 27) / 4096) * 8, pte(phys + off));
      }
    }
  });

  it('the fault registers keep the first fault; a second one sets OVERFLOW; W1C clears', async () => {
    const saved = r.engine.irq.sink;
    r.engine.onInterrupt = () => {}; // no driver handler: inspect the registers raw
    try {
      const e = r.engine;
      e.mmioWrite(S.MMU_FAULT_STATUS, 4, 3);
      const a = chan(), b = chan();
      a.submit(new Pushbuffer().semaphoreRelease({ va: 0xc0_0000_0000, payload: 1 }).words());
      b.submit(new Pushbuffer().semaphoreRelease({ va: 0xd0_0000_0000, payload: 1 }).words());
      await new Promise((res) => setTimeout(res, 10));
      expect(e.mmioRead(S.MMU_FAULT_STATUS, 4)).toBe(3);
      expect(e.mmioRead(S.MMU_FAULT_CHID, 4)).toBe(a.chid);
      expect(e.mmioRead(S.MMU_FAULT_ADDR_HI, 4)).toBe(0xc0);
      expect(e.mmioRead(S.MMU_FAULT_ADDR_LO, 4)).toBe(0);
      expect(e.mmioRead(S.MMU_FAULT_INFO, 4)).toBe(S.FAULT.PDE_NOT_PRESENT | 0x100 | (S.UNIT.SEMAPHORE << 12));
      expect(e.mmioRead(S.PFIFO_CHAN_ERR + 8 * b.chid, 4)).toBe(S.CHAN_ERR.MMU_FAULT);
      expect(e.mmioRead(S.PMC_INTR, 4) & 2).toBe(2);
      e.mmioWrite(S.MMU_FAULT_STATUS, 4, 1);
      expect(e.mmioRead(S.MMU_FAULT_STATUS, 4)).toBe(2);
      e.mmioWrite(S.MMU_FAULT_STATUS, 4, 2);
      expect(e.mmioRead(S.MMU_FAULT_STATUS, 4)).toBe(0);
      e.mmioWrite(S.MMU_FAULT_CHID, 4, 77); // read-only
      expect(e.mmioRead(S.MMU_FAULT_CHID, 4)).toBe(a.chid);
    } finally {
      r.engine.onInterrupt = saved;
      r.drv.handleInterrupts();
    }
  });

  it('a faulted channel does not disturb the others', async () => {
    const good = chan();
    const bad = chan();
    const a = r.vram(1 << 16), b = r.vram(1 << 16);
    a.u8.fill(0x31);
    const pBad = bad.copy(a.va, 0xe0_0000_0000, 16);
    const pGood = good.copy(b.va, a.va, 1 << 16);
    await expect(pBad).rejects.toThrow(/MMU_FAULT/);
    await pGood;
    expect(b.u8.every((x) => x === 0x31)).toBe(true);
    await good.launch(K.NOP, []);
  });

  // ---- helpers ----
  const sysTables = new Map<number, ReturnType<Rig['drv']['allocSysmem']>>();

  function vramAddrOf(b: { u8: Uint8Array }): number {
    return b.u8.byteOffset - r.engine.vram.u8.byteOffset;
  }

  /** Write a raw GPFIFO entry at GP_PUT, advance GP_PUT and ring the doorbell. */
  async function placeRawEntry(ch: HostChannel, e: [number, number]): Promise<number> {
    await ch.idle();
    const put = (ch.gpGet) % ch.entries;
    r.drv.vramWrite32(ch.gpfifo + put * 8, e[0]);
    r.drv.vramWrite32(ch.gpfifo + put * 8 + 4, e[1]);
    // Skip the driver's bookkeeping on purpose: this entry is hostile.
    r.drv.vramWrite32(ch.userd + S.USERD.GP_PUT, (put + 1) % ch.entries);
    r.drv.wr(S.DOORBELL, ch.chid);
    return put;
  }
});
