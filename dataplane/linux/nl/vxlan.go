package nl

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Calico's VXLAN defaults, which dpd keeps so nodes of both interoperate.
// IPv6 pools tunnel through a second device over the node's IPv6 address,
// with the same VNI and port.
const (
	DefaultVXLANDevice   = "vxlan.calico"
	DefaultVXLANDeviceV6 = "vxlan-v6.calico"
	DefaultVXLANVNI      = 4096
	DefaultVXLANPort     = 4789
	DefaultVXLANMTU      = 1410
	DefaultVXLANMTUV6    = 1390 // 20 bytes more of outer IPv6 header
)

// VXLANDevice is a local VXLAN device as the local node's VTEP describes
// it. Addr and ParentIP are of one family: IPv4 for vxlan.calico, IPv6 for
// vxlan-v6.calico.
type VXLANDevice struct {
	Name     string
	VNI      int
	Port     int
	MTU      int
	MAC      net.HardwareAddr
	Addr     netip.Addr // the tunnel address, assigned as /32 (IPv6: /128)
	ParentIP netip.Addr // the node's underlay address: source of the outer packets
}

// addrFamily is the netlink family of a.
func addrFamily(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// VXLANPeer is another node's VTEP: where its MAC lives on the underlay
// (FDB) and which tunnel address has that MAC (neighbour).
type VXLANPeer struct {
	MAC      net.HardwareAddr
	TunnelIP netip.Addr
	ParentIP netip.Addr
}

// EnsureVXLAN creates the device or repairs it (VNI, port, local address,
// learning off, MAC, MTU, address, up) and returns its ifindex. A VXLAN
// device of that name whose VNI, port or local address differ is
// recreated; a device of another type is an error, not something to
// delete.
func (c *Configurer) EnsureVXLAN(d VXLANDevice) (int, error) {
	if err := validIfaceName(d.Name); err != nil {
		return 0, err
	}
	if !d.ParentIP.IsValid() || !d.Addr.IsValid() || d.ParentIP.Is4() != d.Addr.Is4() || len(d.MAC) != 6 {
		return 0, fmt.Errorf("vxlan %s: need a parent address and a tunnel address of one family, and a MAC", d.Name)
	}
	if !d.Addr.Is4() && !c.ipv6 {
		return 0, fmt.Errorf("vxlan %s: IPv6 is off on this node", d.Name)
	}
	parent := c.linkWithAddr(d.ParentIP)
	want := &netlink.Vxlan{
		LinkAttrs:    netlink.LinkAttrs{Name: d.Name, MTU: d.MTU, HardwareAddr: d.MAC},
		VxlanId:      d.VNI,
		VtepDevIndex: parent,
		SrcAddr:      d.ParentIP.AsSlice(),
		Port:         d.Port,
		Learning:     false,
	}
	l, err := c.h.LinkByName(d.Name)
	switch {
	case err != nil && !isLinkNotFound(err):
		return 0, fmt.Errorf("look up %s: %w", d.Name, err)
	case err == nil:
		have, ok := l.(*netlink.Vxlan)
		if !ok {
			return 0, fmt.Errorf("%s exists and is a %s, not a vxlan device", d.Name, l.Type())
		}
		if !vxlanMatches(have, want) {
			c.log.Info("recreating vxlan device with new parameters", "device", d.Name,
				"vni", d.VNI, "port", d.Port, "local", d.ParentIP)
			if err := c.h.LinkDel(l); err != nil {
				return 0, fmt.Errorf("delete %s: %w", d.Name, err)
			}
			l = nil
		}
	default:
		l = nil
	}
	if l == nil {
		if err := c.h.LinkAdd(want); err != nil {
			return 0, fmt.Errorf("add vxlan %s: %w", d.Name, err)
		}
		if l, err = c.h.LinkByName(d.Name); err != nil {
			return 0, fmt.Errorf("look up %s: %w", d.Name, err)
		}
	}
	a := l.Attrs()
	if !bytes.Equal(a.HardwareAddr, d.MAC) {
		if err := c.h.LinkSetHardwareAddr(l, d.MAC); err != nil {
			return 0, fmt.Errorf("set %s mac: %w", d.Name, err)
		}
	}
	if d.MTU > 0 && a.MTU != d.MTU {
		if err := c.h.LinkSetMTU(l, d.MTU); err != nil {
			return 0, fmt.Errorf("set %s mtu: %w", d.Name, err)
		}
	}
	if err := c.syncDeviceAddr(l, d.Addr); err != nil {
		return 0, err
	}
	if a.Flags&net.FlagUp == 0 {
		if err := c.h.LinkSetUp(l); err != nil {
			return 0, fmt.Errorf("set %s up: %w", d.Name, err)
		}
	}
	return a.Index, nil
}

func vxlanMatches(have, want *netlink.Vxlan) bool {
	return have.VxlanId == want.VxlanId && have.Port == want.Port && !have.Learning &&
		have.SrcAddr.Equal(want.SrcAddr) && (want.VtepDevIndex == 0 || have.VtepDevIndex == want.VtepDevIndex)
}

// linkWithAddr is the ifindex of the interface holding addr, 0 if none: the
// device the tunnel runs over.
func (c *Configurer) linkWithAddr(addr netip.Addr) int {
	addrs, err := c.h.AddrList(nil, addrFamily(addr))
	if err != nil {
		return 0
	}
	for _, a := range addrs {
		if got, ok := netip.AddrFromSlice(a.IP); ok && got.Unmap() == addr {
			return a.LinkIndex
		}
	}
	return 0
}

// syncDeviceAddr makes addr/32 (IPv6: /128) the device's only address of
// its family; an IPv6 device keeps its link-local address, which the
// kernel owns.
func (c *Configurer) syncDeviceAddr(l netlink.Link, addr netip.Addr) error {
	have, err := c.h.AddrList(l, addrFamily(addr))
	if err != nil {
		return fmt.Errorf("list %s addresses: %w", l.Attrs().Name, err)
	}
	found := false
	for i := range have {
		a := &have[i]
		ones, _ := a.Mask.Size()
		got, ok := netip.AddrFromSlice(a.IP)
		if ok && got.Unmap() == addr && ones == addr.BitLen() {
			found = true
			continue
		}
		if ok && got.Is6() && got.IsLinkLocalUnicast() {
			continue
		}
		if err := c.h.AddrDel(l, a); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
			return fmt.Errorf("delete %s from %s: %w", a.IPNet, l.Attrs().Name, err)
		}
	}
	if found {
		return nil
	}
	a := &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(addr, addr.BitLen()))}
	if !addr.Is4() {
		// Nothing else may hold a node's tunnel address: skip duplicate
		// address detection, which would keep it tentative for a second.
		a.Flags = unix.IFA_F_NODAD
	}
	if err := c.h.AddrReplace(l, a); err != nil {
		return fmt.Errorf("add %s to %s: %w", addr, l.Attrs().Name, err)
	}
	return nil
}

