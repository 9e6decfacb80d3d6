/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_hep.h: the entry programs of host endpoints, attached to the node's
 * own interfaces (eth0, bond0, ...) that a host endpoint binds.
 *
 *   dpd_hep_in   TC ingress: traffic through the interface to the host
 *                itself: the host endpoint's ingress policy (dir TO_WEP)
 *   dpd_hep_out  TC egress: traffic from the host itself out of the
 *                interface: its egress policy (dir FROM_WEP)
 *
 * The directions reuse the workload hooks' numbering from the endpoint's
 * point of view, so a host endpoint's slot in dpd_jump, its conntrack
 * entries (keyed by ifindex and dir) and the epilogue work unchanged.
 *
 * Flow: anything but IPv4 and IPv6 passes (ARP, LLDP, ...); an interface
 * without a READY|HOST dpd_ifstate entry passes (host interfaces are never
 * failed closed). Both families take one path over dpd_pkt, parsed as the
 * workload entry parses them (dpd_parse_l3); ICMPv6 neighbour discovery,
 * router solicitation and advertisement and MLD (v1 and v2) pass without
 * policy (dpd_hep_nd), or the node loses its IPv6 neighbours, routes and
 * multicast groups under a deny policy. Traffic the host forwards (to or
 * from workloads, routed through) is told apart from the host's own: at
 * ingress its destination is not one of the host's addresses (FIB lookup),
 * at egress it came in through another interface (skb->ingress_ifindex
 * set). Forwarded traffic passes unless the host endpoint has forward
 * policy (the forward slot in dpd_ifstate.flags), which then polices it
 * like the host's own, failsafes aside. A live conntrack entry, a reply or
 * a related ICMP error passes; a failsafe port (dpd_failsafes, IPv6:
 * dpd_failsafes6) passes and
 * is tracked, so its replies pass; the rest is described in dpd_state and
 * tail-called into the policy of the slot, which tail-calls the epilogue.
 * No policy program at the slot: pass (never fail a host interface
 * closed). A trace run (DPD_TRACE_MARK) writes nothing but dpd_trace:
 * all zero when the interface does not police the packet, and failsafe
 * and ND packets go on into the policy flagged, so Inspect says both why
 * they pass and what the policy would say.
 */
#ifndef DPD_HEP_H
#define DPD_HEP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "dpd_abi.h"
#include "dpd_maps.h"
#include "dpd_clock.h"
#include "dpd_ifstate.h"
#include "dpd_parse.h"
#include "dpd_ct.h"
#include "dpd_frag.h"
#include "dpd_nat.h"
#include "dpd_events.h"
#include "dpd_ipv6.h"
#include "dpd_trace.h"

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/* The policy compiler's counter id of "no rule matched" (rule_id of the
 * final deny), per DPD_DIR_*: a staged evaluation that ends there goes on.
 * Tests check them against abi.go and dataplane/tcbpf/polprog. */
#define DPD_NOMATCH_ID_FROM_WEP 0xc0e77e9198c7edf2ull
#define DPD_NOMATCH_ID_TO_WEP   0xdce21320d0ec74efull

/* The stages of dpd_hep_entry, in order; a continuation starts at one. */
#define DPD_HEP_STAGE_UNTRACKED 0
#define DPD_HEP_STAGE_PREDNAT   1
#define DPD_HEP_STAGE_MAIN      2

/* dpd_hep_failsafe: is p on a failsafe port? Inbound ports name the
 * destination port with the source as peer; outbound ones the destination
 * port and address. Each family has its map: the IPv6 key is the IPv4 one
 * with a 16-byte address. */
