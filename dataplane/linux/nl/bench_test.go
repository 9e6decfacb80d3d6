package nl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// BenchmarkConfigureEndpointNoop measures the steady-state resync cost of
// one endpoint: reads only (sysctls, a route dump, a neighbour dump).
func BenchmarkConfigureEndpointNoop(b *testing.B) {
	testutil.RequirePrivileged(b)
	c, err := NewConfigurer(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	w := testutil.NewWorkload(b, "cali", testIPs(30))
	mac := nsLinkTB(b, w.NS, "eth0").Attrs().HardwareAddr
	nets := host(w.IP)
	if err := c.ConfigureEndpoint(w.HostIface, 0, mac, nets); err != nil {
		b.Fatal(err)
	}
	idx, err := c.linkIndex(w.HostIface)
	if err != nil {
		b.Fatal(err)
	}
	before := c.Stats()
	b.ResetTimer()
	for b.Loop() {
		if err := c.ConfigureEndpoint(w.HostIface, idx, mac, nets); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if w := c.Stats().Sub(before).Writes(); w != 0 {
		b.Fatalf("%d writes in steady state", w)
	}
}

// crowdSizes are the numbers of other endpoints' routes and neighbours.
var crowdSizes = []int{0, 1000, 4000}

// BenchmarkConfigureEndpointCrowded is the steady-state re-verification of
// one endpoint among n others: its cost must not grow with n.
func BenchmarkConfigureEndpointCrowded(b *testing.B) {
	testutil.RequirePrivileged(b)
	for _, n := range crowdSizes {
		b.Run(fmt.Sprintf("others=%d", n), func(b *testing.B) {
			ns, idx, mac := crowdNS(b, n)
			c := configurerIn(b, ns)
			nets := host(crowdEndpointIP)
			inNetns(b, ns, func() { // sysctls resolve in the caller's namespace
				if err := c.ConfigureEndpoint(crowdEndpoint, idx, mac, nets); err != nil {
					b.Error(err)
					return
				}
				for b.Loop() {
					if err := c.ConfigureEndpoint(crowdEndpoint, idx, mac, nets); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkRouteDump lists one interface's routes among n others, with
// the kernel filtering (strict) and without (loose: the whole table is
// sent and the library filters).
func BenchmarkRouteDump(b *testing.B) {
	testutil.RequirePrivileged(b)
	for _, n := range crowdSizes[1:] {
		ns, idx, _ := crowdNS(b, n)
		c := configurerIn(b, ns)
		for _, strict := range []bool{true, false} {
			b.Run(fmt.Sprintf("others=%d/strict=%v", n, strict), func(b *testing.B) {
				if err := c.dumps.SetStrictCheck(strict); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if _, err := c.routesVia(netlink.FAMILY_V4, idx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkNeighbourDump lists one interface's neighbours among n others.
func BenchmarkNeighbourDump(b *testing.B) {
	testutil.RequirePrivileged(b)
	for _, n := range crowdSizes[1:] {
		ns, idx, _ := crowdNS(b, n)
		c := configurerIn(b, ns)
		b.Run(fmt.Sprintf("others=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := c.neighboursOn(netlink.FAMILY_V4, idx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkConfigureFirstApply is an endpoint's first apply among n others:
// read-and-diff (ConfigureEndpoint) against write-only
// (ConfigureNewEndpoint). Between iterations, untimed, the endpoint's
// routes, neighbours and sysctls are put back to a new interface's.
func BenchmarkConfigureFirstApply(b *testing.B) {
	testutil.RequirePrivileged(b)
	for _, n := range crowdSizes {
		ns, idx, mac := crowdNS(b, n)
		c := configurerIn(b, ns)
		nets := host(crowdEndpointIP)
		reset := endpointSysctls(crowdEndpoint, "0", false)
		for i := range reset {
			reset[i].value = "0"
		}
		for _, path := range []struct {
			name string
			fn   func(string, int, net.HardwareAddr, []netip.Prefix) error
		}{{"ConfigureEndpoint", c.ConfigureEndpoint}, {"ConfigureNewEndpoint", c.ConfigureNewEndpoint}} {
			b.Run(fmt.Sprintf("others=%d/%s", n, path.name), func(b *testing.B) {
				inNetns(b, ns, func() {
					for b.Loop() {
						b.StopTimer()
						err := errors.Join(c.removeRoutes(netlink.FAMILY_V4, idx), c.removeNeighbours(netlink.FAMILY_V4, idx, nets), c.writeSysctls(reset))
						b.StartTimer()
						if err == nil {
							err = path.fn(crowdEndpoint, idx, mac, nets)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
