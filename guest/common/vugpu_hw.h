/* SPDX-License-Identifier: MIT */
/*
 * vugpu hardware interface, transcribed from docs/hw-spec.md: BAR0 register offsets and fields,
 * instance block / USERD / GPFIFO layouts, pushbuffer method encoding, classes, MMU entries,
 * fault and channel-error codes, the PV hypercall page. Shared by the Linux driver and the
 * user-space host backend; plain macros so it compiles in both worlds.
 */
#ifndef VUGPU_HW_H
#define VUGPU_HW_H

/* §1 PCI identity */
#define VG_PCI_VENDOR 0x1de5
#define VG_PCI_DEVICE 0x6b75
#define VG_NUM_VECTORS 4

/* §2 interrupt sources = PMC_INTR bits = MSI-X vectors */
#define VG_IRQ_FIFO 0
#define VG_IRQ_MMU_FAULT 1
#define VG_IRQ_CHAN_ERROR 2
#define VG_IRQ_DIAG 3

/* §3.2 PMC */
#define VG_PMC_BOOT_0 0x000000
#define VG_PMC_BOOT_0_FAMILY(v) (((v) >> 20) & 0xff) /* 0xC0 = GF100 family */
#define VG_PMC_INTR 0x000100
#define VG_PMC_INTR_EN 0x000140
#define VG_PMC_ENABLE 0x000200
#define VG_PMC_ENABLE_PFIFO (1u << 8)

/* §3.4 PFIFO */
#define VG_PFIFO_CHAN_COUNT 0x002004
#define VG_PFIFO_INTR 0x002100
#define VG_PFIFO_INTR_EN 0x002140
#define VG_PFIFO_INTR_FENCE (1u << 0)
#define VG_PFIFO_INTR_CHAN_ERROR (1u << 1)
#define VG_PFIFO_INTR_RUNLIST_ERROR (1u << 2)
#define VG_PFIFO_RUNLIST_BASE 0x002270
#define VG_PFIFO_RUNLIST_SUBMIT 0x002274
#define VG_PFIFO_RUNLIST_STATUS 0x00227c
#define VG_PFIFO_PREEMPT 0x002634
#define VG_PFIFO_PREEMPT_PENDING (1u << 20)
#define VG_PFIFO_FENCE_PENDING(i) (0x002a00 + 4 * (i))
#define VG_PFIFO_ERR_PENDING(i) (0x002a10 + 4 * (i))
#define VG_PFIFO_CHAN_ERR(c) (0x002c00 + 8 * (c))
#define VG_PFIFO_CHAN_ERR_INFO(c) (0x002c04 + 8 * (c))
#define VG_PFIFO_CHAN_ERR_REASON(c) (0x002e00 + 4 * (c)) /* hw-spec 1.1: BAD_PROGRAM sub-reason */
#define VG_PFIFO_CHAN(c) (0x003000 + 8 * (c))
#define VG_PFIFO_CHAN_STATE(c) (0x003004 + 8 * (c))
#define VG_CHAN_VALID (1u << 31)
#define VG_CHAN_INST_MASK 0x0fffffffu
#define VG_STATE_ENABLE (1u << 0)
#define VG_STATE_ACQUIRE_WAIT (1u << 4)
#define VG_STATE_PROGRAM_WAIT (1u << 5) /* blocked while the device checks/compiles a program */
#define VG_STATE_BUSY (1u << 12)
#define VG_STATE_ERROR (1u << 24)
#define VG_DOORBELL 0x810090
#define VG_MAX_CHANNELS 128

/* §3.7 PTIMER */
#define VG_PTIMER_TIME_0 0x009400
#define VG_PTIMER_TIME_1 0x009410

