/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_abi.h: the layout shared by the C entry programs, the Go policy
 * compiler (dataplane/tcbpf/polprog) and userspace (dataplane/tcbpf). Every
 * change here must be mirrored in dataplane/tcbpf/abi/abi.go; a test checks
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
	/* Added by the services-and-routes work (see the end of this file). */
	__u8  nat_addr[16];   /* 112: DPD_ST_NAT: the frontend the workload addressed (pre-DNAT) */
	__u16 nat_port;       /* 128: DPD_ST_NAT: the frontend port, host order */
	__u16 nat_pad;        /* 130 */
	__u32 nat_svc;        /* 132: DPD_ST_NAT: service port id */
	__u32 dst_route;      /* 136: DPD_RT_* flags of the destination's dpd_routes entry; 0 = none */
	__u32 state_pad;      /* 140 */
};                            /* sizeof == 144 */

/* dpd_ifstate: ifindex -> endpoint slot. In dpd_ifstate_arr the 8 bytes
 * are one word, written and read in one access (dpd_ifstate.h). */
struct dpd_ifstate {
	__u32 slot;  /* 0 */
	__u32 flags; /* 4: DPD_IF_*; 0 = no entry */
};

/* dpd_ifstate_arr holds the entries of the ifindexes below this, as
 * dpd_ifstate holds every entry: an array lookup the verifier inlines. */
#define DPD_IFSTATE_ARR_ENTRIES 262144

/* dpd_clock (ARRAY[1]): the programs' clock, CLOCK_MONOTONIC_COARSE as
 * jiffies * tick_ns + offset_ns (dpd_clock.h). tick_ns 0: not calibrated
 * yet, read the kernel's clock instead. Written only by dpd_clock_sync,
 * each field in one store. */
struct dpd_clock {
	__u64 tick_ns;        /* 0: nanoseconds per jiffy; 0 = use bpf_ktime_get_coarse_ns */
	__u64 offset_ns;      /* 8: coarse ns - jiffies * tick_ns, at the last sync (mod 2^64) */
	__u64 sample_jiffies; /* 16: jiffies at the last sync */
	__u64 sample_ns;      /* 24: bpf_ktime_get_coarse_ns at the last sync */
};                            /* sizeof == 32 */

/* dpd_ipsets: LPM trie. prefixlen counts bits from set_id onwards: 64 + address
 * prefix (set_id, proto, family and port are always fully matched). */
struct dpd_ipset_key {
	__u32 prefixlen;
	__u32 set_id;   /* allocated by userspace per IP set name; always fully matched */
	__u8  proto;    /* IP_AND_PORT sets: protocol; else 0 */
	__u8  family;   /* 4 or 6: a packet of one family never matches a member of the other */
	__u16 port;     /* IP_AND_PORT sets: port, network order; else 0 */
	__u8  addr[16]; /* IPv4 in the first 4 bytes */
};

/* dpd_rule_ctrs: PERCPU_HASH u64 rule id -> counters. Userspace creates entries; BPF only adds. */
struct dpd_counter {
	__u64 packets;
	__u64 bytes;
};

/* ---- Added by the entry-program owner (dataplane/tcbpf); mirrored in abi.go. ---- */

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
#define DPD_ST_FRAGMENT  (1u << 4)  /* non-first fragment: ports and ICMP type/code are its first fragment's (dpd_frags) */
/* Trace runs only (they always evaluate the policy; these say what conntrack would have done). */
#define DPD_ST_CT_FWD    (1u << 8)  /* a live conntrack entry of this hook matched */
#define DPD_ST_CT_REV    (1u << 9)  /* reply of a live flow approved at the opposite hook */
#define DPD_ST_NO_POLICY (1u << 10) /* tail call into the policy failed: nothing installed */
#define DPD_ST_EPILOGUE  (1u << 11) /* the epilogue ran (the policy finished) */
#define DPD_ST_CT_RELATED (1u << 12) /* ICMP error about a live flow of this interface */

