package linux

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// ConfigUpdate keys for the VXLAN device and the node's name. The VXLAN
// ones are Felix's (VXLANTunnelDevice is dpd's; Felix hardcodes the name).
const (
	ConfigHostname    = "FelixHostname"
	ConfigVXLANVNI    = "VXLANVNI"
	ConfigVXLANPort   = "VXLANPort"
	ConfigVXLANMTU    = "VXLANMTU"
	ConfigVXLANDevice = "VXLANTunnelDevice"
	// The IPv6 device's: Felix's MTU key; the name is dpd's, as above.
	ConfigVXLANMTUV6    = "VXLANMTUV6"
	ConfigVXLANDeviceV6 = "VXLANTunnelDeviceV6"
)

// vxlanConfig is the devices' configuration from ConfigUpdate: VNI and
// port are shared, name and MTU are per family.
type vxlanConfig struct {
	name, name6          string
	vni, port, mtu, mtu6 int
}

// vtepFamily picks one family's fields of a VTEP.
type vtepFamily bool

const (
	vtepV4 vtepFamily = false
	vtepV6 vtepFamily = true
)

func (f vtepFamily) mac(v *model.VTEP) net.HardwareAddr {
	if f == vtepV6 {
		return v.MACV6
	}
	return v.MAC
}

func (f vtepFamily) addr(v *model.VTEP) netip.Addr {
	if f == vtepV6 {
		return v.IPv6Addr
	}
	return v.IPv4Addr
}

func (f vtepFamily) parent(v *model.VTEP) netip.Addr {
	if f == vtepV6 {
		return v.ParentDeviceIPv6
	}
	return v.ParentDeviceIP
}

// ofFamily: a is a real address of f (IPv4-mapped IPv6 is not IPv6).
func (f vtepFamily) ofFamily(a netip.Addr) bool {
	if f == vtepV6 {
		return a.Is6() && !a.Is4In6()
	}
	return a.Is4()
}

// complete reports whether v describes a tunnel endpoint of f: a tunnel
// address, for a peer also its MAC and underlay address.
func (f vtepFamily) complete(v *model.VTEP) bool {
	return v != nil && f.ofFamily(f.addr(v)) && f.ofFamily(f.parent(v)) && len(f.mac(v)) == 6
}

func (f vtepFamily) peer(v *model.VTEP) nl.VXLANPeer {
	return nl.VXLANPeer{MAC: f.mac(v), TunnelIP: f.addr(v), ParentIP: f.parent(v)}
}

// tunnelProgrammer programs the VXLAN device and its peers from the
// VTEPs, and knows what routes to other nodes depend on: this node's
// name, the VTEPs, the nodes' addresses and the device. A change that
// routes depend on re-derives them through routes. Called under Kernel.mu.
type tunnelProgrammer struct {
	net         tunnelNet
	routes      *routeProgrammer
	defaultHost string // Options.Hostname, else the kernel's host name

	hostname string // this node's name: whose VTEP is local
	vxcfg    vxlanConfig
	vteps    map[string]*model.VTEP
	hosts    map[string]*model.HostMetadata
	ifindex  int  // the VXLAN device once the local VTEP made it; 0 before
	ifindex6 int  // the IPv6 VXLAN device, likewise
	ipv6     bool // the node has IPv6: the IPv6 device may exist
}

// devIfindex is f's device, 0 when there is none.
func (t *tunnelProgrammer) devIfindex(f vtepFamily) int {
	if f == vtepV6 {
		return t.ifindex6
	}
	return t.ifindex
}

// families are the device families this node programs.
func (t *tunnelProgrammer) families() []vtepFamily {
	if t.ipv6 {
		return []vtepFamily{vtepV4, vtepV6}
	}
	return []vtepFamily{vtepV4}
}

func newTunnelProgrammer(net tunnelNet, hostname string) *tunnelProgrammer {
	return &tunnelProgrammer{
		net:         net,
		defaultHost: hostname,
		hostname:    hostname,
		vxcfg: vxlanConfig{name: nl.DefaultVXLANDevice, name6: nl.DefaultVXLANDeviceV6, vni: nl.DefaultVXLANVNI,
			port: nl.DefaultVXLANPort, mtu: nl.DefaultVXLANMTU, mtu6: nl.DefaultVXLANMTUV6},
		vteps: map[string]*model.VTEP{},
		hosts: map[string]*model.HostMetadata{},
	}
}

