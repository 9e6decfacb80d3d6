package nl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// ConfigureEndpoint makes the host side of a workload interface route its
// nets, of both families: the interface sysctls (see endpointSysctls), one
// route per net ("ip/32 dev iface scope link proto dpd", and for IPv6
// "ip/128 dev iface proto dpd metric 1024"), replacing any route to that
// destination in the main table, and, when mac is known, a permanent
// neighbour entry per host address so the host never ARPs or solicits for
// the workload (as Calico does). dpd routes and permanent neighbours on the
// interface for other destinations are removed, per family: the endpoint's
// nets are the whole truth.
//
// IPv6 nets are programmed only when the node has IPv6 (IPv6()); on an
// IPv4-only node they are ignored, and dpd's IPv6 state on the interface
// is left alone (there is none to find).
//
// ifindex may be 0, then it is looked up by name. An absent interface yields
// an error wrapping ErrNoLink.
func (c *Configurer) ConfigureEndpoint(iface string, ifindex int, mac net.HardwareAddr, nets []netip.Prefix) error {
	ifindex, fam, err := c.endpointTarget(iface, ifindex, nets)
	if err != nil {
		return err
	}
	// Sysctls first: proxy ARP and forwarding must be on before traffic is
	// routed to the interface.
	if err := c.ensureSysctls(endpointSysctls(iface, c.rpFilter, len(fam.v6) > 0)); err != nil {
		return fmt.Errorf("configure %s: %w", iface, noLink(err))
	}
	// One route dump and one neighbour dump cover both families: the
	// kernel filters an all-families dump by interface too.
	var errs []error
	dumpFamily := netlink.FAMILY_V4
	if c.ipv6 {
		dumpFamily = netlink.FAMILY_ALL
	}
	if routes, err := c.routesVia(dumpFamily, ifindex); err != nil {
		errs = append(errs, err)
	} else {
		for _, f := range c.families(fam) {
			if err := c.syncRoutesIn(ofFamily(routes, f.family), ifindex, f.nets); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if neigh, err := c.neighboursOn(dumpFamily, ifindex); err != nil {
		errs = append(errs, err)
	} else {
		for _, f := range c.families(fam) {
			if err := c.syncNeighboursIn(neighboursOfFamily(neigh, f.family), ifindex, mac, f.nets); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("configure %s: %w", iface, err)
	}
	return nil
}

// ConfigureNewEndpoint is ConfigureEndpoint for an interface that has just
// appeared, so nothing of dpd's can be on it yet: it writes without reading
// the kernel first (every sysctl written, RouteReplace per net, NeighSet per
// host address when mac is known), a constant number of syscalls where
// ConfigureEndpoint reads and diffs. The outcome and errors are the same
// (an absent interface yields an error wrapping ErrNoLink), except that dpd
// routes and permanent neighbours for other destinations on the interface
// are not looked for, so after a restart, or to re-verify, use
// ConfigureEndpoint. Repeating it is harmless. Every write is counted in
// Stats (routes as RoutesAdded).
func (c *Configurer) ConfigureNewEndpoint(iface string, ifindex int, mac net.HardwareAddr, nets []netip.Prefix) error {
	ifindex, fam, err := c.endpointTarget(iface, ifindex, nets)
	if err != nil {
		return err
	}
	if err := c.writeSysctls(endpointSysctls(iface, c.rpFilter, len(fam.v6) > 0)); err != nil {
		return fmt.Errorf("configure %s: %w", iface, noLink(err))
	}
	var errs []error
	for _, f := range c.families(fam) {
		if len(f.nets) == 0 {
			continue // a new interface has nothing to replace
		}
		errs = append(errs, c.replaceRoutes(ifindex, f.nets))
		if len(mac) > 0 {
			errs = append(errs, c.setNeighbours(f.family, ifindex, mac, f.nets))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("configure %s: %w", iface, err)
	}
	return nil
}

// endpointTarget checks iface, looks its index up when ifindex is 0 and
// splits nets by family (no IPv6 on an IPv4-only node).
func (c *Configurer) endpointTarget(iface string, ifindex int, nets []netip.Prefix) (int, splitNets, error) {
	if err := validIfaceName(iface); err != nil {
		return 0, splitNets{}, err
	}
	if ifindex <= 0 {
		idx, err := c.linkIndex(iface)
		if err != nil {
			return 0, splitNets{}, err
		}
		ifindex = idx
	}
	fam := splitFamilies(nets)
	if !c.ipv6 {
		fam.v6 = nil
	}
	return ifindex, fam, nil
}

// UnconfigureEndpoint removes what ConfigureEndpoint added for iface: every
// dpd route through it, and the permanent neighbours of nets' addresses on
// it. Sysctls are left: they vanish with the interface. An absent interface
// took its routes and neighbours with it, so that is success.
func (c *Configurer) UnconfigureEndpoint(iface string, nets []netip.Prefix) error {
	if err := validIfaceName(iface); err != nil {
		return err
	}
	ifindex, err := c.linkIndex(iface)
	if errors.Is(err, ErrNoLink) {
		return nil
	}
	if err != nil {
		return err
	}
	fam := splitFamilies(nets)
	var errs []error
	for _, f := range c.families(fam) {
		if err := c.removeRoutes(f.family, ifindex); err != nil {
			errs = append(errs, err)
		}
		if err := c.removeNeighbours(f.family, ifindex, f.nets); err != nil {
			errs = append(errs, err)
		}
	}
	err = errors.Join(errs...)
	if errors.Is(err, ErrNoLink) {
		return nil // deleted under us: nothing left to remove
	}
	if err != nil {
		return fmt.Errorf("unconfigure %s: %w", iface, err)
	}
	return nil
}

// splitNets is an endpoint's nets by family, each masked and without
// duplicates.
type splitNets struct{ v4, v6 []netip.Prefix }

// familyNets is one family's nets and its netlink family.
type familyNets struct {
	family int
	nets   []netip.Prefix
}

// families lists the families to program: IPv4 always (its dpd state must
// go when the endpoint has no IPv4 net left), IPv6 when the node has it.
func (c *Configurer) families(s splitNets) []familyNets {
	out := []familyNets{{netlink.FAMILY_V4, s.v4}}
	if c.ipv6 {
		out = append(out, familyNets{netlink.FAMILY_V6, s.v6})
	}
	return out
}

// splitFamilies sorts nets into IPv4 (IPv4-mapped IPv6 included, as IPv4)
// and IPv6, masked and without duplicates; invalid prefixes are dropped.
func splitFamilies(nets []netip.Prefix) splitNets {
	var out splitNets
	seen := make(map[netip.Prefix]bool, len(nets))
	for _, p := range nets {
		if !p.IsValid() {
			continue
		}
		a := p.Addr()
		bits := p.Bits()
		if a.Is4In6() {
			a, bits = a.Unmap(), bits-96
		}
		if bits < 0 {
			continue
		}
		p = netip.PrefixFrom(a.WithZone(""), bits).Masked()
		if seen[p] {
			continue
		}
		seen[p] = true
		if a.Is4() {
			out.v4 = append(out.v4, p)
		} else {
			out.v6 = append(out.v6, p)
		}
	}
	return out
}

// ipv4Nets keeps the IPv4 prefixes of nets (see splitFamilies).
func ipv4Nets(nets []netip.Prefix) []netip.Prefix { return splitFamilies(nets).v4 }
