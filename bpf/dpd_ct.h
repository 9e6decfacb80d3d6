/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_ct.h: conntrack keyed by the hook that approved the flow. Its key,
 * value and timeouts live in dpd_abi.h, so the userspace scanner reads the
 * same layout and applies the same timeouts; the maps are in dpd_maps.h
 * (dpd_conntrack, and an older dpd's dpd_ct while it may hold entries).
 */
#ifndef DPD_CT_H
#define DPD_CT_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include "dpd_abi.h"
#include "dpd_parse_types.h"
#include "dpd_maps.h"
#include "dpd_clock.h"

#define DPD_NS_PER_S 1000000000ull

/* Both FINs (or an RST): the connection is closed. */
#define DPD_CT_F_CLOSED (DPD_CT_F_FIN_ORIG | DPD_CT_F_FIN_REPLY)

/* dpd_ct_tcp_close is what a TCP packet's FIN or RST adds to its entry's
 * flags; reply says the packet came from the other side. */
static __always_inline __u32 dpd_ct_tcp_close(__u32 pkt_flags, int reply)
{
	if (pkt_flags & DPD_ST_TCP_RST)
		return DPD_CT_F_CLOSING | DPD_CT_F_CLOSED;
	if (pkt_flags & DPD_ST_TCP_FIN)
		return DPD_CT_F_CLOSING | (reply ? DPD_CT_F_FIN_REPLY : DPD_CT_F_FIN_ORIG);
	return 0;
}

static __always_inline __u64 dpd_ct_timeout_ns(__u8 proto, __u32 flags)
{
	switch (proto) {
	case IPPROTO_TCP:
		if ((flags & DPD_CT_F_CLOSED) == DPD_CT_F_CLOSED)
			return DPD_CT_TIMEOUT_TCP_CLOSED_S * DPD_NS_PER_S;
		if ((flags & (DPD_CT_F_ESTABLISHED | DPD_CT_F_CLOSING)) == DPD_CT_F_ESTABLISHED)
			return DPD_CT_TIMEOUT_TCP_EST_S * DPD_NS_PER_S;
		return DPD_CT_TIMEOUT_TCP_OTHER_S * DPD_NS_PER_S;
	case IPPROTO_UDP:
		return DPD_CT_TIMEOUT_UDP_S * DPD_NS_PER_S;
	case IPPROTO_ICMP:
	case DPD_IPPROTO_ICMPV6:
		return DPD_CT_TIMEOUT_ICMP_S * DPD_NS_PER_S;
	default:
		return DPD_CT_TIMEOUT_OTHER_S * DPD_NS_PER_S;
	}
}

/* dpd_ct_live: the entry has not idled out. Signed, because another CPU may
 * have written a last_seen slightly ahead of our now. */
static __always_inline int dpd_ct_live(const struct dpd_ct_val *v, __u8 proto, __u64 now)
{
	return (__s64)(now - v->last_seen) < (__s64)dpd_ct_timeout_ns(proto, v->flags);
}

/* dpd_ct_family is the dpd_ct_key.family of an address family (4 or 6). */
static __always_inline __u8 dpd_ct_family(__u8 family)
{
	return family == 6 ? DPD_CT_FAMILY_V6 : DPD_CT_FAMILY_V4;
}

/* dpd_ct_key_set fills k with the tuple saddr:sport -> daddr:dport as
 * approved by hook dir of ifindex (addresses 16 bytes, IPv4 in the first 4
 * and zero after, network order; ports in host order). Every byte is
 * written (keys are hashed whole; the struct has no holes), so no memset
 * comes first: on the established path that kept IPv4's cost as it was
 * with 4-byte addresses. */
static __always_inline void dpd_ct_key_set(struct dpd_ct_key *k, const __u8 *saddr, const __u8 *daddr,
					   __u16 sport, __u16 dport, __u8 proto, __u8 family,
					   __u32 dir, __u32 ifindex)
{
	__builtin_memcpy(k->saddr, saddr, 16);
	__builtin_memcpy(k->daddr, daddr, 16);
	k->sport = sport;
	k->dport = dport;
	k->proto = proto;
	k->family = dpd_ct_family(family);
	k->pad = 0;
	k->dir = dir;
	k->ifindex = ifindex;
}

/* Flow keys are normalized so that one lookup finds a flow in either
 * direction: the end with the lower address (then, except for ICMP echo,
 * the lower port) comes first, and dir is the approving hook's DPD_DIR_*
 * flipped when the tuple was swapped. An entry created at hook D for a
 * packet a->b and a reply b->a at the opposite hook D^1 then compute the
 * same key, while the same hook never matches the reverse direction; the
 * entry's DPD_CT_F_ORIG_HI says which end sent the first packet. On the
 * path of a new flow through two workloads that is one lookup per hook
 * instead of two, and every reply one instead of two. */

/* dpd_ct_addr_cmp orders addresses as four 32-bit words in network order. */
static __always_inline int dpd_ct_addr_cmp(const __u8 *a, const __u8 *b)
{
	__u32 x[4], y[4];

	__builtin_memcpy(x, a, 16);
	__builtin_memcpy(y, b, 16);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (x[i] != y[i])
			return bpf_ntohl(x[i]) < bpf_ntohl(y[i]) ? -1 : 1;
	}
	return 0;
}

