package e2e

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ProbeTimeout bounds one probe; a denied flow costs this much.
const ProbeTimeout = time.Second

// VerdictTimeout is how long Expect retries for the expected verdict after a
// change, since statuses are only sent when an endpoint's status changes.
const VerdictTimeout = 3 * time.Second

// Probe sends real packets and reports whether the exchange completed.
type Probe struct {
	Name string
	Run  func() (ok bool, detail string)
}

// Ping is one ICMP echo from src's namespace to dst.
func Ping(src *Workload, dst string) Probe {
	return Probe{
		Name: fmt.Sprintf("ping %s -> %s", src.Pod, dst),
		Run: func() (bool, string) {
			out, err := src.Exec("ping", "-n", "-c1", fmt.Sprintf("-W%g", ProbeTimeout.Seconds()), dst)
			return err == nil, lastLine(out)
		},
	}
}

// TCP connects from src to dst:port and needs the server's greeting back.
func TCP(src *Workload, dst string, port int) Probe {
	return Probe{
		Name: fmt.Sprintf("tcp %s -> %s:%d", src.Pod, dst, port),
		Run:  func() (bool, string) { return helperProbe(src, "tcp", dst, port) },
	}
}

// UDP sends one datagram from src to dst:port and needs the echo back.
func UDP(src *Workload, dst string, port int) Probe {
	return Probe{
		Name: fmt.Sprintf("udp %s -> %s:%d", src.Pod, dst, port),
		Run:  func() (bool, string) { return helperProbe(src, "udp", dst, port) },
	}
}

// UDPSize is UDP with a datagram of size bytes: beyond the MTU it leaves,
// and its echo returns, in fragments.
func UDPSize(src *Workload, dst string, port, size int) Probe {
	return Probe{
		Name: fmt.Sprintf("udp %s -> %s:%d (%d bytes)", src.Pod, dst, port, size),
		Run:  func() (bool, string) { return helperProbe(src, "udp", dst, port, "-size", fmt.Sprint(size)) },
	}
}

func helperProbe(src *Workload, kind, dst string, port int, extra ...string) (bool, string) {
	args := append([]string{"netns", "exec", src.NS, helperBinary, kind,
		"-addr", net.JoinHostPort(dst, strconv.Itoa(port)), "-timeout", ProbeTimeout.String()}, extra...)
	cmd := exec.Command("ip", args...)
	out, err := cmd.CombinedOutput()
	return err == nil, lastLine(string(out))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// Expectation pairs a probe with the verdict it must reach.
type Expectation struct {
	Probe Probe
	Pass  bool
}

// Allowed and Denied build expectations.
func Allowed(p Probe) Expectation { return Expectation{Probe: p, Pass: true} }

// Denied expects the probe to fail.
func Denied(p Probe) Expectation { return Expectation{Probe: p, Pass: false} }

// Expect retries each probe until it reaches its verdict, for up to
// VerdictTimeout per expectation, and reports every miss. Allowed flows run
// first, in order: one that the change made possible proves the change is
// in effect before any denial is credited to it. Denied flows then run
// concurrently, since each costs a full ProbeTimeout.
func Expect(t testing.TB, exps ...Expectation) {
	t.Helper()
	type result struct {
		ok     bool
		detail string
		tries  int
	}
	results := make([]result, len(exps))
	var wg sync.WaitGroup
	for i, e := range exps {
		if e.Pass {
			r := &results[i]
			r.ok, r.detail, r.tries = eventually(e.Probe, true)
		}
	}
	for i, e := range exps {
		if !e.Pass {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := &results[i]
				r.ok, r.detail, r.tries = eventually(e.Probe, false)
			}()
		}
	}
	wg.Wait()
	for i, e := range exps {
		if r := results[i]; r.ok != e.Pass {
			verdict := map[bool]string{true: "pass", false: "be denied"}[e.Pass]
			t.Errorf("%s: expected to %s, but it did not after %d tries within %s (last: %s)",
				e.Probe.Name, verdict, r.tries, VerdictTimeout, r.detail)
		}
	}
}

func eventually(p Probe, want bool) (ok bool, detail string, tries int) {
	deadline := time.Now().Add(VerdictTimeout)
	for {
		tries++
		ok, detail = p.Run()
		// Each run blocks on real packets (up to ProbeTimeout), so the loop
		// paces itself without sleeping.
		if ok == want || time.Now().After(deadline) {
			return ok, detail, tries
		}
	}
}
