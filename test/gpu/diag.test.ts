// PDIAG, PMC_BOOT_0, PRAMIN and interrupt delivery through Engine.mmioRead/mmioWrite, with a
// real memfd as "system memory" behind the bus resolver.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { Engine } from '../../src/gpu/engine.ts';
import { RegionBus } from '../../src/gpu/bus.ts';
import { fnv1a } from '../../src/gpu/diag.ts';
import * as S from '../../src/gpu/spec.ts';

const SYS_BUS = 0x1_0000_0000; // bus address of the test "system memory"
const SYS_SIZE = 2 << 20;

describe('PDIAG and PMC through mmio', () => {
  let e: Engine;
  let sysFd: number;
  let sys: Uint8Array;
  let sysBuf: ArrayBuffer;
  const vectors: number[] = [];

  beforeAll(() => {
    sysFd = native.memfdCreate('test-sysmem', SYS_SIZE);
    sysBuf = native.mmap(sysFd, SYS_SIZE, 0);
    sys = new Uint8Array(sysBuf);
    const bus = new RegionBus();
    // Only the first MiB is mapped: the second is "guard" memory the device must not touch.
    bus.add({ bus: SYS_BUS, length: 1 << 20, fd: sysFd, offset: 0, writable: true });
    e = new Engine({ vramSize: 16 << 20, channels: 4, bus, onInterrupt: (v) => vectors.push(v) });
  });
  afterAll(() => {
    e.close();
    native.munmap(sysBuf);
    native.close(sysFd);
  });

  it('identifies itself', () => {
    expect(e.mmioRead(S.PMC_BOOT_0, 4)).toBe(0x0c0000a1);
    expect(e.mmioRead(S.DIAG_MAGIC, 4)).toBe(0x56554750);
    expect(e.mmioRead(S.DIAG_MAGIC, 1)).toBe(0x50);
    expect(e.mmioRead(S.DIAG_MAGIC + 2, 2)).toBe(0x5655);
    expect(e.mmioRead(S.PMC_BOOT_0, 8)).toBe(0x0c0000a1n);
    e.mmioWrite(S.PMC_BOOT_0, 4, 0x12345678); // read-only
    expect(e.mmioRead(S.PMC_BOOT_0, 4)).toBe(0x0c0000a1);
    expect(e.mmioRead(S.PFB_PART_SIZE_MB, 4) * e.mmioRead(S.PFB_PART_COUNT, 4)).toBe(16);
  });

  it('reads 0 and ignores writes at unimplemented offsets', () => {
    e.mmioWrite(0x123450, 4, 0xdeadbeef);
    expect(e.mmioRead(0x123450, 4)).toBe(0);
    expect(e.mmioRead(S.PV_MAGIC, 4)).toBe(0); // PV exists only when mediated
  });

  it('keeps scratch registers, with narrow and 64-bit accesses', () => {
    e.mmioWrite(S.DIAG_SCRATCH0, 4, 0x11223344);
    e.mmioWrite(S.DIAG_SCRATCH0 + 1, 1, 0xaa);
    expect(e.mmioRead(S.DIAG_SCRATCH0, 4)).toBe(0x1122aa44);
    e.mmioWrite(S.DIAG_SCRATCH0 + 4, 8, 0x0102030405060708n);
    expect(e.mmioRead(S.DIAG_SCRATCH0 + 4, 4)).toBe(0x05060708);
    expect(e.mmioRead(S.DIAG_SCRATCH0 + 8, 4)).toBe(0x01020304);
  });

  it('DMA sysmem→VRAM and back, with the FNV of the moved bytes', () => {
    const len = 64 * 1024 + 3;
    for (let i = 0; i < len; i++) sys[i] = (i * 7 + 1) & 0xff;
    e.mmioWrite(S.DIAG_DMA_ADDR_LO, 4, SYS_BUS % 2 ** 32);
    e.mmioWrite(S.DIAG_DMA_ADDR_HI, 4, Math.floor(SYS_BUS / 2 ** 32));
    e.mmioWrite(S.DIAG_DMA_LEN, 4, len);
    e.mmioWrite(S.DIAG_DMA_VRAM_OFF, 4, 0x10000);
    e.mmioWrite(S.DIAG_DMA_CTRL, 4, 1);
    expect(e.mmioRead(S.DIAG_DMA_STATUS, 4)).toBe(1);
    expect(e.mmioRead(S.DIAG_DMA_FNV, 4)).toBe(fnv1a(sys.subarray(0, len)));
    expect(Buffer.compare(e.vram.u8.subarray(0x10000, 0x10000 + len), sys.subarray(0, len))).toBe(0);

    e.vram.u8.fill(0x5a, 0x10000, 0x10000 + len);
    e.mmioWrite(S.DIAG_DMA_CTRL, 4, 2);
    expect(e.mmioRead(S.DIAG_DMA_STATUS, 4)).toBe(1);
    expect(sys[0]).toBe(0x5a);
    expect(sys[len - 1]).toBe(0x5a);
    expect(sys[len]).not.toBe(0x5a);
  });

  it('DMA to an unmapped bus address fails with EFAULT and touches nothing', () => {
    sys.fill(0x33, 1 << 20, 2 << 20); // guard (not in the resolver)
    e.mmioWrite(S.DIAG_DMA_ADDR_LO, 4, (SYS_BUS + (1 << 20) - 4096) % 2 ** 32);
    e.mmioWrite(S.DIAG_DMA_LEN, 4, 8192); // runs past the mapped MiB
    e.mmioWrite(S.DIAG_DMA_CTRL, 4, 2);
    expect(e.mmioRead(S.DIAG_DMA_STATUS, 4)).toBe(2);
    expect(e.mmioRead(S.DIAG_DMA_ERROR, 4)).toBe(14);
    expect(sys.subarray(1 << 20).every((b) => b === 0x33)).toBe(true);
    e.mmioWrite(S.DIAG_DMA_LEN, 4, 0);
    e.mmioWrite(S.DIAG_DMA_CTRL, 4, 1);
    expect(e.mmioRead(S.DIAG_DMA_ERROR, 4)).toBe(22);
    e.mmioWrite(S.DIAG_DMA_LEN, 4, 16);
    e.mmioWrite(S.DIAG_DMA_VRAM_OFF, 4, (16 << 20) - 8); // past VRAM end
    e.mmioWrite(S.DIAG_DMA_CTRL, 4, 1);
    expect(e.mmioRead(S.DIAG_DMA_ERROR, 4)).toBe(22);
  });

  it('peeks and pokes VRAM, and the PRAMIN window shows the same bytes', () => {
    e.mmioWrite(S.DIAG_VRAM_OFF, 4, 0x230000 + 0x40);
    e.mmioWrite(S.DIAG_VRAM_POKE, 4, 0xcafef00d);
    expect(e.mmioRead(S.DIAG_VRAM_PEEK, 4)).toBe(0xcafef00d);
    e.mmioWrite(S.PRAMIN_BASE, 4, 0x23); // window at VRAM 0x230000
    expect(e.mmioRead(S.PRAMIN_WINDOW + 0x40, 4)).toBe(0xcafef00d);
    e.mmioWrite(S.PRAMIN_WINDOW + 0x44, 8, 0x1122334455667788n);
    expect(e.vram.read32(0x230044)).toBe(0x55667788);
    expect(e.mmioRead(S.PRAMIN_WINDOW + 0x48, 2)).toBe(0x3344);
    e.mmioWrite(S.PRAMIN_BASE, 4, 0x1000); // beyond 16 MiB VRAM: reads 0, writes ignored
    e.mmioWrite(S.PRAMIN_WINDOW, 4, 1);
    expect(e.mmioRead(S.PRAMIN_WINDOW, 4)).toBe(0);
    e.mmioWrite(S.DIAG_VRAM_OFF, 4, 0x41); // misaligned
    expect(e.mmioRead(S.DIAG_VRAM_PEEK, 4)).toBe(0);
  });

  it('fires interrupts only when enabled, PMC_INTR is W1C, enabling a pending bit delivers once', () => {
    vectors.length = 0;
    e.mmioWrite(S.DIAG_IRQ_FIRE, 4, 3);
    expect(vectors).toEqual([]);
    expect(e.mmioRead(S.PMC_INTR, 4)).toBe(8);
    e.mmioWrite(S.PMC_INTR_EN, 4, 0xffffffff);
    expect(e.mmioRead(S.PMC_INTR_EN, 4)).toBe(0xf);
    expect(vectors).toEqual([3]);
    e.mmioWrite(S.DIAG_IRQ_FIRE, 4, 3);
    e.mmioWrite(S.DIAG_IRQ_FIRE, 4, 1);
    e.mmioWrite(S.DIAG_IRQ_FIRE, 4, 9); // invalid vector: ignored
    expect(vectors).toEqual([3, 3, 1]);
    expect(e.mmioRead(S.DIAG_IRQ_COUNT, 4)).toBe(3);
    e.mmioWrite(S.PMC_INTR, 4, 0x8); // W1C
    expect(e.mmioRead(S.PMC_INTR, 4)).toBe(0x2);
    e.mmioWrite(S.PMC_INTR, 4, 0); // writing 0 clears nothing
    expect(e.mmioRead(S.PMC_INTR, 4)).toBe(0x2);
  });

  it('PTIMER counts nanoseconds with the TIME_0 latch', async () => {
    const t0 = e.mmioRead(S.PTIMER_TIME_0, 4) + e.mmioRead(S.PTIMER_TIME_1, 4) * 2 ** 32;
    await new Promise((r) => setTimeout(r, 20));
    const t1 = e.mmioRead(S.PTIMER_TIME_0, 4) + e.mmioRead(S.PTIMER_TIME_1, 4) * 2 ** 32;
    expect(t1 - t0).toBeGreaterThan(15e6);
    expect(t1 - t0).toBeLessThan(5e9);
  });

  it('reset restores every register', () => {
    e.mmioWrite(S.DIAG_SCRATCH0, 4, 5);
    e.reset();
    expect(e.mmioRead(S.DIAG_SCRATCH0, 4)).toBe(0);
    expect(e.mmioRead(S.PMC_INTR_EN, 4)).toBe(0);
    expect(e.mmioRead(S.DIAG_IRQ_COUNT, 4)).toBe(0);
    expect(e.mmioRead(S.PMC_ENABLE, 4)).toBe(0x00011140);
  });
});
