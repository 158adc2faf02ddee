// Constants of docs/hw-spec.md: register offsets, bit fields, codes and formats. The engine,
// the host driver and the aggregator all import these, so the spec has one TypeScript spelling.

// ---- §1 PCI identity ----
export const PCI_VENDOR_ID = 0x1de5;
export const PCI_DEVICE_ID = 0x6b75;
export const PCI_CLASS = 0x030200;
export const BAR0_SIZE = 16 << 20;
export const MSIX_VECTORS = 4;
export const MSIX_TABLE_OFFSET = 0xff0000;
export const MSIX_PBA_OFFSET = 0xff8000;

// ---- §2 interrupt sources = PMC_INTR bits = MSI-X vectors ----
export const IRQ_FIFO = 0;
export const IRQ_MMU_FAULT = 1;
export const IRQ_CHAN_ERROR = 2;
export const IRQ_DIAG = 3;

// ---- §3 BAR0 registers ----
export const PMC_BOOT_0 = 0x000000;
export const PMC_BOOT_0_VALUE = 0x0c0000a1;
export const PMC_INTR = 0x000100;
export const PMC_INTR_EN = 0x000140;
export const PMC_ENABLE = 0x000200;
export const PMC_ENABLE_RESET = 0x00011140;
export const PMC_ENABLE_PFIFO = 1 << 8;

export const PRAMIN_BASE = 0x001700;
export const BAR1_INST = 0x001704;
export const PRAMIN_WINDOW = 0x700000;
export const PRAMIN_WINDOW_SIZE = 0x100000;

export const PFIFO_CHAN_COUNT = 0x002004;
export const PFIFO_INTR = 0x002100;
export const PFIFO_INTR_EN = 0x002140;
export const PFIFO_INTR_FENCE = 1 << 0;
export const PFIFO_INTR_CHAN_ERROR = 1 << 1;
export const PFIFO_INTR_RUNLIST_ERROR = 1 << 2;
export const PFIFO_RUNLIST_BASE = 0x002270;
export const PFIFO_RUNLIST_SUBMIT = 0x002274;
export const PFIFO_RUNLIST_STATUS = 0x00227c;
export const PFIFO_PREEMPT = 0x002634;
export const PFIFO_PREEMPT_PENDING = 1 << 20;
export const PFIFO_FENCE_PENDING = 0x002a00; // + 4*i, i < 4
export const PFIFO_ERR_PENDING = 0x002a10; // + 4*i, i < 4
export const PFIFO_CHAN_ERR = 0x002c00; // + 8*chid
export const PFIFO_CHAN_ERR_INFO = 0x002c04; // + 8*chid
/** [hw-spec 1.1] BAD_PROGRAM sub-reason (§6.3.6). */
export const PFIFO_CHAN_ERR_REASON = 0x002e00; // + 4*chid
export const PFIFO_CHAN = 0x003000; // + 8*chid
export const PFIFO_CHAN_STATE = 0x003004; // + 8*chid
export const CHAN_VALID = 0x80000000;
export const CHAN_INST_MASK = 0x0fffffff;
export const STATE_ENABLE = 1 << 0;
export const STATE_ACQUIRE_WAIT = 1 << 4;
/** [hw-spec 1.1] Blocked while the device checks and compiles a program (§6.3.1 step 3). */
export const STATE_PROGRAM_WAIT = 1 << 5;
export const STATE_BUSY = 1 << 12;
export const STATE_ERROR = 1 << 24;
export const DOORBELL = 0x810090;
export const MAX_CHANNELS = 128;

export const PTIMER_TIME_0 = 0x009400;
export const PTIMER_TIME_1 = 0x009410;

export const PFB_PART_COUNT = 0x022438;
export const PFB_PART_SIZE_MB = 0x10f20c;

export const MMU_FLUSH_STATUS = 0x100c80;
export const MMU_FLUSH_STATUS_VALUE = 0x00ff8000;
export const MMU_FLUSH_PDB = 0x100cb8;
export const MMU_FLUSH_TRIGGER = 0x100cbc;
export const MMU_FLUSH_GO = 0x80000000;
export const MMU_FLUSH_ALL_PDB = 1 << 1;
export const MMU_FAULT_ADDR_LO = 0x100e00;
export const MMU_FAULT_ADDR_HI = 0x100e04;
export const MMU_FAULT_CHID = 0x100e08;
export const MMU_FAULT_INFO = 0x100e0c;
export const MMU_FAULT_STATUS = 0x100e10;
export const MMU_FAULT_STATUS_VALID = 1 << 0;
export const MMU_FAULT_STATUS_OVERFLOW = 1 << 1;

