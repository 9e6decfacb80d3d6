// Command dpd-bench measures dpd at node scale against the real daemon and
// writes BENCHMARKS.md (`make bench`). The driver lives in internal/bench.
package main
