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

/* The parsed packet. */
struct dpd_pkt {
	__u32 saddr; /* network order */
	__u32 daddr; /* network order */
	__u16 sport; /* host order; ICMP echo: identifier */
	__u16 dport; /* host order */
	__u8  proto;
	__u8  icmp_type;
	__u8  icmp_code;
	__u8  pad;
	__u32 flags; /* DPD_ST_* */
	/* ICMP errors (has_inner): the TCP/UDP packet the error is about. */
	__u32 inner_saddr;
	__u32 inner_daddr;
	__u16 inner_sport;
	__u16 inner_dport;
	__u8  inner_proto;
	__u8  has_inner;
	/* Fragments (dpd_frag.h). */
	__u32 frag_id;   /* IPv4 identification (IPv6: fragment id), network order */
	__u8  frag;      /* DPD_FRAG_* */
	__u8  frag_pad[3];
};

#endif