static __always_inline int dpd_hep_failsafe(const struct dpd_pkt *p, __u32 dir)
{
	struct dpd_failsafe6_key k = {};
	const __u8 *peer = dir == DPD_DIR_TO_WEP ? p->saddr6 : p->daddr6;

	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP)
		return 0;
	k.port = p->dport;
	k.proto = p->proto;
	k.flags = dir == DPD_DIR_TO_WEP ? DPD_FS_INBOUND : DPD_FS_OUTBOUND;
	if (p->family == 6) {
		k.prefixlen = DPD_FS_KEY_FIXED_BITS + 128;
		__builtin_memcpy(k.addr, peer, 16);
		return bpf_map_lookup_elem(&dpd_failsafes6, &k) != 0;
	}
	/* The IPv4 key is the head of the IPv6 one. */
	k.prefixlen = DPD_FS_KEY_FIXED_BITS + 32;
	__builtin_memcpy(k.addr, peer, 4);
	return bpf_map_lookup_elem(&dpd_failsafes, &k) != 0;
}

/* dpd_hep_nd: ICMPv6 a host interface passes without policy: the
 * neighbour discovery and MLD a workload interface passes (dpd_ipv6_nd),
 * router advertisements (134), which a node, unlike a workload, takes its
 * default route and addresses from, and MLDv2 reports (143), which Linux
 * sends by default: a switch snooping MLD stops forwarding the node's
 * solicited-node multicast, so neighbour discovery, without them. */
static __always_inline int dpd_hep_nd(const struct dpd_pkt *p)
{
	return dpd_ipv6_nd(p) || (p->family == 6 && p->proto == DPD_IPPROTO_ICMPV6 &&
				  p->frag == DPD_FRAG_NONE && (p->icmp_type == 134 || p->icmp_type == 143));
}

/* dpd_hep_failsafe_reply: is p a reply of a failsafe flow of this
 * interface (approved at the opposite hook)? */
static __always_inline int dpd_hep_failsafe_reply(const struct dpd_pkt *p, __u32 dir, __u32 ifindex, __u64 now)
{
	struct dpd_ct_key k;
	struct dpd_ct_val *v;
	int reply = 0;

	v = dpd_ct_find_pkt(&k, p, dir, ifindex, now, &reply);
	return v && reply && (v->flags & DPD_CT_F_FAILSAFE);
}

/* dpd_hep_to_host: does traffic entering ifindex go to the host itself?
 * The FIB says so for the host's own addresses (and broadcasts): "not
 * forwarded"; IPv6 also for link-local and multicast destinations. With
 * forwarding off on the interface (per family) nothing is forwarded, so
 * everything is the host's. */
static __always_inline int dpd_hep_to_host(struct __sk_buff *skb, const struct dpd_pkt *p, __u32 ifindex)
{
	struct bpf_fib_lookup fib = {};
	long rc;

	fib.l4_protocol = p->proto;
	fib.tot_len = skb->len > ETH_HLEN ? skb->len - ETH_HLEN : 0;
	if (p->family == 6) {
		fib.family = AF_INET6;
		__builtin_memcpy(fib.ipv6_src, p->saddr6, 16);
		__builtin_memcpy(fib.ipv6_dst, p->daddr6, 16);
	} else {
		fib.family = AF_INET;
		fib.ipv4_src = p->saddr;
		fib.ipv4_dst = p->daddr;
	}
	fib.ifindex = ifindex;
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	return rc == BPF_FIB_LKUP_RET_NOT_FWDED || rc == BPF_FIB_LKUP_RET_FWD_DISABLED;
}

static __always_inline void dpd_hep_fill(struct dpd_state *st, const struct dpd_pkt *p,
					 struct __sk_buff *skb, __u32 ifindex, __u32 dir, __u64 trace)
{
	__builtin_memset(st, 0, sizeof(*st));
	__builtin_memcpy(st->saddr, p->saddr6, 16);
	__builtin_memcpy(st->daddr, p->daddr6, 16);
	st->sport = p->sport;
	st->dport = p->dport;
	st->proto = p->proto;
	st->family = p->family;
	st->icmp_type = p->icmp_type;
	st->icmp_code = p->icmp_code;
	st->ifindex = ifindex;
	st->dir = dir;
	st->pkt_len = skb->len;
	st->flags = p->flags;
	st->trace = trace;
}

