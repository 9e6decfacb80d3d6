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

// tunnelState is what routes to other nodes depend on. Guarded by
// Kernel.mu.
type tunnelState struct {
	hostname string // this node's name: whose VTEP is local
	vxcfg    vxlanConfig
	vteps    map[string]*model.VTEP
	hosts    map[string]*model.HostMetadata
	ifindex  int // the VXLAN device once the local VTEP made it; 0 before
}

func newTunnelState(hostname string) tunnelState {
	return tunnelState{
		hostname: hostname,
		vxcfg:    vxlanConfig{name: nl.DefaultVXLANDevice, vni: nl.DefaultVXLANVNI, port: nl.DefaultVXLANPort, mtu: nl.DefaultVXLANMTU},
		vteps:    map[string]*model.VTEP{},
		hosts:    map[string]*model.HostMetadata{},
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

// configureTunnel reads the node name and VXLAN settings; a change
// reprograms the device and every route that depends on it.
func (k *Kernel) configureTunnel(cfg map[string]string) error {
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
		host = defaultHostname(k.opts.Hostname)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if vx == k.tun.vxcfg && host == k.tun.hostname {
		return nil
	}
	oldName := k.tun.vxcfg.name
	k.tun.vxcfg, k.tun.hostname = vx, host
	var errs []error
	if oldName != vx.name && k.tun.ifindex != 0 {
		if err := k.cfg.DeleteVXLAN(oldName); err != nil {
			errs = append(errs, err)
		}
		k.tun.ifindex = 0
	}
	if err := k.syncTunnelLocked(); err != nil {
		errs = append(errs, err)
	}
	if err := k.resyncRoutesLocked(func(*model.Route) bool { return true }); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Hostname is the node name whose VTEP and routes are local.
func (k *Kernel) Hostname() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tun.hostname
}

// ApplyVTEP implements dataplane.TunnelKernel.
func (k *Kernel) ApplyVTEP(v *model.VTEP) error {
	if v.Node == "" {
		return errors.New("vtep without node name")
	}
	c := *v
	c.MAC = append(net.HardwareAddr(nil), v.MAC...)
	k.mu.Lock()
	defer k.mu.Unlock()
	old := k.tun.vteps[v.Node]
	k.tun.vteps[v.Node] = &c
	if v.Node == k.tun.hostname {
		var errs []error
		if err := k.syncTunnelLocked(); err != nil {
			errs = append(errs, err)
		}
		if err := k.resyncRoutesLocked(isVXLANRoute); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	if k.tun.ifindex != 0 {
		if old != nil && old.IPv4Addr.Is4() && len(old.MAC) == 6 && !samePeer(peerOf(old), peerOf(&c)) {
			if err := k.cfg.DeleteVXLANPeer(k.tun.ifindex, peerOf(old)); err != nil {
				return err
			}
		}
		if c.ParentDeviceIP.Is4() && c.IPv4Addr.Is4() && len(c.MAC) == 6 {
			if err := k.cfg.SetVXLANPeer(k.tun.ifindex, peerOf(&c)); err != nil {
				return err
			}
		}
	}
	return k.resyncRoutesLocked(func(r *model.Route) bool { return r.DstNodeName == v.Node })
}

// RemoveVTEP implements dataplane.TunnelKernel.
func (k *Kernel) RemoveVTEP(node string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.tun.vteps[node]
	if !ok {
		return nil
	}
	delete(k.tun.vteps, node)
	var errs []error
	if node == k.tun.hostname {
		if err := k.cfg.DeleteVXLAN(k.tun.vxcfg.name); err != nil {
			return err
		}
		k.tun.ifindex = 0
		for _, st := range k.routes {
			if st.installed != nil && st.installed.Ifindex != 0 {
				st.installed = nil // gone with the device
			}
		}
		return nil
	}
	if k.tun.ifindex != 0 && v.IPv4Addr.Is4() && len(v.MAC) == 6 {
		if err := k.cfg.DeleteVXLANPeer(k.tun.ifindex, peerOf(v)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := k.resyncRoutesLocked(func(r *model.Route) bool { return r.DstNodeName == node }); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ApplyHostMetadata implements dataplane.TunnelKernel. A node's address
// is the next hop of its no-encap routes that carry no dst_node_ip.
func (k *Kernel) ApplyHostMetadata(h *model.HostMetadata) error {
	c := *h
	k.mu.Lock()
	defer k.mu.Unlock()
	k.tun.hosts[h.Hostname] = &c
	return k.resyncRoutesLocked(func(r *model.Route) bool { return r.DstNodeName == h.Hostname })
}

// RemoveHostMetadata implements dataplane.TunnelKernel.
func (k *Kernel) RemoveHostMetadata(hostname string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.tun.hosts[hostname]; !ok {
		return nil
	}
	delete(k.tun.hosts, hostname)
	return k.resyncRoutesLocked(func(r *model.Route) bool { return r.DstNodeName == hostname })
}

func isVXLANRoute(r *model.Route) bool { return r.PoolType == poolVXLAN || r.TunnelVXLAN }

func samePeer(a, b nl.VXLANPeer) bool {
	return a.MAC.String() == b.MAC.String() && a.TunnelIP == b.TunnelIP && a.ParentIP == b.ParentIP
}

func peerOf(v *model.VTEP) nl.VXLANPeer {
	return nl.VXLANPeer{MAC: v.MAC, TunnelIP: v.IPv4Addr, ParentIP: v.ParentDeviceIP}
}

// syncTunnelLocked makes the VXLAN device and its peers match the known
// VTEPs: the device exists while the local VTEP does.
func (k *Kernel) syncTunnelLocked() error {
	local := k.tun.vteps[k.tun.hostname]
	if local == nil {
		return nil // created when the local VTEP arrives
	}
	idx, err := k.cfg.EnsureVXLAN(nl.VXLANDevice{
		Name: k.tun.vxcfg.name, VNI: k.tun.vxcfg.vni, Port: k.tun.vxcfg.port, MTU: k.tun.vxcfg.mtu,
		MAC: local.MAC, Addr: local.IPv4Addr, ParentIP: local.ParentDeviceIP,
	})
	if err != nil {
		return fmt.Errorf("vxlan device: %w", err)
	}
	if idx != k.tun.ifindex {
		// A new device: the routes through the old one went with it.
		for _, st := range k.routes {
			if st.installed != nil && st.installed.Ifindex != 0 {
				st.installed = nil
			}
		}
		k.tun.ifindex = idx
	}
	var peers []nl.VXLANPeer
	for node, v := range k.tun.vteps {
		if node != k.tun.hostname && v.ParentDeviceIP.Is4() && v.IPv4Addr.Is4() && len(v.MAC) == 6 {
			peers = append(peers, peerOf(v))
		}
	}
	if err := k.cfg.SyncVXLANPeers(idx, peers); err != nil {
		return fmt.Errorf("vxlan peers: %w", err)
	}
	return nil
}

// VXLANIfindex is the VXLAN device's ifindex, 0 when there is none.
func (k *Kernel) VXLANIfindex() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tun.ifindex
}
