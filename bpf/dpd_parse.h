/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_parse.h: IPv4 and IPv6 + L4 parsing into the facts the policy needs (struct
 * dpd_pkt, in dpd_parse_types.h). Headers are read with direct packet
 * access; when they are not in the linear part of the skb they are pulled
 * in first.
 */
#ifndef DPD_PARSE_H
#define DPD_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "dpd_abi.h"
#include "dpd_parse_types.h"

/* dpd_tcp_flags maps the TCP header's flag byte (FIN 0x01, SYN 0x02, RST
 * 0x04, ACK 0x10) to DPD_ST_TCP_*, without a branch per flag: with one,
 * the verifier carried each of the 16 combinations through the rest of the
 * program as a state of its own (four times the instructions it
 * processed). */
static __always_inline __u32 dpd_tcp_flags(__u32 b)
{
	return ((b >> 1) & 1) |   /* SYN 0x02 -> DPD_ST_TCP_SYN (1 << 0) */
	       ((b >> 3) & 2) |   /* ACK 0x10 -> DPD_ST_TCP_ACK (1 << 1) */
	       ((b << 2) & 4) |   /* FIN 0x01 -> DPD_ST_TCP_FIN (1 << 2) */
	       ((b << 1) & 8);    /* RST 0x04 -> DPD_ST_TCP_RST (1 << 3) */
}

/* dpd_parse_icmp_inner reads the header quoted by an ICMP error at off (the
 * byte after the ICMP header). Errors are rare, so bpf_skb_load_bytes
 * keeps this simple; a quote it cannot read is just not related. */
static __always_inline void dpd_parse_icmp_inner(struct __sk_buff *skb, __u32 off, struct dpd_pkt *p)
{
	struct iphdr iph;
	__be16 ports[2];

	if (bpf_skb_load_bytes(skb, off, &iph, sizeof(iph)))
		return;
	if (iph.version != 4 || iph.ihl < 5 || (iph.frag_off & bpf_htons(DPD_IP_OFFSET)))
		return;
	if (iph.protocol != IPPROTO_TCP && iph.protocol != IPPROTO_UDP)
		return;
	if (bpf_skb_load_bytes(skb, off + iph.ihl * 4, ports, sizeof(ports)))
		return;
	p->inner_saddr = iph.saddr;
	p->inner_daddr = iph.daddr;
	p->inner_sport = bpf_ntohs(ports[0]);
	p->inner_dport = bpf_ntohs(ports[1]);
	p->inner_proto = iph.protocol;
	p->has_inner = 1;
}

/* dpd_linear makes the first len bytes directly readable. Non-zero: the
 * packet is shorter than len or the pull failed. */
static __always_inline int dpd_linear(struct __sk_buff *skb, __u32 len)
{
	if ((__u64)skb->data + len <= (__u64)skb->data_end)
		return 0;
	if (len > skb->len)
		return -1;
	return bpf_skb_pull_data(skb, len) ? -1 : 0;
}

/* dpd_parse_ipv4 fills p from the IPv4 packet after the Ethernet header.
 * Non-zero: malformed or truncated, drop. */
