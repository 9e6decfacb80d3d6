/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_clock.h: the programs' clock. Conntrack, fragments and flow events
 * stamp CLOCK_MONOTONIC_COARSE nanoseconds, which the userspace scanner
 * compares with its own reading of that clock. bpf_ktime_get_coarse_ns is
 * a helper call (about 14 ns of an established packet's ~120 on the
 * machine it was measured on); bpf_jiffies64 is inlined by the verifier
 * into one load. So the time is jiffies scaled by the tick and offset to
 * the coarse clock, both calibrated by userspace through dpd_clock_sync
 * (dataplane/tcbpf/clock.go): the coarse clock advances once per tick, as
 * jiffies do, so between syncs the two differ by at most a tick and the
 * clock's frequency correction (at most 500 ppm). Until the tick is known,
 * and without the map, the helper is read.
 */
#ifndef DPD_CLOCK_H
#define DPD_CLOCK_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "dpd_abi.h"
#include "dpd_maps.h"

static __always_inline __u64 dpd_now(void)
{
	struct dpd_clock *c;
	__u32 zero = 0;
	__u64 tick;

	c = bpf_map_lookup_elem(&dpd_clock, &zero);
	if (!c)
		return bpf_ktime_get_coarse_ns();
	tick = *(volatile __u64 *)&c->tick_ns;
	if (!tick)
		return bpf_ktime_get_coarse_ns();
	return bpf_jiffies64() * tick + *(volatile __u64 *)&c->offset_ns;
}

#endif