/* dpd_conntrack: HASH dpd_ct_key -> dpd_ct_val (and an older dpd's LRU
 * dpd_ct, the same layout, during an upgrade). The key names the hook that
 * approved the flow (ifindex + dir), so one endpoint's allow never lets a
 * packet skip another endpoint's policy. A packet is a reply when the
 * opposite hook of the same interface approved its swapped tuple. Flow
 * keys are normalized (dpd_ct.h): the lower (address, port) end first, dir
 * the approving hook's flipped when that swapped the tuple, so a flow and
 * its replies share one key per interface; DPD_CT_F_ORIG_HI in the value
 * says the first packet came from the key's daddr. ICMP echo keeps its
 * ports (sport is the identifier both ways). DPD_DIR_NAT entries are not
 * normalized. */
struct dpd_ct_key {
	__u8  saddr[16]; /* 0 */
	__u8  daddr[16]; /* 16 */
	__u16 sport;     /* 32: host order */
	__u16 dport;     /* 34: host order */
	__u8  proto;     /* 36 */
	__u8  dir;       /* 37: DPD_DIR_* of the approving hook */
	__u8  family;    /* 38: DPD_CT_FAMILY_*: an IPv4 and an IPv6 flow never share a key */
	__u8  pad;       /* 39: always 0 */
	__u32 ifindex;   /* 40 */
};                       /* sizeof == 44 */

/* dpd_ct_key.family. IPv4 is 0, the value the byte had before IPv6 was
 * tracked, so entries of flows open across an upgrade keep matching. */
#define DPD_CT_FAMILY_V4 0
#define DPD_CT_FAMILY_V6 6

struct dpd_ct_val {
	__u64 created;   /* 0: bpf_ktime_get_coarse_ns (CLOCK_MONOTONIC_COARSE) */
	__u64 last_seen; /* 8: refreshed by live hits, at most every DPD_CT_REFRESH_NS */
	__u32 flags;     /* 16: DPD_CT_F_* */
	__u32 pad;       /* 20 */
	/* Added by the services-and-routes work. DPD_CT_F_NAT_FWD entries: the
	 * frontend; DPD_DIR_NAT entries: the chosen backend. */
	__u8  nat_addr[16]; /* 24 */
	__u16 nat_port;     /* 40: host order */
	__u16 nat_pad;      /* 42 */
	__u32 nat_svc;      /* 44: service port id */
	/* Added by the flow-events work: what the flow carried, reported in
	 * its end event when the userspace scanner expires the entry. */
	__u64 rule_id;      /* 48: the rule that allowed the flow; 0 = none */
	__u64 pkts_fwd;     /* 56: packets matching the key (the creating one included) */
	__u64 bytes_fwd;    /* 64 */
	__u64 pkts_rev;     /* 72: replies (packets matching the swapped key at the opposite hook) */
	__u64 bytes_rev;    /* 80 */
};                       /* sizeof == 88 */

#define DPD_CT_F_ESTABLISHED (1u << 0) /* TCP: a reply with ACK was seen */
#define DPD_CT_F_ORIG_HI     (1u << 5) /* the flow's first packet came from the key's daddr:dport */
#define DPD_CT_F_CLOSING     (1u << 1) /* TCP: FIN or RST seen in either direction */
/* TCP: a FIN from the flow's first sender, and from the other side; an RST
 * either way sets both. With both the connection is closed. */
#define DPD_CT_F_FIN_ORIG    (1u << 6)
#define DPD_CT_F_FIN_REPLY   (1u << 7)

/* dpd_ct_cfg: ARRAY[1] written by userspace, about the older maps and
 * programs a node may still have after an upgrade.
 * DPD_CT_CFG_LRU: dpd_ct (the LRU conntrack of a dpd before dpd_conntrack)
 * may hold entries, so a miss in dpd_conntrack looks there too.
 * DPD_CT_CFG_WRITE_LRU: entry programs of such a dpd still run (they share
 * this epilogue and read dpd_ct only), so entries are written to dpd_ct.
 * DPD_CT_CFG_LEGACY: dpd_ct may hold entries of a dpd that did not
 * normalize flow keys (of flows whose source is the higher end), so a miss
 * looks the old key up there too. DPD_CT_CFG_WRITE_LEGACY: entry programs
 * of that dpd still run, so entries are written the old way, which they
 * read. Each WRITE flag comes with its lookup flag, LEGACY with LRU. On
 * when dpd starts on a node with older state; off once none is left. */