static __always_inline int dpd_hep_entry(struct __sk_buff *skb, __u32 dir, __u32 stage)
{
	struct dpd_hep_stages *sg;
	struct dpd_ct_key key;
	struct dpd_pkt p = {};
	struct dpd_ifstate ifs;
	struct dpd_ct_val *ct;
	struct dpd_state *st;
	struct ethhdr *eth;
	void *data, *data_end;
	__u32 zero = 0, ifindex, slot, flags, untracked = 0, prednat = 0;
	__u64 now, trace;
	__be16 h_proto;
	int fwd, failsafe, reply = 0;

	if (dpd_linear(skb, ETH_HLEN))
		return TC_ACT_OK; /* not even Ethernet: the stack decides */
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return TC_ACT_OK;
	h_proto = eth->h_proto;
	if (h_proto != bpf_htons(ETH_P_IP) && h_proto != bpf_htons(ETH_P_IPV6))
		return TC_ACT_OK;

	/* A trace starts all zero: "passed unpoliced" unless written below. */
	trace = skb->mark == DPD_TRACE_MARK;
	if (trace && stage == DPD_HEP_STAGE_UNTRACKED)
		dpd_trace_flags(0);

	ifindex = skb->ifindex;
	ifs = dpd_ifstate_get(ifindex);
	flags = ifs.flags;
	if ((flags & (DPD_IF_READY | DPD_IF_HOST)) != (DPD_IF_READY | DPD_IF_HOST))
		return TC_ACT_OK;
	slot = ifs.slot;
	sg = bpf_map_lookup_elem(&dpd_hep_stages, &ifindex);
	if (sg) {
		untracked = sg->untracked;
		prednat = sg->prednat;
	}
	if (dpd_parse_l3(skb, h_proto, &p, trace))
		return TC_ACT_SHOT; /* malformed IP on a policed interface */

	/* Forwarded traffic is not the host's: of the host endpoint's
	 * policies, untracked (ingress), pre-DNAT and forward apply to it. */
	if (dir == DPD_DIR_TO_WEP)
		fwd = !dpd_hep_to_host(skb, &p, ifindex);
	else
		fwd = skb->ingress_ifindex != 0 && !trace;

	now = dpd_now();
	if (dpd_frag_track(&p, dir, ifindex, now, trace, skb->len))
		return TC_ACT_SHOT;

	st = bpf_map_lookup_elem(&dpd_state, &zero);
	if (!st)
		return TC_ACT_OK;

	/* Before every stage: no untracked, pre-DNAT or forward policy may
	 * cut the node off its IPv6 neighbours either. A trace goes on to
	 * show what the policy would say, as on workloads. */
	if (dpd_hep_nd(&p)) {
		if (!trace)
			return TC_ACT_OK;
		p.flags |= DPD_ST_ICMP6_ND;
	}

	failsafe = !fwd && !(p.flags & DPD_ST_FRAGMENT) && dpd_hep_failsafe(&p, dir);

	/* Untracked: before conntrack, nothing it allows is tracked. Failsafe
	 * traffic, and the replies of failsafe flows, skip it. */
	if (stage <= DPD_HEP_STAGE_UNTRACKED && untracked && (dir == DPD_DIR_TO_WEP || !fwd) &&
	    !failsafe && !dpd_hep_failsafe_reply(&p, dir, ifindex, now)) {
		dpd_hep_fill(st, &p, skb, ifindex, dir, trace);
		st->flags |= DPD_ST_HEP_UNTRACKED;
		st->dst_route = dpd_route_flags(&p);
		bpf_tail_call(skb, &dpd_jump, DPD_JUMP_POL_BASE + 2 * (untracked - 1) + dir);
		/* No program: go on. */
	}

	ct = dpd_ct_find_pkt(&key, &p, dir, ifindex, now, &reply);
	if (ct) {
		if (!trace) {
			dpd_ct_refresh(ct, &p, reply, now);
			return TC_ACT_OK;
		}
		p.flags |= reply ? DPD_ST_CT_REV : DPD_ST_CT_FWD;
	} else if (p.has_inner && dpd_ct_related(&p, dir, ifindex, now)) {
		if (!trace)
			return TC_ACT_OK;
		p.flags |= DPD_ST_CT_RELATED;
	}

	/* Pre-DNAT: new flows entering through the interface. */
	if (stage <= DPD_HEP_STAGE_PREDNAT && prednat && dir == DPD_DIR_TO_WEP && !failsafe) {
		dpd_hep_fill(st, &p, skb, ifindex, dir, trace);
		st->flags |= DPD_ST_HEP_PREDNAT;
		st->dst_route = dpd_route_flags(&p);
		bpf_tail_call(skb, &dpd_jump, DPD_JUMP_POL_BASE + 2 * (prednat - 1) + dir);
	}

	dpd_hep_fill(st, &p, skb, ifindex, dir, trace);
	if (fwd) {
		if (!(flags >> DPD_IF_FWD_SHIFT)) {
			/* Forwarded, no forward policy: unpoliced. */
			if (trace) {
				st->flags |= DPD_ST_NO_POLICY;
				bpf_map_update_elem(&dpd_trace, &zero, st, BPF_ANY);
			}
			return TC_ACT_OK;
		}
		slot = (flags >> DPD_IF_FWD_SHIFT) - 1;
	}

	if (failsafe && trace) {
		/* Passes; the trace shows what the policy would say. */
		st->flags |= DPD_ST_FAILSAFE;
	} else if (failsafe) {
		/* Failsafe passes even without room for its entry. */
		dpd_ct_create(st, DPD_CT_F_FAILSAFE);
		return TC_ACT_OK;
	}
	st->dst_route = dpd_route_flags(&p);

	bpf_tail_call(skb, &dpd_jump, DPD_JUMP_POL_BASE + 2 * slot + dir);

	/* No policy program at the slot: a host interface is never failed
	 * closed on its own. */
	if (trace) {
		st->flags |= DPD_ST_NO_POLICY;
		bpf_map_update_elem(&dpd_trace, &zero, st, BPF_ANY);
	}
	return TC_ACT_OK;
}

