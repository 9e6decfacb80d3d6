/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_ipv6.h: what IPv6 needs beyond the family-neutral entry path. The
 * entry program (dpd.c), conntrack (dpd_ct.h), fragments (dpd_frag.h) and
 * NAT (dpd_nat.h) work on dpd_pkt, whose addresses are 16 bytes in either
 * family; what differs is here:
 *
 *   dpd_parse_l3         parse by ethertype; an IPv6 packet with more
 *                        extension headers than the walk's bound is
 *                        dropped and counted (DPD_DROP_IPV6_EXT)
 *   dpd_ipv6_nd          neighbour discovery and MLD pass without policy
 *   dpd_nat6_rewrite     address/port rewrite: no IP checksum, the L4
 *                        checksum's pseudo-header covers 16-byte addresses
 *   dpd_is_hairpin_addr  DPD_HAIRPIN_ADDR or DPD_HAIRPIN_ADDR6
 */
#ifndef DPD_IPV6_H
#define DPD_IPV6_H

#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "dpd_abi.h"
#include "dpd_parse.h"
#include "dpd_drops.h"
#include "dpd_frag.h"

/* dpd_parse_ipv6_fast parses the common IPv6 packet, TCP, UDP or ICMPv6
 * (not an error) right after the fixed header and in the linear part, with
 * direct packet access: the walk's helper calls and function call cost an
 * established flow a quarter of its time. 1: p is filled; 0: not such a
 * packet, p untouched, take dpd_parse_ipv6. */
static __always_inline int dpd_parse_ipv6_fast(struct __sk_buff *skb, struct dpd_pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct dpd_ipv6hdr *ip6 = data + ETH_HLEN;
	void *l4 = data + ETH_HLEN + sizeof(*ip6);

	if ((void *)(ip6 + 1) > data_end || (ip6->vtc >> 4) != 6)
		return 0;
	if (ip6->nexthdr == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > data_end)
			return 0;
		p->sport = bpf_ntohs(th->source);
		p->dport = bpf_ntohs(th->dest);
		p->flags |= dpd_tcp_flags(((__u8 *)th)[13]);
	} else if (ip6->nexthdr == IPPROTO_UDP) {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > data_end)
			return 0;
		p->sport = bpf_ntohs(uh->source);
		p->dport = bpf_ntohs(uh->dest);
	} else if (ip6->nexthdr == DPD_IPPROTO_ICMPV6) {
		struct dpd_icmphdr *ih = l4;

		if ((void *)(ih + 1) > data_end || ih->type <= DPD_ICMPV6_PARAMPROB)
			return 0;
		p->icmp_type = ih->type;
		p->icmp_code = ih->code;
		if (ih->type == DPD_ICMPV6_ECHO_REQUEST || ih->type == DPD_ICMPV6_ECHO_REPLY)
			p->sport = bpf_ntohs(ih->id);
	} else {
		return 0;
	}
	p->family = 6;
	p->proto = ip6->nexthdr;
	p->l4_off = ETH_HLEN + sizeof(*ip6);
	__builtin_memcpy(p->saddr6, ip6->saddr, 16);
	__builtin_memcpy(p->daddr6, ip6->daddr, 16);
	return 1;
}

/* dpd_parse_l3 fills p from the IPv4 or IPv6 packet of ethertype h_proto
 * (network order). Non-zero: drop. */
static __always_inline int dpd_parse_l3(struct __sk_buff *skb, __be16 h_proto, struct dpd_pkt *p,
					__u64 trace)
{
	int rc;

	if (h_proto == bpf_htons(ETH_P_IP))
		return dpd_parse_ipv4(skb, p);
	if (dpd_parse_ipv6_fast(skb, p))
		return 0;
	rc = dpd_parse_ipv6(skb, p);
	if (rc == DPD_PARSE_EXT_LIMIT && !trace)
		dpd_drop_count(DPD_DROP_IPV6_EXT, skb->len);
	/* The verifier knows nothing of what a global function wrote; told
	 * the family again, it follows only the IPv6 side of every family
	 * test below instead of both. */
	p->family = 6;
	return rc;
}

/* dpd_ipv6_nd: is p an ICMPv6 message that IPv6 cannot work without, so it
 * passes without policy in both directions, as Calico's programs let it:
 * MLD query, report and done (130-132), router solicitation (133),
 * neighbour solicitation and advertisement (135, 136). Leaving a workload
 * they resolve its gateway and join its solicited-node groups; entering it
 * the host resolves the workload and checks it is still reachable, which
 * must work under a deny-all ingress policy too. Router advertisements
 * (134) and redirects (137) stay under policy: a workload has no business
 * being told routes by anyone but the node. A fragment is never neighbour
 * discovery (RFC 6980). */