struct dpd_ct_cfg {
	__u32 flags;
};
#define DPD_CT_CFG_LEGACY       (1u << 0)
#define DPD_CT_CFG_WRITE_LEGACY (1u << 1)
#define DPD_CT_CFG_LRU          (1u << 2)
#define DPD_CT_CFG_WRITE_LRU    (1u << 3)

/* Conntrack idle timeouts in seconds, used by the programs (an expired entry
 * is ignored) and by the userspace scanner (which deletes it). TCP:
 * established (reply ACK seen, no FIN/RST) lives an hour; closed (FIN both
 * ways, or an RST) 10 s, which covers the last ACK and a retransmitted FIN
 * (TCP's retries of a FIN span about 6 s) and keeps a node that opens
 * thousands of connections a second from filling the map with finished
 * ones; anything else (handshake, half-closed) 30 s. */
#define DPD_CT_TIMEOUT_TCP_EST_S    3600
#define DPD_CT_TIMEOUT_TCP_CLOSED_S 10
#define DPD_CT_TIMEOUT_TCP_OTHER_S  30
#define DPD_CT_TIMEOUT_UDP_S       60
#define DPD_CT_TIMEOUT_ICMP_S      5
#define DPD_CT_TIMEOUT_OTHER_S     60
/* last_seen is rewritten at most this often, so a busy flow on many CPUs
 * does not bounce the entry's cache line on every packet. */
#define DPD_CT_REFRESH_NS 100000000

/* dpd_ipset_ids: HASH set name -> set id, written only by userspace so a
 * restarted dpd keeps the ids the loaded policy programs use. Names longer
 * than the key are stored as "#" + a hash of the name (see dataplane/tcbpf). */
#define DPD_IPSET_NAME_LEN 64
struct dpd_ipset_name {
	char name[DPD_IPSET_NAME_LEN];
};

/* ---- Added by the services-and-routes work; mirrored in abi.go. ---- */

/* Service NAT. A workload's new connection to a frontend (dpd_nat_fe) gets
 * one ready backend (dpd_nat_be), chosen at random, at the client's
 * dpd_from_wep; the choice is kept in a conntrack entry with dir DPD_DIR_NAT
 * keyed by the original tuple, so every later packet of the connection goes
 * to the same backend. The packet is DNAT'd before conntrack and policy, so
 * both see the backend (Kubernetes semantics). The client hook's conntrack
 * entry carries DPD_CT_F_NAT_FWD and the frontend, and replies are
 * reverse-NAT'd at the client's dpd_to_wep when they hit it: only the
 * client's node translates, wherever the backend lives. */
#define DPD_DIR_NAT 2 /* dpd_ct_key.dir of a NAT flow entry (ifindex = the client's interface) */

#define DPD_CT_F_NAT_FWD (1u << 2) /* client hook entry of a DNAT'd flow: replies get nat_addr:nat_port as source */
#define DPD_CT_F_HAIRPIN (1u << 3) /* the backend is the client itself: its source became DPD_HAIRPIN_ADDR */

/* A workload reaching itself through a service (hairpin) cannot receive a
 * packet from its own address, so the request's source becomes this
 * reserved link-local address (169.254.0.253, host order) and the packet is
 * redirected straight back into the workload. Its reply to this address
 * leaves through the same interface, gets its own address back as the
 * destination and is routed back into the workload, where the usual reverse
 * NAT restores the frontend. */
#define DPD_HAIRPIN_ADDR 0xa9fe00fd

/* dpd_state.flags additions. */
#define DPD_ST_NAT        (1u << 13) /* destination DNAT'd: nat_addr/nat_port/nat_svc hold the frontend */
#define DPD_ST_HAIRPIN    (1u << 14) /* the backend is the client: source rewritten to DPD_HAIRPIN_ADDR */
#define DPD_ST_NO_BACKEND (1u << 15) /* trace only: frontend without a ready backend, dropped */

