/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_maps.h: every map of the entry object, and nothing else (a test in
 * this package refuses a map defined in any other file). All are
 * pinned by name under the pin directory (LIBBPF_PIN_BY_NAME), so the
 * policy programs that dataplane/tcbpf/polprog loads separately and a
 * restarted dpd use the very same instances. max_entries here are
 * placeholders: dataplane/tcbpf sets every size from its MapSizes before
 * loading. Keys and values are include/dpd_abi.h's, shared with userspace.
 * The IP set index (dpd_ipset_idx) is not here: userspace creates it for
 * the policy programs alone.
 */
#ifndef DPD_MAPS_H
#define DPD_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "dpd_abi.h"

/* Per-CPU scratch for the packet being policed (entry -> policy -> epilogue). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dpd_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_state SEC(".maps");

/* Epilogue at DPD_JUMP_EPILOGUE, policies from DPD_JUMP_POL_BASE. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2016);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_jump SEC(".maps");

/* Continuations of policies split across programs; owned by the compiler. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_chain SEC(".maps");

/* ifindex -> endpoint slot and readiness. Missing = not ours or not ready. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1000);
	__type(key, __u32);
	__type(value, struct dpd_ifstate);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_ifstate SEC(".maps");

/* The same entries for ifindexes below DPD_IFSTATE_ARR_ENTRIES, each
 * written in one store by dpd_ifstate_set; all zero = no entry. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DPD_IFSTATE_ARR_ENTRIES);
	__type(key, __u32);
	__type(value, struct dpd_ifstate);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_ifstate_arr SEC(".maps");

/* The programs' clock (struct dpd_clock); written by dpd_clock_sync. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dpd_clock);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_clock SEC(".maps");

/* IP set members; read by the policy programs, written by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1048576);
	__type(key, struct dpd_ipset_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_ipsets SEC(".maps");

/* IP set name -> id; userspace only, pinned so a restart keeps the ids. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct dpd_ipset_name);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_ipset_ids SEC(".maps");

/* Conntrack (dpd_ct.h). A plain hash, preallocated: taking an element is
 * one pop from a per-CPU free list, where an LRU hash walks its lists to
 * rotate them (on a node that had closed enough flows for the scanner to
 * free entries, ~1.5 us more per new connection). Entries go only when the
 * userspace scanner deletes them; a full map refuses new flows
 * (DPD_DROP_CT_FULL) instead of evicting live ones. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512000);
	__type(key, struct dpd_ct_key);
	__type(value, struct dpd_ct_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_conntrack SEC(".maps");

/* The LRU conntrack of a dpd before dpd_conntrack, same layout: read on a
 * miss while DPD_CT_CFG_LRU says it may hold entries, written instead of
 * dpd_conntrack while that dpd's entry programs still run
 * (DPD_CT_CFG_WRITE_LRU). Userspace moves its entries over and unpins it;
 * on a node without it, userspace pins a one-entry stand-in. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 512000);
	__type(key, struct dpd_ct_key);
	__type(value, struct dpd_ct_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_ct SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dpd_ct_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_ct_cfg SEC(".maps");

/* Rule id -> counters. Userspace creates the entries; BPF only adds. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct dpd_counter);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_rule_ctrs SEC(".maps");

/* The final dpd_state of the last trace run (Inspect). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dpd_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_trace SEC(".maps");

/* Frontends; written by userspace (dataplane/tcbpf/nat.go). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct dpd_nat_fe_key);
	__type(value, struct dpd_nat_fe_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_nat_fe SEC(".maps");

/* Filter of frontend addresses; written by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dpd_nat_fe_bits);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_nat_fe_bits SEC(".maps");

/* Backends by (service port id, ordinal); written by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__type(key, struct dpd_nat_be_key);
	__type(value, struct dpd_nat_be_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_nat_be SEC(".maps");

/* RouteUpdate destinations; written by userspace (dataplane/tcbpf/routes.go). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 262144);
	__type(key, struct dpd_route_key);
	__type(value, struct dpd_route_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_routes SEC(".maps");

/* What the first fragment of a datagram said, for its later fragments
 * (dpd_frag.h); written by the programs only. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct dpd_frag_key);
	__type(value, struct dpd_frag_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_frags SEC(".maps");

/* Packets dropped for a reason no rule counts, by DPD_DROP_*. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DPD_DROP_MAX);
	__type(key, __u32);
	__type(value, struct dpd_counter);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_drop_ctrs SEC(".maps");

/* ---- Flow events and staged previews (dpd_events.h reads and writes them). ---- */

/* Ring of struct dpd_flow_event; max_entries is its size in bytes. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_events SEC(".maps");

/* Events a full ring could not take (per CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_ev_drops SEC(".maps");

/* On/off and the denied-flow interval; written by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dpd_ev_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_ev_cfg SEC(".maps");

/* Denied flows reported recently, with the packets denied since: a
 * direct-mapped cache (dpd_abi.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct dpd_ev_deny);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_ev_deny SEC(".maps");

/* Staged previews: the preview program of endpoint slot s, direction d
 * at DPD_JUMP_POL_BASE + 2*s + d, as in dpd_jump; max_entries is set by
 * userspace to dpd_jump's. Pinned like dpd_jump: a restarted dpd finds its
 * epilogue current (it refers to the map) and the previews of the
 * endpoints it adopts still installed (their programs are pinned too). */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2016);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_preview SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dpd_preview_st);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_preview_st SEC(".maps");

/* ---- NAT scratch (dpd_nat.h). ---- */

/* dpd_ct_new is where the entry program builds a new conntrack value: at
 * 88 bytes it does not fit beside the rest of the entry's stack and the
 * IPv6 walk's frame (512 bytes together). Per CPU: a packet is processed
 * on one CPU from start to end. Pinned like every map the entry programs
 * use, so a restarted dpd finds its attached programs current. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__type(key, __u32);
	__type(value, struct dpd_ct_val);
} dpd_ct_new SEC(".maps");

/* ---- Host endpoints (dpd_hep.h): failsafes, stages, configuration. ---- */

/* FailsafeInboundHostPorts / FailsafeOutboundHostPorts, written by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__type(key, struct dpd_failsafe_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_failsafes SEC(".maps");

/* The IPv6 failsafes: entries as in dpd_failsafes, 16-byte addresses. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__type(key, struct dpd_failsafe6_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_failsafes6 SEC(".maps");

/* ifindex -> the untracked and pre-DNAT policy slots of a host interface. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1000);
	__type(key, __u32);
	__type(value, struct dpd_hep_stages);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_hep_stages SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dpd_hep_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_hep_cfg SEC(".maps");

/* Whether workload-to-workload packets skip the host's IP stack
 * (dpd_fwd.h); written by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dpd_fwd_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_fwd_cfg SEC(".maps");

/* The outcome of recent workload-to-workload FIB lookups, per CPU
 * (dpd_fwd.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DPD_FWD_CACHE_ENTRIES);
	__type(key, __u32);
	__type(value, struct dpd_fwd_cache_ent);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_fwd_cache SEC(".maps");

#endif
