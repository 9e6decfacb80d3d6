package bench

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// node is the network namespace the workload interfaces live in: one the
// driver made for its own daemon (so nothing else on the host, such as
// another dpd or a test suite's "cali" interfaces, sees them or is seen),
// or the namespace of an attached daemon.
type node struct {
	name   string         // named namespace; "" is the driver's own
	handle netns.NsHandle // the namespace
	nl     *netlink.Handle
	owned  bool // created by the driver: deleting it removes every veth in it

	batches []byte // batches of veths made by the driver and not yet deleted
}

// nodeIP is the node namespace's own address.
var nodeIP = net.IPv4(172, 31, 255, 1)

// nsPrefix names the driver's namespaces and pin directories; the pid
// after it tells a live driver's from a leftover.
const nsPrefix = "dpdbench-"

// newNode creates the named namespace "dpdbench-<pid>" with lo up and
// IPv6 off. dpd is IPv4-only (it drops IPv6 on workload interfaces), and
// with IPv6 on, every veth brought up makes the kernel walk the whole IPv6
// routing table (addrconf), a cost per veth that grows with their number
// and belongs to the harness, not to dpd.
func newNode() (*node, error) { return newNamedNode(nsPrefix + strconv.Itoa(os.Getpid())) }

// newNamedNode is newNode for a namespace of the given name.
func newNamedNode(name string) (*node, error) {
	var h netns.NsHandle
	err := inThread(func() error {
		var err error
		h, err = netns.NewNamed(name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", name, err)
	}
	n := &node{name: name, handle: h, owned: true}
	if n.nl, err = netlink.NewHandleAt(h); err != nil {
		_ = n.close()
		return nil, fmt.Errorf("netlink in %s: %w", name, err)
	}
	// The node's own address, on lo (the first device): without one, the
	// kernel picks the source of every workload route by walking all
	// devices for an address, a cost per route that grows with the veths
	// and that no real node, whose eth0 has an address, pays.
	lo, err := n.nl.LinkByName("lo")
	if err == nil {
		err = n.nl.LinkSetUp(lo)
	}
	if err == nil {
		err = n.nl.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: nodeIP, Mask: net.CIDRMask(32, 32)}})
	}
	if err != nil {
		_ = n.close()
		return nil, fmt.Errorf("set up lo in %s: %w", name, err)
	}
	if err := n.do(disableIPv6); err != nil {
		_ = n.close()
		return nil, err
	}
	return n, nil
}

// disableIPv6 turns IPv6 off for the calling thread's namespace (a kernel
// without IPv6 has nothing to turn off).
func disableIPv6() error {
	for _, c := range []string{"all", "default"} {
		p := "/proc/sys/net/ipv6/conf/" + c + "/disable_ipv6"
		if err := os.WriteFile(p, []byte("1"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("disable IPv6: %w", err)
		}
	}
	return nil
}

// openNode opens an existing named namespace, or the driver's own for "".
func openNode(name string) (*node, error) {
	var h netns.NsHandle
	var err error
	if name == "" {
		err = inThread(func() error {
			var gerr error
			h, gerr = netns.Get()
			return gerr
		})
	} else {
		h, err = netns.GetFromName(name)
	}
	if err != nil {
		return nil, fmt.Errorf("open namespace %q: %w", name, err)
	}
	n := &node{name: name, handle: h}
	if n.nl, err = netlink.NewHandleAt(h); err != nil {
		_ = n.close()
		return nil, fmt.Errorf("netlink in namespace %q: %w", name, err)
	}
	return n, nil
}

// inThread runs fn on a locked OS thread and returns the thread to the
// driver's namespace after. A thread that cannot go back stays locked, so
// the runtime retires it with the goroutine instead of reusing it.
func inThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("current namespace: %w", err)
			return
		}
		defer func() { _ = orig.Close() }()
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to the driver's namespace: %w", err))
			return // still locked: the thread exits with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// do runs fn with the calling OS thread inside the node's namespace (its
