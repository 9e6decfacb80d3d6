/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_events.h: flow events. The epilogue (and the entry, when no policy is
 * installed) reports each new flow's decision to dpd_events, a ring buffer
 * userspace reads (dataplane/tcbpf/events.go). Only the policy path calls
 * in: conntrack hits return before it, so established traffic never pays
 * for events. Denied flows are rate-limited per flow through dpd_ev_deny.
 * Layouts are in dpd_abi.h and the maps in dpd_maps.h; sizes are set by
 * userspace before loading.
 */
#ifndef DPD_EVENTS_H
#define DPD_EVENTS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "dpd_abi.h"
#include "dpd_maps.h"
#include "dpd_clock.h"
#include "dpd_ifstate.h"

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

/* dpd_ev_hash mixes a flow's key into a dpd_ev_deny slot number: the key
 * read as five words and the ifindex, each multiplied by an odd constant. */
static __always_inline __u32 dpd_ev_hash(const struct dpd_ct_key *k)
{
	const __u64 *w = (const __u64 *)k;
	__u64 x = w[0] * 0x9e3779b97f4a7c15ull ^ w[1] * 0xc2b2ae3d27d4eb4full ^
		  w[2] * 0x165667b19e3779f9ull ^ w[3] * 0xd6e8feb86659fd93ull ^
		  w[4] * 0xff51afd7ed558ccdull ^ (__u64)k->ifindex * 0xc4ceb9fe1a85ec53ull;

	return (__u32)(x >> 32) ^ (__u32)x;
}

static __always_inline int dpd_ev_same(const struct dpd_ct_key *a, const struct dpd_ct_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3] && x[4] == y[4] &&
	       a->ifindex == b->ifindex;
}

/* dpd_preview_run runs the staged preview of a decided new flow when it is on
 * and the endpoint has one: it only returns when it does not (the preview
 * program comes back through the epilogue, dpd_preview_back). */
static __always_inline void dpd_preview_run(struct __sk_buff *skb, struct dpd_state *st)
{
	struct dpd_preview_st *keep;
	struct dpd_ifstate ifs;
	struct dpd_ev_cfg *cfg;
	__u32 zero = 0, ifindex = st->ifindex;

	cfg = bpf_map_lookup_elem(&dpd_ev_cfg, &zero);
	if (!cfg || (cfg->flags & (DPD_EV_CFG_ON | DPD_EV_CFG_PREVIEW)) != (DPD_EV_CFG_ON | DPD_EV_CFG_PREVIEW))
		return;
	ifs = dpd_ifstate_get(ifindex);
	keep = bpf_map_lookup_elem(&dpd_preview_st, &zero);
	if (!(ifs.flags & DPD_IF_READY) || !keep)
		return;
	keep->verdict = st->verdict;
	keep->rule_id = st->rule_id;
	st->flags |= DPD_ST_PREVIEW;
	st->verdict = DPD_VERDICT_NONE;
	st->rule_id = 0;
	st->chain_pos = 0;
	__builtin_memset(st->pol_scratch, 0, sizeof(st->pol_scratch));
	bpf_tail_call(skb, &dpd_preview, DPD_JUMP_POL_BASE + 2 * ifs.slot + st->dir);
	/* No preview program for the slot: the decision stands as it was. */
	st->flags &= ~DPD_ST_PREVIEW;
	st->verdict = keep->verdict;
	st->rule_id = keep->rule_id;
}

/* dpd_preview_back restores the real decision when the preview program
 * has tail-called the epilogue, returning the preview's verdict and rule. */
static __always_inline void dpd_preview_back(struct dpd_state *st, __u8 *verdict, __u64 *rule_id)
{
	struct dpd_preview_st *keep;
	__u32 zero = 0;

	*verdict = st->verdict == DPD_VERDICT_ALLOW ? DPD_VERDICT_ALLOW : DPD_VERDICT_DENY;
	*rule_id = st->rule_id;
	st->flags &= ~DPD_ST_PREVIEW;
	keep = bpf_map_lookup_elem(&dpd_preview_st, &zero);
	if (!keep) {
		/* Cannot happen (a one-entry array); fail closed. */
		st->verdict = DPD_VERDICT_DENY;
		st->rule_id = 0;
		return;
	}
	st->verdict = keep->verdict;
	st->rule_id = keep->rule_id;
}

