// Register semantics: the generic register file (read-only and W1C masks, hooks, reset,
// snapshot) and the engine's BAR0 table against docs/hw-spec.md (reset values, read-only
// registers, W1C registers, unlisted offsets).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RegisterFile } from '../../src/gpu/regs.ts';
import { Engine } from '../../src/gpu/engine.ts';
import * as S from '../../src/gpu/spec.ts';

describe('RegisterFile', () => {
  it('applies ro and w1c masks, runs hooks in order, resets and snapshots', () => {
    const log: string[] = [];
    const rf = new RegisterFile([
      { addr: 0x0, name: 'ID', reset: 0x1234, ro: 0xffffffff },
      { addr: 0x4, name: 'MIX', reset: 0xf0, ro: 0xff000000, w1c: 0x000000f0 },
      {
        addr: 0x8, name: 'HOOKED', reset: 0,
        preWrite: (v, old) => (log.push(`pre ${v} ${old}`), v + 1),
        postWrite: (s, w, old) => log.push(`post ${s} ${w} ${old}`),
        postRead: (s) => s * 2,
      },
    ]);
    expect(rf.read(0x0)).toBe(0x1234);
    rf.write(0x0, 0);
    expect(rf.read(0x0)).toBe(0x1234);
    rf.set(0x4, 0xab0000f0);
    rf.write(0x4, 0xffffff30); // ro byte kept, w1c bits 4-5 cleared, bits 6-7 stay, rw bits set
    expect(rf.read(0x4)).toBe(0xabffffc0);
    rf.write(0x8, 10);
    expect(log).toEqual(['pre 10 0', 'post 11 10 0']);
    expect(rf.read(0x8)).toBe(22);
    expect(rf.get(0x8)).toBe(11);
    expect(rf.read(0xc)).toBeUndefined();
    expect(rf.write(0xc, 1)).toBe(false);
    const snap = rf.snapshot();
    expect(snap).toEqual({ ID: 0x1234, MIX: rf.get(0x4), HOOKED: 11 });
    rf.reset();
    expect(rf.get(0x4)).toBe(0xf0);
    expect(rf.get(0x8)).toBe(0);
    rf.restore(snap);
    expect(rf.get(0x8)).toBe(11);
  });

  it('rejects misaligned and duplicate offsets', () => {
    expect(() => new RegisterFile([{ addr: 2, name: 'X', reset: 0 }])).toThrow(/aligned/);
    expect(() => new RegisterFile([{ addr: 4, name: 'A', reset: 0 }, { addr: 4, name: 'B', reset: 0 }])).toThrow(/twice/);
  });
});