/* dpd_nat_fe: HASH frontend -> service port. */
struct dpd_nat_fe_key {
	__u8  addr[16]; /* 0: IPv4 in the first 4 bytes */
	__u16 port;     /* 16: host order */
	__u8  proto;    /* 18 */
	__u8  family;   /* 19: DPD_CT_FAMILY_* (IPv4 0): backends have the frontend's family */
};                      /* sizeof == 20 */

struct dpd_nat_fe_val {
	__u32 svc_id;   /* 0: service port id: the backends' key */
	__u32 count;    /* 4: ready backends, at ordinals 0..count-1; 0 drops new connections */
	__u32 flags;    /* 8: reserved, 0 */
	__u32 pad;      /* 12 */
};                      /* sizeof == 16 */

/* dpd_nat_fe_bits: ARRAY[1], a filter of frontend addresses: bit
 * (addr * DPD_NAT_FE_HASH_MUL) >> DPD_NAT_FE_HASH_SHIFT is set for every
 * frontend address (the address's 4 bytes read as a little-endian u32, as
 * the programs load it). A clear bit skips the dpd_nat_fe lookup, so
 * traffic to non-service addresses pays one inlined array access. Userspace
 * sets bits before adding frontends and clears them after removing them. */
#define DPD_NAT_FE_BITS       4096
#define DPD_NAT_FE_HASH_MUL   2654435761
#define DPD_NAT_FE_HASH_SHIFT 20
struct dpd_nat_fe_bits {
	__u64 bits[64];         /* DPD_NAT_FE_BITS / 64 */
};                              /* sizeof == 512 */

/* dpd_nat_be: HASH (service port id, ordinal) -> backend. */
struct dpd_nat_be_key {
	__u32 svc_id;
	__u32 ordinal;
};                      /* sizeof == 8 */

struct dpd_nat_be_val {
	__u8  addr[16]; /* 0 */
	__u16 port;     /* 16: host order */
	__u16 pad;      /* 18 */
	__u32 flags;    /* 20: DPD_NAT_BE_F_* */
};                      /* sizeof == 24 */

/* dpd_routes: LPM_TRIE from RouteUpdate. prefixlen counts the fixed 32 bits
 * of family + pad, then address bits, so families never match each other. */
struct dpd_route_key {
	__u32 prefixlen;
	__u8  family;   /* 4 or 6 */
	__u8  pad[3];
	__u8  addr[16];
};                      /* sizeof == 24 */
#define DPD_ROUTE_KEY_FIXED_BITS 32

struct dpd_route_val {
	__u32 flags;     /* 0: DPD_RT_* */
	__u8  pool_type; /* 4: felix IPPoolType: 0 none, 1 no-encap, 2 VXLAN, 3 IPIP */
	__u8  pad[3];    /* 5 */
	__u8  next_hop[16]; /* 8: the destination node's IP (dst_node_ip); zero when local or unknown */
};                      /* sizeof == 24 */

/* dpd_route_val.flags: the low bits are felix's RouteType bitmap as sent. */
#define DPD_RT_REMOTE_WORKLOAD (1u << 0)
#define DPD_RT_REMOTE_HOST     (1u << 1)
#define DPD_RT_LOCAL_WORKLOAD  (1u << 2)
#define DPD_RT_LOCAL_HOST      (1u << 3)
#define DPD_RT_REMOTE_TUNNEL   (1u << 4)
#define DPD_RT_LOCAL_TUNNEL    (1u << 5)
#define DPD_RT_IN_POOL         (1u << 8)  /* inside an IP pool (ip_pool_type != NONE) */
#define DPD_RT_NAT_OUTGOING    (1u << 9)  /* the pool masquerades traffic leaving all pools */
#define DPD_RT_SAME_SUBNET     (1u << 10) /* the destination node shares our subnet */
#define DPD_RT_TUNNEL_VXLAN    (1u << 11) /* reached through the VXLAN device */

/* ---- Added by the policy-index work; mirrored in abi.go. ---- */

