/* SPDX-License-Identifier: MIT */
/* Names of the hw-spec §8 codes, for messages (driver log, runtime error strings). */
#ifndef VUGPU_NAMES_H
#define VUGPU_NAMES_H

static inline const char *vg_chan_err_name(unsigned int code)
{
	static const char *const names[] = {
		"NONE", "BAD_GPFIFO_ENTRY", "BAD_OPCODE", "BAD_METHOD", "BAD_CLASS", "NO_OBJECT",
		"BAD_METHOD_DATA", "BAD_LAUNCH", "WATCHDOG", "BAD_INSTANCE", "PB_TRUNCATED",
	};

	if (code < sizeof(names) / sizeof(names[0]))
		return names[code];
	if (code == 16)
		return "MMU_FAULT";
	if (code == 17)
		return "KERNEL_ERROR";
	if (code == 18)
		return "BAD_PROGRAM";
	if (code == 19)
		return "PROGRAM_LOOP_LIMIT";
	if (code == 20)
		return "ENGINE_LOST";
	if (code == 21)
		return "CTXSW_TIMEOUT";
	if (code == 0xff)
		return "DEVICE_LOST";
	return "UNKNOWN";
}

/* PFIFO_CHAN_ERR_REASON after BAD_PROGRAM (hw-spec §6.3.6) */
static inline const char *vg_prog_err_name(unsigned int reason)
{
	static const char *const names[] = {
		"NONE", "UNSUPPORTED", "MODULE_SIZE", "INVALID", "CAPABILITY", "EXTENSION", "INSTRUCTION",
		"ENTRY_POINT", "BINDING", "BINDING_WRITABLE", "PUSH_CONSTANTS", "WORKGROUP_SIZE",
		"SHARED_MEMORY", "SPEC_CONSTANTS", "GRID", "BUFFER", "COMPILE", "LOOP_FORM",
	};

	return reason < sizeof(names) / sizeof(names[0]) ? names[reason] : "UNKNOWN";
}

static inline const char *vg_fault_name(unsigned int reason)
{
	static const char *const names[] = {
		"NONE", "PDE_NOT_PRESENT", "PTE_NOT_PRESENT", "WRITE_TO_READ_ONLY", "VRAM_OUT_OF_RANGE",
		"SYSMEM_UNMAPPED", "BAD_PTE", "VA_OUT_OF_RANGE", "BAD_PAGE_TABLE",
	};

	return reason < sizeof(names) / sizeof(names[0]) ? names[reason] : "UNKNOWN";
}

static inline const char *vg_unit_name(unsigned int unit)
{
	static const char *const names[] = { "HOST", "SEMAPHORE", "COPY", "COMPUTE" };

	return unit < 4 ? names[unit] : "UNKNOWN";
}

#endif /* VUGPU_NAMES_H */
