package nl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// ConfigureEndpoint makes the host side of a workload interface route its
// IPv4 nets: the interface sysctls (see endpointSysctls), one route per net
// ("ip/32 dev iface scope link proto dpd", replacing any route to that
// destination in the main table), and, when mac is known, a permanent
// neighbour entry per host address so the host never ARPs for the workload
// (as Calico does). dpd routes and permanent neighbours on the interface for
// other destinations are removed: the endpoint's nets are the whole truth.
//
// ifindex may be 0, then it is looked up by name. An absent interface yields
// an error wrapping ErrNoLink. IPv6 nets are ignored for now: they need
// proxy_ndp and IPv6 routes, which dpd does not program yet.
func (c *Configurer) ConfigureEndpoint(iface string, ifindex int, mac net.HardwareAddr, nets []netip.Prefix) error {
	ifindex, v4, err := c.endpointTarget(iface, ifindex, nets)
	if err != nil {
		return err
	}
	// Sysctls first: proxy ARP and forwarding must be on before traffic is
	// routed to the interface.
	if err := c.ensureSysctls(endpointSysctls(iface, c.rpFilter)); err != nil {
		return fmt.Errorf("configure %s: %w", iface, noLink(err))
	}
	var errs []error
	if err := c.syncRoutes(ifindex, v4); err != nil {
		errs = append(errs, err)
	}
	if err := c.syncNeighbours(ifindex, mac, v4); err != nil {
		errs = append(errs, err)
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
	ifindex, v4, err := c.endpointTarget(iface, ifindex, nets)
	if err != nil {
		return err
	}
	if err := c.writeSysctls(endpointSysctls(iface, c.rpFilter)); err != nil {
		return fmt.Errorf("configure %s: %w", iface, noLink(err))
	}
	errs := []error{c.replaceRoutes(ifindex, v4)}
	if len(mac) > 0 {
		errs = append(errs, c.setNeighbours(ifindex, mac, v4))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("configure %s: %w", iface, err)
	}
	return nil
}

// endpointTarget checks iface, looks its index up when ifindex is 0 and
// keeps the IPv4 prefixes of nets.
func (c *Configurer) endpointTarget(iface string, ifindex int, nets []netip.Prefix) (int, []netip.Prefix, error) {
	if err := validIfaceName(iface); err != nil {
		return 0, nil, err
	}
	if ifindex <= 0 {
		idx, err := c.linkIndex(iface)
		if err != nil {
			return 0, nil, err
		}
		ifindex = idx
	}
	return ifindex, ipv4Nets(nets), nil
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
	var errs []error
	if err := c.removeRoutes(ifindex); err != nil {
		errs = append(errs, err)
	}
	if err := c.removeNeighbours(ifindex, ipv4Nets(nets)); err != nil {
		errs = append(errs, err)
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

// ipv4Nets keeps the IPv4 prefixes (IPv4-mapped IPv6 included), masked and
// without duplicates.
func ipv4Nets(nets []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(nets))
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
		if !a.Is4() || bits < 0 {
			continue
		}
		p = netip.PrefixFrom(a, bits).Masked()
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}
