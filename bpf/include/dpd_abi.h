/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_abi.h: the layout shared by the C entry programs, the Go policy
 * compiler (dataplane/bpf/polprog) and userspace (dataplane/bpf). Every
 * change here must be mirrored in dataplane/bpf/abi/abi.go; a test checks
 * the sizes and offsets against the BTF of the compiled object.
 */
#ifndef DPD_ABI_H
#define DPD_ABI_H

#include <linux/types.h>

/* Hook direction, from the workload's point of view. */
#define DPD_DIR_FROM_WEP 0 /* host-side TC ingress: traffic leaving the workload (its egress policy) */
#define DPD_DIR_TO_WEP   1 /* host-side TC egress: traffic entering the workload (its ingress policy) */

/* Policy verdicts written into dpd_state.verdict. */
#define DPD_VERDICT_NONE  0
#define DPD_VERDICT_ALLOW 1
#define DPD_VERDICT_DENY  2

/* dpd_jump (PROG_ARRAY) layout. */
#define DPD_JUMP_EPILOGUE 0   /* C program: acts on dpd_state.verdict (conntrack, counters, return code) */
#define DPD_JUMP_POL_BASE 16  /* policy of endpoint slot s, direction d: DPD_JUMP_POL_BASE + 2*s + d */

/* dpd_ifstate value flags. */
#define DPD_IF_READY    (1u << 0) /* both directions' policy installed: packets may be policed */
#define DPD_IF_WORKLOAD (1u << 1)

/* Per-CPU scratch filled by the entry program for the packet being policed. */
struct dpd_state {
	__u8  saddr[16];      /* 0: IPv4 in the first 4 bytes, network order */
	__u8  daddr[16];      /* 16 */
	__u16 sport;          /* 32: host order; ICMP echo: the identifier */
	__u16 dport;          /* 34: host order */
	__u8  proto;          /* 36: IP protocol number */
	__u8  family;         /* 37: 4 or 6 */
	__u8  icmp_type;      /* 38 */
	__u8  icmp_code;      /* 39 */
	__u32 ifindex;        /* 40 */
	__u32 dir;            /* 44: DPD_DIR_* */
	__u32 verdict;        /* 48: DPD_VERDICT_*, written by the policy program */
	__u32 chain_pos;      /* 52: owned by the policy compiler (resume point across tail calls) */
	__u64 rule_id;        /* 56: deciding rule's counter id; 0 = none */
	__u64 pol_scratch[4]; /* 64: owned by the policy compiler */
	__u32 pkt_len;        /* 96 */
	__u32 flags;          /* 100: DPD_ST_* */
	__u64 trace;          /* 104: non-zero during Inspect trace runs: no conntrack or counter writes */
};                            /* sizeof == 112 */

/* dpd_ifstate: ifindex -> endpoint slot. */
struct dpd_ifstate {
	__u32 slot;
	__u32 flags; /* DPD_IF_* */
};

/* dpd_ipsets: LPM trie. prefixlen counts bits from set_id onwards: 64 + address prefix. */
struct dpd_ipset_key {
	__u32 prefixlen;
	__u32 set_id;   /* allocated by userspace per IP set name; always fully matched */
	__u8  proto;    /* IP_AND_PORT sets: protocol; else 0 */
	__u8  pad;
	__u16 port;     /* IP_AND_PORT sets: port, network order; else 0 */
	__u8  addr[16]; /* IPv4 in the first 4 bytes */
};

/* dpd_rule_ctrs: PERCPU_HASH u64 rule id -> counters. Userspace creates entries; BPF only adds. */
struct dpd_counter {
	__u64 packets;
	__u64 bytes;
};

/* ---- Added by the entry-program owner (dataplane/bpf); mirrored in abi.go. ---- */

/* skb->mark of an Inspect trace run (BPF_PROG_TEST_RUN with this mark in the
 * __sk_buff context): the entry sets dpd_state.trace, nothing is written to
 * conntrack or counters, and the final dpd_state is copied into dpd_trace.
 * Real packets cannot carry it into a hook: the mark is scrubbed when a packet
 * crosses from the workload's namespace. */