static __always_inline int dpd_ct_is_icmp(__u8 proto)
{
	return proto == IPPROTO_ICMP || proto == DPD_IPPROTO_ICMPV6;
}

/* dpd_ct_key_rev_set fills k with the tuple the other way round, as hook
 * dir of ifindex sees it (ICMP echo keeps its ports). */
static __always_inline void dpd_ct_key_rev_set(struct dpd_ct_key *k, const __u8 *saddr, const __u8 *daddr,
					       __u16 sport, __u16 dport, __u8 proto, __u8 family,
					       __u32 dir, __u32 ifindex)
{
	if (dpd_ct_is_icmp(proto))
		dpd_ct_key_set(k, daddr, saddr, sport, dport, proto, family, dir, ifindex);
	else
		dpd_ct_key_set(k, daddr, saddr, dport, sport, proto, family, dir, ifindex);
}

/* dpd_ct_key_flow fills k with the normalized key of the tuple as hook
 * dir of ifindex sees it; 1: the tuple was swapped (its source is the
 * higher end). ICMP echo keeps its ports: sport is the identifier both
 * ways. */
static __always_inline int dpd_ct_key_flow(struct dpd_ct_key *k, const __u8 *saddr, const __u8 *daddr,
					   __u16 sport, __u16 dport, __u8 proto, __u8 family,
					   __u32 dir, __u32 ifindex)
{
	int c = dpd_ct_addr_cmp(saddr, daddr);

	if (c > 0 || (c == 0 && !dpd_ct_is_icmp(proto) && sport > dport)) {
		dpd_ct_key_rev_set(k, saddr, daddr, sport, dport, proto, family, dir ^ 1, ifindex);
		return 1;
	}
	dpd_ct_key_set(k, saddr, daddr, sport, dport, proto, family, dir, ifindex);
	return 0;
}

/* dpd_ct_symmetric: a tuple that reads the same both ways (a workload's
 * hairpin to itself on one port) cannot tell its hooks apart by
 * orientation; its reply is looked up under the opposite hook's key. */
static __always_inline int dpd_ct_symmetric(const struct dpd_ct_key *k)
{
	return dpd_ct_addr_cmp(k->saddr, k->daddr) == 0 &&
	       (dpd_ct_is_icmp(k->proto) || k->sport == k->dport);
}

/* dpd_ct_cfg_flags: what userspace says of older maps and programs
 * (DPD_CT_CFG_*). */
static __always_inline __u32 dpd_ct_cfg_flags(void)
{
	__u32 zero = 0;
	struct dpd_ct_cfg *cfg = bpf_map_lookup_elem(&dpd_ct_cfg, &zero);

	return cfg ? cfg->flags : DPD_CT_CFG_LRU | DPD_CT_CFG_LEGACY;
}