static __always_inline int dpd_ipv6_nd(const struct dpd_pkt *p)
{
	if (p->family != 6 || p->proto != DPD_IPPROTO_ICMPV6 || p->frag != DPD_FRAG_NONE)
		return 0;
	return (p->icmp_type >= 130 && p->icmp_type <= 133) || p->icmp_type == 135 ||
	       p->icmp_type == 136;
}

/* dpd_addr_eq compares two 16-byte addresses. */
static __always_inline int dpd_addr_eq(const __u8 *a, const __u8 *b)
{
	__u64 x[2], y[2];

	__builtin_memcpy(x, a, 16);
	__builtin_memcpy(y, b, 16);
	return x[0] == y[0] && x[1] == y[1];
}

#define DPD_HAIRPIN6_HI (((__u64)DPD_HAIRPIN_ADDR6_0 << 32) | DPD_HAIRPIN_ADDR6_1)
#define DPD_HAIRPIN6_LO (((__u64)DPD_HAIRPIN_ADDR6_2 << 32) | DPD_HAIRPIN_ADDR6_3)

/* dpd_hairpin_addr fills a (16 bytes) with the hairpin source of family. */
static __always_inline void dpd_hairpin_addr(__u8 family, __u8 *a)
{
	__u64 w[2] = {};

	if (family == 6) {
		w[0] = bpf_cpu_to_be64(DPD_HAIRPIN6_HI);
		w[1] = bpf_cpu_to_be64(DPD_HAIRPIN6_LO);
	} else {
		w[0] = bpf_htonl(DPD_HAIRPIN_ADDR);
	}
	__builtin_memcpy(a, w, 16);
}

/* dpd_is_hairpin_addr: is a (16 bytes, p's family) the hairpin source? */
static __always_inline int dpd_is_hairpin_addr(const struct dpd_pkt *p, const __u8 *a)
{
	__u64 w[2];
	__u32 a4;

	if (p->family == 6) {
		__builtin_memcpy(w, a, 16);
		return w[0] == bpf_cpu_to_be64(DPD_HAIRPIN6_HI) &&
		       w[1] == bpf_cpu_to_be64(DPD_HAIRPIN6_LO);
	}
	__builtin_memcpy(&a4, a, 4);
	return a4 == bpf_htonl(DPD_HAIRPIN_ADDR);
}

#define DPD_IP6_SADDR_OFF (ETH_HLEN + offsetof(struct dpd_ipv6hdr, saddr))
#define DPD_IP6_DADDR_OFF (ETH_HLEN + offsetof(struct dpd_ipv6hdr, daddr))

/* dpd_nat6_rewrite changes the source (src != 0) or destination address and
 * port of an IPv6 packet. IPv6 has no header checksum; TCP, UDP and ICMPv6
 * checksums cover the addresses through the pseudo-header, so the L4
 * checksum takes the difference of the 16-byte addresses. UDP over IPv6
 * must carry a checksum, but one of 0 stays 0 rather than become wrong.
 * ICMPv6 has no ports (old_port == new_port). A non-first fragment (frag)
 * gets only the address: its first fragment's rewrite fixed the checksum
 * of the whole datagram. Ports in network order. Non-zero: unchanged. */
static __always_inline int dpd_nat6_rewrite(struct __sk_buff *skb, const struct dpd_pkt *p, int src,
					    const __u8 *old_addr, const __u8 *new_addr,
					    __be16 old_port, __be16 new_port, int frag)
{
	__u32 addr_off = src ? DPD_IP6_SADDR_OFF : DPD_IP6_DADDR_OFF;
	__u64 mangled = 0;
	__u32 csum_off;
	__s64 diff;

	if (frag)
		return bpf_skb_store_bytes(skb, addr_off, new_addr, 16, 0) ? -1 : 0;
	if (p->proto == IPPROTO_TCP) {
		csum_off = p->l4_off + offsetof(struct tcphdr, check);
	} else if (p->proto == IPPROTO_UDP) {
		csum_off = p->l4_off + offsetof(struct udphdr, check);
		mangled = BPF_F_MARK_MANGLED_0;
	} else if (p->proto == DPD_IPPROTO_ICMPV6 && old_port == new_port) {
		csum_off = p->l4_off + offsetof(struct dpd_icmphdr, checksum);
	} else {
		return -1;
	}
	diff = bpf_csum_diff((__be32 *)old_addr, 16, (__be32 *)new_addr, 16, 0);
	if (diff < 0)
		return -1;
	if (bpf_l4_csum_replace(skb, csum_off, 0, (__u32)diff, BPF_F_PSEUDO_HDR | mangled))
		return -1;
	if (bpf_skb_store_bytes(skb, addr_off, new_addr, 16, 0))
		return -1;
	if (old_port != new_port) {
		if (bpf_l4_csum_replace(skb, csum_off, old_port, new_port, mangled | 2))
			return -1;
		if (bpf_skb_store_bytes(skb, p->l4_off + (src ? 0 : 2), &new_port, 2, 0))
			return -1;
	}
	return 0;
}

#endif
