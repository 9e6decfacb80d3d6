package nl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ipNet converts a prefix to the library's form.
func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// prefixOf converts a route destination back; ok is false for none.
func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	if a.Is4In6() {
		a, ones = a.Unmap(), max(ones-96, 0)
	}
	return netip.PrefixFrom(a, ones), true
}

// IPv6RouteMetric is the metric of dpd's IPv6 routes: the kernel's default
// for user routes (IP6_RT_PRIO_USER), written explicitly because IPv6 keys
// routes by destination and metric, so a replace or delete must name it.
const IPv6RouteMetric = 1024

// desiredRoute is the route dpd wants for dst via the workload interface.
// IPv6 has no route scopes (the kernel stores every route as universe), so
// an IPv6 route carries the metric instead.
func (c *Configurer) desiredRoute(dst netip.Prefix, ifindex int) *netlink.Route {
	r := &netlink.Route{
		LinkIndex: ifindex,
		Dst:       ipNet(dst),
		Scope:     netlink.SCOPE_LINK,
		Protocol:  c.proto,
		Table:     unix.RT_TABLE_MAIN,
		Type:      unix.RTN_UNICAST,
	}
	if !dst.Addr().Is4() {
		r.Scope, r.Priority = netlink.SCOPE_UNIVERSE, IPv6RouteMetric
	}
	return r
}

// isDesired reports whether r is exactly desiredRoute(dst, ifindex).
func (c *Configurer) isDesired(r *netlink.Route, dst netip.Prefix, ifindex int) bool {
	got, ok := prefixOf(r.Dst)
	want := c.desiredRoute(dst, ifindex)
	return ok && got == dst && r.LinkIndex == ifindex && r.Scope == want.Scope &&
		r.Protocol == c.proto && r.Table == unix.RT_TABLE_MAIN && r.Type == unix.RTN_UNICAST &&
		r.Priority == want.Priority && r.Gw == nil && r.Src == nil && len(r.MultiPath) == 0 && r.Tos == 0
}

// listRoutes dumps routes through the strict handle, retrying interrupted
// dumps, which may be incomplete.
func (c *Configurer) listRoutes(family int, filter *netlink.Route, mask uint64) ([]netlink.Route, error) {
	routes, err := retryDump(func() ([]netlink.Route, error) {
		c.stats.routeDumps.Add(1)
		return c.dumps.RouteListFiltered(family, filter, mask)
	})
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", noLink(err))
	}
	return routes, nil
}

// routesVia lists the main-table routes of family through ifindex.
func (c *Configurer) routesVia(family, ifindex int) ([]netlink.Route, error) {
	return c.listRoutes(family,
		&netlink.Route{LinkIndex: ifindex, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
}

// syncRoutesIn makes the dpd routes through ifindex of want's family
// exactly want (all of one family), given have, that family's routes
// through ifindex as dumped.
func (c *Configurer) syncRoutesIn(have []netlink.Route, ifindex int, want []netip.Prefix) error {
	byDst := make(map[netip.Prefix][]*netlink.Route, len(have))
	for i := range have {
		if dst, ok := prefixOf(have[i].Dst); ok {
			byDst[dst] = append(byDst[dst], &have[i])
		}
	}
	var errs []error
	for _, dst := range want {
		existing := byDst[dst]
		if slices.ContainsFunc(existing, func(r *netlink.Route) bool { return c.isDesired(r, dst, ifindex) }) {
			continue
		}
		// Replace also takes over a route to dst through another
		// interface: the endpoint owning the address wins.
		if err := c.h.RouteReplace(c.desiredRoute(dst, ifindex)); err != nil {
			errs = append(errs, fmt.Errorf("replace route %s: %w", dst, noLink(err)))
			continue
		}
		if len(existing) == 0 {
			c.stats.routesAdded.Add(1)
		} else {
			c.stats.routesReplaced.Add(1)
		}
	}
	for i := range have {
		r := &have[i]
		if r.Protocol != c.proto {
			continue
		}
		if dst, ok := prefixOf(r.Dst); ok && slices.Contains(want, dst) {
			continue
		}
		if err := c.deleteRoute(r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// replaceRoutes writes the route to each of want through ifindex without
// looking at what is there.
func (c *Configurer) replaceRoutes(ifindex int, want []netip.Prefix) error {
	var errs []error
	for _, dst := range want {
		if err := c.h.RouteReplace(c.desiredRoute(dst, ifindex)); err != nil {
			errs = append(errs, fmt.Errorf("replace route %s: %w", dst, noLink(err)))
			continue
		}
		c.stats.routesAdded.Add(1)
	}
	return errors.Join(errs...)
}

// ofFamily keeps the routes of family (FAMILY_V4 or FAMILY_V6).
func ofFamily(rs []netlink.Route, family int) []netlink.Route {
	return keepFamily(rs, family, func(r netlink.Route) int { return r.Family })
}

// keepFamily keeps, in a new slice, the xs whose family is family.
func keepFamily[T any](xs []T, family int, familyOf func(T) int) []T {
	out := make([]T, 0, len(xs))
	for _, x := range xs {
		if familyOf(x) == family {
			out = append(out, x)
		}
	}
	return out
}

// removeRoutes deletes every dpd route of family through ifindex.
func (c *Configurer) removeRoutes(family, ifindex int) error {
	have, err := c.routesVia(family, ifindex)
	if err != nil {
		return err
	}
	var errs []error
	for i := range have {
		if have[i].Protocol == c.proto {
			if err := c.deleteRoute(&have[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// ListDpdRoutes lists every route, in any table and family, that carries
// dpd's route protocol: the candidates for garbage collection. Routes of
// other protocols never appear.
func (c *Configurer) ListDpdRoutes() ([]netlink.Route, error) {
	return c.listRoutes(netlink.FAMILY_ALL,
		&netlink.Route{Protocol: c.proto, Table: unix.RT_TABLE_UNSPEC},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
}

// DeleteRoute deletes one route found by ListDpdRoutes. It refuses routes
// of any other protocol, and a route already gone is success.
func (c *Configurer) DeleteRoute(r *netlink.Route) error {
	if r == nil {
		return errors.New("delete route: nil route")
	}
	if r.Protocol != c.proto {
		return fmt.Errorf("delete route %s: protocol %d is not dpd's (%d)", r.Dst, r.Protocol, c.proto)
	}
	return c.deleteRoute(r)
}

func (c *Configurer) deleteRoute(r *netlink.Route) error {
	err := c.h.RouteDel(r)
	if errors.Is(err, syscall.ESRCH) || errors.Is(err, syscall.ENODEV) {
		return nil // already gone, possibly with its interface
	}
	if err != nil {
		return fmt.Errorf("delete route %s: %w", r.Dst, err)
	}
	c.stats.routesDeleted.Add(1)
	return nil
}