/* dpd_ipset_idx: LPM_TRIE address -> __u32 id of its combination: the IP
 * sets holding it (0 is never used). Only members without protocol and port
 * are indexed. Covering prefixes are folded into more specific entries, so
 * the longest match alone is the answer. A compiled policy that classifies
 * by sets maps the combination to the bitmap of its rules in a map of its
 * own: one lookup per address however many sets there are. Created and
 * pinned by userspace (dataplane/tcbpf); the entry programs do not use it.
 * The key has the layout of struct dpd_route_key (family 4 or 6, fully
 * matched), like dpd_ipsets, whose answers the index reproduces exactly. */

/* ---- Added by the fragments work; mirrored in abi.go. ---- */

/* dpd_frags: LRU_HASH dpd_frag_key -> dpd_frag_val. Only the first fragment
 * of a datagram carries the L4 header, so when a hook sees one it records
 * what the header said; the datagram's later fragments take those ports
 * (and ICMP type/code) into NAT, conntrack and policy, and so get the very
 * verdict the first fragment got: a port rule, or a negated one, never sees
 * a fragment's missing ports. A non-first fragment whose first piece this
 * hook has not seen within DPD_FRAG_TIMEOUT_S is dropped and counted
 * (DPD_DROP_FRAG_NO_FIRST). The key names the hook, so one interface's
 * fragments can never lend ports to another's. proto is the protocol of
 * the IPv4 header (IPv6: the fragment header's next header); id is the
 * IPv4 identification (IPv6: the 32-bit fragment id), network order. */
struct dpd_frag_key {
	__u8  saddr[16]; /* 0: IPv4 in the first 4 bytes */
	__u8  daddr[16]; /* 16 */
	__u32 id;        /* 32: network order */
	__u8  proto;     /* 36 */
	__u8  family;    /* 37: 4 or 6 */
	__u8  dir;       /* 38: DPD_DIR_* of the hook */
	__u8  pad;       /* 39: always 0 */
	__u32 ifindex;   /* 40 */
};                       /* sizeof == 44 */

struct dpd_frag_val {
	__u64 seen;      /* 0: bpf_ktime_get_coarse_ns of the first fragment */
	__u16 sport;     /* 8: host order; ICMP echo: the identifier */
	__u16 dport;     /* 10: host order */
	__u8  icmp_type; /* 12 */
	__u8  icmp_code; /* 13 */
	__u8  proto;     /* 14: the L4 protocol (IPv6: past any extension headers) */
	__u8  pad;       /* 15 */
};                       /* sizeof == 16 */

/* A first fragment older than this no longer vouches for later ones: the
 * kernel's own reassembly gives up after ipfrag_time, 30 s by default. */
#define DPD_FRAG_TIMEOUT_S 30

/* dpd_drop_ctrs: PERCPU_ARRAY[DPD_DROP_MAX] of struct dpd_counter, the
 * packets the entry programs dropped for a reason no rule counts. */
#define DPD_DROP_FRAG_NO_FIRST 0 /* non-first fragment whose first piece was not seen */
#define DPD_DROP_FRAG_TINY     1 /* TCP fragment at offset 8 (RFC 1858: could rewrite the header) */
#define DPD_DROP_IPV6_EXT      2 /* IPv6: more extension headers than the parser walks */
#define DPD_DROP_CT_FULL       3 /* allowed new flow, but dpd_conntrack is full */
#define DPD_DROP_MAX           8

/* dpd_state.flags, trace only: the packet was parsed, but its family is not
 * policed, so it was dropped. No longer set: IPv6 is policed like IPv4. */
#define DPD_ST_UNPOLICED (1u << 24)

/* ---- Added by the IPv6 datapath work; mirrored in abi.go. ---- */

/* dpd_state.flags, trace only: an ICMPv6 neighbour discovery or MLD message
 * (types 130-133, 135, 136) that the entry passes without policy, so IPv6
 * keeps working under any policy. */
#define DPD_ST_ICMP6_ND (1u << 20)

/* dpd_nat_be_val.flags: only for userspace reading the map back (the
 * programs take the family from the frontend key). */
#define DPD_NAT_BE_F_V6 (1u << 0)