export const PGRAPH_STATUS = 0x400700;

// PDIAG (docs/diag-block.md)
export const DIAG_MAGIC = 0x00a000;
export const DIAG_MAGIC_VALUE = 0x56554750;
export const DIAG_SCRATCH0 = 0x00a010; // ..0x00a02c
export const DIAG_DMA_ADDR_LO = 0x00a040;
export const DIAG_DMA_ADDR_HI = 0x00a044;
export const DIAG_DMA_LEN = 0x00a048;
export const DIAG_DMA_VRAM_OFF = 0x00a04c;
export const DIAG_DMA_CTRL = 0x00a050;
export const DIAG_DMA_STATUS = 0x00a054;
export const DIAG_DMA_ERROR = 0x00a058;
export const DIAG_DMA_FNV = 0x00a05c;
export const DIAG_VRAM_OFF = 0x00a060;
export const DIAG_VRAM_PEEK = 0x00a064;
export const DIAG_VRAM_POKE = 0x00a068;
export const DIAG_IRQ_FIRE = 0x00a080;
export const DIAG_IRQ_COUNT = 0x00a084;
export const DIAG_DMA_MAX = 1 << 20;

// PV hypercall page (§9); implemented by the aggregator only.
export const PV_BASE = 0xfe0000;
export const PV_MAGIC = 0xfe0000;
export const PV_MAGIC_VALUE = 0x50564843;
export const PV_VERSION = 0xfe0004;
export const PV_AREA_LO = 0xfe0008;
export const PV_AREA_HI = 0xfe000c;
export const PV_AREA_SLOTS = 0xfe0010;
export const PV_CALL = 0xfe0014;
export const PV_STATUS = 0xfe0018;
export const PV_SLOT_SIZE = 4096;
export const PV_MAX_SLOTS = 64;
export const PV_BATCH_MAX = 128;
export const PV_SLOT = { op: 0x00, result: 0x04, count: 0x08, flags: 0x0c, arg0: 0x10, arg1: 0x18, ret0: 0x20, arg2: 0x28, entries: 0x40 } as const;
export const PV_OP = {
  SET_PGD: 1, MAP_BATCH: 2, UNMAP_BATCH: 3, FLUSH: 4, MEM_ALLOC: 5, MEM_FREE: 6, MAP_RANGE: 7, UNMAP_RANGE: 8, SPACE_NEW: 9, SPACE_FREE: 10,
} as const;
/** PV_VERSION: 2 adds MAP_RANGE/UNMAP_RANGE (hw-spec 1.2); 3 their ALLOC/FREE flags (hw-spec 1.3); 4 SPACE_NEW and
 * SPACE_FREE (hw-spec 1.4). */
export const PV_VERSION_VALUE = 4;
/** Slot flags of the range ops; the most pages one range call may name. */
export const PV_RANGE = { CONTIGUOUS: 1, FLUSH: 2, ALLOC: 4, FREE: 4 } as const;
export const PV_RANGE_MAX = 1 << 20;

// ---- §4 channels ----
export const INST_SIZE = 4096;
export const INST = {
  USERD_LO: 0x008, USERD_HI: 0x00c, MAGIC: 0x010,
  GP_BASE_LO: 0x048, GP_BASE_HI: 0x04c,
  PD_LO: 0x200, PD_HI: 0x204, LIMIT_LO: 0x208, LIMIT_HI: 0x20c,
} as const;
export const USERD_SIZE = 512;
export const USERD = { REF: 0x48, GP_GET: 0x88, GP_PUT: 0x8c } as const;
export const GPFIFO_ENTRY_SIZE = 8;
export const GPFIFO_MAX_LOG2 = 20;
export const GPFIFO_MAX_DWORDS = 262144;

/** Memory targets (instance USERD/PD fields, PDEs, PTEs). */
export const TARGET_VRAM = 0;
export const TARGET_SYSMEM = 2;
export const TARGET_SYSMEM_NC = 3;

// ---- §5 pushbuffer ----
export const SEC_OP = { INC: 1, NON_INC: 3, IMMD: 4, INC_ONCE: 5, END_PB_SEGMENT: 7 } as const;
export const HOST_METHOD_LIMIT = 0x100;
export const HOST = {
  SET_OBJECT: 0x0000, NOP: 0x0008,
  SEMAPHORE_A: 0x0010, SEMAPHORE_B: 0x0014, SEMAPHORE_C: 0x0018, SEMAPHORE_D: 0x001c,
  NON_STALL_INTERRUPT: 0x0020, SET_REFERENCE: 0x0050, WFI: 0x0078,
} as const;
export const SEM_OP = { ACQUIRE: 1, RELEASE: 2, ACQ_GEQ: 4 } as const;
export const SEM_RELEASE_INTERRUPT = 1 << 20;
export const SEM_RELEASE_16BYTE = 1 << 24;

