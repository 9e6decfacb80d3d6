/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_parse_types.h: the parsed packet every stage of the entry program
 * reads (parsing fills it, conntrack and NAT key on it), and the few
 * header definitions parsing needs. Types only; the parser is dpd_parse.h.
 * Private to the entry object: nothing here crosses to userspace (that is
 * include/dpd_abi.h).
 */
#ifndef DPD_PARSE_TYPES_H
#define DPD_PARSE_TYPES_H

#include <linux/types.h>

/* linux/icmp.h drags in libc headers, so the few ICMP bits are here. */
#define DPD_ICMP_ECHOREPLY     0
#define DPD_ICMP_DEST_UNREACH  3
#define DPD_ICMP_ECHO          8
#define DPD_ICMP_TIME_EXCEEDED 11
#define DPD_ICMP_PARAMETERPROB 12
#define DPD_IP_OFFSET      0x1fff
#define DPD_IP_MF          0x2000

/* dpd_pkt.frag: where the packet sits in a fragmented datagram. */
#define DPD_FRAG_NONE  0 /* not fragmented */
#define DPD_FRAG_FIRST 1 /* first fragment: carries the L4 header */
#define DPD_FRAG_LATER 2 /* non-first fragment: no L4 header */
#define DPD_FRAG_TINY  3 /* TCP fragment at offset 8: drop (RFC 1858) */

struct dpd_icmphdr {
	__u8   type;
	__u8   code;
	__sum16 checksum;
	__be16 id;
	__be16 seq;
};

/* IPv6 (RFC 8200): the fixed header and the extension headers the parser
 * walks. Defined here because linux/ipv6.h drags in more than BPF needs. */
#define DPD_IPV6_HOPOPTS  0
#define DPD_IPV6_ROUTING  43
#define DPD_IPV6_FRAGMENT 44
#define DPD_IPV6_AUTH     51
#define DPD_IPV6_NONE     59
#define DPD_IPV6_DSTOPTS  60
#define DPD_IPPROTO_ICMPV6 58
/* The walk's bound: more extension headers than this drop, counted as
 * DPD_DROP_IPV6_EXT. Real traffic carries one or two (hop-by-hop for MLD,
 * a fragment header); eight leaves room for any sane chain. */
#define DPD_IPV6_MAX_EXT  8

#define DPD_ICMPV6_DEST_UNREACH 1
#define DPD_ICMPV6_PKT_TOOBIG   2
#define DPD_ICMPV6_TIME_EXCEED  3
#define DPD_ICMPV6_PARAMPROB    4
#define DPD_ICMPV6_ECHO_REQUEST 128
#define DPD_ICMPV6_ECHO_REPLY   129

struct dpd_ipv6hdr {
	__u8   vtc;       /* version (4 bits), traffic class high bits */
	__u8   tc_flow[3];
	__be16 payload_len;
	__u8   nexthdr;
	__u8   hop_limit;
	__u8   saddr[16];
	__u8   daddr[16];
};

/* The IPv6 fragment header. */
struct dpd_frag6hdr {
	__u8   nexthdr;
	__u8   reserved;
	__be16 frag_off; /* offset in 8-byte units << 3, M flag in bit 0 */
	__be32 id;
};
#define DPD_IP6_OFFSET_MASK 0xfff8
#define DPD_IP6_MF          0x0001

/* The parsed packet. Addresses are 16 bytes whatever the family, IPv4 in
 * the first 4 (saddr/daddr are that IPv4 view), so keys can copy them
 * whole: the layout of every address in dpd_abi.h. */
struct dpd_pkt {
	union {
		__u32 saddr;     /* IPv4, network order */
		__u8  saddr6[16];
	};
	union {
		__u32 daddr;     /* IPv4, network order */
		__u8  daddr6[16];
	};
	__u16 sport; /* host order; ICMP echo: identifier */
	__u16 dport; /* host order */
	__u8  proto;
	__u8  icmp_type;
	__u8  icmp_code;
	__u8  pad;
	__u32 flags; /* DPD_ST_* */
	/* ICMP errors (has_inner): the TCP/UDP packet the error is about,
	 * addresses laid out as saddr/daddr. */
	union {
		__u32 inner_saddr;
		__u8  inner_saddr6[16];
	};
	union {
		__u32 inner_daddr;
		__u8  inner_daddr6[16];
	};
	__u16 inner_sport;
	__u16 inner_dport;
	__u8  inner_proto;
	__u8  has_inner;
	/* Fragments (dpd_frag.h). */
	__u32 frag_id;   /* IPv4 identification (IPv6: fragment id), network order */
	__u8  frag;      /* DPD_FRAG_* */
	__u8  frag_proto; /* the key's protocol: IPv4's; IPv6: the fragment header's next header */
	__u8  frag_pad[2];
	__u16 l4_off;    /* IPv6: offset of the L4 header past the extension headers (NAT) */
	/* 4 or 6. A whole aligned 8 bytes of its own: the verifier knows a
	 * constant spilled to the stack in one 8-byte store, so it follows only
	 * the packet's family through every family test; a byte merged into a
	 * wider store of unknown neighbours is unknown to it, and every test
	 * would fork the verification. */
	__u64 family;
};

#endif
