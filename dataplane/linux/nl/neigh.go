package nl

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	vnl "github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// neighboursOn lists the neighbours of family (FAMILY_ALL: IPv4 and IPv6)
// on ifindex, filtered by the
// kernel: the interface goes in an NDA_IFINDEX attribute, which the kernel
// honours, where the library's NeighList puts it in the header, which the
// kernel ignores, so the whole table is sent for the library to filter:
// O(endpoints) per endpoint. The kernel still walks its table but
// serialises only this interface's entries (BenchmarkNeighbourDump). The
// results are filtered here too, for kernels without the filter.
func (c *Configurer) neighboursOn(family, ifindex int) ([]netlink.Neigh, error) {
	ns, err := retryDump(func() ([]netlink.Neigh, error) {
		c.stats.neighDumps.Add(1)
		return c.dumpNeighbours(family, ifindex)
	})
	if err != nil {
		return nil, fmt.Errorf("list neighbours: %w", err)
	}
	return ns, nil
}

// dumpNeighbours makes one RTM_GETNEIGH dump of ifindex's entries of family.
func (c *Configurer) dumpNeighbours(family, ifindex int) ([]netlink.Neigh, error) {
	req := &vnl.NetlinkRequest{
		NlMsghdr: unix.NlMsghdr{
			Len:   unix.SizeofNlMsghdr,
			Type:  unix.RTM_GETNEIGH,
			Flags: unix.NLM_F_REQUEST | unix.NLM_F_DUMP,
		},
		Sockets: c.neighDumps,
	}
	// Strict mode wants ndm_ifindex 0 and the filter as an attribute.
	req.AddData(&netlink.Ndmsg{Family: uint8(family)})
	req.AddData(vnl.NewRtAttr(unix.NDA_IFINDEX, vnl.Uint32Attr(uint32(ifindex))))
	var out []netlink.Neigh
	err := req.ExecuteIter(unix.NETLINK_ROUTE, unix.RTM_NEWNEIGH, func(m []byte) bool {
		n, err := netlink.NeighDeserialize(m)
		if err == nil && n.LinkIndex == ifindex && (n.Family == family ||
			(family == netlink.FAMILY_ALL && (n.Family == netlink.FAMILY_V4 || n.Family == netlink.FAMILY_V6))) {
			out = append(out, *n)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func isPermanent(n *netlink.Neigh) bool { return n.State&netlink.NUD_PERMANENT != 0 }

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// hostAddrs returns the single addresses among nets; wider prefixes have no
// one neighbour to pin.
func hostAddrs(nets []netip.Prefix) map[netip.Addr]bool {
	out := make(map[netip.Addr]bool, len(nets))
	for _, p := range nets {
		if p.IsSingleIP() {
			out[p.Addr()] = true
		}
	}
	return out
}

// syncNeighboursIn makes the permanent neighbours on ifindex of nets'
// family exactly the workload's host addresses -> mac (none when mac is
// unknown), given have, that family's neighbours on ifindex as dumped.
func (c *Configurer) syncNeighboursIn(have []netlink.Neigh, ifindex int, mac net.HardwareAddr, nets []netip.Prefix) error {
	want := map[netip.Addr]bool{}
	if len(mac) > 0 {
		want = hostAddrs(nets)
	}
	var errs []error
	done := make(map[netip.Addr]bool, len(want))
	for i := range have {
		n := &have[i]
		a := addrOf(n.IP)
		switch {
		case want[a]:
			if isPermanent(n) && bytes.Equal(n.HardwareAddr, mac) {
				done[a] = true
			}
		case isPermanent(n):
			// A pin for an address the endpoint no longer has.
			if err := c.deleteNeighbour(n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for a := range want {
		if !done[a] {
			errs = append(errs, c.setNeighbour(addrFamily(a), ifindex, mac, a))
		}
	}
	return errors.Join(errs...)
}

// neighboursOfFamily keeps the neighbours of family.
func neighboursOfFamily(ns []netlink.Neigh, family int) []netlink.Neigh {
	return keepFamily(ns, family, func(n netlink.Neigh) int { return n.Family })
}

// setNeighbours pins every host address of nets (all of family) to mac on
// ifindex without looking at what is there.
func (c *Configurer) setNeighbours(family, ifindex int, mac net.HardwareAddr, nets []netip.Prefix) error {
	var errs []error
	for a := range hostAddrs(nets) {
		errs = append(errs, c.setNeighbour(family, ifindex, mac, a))
	}
	return errors.Join(errs...)
}

func (c *Configurer) setNeighbour(family, ifindex int, mac net.HardwareAddr, a netip.Addr) error {
	n := &netlink.Neigh{
		LinkIndex:    ifindex,
		Family:       family,
		State:        netlink.NUD_PERMANENT,
		Type:         unix.RTN_UNICAST,
		IP:           a.AsSlice(),
		HardwareAddr: mac,
	}
	if err := c.h.NeighSet(n); err != nil {
		return fmt.Errorf("set neighbour %s: %w", a, noLink(err))
	}
	c.stats.neighSet.Add(1)
	return nil
}

// removeNeighbours deletes the permanent neighbours of nets' addresses (all
// of family) on ifindex.
func (c *Configurer) removeNeighbours(family, ifindex int, nets []netip.Prefix) error {
	addrs := hostAddrs(nets)
	if len(addrs) == 0 {
		return nil
	}
	have, err := c.neighboursOn(family, ifindex)
	if err != nil {
		return err
	}
	var errs []error
	for i := range have {
		if n := &have[i]; isPermanent(n) && addrs[addrOf(n.IP)] {
			if err := c.deleteNeighbour(n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (c *Configurer) deleteNeighbour(n *netlink.Neigh) error {
	err := c.h.NeighDel(n)
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENODEV) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete neighbour %s: %w", n.IP, err)
	}
	c.stats.neighDeleted.Add(1)
	return nil
}
