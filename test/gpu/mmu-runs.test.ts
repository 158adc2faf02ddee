// The walker's run fast path (src/gpu/mmu.ts): PTEs that continue each other are taken as one
// extent and bounds-checked once. Held here to the page-by-page walk over random page tables —
// contiguous runs broken by flag changes, gaps, non-present and reserved entries, read-only
// pages under writes, system-memory pages, large pages, runs that leave VRAM — with the same
// extents and the same fault (reason and VA) for every range.
import { afterAll, describe, expect, it } from 'vitest';
import { Mmu, isSysmem, type AddressSpace } from '../../src/gpu/mmu.ts';
import type { GpuCore, Fault } from '../../src/gpu/core.ts';
import { Vram } from '../../src/gpu/vram.ts';
import { RegionBus, pushExtent, type Extent } from '../../src/gpu/bus.ts';
import { native } from '../../src/native.ts';
import * as S from '../../src/gpu/spec.ts';
import { Prng } from '../prng.ts';

const TWO32 = 0x1_0000_0000;
const VRAM = 8 << 20;
const PD_ADDR = 0x10000;
const PT_BASE = 0x20000; // one page table per PDE, 256 KiB apart (room for 32768 entries)
const PDES = 4;
const BUS = 0x80_0000_0000;
const SYS_PAGES = 64;

/** The walk before the fast path, one PTE at a time: the oracle. */
function walk(mmu: Mmu, core: GpuCore, as: AddressSpace, va: number, length: number, write: boolean, out: Extent[]): Fault | null {
  const vram = core.vram;
  const page4k = (v: number) => v - (v % S.SMALL_PAGE);
  const entries = (target: number, addr: number, count: number): Uint32Array | null => {
    if (target !== S.TARGET_VRAM || !vram.contains(addr, count * 8)) return null;
    return new Uint32Array(vram.u8.buffer, vram.u8.byteOffset + addr, count * 2);
  };
  const end = va + length - 1;
  if (end > Math.min(S.VA_LIMIT - 1, as.limit)) throw new Error('test ranges stay below the limit');
  let cur = va;
  while (cur <= end) {
    const span = 2 ** S.PD_SHIFT;
    const pdi = Math.floor(cur / span);
    const pde = entries(as.pdTarget, as.pdAddr + pdi * 8, 1)!;
    const lo0 = pde[0]!;
    if ((lo0 & S.PDE_PRESENT) === 0) return { reason: S.FAULT.PDE_NOT_PRESENT, va: page4k(cur), write };
    const large = (lo0 & S.PDE_LARGE) !== 0;
    const pageSize = large ? S.LARGE_PAGE : S.SMALL_PAGE;
    const ptAddr = ((lo0 & 0xfffff000) >>> 0) + pde[1]! * TWO32;
    const base = pdi * span;
    const regionEnd = Math.min(end, base + span - 1);
    for (let p = Math.floor((cur - base) / pageSize); base + p * pageSize <= regionEnd; p++) {
      const pageVa = base + p * pageSize;
      const e = entries(S.TARGET_VRAM, ptAddr + p * 8, 1)!;
      const lo = e[0]!, hi = e[1]!;
      const from = Math.max(cur, pageVa);
      const failVa = page4k(from);
      if ((lo & S.PTE_PRESENT) === 0) return { reason: S.FAULT.PTE_NOT_PRESENT, va: failVa, write };
      const target = (lo >>> S.ENTRY_TARGET_SHIFT) & 3;
      const addrLo = (lo & 0xfffff000) >>> 0;
      if ((lo & S.PTE_RESERVED) !== 0 || target === 1 || (large && (addrLo & (S.LARGE_PAGE - 1)) !== 0)) return { reason: S.FAULT.BAD_PTE, va: failVa, write };
      if (write && (lo & S.PTE_READ_ONLY) !== 0) return { reason: S.FAULT.WRITE_TO_READ_ONLY, va: failVa, write };
      const n = Math.min(regionEnd, pageVa + pageSize - 1) - from + 1;
      const phys = addrLo + hi * TWO32 + (from - pageVa);
      if (target === S.TARGET_VRAM) {
        if (!vram.contains(phys, n)) return { reason: S.FAULT.VRAM_OUT_OF_RANGE, va: failVa, write };
        pushExtent(out, vram.fd, phys, n);
      } else {
        if (!isSysmem(target)) return { reason: S.FAULT.SYSMEM_UNMAPPED, va: failVa, write };
        // System memory resolves by 4 KiB piece: a large page names the piece that is unmapped.
        for (let off = 0; off < n;) {
          const m = Math.min(n - off, S.SMALL_PAGE - ((from + off) % S.SMALL_PAGE));
          const ext = core.bus.resolve(phys + off, m, write);
          if (!ext) return { reason: S.FAULT.SYSMEM_UNMAPPED, va: page4k(from + off), write };
          for (const x of ext) pushExtent(out, x.fd, x.offset, x.length);
          off += m;
        }
      }
    }
    cur = regionEnd + 1;
  }
  void mmu;
  return null;
}