/* dpd_hep_wep_to_host: the epilogue allowed a new flow out of a workload;
 * if it goes to the host itself (either family), DefaultEndpointToHostAction decides:
 * Accept (0: go on), Drop (1: drop), Return: the wildcard host endpoint's
 * ingress policy, tail-called with DPD_ST_HEP_TOHOST so its epilogue
 * passes here only once (no such policy: go on). */
static __always_inline int dpd_hep_wep_to_host(struct __sk_buff *skb, struct dpd_state *st)
{
	struct bpf_fib_lookup fib = {};
	struct dpd_hep_cfg *cfg;
	__u32 zero = 0, ifindex = st->ifindex, slot;
	long rc;

	if (st->dir != DPD_DIR_FROM_WEP || (st->flags & DPD_ST_HEP_TOHOST))
		return 0;
	cfg = bpf_map_lookup_elem(&dpd_hep_cfg, &zero);
	if (!cfg || cfg->to_host == DPD_TO_HOST_ACCEPT)
		return 0;
	if (cfg->to_host == DPD_TO_HOST_RETURN && !cfg->to_host_slot)
		return 0;
	slot = cfg->to_host_slot;
	if (!(dpd_ifstate_get(ifindex).flags & DPD_IF_WORKLOAD))
		return 0;
	fib.l4_protocol = st->proto;
	if (st->family == 6) {
		fib.family = AF_INET6;
		__builtin_memcpy(fib.ipv6_src, st->saddr, 16);
		__builtin_memcpy(fib.ipv6_dst, st->daddr, 16);
	} else {
		fib.family = AF_INET;
		__builtin_memcpy(&fib.ipv4_src, st->saddr, 4);
		__builtin_memcpy(&fib.ipv4_dst, st->daddr, 4);
	}
	fib.ifindex = ifindex;
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_NOT_FWDED)
		return 0;
	if (cfg->to_host == DPD_TO_HOST_DROP)
		return 1;
	st->flags |= DPD_ST_HEP_TOHOST;
	st->verdict = DPD_VERDICT_NONE;
	st->rule_id = 0;
	st->chain_pos = 0; /* the compiler's own state starts afresh */
	__builtin_memset(st->pol_scratch, 0, sizeof(st->pol_scratch));
	bpf_tail_call(skb, &dpd_jump, DPD_JUMP_POL_BASE + 2 * (slot - 1) + DPD_DIR_TO_WEP);
	return 0; /* no program: accepted */
}