static __always_inline int dpd_parse_ipv4(struct __sk_buff *skb, struct dpd_pkt *p)
{
	void *data, *data_end, *l4;
	struct iphdr *ip;
	__u32 ihl_len, l4min;

	if (dpd_linear(skb, ETH_HLEN + sizeof(struct iphdr)))
		return -1;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	ip = data + ETH_HLEN;
	if ((void *)(ip + 1) > data_end)
		return -1;
	if (ip->version != 4 || ip->ihl < 5)
		return -1;
	ihl_len = ip->ihl * 4;
	p->family = 4;
	p->saddr = ip->saddr;
	p->daddr = ip->daddr;
	p->proto = ip->protocol;
	if (ip->frag_off & bpf_htons(DPD_IP_OFFSET | DPD_IP_MF)) {
		p->frag_id = ip->id;
		p->frag_proto = ip->protocol;
		if (ip->frag_off & bpf_htons(DPD_IP_OFFSET)) {
			/* Only the first fragment carries the L4 header; the
			 * others borrow what it said (dpd_frag.h). A TCP
			 * fragment at offset 8 could rewrite the header's
			 * flags after the policy saw them (RFC 1858). */
			p->flags |= DPD_ST_FRAGMENT;
			p->frag = DPD_FRAG_LATER;
			if (p->proto == IPPROTO_TCP &&
			    (ip->frag_off & bpf_htons(DPD_IP_OFFSET)) == bpf_htons(1))
				p->frag = DPD_FRAG_TINY;
			return 0;
		}
		p->frag = DPD_FRAG_FIRST;
	}

	switch (p->proto) {
	case IPPROTO_TCP:
		l4min = sizeof(struct tcphdr);
		break;
	case IPPROTO_UDP:
		l4min = sizeof(struct udphdr);
		break;
	case IPPROTO_ICMP:
		l4min = sizeof(struct dpd_icmphdr);
		break;
	default:
		return 0;
	}
	if (dpd_linear(skb, ETH_HLEN + ihl_len + l4min))
		return -1;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	l4 = data + ETH_HLEN + ihl_len;

	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > data_end)
			return -1;
		p->sport = bpf_ntohs(th->source);
		p->dport = bpf_ntohs(th->dest);
		p->flags |= dpd_tcp_flags(((__u8 *)th)[13]);
	} else if (p->proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > data_end)
			return -1;
		p->sport = bpf_ntohs(uh->source);
		p->dport = bpf_ntohs(uh->dest);
	} else {
		struct dpd_icmphdr *ih = l4;

		if ((void *)(ih + 1) > data_end)
			return -1;
		p->icmp_type = ih->type;
		p->icmp_code = ih->code;
		if (ih->type == DPD_ICMP_ECHO || ih->type == DPD_ICMP_ECHOREPLY)
			p->sport = bpf_ntohs(ih->id);
		else if (ih->type == DPD_ICMP_DEST_UNREACH || ih->type == DPD_ICMP_TIME_EXCEEDED ||
			 ih->type == DPD_ICMP_PARAMETERPROB)
			dpd_parse_icmp_inner(skb, ETH_HLEN + ihl_len + sizeof(*ih), p);
	}
	return 0;
}

/* dpd_parse_ipv6 results besides 0 (parsed) and -1 (malformed, drop). */
#define DPD_PARSE_EXT_LIMIT -2 /* more than DPD_IPV6_MAX_EXT extension headers: drop, count */

/* dpd_ipv6_ext: is nh an extension header the walk steps over? */
static __always_inline int dpd_ipv6_ext(__u8 nh)
{
	return nh == DPD_IPV6_HOPOPTS || nh == DPD_IPV6_ROUTING || nh == DPD_IPV6_DSTOPTS ||
	       nh == DPD_IPV6_FRAGMENT || nh == DPD_IPV6_AUTH;
}

/* dpd_parse_icmp6_inner reads the IPv6 packet an ICMPv6 error quotes at
 * off, as dpd_parse_icmp_inner does for IPv4. Only a quote whose upper
 * layer follows the fixed header is read: the quote is what the workload
 * (or a router on its path) sent, and dpd's flows carry no extension
 * headers worth walking twice. */
static __always_inline void dpd_parse_icmp6_inner(struct __sk_buff *skb, __u32 off, struct dpd_pkt *p)
{
	__u8 hdr[8]; /* the fixed header up to the addresses */
	__be16 ports[2];

	if (bpf_skb_load_bytes(skb, off, hdr, sizeof(hdr)))
		return;
	if ((hdr[0] >> 4) != 6)
		return;
	if (hdr[6] != IPPROTO_TCP && hdr[6] != IPPROTO_UDP)
		return;
	if (bpf_skb_load_bytes(skb, off + sizeof(struct dpd_ipv6hdr), ports, sizeof(ports)))
		return;
	/* inner_saddr6 and inner_daddr6 are adjacent, as in the header. */
	if (bpf_skb_load_bytes(skb, off + 8, p->inner_saddr6, 32))
		return;
	p->inner_sport = bpf_ntohs(ports[0]);
	p->inner_dport = bpf_ntohs(ports[1]);
	p->inner_proto = hdr[6];
	p->has_inner = 1;
}

