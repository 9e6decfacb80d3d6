/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_fwd.h: a packet a workload sends to another workload of this node,
 * once dpd_from_wep has passed it, goes straight to the egress of the
 * destination's host-side interface (bpf_redirect), where dpd_to_wep
 * polices it as it would after routing. The host's IP stack (its input
 * route, netfilter hooks, forwarding and neighbour output) is skipped:
 * for two workloads on one node that is most of what a packet costs the
 * host. The hop is only taken where the stack would forward the packet
 * unchanged but for what is done here (the TTL or hop limit decremented,
 * the Ethernet addresses of the route's neighbour); anything else goes on
 * to the stack, which decides as before:
 *   - addressed to the interface's own MAC, a plain IPv4 header (no
 *     options) or an IPv6 one without a hop-by-hop header, from a
 *     non-link-local source, a TTL or hop limit above 1;
 *   - the node routes the source back out of the interface the packet
 *     came in on (strict reverse path, what rp_filter and the dpd-rpf
 *     table check: no workload sends as another past the receiver's
 *     source-address policy);
 *   - the route to the destination is forwarded (forwarding on for the
 *     interface, unicast), its neighbour is known, the packet fits the
 *     output interface, and that interface is another ready workload
 *     interface of dpd's (so its dpd_to_wep runs; the host itself,
 *     other nodes and unpoliced interfaces keep the stack and its
 *     netfilter, NAT included).
 * dpd_fwd_cfg can send everything through the stack instead.
 *
 * A packet of an established flow whose destination hook has a live
 * conntrack entry for it (dpd_to_wep would pass it on that entry and do
 * nothing else) goes further: bpf_redirect_peer puts it straight into the
 * destination workload's namespace, on the ingress of the peer of its
 * host-side interface, and the entry's refresh and counts that dpd_to_wep
 * would have made are made here. That skips the host-side interface's
 * egress (dpd_to_wep's run, the veth's transmit) and a backlog queue: for
 * two workloads on one node, what the host's stack costs a packet without
 * dpd. Only where dpd_to_wep would have done no more: not a fragment (its
 * hook tracks them), not a reply that gets a service frontend back
 * (DPD_CT_F_NAT_FWD), not the policy's first packet of a flow. What it
 * costs is visibility: a capture on the host-side interface does not see
 * these packets (DPD_FWD_CFG_NO_PEER turns it off).
 *
 * The two FIB lookups are most of what the hop costs, and a pair of
 * workloads exchanges many packets: their outcome is kept per CPU in
 * dpd_fwd_cache for DPD_FWD_CACHE_NS, keyed by the interface the packet
 * entered on and its two addresses. A hit still checks, per packet, what
 * the lookups do not decide for a pair (the packet's own header, its size
 * against the output interface's MTU) and that the output interface is
 * still a ready workload interface of dpd's, so a removed endpoint's
 * interface stops receiving at once.
 */
#ifndef DPD_FWD_H
#define DPD_FWD_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "dpd_abi.h"
#include "dpd_maps.h"
#include "dpd_ifstate.h"
#include "dpd_parse_types.h"
#include "dpd_ct.h"

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/* dpd_fwd_fib fills a lookup from src to dst entering on ifindex. */
static __always_inline void dpd_fwd_fib(struct bpf_fib_lookup *fib, __u8 family, const __u8 *src,
					const __u8 *dst, __u32 ifindex)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->ifindex = ifindex;
	if (family == 6) {
		fib->family = AF_INET6;
		__builtin_memcpy(fib->ipv6_src, src, 16);
		__builtin_memcpy(fib->ipv6_dst, dst, 16);
	} else {
		fib->family = AF_INET;
		__builtin_memcpy(&fib->ipv4_src, src, 4);
		__builtin_memcpy(&fib->ipv4_dst, dst, 4);
	}
}

/* dpd_fwd_cache_slot is this CPU's cache entry for a packet entering on
 * ifindex from saddr to daddr (16 bytes each, 4-byte aligned; an IPv4
 * address in the first 4, the rest zero). */
