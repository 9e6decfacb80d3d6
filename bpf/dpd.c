//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd.c: the entry programs attached on the host side of every workload
 * veth, and the epilogue the policy programs tail-call when they decide.
 *
 *   dpd_from_wep  TC ingress: packets leaving the workload, its egress policy
 *   dpd_to_wep    TC egress:  packets entering the workload, its ingress policy
 *   dpd_epilogue  dpd_jump[DPD_JUMP_EPILOGUE]: verdict -> conntrack, counters,
 *                 a flow event (dpd_events.h)
 *
 * The host endpoints' programs are in dpd_hep.h, the ones userspace runs to
 * write a value in one store in dpd_control.h.
 *
 * Flow: ARP passes, other non-IP drops; IPv4 and IPv6 take one path over
 * dpd_pkt, whose addresses are 16 bytes in both (what differs is in
 * dpd_ipv6.h). An interface without a ready dpd_ifstate entry drops (fail
 * closed); a non-first fragment takes the ports of its first fragment, or
 * drops when this hook has not seen it (dpd_frag.h); ICMPv6 neighbour
 * discovery and MLD pass without policy (dpd_ipv6_nd); leaving a workload,
 * a packet to a service frontend is DNAT'd to its connection's backend
 * first (dpd_nat.h), so everything below sees the backend; a live
 * conntrack entry of this hook, the reply of a flow the opposite hook
 * approved, or an ICMP/ICMPv6 error about a flow this interface passed
 * (PMTU discovery) passes; anything else is
 * described in dpd_state and tail-called into the endpoint's policy, which
 * writes its verdict and tail-calls the epilogue. No policy installed: drop.
 * A reply hitting the client's entry of a DNAT'd flow gets the frontend back
 * as its source on the way into the client. A packet leaving a workload that
 * passes goes straight to the destination workload's interface when it is
 * one of this node's (dpd_fwd.h), else to the host's stack.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "dpd_abi.h"
#include "dpd_maps.h"
#include "dpd_clock.h"
#include "dpd_ifstate.h"
#include "dpd_drops.h"
#include "dpd_parse.h"
#include "dpd_ct.h"
#include "dpd_nat.h"
#include "dpd_frag.h"
#include "dpd_ipv6.h"
#include "dpd_events.h"
#include "dpd_trace.h"
#include "dpd_hep.h"
#include "dpd_control.h"
#include "dpd_fwd.h"

char __license[] SEC("license") = "Dual BSD/GPL";

static __always_inline int dpd_entry(struct __sk_buff *skb, __u32 dir)
{
	struct dpd_ct_key key;
	struct dpd_nat nat = {};
	struct dpd_pkt p = {};
	struct dpd_ifstate ifs;
	struct dpd_ct_val *ct;
	struct dpd_state *st;
	struct ethhdr *eth;
	void *data, *data_end;
	__u32 zero = 0, ifindex, slot;
	__u64 now, trace;
	__be16 h_proto;
	int reply = 0;

	if (dpd_linear(skb, ETH_HLEN))
		return TC_ACT_SHOT;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return TC_ACT_SHOT;
	h_proto = eth->h_proto;
	if (h_proto == bpf_htons(ETH_P_ARP))
		return TC_ACT_OK;
	if (h_proto != bpf_htons(ETH_P_IP) && h_proto != bpf_htons(ETH_P_IPV6))
		return TC_ACT_SHOT;

	trace = skb->mark == DPD_TRACE_MARK;
	/* An all-zero trace says the packet never reached the policy. */
	if (trace)
		dpd_trace_flags(0);

	ifindex = skb->ifindex;
	ifs = dpd_ifstate_get(ifindex);
	if (!(ifs.flags & DPD_IF_READY))
		return TC_ACT_SHOT;
	slot = ifs.slot;

	if (dpd_parse_l3(skb, h_proto, &p, trace))
		return TC_ACT_SHOT;

	now = dpd_now();
	if (dpd_frag_track(&p, dir, ifindex, now, trace, skb->len))
		return TC_ACT_SHOT;
	if (dpd_ipv6_nd(&p)) {
		if (!trace)
			return TC_ACT_OK;
		p.flags |= DPD_ST_ICMP6_ND;
	}
	if (dir == DPD_DIR_FROM_WEP) {
		if (dpd_nat_from_wep(skb, &p, ifindex, now, trace, &nat)) {
			if (trace)
				dpd_trace_flags(p.flags);
			return TC_ACT_SHOT;
		}
	} else if (dpd_is_hairpin_addr(&p, p.saddr6) && skb->ingress_ifindex == ifindex) {
		/* A hairpinned request: it left this very workload. */
		__builtin_memcpy(p.saddr6, p.daddr6, 16);
		p.flags |= DPD_ST_HAIRPIN;
	}

	ct = dpd_ct_find_pkt(&key, &p, dir, ifindex, now, &reply);
	if (ct && !reply) {
		if (!trace) {
			dpd_ct_refresh(ct, &p, 0, now);
			dpd_ct_count(ct, 0, skb->len);
			if (nat.hairpin)
				return dpd_hairpin_redirect(skb, ifindex);
			if (dir == DPD_DIR_FROM_WEP)
				return dpd_fwd_local(skb, p.family, p.saddr6, p.daddr6, ifindex, now, &p);
			return TC_ACT_OK;
		}
		p.flags |= DPD_ST_CT_FWD;
	} else if (ct) {
		if (!trace) {
			dpd_ct_refresh(ct, &p, 1, now);
			dpd_ct_count(ct, 1, skb->len);
			if (dir == DPD_DIR_TO_WEP && (ct->flags & DPD_CT_F_NAT_FWD) &&
			    dpd_nat_reverse(skb, &p, ct))
				return TC_ACT_SHOT;
			if (dir == DPD_DIR_FROM_WEP)
				return dpd_fwd_local(skb, p.family, p.saddr6, p.daddr6, ifindex, now, &p);
			return TC_ACT_OK;
		}
		p.flags |= DPD_ST_CT_REV;
	} else if (p.has_inner && dpd_ct_related(&p, dir, ifindex, now)) {
		if (!trace)
			return TC_ACT_OK;
		p.flags |= DPD_ST_CT_RELATED;
	}

	st = bpf_map_lookup_elem(&dpd_state, &zero);
	if (!st)
		return TC_ACT_SHOT;
	__builtin_memset(st, 0, sizeof(*st));
	__builtin_memcpy(st->saddr, p.saddr6, 16);
	__builtin_memcpy(st->daddr, p.daddr6, 16);
	st->sport = p.sport;
	st->dport = p.dport;
	st->proto = p.proto;
	st->family = p.family;
	st->icmp_type = p.icmp_type;
	st->icmp_code = p.icmp_code;
	st->ifindex = ifindex;
	st->dir = dir;
	st->pkt_len = skb->len;
	st->flags = p.flags;
	st->trace = trace;
	if (p.flags & DPD_ST_NAT) {
		__builtin_memcpy(st->nat_addr, nat.fe_addr, 16);
		st->nat_port = nat.fe_port;
		st->nat_svc = nat.svc;
	}
	st->dst_route = dpd_route_flags(&p);

	bpf_tail_call(skb, &dpd_jump, DPD_JUMP_POL_BASE + 2 * slot + dir);

	/* Only reached when no policy is installed at the slot. */
	if (trace) {
		st->flags |= DPD_ST_NO_POLICY;
		dpd_trace_write(st);
	} else {
		dpd_event(st, DPD_EV_NO_POLICY);
	}
	return TC_ACT_SHOT;
}

