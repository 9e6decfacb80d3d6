package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// WorkloadSubnet is the /24 prefix the suite's workloads live in
// ("10.65.0."); DPD_E2E_SUBNET moves them, e.g. away from a demo or another
// suite running on the same host.
var WorkloadSubnet = func() string {
	if s := os.Getenv("DPD_E2E_SUBNET"); s != "" {
		return strings.TrimSuffix(s, ".") + "."
	}
	return "10.65.0."
}()

// Workload is a CNI-style pod (testutil.Workload) plus what the controller
// needs to describe it in a WorkloadEndpointUpdate.
type Workload struct {
	*testutil.Workload
	Pod     string // "podN"
	MAC     string // of eth0 inside the namespace
	Ifindex int    // of the host-side interface
	// IP4 and IP6 are the workload's addresses of each family ("" for
	// none) whatever IP is: IP is the one probes address, which a
	// family view (InFamily) switches.
	IP4, IP6 string
}

// NewWorkload creates pod n with address 10.65.0.n. The host side gets no
// route, neighbour or sysctl here: programming those is dpd's job.
func NewWorkload(t testing.TB, n int) *Workload {
	t.Helper()
	return newWorkload(t, "cali", n)
}

func newWorkload(t testing.TB, prefix string, n int) *Workload {
	t.Helper()
	// Another dpd, demo or suite on this host routing the address would
	// steal the traffic and make the verdicts meaningless.
	if r, err := RouteTo(ipOf(n)); err != nil || r != "" {
		t.Fatalf("%s is already routed (%q, %v): something else on this host uses it; "+
			"stop it or set DPD_E2E_SUBNET", ipOf(n), r, err)
	}
	w := &Workload{
		Workload: testutil.NewWorkload(t, prefix, ipOf(n)),
		Pod:      fmt.Sprintf("pod%d", n),
		IP4:      ipOf(n),
	}
	out := testutil.Run(t, "ip", "-n", w.NS, "-j", "link", "show", "eth0")
	var links []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 || links[0].Address == "" {
		t.Fatalf("read eth0 mac in %s: %v (%q)", w.NS, err, out)
	}
	w.MAC = links[0].Address
	ifc, err := net.InterfaceByName(w.HostIface)
	if err != nil {
		t.Fatalf("host iface %s: %v", w.HostIface, err)
	}
	w.Ifindex = ifc.Index
	return w
}

// ID is the endpoint's Felix identity: k8s / ns/podN / eth0.
func (w *Workload) ID() *felix.WorkloadEndpointID {
	return &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "ns/" + w.Pod, EndpointId: "eth0"}
}

// String names the workload in test output.
func (w *Workload) String() string { return w.Pod + "(" + w.IP + ")" }

// Serve starts the helper in the workload's namespace, serving TCP greetings
// on tcpPorts and UDP echo on udpPorts, and waits until every port is bound.
// t.Cleanup stops it.
func (w *Workload) Serve(t testing.TB, tcpPorts, udpPorts []int) {
	t.Helper()
	if helperBinary == "" {
		t.Fatalf("cannot serve in %s: %v", w.NS, errBuild)
	}
	cmd := exec.Command("ip", "netns", "exec", w.NS, helperBinary, "serve",
		"-tcp", joinPorts(tcpPorts), "-udp", joinPorts(udpPorts))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("helper stdin: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("helper stdout: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper in %s: %v", w.NS, err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = stdin.Close() // the helper exits on EOF; Kill covers a wedged one
		_ = cmd.Process.Kill()
		<-exited
	})
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("unexpected helper output %q", line)
		}
		ready <- err
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(exited)
	}()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("helper in %s not ready: %v", w.NS, err)
		}
	case <-timer.C:
		t.Fatalf("helper in %s not ready after 10s", w.NS)
	}
}

func joinPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}
