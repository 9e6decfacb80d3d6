/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_drops.h: counting a dropped packet by reason into dpd_drop_ctrs,
 * which Inspect and /metrics read. The map itself is dpd_maps.h's.
 */
#ifndef DPD_DROPS_H
#define DPD_DROPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "dpd_abi.h"
#include "dpd_maps.h"

/* dpd_drop_count adds one packet of len bytes to the DPD_DROP_* reason. */
static __always_inline void dpd_drop_count(__u32 reason, __u32 len)
{
	struct dpd_counter *c = bpf_map_lookup_elem(&dpd_drop_ctrs, &reason);

	if (c) {
		c->packets++;
		c->bytes += len;
	}
}

#endif /* DPD_DROPS_H */
