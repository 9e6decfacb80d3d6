package testutil

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// PingRun is a 100 pps ping running in the background, whose losses are
// read from ping's own summary: what the tests that must not drop a packet
// (restarts, reconnects, garbage collection) measure.
type PingRun struct {
	name string
	done chan struct{}
	out  []byte
	err  error
}

var pingSummary = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (?:packets )?received`)

// StartPing sends count pings 10 ms apart from w to dst.
func (w *Workload) StartPing(dst string, count int) *PingRun {
	r := &PingRun{name: fmt.Sprintf("ping -i 0.01 %s -> %s", w.NS, dst), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		cmd := exec.Command("ip", "netns", "exec", w.NS, "ping", "-n", "-q", "-i", "0.01", "-W", "1",
			"-c", strconv.Itoa(count), dst)
		r.out, r.err = cmd.CombinedOutput()
	}()
	return r
}

// Wait waits up to timeout for the ping to finish and returns how many
// pings it sent and how many replies it received.
func (r *PingRun) Wait(t testing.TB, timeout time.Duration) (sent, received int) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not finish", r.name)
	}
	m := pingSummary.FindSubmatch(r.out)
	if m == nil {
		t.Fatalf("%s: no summary (err %v): %s", r.name, r.err, r.out)
	}
	sent, _ = strconv.Atoi(string(m[1]))
	received, _ = strconv.Atoi(string(m[2]))
	return sent, received
}