// defaultHostname is Options.Hostname, else the kernel's host name.
func defaultHostname(opt string) string {
	if opt != "" {
		return opt
	}
	h, _ := os.Hostname()
	return h
}

// configure reads the node name and VXLAN settings; a change reprograms
// the device and every route that depends on it.
func (t *tunnelProgrammer) configure(cfg map[string]string) error {
	vx := vxlanConfig{name: cfg[ConfigVXLANDevice], name6: cfg[ConfigVXLANDeviceV6]}
	if vx.name == "" {
		vx.name = nl.DefaultVXLANDevice
	}
	if vx.name6 == "" {
		vx.name6 = nl.DefaultVXLANDeviceV6
	}
	if vx.name6 == vx.name {
		return fmt.Errorf("config %s=%q: the IPv6 VXLAN device needs a name of its own", ConfigVXLANDeviceV6, vx.name6)
	}
	for _, f := range []struct {
		key         string
		def, lo, hi int
		dst         *int
	}{
		{ConfigVXLANVNI, nl.DefaultVXLANVNI, 1, 1<<24 - 1, &vx.vni},
		{ConfigVXLANPort, nl.DefaultVXLANPort, 1, 65535, &vx.port},
		{ConfigVXLANMTU, nl.DefaultVXLANMTU, 68, 65535, &vx.mtu},
		{ConfigVXLANMTUV6, nl.DefaultVXLANMTUV6, 1280, 65535, &vx.mtu6},
	} {
		*f.dst = f.def
		if v := cfg[f.key]; v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < f.lo || n > f.hi {
				return fmt.Errorf("config %s=%q: want an integer in %d-%d", f.key, v, f.lo, f.hi)
			}
			*f.dst = n
		}
	}
	host := cfg[ConfigHostname]
	if host == "" {
		host = t.defaultHost
	}
	if vx == t.vxcfg && host == t.hostname {
		return nil
	}
	old := t.vxcfg
	t.vxcfg, t.hostname = vx, host
	var errs []error
	if old.name != vx.name && t.ifindex != 0 {
		if err := t.net.DeleteVXLAN(old.name); err != nil {
			errs = append(errs, err)
		}
		t.ifindex = 0
	}
	if old.name6 != vx.name6 && t.ifindex6 != 0 {
		if err := t.net.DeleteVXLAN(old.name6); err != nil {
			errs = append(errs, err)
		}
		t.ifindex6 = 0
	}
	if err := t.syncDevice(); err != nil {
		errs = append(errs, err)
	}
	if err := t.routes.resync(func(*model.Route) bool { return true }); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// applyVTEP records v (copied) and programs what depends on it.
