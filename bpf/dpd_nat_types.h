/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_nat_types.h: what service DNAT records about a packet for the stages
 * after it (conntrack, the trace). Types only; the logic is dpd_nat.h. The
 * NAT map keys and values are shared with userspace, so they are in
 * include/dpd_abi.h.
 */
#ifndef DPD_NAT_TYPES_H
#define DPD_NAT_TYPES_H

#include <linux/types.h>

/* The translation applied to this packet at dpd_from_wep. */
struct dpd_nat {
	__u8  fe_addr[16]; /* network order, IPv4 in the first 4 */
	__u16 fe_port;  /* host order */
	__u16 hairpin;
	__u32 svc;
};

#endif
