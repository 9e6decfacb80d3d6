package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// defaultMemoryLimit is the soft limit dpd runs under unless told
// otherwise: with GOGC=100 alone the heap grows to twice the live set
// before a collection, and the issue 7 budget is 64 MiB of RSS.
const defaultMemoryLimit = 48 << 20

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
