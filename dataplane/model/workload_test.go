package model

import (
	"net"
	"net/netip"
	"testing"
)

// TestWorkloadEndpointEqual: every field takes part in the comparison.
func TestWorkloadEndpointEqual(t *testing.T) {
	base := func() *WorkloadEndpoint {
		return &WorkloadEndpoint{
			ID: WorkloadID{Orchestrator: "k8s", Workload: "ns/a", Endpoint: "eth0"}, Iface: "cali-a",
			MAC:      net.HardwareAddr{0xee, 0xee, 0xee, 0xee, 0xee, 0xee},
			IPv4Nets: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")},
			IPv6Nets: []netip.Prefix{netip.MustParsePrefix("fd00::1/128")},
			Tiers: []TierRef{{Name: "default", DefaultAction: ActionDeny,
				Ingress: []PolicyKey{{Kind: "NetworkPolicy", Namespace: "ns", Name: "p"}}, Egress: []PolicyKey{{Name: "q"}}}},
			Profiles: []string{"kns.ns"},
		}
	}
	if !base().Equal(base()) {
		t.Fatal("equal endpoints compare unequal")
	}
	for name, change := range map[string]func(*WorkloadEndpoint){
		"id":             func(w *WorkloadEndpoint) { w.ID.Endpoint = "eth1" },
		"iface":          func(w *WorkloadEndpoint) { w.Iface = "cali-b" },
		"mac":            func(w *WorkloadEndpoint) { w.MAC[5] = 1 },
		"mac absent":     func(w *WorkloadEndpoint) { w.MAC = nil },
		"ipv4":           func(w *WorkloadEndpoint) { w.IPv4Nets = nil },
		"ipv6":           func(w *WorkloadEndpoint) { w.IPv6Nets[0] = netip.MustParsePrefix("fd00::2/128") },
		"tier name":      func(w *WorkloadEndpoint) { w.Tiers[0].Name = "sec" },
		"tier default":   func(w *WorkloadEndpoint) { w.Tiers[0].DefaultAction = ActionPass },
		"tier ingress":   func(w *WorkloadEndpoint) { w.Tiers[0].Ingress[0].Namespace = "other" },
		"tier egress":    func(w *WorkloadEndpoint) { w.Tiers[0].Egress = nil },
		"tiers":          func(w *WorkloadEndpoint) { w.Tiers = append(w.Tiers, TierRef{Name: "x"}) },
		"profiles":       func(w *WorkloadEndpoint) { w.Profiles = []string{"kns.other"} },
		"profiles order": func(w *WorkloadEndpoint) { w.Profiles = []string{"b", "a"} },
	} {
		w := base()
		change(w)
		if w.Equal(base()) || base().Equal(w) {
			t.Errorf("%s changed, still equal", name)
		}
	}
	var nilEP *WorkloadEndpoint
	if nilEP.Equal(base()) || !nilEP.Equal(nil) {
		t.Error("nil comparisons")
	}
}
