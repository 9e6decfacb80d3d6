package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Load says how busy the machine was with other work while the daemon
// phases ran: on a shared two-core machine that is the first thing to
// rule out before reading a latency.
type Load struct {
	LoadAvg string // /proc/loadavg's 1, 5 and 15 minute averages at the start
	// Shares of the machine's CPU time (all cores) during the daemon
	// phases: dpd's, the driver's, and everything else's (other processes
	// and kernel workers). Zero when not measured.
	DPD, Driver, Other float64
}

// cpuSample is a reading of the machine's and two processes' CPU time.
type cpuSample struct {
	total, busy  uint64 // machine, in ticks summed over cores
	dpd, driver  uint64 // process utime+stime, in ticks
	dpdPid, self int
}

// sampleCPU reads the machine's and the driver's CPU time, and dpd's
// unless dpdPid is 0.
func sampleCPU(dpdPid int) (cpuSample, error) {
	s := cpuSample{dpdPid: dpdPid, self: os.Getpid()}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return s, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return s, fmt.Errorf("parse /proc/stat: %w", err)
		}
		s.total += n
		if i != 3 && i != 4 { // idle, iowait
			s.busy += n
		}
	}
	if dpdPid == 0 {
		s.driver, err = processTicks(s.self)
		return s, err
	}
	if s.dpd, err = processTicks(dpdPid); err != nil {
		return s, err
	}
	s.driver, err = processTicks(s.self)
	return s, err
}

// processTicks is utime+stime of pid from /proc/<pid>/stat.
func processTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; the fields after it are fixed.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return ut + st, nil
}

// loadBetween turns two samples into shares of the machine.
func loadBetween(a, b cpuSample) (dpd, driver, other float64) {
	total := float64(b.total - a.total)
	if total <= 0 || b.dpdPid != a.dpdPid {
		return 0, 0, 0
	}
	dpd = float64(b.dpd-a.dpd) / total
	driver = float64(b.driver-a.driver) / total
	other = max(float64(b.busy-a.busy)/total-dpd-driver, 0)
	return dpd, driver, other
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
