package linux

import (
	"errors"
	"net/netip"
	"slices"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// felix IPPoolType values (model.Route.PoolType).
const (
	poolNone    = 0
	poolNoEncap = 1
	poolVXLAN   = 2
	poolIPIP    = 3
)

// routeProgrammer programs RouteUpdates: the BPF route map for every
// route, and kernel routes to other nodes' workloads, which depend on the
// tunnels (tunnelProgrammer). It also knows the IP pools, which feed the
// nat_outgoing table (masqProgrammer). Called under Kernel.mu.
type routeProgrammer struct {
	maps routeMaps
	net  routeNet
	tun  *tunnelProgrammer
	warn func(key, msg string) // logs once per key

	routes map[netip.Prefix]*routeState // by masked destination
	// poolsDirty: the pools changed since the nat_outgoing table was
	// last written.
	poolsDirty bool
	// ipv6: the node has IPv6, so IPv6 routes become kernel routes; on
	// an IPv4-only node they are only recorded.
	ipv6 bool
}

func newRouteProgrammer(maps routeMaps, net routeNet, tun *tunnelProgrammer, warn func(key, msg string)) *routeProgrammer {
	return &routeProgrammer{maps: maps, net: net, tun: tun, warn: warn, routes: map[netip.Prefix]*routeState{}, poolsDirty: true}
}

// routeState is one RouteUpdate and the kernel route it produced.
type routeState struct {
	r         *model.Route
	installed *nl.RemoteRoute // the kernel route in place; nil when none
}

// apply programs r. Every route is written to
// the BPF route map (dpd_routes: the class of a destination, for the
// programs and Inspect). Routes to other nodes' workloads also become
// kernel routes (protocol 0xdd):
//
//   - no-encap pools, and VXLAN pools when the node shares our subnet
//     (same_subnet, sent for CrossSubnet pools): dst via dst_node_ip (or the
//     node's HostMetadata address);
//   - VXLAN pools otherwise: dst via <node's VTEP address> dev <VXLAN
//     device> onlink, once the local and the node's VTEP are known;
//   - a remote VTEP's own address (REMOTE_TUNNEL): dst dev <VXLAN device>.
//
// IPIP pools are not implemented: their routes only reach the BPF map.
// Pools (routes with a pool type) also feed the nat_outgoing table, which
// EndApply programs once per apply pass.
//
// IPv6 routes (on a node with IPv6) become kernel routes the same way,
// via the node's IPv6 address (dst_node_ip when it is IPv6, else the
// node's HostMetadata IPv6 address), or through the IPv6 VXLAN device
// (Calico's vxlan-v6.calico) from the VTEPs' IPv6 fields. The BPF route
// map holds IPv4 only.
func (p *routeProgrammer) apply(r *model.Route) error {
	dst := r.Dst.Masked()
	st := p.routes[dst]
	if st == nil {
		st = &routeState{}
		p.routes[dst] = st
	}
	if old := st.r; old == nil || old.PoolType != r.PoolType || old.NATOutgoing != r.NATOutgoing {
		p.poolsDirty = true
	}
	st.r = r
	if !dst.Addr().Is4() {
		if !p.ipv6 {
			return nil // IPv4-only node: nothing IPv6 is programmed
		}
		return p.syncKernelRoute(st, true)
	}
	var errs []error
	if err := p.maps.SetRoute(dst, routeInfo(r)); err != nil {
		errs = append(errs, err)
	}
	if err := p.syncKernelRoute(st, true); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// remove removes what apply programmed for r.
func (p *routeProgrammer) remove(r *model.Route) error {
	dst := r.Dst.Masked()
	st := p.routes[dst]
	if dst.Addr().Is4() {
		if err := p.maps.DeleteRoute(dst); err != nil {
			return err
		}
	}
	if st != nil && st.installed != nil {
		if err := p.net.DeleteRemoteRoute(*st.installed); err != nil {
			return err
		}
	}
	if st != nil && st.r.PoolType != poolNone {
		p.poolsDirty = true
	}
	delete(p.routes, dst)
	return nil
}

// routeInfo is what dpd_routes records for r.
func routeInfo(r *model.Route) tcbpf.RouteInfo {
	flags := r.Types & (abi.RTRemoteWorkload | abi.RTRemoteHost | abi.RTLocalWorkload |
		abi.RTLocalHost | abi.RTRemoteTunnel | abi.RTLocalTunnel)
	if r.PoolType != poolNone {
		flags |= abi.RTInPool
	}
	if r.NATOutgoing {
		flags |= abi.RTNATOutgoing
	}
	if r.SameSubnet {
		flags |= abi.RTSameSubnet
	}
	if r.TunnelVXLAN || (r.PoolType == poolVXLAN && !r.SameSubnet && r.Types&abi.RTRemoteWorkload != 0) {
		flags |= abi.RTTunnelVXLAN
	}
	info := tcbpf.RouteInfo{Flags: flags, PoolType: r.PoolType}
	if r.DstNodeIP.Is4() {
		info.NextHop = r.DstNodeIP
	}
	return info
}

// desiredRemote is the kernel route r needs now, nil for none (a
// local or non-workload destination, or what it needs is not known yet).
func (p *routeProgrammer) desiredRemote(r *model.Route) *nl.RemoteRoute {
	if r.LocalWorkload || (p.tun.hostname != "" && r.DstNodeName == p.tun.hostname) {
		return nil
	}
	if !r.Dst.Addr().Is4() {
		return p.desiredRemote6(r)
	}
	dst := r.Dst.Masked()
	vxlan := r.PoolType == poolVXLAN || r.TunnelVXLAN
	switch {
	case r.Types&abi.RTRemoteWorkload != 0:
	case r.Types&abi.RTRemoteTunnel != 0 && vxlan:
		if p.tun.ifindex == 0 {
			return nil
		}
		return &nl.RemoteRoute{Dst: dst, Ifindex: p.tun.ifindex}
	default:
		return nil
	}
	switch {
	case r.PoolType == poolNoEncap || (r.SameSubnet && (r.PoolType == poolVXLAN || r.PoolType == poolIPIP)):
		gw := r.DstNodeIP
		if !gw.Is4() {
			if h := p.tun.hosts[r.DstNodeName]; h != nil {
				gw = h.IPv4Addr
			}
		}
		if !gw.Is4() {
			return nil
		}
		return &nl.RemoteRoute{Dst: dst, Gateway: gw}
	case r.PoolType == poolVXLAN:
		v := p.tun.vteps[r.DstNodeName]
		if p.tun.ifindex == 0 || v == nil || !v.IPv4Addr.Is4() {
			return nil
		}
		return &nl.RemoteRoute{Dst: dst, Gateway: v.IPv4Addr, Ifindex: p.tun.ifindex}
	case r.PoolType == poolIPIP:
		p.warn("ipip", "IPIP pools are not implemented; their routes are not programmed")
	}
	return nil
}

// desiredRemote6 is desiredRemote for an IPv6 destination: remote
// workloads of no-encap pools (and of VXLAN pools on the same subnet) via
// the node's IPv6 address; of VXLAN pools via the node's IPv6 VTEP
// address on the IPv6 VXLAN device (onlink); a remote IPv6 VTEP's own
// address onto that device.
func (p *routeProgrammer) desiredRemote6(r *model.Route) *nl.RemoteRoute {
	if !p.ipv6 {
		return nil
	}
	vxlan := r.PoolType == poolVXLAN || r.TunnelVXLAN
	switch {
	case r.Types&abi.RTRemoteWorkload != 0:
	case r.Types&abi.RTRemoteTunnel != 0 && vxlan:
		if p.tun.ifindex6 == 0 {
			return nil
		}
		return &nl.RemoteRoute{Dst: r.Dst.Masked(), Ifindex: p.tun.ifindex6}
	default:
		return nil
	}
	switch {
	case r.PoolType == poolNoEncap || (r.SameSubnet && (r.PoolType == poolVXLAN || r.PoolType == poolIPIP)):
		gw := r.DstNodeIP
		if !gw.Is6() || gw.Is4In6() {
			gw = netip.Addr{}
			if h := p.tun.hosts[r.DstNodeName]; h != nil {
				gw = h.IPv6Addr
			}
		}
		if !gw.Is6() || gw.Is4In6() {
			return nil
		}
		return &nl.RemoteRoute{Dst: r.Dst.Masked(), Gateway: gw}
	case r.PoolType == poolVXLAN || r.TunnelVXLAN:
		v := p.tun.vteps[r.DstNodeName]
		if p.tun.ifindex6 == 0 || !vtepV6.complete(v) {
			return nil
		}
		return &nl.RemoteRoute{Dst: r.Dst.Masked(), Gateway: v.IPv6Addr, Ifindex: p.tun.ifindex6}
	}
	return nil
}

// syncKernelRoute makes st's kernel route what it should be now. rewrite
// writes it even when it is what this process installed (an apply, which
// also repairs drift); a resync after a dependency changed writes only
// the routes it changed.
func (p *routeProgrammer) syncKernelRoute(st *routeState, rewrite bool) error {
	want := p.desiredRemote(st.r)
	if st.installed != nil && (want == nil || *want != *st.installed) {
		if err := p.net.DeleteRemoteRoute(*st.installed); err != nil {
			return err
		}
		st.installed = nil
	}
	if want == nil || (!rewrite && st.installed != nil && *want == *st.installed) {
		return nil
	}
	if err := p.net.ReplaceRemoteRoute(*want); err != nil {
		return err
	}
	st.installed = want
	return nil
}

// resync re-derives the kernel routes of the routes match selects, after
// what they depend on (a VTEP, a host address, the VXLAN device) changed.
func (p *routeProgrammer) resync(match func(*model.Route) bool) error {
	var errs []error
	for _, st := range p.routes {
		if match(st.r) {
			if err := p.syncKernelRoute(st, false); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// pools lists the pools, sorted (IPv4 before IPv6): those with NAT
// outgoing, and all. IPv6 pools only on a node with IPv6.
func (p *routeProgrammer) pools() (masq, all []netip.Prefix) {
	for dst, st := range p.routes {
		if st.r.PoolType == poolNone || (!dst.Addr().Is4() && !p.ipv6) {
			continue
		}
		all = append(all, dst)
		if st.r.NATOutgoing {
			masq = append(masq, dst)
		}
	}
	slices.SortFunc(masq, netip.Prefix.Compare)
	slices.SortFunc(all, netip.Prefix.Compare)
	return masq, all
}

// forgetDeviceRoutes forgets the kernel routes through the VXLAN device
// ifindex, which went with it.
func (p *routeProgrammer) forgetDeviceRoutes(ifindex int) {
	if ifindex == 0 {
		return
	}
	for _, st := range p.routes {
		if st.installed != nil && st.installed.Ifindex == ifindex {
			st.installed = nil
		}
	}
}

// gc removes what an earlier dpd left and nothing wants now: BPF route
// entries and remote kernel routes.
func (p *routeProgrammer) gc() error {
	var errs []error
	have, err := p.maps.Routes()
	if err != nil {
		errs = append(errs, err)
	}
	for dst := range have {
		if _, ok := p.routes[dst]; !ok {
			if err := p.maps.DeleteRoute(dst); err != nil {
				errs = append(errs, err)
			}
		}
	}
	kr, err := p.net.RemoteRoutes(p.tun.ifindex, p.tun.ifindex6)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for i := range kr {
		r := &kr[i]
		if p.wantsKernelRoute(r.Dst.String()) {
			continue
		}
		if err := p.net.DeleteRoute(r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// wantsKernelRoute: some route state has a kernel route to dst.
func (p *routeProgrammer) wantsKernelRoute(dst string) bool {
	pfx, err := netip.ParsePrefix(dst)
	if err != nil {
		return false
	}
	st := p.routes[pfx.Masked()]
	return st != nil && st.installed != nil
}