// ---- §6 classes ----
export const CLASS_COPY = 0x90b5;
export const CLASS_COMPUTE = 0x90c0;
export const SUBCH_COMPUTE = 1;
export const SUBCH_COPY = 4;
export const COPY = {
  SET_SEMAPHORE_A: 0x0240, SET_SEMAPHORE_B: 0x0244, SET_SEMAPHORE_PAYLOAD: 0x0248,
  LAUNCH_DMA: 0x0300,
  OFFSET_IN_UPPER: 0x0400, OFFSET_IN_LOWER: 0x0404, OFFSET_OUT_UPPER: 0x0408, OFFSET_OUT_LOWER: 0x040c,
  LINE_LENGTH_IN: 0x0418, LINE_COUNT: 0x041c,
} as const;
export const COMPUTE = {
  KERNEL_ID: 0x0200, GRID_X: 0x0204, GRID_Y: 0x0208, GRID_Z: 0x020c,
  PARAM_VA_UPPER: 0x0210, PARAM_VA_LOWER: 0x0214, PARAM_LENGTH: 0x0218, BUFFER_COUNT: 0x0234,
  SET_SEMAPHORE_A: 0x0240, SET_SEMAPHORE_B: 0x0244, SET_SEMAPHORE_PAYLOAD: 0x0248,
  LAUNCH: 0x0300, BUFFER_BASE: 0x0400, BUFFER_STRIDE: 16,
  // hw-spec 1.1, §6.3: SPIR-V programs.
  PROGRAM_VA_UPPER: 0x0220, PROGRAM_VA_LOWER: 0x0224, PROGRAM_LENGTH: 0x0228, PROGRAM_ENTRY: 0x022c,
  SPEC_VA_UPPER: 0x0250, SPEC_VA_LOWER: 0x0254, SPEC_COUNT: 0x0258,
} as const;
/** LAUNCH bit 16: run the program of §6.3 instead of KERNEL_ID. */
export const LAUNCH_PROGRAM = 1 << 16;
/** BUFFER_FLAGS bit 0: translate for reading only. */
export const BUFFER_READ_ONLY = 1;
/** hw-spec 1.6 (programs v1.1): the device may keep the binding's VRAM on the GPU between launches. */
export const BUFFER_DEVICE_CACHED = 2;
export const BUFFER_FLAGS_KNOWN = BUFFER_READ_ONLY | BUFFER_DEVICE_CACHED;

// ---- §3.10 PPROG: program limits (hw-spec 1.1) ----
export const PPROG = {
  VERSION: 0x00b000, MAX_MODULE_BYTES: 0x00b004, MAX_BINDINGS: 0x00b008, MAX_PUSH_BYTES: 0x00b00c,
  MAX_SPEC_CONSTANTS: 0x00b010, MAX_WG_INVOCATIONS: 0x00b014, MAX_WG_SIZE_X: 0x00b018,
  MAX_WG_SIZE_Y: 0x00b01c, MAX_WG_SIZE_Z: 0x00b020, MAX_SHARED_BYTES: 0x00b024,
  MAX_GRID_X: 0x00b028, MAX_GRID_Y: 0x00b02c, MAX_GRID_Z: 0x00b030, MAX_BUFFER_BYTES: 0x00b034,
  BUFFER_ALIGN: 0x00b038, SUBGROUP_SIZE: 0x00b03c, MAX_LOOP_ITERATIONS: 0x00b040, FEATURES: 0x00b044,
} as const;
export const PPROG_BASE = 0x00b000;
export const PPROG_END = 0x00b100;
export const PROG_VERSION_1_0 = 0x00010000;
/** Programs v1.1 (hw-spec 1.6): BUFFER_FLAGS.DEVICE_CACHED. */
export const PROG_VERSION_1_1 = 0x00010001;
/** BAD_PROGRAM reasons (PFIFO_CHAN_ERR_REASON), §6.3.6; native/include/program.h has the same. */
export const PROG_REASON = {
  UNSUPPORTED: 1, MODULE_SIZE: 2, INVALID: 3, CAPABILITY: 4, EXTENSION: 5, INSTRUCTION: 6,
  ENTRY_POINT: 7, BINDING: 8, BINDING_WRITABLE: 9, PUSH_CONSTANTS: 10, WORKGROUP_SIZE: 11,
  SHARED_MEMORY: 12, SPEC_CONSTANTS: 13, GRID: 14, BUFFER: 15, COMPILE: 16, LOOP_FORM: 17,
} as const;
export function progReasonName(code: number): string {
  for (const [k, v] of Object.entries(PROG_REASON)) if (v === code) return k;
  return `UNKNOWN_${code}`;
}
export const COMPUTE_MAX_BUFFERS = 16;
export const COMPUTE_MAX_PARAMS = 4096;
/** LAUNCH_DMA / LAUNCH flag fields. */
export const LAUNCH = {
  TRANSFER_MASK: 0x3, FLUSH_ENABLE: 1 << 2,
  SEM_SHIFT: 3, SEM_MASK: 0x3 << 3, SEM_NONE: 0, SEM_ONE_WORD: 1, SEM_FOUR_WORD: 2,
  INTR_SHIFT: 5, INTR_MASK: 0x3 << 5,
  SRC_LAYOUT: 1 << 7, DST_LAYOUT: 1 << 8,
} as const;