static __always_inline struct dpd_fwd_cache_ent *dpd_fwd_cache_slot(const __u8 *saddr, const __u8 *daddr,
								     __u32 ifindex)
{
	__u32 s[4], d[4], h, idx;

	__builtin_memcpy(s, __builtin_assume_aligned(saddr, 4), 16);
	__builtin_memcpy(d, __builtin_assume_aligned(daddr, 4), 16);
	h = (s[0] ^ s[1] ^ s[2] ^ s[3]) * 0x9e3779b1u;
	h ^= (d[0] ^ d[1] ^ d[2] ^ d[3]) * 0x85ebca6bu;
	h ^= ifindex * 0xc2b2ae35u;
	idx = (h * 0x9e3779b1u) >> (32 - DPD_FWD_CACHE_BITS);
	return bpf_map_lookup_elem(&dpd_fwd_cache, &idx);
}

/* dpd_fwd_cache_hit says e holds the outcome for the pair, still live. */
static __always_inline int dpd_fwd_cache_hit(const struct dpd_fwd_cache_ent *e, __u8 family, const __u8 *saddr,
					     const __u8 *daddr, __u32 ifindex, __u64 now)
{
	__u32 a[8], b[8];

	if (!e->oif || e->ifindex != ifindex || e->family != family || now >= e->expires)
		return 0;
	__builtin_memcpy(a, e->saddr, 32);
	__builtin_memcpy(b, __builtin_assume_aligned(saddr, 4), 16);
	__builtin_memcpy(&b[4], __builtin_assume_aligned(daddr, 4), 16);
	return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4]) | (a[5] ^ b[5]) |
		(a[6] ^ b[6]) | (a[7] ^ b[7])) == 0;
}

/* dpd_fwd_cache_fill keeps a lookup's outcome. */
static __always_inline void dpd_fwd_cache_fill(struct dpd_fwd_cache_ent *e, __u8 family, const __u8 *saddr,
					       const __u8 *daddr, __u32 ifindex, __u32 oif, const __u8 *macs,
					       __u64 now)
{
	__builtin_memcpy(e->saddr, __builtin_assume_aligned(saddr, 4), 16);
	__builtin_memcpy(e->daddr, __builtin_assume_aligned(daddr, 4), 16);
	__builtin_memcpy(e->macs, macs, sizeof(e->macs));
	e->ifindex = ifindex;
	e->family = family;
	e->expires = now + DPD_FWD_CACHE_NS;
	e->oif = oif;
}

/* dpd_fwd_peer says whether a packet p, going to oif, may skip oif's
 * dpd_to_wep: that hook has a live entry that passes it, and the entry is
 * refreshed and counted as that hook would have. */
static __always_inline int dpd_fwd_peer(const struct dpd_pkt *p, __u32 oif, __u32 len, __u64 now)
{
	struct dpd_ct_key k;
	struct dpd_ct_val *v;
	int reply = 0;

	if (p->frag != DPD_FRAG_NONE)
		return 0;
	v = dpd_ct_find_pkt(&k, p, DPD_DIR_TO_WEP, oif, now, &reply);
	if (!v || (reply && (v->flags & DPD_CT_F_NAT_FWD)))
		return 0;
	dpd_ct_refresh(v, p, reply, now);
	dpd_ct_count(v, reply, len);
	return 1;
}

/* dpd_fwd_local returns the verdict for a packet dpd_from_wep passed on
 * ifindex: a redirect to the destination workload's interface, or
 * TC_ACT_OK (the stack). saddr and daddr are the packet's (16 bytes, IPv4
 * in the first 4, 4-byte aligned); now is dpd_now(). p is the packet when
 * it passed on a conntrack entry of ifindex's hook, and may then take the
 * peer (0: the policy just passed it). */
