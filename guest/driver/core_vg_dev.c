// SPDX-License-Identifier: GPL-2.0 OR MIT
/* The shared driver core (guest/common), compiled into the module. */
#include "../common/vg_dev.c"