SEC("tc")
int dpd_from_wep(struct __sk_buff *skb)
{
	return dpd_entry(skb, DPD_DIR_FROM_WEP);
}

SEC("tc")
int dpd_to_wep(struct __sk_buff *skb)
{
	return dpd_entry(skb, DPD_DIR_TO_WEP);
}

SEC("tc")
int dpd_epilogue(struct __sk_buff *skb)
{
	struct dpd_counter *ctr;
	struct dpd_state *st;
	__u8 preview_verdict = DPD_VERDICT_NONE;
	__u64 preview_rule = 0;
	__u32 zero = 0;

	st = bpf_map_lookup_elem(&dpd_state, &zero);
	if (!st)
		return TC_ACT_SHOT;
	if (st->flags & (DPD_ST_HEP_UNTRACKED | DPD_ST_HEP_PREDNAT))
		return dpd_hep_epilogue(skb, st);

	if (st->trace) {
		st->flags |= DPD_ST_EPILOGUE;
		dpd_trace_write(st);
		return st->verdict == DPD_VERDICT_ALLOW ? TC_ACT_OK : TC_ACT_SHOT;
	}

	if (st->flags & DPD_ST_PREVIEW)
		dpd_preview_back(st, &preview_verdict, &preview_rule);
	else
		dpd_preview_run(skb, st); /* returns only without a preview */
	if (st->rule_id) {
		ctr = bpf_map_lookup_elem(&dpd_rule_ctrs, &st->rule_id);
		if (ctr) {
			ctr->packets++;
			ctr->bytes += st->pkt_len;
		}
	}
	dpd_event_preview(st, DPD_EV_DECIDED, preview_verdict, preview_rule);
	if (st->verdict != DPD_VERDICT_ALLOW)
		return TC_ACT_SHOT;
	if (dpd_hep_wep_to_host(skb, st))
		return TC_ACT_SHOT;
	if (dpd_ct_create(st, 0)) {
		/* Its replies would meet the other direction's policy. */
		dpd_drop_count(DPD_DROP_CT_FULL, st->pkt_len);
		return TC_ACT_SHOT;
	}
	/* A hairpinned request goes straight back into the workload. */
	if (st->dir == DPD_DIR_FROM_WEP && (st->flags & DPD_ST_HAIRPIN))
		return dpd_hairpin_redirect(skb, st->ifindex);
	if (st->dir == DPD_DIR_FROM_WEP)
		return dpd_fwd_local(skb, st->family, st->saddr, st->daddr, st->ifindex, dpd_now(), 0);
	return TC_ACT_OK;
}