/* The IPv6 twin of DPD_HAIRPIN_ADDR: fd64:7064::fd, in the unique local
 * range (RFC 4193, global id 64:7064, "dpd"). Not link-local, because the
 * workload must send its reply through its default route, as it does for
 * 169.254.0.253: a link-local destination is on-link and would need a
 * neighbour answering for it on the workload's interface. Never assigned
 * to anything; only hairpinned requests carry it. Its four 32-bit words,
 * host order. */
#define DPD_HAIRPIN_ADDR6_0 0xfd647064
#define DPD_HAIRPIN_ADDR6_1 0
#define DPD_HAIRPIN_ADDR6_2 0
#define DPD_HAIRPIN_ADDR6_3 0xfd

/* ---- Added by the flow-events work; mirrored in abi.go. ---- */

/* dpd_events: RINGBUF of struct dpd_flow_event, one per new flow the policy
 * decided (or found no policy for). Allowed flows report once (their next
 * packets hit conntrack, which never writes here); denied ones at most once
 * per flow per dpd_ev_cfg.deny_interval_ns, carrying how many packets of the
 * flow were denied unreported since the previous event. A full ring drops
 * the event, never the packet, and counts it in dpd_ev_drops. */
#define DPD_EV_DECIDED   1 /* the policy decided: verdict and rule_id */
#define DPD_EV_NO_POLICY 2 /* no policy program at the slot: dropped */

struct dpd_flow_event {
	__u64 ts_ns;        /* 0: bpf_ktime_get_coarse_ns (CLOCK_MONOTONIC_COARSE) */
	__u64 rule_id;      /* 8: deciding rule's counter id; 0 = none */
	__u8  saddr[16];    /* 16: as policed (after DNAT) */
	__u8  daddr[16];    /* 32 */
	__u16 sport;        /* 48: host order */
	__u16 dport;        /* 50: host order */
	__u8  proto;        /* 52 */
	__u8  family;       /* 53 */
	__u8  dir;          /* 54: DPD_DIR_* */
	__u8  verdict;      /* 55: DPD_VERDICT_* */
	__u32 ifindex;      /* 56 */
	__u32 flags;        /* 60: dpd_state.flags at the decision (DPD_ST_*) */
	__u32 suppressed;   /* 64: denied packets of the flow not reported since the previous event */
	__u32 pkt_len;      /* 68 */
	__u8  nat_addr[16]; /* 72: DPD_ST_NAT: the frontend before DNAT */
	__u16 nat_port;     /* 88: host order */
	__u8  kind;         /* 90: DPD_EV_* */
	__u8  icmp_type;    /* 91 */
	__u32 nat_svc;      /* 92 */
	__u8  icmp_code;    /* 96 */
	__u8  preview_verdict; /* 97: DPD_VERDICT_* of the staged preview; NONE = no preview */
	__u8  ev_pad[6];    /* 98 */
	__u64 preview_rule_id; /* 104: the preview's deciding rule */
};                          /* sizeof == 112 */

/* dpd_ev_cfg: ARRAY[1], written by userspace. Events are off until it says
 * DPD_EV_CFG_ON. */
#define DPD_EV_CFG_ON (1u << 0)
/* Staged-policy preview: after an endpoint's policy decided, the epilogue
 * keeps the verdict aside (dpd_preview_st), tail-calls the endpoint's
 * preview program (dpd_preview[DPD_JUMP_POL_BASE + 2*slot + dir]: its
 * policy with the staged policies enforced) and, when that returns to the
 * epilogue, reports its verdict beside the real one, which alone is acted
 * on. A slot without a preview program costs the failed tail call. */
#define DPD_EV_CFG_PREVIEW (1u << 1)
/* dpd_state.flags: the preview program is running (the epilogue's second pass). */
#define DPD_ST_PREVIEW (1u << 27)

/* dpd_preview_st: PERCPU_ARRAY[1], the real decision while the preview runs. */
struct dpd_preview_st {
	__u64 rule_id;  /* 0 */
	__u32 verdict;  /* 8 */
	__u32 pad;      /* 12 */
};                      /* sizeof == 16 */
struct dpd_ev_cfg {
	__u32 flags;            /* 0: DPD_EV_CFG_* */
	__u32 deny_mask;        /* 4: dpd_ev_deny slots - 1 (a power of two minus one) */
	__u64 deny_interval_ns; /* 8: one event per denied flow per interval */
};                              /* sizeof == 16 */

