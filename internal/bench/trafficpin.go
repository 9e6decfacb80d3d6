package bench

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// P7's load generator runs on one CPU. Client, server and the softirq work
// of their packets (a veth delivers on the sending CPU) then share that
// CPU, so a case's rate is what its packets cost it, and no case gains or
// loses by where the scheduler happened to put a thread or by cross-CPU
// wake-ups: on a two-core machine those moved the connection rate by ±5 %
// from run to run, more than the differences P7 measures. dpd keeps the
// CPUs it had; what it spends meanwhile is reported beside the figures.

// trafficCPU is the CPU to pin the driver to: the last one it may run
// on, or -1 when it may run on one only (nothing to separate).
func trafficCPU() (int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return -1, fmt.Errorf("read CPU affinity: %w", err)
	}
	if set.Count() < 2 {
		return -1, nil
	}
	last := -1
	for cpu := range len(set) * 64 {
		if set.IsSet(cpu) {
			last = cpu
		}
	}
	return last, nil
}

// pinThreads confines every thread of the driver to cpu; threads started
// later inherit it from the thread that starts them. restore gives every
// thread the mask the calling thread had.
func pinThreads(cpu int) (restore func() error, err error) {
	var orig, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		return nil, fmt.Errorf("read CPU affinity: %w", err)
	}
	one.Set(cpu)
	if err := setAllThreads(&one); err != nil {
		return nil, errors.Join(fmt.Errorf("pin to CPU %d: %w", cpu, err), setAllThreads(&orig))
	}
	return func() error {
		if err := setAllThreads(&orig); err != nil {
			return fmt.Errorf("unpin from CPU %d: %w", cpu, err)
		}
		return nil
	}, nil
}

// setAllThreads sets the affinity of every thread of the process, twice
// over the thread list so that one started during the first pass (from a
// thread not yet set) is set too.
func setAllThreads(set *unix.CPUSet) error {
	for range 2 {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			// A thread that exited meanwhile is no error.
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("thread %d: %w", tid, err)
			}
		}
	}
	return nil
}
