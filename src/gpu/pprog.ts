// PPROG (hw-spec §3.10): the program limits, read-only, as a GPU reports its limits. All zero
// (PROG_VERSION 0) when the engine has no program device; otherwise the backend's limits,
// already clamped to vugpu's envelope.
import type { RegisterInfo } from './regs.ts';
import type { ProgramLimits } from './programs.ts';
import { PPROG, PROG_VERSION_1_1 } from './spec.ts';

const RO = 0xffffffff;

export function pprogRegisters(limits: () => ProgramLimits | null): RegisterInfo[] {
  const field = (addr: number, name: string, get: (l: ProgramLimits) => number): RegisterInfo => ({
    addr, name, reset: 0, ro: RO,
    postRead: () => {
      const l = limits();
      return l ? get(l) >>> 0 : 0;
    },
  });
  return [
    field(PPROG.VERSION, 'PROG_VERSION', () => PROG_VERSION_1_1),
    field(PPROG.MAX_MODULE_BYTES, 'PROG_MAX_MODULE_BYTES', (l) => l.maxModuleBytes),
    field(PPROG.MAX_BINDINGS, 'PROG_MAX_BINDINGS', (l) => l.maxBindings),
    field(PPROG.MAX_PUSH_BYTES, 'PROG_MAX_PUSH_BYTES', (l) => l.maxPushBytes),
    field(PPROG.MAX_SPEC_CONSTANTS, 'PROG_MAX_SPEC_CONSTANTS', (l) => l.maxSpecConstants),
    field(PPROG.MAX_WG_INVOCATIONS, 'PROG_MAX_WG_INVOCATIONS', (l) => l.maxWgInvocations),
    field(PPROG.MAX_WG_SIZE_X, 'PROG_MAX_WG_SIZE_X', (l) => l.maxWgSize[0]),
    field(PPROG.MAX_WG_SIZE_Y, 'PROG_MAX_WG_SIZE_Y', (l) => l.maxWgSize[1]),
    field(PPROG.MAX_WG_SIZE_Z, 'PROG_MAX_WG_SIZE_Z', (l) => l.maxWgSize[2]),
    field(PPROG.MAX_SHARED_BYTES, 'PROG_MAX_SHARED_BYTES', (l) => l.maxSharedBytes),
    field(PPROG.MAX_GRID_X, 'PROG_MAX_GRID_X', (l) => l.maxGrid[0]),
    field(PPROG.MAX_GRID_Y, 'PROG_MAX_GRID_Y', (l) => l.maxGrid[1]),
    field(PPROG.MAX_GRID_Z, 'PROG_MAX_GRID_Z', (l) => l.maxGrid[2]),
    field(PPROG.MAX_BUFFER_BYTES, 'PROG_MAX_BUFFER_BYTES', (l) => l.maxBufferBytes),
    field(PPROG.BUFFER_ALIGN, 'PROG_BUFFER_ALIGN', (l) => l.bufferAlign),
    field(PPROG.SUBGROUP_SIZE, 'PROG_SUBGROUP_SIZE', (l) => l.subgroupSize),
    field(PPROG.MAX_LOOP_ITERATIONS, 'PROG_MAX_LOOP_ITERATIONS', (l) => l.loopLimit),
    field(PPROG.FEATURES, 'PROG_FEATURES', (l) => l.features),
  ];
}
