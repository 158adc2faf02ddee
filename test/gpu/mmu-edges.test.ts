// Walker edge cases the random comparison (mmu-runs.test.ts) does not reach: where page tables
// sit (misaligned, past VRAM, in system memory, a different VRAM), and the order of a pending
// system-memory run against a later fault or a PDE boundary.
import { afterAll, describe, expect, it } from 'vitest';
import { Mmu, type AddressSpace } from '../../src/gpu/mmu.ts';
import type { GpuCore } from '../../src/gpu/core.ts';
import { Vram } from '../../src/gpu/vram.ts';
import { RegionBus, type Extent } from '../../src/gpu/bus.ts';
import { native } from '../../src/native.ts';
import * as S from '../../src/gpu/spec.ts';

const TWO32 = 0x1_0000_0000;
const VRAM = 4 << 20;
const PD = 0x1000;
const PT0 = 0x10000;
const PT1 = 0x20000;
const SPAN = 2 ** S.PD_SHIFT;
const BUS = 0x80_0000_0000;
const SYS_PAGES = 16;

describe('MMU: page-table placement and sysmem run order', () => {
  const vram = new Vram(VRAM, 'mmu-edges');
  const other = new Vram(VRAM, 'mmu-edges-2');
  const sysFd = native.memfdCreate('mmu-edges-sys', SYS_PAGES * 4096);
  const sysBuf = native.mmap(sysFd, SYS_PAGES * 4096, 0);
  const sys = new DataView(sysBuf);
  const regions = new RegionBus();
  // Pages 0..7 of the bus window are mapped; 8.. are not.
  regions.add({ bus: BUS, length: 8 * 4096, fd: sysFd, offset: 0, writable: true });
  let resolves = 0;
  const bus = { resolve: (a: number, n: number, w: boolean) => (resolves++, regions.resolve(a, n, w)) };
  const core = { vram, bus } as unknown as GpuCore & { vram: Vram };
  const mmu = new Mmu(core);
  const as: AddressSpace = { pdTarget: S.TARGET_VRAM, pdAddr: PD, limit: 4 * SPAN - 1 };
  afterAll(() => {
    native.munmap(sysBuf);
    native.close(sysFd);
    other.close();
    vram.close();
  });

  const set = (v: Vram, addr: number, lo: number, hi = 0) => {
    v.dv.setUint32(addr, lo >>> 0, true);
    v.dv.setUint32(addr + 4, hi >>> 0, true);
  };
  const sysPte = (page: number): [number, number] =>
    [((BUS + page * 4096) % TWO32) | S.PTE_PRESENT | (S.TARGET_SYSMEM << S.ENTRY_TARGET_SHIFT), Math.floor(BUS / TWO32)];
  const vramPte = (addr: number): [number, number] => [addr | S.PTE_PRESENT, 0];
  /** Two PDEs (small pages) over cleared tables. */
  function tables(v: Vram = vram): void {
    v.u8.fill(0, 0, PT1 + 0x40000);
    set(v, PD, PT0 | S.PDE_PRESENT);
    set(v, PD + 8, PT1 | S.PDE_PRESENT);
  }
  const map = (v: Vram, pt: number, index: number, e: [number, number]) => set(v, pt + index * 8, e[0], e[1]);
  const run = (space: AddressSpace, va: number, len: number, write = false) => {
    const out: Extent[] = [];
    resolves = 0;
    const f = mmu.translate(space, va, len, write, out);
    return { f, out, resolves };
  };
  const fault = (reason: number, va: number, write = false) => ({ reason, va, write });
  const last = SPAN / 4096 - 1; // last PTE of a small-page table

  it('a sysmem run across a PDE boundary resolves in one call; unmapped, it faults at its page', () => {
    tables();
    map(vram, PT0, last - 1, sysPte(0));
    map(vram, PT0, last, sysPte(1));
    map(vram, PT1, 0, sysPte(2));
    map(vram, PT1, 1, sysPte(3));
    expect(run(as, SPAN - 8192, 16384)).toEqual({ f: null, out: [{ fd: sysFd, offset: 0, length: 16384 }], resolves: 1 });
    map(vram, PT1, 1, sysPte(8)); // not contiguous: a second run, unmapped
    const r = run(as, SPAN - 8192, 16384);
    expect(r.f).toEqual(fault(S.FAULT.SYSMEM_UNMAPPED, SPAN + 4096));
    expect(r.out).toEqual([{ fd: sysFd, offset: 0, length: 12288 }]);
    map(vram, PT1, 1, sysPte(7)); // continues page 6 below: one run whose end is unmapped (8)
    map(vram, PT1, 0, sysPte(6));
    map(vram, PT1, 2, sysPte(8));
    const u = run(as, SPAN, 3 * 4096);
    expect(u.f).toEqual(fault(S.FAULT.SYSMEM_UNMAPPED, SPAN + 8192));
    expect(u.out).toEqual([]);
  });

  it('a pending sysmem run resolves before a later fault or VRAM page, and faults first if unmapped', () => {
    tables();
    map(vram, PT0, 0, sysPte(0));
    // PTE 1 not present: the run (page 0) lands in out, the fault is the later page's.
    expect(run(as, 0, 8192)).toEqual({ f: fault(S.FAULT.PTE_NOT_PRESENT, 4096), out: [{ fd: sysFd, offset: 0, length: 4096 }], resolves: 1 });
    // The run's own page is unmapped: that fault wins over the later one.
    map(vram, PT0, 0, sysPte(9));
    expect(run(as, 0, 8192)).toEqual({ f: fault(S.FAULT.SYSMEM_UNMAPPED, 0), out: [], resolves: 2 });
    // A read-only page under a write, a bad PTE, VRAM out of range: same order.
    map(vram, PT0, 0, sysPte(0));
    map(vram, PT0, 1, [0x3000 | S.PTE_PRESENT | S.PTE_READ_ONLY, 0]);
    expect(run(as, 0, 8192, true).f).toEqual(fault(S.FAULT.WRITE_TO_READ_ONLY, 4096, true));
    map(vram, PT0, 1, [0x3000 | S.PTE_PRESENT | 0x40, 0]);
    expect(run(as, 0, 8192).f).toEqual(fault(S.FAULT.BAD_PTE, 4096));
    map(vram, PT0, 1, vramPte(VRAM));
    expect(run(as, 0, 8192).f).toEqual(fault(S.FAULT.VRAM_OUT_OF_RANGE, 4096));
    // A VRAM page after the run: extents in VA order.
    map(vram, PT0, 1, vramPte(0x3000));
    expect(run(as, 0, 8192)).toEqual({ f: null, out: [{ fd: sysFd, offset: 0, length: 4096 }, { fd: vram.fd, offset: 0x3000, length: 4096 }], resolves: 1 });
    // A PDE fault after a run crossing into the next region: the run resolves first.
    map(vram, PT0, last, sysPte(0));
    set(vram, PD + 8, 0);
    expect(run(as, SPAN - 4096, 8192)).toEqual({ f: fault(S.FAULT.PDE_NOT_PRESENT, SPAN), out: [{ fd: sysFd, offset: 0, length: 4096 }], resolves: 1 });
    map(vram, PT0, last, sysPte(10));
    expect(run(as, SPAN - 4096, 8192)).toEqual({ f: fault(S.FAULT.SYSMEM_UNMAPPED, SPAN - 4096), out: [], resolves: 2 });
  });

  it('page tables that are misaligned, past VRAM or malformed are BAD_PAGE_TABLE at the access page', () => {
    tables();
    map(vram, PT0, 0, vramPte(0x3000));
    map(vram, PT0, 1, vramPte(0x4000));
    expect(run(as, 0x10, 8000)).toEqual({ f: null, out: [{ fd: vram.fd, offset: 0x3010, length: 8000 }], resolves: 0 });
    expect(run({ ...as, pdAddr: PD + 4 }, 0x10, 16).f).toEqual(fault(S.FAULT.BAD_PAGE_TABLE, 0));
    expect(run({ ...as, pdAddr: VRAM - 8 }, SPAN + 0x1234, 16).f).toEqual(fault(S.FAULT.BAD_PAGE_TABLE, SPAN + 0x1000));
    expect(run({ ...as, pdAddr: VRAM + 4096 }, 0x2000, 16).f).toEqual(fault(S.FAULT.BAD_PAGE_TABLE, 0x2000));
    expect(run({ ...as, pdTarget: 1 }, 0, 16).f).toEqual(fault(S.FAULT.BAD_PAGE_TABLE, 0));
    // A PT whose entries for the range run past the end of VRAM.
    set(vram, PD, (VRAM - 4096) | S.PDE_PRESENT);
    expect(run(as, 511 * 4096 + 8, 4096).f).toEqual(fault(S.FAULT.BAD_PAGE_TABLE, 511 * 4096));
    expect(run(as, 511 * 4096 + 8, 16).f).toEqual(fault(S.FAULT.PTE_NOT_PRESENT, 511 * 4096));
    set(vram, PD, PT0 | S.PDE_PRESENT | 0x40); // reserved bit
    expect(run(as, 0, 16).f).toEqual(fault(S.FAULT.BAD_PAGE_TABLE, 0));
    set(vram, PD, PT0 | S.PDE_PRESENT | (1 << S.ENTRY_TARGET_SHIFT)); // bad target
    expect(run(as, 0, 16).f).toEqual(fault(S.FAULT.BAD_PAGE_TABLE, 0));
    set(vram, PD, PT0 | S.PDE_PRESENT, 0x100); // PT far past VRAM
    expect(run(as, 0, 16).f).toEqual(fault(S.FAULT.BAD_PAGE_TABLE, 0));
  });

  it('page tables in system memory: the walk reads them through the bus', () => {
    tables();
    // PD at bus page 0, PT at bus page 1, both in sysmem; the PTE maps VRAM.
    sys.setUint32(0, ((BUS + 4096) % TWO32) | S.PDE_PRESENT | (S.TARGET_SYSMEM << S.ENTRY_TARGET_SHIFT), true);
    sys.setUint32(4, Math.floor(BUS / TWO32), true);
    sys.setUint32(4096 + 8, 0x5000 | S.PTE_PRESENT, true);
    sys.setUint32(4096 + 12, 0, true);
    const sysAs = { pdTarget: S.TARGET_SYSMEM, pdAddr: BUS, limit: as.limit };
    expect(run(sysAs, 4096, 4096)).toEqual({ f: null, out: [{ fd: vram.fd, offset: 0x5000, length: 4096 }], resolves: 2 });
    expect(run({ ...sysAs, pdAddr: BUS + 4 }, 4096, 16).f).toEqual(fault(S.FAULT.BAD_PAGE_TABLE, 4096));
    expect(run({ ...sysAs, pdAddr: BUS + 9 * 4096 }, 4096, 16).f).toEqual(fault(S.FAULT.BAD_PAGE_TABLE, 4096));
  });

  it('reads the page tables as they are at each call, from the core\'s current VRAM', () => {
    tables();
    map(vram, PT0, 0, vramPte(0x3000));
    expect(run(as, 0, 16).out).toEqual([{ fd: vram.fd, offset: 0x3000, length: 16 }]);
    map(vram, PT0, 0, vramPte(0x7000));
    expect(run(as, 0, 16).out).toEqual([{ fd: vram.fd, offset: 0x7000, length: 16 }]);
    tables(other);
    map(other, PT0, 0, vramPte(0x9000));
    core.vram = other;
    try {
      expect(run(as, 0, 16).out).toEqual([{ fd: other.fd, offset: 0x9000, length: 16 }]);
    } finally {
      core.vram = vram;
    }
    expect(run(as, 0, 16).out).toEqual([{ fd: vram.fd, offset: 0x7000, length: 16 }]);
  });

  it('VA range checks come first and name the first bad page', () => {
    set(vram, PD, 0); // nothing mapped: only the range checks can answer
    expect(run(as, 0, 0).f).toBeNull();
    expect(run(as, -4096, 16).f).toEqual(fault(S.FAULT.VA_OUT_OF_RANGE, 0));
    expect(run(as, NaN, 16).f).toEqual(fault(S.FAULT.VA_OUT_OF_RANGE, 0));
    expect(run(as, 4 * SPAN - 8, 16, true).f).toEqual(fault(S.FAULT.VA_OUT_OF_RANGE, 4 * SPAN, true));
    expect(run(as, 5 * SPAN + 0x1234, 16).f).toEqual(fault(S.FAULT.VA_OUT_OF_RANGE, 5 * SPAN + 0x1000));
    expect(run(as, 0x1234, 16).f).toEqual(fault(S.FAULT.PDE_NOT_PRESENT, 0x1000));
  });
});

