package linux

import (
	"errors"
	"fmt"
	"net"
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
)

// vxlanConfig is the device configuration from ConfigUpdate.
type vxlanConfig struct {
	name           string
	vni, port, mtu int
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
	ifindex  int // the VXLAN device once the local VTEP made it; 0 before
}

func newTunnelProgrammer(net tunnelNet, hostname string) *tunnelProgrammer {
	return &tunnelProgrammer{
		net:         net,
		defaultHost: hostname,
		hostname:    hostname,
		vxcfg:       vxlanConfig{name: nl.DefaultVXLANDevice, vni: nl.DefaultVXLANVNI, port: nl.DefaultVXLANPort, mtu: nl.DefaultVXLANMTU},
		vteps:       map[string]*model.VTEP{},
		hosts:       map[string]*model.HostMetadata{},
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
	vx := vxlanConfig{name: cfg[ConfigVXLANDevice]}
	if vx.name == "" {
		vx.name = nl.DefaultVXLANDevice
	}
	for _, f := range []struct {
		key         string
		def, lo, hi int
		dst         *int
	}{
		{ConfigVXLANVNI, nl.DefaultVXLANVNI, 1, 1<<24 - 1, &vx.vni},
		{ConfigVXLANPort, nl.DefaultVXLANPort, 1, 65535, &vx.port},
		{ConfigVXLANMTU, nl.DefaultVXLANMTU, 68, 65535, &vx.mtu},
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
	oldName := t.vxcfg.name
	t.vxcfg, t.hostname = vx, host
	var errs []error
	if oldName != vx.name && t.ifindex != 0 {
		if err := t.net.DeleteVXLAN(oldName); err != nil {
			errs = append(errs, err)
		}
		t.ifindex = 0
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
	if t.ifindex != 0 {
		if old != nil && old.IPv4Addr.Is4() && len(old.MAC) == 6 && !samePeer(peerOf(old), peerOf(&c)) {
			if err := t.net.DeleteVXLANPeer(t.ifindex, peerOf(old)); err != nil {
				return err
			}
		}
		if c.ParentDeviceIP.Is4() && c.IPv4Addr.Is4() && len(c.MAC) == 6 {
			if err := t.net.SetVXLANPeer(t.ifindex, peerOf(&c)); err != nil {
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
		t.ifindex = 0
		t.routes.forgetDeviceRoutes() // gone with the device
		return nil
	}
	if t.ifindex != 0 && v.IPv4Addr.Is4() && len(v.MAC) == 6 {
		if err := t.net.DeleteVXLANPeer(t.ifindex, peerOf(v)); err != nil {
			errs = append(errs, err)
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

func peerOf(v *model.VTEP) nl.VXLANPeer {
	return nl.VXLANPeer{MAC: v.MAC, TunnelIP: v.IPv4Addr, ParentIP: v.ParentDeviceIP}
}

// syncDevice makes the VXLAN device and its peers match the known VTEPs:
// the device exists while the local VTEP does.
func (t *tunnelProgrammer) syncDevice() error {
	local := t.vteps[t.hostname]
	if local == nil {
		return nil // created when the local VTEP arrives
	}
	idx, err := t.net.EnsureVXLAN(nl.VXLANDevice{
		Name: t.vxcfg.name, VNI: t.vxcfg.vni, Port: t.vxcfg.port, MTU: t.vxcfg.mtu,
		MAC: local.MAC, Addr: local.IPv4Addr, ParentIP: local.ParentDeviceIP,
	})
	if err != nil {
		return fmt.Errorf("vxlan device: %w", err)
	}
	if idx != t.ifindex {
		// A new device: the routes through the old one went with it.
		t.routes.forgetDeviceRoutes()
		t.ifindex = idx
	}
	var peers []nl.VXLANPeer
	for node, v := range t.vteps {
		if node != t.hostname && v.ParentDeviceIP.Is4() && v.IPv4Addr.Is4() && len(v.MAC) == 6 {
			peers = append(peers, peerOf(v))
		}
	}
	if err := t.net.SyncVXLANPeers(idx, peers); err != nil {
		return fmt.Errorf("vxlan peers: %w", err)
	}
	return nil
}