/* dpd_parse_ipv6 fills p from the IPv6 packet after the Ethernet header:
 * addresses, the upper-layer protocol past the extension headers (a
 * bounded walk: hop-by-hop, routing, destination options, AH, fragment),
 * ports or ICMPv6 type/code, and the fragment facts dpd_frag.h keys on.
 * Headers are read with bpf_skb_load_bytes, which is bounds-checked at
 * run time, so the walk needs no packet-pointer proofs and the verifier
 * sees a fixed number of iterations. A non-first fragment stops the walk
 * at its fragment header: what follows is payload. Returns 0, -1 or
 * DPD_PARSE_EXT_LIMIT. An ICMPv6 error (types 1-4) also gets the packet it
 * quotes, for dpd_ct_related.
 *
 * A global function, so the verifier checks it once, on its own: inlined,
 * every path through the walk (one per chain length) goes on through NAT
 * and conntrack as a state of its own. Only packets the inline fast path
 * (dpd_ipv6.h) does not take pay for the call; IPv4 never makes it. */
__noinline int dpd_parse_ipv6(struct __sk_buff *skb, struct dpd_pkt *p)
{
	__u32 off = ETH_HLEN + sizeof(struct dpd_ipv6hdr);
	__u8 hdr[8]; /* the fixed header up to the addresses */
	__u8 nh;
	int i;

	if (!p)
		return -1;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, hdr, sizeof(hdr)))
		return -1;
	if ((hdr[0] >> 4) != 6)
		return -1;
	/* saddr6 and daddr6 are adjacent in dpd_pkt, as in the header. */
	if (bpf_skb_load_bytes(skb, ETH_HLEN + 8, p->saddr6, 32))
		return -1;
	p->family = 6;
	nh = hdr[6];

#pragma unroll
	for (i = 0; i < DPD_IPV6_MAX_EXT; i++) {
		__u8 ext[2];

		if (!dpd_ipv6_ext(nh))
			break;
		if (nh == DPD_IPV6_FRAGMENT) {
			struct dpd_frag6hdr fh;
			__u16 fo;

			if (bpf_skb_load_bytes(skb, off, &fh, sizeof(fh)))
				return -1;
			fo = bpf_ntohs(fh.frag_off);
			/* Offset 0 without M is an atomic fragment (RFC 6946):
			 * a whole datagram. */
			if (fo & (DPD_IP6_OFFSET_MASK | DPD_IP6_MF)) {
				p->frag_id = fh.id;
				p->frag_proto = fh.nexthdr;
				if (fo & DPD_IP6_OFFSET_MASK) {
					p->flags |= DPD_ST_FRAGMENT;
					p->frag = DPD_FRAG_LATER;
					p->proto = fh.nexthdr;
					return 0;
				}
				p->frag = DPD_FRAG_FIRST;
			}
			nh = fh.nexthdr;
			off += sizeof(fh);
			continue;
		}
		if (bpf_skb_load_bytes(skb, off, ext, sizeof(ext)))
			return -1;
		/* AH counts its length in 4-byte units minus 2, the others in
		 * 8-byte units minus 1. */
		if (nh == DPD_IPV6_AUTH)
			off += ((__u32)ext[1] + 2) * 4;
		else
			off += ((__u32)ext[1] + 1) * 8;
		nh = ext[0];
	}
	if (dpd_ipv6_ext(nh))
		return DPD_PARSE_EXT_LIMIT;
	p->proto = nh;
	p->l4_off = off;

	if (nh == IPPROTO_TCP) {
		struct tcphdr th;

		if (bpf_skb_load_bytes(skb, off, &th, sizeof(th)))
			return -1;
		p->sport = bpf_ntohs(th.source);
		p->dport = bpf_ntohs(th.dest);
		p->flags |= dpd_tcp_flags(((__u8 *)&th)[13]);
	} else if (nh == IPPROTO_UDP) {
		struct udphdr uh;

		if (bpf_skb_load_bytes(skb, off, &uh, sizeof(uh)))
			return -1;
		p->sport = bpf_ntohs(uh.source);
		p->dport = bpf_ntohs(uh.dest);
	} else if (nh == DPD_IPPROTO_ICMPV6) {
		struct dpd_icmphdr ih;

		if (bpf_skb_load_bytes(skb, off, &ih, sizeof(ih)))
			return -1;
		p->icmp_type = ih.type;
		p->icmp_code = ih.code;
		if (ih.type == DPD_ICMPV6_ECHO_REQUEST || ih.type == DPD_ICMPV6_ECHO_REPLY)
			p->sport = bpf_ntohs(ih.id);
		else if (ih.type >= DPD_ICMPV6_DEST_UNREACH && ih.type <= DPD_ICMPV6_PARAMPROB)
			dpd_parse_icmp6_inner(skb, off + sizeof(ih), p);
	}
	return 0;
}

#endif
