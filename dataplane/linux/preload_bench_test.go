package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// benchPrograms is how many distinct programs one iteration loads: 100
// endpoints with P3's policy shape, both directions.
const benchPrograms = 200

func benchJobs() []preloadJob {
	jobs := make([]preloadJob, 0, benchPrograms)
	for i := range benchPrograms / 2 {
		for _, dir := range []model.Direction{model.Ingress, model.Egress} {
			pol := ownPolicy(i, dir, true)
			jobs = append(jobs, preloadJob{key: progKey{hash: pol.Hash(), dir: dir}, pol: &pol})
		}
	}
	return jobs
}

func benchKernel(b *testing.B) *Kernel {
	b.Helper()
	testutil.RequirePrivileged(b)
	pin := filepath.Join("/sys/fs/bpf", fmt.Sprintf("dpd-linux-bench-%d", os.Getpid()))
	b.Cleanup(func() { _ = os.RemoveAll(pin) })
	k, err := New(Options{PinDir: pin, Log: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = k.Close() })
	addPreloadSet(b, k)
	return k
}

// BenchmarkPolicyLoad loads 200 distinct programs per iteration: one by
// one under k.mu as acquireLocked does (serial), or with PreloadPolicies'
// workers (preload). compile is the compiler's share, without loading.
// Each iteration ends by releasing the programs (not timed).
func BenchmarkPolicyLoad(b *testing.B) {
	jobs := benchJobs()
	b.Run("compile", func(b *testing.B) {
		k := benchKernel(b)
		for b.Loop() {
			for _, j := range jobs {
				if _, err := polprog.Compile(j.pol, j.key.dir, k.bpf, polprog.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("serial", func(b *testing.B) {
		k := benchKernel(b)
		for b.Loop() {
			sps := make([]*sharedProg, 0, len(jobs))
			k.mu.Lock()
			for _, j := range jobs {
				sp, err := k.pols.acquire(j.pol, j.key.dir)
				if err != nil {
					b.Fatal(err)
				}
				sps = append(sps, sp)
			}
			k.mu.Unlock()
			b.StopTimer()
			k.mu.Lock()
			for _, sp := range sps {
				k.pols.release(sp)
			}
			k.mu.Unlock()
			b.StartTimer()
		}
	})
	b.Run("preload", func(b *testing.B) {
		k := benchKernel(b)
		for b.Loop() {
			k.preload(jobs)
			b.StopTimer()
			if n := k.ProgramCount(); n != len(jobs) {
				b.Fatalf("%d programs preloaded, want %d", n, len(jobs))
			}
			releaseUnused(k)
			b.StartTimer()
		}
	})
}