/* dpd_ct_lookup finds k in dpd_conntrack, or in the older dpd_ct while it
 * may hold entries. Userspace moves an entry by copying it into
 * dpd_conntrack, then deleting it from dpd_ct: a look at dpd_conntrack
 * again after missing both cannot miss an entry moved in between.
 * Separate calls per map keep each lookup inlined. */
static __always_inline struct dpd_ct_val *dpd_ct_lookup(const struct dpd_ct_key *k)
{
	struct dpd_ct_val *v = bpf_map_lookup_elem(&dpd_conntrack, k);

	if (!v && (dpd_ct_cfg_flags() & DPD_CT_CFG_LRU)) {
		v = bpf_map_lookup_elem(&dpd_ct, k);
		if (!v)
			v = bpf_map_lookup_elem(&dpd_conntrack, k);
	}
	return v;
}

/* dpd_ct_write stores an entry where every attached entry program finds
 * it: dpd_ct while entry programs of a dpd before dpd_conntrack run.
 * Non-zero: no room (dpd_conntrack is full). The barrier keeps clang from
 * merging the two calls into one whose map the verifier cannot know, which
 * would cost every write an indirect call. */
static __always_inline long dpd_ct_write(const struct dpd_ct_key *k, const struct dpd_ct_val *v)
{
	long err;

	if (dpd_ct_cfg_flags() & DPD_CT_CFG_WRITE_LRU) {
		err = bpf_map_update_elem(&dpd_ct, k, v, BPF_ANY);
		asm volatile("" : "+r"(err));
		return err;
	}
	return bpf_map_update_elem(&dpd_conntrack, k, v, BPF_ANY);
}

/* dpd_ct_find: the live entry by which hook dir of ifindex passes the
 * tuple: one this hook created for a packet going the same way, or one the
 * opposite hook created for a packet going the other way (then *reply is
 * 1). k is scratch. */
static __always_inline struct dpd_ct_val *dpd_ct_find(struct dpd_ct_key *k, const __u8 *saddr, const __u8 *daddr,
						      __u16 sport, __u16 dport, __u8 proto, __u8 family,
						      __u32 dir, __u32 ifindex, __u64 now, int *reply)
{
	struct dpd_ct_val *v;
	int swapped;

	swapped = dpd_ct_key_flow(k, saddr, daddr, sport, dport, proto, family, dir, ifindex);
	v = dpd_ct_lookup(k);
	if (v && dpd_ct_live(v, proto, now)) {
		*reply = swapped != !!(v->flags & DPD_CT_F_ORIG_HI);
		return v;
	}
	if (dpd_ct_symmetric(k)) {
		k->dir ^= 1;
		v = dpd_ct_lookup(k);
		if (v && dpd_ct_live(v, proto, now)) {
			*reply = 1;
			return v;
		}
		return 0;
	}
	if (!(dpd_ct_cfg_flags() & DPD_CT_CFG_LEGACY))
		return 0;
	/* A legacy entry of a tuple whose source is the lower end has the
	 * normalized key already; only the other orientation needs a look.
	 * Legacy entries are only ever in dpd_ct. */
	if (swapped) {
		dpd_ct_key_set(k, saddr, daddr, sport, dport, proto, family, dir, ifindex);
		*reply = 0;
	} else {
		dpd_ct_key_rev_set(k, saddr, daddr, sport, dport, proto, family, dir ^ 1, ifindex);
		*reply = 1;
	}
	v = bpf_map_lookup_elem(&dpd_ct, k);
	return v && dpd_ct_live(v, proto, now) ? v : 0;
}

/* dpd_ct_find_pkt is dpd_ct_find for the packet's own tuple. */
static __always_inline struct dpd_ct_val *dpd_ct_find_pkt(struct dpd_ct_key *k, const struct dpd_pkt *p,
							  __u32 dir, __u32 ifindex, __u64 now, int *reply)
{
	return dpd_ct_find(k, p->saddr6, p->daddr6, p->sport, p->dport, p->proto, p->family, dir, ifindex,
			   now, reply);
}

