/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_nat.h: service DNAT at the client's hooks, and route lookups. The
 * maps are in dpd_maps.h, the translation record in dpd_nat_types.h. The
 * scheme is described with DPD_DIR_NAT in dpd_abi.h:
 *
 *   client dpd_from_wep  frontend hit: pick (new) or reuse (conntrack entry with
 *                        dir DPD_DIR_NAT) a backend, rewrite daddr/dport;
 *                        conntrack and policy then see the backend.
 *   client dpd_to_wep    a reply hitting a DPD_CT_F_NAT_FWD entry gets the
 *                        frontend back as its source.
 *
 * Hairpin (the client is the chosen backend): the source also becomes
 * DPD_HAIRPIN_ADDR and the request is redirected back out of the interface
 * it came in on; dpd_to_wep recognises it (source DPD_HAIRPIN_ADDR, received
 * on this very interface) and polices it as coming from the workload. The
 * workload's reply to DPD_HAIRPIN_ADDR gets its own address as destination
 * at dpd_from_wep and is routed back in, where the reverse NAT applies.
 */
#ifndef DPD_NAT_H
#define DPD_NAT_H

#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "dpd_abi.h"
#include "dpd_nat_types.h"
#include "dpd_maps.h"
#include "dpd_drops.h"
#include "dpd_parse.h"
#include "dpd_ct.h"
#include "dpd_ipv6.h"

#define DPD_IP_CSUM_OFF  (ETH_HLEN + offsetof(struct iphdr, check))
#define DPD_IP_SADDR_OFF (ETH_HLEN + offsetof(struct iphdr, saddr))
#define DPD_IP_DADDR_OFF (ETH_HLEN + offsetof(struct iphdr, daddr))

/* dpd_l4_off is the offset of the L4 header; the IP header is linear
 * (dpd_parse_ipv4 made it so). Negative: unreadable. */
static __always_inline int dpd_l4_off(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + ETH_HLEN;

	if ((void *)(ip + 1) > data_end)
		return -1;
	return ETH_HLEN + ip->ihl * 4;
}

/* dpd_nat_l3_rewrite changes just the address and the IP checksum: for a
 * non-first fragment, whose L4 checksum (over the whole datagram) the first
 * fragment's rewrite already fixed, and which has no ports to change. */
static __always_inline int dpd_nat_l3_rewrite(struct __sk_buff *skb, int src,
					      __be32 old_addr, __be32 new_addr)
{
	__u32 addr_off = src ? DPD_IP_SADDR_OFF : DPD_IP_DADDR_OFF;

	if (old_addr == new_addr)
		return 0;
	if (bpf_l3_csum_replace(skb, DPD_IP_CSUM_OFF, old_addr, new_addr, 4))
		return -1;
	return bpf_skb_store_bytes(skb, addr_off, &new_addr, 4, 0) ? -1 : 0;
}

/* dpd_nat_rewrite changes the source (src != 0) or destination address and
 * port of a TCP/UDP packet, fixing the IP checksum and the L4 checksum
 * (pseudo-header included). Addresses and ports in network order. A UDP
 * checksum of 0 (none) stays 0. A non-first fragment (frag) gets only the
 * address. Non-zero: the packet could not be changed. */
static __always_inline int dpd_nat_rewrite(struct __sk_buff *skb, __u8 proto, int src,
					   __be32 old_addr, __be32 new_addr,
					   __be16 old_port, __be16 new_port, int frag)
{
	__u32 addr_off = src ? DPD_IP_SADDR_OFF : DPD_IP_DADDR_OFF;
	__u64 mangled = 0;
	__u32 csum_off;
	int l4;

	if (frag)
		return dpd_nat_l3_rewrite(skb, src, old_addr, new_addr);
	l4 = dpd_l4_off(skb);
	if (l4 < 0)
		return -1;
	if (proto == IPPROTO_TCP) {
		csum_off = l4 + offsetof(struct tcphdr, check);
	} else if (proto == IPPROTO_UDP) {
		csum_off = l4 + offsetof(struct udphdr, check);
		mangled = BPF_F_MARK_MANGLED_0;
	} else {
		return -1;
	}
	if (old_addr != new_addr) {
		if (bpf_l4_csum_replace(skb, csum_off, old_addr, new_addr, BPF_F_PSEUDO_HDR | mangled | 4))
			return -1;
		if (bpf_l3_csum_replace(skb, DPD_IP_CSUM_OFF, old_addr, new_addr, 4))
			return -1;
		if (bpf_skb_store_bytes(skb, addr_off, &new_addr, 4, 0))
			return -1;
	}
	if (old_port != new_port) {
		if (bpf_l4_csum_replace(skb, csum_off, old_port, new_port, mangled | 2))
			return -1;
		if (bpf_skb_store_bytes(skb, l4 + (src ? 0 : 2), &new_port, 2, 0))
			return -1;
	}
	return 0;
}

