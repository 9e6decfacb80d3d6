package nl

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// nsSysctl reads a sysctl of the namespace the calling thread is in.
func nsSysctl(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + rel)
	if err != nil {
		t.Error(err)
	}
	return strings.TrimSpace(string(b))
}

// TestConfigureNewEndpoint: the write-only path reads nothing, ends in the
// state ConfigureEndpoint wants (so re-verifying it writes nothing), takes
// over a route to the endpoint's address through another device, and
// reports absent interfaces as ErrNoLink.
func TestConfigureNewEndpoint(t *testing.T) {
	ns, idx, mac := crowdNS(t, 10)
	c := configurerIn(t, ns)
	taken := crowdAddr(3) // routed through the crowd device until now
	nets := []netip.Prefix{netip.MustParsePrefix(crowdEndpointIP + "/32"), netip.PrefixFrom(taken, 32)}

	inNetns(t, ns, func() {
		before := c.Stats()
		if err := c.ConfigureNewEndpoint(crowdEndpoint, idx, mac, nets); err != nil {
			t.Errorf("configure new: %v", err)
			return
		}
		d := c.Stats().Sub(before)
		if d.RouteDumps+d.NeighbourDumps+d.SysctlReads != 0 {
			t.Errorf("write-only path read the kernel: %+v", d)
		}
		if d.RoutesAdded != 2 || d.NeighboursSet != 2 || d.SysctlWrites < 3 || d.RoutesReplaced+d.RoutesDeleted+d.NeighboursDeleted != 0 {
			t.Errorf("writes %+v, want 2 routes, 2 neighbours, >= 3 sysctls", d)
		}
		for rel, want := range map[string]string{
			"net/ipv4/conf/" + crowdEndpoint + "/proxy_arp":    "1",
			"net/ipv4/neigh/" + crowdEndpoint + "/proxy_delay": "0",
			"net/ipv4/conf/" + crowdEndpoint + "/forwarding":   "1",
			"net/ipv4/conf/" + crowdEndpoint + "/rp_filter":    DefaultRPFilter,
		} {
			if got := nsSysctl(t, rel); got != want {
				t.Errorf("%s = %q, want %q", rel, got, want)
			}
		}

		// Same outcome as the read-and-diff path: re-verifying writes nothing.
		before = c.Stats()
		if err := c.ConfigureEndpoint(crowdEndpoint, idx, mac, nets); err != nil {
			t.Errorf("re-verify: %v", err)
		}
		if w := c.Stats().Sub(before).Writes(); w != 0 {
			t.Errorf("re-verifying a new endpoint made %d writes", w)
		}
		// Repeating it is harmless.
		if err := c.ConfigureNewEndpoint(crowdEndpoint, idx, mac, nets); err != nil {
			t.Errorf("configure new again: %v", err)
		}
	})

	routes, err := c.routesVia(netlink.FAMILY_V4, idx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[netip.Prefix]bool{}
	for i := range routes {
		if !c.isDesired(&routes[i], mustPrefixOf(t, &routes[i]), idx) {
			t.Errorf("route %+v is not dpd's scope-link route", routes[i])
		}
		got[mustPrefixOf(t, &routes[i])] = true
	}
	if len(routes) != 2 || !got[nets[0]] || !got[nets[1]] {
		t.Errorf("routes via %s: %v, want %v", crowdEndpoint, routes, nets)
	}
	crowd, err := c.routesVia(netlink.FAMILY_V4, crowdIndex(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	for i := range crowd {
		if p, _ := prefixOf(crowd[i].Dst); p.Addr() == taken {
			t.Errorf("route to %s still through the crowd device", taken)
		}
	}
	neigh, err := c.neighboursOn(netlink.FAMILY_V4, idx)
	if err != nil {
		t.Fatal(err)
	}
	if len(neigh) != 2 {
		t.Errorf("neighbours on %s: %+v, want 2", crowdEndpoint, neigh)
	}
	for i := range neigh {
		if !isPermanent(&neigh[i]) || neigh[i].HardwareAddr.String() != mac.String() {
			t.Errorf("neighbour %+v, want permanent -> %s", neigh[i], mac)
		}
	}
}

// TestConfigureNewEndpointAbsent: a missing interface, by name or by a
// stale ifindex, is ErrNoLink; without a MAC no neighbour is written.
func TestConfigureNewEndpointAbsent(t *testing.T) {
	ns, _, _ := crowdNS(t, 0)
	c := configurerIn(t, ns)
	nets := host(crowdEndpointIP)
	inNetns(t, ns, func() {
		if err := c.ConfigureNewEndpoint("nope0", 0, nil, nets); !errors.Is(err, ErrNoLink) {
			t.Errorf("absent by name: %v, want ErrNoLink", err)
		}
		// The name exists but the ifindex is stale (the link was replaced).
		if err := c.ConfigureNewEndpoint(crowdEndpoint, 1<<20, nil, nets); !errors.Is(err, ErrNoLink) {
			t.Errorf("stale ifindex: %v, want ErrNoLink", err)
		}
		before := c.Stats()
		if err := c.ConfigureNewEndpoint(crowdDevice, 0, nil, nets); err != nil {
			t.Errorf("configure without MAC: %v", err)
		}
		if d := c.Stats().Sub(before); d.NeighboursSet != 0 || d.RoutesAdded != 1 {
			t.Errorf("without MAC: %+v, want one route and no neighbour", d)
		}
	})
}

// TestDumpsAmongCrowd: with 500 other routes and neighbours in the
// namespace, the kernel-filtered listings still return exactly each
// interface's entries, and syncing or removing one endpoint never touches
// the others'.
func TestDumpsAmongCrowd(t *testing.T) {
	const others = 500
	ns, idx, mac := crowdNS(t, others)
	c := configurerIn(t, ns)
	crowdIdx := crowdIndex(t, ns)
	// A stale dpd route and pin on the endpoint, as a crash could leave.
	stale := netip.MustParsePrefix("10.200.0.9/32")
	if err := c.h.RouteAdd(c.desiredRoute(stale, idx)); err != nil {
		t.Fatal(err)
	}
	if err := c.setNeighbour(netlink.FAMILY_V4, idx, mac, stale.Addr()); err != nil {
		t.Fatal(err)
	}
	// One foreign route on the endpoint, which dpd must leave alone.
	foreign := &netlink.Route{LinkIndex: idx, Dst: ipNet(netip.MustParsePrefix("10.200.0.10/32")),
		Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_STATIC}
	if err := c.h.RouteAdd(foreign); err != nil {
		t.Fatal(err)
	}

	count := func(what string, ifindex, wantRoutes, wantNeigh int) {
		t.Helper()
		rs, err := c.routesVia(netlink.FAMILY_V4, ifindex)
		if err != nil {
			t.Fatal(err)
		}
		nb, err := c.neighboursOn(netlink.FAMILY_V4, ifindex)
		if err != nil {
			t.Fatal(err)
		}
		for i := range rs {
			if rs[i].LinkIndex != ifindex {
				t.Fatalf("%s: route %v through another device", what, rs[i])
			}
		}
		for i := range nb {
			if nb[i].LinkIndex != ifindex {
				t.Fatalf("%s: neighbour %v on another device", what, nb[i])
			}
		}
		if len(rs) != wantRoutes || len(nb) != wantNeigh {
			t.Fatalf("%s: %d routes, %d neighbours; want %d, %d", what, len(rs), len(nb), wantRoutes, wantNeigh)
		}
	}
	count("crowd", crowdIdx, others, others)
	count("endpoint before", idx, 2, 1)

	nets := host(crowdEndpointIP)
	inNetns(t, ns, func() {
		if err := c.ConfigureEndpoint(crowdEndpoint, idx, mac, nets); err != nil {
			t.Errorf("configure: %v", err)
		}
	})
	count("endpoint after sync", idx, 2, 1) // its route + the foreign one; its pin
	if d := c.Stats(); d.RoutesDeleted != 1 || d.NeighboursDeleted != 1 {
		t.Fatalf("sync deleted %d routes, %d neighbours; want the stale 1 and 1", d.RoutesDeleted, d.NeighboursDeleted)
	}
	dpd, err := c.ListDpdRoutes()
	if err != nil {
		t.Fatal(err)
	}
	if len(dpd) != 1 || mustPrefixOf(t, &dpd[0]) != nets[0] {
		t.Fatalf("dpd routes %v, want only %s", dpd, nets[0])
	}
	// The handles live in ns, so the name resolves there from any thread.
	if err := c.UnconfigureEndpoint(crowdEndpoint, nets); err != nil {
		t.Fatal(err)
	}
	count("endpoint removed", idx, 1, 0)
	count("crowd untouched", crowdIdx, others, others)
}

func mustPrefixOf(t *testing.T, r *netlink.Route) netip.Prefix {
	t.Helper()
	p, ok := prefixOf(r.Dst)
	if !ok {
		t.Fatalf("route without destination: %+v", r)
	}
	return p
}