static __always_inline int dpd_fwd_local(struct __sk_buff *skb, __u8 family, const __u8 *saddr,
					 const __u8 *daddr, __u32 ifindex, __u64 now, const struct dpd_pkt *p)
{
	struct dpd_fwd_cache_ent *e;
	struct bpf_fib_lookup fib;
	struct dpd_fwd_cfg *cfg;
	__u32 zero = 0, oif, mtu = 0, want = DPD_IF_READY | DPD_IF_WORKLOAD;
	__u8 b[2], hop, macs[12];
	__u32 hop_off;
	int peer;

	cfg = bpf_map_lookup_elem(&dpd_fwd_cfg, &zero);
	if (!cfg || (cfg->flags & DPD_FWD_CFG_STACK))
		return TC_ACT_OK;
	if (skb->pkt_type != PACKET_HOST)
		return TC_ACT_OK;
	if (family == 6) {
		/* b: next header, hop limit */
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 6, b, 2))
			return TC_ACT_OK;
		if (b[0] == 0 || (saddr[0] == 0xfe && (saddr[1] & 0xc0) == 0x80))
			return TC_ACT_OK;
		hop = b[1];
		hop_off = ETH_HLEN + 7;
	} else {
		if (bpf_skb_load_bytes(skb, ETH_HLEN, b, 1) || b[0] != 0x45)
			return TC_ACT_OK;
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 8, &hop, 1))
			return TC_ACT_OK;
		hop_off = ETH_HLEN + 8;
	}
	if (hop <= 1)
		return TC_ACT_OK;

	e = dpd_fwd_cache_slot(saddr, daddr, ifindex);
	if (e && dpd_fwd_cache_hit(e, family, saddr, daddr, ifindex, now)) {
		oif = e->oif;
		__builtin_memcpy(macs, e->macs, sizeof(macs));
		if ((dpd_ifstate_get(oif).flags & (want | DPD_IF_HOST)) != want) {
			e->oif = 0;
			return TC_ACT_OK;
		}
		/* What the forward lookup checks of the packet itself, its size
		 * (without the lookup's VLAN allowance: a packet within 4 bytes
		 * of the MTU goes to the stack, which decides). */
		if (bpf_check_mtu(skb, oif, &mtu, 0, 0) != BPF_MTU_CHK_RET_SUCCESS)
			return TC_ACT_OK;
		goto rewrite;
	}

	dpd_fwd_fib(&fib, family, daddr, saddr, ifindex);
	if (bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SKIP_NEIGH) != BPF_FIB_LKUP_RET_SUCCESS ||
	    fib.ifindex != ifindex)
		return TC_ACT_OK;

	dpd_fwd_fib(&fib, family, saddr, daddr, ifindex);
	if (bpf_fib_lookup(skb, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
		return TC_ACT_OK;
	oif = fib.ifindex;
	if (oif == ifindex || (dpd_ifstate_get(oif).flags & (want | DPD_IF_HOST)) != want)
		return TC_ACT_OK;
	__builtin_memcpy(macs, fib.dmac, ETH_ALEN);
	__builtin_memcpy(macs + ETH_ALEN, fib.smac, ETH_ALEN);
	if (e)
		dpd_fwd_cache_fill(e, family, saddr, daddr, ifindex, oif, macs, now);

rewrite:
	peer = p && !(cfg->flags & DPD_FWD_CFG_NO_PEER) && dpd_fwd_peer(p, oif, skb->len, now);
	/* From here on the packet is changed: it must be redirected. */
	if (family == 6) {
		hop--;
		if (bpf_skb_store_bytes(skb, hop_off, &hop, 1, 0))
			return TC_ACT_SHOT;
	} else {
		if (bpf_l3_csum_replace(skb, ETH_HLEN + 10, bpf_htons((__u16)hop << 8),
					bpf_htons((__u16)(hop - 1) << 8), 2))
			return TC_ACT_SHOT;
		hop--;
		if (bpf_skb_store_bytes(skb, hop_off, &hop, 1, 0))
			return TC_ACT_SHOT;
	}
	if (bpf_skb_store_bytes(skb, 0, macs, 2 * ETH_ALEN, 0))
		return TC_ACT_SHOT;
	if (peer)
		return bpf_redirect_peer(oif, 0);
	return bpf_redirect(oif, 0);
}

#endif
