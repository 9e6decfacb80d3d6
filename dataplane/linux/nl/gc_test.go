package nl

import (
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestListDpdRoutes: the GC list holds dpd's routes in any table and never
// another protocol's; DeleteRoute refuses foreign routes.
func TestListDpdRoutes(t *testing.T) {
	testutil.RequirePrivileged(t)
	c := newConfigurer(t)
	name := uniqueName(testPrefix("nlg"))
	l := addLink(t, name)
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	idx := l.Attrs().Index
	// 198.18.0.0/15 is reserved for benchmarking: no clash with real routes.
	base := os.Getpid() % 250
	addr := func(i int) string { return fmt.Sprintf("198.18.%d.%d", base, i) }
	dst := func(i int) *net.IPNet { return ipNet(host(addr(i))[0]) }

	if err := c.ConfigureEndpoint(name, idx, nil, host(addr(1))); err != nil {
		t.Fatalf("configure: %v", err)
	}
	foreign := []*netlink.Route{
		{LinkIndex: idx, Dst: dst(2), Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_STATIC},
		{LinkIndex: idx, Dst: dst(3), Scope: netlink.SCOPE_LINK, Protocol: 0x50}, // Calico's
		{LinkIndex: idx, Dst: dst(4), Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_BOOT},
	}
	otherTable := &netlink.Route{LinkIndex: idx, Dst: dst(5), Scope: netlink.SCOPE_LINK,
		Protocol: RouteProtocol, Table: 1000 + base}
	for _, r := range append(foreign, otherTable) {
		if err := netlink.RouteAdd(r); err != nil {
			t.Fatalf("add route %s: %v", r.Dst, err)
		}
		t.Cleanup(func() { _ = netlink.RouteDel(r) })
	}

	list, err := c.ListDpdRoutes()
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	found := map[string]netlink.Route{}
	for _, r := range list {
		if r.Protocol != RouteProtocol {
			t.Fatalf("listed foreign route %v proto %d", r, r.Protocol)
		}
		if r.LinkIndex == idx {
			found[r.Dst.String()] = r
		}
	}
	if len(found) != 2 {
		t.Fatalf("dpd routes via %s: %v, want %s and %s", name, found, addr(1), addr(5))
	}
	if _, ok := found[addr(1)+"/32"]; !ok {
		t.Fatalf("endpoint route missing from %v", found)
	}
	if r, ok := found[addr(5)+"/32"]; !ok || r.Table != otherTable.Table {
		t.Fatalf("other-table route missing from %v", found)
	}

	for _, r := range foreign {
		if err := c.DeleteRoute(r); err == nil {
			t.Fatalf("DeleteRoute accepted a proto %d route", r.Protocol)
		}
	}
	before := c.Stats()
	for _, r := range found {
		if err := c.DeleteRoute(&r); err != nil {
			t.Fatalf("delete %s: %v", r.Dst, err)
		}
		if err := c.DeleteRoute(&r); err != nil { // already gone: success
			t.Fatalf("delete %s twice: %v", r.Dst, err)
		}
	}
	if d := c.Stats().Sub(before); d.RoutesDeleted != 2 {
		t.Fatalf("deletes %+v, want 2", d)
	}
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: idx},
		netlink.RT_FILTER_OIF)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(foreign) {
		t.Fatalf("routes via %s after GC: %v, want the %d foreign ones", name, rs, len(foreign))
	}
}
