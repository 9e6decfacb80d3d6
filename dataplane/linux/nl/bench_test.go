package nl

import (
	"testing"

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