describe('engine BAR0 table', () => {
  let e: Engine;
  beforeAll(() => {
    e = new Engine({ vramSize: 32 << 20, channels: 16 });
  });
  afterAll(() => e.close());

  it('has the reset values of hw-spec', () => {
    const want: [number, number][] = [
      [S.PMC_BOOT_0, 0x0c0000a1], [S.PMC_INTR, 0], [S.PMC_INTR_EN, 0], [S.PMC_ENABLE, 0x00011140],
      [S.PRAMIN_BASE, 0], [S.BAR1_INST, 0], [S.PFIFO_CHAN_COUNT, 16], [S.PFIFO_INTR, 0],
      [S.PFIFO_INTR_EN, 7], [S.PFIFO_RUNLIST_BASE, 0], [S.PFIFO_RUNLIST_STATUS, 0], [S.PFIFO_PREEMPT, 0],
      [S.PFIFO_FENCE_PENDING, 0], [S.PFIFO_ERR_PENDING, 0], [S.PFIFO_CHAN, 0], [S.PFIFO_CHAN_STATE, 0],
      [S.PFIFO_CHAN_ERR, 0], [S.PTIMER_TIME_1, 0], [S.DIAG_MAGIC, 0x56554750], [S.DIAG_IRQ_COUNT, 0],
      [S.PFB_PART_COUNT, 1], [S.PFB_PART_SIZE_MB, 32], [S.MMU_FLUSH_STATUS, 0x00ff8000],
      [S.MMU_FAULT_STATUS, 0], [S.PGRAPH_STATUS, 0], [S.DOORBELL, 0],
    ];
    for (const [off, v] of want) expect(e.mmioRead(off, 4), `0x${off.toString(16)}`).toBe(v);
  });

  it('ignores writes to read-only registers', () => {
    for (const off of [S.PMC_BOOT_0, S.PFIFO_CHAN_COUNT, S.PFB_PART_SIZE_MB, S.MMU_FLUSH_STATUS, S.DIAG_MAGIC,
      S.MMU_FAULT_ADDR_LO, S.PFIFO_CHAN_ERR + 8, S.PFIFO_RUNLIST_STATUS, S.DIAG_DMA_STATUS]) {
      const before = e.mmioRead(off, 4);
      e.mmioWrite(off, 4, 0xa5a5a5a5);
      expect(e.mmioRead(off, 4), `0x${off.toString(16)}`).toBe(before);
    }
  });

  it('masks unimplemented bits and keeps W1C bits until cleared', () => {
    e.mmioWrite(S.PMC_ENABLE, 4, 0xffffffff);
    expect(e.mmioRead(S.PMC_ENABLE, 4)).toBe(0x00011140);
    e.mmioWrite(S.PFIFO_INTR_EN, 4, 0xffffffff);
    expect(e.mmioRead(S.PFIFO_INTR_EN, 4)).toBe(7);
    e.mmioWrite(S.PRAMIN_BASE, 4, 0xffffffff);
    expect(e.mmioRead(S.PRAMIN_BASE, 4)).toBe(0x00ffffff);
    e.mmioWrite(S.PFIFO_CHAN_STATE, 4, 0xffffffff); // only ENABLE is writable (unbound: no busy bits)
    expect(e.mmioRead(S.PFIFO_CHAN_STATE, 4)).toBe(1);
    // A runlist error sets PFIFO_INTR bit 2 and PMC_INTR bit 2; both are W1C.
    e.mmioWrite(S.PFIFO_RUNLIST_SUBMIT, 4, 100);
    expect(e.mmioRead(S.PFIFO_INTR, 4)).toBe(4);
    expect(e.mmioRead(S.PMC_INTR, 4)).toBe(4);
    e.mmioWrite(S.PFIFO_INTR, 4, 0);
    expect(e.mmioRead(S.PFIFO_INTR, 4)).toBe(4);
    e.mmioWrite(S.PFIFO_INTR, 4, 4);
    e.mmioWrite(S.PMC_INTR, 4, 0xffffffff);
    expect(e.mmioRead(S.PFIFO_INTR, 4) | e.mmioRead(S.PMC_INTR, 4)).toBe(0);
    // With PFIFO_INTR_EN cleared, the PFIFO bit latches but PMC_INTR does not.
    e.mmioWrite(S.PFIFO_INTR_EN, 4, 0);
    e.mmioWrite(S.PFIFO_RUNLIST_SUBMIT, 4, 100);
    expect(e.mmioRead(S.PFIFO_INTR, 4)).toBe(4);
    expect(e.mmioRead(S.PMC_INTR, 4)).toBe(0);
  });

  it('channel-table entries beyond the channel count read 0 and ignore writes', () => {
    e.mmioWrite(S.PFIFO_CHAN + 8 * 20, 4, 0x80000001);
    expect(e.mmioRead(S.PFIFO_CHAN + 8 * 20, 4)).toBe(0);
    expect(e.mmioRead(S.PFIFO_CHAN_ERR + 8 * 20, 4)).toBe(0);
  });

  it('counts TLB flushes only with the GO bit', () => {
    const n = e.stats().tlbFlushes;
    e.mmioWrite(S.MMU_FLUSH_PDB, 4, 0x100);
    e.mmioWrite(S.MMU_FLUSH_TRIGGER, 4, 1);
    expect(e.stats().tlbFlushes).toBe(n);
    e.mmioWrite(S.MMU_FLUSH_TRIGGER, 4, 0x80000001);
    expect(e.stats().tlbFlushes).toBe(n + 1);
    expect(e.mmioRead(S.MMU_FLUSH_PDB, 4)).toBe(0x100);
  });

  it('reset restores the whole table', () => {
    const before = e.snapshotRegisters();
    e.mmioWrite(S.PMC_INTR_EN, 4, 3);
    e.mmioWrite(S.PRAMIN_BASE, 4, 7);
    e.mmioWrite(S.DIAG_SCRATCH0 + 12, 4, 9);
    e.reset();
    const after = e.snapshotRegisters();
    expect(after.PMC_INTR_EN).toBe(0);
    expect(after.PRAMIN_BASE).toBe(0);
    expect(after.DIAG_SCRATCH3).toBe(0);
    expect(after.PFIFO_INTR_EN).toBe(7);
    expect(Object.keys(after)).toEqual(Object.keys(before));
  });
});