// DeleteVXLAN removes the device (with its FDB, neighbours and routes);
// absent is not an error.
func (c *Configurer) DeleteVXLAN(name string) error {
	l, err := c.h.LinkByName(name)
	if isLinkNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up %s: %w", name, err)
	}
	if _, ok := l.(*netlink.Vxlan); !ok {
		return fmt.Errorf("%s is a %s, not a vxlan device", name, l.Type())
	}
	if err := c.h.LinkDel(l); err != nil && !isLinkNotFound(err) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// SyncVXLANPeers makes the device's permanent FDB entries exactly peer MAC
// -> underlay address, and its permanent neighbours exactly peer tunnel
// address -> MAC. Only differences are written.
func (c *Configurer) SyncVXLANPeers(ifindex int, peers []VXLANPeer) error {
	fdbWant := map[string]netip.Addr{}
	neighWant := map[netip.Addr]net.HardwareAddr{}
	for _, p := range peers {
		fdbWant[p.MAC.String()] = p.ParentIP
		neighWant[p.TunnelIP] = p.MAC
	}
	var errs []error
	fdb, err := c.h.NeighList(ifindex, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("list fdb: %w", noLink(err))
	}
	fdbDone := map[string]bool{}
	for i := range fdb {
		n := &fdb[i]
		if !isPermanent(n) || n.Flags&netlink.NTF_SELF == 0 {
			continue
		}
		mac := n.HardwareAddr.String()
		if dst, ok := fdbWant[mac]; ok && addrOf(n.IP) == dst {
			fdbDone[mac] = true
			continue
		}
		if err := c.deleteNeighbour(n); err != nil {
			errs = append(errs, err)
		}
	}
	for mac, dst := range fdbWant {
		if fdbDone[mac] {
			continue
		}
		hw, _ := net.ParseMAC(mac)
		n := &netlink.Neigh{
			LinkIndex: ifindex, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
			State: netlink.NUD_PERMANENT, IP: dst.AsSlice(), HardwareAddr: hw,
		}
		if err := c.h.NeighSet(n); err != nil {
			errs = append(errs, fmt.Errorf("set fdb %s -> %s: %w", mac, dst, noLink(err)))
			continue
		}
		c.stats.neighSet.Add(1)
	}

	neigh, err := c.deviceNeighbours(ifindex)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	neighDone := map[netip.Addr]bool{}
	for i := range neigh {
		n := &neigh[i]
		if !isPermanent(n) {
			continue
		}
		a := addrOf(n.IP)
		if mac, ok := neighWant[a]; ok && bytes.Equal(mac, n.HardwareAddr) {
			neighDone[a] = true
			continue
		}
		if err := c.deleteNeighbour(n); err != nil {
			errs = append(errs, err)
		}
	}
	for a, mac := range neighWant {
		if neighDone[a] {
			continue
		}
		n := &netlink.Neigh{
			LinkIndex: ifindex, Family: addrFamily(a), State: netlink.NUD_PERMANENT,
			Type: unix.RTN_UNICAST, IP: a.AsSlice(), HardwareAddr: mac,
		}
		if err := c.h.NeighSet(n); err != nil {
			errs = append(errs, fmt.Errorf("set neighbour %s -> %s: %w", a, mac, noLink(err)))
			continue
		}
		c.stats.neighSet.Add(1)
	}
	return errors.Join(errs...)
}