static __always_inline void dpd_event_preview(const struct dpd_state *st, __u8 kind,
					      __u8 preview_verdict, __u64 preview_rule_id);

/* dpd_event reports the decision in st (kind DPD_EV_*). Never fails the
 * packet: every error path only loses the event. */
static __always_inline void dpd_event(const struct dpd_state *st, __u8 kind)
{
	dpd_event_preview(st, kind, DPD_VERDICT_NONE, 0);
}

/* dpd_event_preview is dpd_event with the staged preview's decision. */
static __always_inline void dpd_event_preview(const struct dpd_state *st, __u8 kind,
					      __u8 preview_verdict, __u64 preview_rule_id)
{
	struct dpd_flow_event *ev;
	struct dpd_ev_deny *slot = 0;
	struct dpd_ev_cfg *cfg;
	struct dpd_ct_key k __attribute__((aligned(8)));
	__u32 zero = 0, suppressed = 0, idx;
	int seen = 0;
	__u64 now;

	cfg = bpf_map_lookup_elem(&dpd_ev_cfg, &zero);
	if (!cfg || !(cfg->flags & DPD_EV_CFG_ON))
		return;
	/* The programs' clock (a tick, some ms) is enough to label and
	 * rate-limit, and costs a fraction of the precise one. */
	now = dpd_now();
	/* Zeroed on every path: clang would otherwise spill it undefined. */
	__builtin_memset(&k, 0, sizeof(k));
	if (st->verdict != DPD_VERDICT_ALLOW) {
		__builtin_memcpy(k.saddr, st->saddr, 16);
		__builtin_memcpy(k.daddr, st->daddr, 16);
		k.sport = st->sport;
		k.dport = st->dport;
		k.proto = st->proto;
		k.dir = st->dir;
		k.family = st->family == 6 ? DPD_CT_FAMILY_V6 : DPD_CT_FAMILY_V4;
		k.ifindex = st->ifindex;
		idx = dpd_ev_hash(&k) & cfg->deny_mask;
		slot = bpf_map_lookup_elem(&dpd_ev_deny, &idx);
		if (slot) {
			/* Signed: the clock may step back a tick at a sync (dpd_clock.h). */
			int fresh = (__s64)(now - slot->last_ns) < (__s64)cfg->deny_interval_ns;

			if (dpd_ev_same(&slot->key, &k)) {
				if (fresh) {
					__sync_fetch_and_add(&slot->count, 1);
					return;
				}
				seen = 1;
			} else if (slot->count && fresh) {
				/* Another flow with packets to report: keep it,
				 * and report this one unlimited. */
				slot = 0;
			}
		}
	}
	ev = bpf_ringbuf_reserve(&dpd_events, sizeof(*ev), 0);
	if (!ev) {
		/* Not marked as reported: the flow's next packet tries again. */
		dpd_ev_drop();
		return;
	}
	if (seen) {
		/* Usually nothing was counted: skip the atomic then. What
		 * another CPU adds between the read and the subtraction stays
		 * for the next event. */
		suppressed = slot->count;
		if (suppressed)
			__sync_fetch_and_sub(&slot->count, (__u64)suppressed);
		slot->last_ns = now;
	} else if (slot) {
		/* Take the slot over. Its former flow was quiet a whole
		 * interval or had nothing to report. */
		__builtin_memcpy(&slot->key, &k, sizeof(k));
		slot->count = 0;
		slot->last_ns = now;
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
	ev->preview_verdict = preview_verdict;
	__builtin_memset(ev->ev_pad, 0, sizeof(ev->ev_pad));
	ev->preview_rule_id = preview_rule_id;
	/* No wakeup: one per event cost the reader ~20 us of CPU under load
	 * (a context switch each); userspace polls every few ms instead. */
	bpf_ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
}

#endif
