/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dpd_trace.h: what a trace run (DPD_TRACE_MARK, Inspect/Trace) writes.
 *
 *   dpd_trace_write  the run's dpd_state into dpd_trace
 *   dpd_trace_flags  the trace of a packet that never reached the policy:
 *                    all zero but flags
 */
#ifndef DPD_TRACE_H
#define DPD_TRACE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "dpd_abi.h"
#include "dpd_maps.h"

static __always_inline void dpd_trace_write(const struct dpd_state *st)
{
	__u32 zero = 0;

	bpf_map_update_elem(&dpd_trace, &zero, st, BPF_ANY);
}

/* Built in the dpd_state scratch, not on the stack: on the stack it would
 * cost an entry program a third of its 512 bytes, which the two families'
 * parsing and NAT fill. */
static __always_inline void dpd_trace_flags(__u32 flags)
{
	struct dpd_state *st;
	__u32 zero = 0;

	st = bpf_map_lookup_elem(&dpd_state, &zero);
	if (!st)
		return;
	__builtin_memset(st, 0, sizeof(*st));
	st->flags = flags;
	dpd_trace_write(st);
}

#endif
