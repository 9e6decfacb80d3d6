/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_events.h: flow events. The epilogue (and the entry, when no policy is
 * installed) reports each new flow's decision to dpd_events, a ring buffer
 * userspace reads (dataplane/tcbpf/events.go). Only the policy path calls
 * in: conntrack hits return before it, so established traffic never pays
 * for events. Denied flows are rate-limited per flow through dpd_ev_deny.
 * Layouts are in dpd_abi.h; sizes are set by userspace before loading.
 */
#ifndef DPD_EVENTS_H
#define DPD_EVENTS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "dpd_abi.h"

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

/* Denied flows reported recently, with the packets denied since. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct dpd_ct_key);
	__type(value, struct dpd_ev_deny);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dpd_ev_deny SEC(".maps");

/* Keeps struct dpd_flow_event in the object's BTF (only a ring buffer
 * record has it, and records are untyped), for bpf2go and the layout test.
 * Never referenced by code. */
const struct dpd_flow_event *dpd_flow_event_btf __attribute__((unused));

static __always_inline void dpd_ev_drop(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&dpd_ev_drops, &zero);

	if (n)
		*n += 1; /* per CPU: no atomic needed */
}

/* dpd_event reports the decision in st (kind DPD_EV_*). Never fails the
 * packet: every error path only loses the event. */
static __always_inline void dpd_event(const struct dpd_state *st, __u8 kind)
{
	struct dpd_flow_event *ev;
	struct dpd_ev_deny *seen = 0;
	struct dpd_ev_cfg *cfg;
	struct dpd_ct_key k;
	__u32 zero = 0, suppressed = 0;
	__u64 now;

	cfg = bpf_map_lookup_elem(&dpd_ev_cfg, &zero);
	if (!cfg || !(cfg->flags & DPD_EV_CFG_ON))
		return;
	/* Coarse (a tick, some ms) is enough to label and rate-limit, and
	 * costs a third of the precise clock on the policy path. */
	now = bpf_ktime_get_coarse_ns();
	if (st->verdict != DPD_VERDICT_ALLOW) {
		__builtin_memset(&k, 0, sizeof(k));
		__builtin_memcpy(k.saddr, st->saddr, 16);
		__builtin_memcpy(k.daddr, st->daddr, 16);
		k.sport = st->sport;
		k.dport = st->dport;
		k.proto = st->proto;
		k.dir = st->dir;
		k.ifindex = st->ifindex;
		seen = bpf_map_lookup_elem(&dpd_ev_deny, &k);
		if (seen && now - seen->last_ns < cfg->deny_interval_ns) {
			__sync_fetch_and_add(&seen->count, 1);
			return;
		}
	}
	ev = bpf_ringbuf_reserve(&dpd_events, sizeof(*ev), 0);
	if (!ev) {
		/* Not marked as reported: the flow's next packet tries again. */
		dpd_ev_drop();
		return;
	}
	if (seen) {
		suppressed = __sync_lock_test_and_set(&seen->count, 0);
		seen->last_ns = now;
	} else if (st->verdict != DPD_VERDICT_ALLOW) {
		struct dpd_ev_deny fresh = { .last_ns = now };

		bpf_map_update_elem(&dpd_ev_deny, &k, &fresh, BPF_ANY);
	}
	ev->ts_ns = now;
	ev->rule_id = st->rule_id;
	__builtin_memcpy(ev->saddr, st->saddr, 16);
	__builtin_memcpy(ev->daddr, st->daddr, 16);
	ev->sport = st->sport;
	ev->dport = st->dport;
	ev->proto = st->proto;
	ev->family = st->family;
	ev->dir = st->dir;
	ev->verdict = st->verdict;
	ev->ifindex = st->ifindex;
	ev->flags = st->flags;
	ev->suppressed = suppressed;
	ev->pkt_len = st->pkt_len;
	__builtin_memcpy(ev->nat_addr, st->nat_addr, 16);
	ev->nat_port = st->nat_port;
	ev->kind = kind;
	ev->icmp_type = st->icmp_type;
	ev->nat_svc = st->nat_svc;
	ev->icmp_code = st->icmp_code;
	__builtin_memset(ev->ev_pad, 0, sizeof(ev->ev_pad));
	bpf_ringbuf_submit(ev, 0);
}

#endif
