package tcbpf

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/perf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// BenchmarkRingCost times ways of handing a 112-byte event to userspace
// in stand-alone programs (testdata/ringcost.c): the ring buffer's
// reserve and submit into a ring the reader keeps up with (1 MiB) and
// into one whose memory is cold (64 MiB), a 64-byte record,
// bpf_ringbuf_output from the stack, a perf event array, and per-CPU
// batches of 16 or 32 events sent as one ring record (with a CPU-pinned
// flush timer armed per batch). Each is run in chunks of ringChunk
// packets, the rings read empty between chunks, the programs
// interleaved; ns/pkt is each one's median chunk minus base's.
func BenchmarkRingCost(b *testing.B) {
	testutil.RequirePrivileged(b)
	clang, err := exec.LookPath("clang-19")
	if err != nil {
		b.Skip("clang-19 not found")
	}
	obj := filepath.Join(b.TempDir(), "ringcost.o")
	if out, err := exec.Command(clang, "-O2", "-mcpu=v3", "-g", "-target", "bpf", "-I", "../../bpf/include",
		"-c", "testdata/ringcost.c", "-o", obj).CombinedOutput(); err != nil {
		b.Fatalf("compile: %v\n%s", err, out)
	}
	coll, err := ebpf.LoadCollection(obj)
	if err != nil {
		b.Fatal(err)
	}
	defer coll.Close()
	pr, err := perf.NewReaderWithOptions(coll.Maps["perf"], 4<<20, perf.ReaderOptions{Watermark: 2 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer pr.Close()
	var rings []*ringbuf.Reader
	for _, name := range []string{"warm", "cold"} {
		r, err := ringbuf.NewReader(coll.Maps[name])
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		// The programs do not wake the reader: a deadline passed makes
		// Read look at the ring without waiting.
		r.SetDeadline(time.Now())
		rings = append(rings, r)
	}
	drain := func() {
		for _, r := range rings {
			for r.AvailableBytes() > 0 {
				if _, err := r.Read(); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					b.Fatal(err)
				}
			}
		}
		pr.SetDeadline(time.Now())
		for {
			if _, err := pr.Read(); err != nil {
				break
			}
		}
	}
	names := []string{"base", "reserve", "reserve_cold", "reserve64", "output", "perf_output",
		"percpu_write", "batch16", "batch32", "batch32_timer"}
	per := map[string][]time.Duration{}
	frame := make([]byte, 64)
	for done := 0; done < b.N; done += ringChunk {
		for _, n := range names {
			drain()
			_, d, err := coll.Programs[n].Benchmark(frame, ringChunk, nil)
			if err != nil {
				b.Fatalf("%s: %v", n, err)
			}
			per[n] = append(per[n], d)
		}
	}
	median := func(n string) float64 {
		v := slices.Clone(per[n])
		slices.Sort(v)
		return float64(v[len(v)/2].Nanoseconds())
	}
	for _, n := range names[1:] {
		b.ReportMetric(median(n)-median("base"), n+"-ns/pkt")
	}
	b.ReportMetric(median("base"), "base-ns/pkt")
}

// ringChunk packets' records fit the 1 MiB ring (112 bytes and an 8-byte
// header each) and the perf buffer.
const ringChunk = 4096