/* dpd_hep_epilogue ends a staged evaluation (DPD_ST_HEP_*), called by the
 * epilogue: untracked allow passes untracked, an explicit deny drops, and
 * no match (or a pre-DNAT allow) goes on to the next stage through the
 * continuation of the hook. */
static __always_inline int dpd_hep_epilogue(struct __sk_buff *skb, struct dpd_state *st)
{
	__u64 nomatch = st->dir == DPD_DIR_TO_WEP ? DPD_NOMATCH_ID_TO_WEP : DPD_NOMATCH_ID_FROM_WEP;
	struct dpd_counter *ctr;
	__u32 zero = 0;
	int on;

	on = st->rule_id == nomatch ||
	     ((st->flags & DPD_ST_HEP_PREDNAT) && st->verdict == DPD_VERDICT_ALLOW);
	if (st->rule_id && st->rule_id != nomatch && !st->trace) {
		ctr = bpf_map_lookup_elem(&dpd_rule_ctrs, &st->rule_id);
		if (ctr) {
			ctr->packets++;
			ctr->bytes += st->pkt_len;
		}
	}
	if (on) {
		bpf_tail_call(skb, &dpd_jump, st->dir == DPD_DIR_TO_WEP ? DPD_JUMP_HEP_CONT_TO_WEP : DPD_JUMP_HEP_CONT_FROM_WEP);
		return TC_ACT_OK; /* no continuation: unpoliced, never closed */
	}
	if (st->trace) {
		st->flags |= DPD_ST_EPILOGUE;
		bpf_map_update_elem(&dpd_trace, &zero, st, BPF_ANY);
	} else {
		dpd_event(st, DPD_EV_DECIDED);
	}
	return st->verdict == DPD_VERDICT_ALLOW ? TC_ACT_OK : TC_ACT_SHOT;
}

/* dpd_hep_cont: the stage after the one dpd_state says just went on. */
static __always_inline int dpd_hep_cont(struct __sk_buff *skb, __u32 dir)
{
	struct dpd_state *st;
	__u32 zero = 0;

	st = bpf_map_lookup_elem(&dpd_state, &zero);
	if (!st)
		return TC_ACT_OK;
	if (st->flags & DPD_ST_HEP_UNTRACKED)
		return dpd_hep_entry(skb, dir, DPD_HEP_STAGE_PREDNAT);
	return dpd_hep_entry(skb, dir, DPD_HEP_STAGE_MAIN);
}

SEC("tc")
int dpd_hep_in(struct __sk_buff *skb)
{
	return dpd_hep_entry(skb, DPD_DIR_TO_WEP, DPD_HEP_STAGE_UNTRACKED);
}

SEC("tc")
int dpd_hep_out(struct __sk_buff *skb)
{
	return dpd_hep_entry(skb, DPD_DIR_FROM_WEP, DPD_HEP_STAGE_UNTRACKED);
}

/* At dpd_jump[DPD_JUMP_HEP_CONT_*]: the rest of a staged evaluation. */
SEC("tc")
int dpd_hep_in_cont(struct __sk_buff *skb)
{
	return dpd_hep_cont(skb, DPD_DIR_TO_WEP);
}

SEC("tc")
int dpd_hep_out_cont(struct __sk_buff *skb)
{
	return dpd_hep_cont(skb, DPD_DIR_FROM_WEP);
}

#endif