// ---- §7 MMU ----
export const VA_BITS = 40;
export const VA_LIMIT = 2 ** 40;
export const PD_SHIFT = 27; // 128 MiB per PDE
export const PD_ENTRIES = 8192;
export const PD_SIZE = PD_ENTRIES * 8;
export const SMALL_PAGE = 4096;
export const SMALL_SHIFT = 12;
export const SMALL_PT_ENTRIES = 32768;
export const LARGE_PAGE = 128 * 1024;
export const LARGE_SHIFT = 17;
export const LARGE_PT_ENTRIES = 1024;
export const PDE_PRESENT = 1;
export const PDE_LARGE = 2;
export const PTE_PRESENT = 1;
export const PTE_READ_ONLY = 4;
export const ENTRY_TARGET_SHIFT = 4;
/** Reserved bits below the address: PDE bits 3:2 and 11:6; PTE bits 3 and 11:6 (PTE bit 1, SUPERVISOR, is ignored). */
export const PDE_RESERVED = 0xfcc;
export const PTE_RESERVED = 0xfc8;

// ---- §8 faults and errors ----
export const FAULT = {
  PDE_NOT_PRESENT: 1, PTE_NOT_PRESENT: 2, WRITE_TO_READ_ONLY: 3, VRAM_OUT_OF_RANGE: 4,
  SYSMEM_UNMAPPED: 5, BAD_PTE: 6, VA_OUT_OF_RANGE: 7, BAD_PAGE_TABLE: 8,
} as const;
export type FaultReason = (typeof FAULT)[keyof typeof FAULT];
export const UNIT = { HOST: 0, SEMAPHORE: 1, COPY: 2, COMPUTE: 3 } as const;
export type FaultUnit = (typeof UNIT)[keyof typeof UNIT];

export const CHAN_ERR = {
  NONE: 0, BAD_GPFIFO_ENTRY: 1, BAD_OPCODE: 2, BAD_METHOD: 3, BAD_CLASS: 4, NO_OBJECT: 5,
  BAD_METHOD_DATA: 6, BAD_LAUNCH: 7, WATCHDOG: 8, BAD_INSTANCE: 9, PB_TRUNCATED: 10,
  MMU_FAULT: 16, KERNEL_ERROR: 17,
  // hw-spec 1.1
  BAD_PROGRAM: 18, PROGRAM_LOOP_LIMIT: 19, ENGINE_LOST: 20,
  // hw-spec 1.2
  CTXSW_TIMEOUT: 21,
} as const;
export type ChanErrCode = (typeof CHAN_ERR)[keyof typeof CHAN_ERR];

// ---- errno values (Linux's): registers report them positive, PV results and jobs negative ----
export const EIO = 5;
export const ENXIO = 6;
export const ENOMEM = 12;
export const EFAULT = 14;
export const EBUSY = 16;
export const ENODEV = 19;
export const EINVAL = 22;
export const ENOSYS = 38;
export const ECANCELED = 125;

/** Name of an error code, for logs and test messages. */
export function chanErrName(code: number): string {
  for (const [k, v] of Object.entries(CHAN_ERR)) if (v === code) return k;
  return `UNKNOWN_${code}`;
}
export function faultName(code: number): string {
  for (const [k, v] of Object.entries(FAULT)) if (v === code) return k;
  return `UNKNOWN_${code}`;
}