/* dpd_ct_related: is this ICMP error about a flow this interface passed?
 * The quoted packet went the other way through this interface, so it was
 * approved either as a new flow at the opposite hook or as a reply at this
 * one: both are what the opposite hook's lookup of the quoted tuple finds.
 * Replies are not refreshed by errors: an error says the flow is failing. */
static __always_inline int dpd_ct_related(const struct dpd_pkt *p, __u32 dir, __u32 ifindex, __u64 now)
{
	struct dpd_ct_key k;
	int reply;

	return !!dpd_ct_find(&k, p->inner_saddr6, p->inner_daddr6, p->inner_sport, p->inner_dport,
			     p->inner_proto, p->family, dir ^ 1, ifindex, now, &reply);
}

/* dpd_ct_refresh records a live hit. Plain stores: a lost flag race only
 * costs a shorter timeout, and the next packet sets it again. */
static __always_inline void dpd_ct_refresh(struct dpd_ct_val *v, const struct dpd_pkt *p,
					   int reply, __u64 now)
{
	__u32 set = 0;

	if (p->proto == IPPROTO_TCP) {
		set |= dpd_ct_tcp_close(p->flags, reply);
		if (reply && (p->flags & DPD_ST_TCP_ACK))
			set |= DPD_CT_F_ESTABLISHED;
	}
	if (set & ~v->flags)
		v->flags |= set;
	/* Signed: the clock may step back a tick at a sync (dpd_clock.h). */
	if ((__s64)(now - v->last_seen) > (__s64)DPD_CT_REFRESH_NS)
		v->last_seen = now;
}

/* dpd_ct_count adds a live hit to the entry's totals for its end event.
 * Plain adds: atomic ones cost the established path 8 ns a packet (of ~50)
 * where these cost 1-2, and only packets of one flow and direction handled
 * on two CPUs at the same instant can lose a count (a veth flow's packets
 * are mostly handled on one CPU). */
static __always_inline void dpd_ct_count(struct dpd_ct_val *v, int reply, __u32 len)
{
	if (reply) {
		v->pkts_rev++;
		v->bytes_rev += len;
	} else {
		v->pkts_fwd++;
		v->bytes_fwd += len;
	}
}

/* dpd_ct_create records the flow the policy just allowed at this hook,
 * with extra DPD_CT_F_* flags; the old way while a dpd before normalized
 * keys may still run entry programs that read them. Non-zero: there is no
 * room for it (dpd_conntrack is full). */
static __always_inline long dpd_ct_create(const struct dpd_state *st, __u32 flags)
{
	struct dpd_ct_key k;
	struct dpd_ct_val v = {};
	__u64 now = dpd_now();

	if (dpd_ct_cfg_flags() & DPD_CT_CFG_WRITE_LEGACY)
		dpd_ct_key_set(&k, st->saddr, st->daddr, st->sport, st->dport, st->proto, st->family,
			       st->dir, st->ifindex);
	else if (dpd_ct_key_flow(&k, st->saddr, st->daddr, st->sport, st->dport, st->proto, st->family,
				 st->dir, st->ifindex))
		flags |= DPD_CT_F_ORIG_HI;
	v.created = now;
	v.last_seen = now;
	v.rule_id = st->rule_id;
	v.pkts_fwd = 1;
	v.bytes_fwd = st->pkt_len;
	if (st->proto == IPPROTO_TCP)
		flags |= dpd_ct_tcp_close(st->flags, 0);
	if (st->flags & DPD_ST_NAT) {
		/* The client's hook of a DNAT'd flow: replies get the frontend back. */
		flags |= DPD_CT_F_NAT_FWD;
		if (st->flags & DPD_ST_HAIRPIN)
			flags |= DPD_CT_F_HAIRPIN;
		__builtin_memcpy(v.nat_addr, st->nat_addr, 16);
		v.nat_port = st->nat_port;
		v.nat_svc = st->nat_svc;
	}
	v.flags = flags;
	return dpd_ct_write(&k, &v);
}

#endif
