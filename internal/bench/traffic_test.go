package bench

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

func TestTrafficFigures(t *testing.T) {
	// Three rounds; each case's base is the plain path of its rounds.
	c := func(key string, crr, bulk, baseCRR, baseBulk []float64) TrafficCase {
		return TrafficCase{Key: key, Name: key, RR: []float64{1, 1, 1}, CRR: crr, Bulk: bulk,
			BaseRR: []float64{1, 1, 1}, BaseCRR: baseCRR, BaseBulk: baseBulk}
	}
	v := func(a ...float64) []float64 { return a }
	plainCRR, plainBulk := v(100, 50, 200), v(10, 10, 10)
	r := &Results{Traffic: Traffic{Rounds: 3, Slice: time.Second, PortRules: 1000, SetRules: 100, Cases: []TrafficCase{
		{Key: "plain", Name: "plain", RR: v(1, 1, 1), CRR: plainCRR, Bulk: plainBulk},
		c("dpd-allow", v(99, 49, 198), v(10, 10, 10), plainCRR, plainBulk),
		// Per-round ratios 96 %, 40 %, 97 %: median 96 % though the
		// values' own median (96) is not the plain's (100).
		c("dpd-ports", v(96, 20, 194), v(9.9, 9.9, 9.9), plainCRR, plainBulk),
		c("dpd-ipsets", v(90, 45, 180), v(10, 10, 10), plainCRR, plainBulk),
		c("nft-ports", v(80, 25, 160), v(10, 10, 10), plainCRR, plainBulk),
		c("nft-ipsets", v(95, 50, 190), v(9, 9, 9), plainCRR, plainBulk),
	}}}
	want := map[string]struct {
		v   float64
		met bool
	}{
		"connection rate, dpd last of 1,000 port rules, vs no dpd":   {96, true},
		"connection rate, dpd last of 100 IP-set rules, vs no dpd":   {90, false},
		"bulk throughput, dpd last of 1,000 port rules, vs no dpd":   {99, true},
		"bulk throughput, dpd last of 100 IP-set rules, vs no dpd":   {100, true},
		"connection rate, dpd vs nftables, last of 1,000 port rules": {120, true},          // 120, 80, 121.25
		"connection rate, dpd vs nftables, last of 100 IP-set rules": {9000.0 / 95, false}, // 94.7, 90, 94.7
		"bulk throughput, dpd vs nftables, last of 1,000 port rules": {99, false},          // 99 each
		"bulk throughput, dpd vs nftables, last of 100 IP-set rules": {1000.0 / 9, true},
	}
	figs := r.trafficFigures()
	if len(figs) != len(want) {
		t.Fatalf("%d figures, want %d", len(figs), len(want))
	}
	for _, f := range figs {
		w, ok := want[f.Name]
		if !ok || !f.Measured || f.Met() != w.met || f.Value < w.v-1e-9 || f.Value > w.v+1e-9 {
			t.Errorf("%s: %v (met %v), want %v (met %v)", f.Name, f.Value, f.Met(), w.v, w.met)
		}
	}
	var doc strings.Builder
	r.trafficDetails(func(format string, a ...any) { _, _ = fmt.Fprintf(&doc, format, a...) })
	for _, s := range []string{"| plain | 1/s [1/s–1/s] | 100/s [50/s–200/s] |", "96/s [20/s–194/s], 96.0 %"} {
		if !strings.Contains(doc.String(), s) {
			t.Errorf("details lack %q:\n%s", s, doc.String())
		}
	}
	empty := &Results{}
	for _, f := range empty.trafficFigures() {
		if f.Measured {
			t.Errorf("%s measured without traffic", f.Name)
		}
	}
	if _, ok := medianRatio(v(1, 2), v(1)); ok {
		t.Error("a ratio of series of different lengths")
	}
}