/* dpd_nat_rw is dpd_nat_rewrite for p's family; addresses are 16 bytes
 * (IPv4 in the first 4). */
static __always_inline int dpd_nat_rw(struct __sk_buff *skb, const struct dpd_pkt *p, int src,
				      const __u8 *old_addr, const __u8 *new_addr,
				      __be16 old_port, __be16 new_port, int frag)
{
	__be32 o, n;

	if (p->family == 6)
		return dpd_nat6_rewrite(skb, p, src, old_addr, new_addr, old_port, new_port, frag);
	__builtin_memcpy(&o, old_addr, 4);
	__builtin_memcpy(&n, new_addr, 4);
	return dpd_nat_rewrite(skb, p->proto, src, o, n, old_port, new_port, frag);
}

/* dpd_nat_addr_only rewrites just an address (hairpin reply destination);
 * ports are untouched, so ICMP is fine too (its checksum has no pseudo
 * header; ICMPv6's has, and dpd_nat6_rewrite fixes it). */
static __always_inline int dpd_nat_addr_only(struct __sk_buff *skb, const struct dpd_pkt *p, int src,
					     const __u8 *old_addr, const __u8 *new_addr, int frag)
{
	__be32 o, n;

	if (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP ||
	    (p->family == 6 && p->proto == DPD_IPPROTO_ICMPV6))
		return dpd_nat_rw(skb, p, src, old_addr, new_addr, 0, 0, frag);
	if (p->family == 6)
		return dpd_nat6_rewrite(skb, p, src, old_addr, new_addr, 0, 0, 1);
	__builtin_memcpy(&o, old_addr, 4);
	__builtin_memcpy(&n, new_addr, 4);
	return dpd_nat_l3_rewrite(skb, src, o, n);
}

/* dpd_hairpin_redirect sends the packet back out of the interface it came
 * in on, towards the workload: the Ethernet addresses swap. */
static __always_inline int dpd_hairpin_redirect(struct __sk_buff *skb, __u32 ifindex)
{
	__u8 macs[12], swapped[12];

	if (bpf_skb_load_bytes(skb, 0, macs, sizeof(macs)))
		return TC_ACT_SHOT;
	__builtin_memcpy(swapped, macs + 6, 6);
	__builtin_memcpy(swapped + 6, macs, 6);
	if (bpf_skb_store_bytes(skb, 0, swapped, sizeof(swapped), 0))
		return TC_ACT_SHOT;
	return bpf_redirect(ifindex, 0);
}

/* dpd_maybe_frontend: false when addr (16 bytes) is certainly no
 * frontend. An IPv6 address is folded to 32 bits first (the XOR of its
 * words), which leaves an IPv4 address as it is. */
static __always_inline int dpd_maybe_frontend(const struct dpd_pkt *p, const __u8 *addr)
{
	struct dpd_nat_fe_bits *b;
	__u32 zero = 0, h, w[3];

	__builtin_memcpy(&h, addr, 4);
	if (p->family == 6) {
		__builtin_memcpy(w, addr + 4, 12);
		h ^= w[0] ^ w[1] ^ w[2];
	}
	b = bpf_map_lookup_elem(&dpd_nat_fe_bits, &zero);
	if (!b)
		return 1;
	h = (h * (__u32)DPD_NAT_FE_HASH_MUL) >> DPD_NAT_FE_HASH_SHIFT;
	return (b->bits[(h >> 6) & 63] >> (h & 63)) & 1;
}

/* dpd_nat_flow_key is the NAT flow entry of the packet's original tuple. */
static __always_inline void dpd_nat_flow_key(struct dpd_ct_key *k, const struct dpd_pkt *p, __u32 ifindex)
{
	dpd_ct_key_set(k, p->saddr6, p->daddr6, p->sport, p->dport, p->proto, p->family, DPD_DIR_NAT, ifindex);
}

/* dpd_nat_from_wep translates a packet leaving a workload: a reply to the
 * hairpin address goes back to the workload, a packet to a frontend goes to
 * its connection's backend. p is updated to what the packet now carries,
 * except that a hairpinned request keeps the workload as its source (for
 * conntrack and policy). Non-zero: drop (no ready backend, rewrite failed). */