/* dpd_ev_deny: ARRAY of recently reported denied flows, direct-mapped: a
 * flow lives in slot hash(flow) & deny_mask, so looking it up is one
 * inlined array access and a key compare instead of an LRU hash lookup
 * and insert. A flow whose slot holds another flow with packets still to
 * report is reported without rate limiting (counts are never lost). */
struct dpd_ev_deny {
	struct dpd_ct_key key; /* 0: the flow (dpd_ct_key as the hook would create it) */
	__u32 pad;      /* 44 */
	__u64 last_ns;  /* 48: ts_ns of the flow's last event */
	__u64 count;    /* 56: denied packets since, not reported */
};                      /* sizeof == 64 */

/* ---- Added by the host-endpoint work; mirrored in abi.go. ---- */

/* dpd_ifstate.flags: the interface is one of the node's own, policed by
 * dpd_hep_in/dpd_hep_out (bpf/dpd_hep.h) for the host endpoint bound to
 * it. Host interfaces are never failed closed: without a READY|HOST entry
 * their traffic passes unpoliced. */
#define DPD_IF_HOST (1u << 2)
/* dpd_ifstate.flags of a host interface, bits 16..31: 1 + the slot of its
 * host endpoint's forward policy (applyOnForward: traffic the host
 * forwards through the interface); 0: forwarded traffic is not policed. */
#define DPD_IF_FWD_SHIFT 16

/* dpd_state.flags, trace only: a failsafe port let the packet through
 * before any policy. */
#define DPD_ST_FAILSAFE (1u << 28)

/* dpd_failsafes: LPM_TRIE of FailsafeInboundHostPorts/OutboundHostPorts.
 * prefixlen counts the fixed 32 bits of port, proto and flags, then the
 * bits of the peer's address (inbound: the source; outbound: the
 * destination): "tcp:22" is prefixlen 32 with address 0, "tcp:10.0.0.0/8:22"
 * prefixlen 40. Checked on a host interface before conntrack's policy
 * path, so no host endpoint policy can cut the node off its control plane. */
struct dpd_failsafe_key {
	__u32 prefixlen;
	__u16 port;     /* 4: destination port, host order */
	__u8  proto;    /* 6: IPPROTO_TCP or IPPROTO_UDP */
	__u8  flags;    /* 7: DPD_FS_* */
	__u8  addr[4];  /* 8: the peer's IPv4 address, network order */
};                      /* sizeof == 12 */
/* dpd_hep_stages: HASH ifindex -> struct dpd_hep_stages, the slots of a
 * host interface's untracked (doNotTrack) and pre-DNAT policies, each
 * 1 + slot (0: none). Untracked policy runs first, before conntrack, in
 * both directions: allow passes without creating a conntrack entry, an
 * explicit deny drops, no match goes on. Pre-DNAT policy runs next, for
 * new flows entering through the interface (to the host or forwarded):
 * deny drops, allow and no match go on to the normal or forward policy. */
struct dpd_hep_stages {
	__u32 untracked; /* 0 */
	__u32 prednat;   /* 4 */
};                       /* sizeof == 8 */

/* dpd_state.flags of a staged evaluation (the policy tail-calls the
 * epilogue, which hands it to dpd_hep_epilogue), and which stage. */
/* dpd_ct_val.flags: a flow a failsafe port let in or out of a host
 * interface. Its replies pass before untracked policy too: failsafes take
 * precedence over every policy. */
#define DPD_CT_F_FAILSAFE (1u << 4)

#define DPD_ST_HEP_UNTRACKED (1u << 29)
#define DPD_ST_HEP_PREDNAT   (1u << 30)

/* dpd_jump entries of the host entry programs' continuations, which run
 * the stages after a staged evaluation that went on. */
#define DPD_JUMP_HEP_CONT_FROM_WEP 14
#define DPD_JUMP_HEP_CONT_TO_WEP   15