// sysctls and raw netlink requests; dpd enters it with nsenter).
func (n *node) do(fn func() error) error {
	return inThread(func() error {
		if err := netns.Set(n.handle); err != nil {
			return fmt.Errorf("enter namespace %s: %w", n.name, err)
		}
		return fn()
	})
}

// addVeth creates the pair of workload (batch, i), both ends up: the host
// side "cali…" that dpd programs and the workload side that stays in the
// node namespace.
func (n *node) addVeth(batch byte, i int) error {
	attrs := netlink.NewLinkAttrs()
	attrs.Name = ifaceName(batch, i)
	attrs.Flags = net.FlagUp
	attrs.Group = linkGroup(batch)
	v := &netlink.Veth{LinkAttrs: attrs, PeerName: peerName(batch, i), PeerHardwareAddr: peerMAC(batch, i)}
	if !slices.Contains(n.batches, batch) {
		n.batches = append(n.batches, batch)
	}
	if err := n.nl.LinkAdd(v); err != nil {
		return fmt.Errorf("add veth %s: %w", attrs.Name, err)
	}
	peer := netlink.NewLinkAttrs()
	peer.Name = v.PeerName
	if err := n.nl.LinkSetUp(&netlink.Veth{LinkAttrs: peer}); err != nil {
		return fmt.Errorf("set %s up: %w", peer.Name, err)
	}
	return nil
}

// linkGroup is the interface group of a batch's host sides, so that the
// batch can be deleted in one request.
func linkGroup(batch byte) uint32 { return 7000 + uint32(batch) }

// deleteBatch deletes every veth pair of batch with one RTM_DELLINK for
// its interface group: the kernel unregisters them together, in a fraction
// of the time one request per veth takes.
func (n *node) deleteBatch(batch byte) error {
	err := n.do(func() error {
		req := nl.NewNetlinkRequest(unix.RTM_DELLINK, unix.NLM_F_ACK)
		req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
		req.AddData(nl.NewRtAttr(unix.IFLA_GROUP, nl.Uint32Attr(linkGroup(batch))))
		_, err := req.Execute(unix.NETLINK_ROUTE, 0)
		return err
	})
	if err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete the veths of batch %c: %w", batch, err)
	}
	n.batches = slices.DeleteFunc(n.batches, func(b byte) bool { return b == batch })
	return nil
}

// close deletes what the driver made: the whole namespace when it owns
// it (the kernel then removes every veth in it), else its veths.
func (n *node) close() error {
	var errs []error
	if !n.owned && n.nl != nil {
		for _, b := range slices.Clone(n.batches) {
			errs = append(errs, n.deleteBatch(b))
		}
	}
	n.batches = nil
	if n.nl != nil {
		n.nl.Close()
		n.nl = nil
	}
	if n.handle.IsOpen() {
		_ = n.handle.Close()
	}
	if n.owned {
		if err := netns.DeleteNamed(n.name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("delete namespace %s: %w", n.name, err))
		}
		n.owned = false
	}
	return errors.Join(errs...)
}

// removeLeftovers deletes the namespaces and pin directories of drivers
// that are no longer running (killed before they could clean up).
func removeLeftovers(pinRoot string) []string {
	var removed []string
	dead := func(name string) bool {
		// "dpdbench-<pid>", or "dpdbench-<pid>-<what>" for P7's pods.
		id, _, _ := strings.Cut(strings.TrimPrefix(name, nsPrefix), "-")
		pid, err := strconv.Atoi(id)
		if err != nil || pid == os.Getpid() {
			return false
		}
		_, err = os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
		return errors.Is(err, os.ErrNotExist)
	}
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), nsPrefix) && dead(e.Name()) && netns.DeleteNamed(e.Name()) == nil {
				removed = append(removed, "namespace "+e.Name())
			}
		}
	}
	if ents, err := os.ReadDir(pinRoot); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), nsPrefix) && dead(e.Name()) && os.RemoveAll(filepath.Join(pinRoot, e.Name())) == nil {
				removed = append(removed, "pin directory "+filepath.Join(pinRoot, e.Name()))
			}
		}
	}
	return removed
}