/* §3.10 PPROG: program limits (hw-spec 1.1), read-only, read once at probe */
#define VG_PPROG_VERSION 0x00b000
#define VG_PPROG_VERSION_1_0 0x00010000u
#define VG_PPROG_VERSION_1_1 0x00010001u /* hw-spec 1.6: BUFFER_FLAGS.DEVICE_CACHED */
#define VG_PPROG_MAX_MODULE_BYTES 0x00b004
#define VG_PPROG_MAX_BINDINGS 0x00b008
#define VG_PPROG_MAX_PUSH_BYTES 0x00b00c
#define VG_PPROG_MAX_SPEC_CONSTANTS 0x00b010
#define VG_PPROG_MAX_WG_INVOCATIONS 0x00b014
#define VG_PPROG_MAX_WG_SIZE_X 0x00b018
#define VG_PPROG_MAX_WG_SIZE_Y 0x00b01c
#define VG_PPROG_MAX_WG_SIZE_Z 0x00b020
#define VG_PPROG_MAX_SHARED_BYTES 0x00b024
#define VG_PPROG_MAX_GRID_X 0x00b028
#define VG_PPROG_MAX_GRID_Y 0x00b02c
#define VG_PPROG_MAX_GRID_Z 0x00b030
#define VG_PPROG_MAX_BUFFER_BYTES 0x00b034
#define VG_PPROG_BUFFER_ALIGN 0x00b038
#define VG_PPROG_SUBGROUP_SIZE 0x00b03c
#define VG_PPROG_MAX_LOOP_ITERATIONS 0x00b040
#define VG_PPROG_FEATURES 0x00b044
#define VG_PPROG_FIRST VG_PPROG_VERSION
#define VG_PPROG_COUNT 18 /* registers 0x00b000 … 0x00b044 */
#define VG_PROG_FEAT_FLOAT64 (1u << 0)
#define VG_PROG_FEAT_INT64 (1u << 1)
#define VG_PROG_FEAT_FLOAT16 (1u << 2)
#define VG_PROG_FEAT_INT8 (1u << 3)
#define VG_PROG_FEAT_INT16 (1u << 4)
#define VG_PROG_FEAT_SUBGROUP (1u << 5)
#define VG_PROG_FEAT_INT64_ATOMICS (1u << 6)

/* §3.5 PFB */
#define VG_PFB_PART_COUNT 0x022438
#define VG_PFB_PART_SIZE_MB 0x10f20c

/* §3.6 MMU */
#define VG_MMU_FLUSH_STATUS 0x100c80
#define VG_MMU_FLUSH_PDB 0x100cb8
#define VG_MMU_FLUSH_TRIGGER 0x100cbc
#define VG_MMU_FLUSH_GO (1u << 31)
#define VG_MMU_FLUSH_ALL_PAGES (1u << 0)
#define VG_MMU_FLUSH_ALL_PDB (1u << 1)
#define VG_MMU_FAULT_ADDR_LO 0x100e00
#define VG_MMU_FAULT_ADDR_HI 0x100e04
#define VG_MMU_FAULT_CHID 0x100e08
#define VG_MMU_FAULT_INFO 0x100e0c
#define VG_MMU_FAULT_STATUS 0x100e10
#define VG_MMU_FAULT_STATUS_VALID (1u << 0)
#define VG_MMU_FAULT_STATUS_OVERFLOW (1u << 1)
#define VG_FAULT_INFO_REASON(v) ((v) & 0xff)
#define VG_FAULT_INFO_WRITE(v) (((v) >> 8) & 1)
#define VG_FAULT_INFO_UNIT(v) (((v) >> 12) & 7)

/* §3.8 */
#define VG_PGRAPH_STATUS 0x400700