func TestTrafficRules(t *testing.T) {
	clients := clientAddrs(1)
	r := newTrafficRules(1000, 100, clients)
	if len(r.denyPorts) != 999 || len(r.sets) != 100 || r.sets[99][0] != clients[0] {
		t.Fatalf("rules: %d ports, %d sets", len(r.denyPorts), len(r.sets))
	}
	for _, set := range r.sets[:99] {
		for _, a := range set {
			for _, c := range clients {
				if a == c {
					t.Fatalf("a denying set holds client %s", c)
				}
			}
		}
	}
	msgs := r.dpdMessages()
	var rules [2]int
	for _, m := range msgs {
		if p := m.GetActivePolicyUpdate(); p != nil {
			in := p.GetPolicy().GetInboundRules()
			last := in[len(in)-1]
			if last.GetAction() != "allow" || in[0].GetAction() != "deny" {
				t.Errorf("%s: first %s, last %s", p.GetId().GetName(), in[0].GetAction(), last.GetAction())
			}
			if p.GetId().GetName() == trafficPolicyPorts {
				rules[0] = len(in)
			} else {
				rules[1] = len(in)
			}
		}
	}
	if rules != [2]int{1000, 100} {
		t.Errorf("policies of %v rules", rules)
	}
	for kind, n := range map[string]int{"ports": 1000, "ipsets": 100} {
		rs := nftRuleset(kind, "bpq00001", r)
		if got := strings.Count(rs, " drop\n") - 1; got != n-1 { // less invalid; the final drop has no space before it
			t.Errorf("%s: %d denying rules, want %d", kind, got, n-1)
		}
		if strings.Count(rs, " accept\n") != 2 {
			t.Errorf("%s: want the established accept and one allowing rule:\n%s", kind, rs)
		}
		checkNFT(t, rs)
	}
}

// checkNFT has nft parse the ruleset without applying it, where nft and
// the privilege to run it are at hand; under CI=true they must be.
func checkNFT(t *testing.T, ruleset string) {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil || os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nft --check cannot run (nft: %v, euid %d) and CI=true forbids skipping", err, os.Geteuid())
		}
		return
	}
	cmd := exec.Command("nft", "--check", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("nft --check: %v\n%s", err, out)
	}
}

func TestAttachFrom(t *testing.T) {
	a := attachFrom(&dpdv1.AttachInfo{Mode: "tc", Reason: "because", Costs: []*dpdv1.KernelCost{
		{Op: "map_update", ProbeSeconds: 1e-6},
		{Op: "something_new", ProbeSeconds: 2},
		{Op: "tcx_first_attach", ProbeSeconds: 0.01, ObservedMeanSeconds: 0.02, ObservedCount: 3},
	}})
	var ops []string
	for _, c := range a.Costs {
		ops = append(ops, c.Op)
	}
	if strings.Join(ops, " ") != "tcx_first_attach map_update something_new" || a.Costs[0].Observed != 20*time.Millisecond || a.Costs[0].Count != 3 {
		t.Errorf("costs %+v", a.Costs)
	}
	r := &Results{Attach: a, Machine: Machine{Kernel: "6.1.2", CPU: "cpu", Cores: 2}}
	doc := r.Markdown("")
	for _, s := range []string{"| attach mode | tc: because |", "| TCX first attach on a hook | 10.00 ms | 20.00 ms | 3 |",
		"| map update (one element) | 1.0 µs | - | - |", "| something_new | 2000.00 ms |", "on Linux 6.1.2 (cpu, 2 cores), dpd in attach mode tc."} {
		if !strings.Contains(doc, s) {
			t.Errorf("report lacks %q", s)
		}
	}
}

func TestTrafficAddrs(t *testing.T) {
	seen := map[netip.Addr]bool{}
	for path := range 3 {
		for _, a := range append(clientAddrs(path), trafficAddr(path, 0, 2)) {
			if seen[a] || endpointIPBatch(a) {
				t.Errorf("%s used twice or inside another phase's range", a)
			}
			seen[a] = true
		}
	}
}

// endpointIPBatch reports whether a falls in a scale phase's endpoint
// range (10.64/16 and up, one /16 per batch).
func endpointIPBatch(a netip.Addr) bool {
	for _, b := range []byte{batchColdStart, batchOwnPolicy, batchShared} {
		if netip.PrefixFrom(endpointIP(b, 0), 16).Contains(a) {
			return true
		}
	}
	return false
}