describe('MMU: page tables above 8 GiB of VRAM', () => {
  // Sparse: only the pages written below are allocated.
  const GIB = 2 ** 30;
  const vram = new Vram(10 * GIB, 'mmu-edges-big');
  const core = { vram, bus: new RegionBus() } as unknown as GpuCore;
  const mmu = new Mmu(core);
  afterAll(() => vram.close());
  const set = (addr: number, lo: number, hi: number) => {
    vram.dv.setUint32(addr, lo >>> 0, true);
    vram.dv.setUint32(addr + 4, hi >>> 0, true);
  };

  it('reads PD and PT entries there, runs included', () => {
    const pd = 8 * GIB + 0x1000;
    const pt = 8 * GIB + 0x10000;
    set(pd, (pt % TWO32) | S.PDE_PRESENT, Math.floor(pt / TWO32));
    const page = (a: number) => [(a % TWO32) | S.PTE_PRESENT, Math.floor(a / TWO32)] as const;
    for (let i = 0; i < 4; i++) set(pt + i * 8, ...page(9 * GIB + i * 4096));
    set(pt + 4 * 8, ...page(0x5000));
    const out: Extent[] = [];
    const as = { pdTarget: S.TARGET_VRAM, pdAddr: pd, limit: SPAN - 1 };
    expect(mmu.translate(as, 0x10, 5 * 4096 - 0x20, false, out)).toBeNull();
    expect(out).toEqual([{ fd: vram.fd, offset: 9 * GIB + 0x10, length: 4 * 4096 - 0x10 }, { fd: vram.fd, offset: 0x5000, length: 4096 - 0x10 }]);
    expect(mmu.translate(as, 0x2000, 5 * 4096, false, [])).toEqual({ reason: S.FAULT.PTE_NOT_PRESENT, va: 0x5000, write: false });
  });
});
