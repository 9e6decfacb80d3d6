// Package e2e is dpd's privileged end-to-end suite. It builds and starts the
// real dpd binary with the linux dataplane, wires workloads into network
// namespaces the way a Calico CNI plugin does, drives the daemon through its
// controller stream exactly as a Felix-style calc graph would, and judges
// policy by real packets: ping, TCP connect and UDP echo, allowed and denied.
//
// The harness lives in the non-test files: daemon.go (building the binaries
// and the daemon's lifecycle), controller.go (a client.Session and the
// endpoint statuses it reports), workload.go and cni.go (namespaces, and
// the in-namespace servers of ./nethelper), probes.go (ping, TCP and UDP
// probes and eventual expectations), kstate.go (what tc, bpftool and ip see
// on an interface), scenario.go and rules.go (ToDataplane builders and
// Felix-ordered scenario diffs). The cases are in the _test.go files.
//
// Run as root: `go test ./test/e2e/`. Without root the tests skip; with
// CI=true they fail instead, so CI proves they ran. Workload addresses are
// 10.65.0.0/24 and interfaces are named cali<pid><n>, so two suites must not
// run on one host at the same time.
package e2e
