package linux

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// preloadSet is the IP set the test policies match on, as P3's do.
const preloadSet = "preload-set"

func addPreloadSet(t testing.TB, k *Kernel) {
	t.Helper()
	members := []model.IPSetMember{{Prefix: netip.MustParsePrefix("10.79.0.0/16")}, {Prefix: netip.MustParsePrefix("192.0.2.7/32")}}
	if err := k.ReplaceIPSet(preloadSet, model.IPSetNet, members); err != nil {
		t.Fatal(err)
	}
}

// ownPolicy is a policy of endpoint n alone, shaped like P3's: three
// inbound rules (one on an IP set), two outbound. ICMP comes in only when
// icmpIn; everything goes out.
func ownPolicy(n int, dir model.Direction, icmpIn bool) model.DirectionPolicy {
	tcp, udp, icmp := uint8(model.ProtoTCP), uint8(model.ProtoUDP), uint8(model.ProtoICMP)
	port := func(p int) []model.PortRange { return []model.PortRange{{First: uint16(p), Last: uint16(p)}} }
	var rules []model.Rule
	if dir == model.Ingress {
		rules = []model.Rule{
			{Action: model.ActionAllow, Protocol: &tcp, DstPorts: port(10000 + n)},
			{Action: model.ActionAllow, Protocol: &udp, SrcIPSets: []string{preloadSet}},
			{Action: model.ActionDeny, Protocol: &tcp, DstPorts: port(20000 + n)},
		}
		if icmpIn {
			rules = append(rules, model.Rule{Action: model.ActionAllow, Protocol: &icmp})
		}
	} else {
		rules = []model.Rule{
			{Action: model.ActionDeny, Protocol: &tcp, DstPorts: port(30000 + n)},
			{Action: model.ActionAllow},
		}
	}
	name := fmt.Sprintf("default/pol-%d", n)
	return model.DirectionPolicy{Tiers: []model.Tier{{Name: "default", DefaultAction: model.ActionDeny,
		Policies: []model.PolicyRules{{Name: name, Kind: "policy", Rules: rules}}}}}
}

func ownEndpoint(w *testutil.Workload, n int, icmpIn bool) *model.Endpoint {
	return endpointFor(w, n, ownPolicy(n, model.Ingress, icmpIn), ownPolicy(n, model.Egress, false))
}

// kernelView is what a test compares between two kernels: operation
// counts, programs per endpoint (by position in the batch), program pins
// (chain indices left out: they depend on load order), chain entries and
// rule counters.
type kernelView struct {
	ProgramLoads, ProgramAdopts, JumpWrites, IfStateWrites, Attaches uint64
	Programs, ChainEntries                                           int
	Endpoints                                                        []EndpointDetails
	Pins                                                             []string
	Counters                                                         []uint64
}

var chainAt = regexp.MustCompile(`-at-\d+$`)

// String leaves the counter ids out: a split policy has thousands.
func (v kernelView) String() string {
	c := v
	c.Counters = nil
	return fmt.Sprintf("%+v counters:%d", c, len(v.Counters))
}

