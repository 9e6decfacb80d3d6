package main

import (
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// defaultMemoryLimit is the soft limit dpd runs under unless told
// otherwise: with GOGC=100 alone the heap grows to twice the live set
// before a collection, and the node budget is 64 MiB of RSS at 1,000 endpoints.
// There the cold start's live heap (~30 MB) times GOGC 50 passes the limit,
// so the runtime's memory runs up to the limit and the peak RSS is about
// the limit plus 17 MiB (mostly the binary's pages): up to 66 MiB at 48 MiB,
// 61 MiB at 44. The collections the lower limit adds cost the cold start
// about what cutting its garbage by a quarter saved.
const defaultMemoryLimit = 44 << 20

// memorySize is a --memory-limit value in bytes; 0 means no limit. set
// records that the flag or its variable gave it.
type memorySize struct {
	bytes int64
	set   bool
}

var sizeUnits = []struct {
	suffix string
	shift  uint
}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}

// Set parses a size as GOMEMLIMIT does: a byte count with an optional
// unit B, KiB, MiB, GiB or TiB; 0 or "off" for none.
func (m *memorySize) Set(s string) error {
	if s == "off" {
		*m = memorySize{set: true}
		return nil
	}
	num, shift := s, uint(0)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = n, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64>>shift {
		return fmt.Errorf("%q is not a size such as 48MiB, 1GiB, 0 or off", s)
	}
	*m = memorySize{bytes: n << shift, set: true}
	return nil
}

func (m *memorySize) String() string {
	if m == nil || m.bytes == 0 {
		return "0"
	}
	for _, u := range sizeUnits {
		if u.shift > 0 && m.bytes%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", m.bytes>>u.shift, u.suffix)
		}
	}
	return strconv.FormatInt(m.bytes, 10)
}

// memoryLimit is the limit to give debug.SetMemoryLimit, or ok false to
// keep the runtime's: GOMEMLIMIT, which the runtime applied itself, stands
// unless --memory-limit (or DPD_MEMORY_LIMIT) is given.
func memoryLimit(m memorySize, getenv func(string) string) (limit int64, ok bool) {
	if !m.set && getenv("GOMEMLIMIT") != "" {
		return 0, false
	}
	if m.bytes == 0 {
		return math.MaxInt64, true // the runtime's "no limit"
	}
	return m.bytes, true
}

// defaultGCPercent is dpd's GOGC: the heap grows by half the live set
// between collections instead of doubling, which keeps the resident set of
// a node agent small at the price of more frequent (cheap) collections.
const defaultGCPercent = 50

// gcPercent is a --gc-percent value; set records that the flag or its
// variable gave it.
type gcPercent struct {
	n   int
	set bool
}

func (g *gcPercent) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < -1 || n == 0 {
		return fmt.Errorf("%q is not a percentage above 0, or -1 for off", s)
	}
	*g = gcPercent{n: n, set: true}
	return nil
}

func (g *gcPercent) String() string {
	if g == nil {
		return "0"
	}
	return strconv.Itoa(g.n)
}

// gcTarget is the value to give debug.SetGCPercent, or ok false to keep
// GOGC, which stands unless --gc-percent (or DPD_GC_PERCENT) is given.
func gcTarget(g gcPercent, getenv func(string) string) (percent int, ok bool) {
	if !g.set && getenv("GOGC") != "" {
		return 0, false
	}
	return g.n, true
}

// outgrownShare: when the live heap passes this share of the soft memory
// limit, the limit would make the collector run almost constantly (up to
// half the CPU), so guardMemoryLimit lifts it.
const outgrownShare = 0.75

// guardMemoryLimit lifts the soft memory limit, with a warning, once the
// live heap outgrows it (a node bigger than the default was sized for),
// checking every interval until stop closes or it has lifted it. With the
// collector's GOGC off the limit is what triggers collections, so it is
// raised to twice the live heap instead of lifted.
func guardMemoryLimit(limit int64, gcOff bool, interval time.Duration, log *slog.Logger, stop <-chan struct{}) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return
		}
		live := sample[0].Value.Uint64()
		if float64(live) <= outgrownShare*float64(limit) {
			continue
		}
		if gcOff {
			limit = 2 * int64(live)
			debug.SetMemoryLimit(limit)
			log.Warn("the live heap outgrew the soft memory limit; raised it (GOGC is off, so the limit is what collects)",
				"live_bytes", live, "limit_bytes", limit)
			continue
		}
		debug.SetMemoryLimit(math.MaxInt64)
		log.Warn("the live heap outgrew the soft memory limit; lifted it so the collector does not run constantly (raise --memory-limit)",
			"live_bytes", live, "limit_bytes", limit)
		return
	}
}

// gcIsOff reports whether the collector runs only at the memory limit:
// --gc-percent -1, or GOGC=off standing.
func gcIsOff(g gcPercent, getenv func(string) string) bool {
	if percent, ok := gcTarget(g, getenv); ok {
		return percent < 0
	}
	v := getenv("GOGC")
	n, err := strconv.Atoi(v)
	return v == "off" || (err == nil && n < 0)
}
