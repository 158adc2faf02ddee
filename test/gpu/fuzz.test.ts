// Hostile input never crashes the engine: random pushbuffers (biased towards real methods and
// classes) and random writes to every BAR0 register end in a result or a channel error, never
// an exception, and the engine keeps serving a well-behaved channel afterwards.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import { header } from '../support/host-driver/pushbuf.ts';
import * as S from '../../src/gpu/spec.ts';
import { rig, rng, type Rig } from './helpers.ts';

describe('fuzz', () => {
  let r: Rig;
  const rand = rng(99);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  beforeAll(() => {
    r = rig({ vramSize: 64 << 20, channels: 16, watchdogMs: 500 });
  });
  afterAll(() => r.close());

  it('random pushbuffers end in completion or a channel error', async () => {
    const methods = [...Object.values(S.HOST), ...Object.values(S.COPY), ...Object.values(S.COMPUTE).filter((v) => v > 0x100), 0x404, 0x410, 0x41c, 0x44];
    const vas = [r.ch.semVa, r.ch.pbVa, 0, 2 ** 40 - 4, 0x1_0000_0000];
    let errors = 0, ok = 0;
    for (let iter = 0; iter < 150; iter++) {
      const ch = r.drv.createChannel(r.vm);
      const words: number[] = [];
      const n = 1 + Math.floor(rand() * 12);
      for (let i = 0; i < n; i++) {
        const op = pick([1, 1, 1, 3, 4, 5, 0, 2, 6, 7]);
        const count = op === 4 ? Math.floor(rand() * 0x2000) : Math.floor(rand() * 4);
        words.push(header(op, count, pick([0, 1, 4, 2]), pick(methods)));
        if (op !== 4) for (let j = 0; j < count; j++) {
          const va = pick(vas);
          words.push(pick([0, 1, 2, 0x90b5, 0x90c0, K.NOP, K.MEMSET, va % 2 ** 32, Math.floor(va / 2 ** 32), (rand() * 2 ** 32) >>> 0]));
        }
      }
      try {
        ch.submit(Uint32Array.from(words));
        await ch.fence();
        ok++;
      } catch (e) {
        expect(String(e)).toMatch(/channel \d+ stopped/);
        errors++;
      }
      r.drv.destroyChannel(ch);
    }
    expect(errors).toBeGreaterThan(10);
    await r.ch.launch(K.NOP, []);
    void ok;
  });

  it('random values written to every register never throw', async () => {
    const offsets = r.engine.regs.infos.map((i) => i.addr).filter((a) => a !== S.PMC_ENABLE);
    for (let k = 0; k < 3; k++) {
      for (const off of offsets) {
        if (off >= S.PFIFO_CHAN && off < S.PFIFO_CHAN + 8 * 16 && (off - S.PFIFO_CHAN) / 8 === r.ch.chid) continue;
        r.engine.mmioWrite(off, 4, (rand() * 2 ** 32) >>> 0);
        r.engine.mmioRead(off, pick([1, 2, 4, 8] as const));
      }
    }
    for (let k = 0; k < 2000; k++) r.engine.mmioWrite(Math.floor(rand() * S.BAR0_SIZE) & ~3, 4, (rand() * 2 ** 32) >>> 0);
    // The driver's channel may have been disturbed by runlist/enable writes: restore and use it.
    r.drv.wr(S.PMC_ENABLE, S.PMC_ENABLE_RESET);
    r.drv.wr(S.PMC_INTR_EN, 0xf);
    r.drv.wr(S.PFIFO_INTR_EN, 7);
    r.ch.bind();
    r.drv.createChannel(r.vm); // resubmits the driver's runlist
    await r.ch.launch(K.NOP, []);
  }, 20_000);
});
