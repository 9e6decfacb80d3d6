package bench

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// threadMasks is the affinity of every thread of the process.
func threadMasks(t *testing.T) map[int]unix.CPUSet {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]unix.CPUSet{}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err == nil {
			out[tid] = set
		}
	}
	return out
}

func TestPinThreads(t *testing.T) {
	cpu, err := trafficCPU()
	if err != nil {
		t.Fatal(err)
	}
	if cpu < 0 {
		cpu = 0 // one CPU: pinning to it still must set every thread
	}
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		t.Fatal(err)
	}
	restore, err := pinThreads(cpu)
	if err != nil {
		t.Fatal(err)
	}
	restored := false
	defer func() {
		if !restored {
			_ = restore()
		}
	}()
	for tid, set := range threadMasks(t) {
		if set.Count() != 1 || !set.IsSet(cpu) {
			t.Errorf("thread %d: %d CPUs after pinning to CPU %d", tid, set.Count(), cpu)
		}
	}
	restored = true
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	for tid, set := range threadMasks(t) {
		if set != orig {
			t.Errorf("thread %d: %d CPUs after restore, want %d", tid, set.Count(), orig.Count())
		}
	}
}