#define DPD_TRACE_MARK 0x0d9d7ace

/* dpd_state.flags: facts the entry program found, for the policy program. */
#define DPD_ST_TCP_SYN   (1u << 0)
#define DPD_ST_TCP_ACK   (1u << 1)
#define DPD_ST_TCP_FIN   (1u << 2)
#define DPD_ST_TCP_RST   (1u << 3)
#define DPD_ST_FRAGMENT  (1u << 4)  /* non-first IPv4 fragment: no L4 header, ports 0 */
/* Trace runs only (they always evaluate the policy; these say what conntrack would have done). */
#define DPD_ST_CT_FWD    (1u << 8)  /* a live conntrack entry of this hook matched */
#define DPD_ST_CT_REV    (1u << 9)  /* reply of a live flow approved at the opposite hook */
#define DPD_ST_NO_POLICY (1u << 10) /* tail call into the policy failed: nothing installed */
#define DPD_ST_EPILOGUE  (1u << 11) /* the epilogue ran (the policy finished) */
#define DPD_ST_CT_RELATED (1u << 12) /* ICMP error about a live flow of this interface */

/* dpd_ct: LRU_HASH dpd_ct_key -> dpd_ct_val. The key names the hook that
 * approved the flow (ifindex + dir), so one endpoint's allow never lets a
 * packet skip another endpoint's policy. A packet is a reply when its
 * swapped tuple is in the map for the same ifindex and the opposite dir
 * (ICMP echo: ports are not swapped, sport is the identifier both ways). */
struct dpd_ct_key {
	__u8  saddr[16]; /* 0 */
	__u8  daddr[16]; /* 16 */
	__u16 sport;     /* 32: host order */
	__u16 dport;     /* 34: host order */
	__u8  proto;     /* 36 */
	__u8  dir;       /* 37: DPD_DIR_* of the approving hook */
	__u16 pad;       /* 38: always 0 */
	__u32 ifindex;   /* 40 */
};                       /* sizeof == 44 */

struct dpd_ct_val {
	__u64 created;   /* 0: bpf_ktime_get_coarse_ns (CLOCK_MONOTONIC_COARSE) */
	__u64 last_seen; /* 8: refreshed by live hits, at most every DPD_CT_REFRESH_NS */
	__u32 flags;     /* 16: DPD_CT_F_* */
	__u32 pad;       /* 20 */
};                       /* sizeof == 24 */

#define DPD_CT_F_ESTABLISHED (1u << 0) /* TCP: a reply with ACK was seen */
#define DPD_CT_F_CLOSING     (1u << 1) /* TCP: FIN or RST seen in either direction */

/* Conntrack idle timeouts in seconds, used by the programs (an expired entry
 * is ignored) and by the userspace scanner (which deletes it). TCP is kept
 * simple: established (reply ACK seen, no FIN/RST) lives an hour, anything
 * else (handshake, closing) 30 s. */
#define DPD_CT_TIMEOUT_TCP_EST_S   3600
#define DPD_CT_TIMEOUT_TCP_OTHER_S 30
#define DPD_CT_TIMEOUT_UDP_S       60
#define DPD_CT_TIMEOUT_ICMP_S      5
#define DPD_CT_TIMEOUT_OTHER_S     60
/* last_seen is rewritten at most this often, so a busy flow on many CPUs
 * does not bounce the entry's cache line on every packet. */
#define DPD_CT_REFRESH_NS 100000000

/* dpd_ipset_ids: HASH set name -> set id, written only by userspace so a
 * restarted dpd keeps the ids the loaded policy programs use. Names longer
 * than the key are stored as "#" + a hash of the name (see dataplane/bpf). */
#define DPD_IPSET_NAME_LEN 64
struct dpd_ipset_name {
	char name[DPD_IPSET_NAME_LEN];
};

#endif
