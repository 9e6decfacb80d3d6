/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_ifstate.h: an interface's entry (slot and DPD_IF_* flags), read on
 * every packet. dpd_ifstate, a hash, holds every entry; dpd_ifstate_arr,
 * an array, holds the same entries for ifindexes below
 * DPD_IFSTATE_ARR_ENTRIES, where a lookup is inlined by the verifier
 * instead of hashing (about 19 ns of an established packet's ~120 on the
 * machine it was measured on). An array element is changed in place, so
 * its 8 bytes are one word: dpd_ifstate_set stores it in one instruction
 * and dpd_ifstate_get loads it in one, and no packet sees a slot of one
 * write with the flags of another.
 */
#ifndef DPD_IFSTATE_H
#define DPD_IFSTATE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "dpd_abi.h"
#include "dpd_maps.h"

/* dpd_ifstate_get is ifindex's entry; flags 0: none (not dpd's, or not
 * ready). */
static __always_inline struct dpd_ifstate dpd_ifstate_get(__u32 ifindex)
{
	struct dpd_ifstate s = {};
	__u64 *w, v;

	w = bpf_map_lookup_elem(&dpd_ifstate_arr, &ifindex);
	if (!w)
		w = bpf_map_lookup_elem(&dpd_ifstate, &ifindex);
	if (!w)
		return s;
	v = *(volatile __u64 *)w;
	__builtin_memcpy(&s, &v, sizeof(s));
	return s;
}

#endif