/* dpd_hep_cfg: ARRAY[1], written by userspace from ConfigUpdate. to_host
 * is Felix's DefaultEndpointToHostAction for traffic from a workload to the
 * host itself, after the workload's egress policy allowed it. 0 (a map not
 * written yet) is Accept, as before the setting existed. */
struct dpd_hep_cfg {
	__u32 to_host;      /* 0: DPD_TO_HOST_* */
	__u32 to_host_slot; /* 4: Return: 1 + the slot of the wildcard host endpoint's ingress policy (0: none, accept) */
};                          /* sizeof == 8 */
#define DPD_TO_HOST_ACCEPT 0
#define DPD_TO_HOST_DROP   1
#define DPD_TO_HOST_RETURN 2 /* the wildcard host endpoint's ingress policy decides */

/* dpd_state.flags: the to-host policy of Return is deciding this packet. */
#define DPD_ST_HEP_TOHOST (1u << 31)

#define DPD_FS_KEY_FIXED_BITS 32
#define DPD_FS_INBOUND  1 /* to the host, through a host interface */
#define DPD_FS_OUTBOUND 2 /* from the host */

/* dpd_failsafes6: LPM_TRIE of the IPv6 failsafes, laid out as
 * dpd_failsafe_key with a 16-byte address: "tcp:22" is prefixlen 32 with
 * address ::, "tcp:[fd00::/8]:22" prefixlen 40. A map of its own, so the
 * IPv4 map keeps its layout across an upgrade. */
struct dpd_failsafe6_key {
	__u32 prefixlen;
	__u16 port;     /* 4: destination port, host order */
	__u8  proto;    /* 6: IPPROTO_TCP or IPPROTO_UDP */
	__u8  flags;    /* 7: DPD_FS_* */
	__u8  addr[16]; /* 8: the peer's IPv6 address, network order */
};                      /* sizeof == 24 */

/* dpd_fwd_cfg: ARRAY[1], written by userspace. A packet a workload sends to
 * another workload of this node is redirected by dpd_from_wep straight to
 * the destination's host-side interface (dpd_fwd.h) unless
 * DPD_FWD_CFG_STACK says to leave every packet to the host's IP stack; one
 * of a flow the destination's dpd_to_wep already passes goes into the
 * destination's namespace (its peer) unless DPD_FWD_CFG_NO_PEER. 0 (a map
 * not written yet) is redirect, to the peer where it may. */
struct dpd_fwd_cfg {
	__u32 flags;
};
#define DPD_FWD_CFG_STACK   (1u << 0)
#define DPD_FWD_CFG_NO_PEER (1u << 1)

/* dpd_fwd_cache: PERCPU_ARRAY of DPD_FWD_CACHE_ENTRIES, direct-mapped by a
 * hash of (ifindex, saddr, daddr): the outcome of dpd_fwd_local's two FIB
 * lookups for a packet entering on ifindex from saddr to daddr, so that the
 * packets after a pair's first skip them. Written by the programs alone. */
struct dpd_fwd_cache_ent {
	__u8  saddr[16];  /* 0 */
	__u8  daddr[16];  /* 16 */
	__u32 ifindex;    /* 32: the interface the packet entered on */
	__u32 oif;        /* 36: the destination's interface; 0 = empty */
	__u8  macs[12];   /* 40: the new Ethernet header's destination (the
			   * workload's) and source (oif's own) */
	__u8  family;     /* 52: 4 or 6 */
	__u8  pad[3];     /* 53 */
	__u64 expires;    /* 56: dpd_now() past which the entry is not used */
};                        /* sizeof == 64 */
#define DPD_FWD_CACHE_BITS    10
#define DPD_FWD_CACHE_ENTRIES (1u << 10) /* 1 << DPD_FWD_CACHE_BITS */
/* How long an entry stands for the FIB: a route or neighbour change made by
 * anyone reaches a pair's packets within this, plus a tick of dpd_now's
 * clock (a destination interface that stops being a ready workload one
 * does at once: every hit checks it). A change of the entry's layout must
 * rename the map: a pinned map of the same sizes is reused as it is. */
#define DPD_FWD_CACHE_NS 20000000 /* 20 ms */

#endif