/* §9 PV hypercall page (present only when mediated) */
#define VG_PV_MAGIC 0xfe0000
#define VG_PV_MAGIC_VALUE 0x50564843u /* 'PVHC' */
#define VG_PV_VERSION 0xfe0004
#define VG_PV_AREA_LO 0xfe0008
#define VG_PV_AREA_HI 0xfe000c
#define VG_PV_AREA_SLOTS 0xfe0010
#define VG_PV_CALL 0xfe0014
#define VG_PV_STATUS 0xfe0018
#define VG_PV_SLOT_SIZE 4096
#define VG_PV_BATCH_MAX 128
/* slot layout */
#define VG_PV_SLOT_OP 0x00
#define VG_PV_SLOT_RESULT 0x04
#define VG_PV_SLOT_COUNT 0x08
#define VG_PV_SLOT_FLAGS 0x0c
#define VG_PV_SLOT_ARG0 0x10
#define VG_PV_SLOT_ARG1 0x18
#define VG_PV_SLOT_RET0 0x20
#define VG_PV_SLOT_ARG2 0x28 /* PV 3: the range ops' ALLOC alignment / FREE address */
#define VG_PV_SLOT_ENTRIES 0x40
/* ops */
#define VG_PV_OP_SET_PGD 1
#define VG_PV_OP_MAP_BATCH 2
#define VG_PV_OP_UNMAP_BATCH 3
#define VG_PV_OP_FLUSH 4
#define VG_PV_OP_MEM_ALLOC 5
#define VG_PV_OP_MEM_FREE 6
/* PV_VERSION 2 (hw-spec 1.2): ranges; PTEs as a u64 array from ENTRIES on, through the next slots */
#define VG_PV_OP_MAP_RANGE 7
#define VG_PV_OP_UNMAP_RANGE 8
#define VG_PV_RANGE_CONTIGUOUS 0x1u /* slot flags: one PTE, page i at its address + i * 4 KiB */
#define VG_PV_RANGE_FLUSH 0x2u      /* slot flags: FLUSH the PD after the range */
#define VG_PV_VERSION_RANGES 2
/* PV_VERSION 3 (hw-spec 1.3): a range op also allocates (MAP_RANGE) or frees (UNMAP_RANGE) */
#define VG_PV_RANGE_ALLOC 0x4u /* MAP_RANGE + CONTIGUOUS: allocate the VRAM (align arg2), ret0 */
#define VG_PV_RANGE_FREE 0x4u  /* UNMAP_RANGE: then MEM_FREE arg2 */
#define VG_PV_VERSION_ALLOC 3
/* PV_VERSION 4 (hw-spec 1.4): an address space in one call each way */
#define VG_PV_OP_SPACE_NEW 9   /* arg0 size, arg1 align: MEM_ALLOC + SET_PGD of its start; ret0 */
#define VG_PV_OP_SPACE_FREE 10 /* arg0 PD: its ALLOC'd buffers, the space, the PD's allocation */
#define VG_PV_VERSION_SPACE 4

/* §4.1 instance block (4 KiB, VRAM) */
#define VG_INST_SIZE 4096
#define VG_INST_USERD_LO 0x008
#define VG_INST_USERD_HI 0x00c
#define VG_INST_MAGIC 0x010
#define VG_INST_GP_BASE_LO 0x048
#define VG_INST_GP_BASE_HI 0x04c
#define VG_INST_PD_LO 0x200
#define VG_INST_PD_HI 0x204
#define VG_INST_LIMIT_LO 0x208
#define VG_INST_LIMIT_HI 0x20c

/* memory targets (instance fields, PDEs, PTEs) */
#define VG_TARGET_VRAM 0
#define VG_TARGET_SYSMEM 2
#define VG_TARGET_SYSMEM_NC 3

/* §4.2 USERD (512 bytes) */
#define VG_USERD_SIZE 512
#define VG_USERD_REF 0x48
#define VG_USERD_GP_GET 0x88
#define VG_USERD_GP_PUT 0x8c

/* §4.3 GPFIFO entry */
#define VG_GPFIFO_ENTRY_SIZE 8
#define VG_GPFIFO_MAX_DWORDS 262144
#define VG_GP_ENTRY0(va) ((unsigned int)((va) & 0xfffffffcu))
#define VG_GP_ENTRY1(va, dwords) ((unsigned int)((((va) >> 32) & 0xff) | ((unsigned int)(dwords) << 10)))

/* §5.1 method header */
#define VG_OP_INC 1u
#define VG_OP_NON_INC 3u
#define VG_OP_IMMD 4u
#define VG_OP_INC_ONCE 5u
#define VG_OP_END_PB_SEGMENT 7u
#define VG_MTHD(op, subc, mthd, count) \
	(((unsigned int)(op) << 29) | (((unsigned int)(count) & 0x1fff) << 16) | \
	 (((unsigned int)(subc) & 7) << 13) | (((unsigned int)(mthd) >> 2) & 0xfff))

/* §5.2 host methods */
#define VG_HOST_SET_OBJECT 0x0000
#define VG_HOST_NOP 0x0008
#define VG_HOST_SEMAPHORE_A 0x0010
#define VG_HOST_SEMAPHORE_B 0x0014
#define VG_HOST_SEMAPHORE_C 0x0018
#define VG_HOST_SEMAPHORE_D 0x001c
#define VG_HOST_NON_STALL_INTERRUPT 0x0020
#define VG_HOST_SET_REFERENCE 0x0050
#define VG_HOST_WFI 0x0078
#define VG_SEM_ACQUIRE 1u
#define VG_SEM_RELEASE 2u
#define VG_SEM_ACQ_GEQ 4u
#define VG_SEM_RELEASE_INTERRUPT (1u << 20)
#define VG_SEM_RELEASE_16BYTE (1u << 24)

