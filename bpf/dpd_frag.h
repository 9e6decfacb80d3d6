/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_frag.h: fragments follow their first fragment. The scheme, key and
 * value are described with dpd_frags in dpd_abi.h; the maps are in
 * dpd_maps.h. Family-neutral: the parser fills dpd_pkt.frag and frag_id
 * for either family, and the key carries the family.
 *
 * Runs right after parsing, before NAT and conntrack, so the key is made of
 * the addresses the fragments carry on the wire. Trace runs read the map
 * but never write it or count.
 */
#ifndef DPD_FRAG_H
#define DPD_FRAG_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "dpd_abi.h"
#include "dpd_maps.h"
#include "dpd_drops.h"
#include "dpd_parse_types.h"
#include "dpd_ct.h"

static __always_inline void dpd_frag_key_set(struct dpd_frag_key *k, const struct dpd_pkt *p,
					     __u32 dir, __u32 ifindex)
{
	__builtin_memset(k, 0, sizeof(*k));
	__builtin_memcpy(k->saddr, p->saddr6, 16);
	__builtin_memcpy(k->daddr, p->daddr6, 16);
	k->id = p->frag_id;
	k->proto = p->frag_proto;
	k->family = p->family;
	k->dir = dir;
	k->ifindex = ifindex;
}

/* dpd_frag_track records a first fragment's L4 facts, or gives a later
 * fragment those of its first fragment. Non-zero: drop (the first piece was
 * not seen at this hook, or a tiny TCP fragment), already counted. */
static __always_inline int dpd_frag_track(struct dpd_pkt *p, __u32 dir, __u32 ifindex,
					  __u64 now, __u64 trace, __u32 len)
{
	struct dpd_frag_key k;
	struct dpd_frag_val *v;

	if (p->frag == DPD_FRAG_NONE)
		return 0;
	if (p->frag == DPD_FRAG_TINY) {
		if (!trace)
			dpd_drop_count(DPD_DROP_FRAG_TINY, len);
		return -1;
	}
	dpd_frag_key_set(&k, p, dir, ifindex);
	if (p->frag == DPD_FRAG_FIRST) {
		struct dpd_frag_val nv = {};

		if (trace)
			return 0;
		nv.seen = now;
		nv.sport = p->sport;
		nv.dport = p->dport;
		nv.icmp_type = p->icmp_type;
		nv.icmp_code = p->icmp_code;
		nv.proto = p->proto;
		/* A full map evicts the oldest datagram: LRU. */
		bpf_map_update_elem(&dpd_frags, &k, &nv, BPF_ANY);
		return 0;
	}
	v = bpf_map_lookup_elem(&dpd_frags, &k);
	if (!v || (__s64)(now - v->seen) >= (__s64)(DPD_FRAG_TIMEOUT_S * DPD_NS_PER_S)) {
		if (!trace)
			dpd_drop_count(DPD_DROP_FRAG_NO_FIRST, len);
		return -1;
	}
	p->sport = v->sport;
	p->dport = v->dport;
	p->icmp_type = v->icmp_type;
	p->icmp_code = v->icmp_code;
	p->proto = v->proto;
	return 0;
}

#endif
