package nl

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RemoteRoute is a route to another node's workloads (or to its VTEP),
// from a RouteUpdate. Like every dpd route it carries RouteProtocol, and it
// is told apart from workload routes (scope link, no gateway, on a workload
// interface) by having a gateway or being on the VXLAN device.
type RemoteRoute struct {
	Dst netip.Prefix
	// Gateway is the next hop: the node's underlay address (no
	// encapsulation) or its VTEP's tunnel address (VXLAN). Invalid for a
	// route straight onto the VXLAN device (a remote VTEP's own address).
	Gateway netip.Addr
	// Ifindex is the VXLAN device for tunnelled routes, which are onlink:
	// the gateway is resolved by the device's permanent neighbour entry.
	// 0 lets the kernel find the interface that reaches Gateway.
	Ifindex int
}

func (c *Configurer) remoteRoute(r RemoteRoute) *netlink.Route {
	nr := &netlink.Route{
		Dst:      ipNet(r.Dst.Masked()),
		Protocol: c.proto,
		Table:    unix.RT_TABLE_MAIN,
		Type:     unix.RTN_UNICAST,
		Scope:    netlink.SCOPE_UNIVERSE,
	}
	if r.Gateway.IsValid() {
		nr.Gw = r.Gateway.AsSlice()
	} else {
		nr.Scope = netlink.SCOPE_LINK
	}
	if r.Ifindex > 0 {
		nr.LinkIndex = r.Ifindex
		if r.Gateway.IsValid() {
			nr.Flags = int(netlink.FLAG_ONLINK)
		}
	}
	if !r.Dst.Addr().Is4() {
		// IPv6 keys routes by destination and metric, and has no scopes.
		nr.Scope, nr.Priority = netlink.SCOPE_UNIVERSE, IPv6RouteMetric
	}
	return nr
}

// checkRemote refuses a route that mixes families, and IPv6 on a node
// without it.
func (c *Configurer) checkRemote(r RemoteRoute) error {
	v4 := r.Dst.Addr().Is4()
	if r.Gateway.IsValid() && r.Gateway.Is4() != v4 {
		return fmt.Errorf("remote route %s: gateway %s is of the other family", r.Dst, r.Gateway)
	}
	if !v4 && !c.ipv6 {
		return fmt.Errorf("remote route %s: IPv6 is off on this node", r.Dst)
	}
	return nil
}

// ReplaceRemoteRoute installs r, replacing any main-table route to r.Dst.
// The kernel compares, so re-installing an identical route is harmless;
// calling it on every apply also repairs drift.
func (c *Configurer) ReplaceRemoteRoute(r RemoteRoute) error {
	if err := c.checkRemote(r); err != nil {
		return err
	}
	// Always a replace: the kernel cannot filter a route dump by
	// destination, and comparing against a full dump per route would make
	// a resync quadratic. Replacing an identical route changes nothing.
	if err := c.h.RouteReplace(c.remoteRoute(r)); err != nil {
		return fmt.Errorf("replace route %s: %w", r.Dst, err)
	}
	c.stats.routesReplaced.Add(1)
	return nil
}

// isRemote tells dpd's remote routes from its workload routes: they have
// a gateway or are on a VXLAN device.
func isRemote(r *netlink.Route, vxlanIfindexes []int) bool {
	return r.Gw != nil || (r.LinkIndex > 0 && slices.Contains(vxlanIfindexes, r.LinkIndex))
}

// DeleteRemoteRoute removes the remote route r (as installed); a workload
// route to the same destination and routes of other protocols stay, because
// the kernel matches protocol, gateway and device. Absent is not an error.
func (c *Configurer) DeleteRemoteRoute(r RemoteRoute) error {
	if c.checkRemote(r) != nil {
		return nil // never installed
	}
	nr := c.remoteRoute(r)
	nr.Flags = 0
	return c.deleteRoute(nr)
}

// RemoteRoutes lists dpd's remote routes of both families in the main
// table (those with a gateway or on one of the VXLAN devices), for garbage
// collection after a restart.
func (c *Configurer) RemoteRoutes(vxlanIfindexes ...int) ([]netlink.Route, error) {
	all, err := c.listRoutes(netlink.FAMILY_ALL,
		&netlink.Route{Protocol: c.proto, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for i := range all {
		if isRemote(&all[i], vxlanIfindexes) {
			out = append(out, all[i])
		}
	}
	return out, nil
}
