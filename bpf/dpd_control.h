/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_control.h: programs userspace runs with BPF_PROG_TEST_RUN (never
 * attached) to write what the entry programs read in one store, which a
 * map update (a copy of the value in place, for an array) does not
 * promise. Arguments come in the context's cb[] words; the return value
 * is 0 on success.
 *
 *   dpd_ifstate_set  cb[0] ifindex, cb[1] slot, cb[2] flags: the
 *                    dpd_ifstate_arr entry (dpd_ifstate.h); 1: the
 *                    ifindex is beyond the array
 *   dpd_clock_sync   cb[0..1] tick in ns (low, high; 0: none yet), cb[2]
 *                    publish: samples jiffies and the coarse clock into
 *                    dpd_clock; with a tick sets the offset for it, and
 *                    with publish the tick too (dpd_clock.h); 2: a tick
 *                    passed between the two reads, sample again
 */
#ifndef DPD_CONTROL_H
#define DPD_CONTROL_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "dpd_abi.h"
#include "dpd_maps.h"

SEC("tc")
int dpd_ifstate_set(struct __sk_buff *skb)
{
	__u32 ifindex = skb->cb[0];
	__u64 *w;

	w = bpf_map_lookup_elem(&dpd_ifstate_arr, &ifindex);
	if (!w)
		return 1;
	*(volatile __u64 *)w = (__u64)skb->cb[1] | ((__u64)skb->cb[2] << 32);
	return 0;
}

SEC("tc")
int dpd_clock_sync(struct __sk_buff *skb)
{
	__u64 tick = (__u64)skb->cb[0] | ((__u64)skb->cb[1] << 32);
	struct dpd_clock *c;
	__u32 zero = 0;
	__u64 j, ns;

	c = bpf_map_lookup_elem(&dpd_clock, &zero);
	if (!c)
		return 1;
	j = bpf_jiffies64();
	ns = bpf_ktime_get_coarse_ns();
	/* Both of one tick, or the offset would be a tick or more off. */
	if (bpf_jiffies64() != j)
		return 2;
	c->sample_jiffies = j;
	c->sample_ns = ns;
	if (!tick)
		return 0;
	*(volatile __u64 *)&c->offset_ns = ns - j * tick;
	/* The tick is published by a later sync than the one that first set
	 * its offset (userspace waits seconds between them): by then every
	 * CPU sees that offset, without a barrier this program cannot issue. */
	if (skb->cb[2])
		*(volatile __u64 *)&c->tick_ns = tick;
	return 0;
}

#endif
