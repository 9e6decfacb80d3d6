/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ringcost.c: stand-alone programs that time ways of handing a 112-byte
 * flow event (struct dpd_flow_event's size) to userspace, for
 * BenchmarkRingCost (ringcost_bench_test.go compiles it with clang-19).
 * Every program drops the packet; "base" does nothing else. Not part of
 * dpd.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

struct rec { __u64 a[14]; };  /* 112 bytes */
struct rec64 { __u64 a[8]; }; /* 64 bytes */

struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 1 << 20); } warm SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 1 << 26); } cold SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY); __uint(key_size, 4); __uint(value_size, 4); } perf SEC(".maps");

#define B16 16
#define B32 32
struct batch16 { __u32 n; __u32 pad; struct rec r[B16]; };
struct batch32 { __u32 n; __u32 pad; struct rec r[B32]; };
struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __uint(max_entries, 1); __type(key, __u32); __type(value, struct batch16); } pcb16 SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __uint(max_entries, 1); __type(key, __u32); __type(value, struct batch32); } pcb32 SEC(".maps");
struct tval { struct bpf_timer t; __u32 armed; };
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 512); __type(key, __u32); __type(value, struct tval); } timers SEC(".maps");

static __always_inline void fill(__u64 *a, int n, struct __sk_buff *skb)
{
	for (int i = 0; i < n; i++)
		a[i] = skb->len + i;
}

SEC("tc") int base(struct __sk_buff *skb) { return TC_ACT_SHOT; }

SEC("tc") int reserve(struct __sk_buff *skb)
{
	struct rec *r = bpf_ringbuf_reserve(&warm, sizeof(*r), 0);

	if (!r)
		return TC_ACT_SHOT;
	fill(r->a, 14, skb);
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
	return TC_ACT_SHOT;
}

SEC("tc") int reserve_cold(struct __sk_buff *skb)
{
	struct rec *r = bpf_ringbuf_reserve(&cold, sizeof(*r), 0);

	if (!r)
		return TC_ACT_SHOT;
	fill(r->a, 14, skb);
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
	return TC_ACT_SHOT;
}

SEC("tc") int reserve64(struct __sk_buff *skb)
{
	struct rec64 *r = bpf_ringbuf_reserve(&warm, sizeof(*r), 0);

	if (!r)
		return TC_ACT_SHOT;
	fill(r->a, 8, skb);
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
	return TC_ACT_SHOT;
}

SEC("tc") int output(struct __sk_buff *skb)
{
	struct rec r;

	fill(r.a, 14, skb);
	bpf_ringbuf_output(&warm, &r, sizeof(r), BPF_RB_NO_WAKEUP);
	return TC_ACT_SHOT;
}

SEC("tc") int perf_output(struct __sk_buff *skb)
{
	struct rec r;

	fill(r.a, 14, skb);
	bpf_perf_event_output(skb, &perf, BPF_F_CURRENT_CPU, &r, sizeof(r));
	return TC_ACT_SHOT;
}

SEC("tc") int percpu_write(struct __sk_buff *skb)
{
	__u32 z = 0, n;
	struct batch16 *b = bpf_map_lookup_elem(&pcb16, &z);

	if (!b)
		return TC_ACT_SHOT;
	n = b->n < B16 ? b->n : 0;
	fill(b->r[n].a, 14, skb);
	b->n = n + 1 == B16 ? 0 : n + 1;
	return TC_ACT_SHOT;
}

SEC("tc") int batch16(struct __sk_buff *skb)
{
	__u32 z = 0, n;
	struct batch16 *b = bpf_map_lookup_elem(&pcb16, &z);

	if (!b)
		return TC_ACT_SHOT;
	n = b->n < B16 ? b->n : 0;
	fill(b->r[n].a, 14, skb);
	if (++n == B16) {
		bpf_ringbuf_output(&warm, b->r, sizeof(b->r), BPF_RB_NO_WAKEUP);
		n = 0;
	}
	b->n = n;
	return TC_ACT_SHOT;
}

SEC("tc") int batch32(struct __sk_buff *skb)
{
	__u32 z = 0, n;
	struct batch32 *b = bpf_map_lookup_elem(&pcb32, &z);

	if (!b)
		return TC_ACT_SHOT;
	n = b->n < B32 ? b->n : 0;
	fill(b->r[n].a, 14, skb);
	if (++n == B32) {
		bpf_ringbuf_output(&warm, b->r, sizeof(b->r), BPF_RB_NO_WAKEUP);
		n = 0;
	}
	b->n = n;
	return TC_ACT_SHOT;
}

/* flush_cb sends what the batch of the timer's CPU holds. */
static int flush_cb(void *map, __u32 *key, struct tval *v)
{
	__u32 z = 0, n;
	struct batch32 *b = bpf_map_lookup_elem(&pcb32, &z);

	v->armed = 0;
	if (!b || !b->n)
		return 0;
	n = b->n;
	if (n > B32)
		n = B32;
	bpf_ringbuf_output(&warm, b->r, n * sizeof(struct rec), BPF_RB_NO_WAKEUP);
	b->n = 0;
	return 0;
}

/* batch32_timer is batch32 arming a CPU-pinned 10 ms flush timer on the
 * first event of a batch, which bounds an event's wait. */
SEC("tc") int batch32_timer(struct __sk_buff *skb)
{
	__u32 z = 0, cpu = bpf_get_smp_processor_id(), n;
	struct batch32 *b = bpf_map_lookup_elem(&pcb32, &z);
	struct tval *v;

	if (!b)
		return TC_ACT_SHOT;
	n = b->n < B32 ? b->n : 0;
	fill(b->r[n].a, 14, skb);
	if (n == 0) {
		v = bpf_map_lookup_elem(&timers, &cpu);
		if (v && !v->armed) {
			bpf_timer_init(&v->t, &timers, 1 /* CLOCK_MONOTONIC */);
			bpf_timer_set_callback(&v->t, flush_cb);
			if (!bpf_timer_start(&v->t, 10000000, 1u << 1 /* BPF_F_TIMER_CPU_PIN */))
				v->armed = 1;
		}
	}
	if (++n == B32) {
		bpf_ringbuf_output(&warm, b->r, sizeof(b->r), BPF_RB_NO_WAKEUP);
		n = 0;
	}
	b->n = n;
	return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "GPL";