// VXLANPeers reads back the device's permanent FDB and neighbour entries
// as peers (matched by MAC), for tests and Inspect.
func (c *Configurer) VXLANPeers(ifindex int) ([]VXLANPeer, error) {
	fdb, err := c.h.NeighList(ifindex, unix.AF_BRIDGE)
	if err != nil {
		return nil, fmt.Errorf("list fdb: %w", noLink(err))
	}
	neigh, err := c.deviceNeighbours(ifindex)
	if err != nil {
		return nil, err
	}
	byMAC := map[string]netip.Addr{}
	for i := range neigh {
		if isPermanent(&neigh[i]) {
			byMAC[neigh[i].HardwareAddr.String()] = addrOf(neigh[i].IP)
		}
	}
	var out []VXLANPeer
	for i := range fdb {
		n := &fdb[i]
		if !isPermanent(n) || n.Flags&netlink.NTF_SELF == 0 {
			continue
		}
		out = append(out, VXLANPeer{MAC: n.HardwareAddr, ParentIP: addrOf(n.IP), TunnelIP: byMAC[n.HardwareAddr.String()]})
	}
	return out, nil
}

func fdbEntry(ifindex int, p VXLANPeer) *netlink.Neigh {
	return &netlink.Neigh{
		LinkIndex: ifindex, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
		State: netlink.NUD_PERMANENT, IP: p.ParentIP.AsSlice(), HardwareAddr: p.MAC,
	}
}

// deviceNeighbours lists a VXLAN device's neighbours of both families
// (IPv6 on a node with IPv6): whichever family the device tunnels, dpd's
// entries of the other do not belong there.
func (c *Configurer) deviceNeighbours(ifindex int) ([]netlink.Neigh, error) {
	out, err := c.neighboursOn(netlink.FAMILY_V4, ifindex)
	if err != nil || !c.ipv6 {
		return out, err
	}
	v6, err := c.neighboursOn(netlink.FAMILY_V6, ifindex)
	if err != nil {
		return nil, err
	}
	return append(out, v6...), nil
}

func arpEntry(ifindex int, p VXLANPeer) *netlink.Neigh {
	return &netlink.Neigh{
		LinkIndex: ifindex, Family: addrFamily(p.TunnelIP), State: netlink.NUD_PERMANENT,
		Type: unix.RTN_UNICAST, IP: p.TunnelIP.AsSlice(), HardwareAddr: p.MAC,
	}
}

// SetVXLANPeer adds or replaces one peer's FDB and neighbour entries: the
// incremental form of SyncVXLANPeers for a single VTEP update.
func (c *Configurer) SetVXLANPeer(ifindex int, p VXLANPeer) error {
	if err := c.h.NeighSet(fdbEntry(ifindex, p)); err != nil {
		return fmt.Errorf("set fdb %s -> %s: %w", p.MAC, p.ParentIP, noLink(err))
	}
	if err := c.h.NeighSet(arpEntry(ifindex, p)); err != nil {
		return fmt.Errorf("set neighbour %s -> %s: %w", p.TunnelIP, p.MAC, noLink(err))
	}
	c.stats.neighSet.Add(2)
	return nil
}

// DeleteVXLANPeer removes one peer's entries; absent ones are fine.
func (c *Configurer) DeleteVXLANPeer(ifindex int, p VXLANPeer) error {
	return errors.Join(c.deleteNeighbour(arpEntry(ifindex, p)), c.deleteNeighbour(fdbEntry(ifindex, p)))
}
