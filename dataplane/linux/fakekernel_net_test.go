package linux

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
)

// The fake kernel's routes, tunnels, masquerade and NAT maps.

// --- routeMaps, routeNet, tunnelNet, masqNet, natMaps: enough for the
// Kernel to compose; the route and service programmers have their own
// privileged tests.

func (f *fakeKernel) SetRoute(dst netip.Prefix, info tcbpf.RouteInfo) error {
	if err := f.op("SetRoute", "%s", dst); err != nil {
		return err
	}
	f.bpfRoutes[dst] = info
	return nil
}

func (f *fakeKernel) DeleteRoute(dst netip.Prefix) error {
	if err := f.op("DeleteBPFRoute", "%s", dst); err != nil {
		return err
	}
	delete(f.bpfRoutes, dst)
	return nil
}

func (f *fakeKernel) Routes() (map[netip.Prefix]tcbpf.RouteInfo, error) {
	return maps.Clone(f.bpfRoutes), f.read("Routes")
}

// fakeRouteNet is the fake's kernel routing table (its DeleteRoute is not
// the BPF map's).
type fakeRouteNet struct{ *fakeKernel }

func (f fakeRouteNet) DeleteRoute(r *netlink.Route) error {
	return f.op("DeleteKernelRoute", "%s", r.Dst)
}

func (f *fakeKernel) ReplaceRemoteRoute(r nl.RemoteRoute) error {
	if err := f.op("ReplaceRemoteRoute", "%s", r.Dst); err != nil {
		return err
	}
	f.kroutes[r.Dst] = r
	return nil
}

func (f *fakeKernel) DeleteRemoteRoute(r nl.RemoteRoute) error {
	if err := f.op("DeleteRemoteRoute", "%s", r.Dst); err != nil {
		return err
	}
	delete(f.kroutes, r.Dst)
	return nil
}

func (f *fakeKernel) RemoteRoutes(...int) ([]netlink.Route, error) {
	return nil, f.read("RemoteRoutes")
}

// fakeVXLANIfindex is the VXLAN device's ifindex once EnsureVXLAN made it.
const fakeVXLANIfindex = 50

func (f *fakeKernel) EnsureVXLAN(d nl.VXLANDevice) (int, error) {
	if err := f.op("EnsureVXLAN", "%s vni=%d addr=%s", d.Name, d.VNI, d.Addr); err != nil {
		return 0, err
	}
	return fakeVXLANIfindex, nil
}

// DeleteVXLAN deletes the device and, as the kernel does, the routes
// through it.
func (f *fakeKernel) DeleteVXLAN(name string) error {
	if err := f.op("DeleteVXLAN", "%s", name); err != nil {
		return err
	}
	maps.DeleteFunc(f.kroutes, func(_ netip.Prefix, r nl.RemoteRoute) bool { return r.Ifindex == fakeVXLANIfindex })
	return nil
}

func (f *fakeKernel) SetVXLANPeer(_ int, p nl.VXLANPeer) error {
	return f.op("SetVXLANPeer", "%s", p.TunnelIP)
}

func (f *fakeKernel) DeleteVXLANPeer(_ int, p nl.VXLANPeer) error {
	return f.op("DeleteVXLANPeer", "%s", p.TunnelIP)
}

func (f *fakeKernel) SyncVXLANPeers(_ int, peers []nl.VXLANPeer) error {
	return f.op("SyncVXLANPeers", "%d", len(peers))
}

func (f *fakeKernel) SyncMasquerade(masq, all []netip.Prefix) error {
	if err := f.op("SyncMasquerade", "%v %v", masq, all); err != nil {
		return err
	}
	f.masq = fmt.Sprint(masq, all)
	return nil
}

func (f *fakeKernel) NATFrontends() ([]tcbpf.NATFrontendEntry, error) {
	if err := f.read("NATFrontends"); err != nil {
		return nil, err
	}
	var out []tcbpf.NATFrontendEntry
	for fe, id := range f.natFE {
		out = append(out, tcbpf.NATFrontendEntry{Frontend: fe, ID: id, Count: len(f.natBE[id])})
	}
	return out, nil
}

func (f *fakeKernel) NATBackendsOf(id uint32) ([]tcbpf.NATBackend, error) {
	return slices.Clone(f.natBE[id]), f.read("NATBackendsOf")
}

func (f *fakeKernel) ProgramNATPort(id uint32, fes []tcbpf.NATFrontend, bes []tcbpf.NATBackend, _ int) error {
	if err := f.op("ProgramNATPort", "%d %v -> %v", id, fes, bes); err != nil {
		return err
	}
	for _, fe := range fes {
		f.natFE[fe] = id
	}
	if len(bes) == 0 {
		delete(f.natBE, id)
	} else {
		f.natBE[id] = slices.Clone(bes)
	}
	return nil
}

func (f *fakeKernel) DeleteNATFrontend(fe tcbpf.NATFrontend) error {
	if err := f.op("DeleteNATFrontend", "%s", fe); err != nil {
		return err
	}
	delete(f.natFE, fe)
	return nil
}

func (f *fakeKernel) DeleteNATPort(id uint32, _ int) error {
	if err := f.op("DeleteNATPort", "%d", id); err != nil {
		return err
	}
	delete(f.natBE, id)
	return nil
}

func (f *fakeKernel) DeleteNATBackendsExcept(keep map[uint32]bool) (int, error) {
	if err := f.read("DeleteNATBackendsExcept"); err != nil {
		return 0, err
	}
	n := 0
	for id := range f.natBE {
		if !keep[id] {
			if err := f.op("DeleteNATPort", "%d", id); err != nil {
				return n, err
			}
			delete(f.natBE, id)
			n++
		}
	}
	return n, nil
}

func (f *fakeKernel) FlushNATFlows(fl tcbpf.NATFlowFilter) (int, error) {
	var what []string
	for id := range fl.Services {
		what = append(what, fmt.Sprintf("service %d", id))
	}
	for b := range fl.Backends {
		what = append(what, fmt.Sprintf("backend %d/%s", b.ID, b.Backend))
	}
	slices.Sort(what)
	return 0, f.op("FlushNATFlows", "%s", strings.Join(what, ", "))
}
