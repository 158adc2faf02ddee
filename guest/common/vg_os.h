/* SPDX-License-Identifier: MIT */
/*
 * Platform layer of the shared driver core: the few things the core needs from its host
 * (BAR0 register access, the BAR1 VRAM aperture, memory, sleeping, a lock the interrupt path
 * can take, logging). The Linux module and the user-space host backend each provide one.
 */
#ifndef VG_OS_H
#define VG_OS_H

#ifdef __KERNEL__
#include "vg_os_kernel.h"
#else
#include "vg_os_user.h"
#endif

#endif /* VG_OS_H */
