package linux

import (
	"errors"
	"fmt"
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

// routeState is one RouteUpdate and the kernel route it produced.
type routeState struct {
	r         *model.Route
	installed *nl.RemoteRoute // the kernel route in place; nil when none
}

// ApplyRoute implements dataplane.RouteKernel. Every route is written to
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
func (k *Kernel) ApplyRoute(r *model.Route) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	dst := r.Dst.Masked()
	st := k.routes[dst]
	if st == nil {
		st = &routeState{}
		k.routes[dst] = st
	}
	if old := st.r; old == nil || old.PoolType != r.PoolType || old.NATOutgoing != r.NATOutgoing {
		k.masqDirty = true
	}
	st.r = r
	if !dst.Addr().Is4() {
		return nil // IPv6 is not programmed yet
	}
	var errs []error
	if err := k.bpf.SetRoute(dst, routeInfo(r)); err != nil {
		errs = append(errs, err)
	}
	if err := k.syncKernelRouteLocked(st); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RemoveRoute implements dataplane.RouteKernel.
func (k *Kernel) RemoveRoute(r *model.Route) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	dst := r.Dst.Masked()
	st := k.routes[dst]
	if !dst.Addr().Is4() {
		delete(k.routes, dst)
		return nil
	}
	if err := k.bpf.DeleteRoute(dst); err != nil {
		return err
	}
	if st != nil && st.installed != nil {
		if err := k.cfg.DeleteRemoteRoute(*st.installed); err != nil {
			return err
		}
	}
	if st != nil && st.r.PoolType != poolNone {
		k.masqDirty = true
	}
	delete(k.routes, dst)
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

// desiredRemoteLocked is the kernel route r needs now, nil for none (a
// local or non-workload destination, or what it needs is not known yet).
func (k *Kernel) desiredRemoteLocked(r *model.Route) *nl.RemoteRoute {
	if r.LocalWorkload || (k.tun.hostname != "" && r.DstNodeName == k.tun.hostname) || !r.Dst.Addr().Is4() {
		return nil
	}
	dst := r.Dst.Masked()
	vxlan := r.PoolType == poolVXLAN || r.TunnelVXLAN
	switch {
	case r.Types&abi.RTRemoteWorkload != 0:
	case r.Types&abi.RTRemoteTunnel != 0 && vxlan:
		if k.tun.ifindex == 0 {
			return nil
		}
		return &nl.RemoteRoute{Dst: dst, Ifindex: k.tun.ifindex}
	default:
		return nil
	}
	switch {
	case r.PoolType == poolNoEncap || (r.SameSubnet && (r.PoolType == poolVXLAN || r.PoolType == poolIPIP)):
		gw := r.DstNodeIP
		if !gw.Is4() {
			if h := k.tun.hosts[r.DstNodeName]; h != nil {
				gw = h.IPv4Addr
			}
		}
		if !gw.Is4() {
			return nil
		}
		return &nl.RemoteRoute{Dst: dst, Gateway: gw}
	case r.PoolType == poolVXLAN:
		v := k.tun.vteps[r.DstNodeName]
		if k.tun.ifindex == 0 || v == nil || !v.IPv4Addr.Is4() {
			return nil
		}
		return &nl.RemoteRoute{Dst: dst, Gateway: v.IPv4Addr, Ifindex: k.tun.ifindex}
	case r.PoolType == poolIPIP:
		k.logOnceLocked("ipip", "IPIP pools are not implemented; their routes are not programmed")
	}
	return nil
}

// syncKernelRouteLocked makes st's kernel route what it should be now.
func (k *Kernel) syncKernelRouteLocked(st *routeState) error {
	want := k.desiredRemoteLocked(st.r)
	if st.installed != nil && (want == nil || *want != *st.installed) {
		if err := k.cfg.DeleteRemoteRoute(*st.installed); err != nil {
			return err
		}
		st.installed = nil
	}
	if want == nil {
		return nil
	}
	if err := k.cfg.ReplaceRemoteRoute(*want); err != nil {
		return err
	}
	st.installed = want
	return nil
}

// resyncRoutesLocked re-derives the kernel routes of the routes match
// selects, after what they depend on (a VTEP, a host address, the VXLAN
// device) changed.
func (k *Kernel) resyncRoutesLocked(match func(*model.Route) bool) error {
	var errs []error
	for _, st := range k.routes {
		if match(st.r) {
			if err := k.syncKernelRouteLocked(st); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// syncMasqueradeLocked programs the nat_outgoing table from the pools.
func (k *Kernel) syncMasqueradeLocked() error {
	var masq, all []netip.Prefix
	for dst, st := range k.routes {
		if st.r.PoolType == poolNone || !dst.Addr().Is4() {
			continue
		}
		all = append(all, dst)
		if st.r.NATOutgoing {
			masq = append(masq, dst)
		}
	}
	slices.SortFunc(masq, netip.Prefix.Compare)
	slices.SortFunc(all, netip.Prefix.Compare)
	if k.masqDone && slices.Equal(masq, k.masqPools) && slices.Equal(all, k.allPools) {
		return nil
	}
	if err := k.cfg.SyncMasquerade(masq, all); err != nil {
		return fmt.Errorf("nat outgoing: %w", err)
	}
	k.masqPools, k.allPools, k.masqDone = masq, all, true
	return nil
}

// gcRoutesLocked removes what an earlier dpd left and nothing wants now:
// BPF route entries and remote kernel routes.
func (k *Kernel) gcRoutesLocked() error {
	var errs []error
	have, err := k.bpf.Routes()
	if err != nil {
		errs = append(errs, err)
	}
	for dst := range have {
		if _, ok := k.routes[dst]; !ok {
			if err := k.bpf.DeleteRoute(dst); err != nil {
				errs = append(errs, err)
			}
		}
	}
	kr, err := k.cfg.RemoteRoutes(k.tun.ifindex)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for i := range kr {
		r := &kr[i]
		if k.wantsKernelRouteLocked(r.Dst.String()) {
			continue
		}
		if err := k.cfg.DeleteRoute(r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// wantsKernelRouteLocked: some route state has a kernel route to dst.
func (k *Kernel) wantsKernelRouteLocked(dst string) bool {
	p, err := netip.ParsePrefix(dst)
	if err != nil {
		return false
	}
	st := k.routes[p.Masked()]
	return st != nil && st.installed != nil
}