static __always_inline int dpd_nat_from_wep(struct __sk_buff *skb, struct dpd_pkt *p, __u32 ifindex,
					    __u64 now, __u64 trace, struct dpd_nat *nat)
{
	struct dpd_nat_fe_key fk = {};
	struct dpd_nat_fe_val *fe;
	struct dpd_nat_be_key bk;
	struct dpd_nat_be_val *be;
	struct dpd_ct_key k;
	struct dpd_ct_val *fl;
	int frag = !!(p->flags & DPD_ST_FRAGMENT);
	__u8 baddr[16], hp[16];
	__u16 bport;

	if (dpd_is_hairpin_addr(p, p->daddr6)) {
		if (dpd_nat_addr_only(skb, p, 0, p->daddr6, p->saddr6, frag))
			return -1;
		__builtin_memcpy(p->daddr6, p->saddr6, 16);
		return 0;
	}
	/* A non-first fragment carries its first fragment's ports
	 * (dpd_frag.h), so it finds the connection's backend too. */
	if ((p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP) || !dpd_maybe_frontend(p, p->daddr6))
		return 0;
	__builtin_memcpy(fk.addr, p->daddr6, 16);
	fk.port = p->dport;
	fk.proto = p->proto;
	fk.family = dpd_ct_family(p->family);
	fe = bpf_map_lookup_elem(&dpd_nat_fe, &fk);
	if (!fe)
		return 0;

	dpd_nat_flow_key(&k, p, ifindex);
	fl = dpd_ct_lookup(&k);
	if (fl && fl->nat_svc == fe->svc_id && dpd_ct_live(fl, p->proto, now)) {
		__builtin_memcpy(baddr, fl->nat_addr, 16);
		bport = fl->nat_port;
		/* The client's ACK without SYN proves the handshake completed. */
		if (!trace)
			dpd_ct_refresh(fl, p, !(p->flags & DPD_ST_TCP_SYN), now);
	} else {
		__u32 count = fe->count;

		/* The first fragment chose the backend; without its choice
		 * the rest of the datagram has nowhere to go. */
		if (frag) {
			p->flags |= DPD_ST_NO_BACKEND;
			return -1;
		}
		if (count == 0) {
			p->flags |= DPD_ST_NO_BACKEND;
			return -1;
		}
		bk.svc_id = fe->svc_id;
		bk.ordinal = bpf_get_prandom_u32() % count;
		be = bpf_map_lookup_elem(&dpd_nat_be, &bk);
		if (!be) {
			p->flags |= DPD_ST_NO_BACKEND;
			return -1;
		}
		__builtin_memcpy(baddr, be->addr, 16);
		bport = be->port;
		if (!trace) {
			__u32 zero = 0;
			struct dpd_ct_val *v = bpf_map_lookup_elem(&dpd_ct_new, &zero);

			if (!v) { /* cannot happen (a one-entry array); fail closed */
				p->flags |= DPD_ST_NO_BACKEND;
				return -1;
			}
			__builtin_memset(v, 0, sizeof(*v));
			v->created = now;
			v->last_seen = now;
			if (p->proto == IPPROTO_TCP && (p->flags & (DPD_ST_TCP_FIN | DPD_ST_TCP_RST)))
				v->flags = DPD_CT_F_CLOSING;
			__builtin_memcpy(v->nat_addr, baddr, 16);
			v->nat_port = bport;
			v->nat_svc = bk.svc_id;
			/* Without its entry the connection's next packet could
			 * pick another backend: refuse it while there is no room. */
			if (dpd_ct_write(&k, v)) {
				dpd_drop_count(DPD_DROP_CT_FULL, skb->len);
				return -1;
			}
		}
	}

	__builtin_memcpy(nat->fe_addr, p->daddr6, 16);
	nat->fe_port = p->dport;
	nat->svc = fe->svc_id;
	nat->hairpin = dpd_addr_eq(baddr, p->saddr6);
	if (dpd_nat_rw(skb, p, 0, p->daddr6, baddr, bpf_htons(p->dport), bpf_htons(bport), frag))
		return -1;
	if (nat->hairpin) {
		dpd_hairpin_addr(p->family, hp);
		if (dpd_nat_rw(skb, p, 1, p->saddr6, hp, 0, 0, frag))
			return -1;
	}
	__builtin_memcpy(p->daddr6, baddr, 16);
	p->dport = bport;
	p->flags |= DPD_ST_NAT;
	if (nat->hairpin)
		p->flags |= DPD_ST_HAIRPIN;
	return 0;
}

/* dpd_nat_reverse gives a reply of a DNAT'd flow the frontend as source. */
static __always_inline int dpd_nat_reverse(struct __sk_buff *skb, const struct dpd_pkt *p,
					   const struct dpd_ct_val *ct)
{
	return dpd_nat_rw(skb, p, 1, p->saddr6, ct->nat_addr, bpf_htons(p->sport), bpf_htons(ct->nat_port),
			  !!(p->flags & DPD_ST_FRAGMENT));
}

/* dpd_route_flags classifies a destination by its longest dpd_routes
 * match (DPD_RT_*; 0 when no route covers it). */
static __always_inline __u32 dpd_route_flags(const struct dpd_pkt *p)
{
	struct dpd_route_key k = {};
	struct dpd_route_val *v;

	k.prefixlen = DPD_ROUTE_KEY_FIXED_BITS + (p->family == 6 ? 128 : 32);
	k.family = p->family;
	__builtin_memcpy(k.addr, p->daddr6, 16);
	v = bpf_map_lookup_elem(&dpd_routes, &k);
	return v ? v->flags : 0;
}

#endif
