// BAR0 names for traces: the engine's register table (every RegisterFile row) plus the ranges
// and aggregator-only registers it does not hold. The recorder writes these into the trace
// header, so `vugpu trace summary` names offsets without the vugpu source at hand.
import {
  MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET, MSIX_VECTORS, PRAMIN_WINDOW, PRAMIN_WINDOW_SIZE,
  PV_AREA_HI, PV_AREA_LO, PV_AREA_SLOTS, PV_CALL, PV_MAGIC, PV_STATUS, PV_VERSION,
} from '../gpu/spec.ts';
import type { RegisterName } from './schema.ts';

/** Not in the engine's RegisterFile: windows and tables (size > 4), and the PV page (the
 * aggregator's register view implements it). */
const EXTRA: readonly RegisterName[] = [
  { offset: PRAMIN_WINDOW, name: 'PRAMIN', size: PRAMIN_WINDOW_SIZE },
  { offset: MSIX_TABLE_OFFSET, name: 'MSIX_TABLE', size: 16 * MSIX_VECTORS },
  { offset: MSIX_PBA_OFFSET, name: 'MSIX_PBA', size: 8 },
  { offset: PV_MAGIC, name: 'PV_MAGIC', size: 4 },
  { offset: PV_VERSION, name: 'PV_VERSION', size: 4 },
  { offset: PV_AREA_LO, name: 'PV_AREA_LO', size: 4 },
  { offset: PV_AREA_HI, name: 'PV_AREA_HI', size: 4 },
  { offset: PV_AREA_SLOTS, name: 'PV_AREA_SLOTS', size: 4 },
  { offset: PV_CALL, name: 'PV_CALL', size: 4 },
  { offset: PV_STATUS, name: 'PV_STATUS', size: 4 },
];

/** The name table for a trace header, from a register file (`engine.regs`). */
export function registerNames(regs?: { infos: readonly { addr: number; name: string }[] }): RegisterName[] {
  const out: RegisterName[] = (regs?.infos ?? []).map((r) => ({ offset: r.addr, name: r.name, size: 4 }));
  const named = new Set(out.map((r) => r.offset));
  for (const e of EXTRA) if (!named.has(e.offset)) out.push({ ...e });
  return out;
}

/** offset → display name: a register's name, "RANGE+0x10" inside a range, else hex. */
export class NameTable {
  private readonly exact = new Map<number, string>();
  private readonly ranges: RegisterName[];

  constructor(names: readonly RegisterName[]) {
    for (const n of names) if ((n.size ?? 0) <= 4) this.exact.set(n.offset, n.name);
    this.ranges = names.filter((n) => (n.size ?? 0) > 4).sort((x, y) => x.offset - y.offset);
  }

  name(offset: number): string | undefined {
    const e = this.exact.get(offset);
    if (e !== undefined) return e;
    for (const r of this.ranges) {
      if (offset >= r.offset && offset < r.offset + r.size!) {
        return offset === r.offset ? r.name : `${r.name}+0x${(offset - r.offset).toString(16)}`;
      }
    }
    return undefined;
  }
}