func viewOf(t *testing.T, k *Kernel, eps []*model.Endpoint) kernelView {
	t.Helper()
	o := k.Ops()
	v := kernelView{ProgramLoads: o.ProgramLoads, ProgramAdopts: o.ProgramAdopts, JumpWrites: o.JumpWrites,
		IfStateWrites: o.IfStateWrites, Attaches: o.Attaches, Programs: k.ProgramCount(), Pins: progPins(t, k)}
	for _, ep := range eps {
		d, _ := k.Endpoint(ep.Iface)
		v.Endpoints = append(v.Endpoints, EndpointDetails{IngressProgram: d.IngressProgram, EgressProgram: d.EgressProgram, Ready: d.Ready})
	}
	idx, err := k.datapath().ChainIndices()
	if err != nil {
		t.Fatal(err)
	}
	v.ChainEntries = len(idx)
	if v.Counters, err = k.datapath().CounterIDs(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(v.Counters)
	return v
}

// progPins lists <pin>/progs/<program>/<chunk pin>.
func progPins(t *testing.T, k *Kernel) []string {
	t.Helper()
	dir := filepath.Join(k.opts.PinDir, "progs")
	progs, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, p := range progs {
		chunks, err := os.ReadDir(filepath.Join(dir, p.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chunks {
			out = append(out, p.Name()+"/"+chainAt.ReplaceAllString(c.Name(), ""))
		}
	}
	slices.Sort(out)
	return out
}

// releaseUnused stands for the EndApply that releases unused preloads.
func releaseUnused(k *Kernel) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pols.releaseUnusedPreloads()
}

// preloadWorkloads builds a batch on fresh workloads 10.79.<net>.x: a split
// (chained) ingress policy, policies of their own, two endpoints sharing
// one, and an endpoint whose interface does not exist.
func preloadWorkloads(t *testing.T, net int) ([]*testutil.Workload, []*model.Endpoint) {
	t.Helper()
	var ws []*testutil.Workload
	var eps []*model.Endpoint
	for i := range 5 {
		w := newWorkload(t, fmt.Sprintf("10.79.%d.%d", net, i+1))
		ws = append(ws, w)
		ep := ownEndpoint(w, i, i%2 == 0)
		switch i {
		case 0:
			ep.Ingress = bigPolicy()
		case 4:
			ep = ownEndpoint(w, 3, false) // shares endpoint 3's programs
			ep.ID.Workload = "ns/pod4"
		}
		eps = append(eps, ep)
	}
	absent := &testutil.Workload{HostIface: testPrefix + "gone", IP: fmt.Sprintf("10.79.%d.99", net)}
	eps = append(eps, ownEndpoint(absent, 99, true))
	return ws, eps
}

// TestPreloadSameStateAsSerial: preloading a batch then applying it leaves
// exactly the kernel state and load count that applying it alone does, and
// the preloaded programs enforce.
func TestPreloadSameStateAsSerial(t *testing.T) {
	var views [2]kernelView
	for i, preload := range []bool{false, true} {
		k := openKernel(t, newPinDir(t))
		addPreloadSet(t, k)
		ws, eps := preloadWorkloads(t, i+1)
		if preload {
			k.PreloadPolicies(eps)
			k.awaitPreloads()
			if got := k.Ops().ProgramLoads; got != 8 {
				t.Errorf("preloading loaded %d programs, want 8 (4 endpoints' own, none for the absent interface)", got)
			}
		}
		mustApply(t, k, eps...)
		releaseUnused(k)
		views[i] = viewOf(t, k, eps)
		if preload {
			testutil.WaitFor(t, 5*time.Second, "1 pings 0 (0 lets ICMP in)", func() bool { return pingsQuick(ws[1], ws[0].IP) })
			if !pingsQuick(ws[1], ws[2].IP) {
				t.Error("ping 1 -> 2 fails; 2 lets ICMP in")
			}
			if pingsQuick(ws[0], ws[1].IP) {
				t.Error("ping 0 -> 1 passes; 1 lets no ICMP in")
			}
		}
	}
	serial, preloaded := views[0], views[1]
	if serial.ProgramLoads != 8 || serial.ChainEntries == 0 {
		t.Errorf("serial apply: %d loads, %d chain entries; want 8 loads and a split policy", serial.ProgramLoads, serial.ChainEntries)
	}
	if !reflect.DeepEqual(serial, preloaded) {
		t.Errorf("kernel state differs (counters equal: %v)\nserial:    %v\npreloaded: %v",
			slices.Equal(serial.Counters, preloaded.Counters), serial, preloaded)
	}
}

// TestPreloadReleasesUnused: programs preloaded for an endpoint that is
// not applied are closed and unpinned at the end of the apply, chain
// entries included (c's egress too: its apply stopped at the ingress); a
// failed preload is left to the apply to report.
func TestPreloadReleasesUnused(t *testing.T) {
	k := openKernel(t, newPinDir(t))
	addPreloadSet(t, k)
	a, b, c := newWorkload(t, "10.79.3.1"), newWorkload(t, "10.79.3.2"), newWorkload(t, "10.79.3.3")
	epA := ownEndpoint(a, 1, true)
	epB := endpointFor(b, 2, bigPolicy(), ownPolicy(2, model.Egress, false))
	epC := ownEndpoint(c, 3, true)
	epC.Ingress.Tiers[0].Policies[0].Rules[1].SrcIPSets = []string{"no-such-set"}
	k.PreloadPolicies([]*model.Endpoint{epA, epB, epC})
	k.awaitPreloads()
	if got, n := k.Ops().ProgramLoads, k.ProgramCount(); got != 5 || n != 5 {
		t.Fatalf("preload: %d loads, %d programs; want 5 (c's ingress cannot compile)", got, n)
	}
	if idx, _ := k.datapath().ChainIndices(); len(idx) == 0 {
		t.Fatal("b's split policy installed no chain entries")
	}
	mustApply(t, k, epA)
	if err := k.ApplyEndpoint(epC); err == nil || !strings.Contains(err.Error(), "no-such-set") {
		t.Errorf("applying c: %v; want the compile error", err)
	}
	releaseUnused(k)
	v := viewOf(t, k, []*model.Endpoint{epA})
	if v.ProgramLoads != 5 || v.Programs != 2 || len(v.Pins) != 2 || v.ChainEntries != 0 {
		t.Errorf("after the apply: %v; want 5 loads, only a's 2 programs left, pinned, no chain entries", v)
	}
	// b applied later loads its programs again, serially.
	mustApply(t, k, epB)
	if got := k.Ops().ProgramLoads; got != 7 {
		t.Errorf("%d loads after applying b, want 7", got)
	}
}

// TestPreloadNextBatchReleasesLeftovers: without an EndApply between two
// batches, the second releases what the first preloaded for nobody, and
// keeps what it needs again.
func TestPreloadNextBatchReleasesLeftovers(t *testing.T) {
	k := openKernel(t, newPinDir(t))
	addPreloadSet(t, k)
	a, b, c := newWorkload(t, "10.79.6.1"), newWorkload(t, "10.79.6.2"), newWorkload(t, "10.79.6.3")
	epA, epB, epC := ownEndpoint(a, 1, true), ownEndpoint(b, 2, true), ownEndpoint(c, 3, true)
	k.PreloadPolicies([]*model.Endpoint{epA, epB, epC})
	if err := k.ApplyEndpoint(epA); err != nil {
		t.Fatal(err)
	}
	k.PreloadPolicies([]*model.Endpoint{epB}) // b retried; c gone
	k.awaitPreloads()
	if got, n, pins := k.Ops().ProgramLoads, k.ProgramCount(), len(progPins(t, k)); got != 6 || n != 4 || pins != 4 {
		t.Errorf("second batch: %d loads, %d programs, %d pins; want 6 and a's and b's 4", got, n, pins)
	}
	if err := k.ApplyEndpoint(epB); err != nil {
		t.Fatal(err)
	}
	releaseUnused(k)
	if got, n := k.Ops().ProgramLoads, k.ProgramCount(); got != 6 || n != 4 {
		t.Errorf("after applying b: %d loads, %d programs; want 6 and 4", got, n)
	}
}

// TestPreloadSkipsPinned: after a restart the pinned programs are adopted,
// not preloaded again.
func TestPreloadSkipsPinned(t *testing.T) {
	pin := newPinDir(t)
	k1 := openKernel(t, pin)
	addPreloadSet(t, k1)
	a := newWorkload(t, "10.79.4.1")
	epA := ownEndpoint(a, 1, true)
	mustApply(t, k1, epA)
	if err := k1.Close(); err != nil {
		t.Fatal(err)
	}
	k2 := openKernel(t, pin)
	addPreloadSet(t, k2)
	k2.PreloadPolicies([]*model.Endpoint{epA, epA})
	mustApply(t, k2, epA)
	if o := k2.Ops(); o.ProgramLoads != 0 || o.ProgramAdopts != 2 {
		t.Errorf("restart with preload: %d loads, %d adopts; want 0 and 2", o.ProgramLoads, o.ProgramAdopts)
	}
}

// TestPreloadConcurrentWithReaders: Inspect's readers and garbage
// collection run while the workers load (go test -race checks the rest);
// every applied program keeps its rule counters.
func TestPreloadConcurrentWithReaders(t *testing.T) {
	k := openKernel(t, newPinDir(t))
	addPreloadSet(t, k)
	mustApply(t, k) // the first apply: collection runs from now on
	var ws []*testutil.Workload
	var eps []*model.Endpoint
	for i := range 6 {
		w := newWorkload(t, fmt.Sprintf("10.79.5.%d", i+1))
		ws = append(ws, w)
		eps = append(eps, ownEndpoint(w, i, true))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = k.Ops()
			_ = k.ProgramCount()
			_, _ = k.Endpoint(ws[0].HostIface)
			_, _ = k.Rules(ws[0].HostIface, model.Ingress)
			if _, err := k.CollectGarbage(); err != nil {
				t.Errorf("collect: %v", err)
				return
			}
		}
	})
	k.PreloadPolicies(eps)
	mustApply(t, k, eps...)
	close(stop)
	wg.Wait()
	releaseUnused(k)
	ids, err := k.datapath().CounterIDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps {
		for _, dir := range []model.Direction{model.Ingress, model.Egress} {
			rules, _ := k.Rules(ep.Iface, dir)
			for _, r := range rules {
				if !slices.Contains(ids, r.CounterID) {
					t.Errorf("%s %s rule %+v has no counter", ep.Iface, dir, r)
				}
			}
		}
	}
	if got := k.Ops().ProgramLoads; got != 12 {
		t.Errorf("%d loads, want 12", got)
	}
}
