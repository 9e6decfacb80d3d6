/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_ipv6.h: what the entry programs do with IPv6 until the policy side
 * handles it. Every IPv6 packet is parsed (dpd_parse_ipv6), so the walk is
 * verified and exercised, and then dropped: IPv6 must not pass unpoliced.
 * A packet with more extension headers than the walk's bound is counted
 * (DPD_DROP_IPV6_EXT). A trace run gets the parsed facts in dpd_trace,
 * flagged DPD_ST_UNPOLICED.
 */
#ifndef DPD_IPV6_H
#define DPD_IPV6_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "dpd_abi.h"
#include "dpd_maps.h"
#include "dpd_parse.h"
#include "dpd_frag.h"

static __always_inline int dpd_ipv6_unpoliced(struct __sk_buff *skb, __u32 dir, __u64 trace)
{
	struct dpd_pkt p = {};
	struct dpd_state *st;
	__u32 zero = 0;
	int rc = dpd_parse_ipv6(skb, &p);

	if (rc == DPD_PARSE_EXT_LIMIT && !trace)
		dpd_drop_count(DPD_DROP_IPV6_EXT, skb->len);
	if (!trace || rc)
		return TC_ACT_SHOT;
	st = bpf_map_lookup_elem(&dpd_state, &zero);
	if (!st)
		return TC_ACT_SHOT;
	__builtin_memset(st, 0, sizeof(*st));
	__builtin_memcpy(st->saddr, p.saddr6, 16);
	__builtin_memcpy(st->daddr, p.daddr6, 16);
	st->sport = p.sport;
	st->dport = p.dport;
	st->proto = p.proto;
	st->family = 6;
	st->icmp_type = p.icmp_type;
	st->icmp_code = p.icmp_code;
	/* ifindex stays 0: the packet never reached a policy, which is what
	 * a zero ifindex tells the trace's readers. */
	st->dir = dir;
	st->pkt_len = skb->len;
	st->flags = p.flags | DPD_ST_UNPOLICED;
	st->trace = trace;
	bpf_map_update_elem(&dpd_trace, &zero, st, BPF_ANY);
	return TC_ACT_SHOT;
}

#endif