describe('MMU: runs of continuing PTEs', () => {
  const vram = new Vram(VRAM, 'mmu-runs');
  const sysFd = native.memfdCreate('mmu-runs-sys', SYS_PAGES * 4096);
  const bus = new RegionBus();
  // Two bus regions with a hole between them: a sysmem run that crosses it is unmapped.
  bus.add({ bus: BUS, length: 24 * 4096, fd: sysFd, offset: 0, writable: true });
  bus.add({ bus: BUS + 32 * 4096, length: 32 * 4096, fd: sysFd, offset: 32 * 4096, writable: false });
  const core = { vram, bus } as unknown as GpuCore;
  const mmu = new Mmu(core);
  const as: AddressSpace = { pdTarget: S.TARGET_VRAM, pdAddr: PD_ADDR, limit: PDES * 2 ** S.PD_SHIFT - 1 };
  afterAll(() => native.close(sysFd));

  const set = (addr: number, lo: number, hi: number) => {
    vram.dv.setUint32(addr, lo >>> 0, true);
    vram.dv.setUint32(addr + 4, hi >>> 0, true);
  };

  /** A random table: runs of continuing entries, with the breaks a hostile guest could write. */
  function fill(rng: Prng): void {
    vram.u8.fill(0, PD_ADDR, PT_BASE + PDES * 0x40000);
    for (let d = 0; d < PDES; d++) {
      const large = rng.chance(0.25);
      const pt = PT_BASE + d * 0x40000;
      set(PD_ADDR + d * 8, rng.chance(0.05) ? 0 : pt | S.PDE_PRESENT | (large ? S.PDE_LARGE : 0), 0);
      const pageSize = large ? S.LARGE_PAGE : S.SMALL_PAGE;
      const count = large ? 1024 : 2048; // the walk never goes past these in a region (ranges below)
      let i = 0;
      while (i < count) {
        const run = 1 + rng.int(rng.chance(0.5) ? 400 : 8);
        const kind = rng.int(21);
        let flags = S.PTE_PRESENT;
        let addr: number;
        let hi = 0;
        if (kind < 12) { // VRAM; some runs start near (or past) the end of VRAM
          addr = rng.chance(0.15) ? VRAM - rng.int(6) * pageSize : rng.int(VRAM / pageSize) * pageSize;
          if (rng.chance(0.1)) flags |= S.PTE_READ_ONLY;
        } else if (kind < 16) { // system memory across the two regions and the hole
          addr = BUS % TWO32 + rng.int(SYS_PAGES) * S.SMALL_PAGE;
          hi = Math.floor(BUS / TWO32);
          flags |= (rng.chance(0.5) ? S.TARGET_SYSMEM : S.TARGET_SYSMEM_NC) << S.ENTRY_TARGET_SHIFT;
        } else if (kind === 16) { flags = 0; addr = 0; } // not present
        else if (kind === 17) { addr = rng.int(VRAM / pageSize) * pageSize; flags |= 1 << S.ENTRY_TARGET_SHIFT; } // bad target
        else if (kind === 18) { addr = rng.int(VRAM / pageSize) * pageSize; flags |= 0x40; } // reserved bit
        else if (kind === 19) { addr = 0xffff_f000 - rng.int(4) * pageSize; } // the low word carries into hi
        else { addr = rng.int(VRAM / pageSize) * pageSize; } // low words continue, the high word does not (below)
        if (large && rng.chance(0.1)) addr += S.SMALL_PAGE; // misaligned large page
        for (let k = 0; k < run && i < count; k++, i++) {
          const a = addr + k * pageSize;
          const flip = kind === 20 && rng.chance(0.3) ? 1 : 0;
          set(pt + i * 8, ((a % TWO32) | flags) >>> 0, hi + flip + Math.floor(a / TWO32));
        }
      }
    }
  }

  it('gives the page-by-page walk\'s extents and faults over random tables and ranges', () => {
    const rng = new Prng(0x5eed_0013);
    let compared = 0, faults = 0, multi = 0;
    for (let t = 0; t < 120; t++) {
      fill(rng);
      for (let q = 0; q < 200; q++) {
        const span = 2 ** S.PD_SHIFT;
        const pdi = rng.int(PDES);
        // Mostly inside the filled entries (8 MiB of small pages), some across into the next region.
        const va = pdi * span + (rng.chance(0.15) ? span - 1 - rng.int(1 << 20) : rng.int(9 << 20));
        const len = 1 + rng.int(rng.chance(0.3) ? 8 << 20 : 64 << 10);
        if (va + len > PDES * span) continue;
        const write = rng.chance(0.5);
        const got: Extent[] = [], want: Extent[] = [];
        const f = mmu.translate(as, va, len, write, got);
        const g = walk(mmu, core, as, va, len, write, want);
        expect(f, `va 0x${va.toString(16)} len ${len} write ${write} (table ${t})`).toEqual(g);
        if (!g) expect(got).toEqual(want);
        compared++;
        if (g) faults++;
        else if (want.length > 1) multi++;
      }
    }
    // Both outcomes must have been exercised, or the comparison proves little.
    expect(compared).toBeGreaterThan(8000);
    expect(faults).toBeGreaterThan(1000);
    expect(compared - faults).toBeGreaterThan(1000);
    expect(multi).toBeGreaterThan(100);
  });

  it('a contiguous 12 MiB mapping is one extent', () => {
    vram.u8.fill(0, PD_ADDR, PT_BASE + PDES * 0x40000);
    set(PD_ADDR, PT_BASE | S.PDE_PRESENT, 0);
    for (let i = 0; i < 1536; i++) set(PT_BASE + i * 8, (0x100000 + i * 4096) | S.PTE_PRESENT, 0);
    const out: Extent[] = [];
    expect(mmu.translate(as, 4096, 1535 * 4096 - 100, true, out)).toBeNull();
    expect(out).toEqual([{ fd: vram.fd, offset: 0x101000, length: 1535 * 4096 - 100 }]);
  });
});
