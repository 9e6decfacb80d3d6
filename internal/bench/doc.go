// Package bench is the scenario driver behind the dpd-bench command (`make
// bench`): it measures dpd at node scale against the real daemon and
// writes the figures dpd is required to meet (BENCHMARKS.md):
// endpoint-to-up latency, policy fan-out, cold start, per-packet cost,
// ingest ratio, peak memory, and real traffic between pods (against no
// dpd and against nftables), beside the kernel costs the daemon measured.
//
// The daemon is started by the driver through the harness the end-to-end
// tests use too (internal/daemontest: `dpd --dataplane=linux` in a network
// namespace of its own, with a private socket and BPF pin directory) or
// attached to (Options.Socket). Workload interfaces are real
// veth pairs made over netlink. The controller is client.Session, as a
// real one would use it. Per-packet (P4) and ingest (P5) figures come from
// the repository's `go test -bench` benchmarks, run and parsed here so that
// one run yields every figure.
//
// Everything the driver creates (namespace, veths, pin directory, daemon)
// is removed when Run returns, on failure and cancellation too; leftovers
// of a driver that was killed are removed by the next Run.
package bench
