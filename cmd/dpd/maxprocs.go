package main

import (
	"fmt"
	"strconv"
)

// maxProcsLimit bounds --max-procs: the runtime allocates per-P state for
// each, and no node this runs on has anywhere near as many CPUs.
const maxProcsLimit = 1024

// maxProcs is a --max-procs value: the Go runtime's GOMAXPROCS, or 0 for
// dpd's default (twice the CPUs the runtime found); set records that the
// flag or its variable gave it.
//
// Why more Ps than CPUs: dpd's work is kernel calls that keep their thread
// on a CPU for hundreds of microseconds (a policy program's load, an
// attach, a netlink dump). The runtime counts a thread in a system call as
// holding its P until sysmon takes the P back, which after an idle spell
// is up to 10 ms later. With as many Ps as CPUs, the second of an
// endpoint's two program loads, or the goroutine reading the controller's
// next message, waits for a P while a CPU is free. Twice as many Ps let
// the kernel, not the Go scheduler, share the CPUs between those calls.
type maxProcs struct {
	n   int
	set bool
}

func (m *maxProcs) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > maxProcsLimit {
		return fmt.Errorf("%q is not a count from 1 to %d, or 0 for twice the CPUs", s, maxProcsLimit)
	}
	*m = maxProcs{n: n, set: true}
	return nil
}

func (m *maxProcs) String() string {
	if m == nil {
		return "0"
	}
	return strconv.Itoa(m.n)
}

// procsTarget is the value to give runtime.GOMAXPROCS, or ok false to keep
// the runtime's: GOMAXPROCS, which the runtime applied itself, stands
// unless --max-procs (or DPD_MAX_PROCS) is given. cpus is the runtime's
// default (the CPUs it may use: affinity and a cgroup's CPU limit).
func procsTarget(m maxProcs, getenv func(string) string, cpus int) (n int, ok bool) {
	if !m.set && getenv("GOMAXPROCS") != "" {
		return 0, false
	}
	if m.n > 0 {
		return m.n, true
	}
	return min(2*max(cpus, 1), maxProcsLimit), true
}
