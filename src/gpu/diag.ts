// PDIAG (docs/diag-block.md): scratch registers, a synchronous DMA loopback between system
// memory (through the bus resolver) and VRAM with an FNV-1a hash of the moved bytes, VRAM
// peek/poke, and an interrupt test.
import type { RegisterInfo } from './regs.ts';
import type { GpuCore } from './core.ts';
import { readExtents, writeExtents } from './bus.ts';
import {
  DIAG_DMA_ADDR_HI, DIAG_DMA_ADDR_LO, DIAG_DMA_CTRL, DIAG_DMA_ERROR, DIAG_DMA_FNV, DIAG_DMA_LEN,
  DIAG_DMA_MAX, DIAG_DMA_STATUS, DIAG_DMA_VRAM_OFF, DIAG_IRQ_COUNT, DIAG_IRQ_FIRE, DIAG_MAGIC,
  DIAG_MAGIC_VALUE, DIAG_SCRATCH0, DIAG_VRAM_OFF, DIAG_VRAM_PEEK, DIAG_VRAM_POKE, MSIX_VECTORS, EFAULT, EINVAL, EIO,
} from './spec.ts';

const RO = 0xffffffff;

export function fnv1a(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) {
    h ^= bytes[i]!;
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

export function diagRegisters(core: GpuCore): RegisterInfo[] {
  const r = () => core.regs;

  function dma(ctrl: number): void {
    const regs = r();
    const fail = (errno: number) => {
      regs.set(DIAG_DMA_STATUS, 2);
      regs.set(DIAG_DMA_ERROR, errno);
    };
    const len = regs.get(DIAG_DMA_LEN);
    const off = regs.get(DIAG_DMA_VRAM_OFF);
    const bus = regs.get(DIAG_DMA_ADDR_LO) + regs.get(DIAG_DMA_ADDR_HI) * 0x1_0000_0000;
    if ((ctrl !== 1 && ctrl !== 2) || len === 0 || len > DIAG_DMA_MAX || !core.vram.contains(off, len)) {
      return fail(EINVAL);
    }
    const toVram = ctrl === 1;
    const extents = core.bus.resolve(bus, len, !toVram);
    if (!extents) return fail(EFAULT);
    const view = core.vram.u8.subarray(off, off + len);
    let ok: boolean;
    if (toVram) {
      // Read into a staging copy first so a failed read leaves VRAM untouched.
      const tmp = new Uint8Array(len);
      ok = readExtents(core.vram, extents, tmp);
      if (ok) view.set(tmp);
    } else {
      ok = writeExtents(core.vram, extents, view);
    }
    if (!ok) return fail(EIO);
    regs.set(DIAG_DMA_FNV, fnv1a(view));
    regs.set(DIAG_DMA_ERROR, 0);
    regs.set(DIAG_DMA_STATUS, 1);
  }

  const peekAddr = (): number | null => {
    const off = r().get(DIAG_VRAM_OFF);
    return (off & 3) === 0 && core.vram.contains(off, 4) ? off : null;
  };

  const scratch: RegisterInfo[] = [];
  for (let i = 0; i < 8; i++) scratch.push({ addr: DIAG_SCRATCH0 + 4 * i, name: `DIAG_SCRATCH${i}`, reset: 0 });

  return [
    { addr: DIAG_MAGIC, name: 'DIAG_MAGIC', reset: DIAG_MAGIC_VALUE, ro: RO },
    ...scratch,
    { addr: DIAG_DMA_ADDR_LO, name: 'DIAG_DMA_ADDR_LO', reset: 0 },
    { addr: DIAG_DMA_ADDR_HI, name: 'DIAG_DMA_ADDR_HI', reset: 0 },
    { addr: DIAG_DMA_LEN, name: 'DIAG_DMA_LEN', reset: 0 },
    { addr: DIAG_DMA_VRAM_OFF, name: 'DIAG_DMA_VRAM_OFF', reset: 0 },
    { addr: DIAG_DMA_CTRL, name: 'DIAG_DMA_CTRL', reset: 0, ro: RO, postWrite: (_s, w) => dma(w) },
    { addr: DIAG_DMA_STATUS, name: 'DIAG_DMA_STATUS', reset: 0, ro: RO },
    { addr: DIAG_DMA_ERROR, name: 'DIAG_DMA_ERROR', reset: 0, ro: RO },
    { addr: DIAG_DMA_FNV, name: 'DIAG_DMA_FNV', reset: 0, ro: RO },
    { addr: DIAG_VRAM_OFF, name: 'DIAG_VRAM_OFF', reset: 0 },
    {
      addr: DIAG_VRAM_PEEK, name: 'DIAG_VRAM_PEEK', reset: 0, ro: RO,
      postRead: () => {
        const a = peekAddr();
        return a === null ? 0 : core.vram.read32(a);
      },
    },
    {
      addr: DIAG_VRAM_POKE, name: 'DIAG_VRAM_POKE', reset: 0, ro: RO,
      postWrite: (_s, w) => {
        const a = peekAddr();
        if (a !== null) {
          core.vram.write32(a, w);
          core.vram.written?.(a, 4);
        }
      },
    },
    {
      addr: DIAG_IRQ_FIRE, name: 'DIAG_IRQ_FIRE', reset: 0, ro: RO,
      postWrite: (_s, w) => {
        if (w >= MSIX_VECTORS) return;
        r().set(DIAG_IRQ_COUNT, (r().get(DIAG_IRQ_COUNT) + 1) >>> 0);
        core.irq.raise(w);
      },
    },
    { addr: DIAG_IRQ_COUNT, name: 'DIAG_IRQ_COUNT', reset: 0, ro: RO },
  ];
}
