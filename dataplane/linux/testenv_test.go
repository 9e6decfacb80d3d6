package linux

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// testPrefix is this test binary's workload interface prefix. It is not
// "cali", so a kernel that watches links (and fails closed what it does
// not know) never touches the interfaces of other packages' tests that run
// at the same time.
var testPrefix = fmt.Sprintf("dk%d", os.Getpid()%100000)

var pinSeq atomic.Uint32

// newPinDir is a fresh pin directory, removed with everything pinned in it
// when the test ends.
func newPinDir(t *testing.T) string {
	t.Helper()
	pin := filepath.Join("/sys/fs/bpf", fmt.Sprintf("dpd-linux-test-%d-%d", os.Getpid(), pinSeq.Add(1)))
	t.Cleanup(func() { _ = os.RemoveAll(pin) })
	return pin
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openKernel opens a Kernel on pin with the test prefix configured; Close
// runs at cleanup (and may run earlier: it is idempotent).
func openKernel(t *testing.T, pin string) *Kernel {
	t.Helper()
	return openKernelWith(t, Options{PinDir: pin})
}

func openKernelWith(t *testing.T, opts Options) *Kernel {
	t.Helper()
	testutil.RequirePrivileged(t)
	opts.Log = quietLog()
	if opts.Flows.ConntrackScan == 0 {
		// No scan in the middle of a test that counts bpf calls.
		opts.Flows.ConntrackScan = time.Hour
	}
	if opts.Epilogue == tcbpf.EpilogueAuto {
		// No background reload either (directreload tests cover it):
		// what these tests count and pin must not depend on the probe.
		opts.Epilogue = tcbpf.EpilogueIndirect
	}
	k, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropTestRPFTable(t) })
	t.Cleanup(func() { _ = k.Close() })
	if err := k.Configure(map[string]string{"InterfacePrefix": testPrefix}); err != nil {
		t.Fatal(err)
	}
	return k
}

// dropTestRPFTable deletes the IPv6 source check table Configure wrote for
// testPrefix: it outlives the kernel (as it outlives a restart of dpd), and
// a later dpd on this node must not find this binary's table in force.
func dropTestRPFTable(t *testing.T) {
	out, err := exec.Command("nft", "list", "table", "ip6", nl.RPFTable).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"`+testPrefix+`*"`) {
		return // none, or another writer's since
	}
	if out, err := exec.Command("nft", "delete", "table", "ip6", nl.RPFTable).CombinedOutput(); err != nil {
		t.Errorf("delete the test's ip6 %s table: %v %s", nl.RPFTable, err, out)
	}
}

// watch runs k.WatchLinks until the test ends.
func watch(t *testing.T, k *Kernel) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = k.WatchLinks(ctx, func(model.LinkUpdate) {})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func newWorkload(t *testing.T, ip string) *testutil.Workload {
	t.Helper()
	return testutil.NewWorkload(t, testPrefix, ip)
}

// wireLikeCNI gives w's host side the route and proxy ARP a CNI plugin
// sets up, for interfaces dpd has no endpoint for: a denial is then dpd's.
func wireLikeCNI(t *testing.T, w *testutil.Workload) {
	t.Helper()
	if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf", w.HostIface, "proxy_arp"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Run(t, "ip", "route", "replace", w.IP+"/32", "dev", w.HostIface)
	t.Cleanup(func() { _ = exec.Command("ip", "route", "del", w.IP+"/32", "dev", w.HostIface).Run() })
}

func ifindexOf(t *testing.T, name string) int {
	t.Helper()
	out := testutil.Run(t, "cat", filepath.Join("/sys/class/net", name, "ifindex"))
	n, err := strconv.Atoi(string(regexp.MustCompile(`\d+`).Find([]byte(out))))
	if err != nil {
		t.Fatalf("ifindex of %s: %q", name, out)
	}
	return n
}

// ifState reads w's dpd_ifstate entry.
func ifState(t *testing.T, k *Kernel, ifindex int) (ok, ready bool) {
	t.Helper()
	_, flags, ok, err := k.datapath().IfState(ifindex)
	if err != nil {
		t.Fatal(err)
	}
	return ok, flags&abi.IfReady != 0
}

// pingTimeout bounds a ping of a few hundred packets: far more than it
// takes, so only a hang fails on it.
const pingTimeout = 2 * time.Minute

// waitFlowing waits until a new flow shows in k's conntrack table: the
// ping just started is on the wire.
func waitFlowing(t *testing.T, k *Kernel) {
	t.Helper()
	n0, err := k.datapath().CountConntrack()
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the ping flow in conntrack", func() bool {
		n, err := k.datapath().CountConntrack()
		return err == nil && n > n0
	})
}

func pingsQuick(w *testutil.Workload, ip string) bool {
	_, err := w.Exec("ping", "-n", "-c1", "-W1", ip)
	return err == nil
}

// allowAllEndpoint describes w with allow-all profiles.
func allowAllEndpoint(w *testutil.Workload, n int) *model.Endpoint {
	return endpointFor(w, n, allowAll(), allowAll())
}

// bigPolicy is a policy large enough to be split into chained chunks; it
// allows ICMP and TCP to ports 20000-22999, one rule per port.
func bigPolicy() model.DirectionPolicy {
	tcp, icmp := uint8(6), uint8(1)
	var rules []model.Rule
	for i := range 3000 {
		p := uint16(20000 + i)
		rules = append(rules, model.Rule{Action: model.ActionAllow, Protocol: &tcp, DstPorts: []model.PortRange{{First: p, Last: p}}})
	}
	rules = append(rules, model.Rule{Action: model.ActionAllow, Protocol: &icmp})
	return model.DirectionPolicy{Tiers: []model.Tier{{Name: "big", DefaultAction: model.ActionDeny,
		Policies: []model.PolicyRules{{Name: "big/p", Kind: "policy", Rules: rules}}}}}
}