/* §6 classes and their methods */
#define VG_CLASS_COPY 0x90b5
#define VG_CLASS_COMPUTE 0x90c0
#define VG_SUBCH_COMPUTE 1
#define VG_SUBCH_COPY 4

#define VG_COPY_LAUNCH_DMA 0x0300
#define VG_COPY_OFFSET_IN_UPPER 0x0400
#define VG_COPY_LINE_LENGTH_IN 0x0418
#define VG_COPY_LINE_COUNT 0x041c

#define VG_COMPUTE_KERNEL_ID 0x0200
#define VG_COMPUTE_GRID_X 0x0204
#define VG_COMPUTE_PARAM_VA_UPPER 0x0210
#define VG_COMPUTE_PARAM_LENGTH 0x0218
#define VG_COMPUTE_PROGRAM_VA_UPPER 0x0220 /* §6.3 (hw-spec 1.1); LOWER, LENGTH, ENTRY follow */
#define VG_COMPUTE_PROGRAM_VA_LOWER 0x0224
#define VG_COMPUTE_PROGRAM_LENGTH 0x0228
#define VG_COMPUTE_PROGRAM_ENTRY 0x022c
#define VG_COMPUTE_BUFFER_COUNT 0x0234
#define VG_COMPUTE_SPEC_VA_UPPER 0x0250 /* LOWER, COUNT follow */
#define VG_COMPUTE_SPEC_VA_LOWER 0x0254
#define VG_COMPUTE_SPEC_COUNT 0x0258
#define VG_COMPUTE_LAUNCH 0x0300
#define VG_COMPUTE_BUFFER(i) (0x0400 + 16 * (i))
#define VG_COMPUTE_MAX_BUFFERS 16
#define VG_COMPUTE_MAX_PARAMS 4096
#define VG_BUFFER_FLAG_READ_ONLY (1u << 0) /* BUFFER_FLAGS(i) bit 0 (hw-spec 1.1) */
#define VG_BUFFER_FLAG_DEVICE_CACHED (1u << 1) /* bit 1 (hw-spec 1.6, PROG_VERSION 0x00010001) */
#define VG_SPEC_ENTRY_SIZE 8              /* {u32 constantID, u32 value} */

/* LAUNCH_DMA / LAUNCH flags */
#define VG_LAUNCH_TRANSFER_NONE 0u
#define VG_LAUNCH_TRANSFER_PIPELINED 1u
#define VG_LAUNCH_TRANSFER_NON_PIPELINED 2u
#define VG_LAUNCH_FLUSH_ENABLE (1u << 2)
#define VG_LAUNCH_SEM(t) ((unsigned int)(t) << 3)
#define VG_LAUNCH_INTR(t) ((unsigned int)(t) << 5)
#define VG_LAUNCH_PROGRAM (1u << 16) /* compute LAUNCH: run the SPIR-V program of §6.3 */

/* §7 MMU */
#define VG_VA_BITS 40
#define VG_PD_SHIFT 27
#define VG_PD_ENTRIES 8192
#define VG_PD_SIZE (VG_PD_ENTRIES * 8)
#define VG_PAGE_SHIFT 12
#define VG_PAGE_SIZE 4096u
#define VG_SPT_ENTRIES 32768
#define VG_SPT_SIZE (VG_SPT_ENTRIES * 8)
#define VG_LARGE_PAGE_SHIFT 17 /* 128 KiB pages, as GF100's big pages */
#define VG_LARGE_PAGE_SIZE (1u << VG_LARGE_PAGE_SHIFT)
#define VG_LPT_ENTRIES 1024
#define VG_LPT_SIZE (VG_LPT_ENTRIES * 8)
#define VG_PDE_PRESENT 1ull
#define VG_PDE_LARGE 2ull
#define VG_PTE_PRESENT 1ull
#define VG_PTE_READ_ONLY 4ull
#define VG_ENTRY_TARGET(t) ((unsigned long long)(t) << 4)
#define VG_ENTRY_ADDR_MASK (~0xfffull)