func (t *tunnelProgrammer) applyVTEP(v *model.VTEP) error {
	if v.Node == "" {
		return errors.New("vtep without node name")
	}
	c := *v
	c.MAC = append(net.HardwareAddr(nil), v.MAC...)
	c.MACV6 = append(net.HardwareAddr(nil), v.MACV6...)
	old := t.vteps[v.Node]
	t.vteps[v.Node] = &c
	if v.Node == t.hostname {
		var errs []error
		if err := t.syncDevice(); err != nil {
			errs = append(errs, err)
		}
		if err := t.routes.resync(isVXLANRoute); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	for _, f := range t.families() {
		idx := t.devIfindex(f)
		if idx == 0 {
			continue
		}
		if old != nil && f.ofFamily(f.addr(old)) && len(f.mac(old)) == 6 && !samePeer(f.peer(old), f.peer(&c)) {
			if err := t.net.DeleteVXLANPeer(idx, f.peer(old)); err != nil {
				return err
			}
		}
		if f.complete(&c) {
			if err := t.net.SetVXLANPeer(idx, f.peer(&c)); err != nil {
				return err
			}
		}
	}
	return t.routes.resync(func(r *model.Route) bool { return r.DstNodeName == v.Node })
}

// removeVTEP forgets the VTEP of node and what depended on it.
func (t *tunnelProgrammer) removeVTEP(node string) error {
	v, ok := t.vteps[node]
	if !ok {
		return nil
	}
	delete(t.vteps, node)
	var errs []error
	if node == t.hostname {
		if err := t.net.DeleteVXLAN(t.vxcfg.name); err != nil {
			return err
		}
		t.routes.forgetDeviceRoutes(t.ifindex) // gone with the device
		t.ifindex = 0
		if t.ipv6 {
			if err := t.net.DeleteVXLAN(t.vxcfg.name6); err != nil {
				return err
			}
			t.routes.forgetDeviceRoutes(t.ifindex6)
			t.ifindex6 = 0
		}
		return nil
	}
	for _, f := range t.families() {
		if idx := t.devIfindex(f); idx != 0 && f.ofFamily(f.addr(v)) && len(f.mac(v)) == 6 {
			if err := t.net.DeleteVXLANPeer(idx, f.peer(v)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := t.routes.resync(func(r *model.Route) bool { return r.DstNodeName == node }); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// applyHost records a node's metadata (copied). A node's address
// is the next hop of its no-encap routes that carry no dst_node_ip.
func (t *tunnelProgrammer) applyHost(h *model.HostMetadata) error {
	c := *h
	t.hosts[h.Hostname] = &c
	return t.routes.resync(func(r *model.Route) bool { return r.DstNodeName == h.Hostname })
}

// removeHost forgets a node's metadata.
func (t *tunnelProgrammer) removeHost(hostname string) error {
	if _, ok := t.hosts[hostname]; !ok {
		return nil
	}
	delete(t.hosts, hostname)
	return t.routes.resync(func(r *model.Route) bool { return r.DstNodeName == hostname })
}

func isVXLANRoute(r *model.Route) bool { return r.PoolType == poolVXLAN || r.TunnelVXLAN }

func samePeer(a, b nl.VXLANPeer) bool {
	return a.MAC.String() == b.MAC.String() && a.TunnelIP == b.TunnelIP && a.ParentIP == b.ParentIP
}

// syncDevice makes the VXLAN devices and their peers match the known
// VTEPs: a family's device exists while the local VTEP has that family
// (the IPv4 device whenever the local VTEP exists, as before; the IPv6
// one when it also has an IPv6 address, MAC and parent, on a node with
// IPv6).
func (t *tunnelProgrammer) syncDevice() error {
	local := t.vteps[t.hostname]
	if local == nil {
		return nil // created when the local VTEP arrives
	}
	var errs []error
	for _, f := range t.families() {
		if err := t.syncFamilyDevice(f, local); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (t *tunnelProgrammer) syncFamilyDevice(f vtepFamily, local *model.VTEP) error {
	name, mtu, what := t.vxcfg.name, t.vxcfg.mtu, "vxlan"
	if f == vtepV6 {
		name, mtu, what = t.vxcfg.name6, t.vxcfg.mtu6, "vxlan-v6"
	}
	if f == vtepV6 && !f.complete(local) {
		// No IPv6 VTEP (any more): no IPv6 device.
		if t.ifindex6 == 0 {
			return nil
		}
		if err := t.net.DeleteVXLAN(name); err != nil {
			return fmt.Errorf("%s device: %w", what, err)
		}
		t.routes.forgetDeviceRoutes(t.ifindex6)
		t.ifindex6 = 0
		return nil
	}
	idx, err := t.net.EnsureVXLAN(nl.VXLANDevice{
		Name: name, VNI: t.vxcfg.vni, Port: t.vxcfg.port, MTU: mtu,
		MAC: f.mac(local), Addr: f.addr(local), ParentIP: f.parent(local),
	})
	if err != nil {
		return fmt.Errorf("%s device: %w", what, err)
	}
	if old := t.devIfindex(f); idx != old {
		// A new device: the routes through the old one went with it.
		t.routes.forgetDeviceRoutes(old)
		if f == vtepV6 {
			t.ifindex6 = idx
		} else {
			t.ifindex = idx
		}
	}
	var peers []nl.VXLANPeer
	for node, v := range t.vteps {
		if node != t.hostname && f.complete(v) {
			peers = append(peers, f.peer(v))
		}
	}
	if err := t.net.SyncVXLANPeers(idx, peers); err != nil {
		return fmt.Errorf("%s peers: %w", what, err)
	}
	return nil
}
