package bench

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// P7's workloads are pods wired as Calico's CNI plugin wires them: a
// namespace of their own whose eth0 holds the pod's /32 addresses and a
// default route via 169.254.1.1, and a veth whose host side is in the node
// namespace. Two pairs of pods: one on "cali" host sides that dpd programs,
// one on host sides dpd does not watch, routed by plain kernel routes (and
// policed by nftables in the nftables cases).

// pod is one P7 workload.
type pod struct {
	ns     string // named network namespace
	handle netns.NsHandle
	host   string // host-side interface, in the node namespace
	mac    net.HardwareAddr
	addrs  []netip.Addr // the first is its primary address
}

// gatewayIP is the next hop every Calico pod routes through: no interface
// owns it; the host side answers its ARP by proxy.
var gatewayIP = net.IPv4(169, 254, 1, 1)

// newPod creates the namespace, the veth (host side in the node namespace,
// up) and the pod's addresses and routes. The host side gets no route,
// neighbour or sysctl: that is dpd's job, or plainRoutes'.
func (n *node) newPod(name, host string, mac net.HardwareAddr, addrs []netip.Addr) (*pod, error) {
	p := &pod{ns: name, host: host, mac: mac, addrs: addrs}
	err := inThread(func() error {
		var err error
		p.handle, err = netns.NewNamed(name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", name, err)
	}
	if err := n.wirePod(p); err != nil {
		return nil, errors.Join(fmt.Errorf("pod %s: %w", name, err), p.close())
	}
	return p, nil
}

func (n *node) wirePod(p *pod) error {
	attrs := netlink.NewLinkAttrs()
	attrs.Name = p.host
	v := &netlink.Veth{LinkAttrs: attrs, PeerName: "eth0", PeerHardwareAddr: p.mac, PeerNamespace: netlink.NsFd(int(p.handle))}
	if err := n.nl.LinkAdd(v); err != nil {
		return fmt.Errorf("add veth %s: %w", p.host, err)
	}
	h, err := netlink.NewHandleAt(p.handle)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	for _, name := range []string{"lo", "eth0"} {
		l, err := h.LinkByName(name)
		if err == nil {
			err = h.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("set %s up: %w", name, err)
		}
	}
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	for _, a := range p.addrs {
		ipn := &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}
		if err := h.AddrAdd(eth0, &netlink.Addr{IPNet: ipn}); err != nil {
			return fmt.Errorf("add address %s: %w", a, err)
		}
	}
	gw := &netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: &net.IPNet{IP: gatewayIP, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK}
	if err := h.RouteAdd(gw); err != nil {
		return fmt.Errorf("route to the gateway: %w", err)
	}
	def := &netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gatewayIP, Src: p.addrs[0].AsSlice()}
	if err := h.RouteAdd(def); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	if err := p.do(disableIPv6); err != nil {
		return err
	}
	hostLink, err := n.nl.LinkByName(p.host)
	if err == nil {
		err = n.nl.LinkSetUp(hostLink)
	}
	if err != nil {
		return fmt.Errorf("set %s up: %w", p.host, err)
	}
	return nil
}

// plainRoutes programs the node side of a pod the way dpd does, without
// any BPF: the sysctls dpd writes on a workload's host side, a route and a
// permanent neighbour entry per pod address.
func (n *node) plainRoutes(p *pod) error {
	err := n.do(func() error {
		for _, s := range []struct{ path, value string }{
			{"net/ipv4/ip_forward", "1"},
			{"net/ipv4/neigh/" + p.host + "/proxy_delay", "0"},
			{"net/ipv4/conf/" + p.host + "/proxy_arp", "1"},
			{"net/ipv4/conf/" + p.host + "/forwarding", "1"},
			{"net/ipv4/conf/" + p.host + "/rp_filter", "1"},
		} {
			if err := os.WriteFile(filepath.Join("/proc/sys", s.path), []byte(s.value), 0o644); err != nil {
				return fmt.Errorf("sysctl %s: %w", s.path, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	l, err := n.nl.LinkByName(p.host)
	if err != nil {
		return err
	}
	for _, a := range p.addrs {
		dst := &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}
		if err := n.nl.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK}); err != nil {
			return fmt.Errorf("route %s: %w", a, err)
		}
		neigh := &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT, IP: a.AsSlice(), HardwareAddr: p.mac}
		if err := n.nl.NeighSet(neigh); err != nil {
			return fmt.Errorf("neighbour %s: %w", a, err)
		}
	}
	return nil
}

// do runs fn on a thread inside the pod's namespace: sockets fn creates
// belong to the pod.
func (p *pod) do(fn func() error) error {
	return inThread(func() error {
		if err := netns.Set(p.handle); err != nil {
			return fmt.Errorf("enter namespace %s: %w", p.ns, err)
		}
		return fn()
	})
}

// close deletes the pod's namespace; its veth goes with it.
func (p *pod) close() error {
	if p.handle.IsOpen() {
		_ = p.handle.Close()
	}
	if err := netns.DeleteNamed(p.ns); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete namespace %s: %w", p.ns, err)
	}
	return nil
}

// uplinkName is the device P7 routes the node's default through when the
// node namespace has no default route: one end of a veth pair whose other
// end is left alone (kernels without the dummy driver have veths).
const uplinkName = "p7uplink"

// ensureUplink gives a node namespace without a default route one, through
// a device of its own, as a real node has through its eth0: proxy ARP answers
// for 169.254.1.1 only when the node routes it out of another interface.
// It reports whether it made the device (for removeUplink).
func (n *node) ensureUplink() (bool, error) {
	if _, err := n.nl.RouteGet(gatewayIP); err == nil {
		return false, nil
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name = uplinkName
	attrs.Flags = net.FlagUp
	if err := n.nl.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: uplinkName + "p"}); err != nil {
		return false, fmt.Errorf("add %s: %w", uplinkName, err)
	}
	l, err := n.nl.LinkByName(uplinkName)
	if err == nil {
		err = n.nl.LinkSetUp(l)
	}
	if err == nil {
		err = n.nl.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Scope: netlink.SCOPE_LINK,
			Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}})
	}
	if err != nil {
		return true, fmt.Errorf("default route via %s: %w", uplinkName, err)
	}
	return true, nil
}

func (n *node) removeUplink() error {
	l, err := n.nl.LinkByName(uplinkName)
	if err != nil {
		return nil // gone already
	}
	if err := n.nl.LinkDel(l); err != nil {
		return fmt.Errorf("delete %s: %w", uplinkName, err)
	}
	return nil
}