/* §8.1 MMU fault reasons */
#define VG_FAULT_PDE_NOT_PRESENT 1
#define VG_FAULT_PTE_NOT_PRESENT 2
#define VG_FAULT_WRITE_TO_READ_ONLY 3
#define VG_FAULT_VRAM_OUT_OF_RANGE 4
#define VG_FAULT_SYSMEM_UNMAPPED 5
#define VG_FAULT_BAD_PTE 6
#define VG_FAULT_VA_OUT_OF_RANGE 7
#define VG_FAULT_BAD_PAGE_TABLE 8

/* §8.2 channel error codes */
#define VG_CERR_NONE 0
#define VG_CERR_BAD_GPFIFO_ENTRY 1
#define VG_CERR_BAD_OPCODE 2
#define VG_CERR_BAD_METHOD 3
#define VG_CERR_BAD_CLASS 4
#define VG_CERR_NO_OBJECT 5
#define VG_CERR_BAD_METHOD_DATA 6
#define VG_CERR_BAD_LAUNCH 7
#define VG_CERR_WATCHDOG 8
#define VG_CERR_BAD_INSTANCE 9
#define VG_CERR_PB_TRUNCATED 10
#define VG_CERR_MMU_FAULT 16
#define VG_CERR_KERNEL_ERROR 17
#define VG_CERR_BAD_PROGRAM 18        /* reason in PFIFO_CHAN_ERR_REASON (hw-spec 1.1) */
#define VG_CERR_PROGRAM_LOOP_LIMIT 19 /* reached PROG_MAX_LOOP_ITERATIONS (hw-spec 1.1) */
#define VG_CERR_ENGINE_LOST 20        /* the engine restarted (vugpu restarted/upgraded) or its program device was lost mid-job; the driver rebinds and carries on */
#define VG_CERR_CTXSW_TIMEOUT 21      /* a program held a device that cannot switch it out for a timeslice while another VM waited, and was stopped (hw-spec 1.5) */

/* §6.3.6 BAD_PROGRAM reasons (PFIFO_CHAN_ERR_REASON) */
#define VG_PROG_ERR_UNSUPPORTED 1
#define VG_PROG_ERR_MODULE_SIZE 2
#define VG_PROG_ERR_INVALID 3
#define VG_PROG_ERR_CAPABILITY 4
#define VG_PROG_ERR_EXTENSION 5
#define VG_PROG_ERR_INSTRUCTION 6
#define VG_PROG_ERR_ENTRY_POINT 7
#define VG_PROG_ERR_BINDING 8
#define VG_PROG_ERR_BINDING_WRITABLE 9
#define VG_PROG_ERR_PUSH_CONSTANTS 10
#define VG_PROG_ERR_WORKGROUP_SIZE 11
#define VG_PROG_ERR_SHARED_MEMORY 12
#define VG_PROG_ERR_SPEC_CONSTANTS 13
#define VG_PROG_ERR_GRID 14
#define VG_PROG_ERR_BUFFER 15
#define VG_PROG_ERR_COMPILE 16
#define VG_PROG_ERR_LOOP_FORM 17

/* What a read of a device that is gone returns (PCI master abort); not a valid state of
 * PFIFO_PREEMPT or PFIFO_CHAN_STATE. Driver-side error code for it: */
#define VG_DEAD_READ 0xffffffffu
#define VG_CERR_DEVICE_LOST 0xff

/* Compute kernel ids (native/include/kernels.h, docs/kernels.md) */
#define VG_K_NOP 0
#define VG_K_LOOP 1
#define VG_K_MADD 2
#define VG_K_FMADD 3
#define VG_K_MMUL 4
#define VG_K_FMMUL 5
#define VG_K_BACKPROP_FORWARD 6
#define VG_K_BACKPROP_ADJUST 7
#define VG_K_BFS 8
#define VG_K_HOTSPOT 9
#define VG_K_LUD_DIAGONAL 10
#define VG_K_LUD_PERIMETER 11
#define VG_K_LUD_INTERNAL 12
#define VG_K_SRAD1 13
#define VG_K_SRAD2 14
#define VG_K_MEMSET 15

#endif /* VUGPU_HW_H */
