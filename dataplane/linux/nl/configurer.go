package nl

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	vnl "github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks every route dpd creates (0xdd = 221; see the package
// doc for why not Calico's 0x50).
const RouteProtocol netlink.RouteProtocol = 0xdd

// DefaultRPFilter is the rp_filter value for workload interfaces: strict.
const DefaultRPFilter = "1"

// ErrNoLink means the interface does not exist (or vanished mid-call). The
// caller records the endpoint and retries when the monitor reports the link.
var ErrNoLink = errors.New("link not found")

// Config configures a Configurer. Zero values take the defaults.
type Config struct {
	// RouteProtocol marks dpd's routes; default RouteProtocol.
	RouteProtocol netlink.RouteProtocol
	// RPFilter is written to net/ipv4/conf/<iface>/rp_filter; default "1".
	// "0" suits endpoints allowed to spoof sources, or a BPF program that
	// does RPF itself (Felix's BPF mode writes 0).
	RPFilter string
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Configurer programs host and per-endpoint kernel state. Its methods read
// the kernel, compare with what is desired and write only the difference;
// they hold no cache, so every call also repairs drift. The exception is
// ConfigureNewEndpoint, which only writes, for interfaces that have just
// appeared. Safe for concurrent use, though the engine calls it from one
// goroutine.
type Configurer struct {
	h *netlink.Handle
	// dumps serves route listings only. It sets NETLINK_GET_STRICT_CHK, so
	// the kernel filters dumps by interface, table and protocol instead of
	// sending the whole table (measured in BenchmarkRouteDump).
	dumps *netlink.Handle
	// neighDumps serves neighbour listings: the library's NeighList puts
	// the ifindex in the header, which the kernel ignores (and strict mode
	// rejects), so neighboursOn builds its own request; see neigh.go.
	neighDumps map[int]*vnl.SocketHandle
	proto      netlink.RouteProtocol
	rpFilter   string
	procSys    string // sysctl root, "/proc/sys"; tests point it elsewhere
	// ipv6: the node has IPv6 (IPv6State at construction), so endpoints'
	// IPv6 nets are programmed; false on an IPv4-only node.
	ipv6  bool
	log   *slog.Logger
	stats counters
}

// NewConfigurer opens the Configurer's persistent netlink handles.
func NewConfigurer(cfg Config) (*Configurer, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink handle: %w", err)
	}
	dumps, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("open netlink dump handle: %w", err)
	}
	// Same namespace as the handles: the calling thread's.
	ns, err := vnl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		h.Close()
		dumps.Close()
		return nil, fmt.Errorf("open netlink neighbour dump socket: %w", err)
	}
	c := &Configurer{
		h:          h,
		dumps:      dumps,
		neighDumps: map[int]*vnl.SocketHandle{unix.NETLINK_ROUTE: {Socket: ns}},
		proto:      cfg.RouteProtocol,
		rpFilter:   cfg.RPFilter,
		procSys:    "/proc/sys",
		log:        cfg.Logger,
	}
	if c.proto == 0 {
		c.proto = RouteProtocol
	}
	if c.rpFilter == "" {
		c.rpFilter = DefaultRPFilter
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.ipv6, _, _ = c.IPv6State() // an unreadable state is "off"; New logs why
	if err := dumps.SetStrictCheck(true); err != nil {
		// Kernels before 4.20: dumps are filtered in user space instead.
		c.log.Debug("netlink strict check unavailable", "err", err)
	}
	if err := unix.SetsockoptInt(ns.GetFd(), unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 1); err != nil {
		c.log.Debug("netlink strict check unavailable for neighbour dumps", "err", err)
	}
	return c, nil
}

// Close releases the netlink handles.
func (c *Configurer) Close() error {
	c.h.Close()
	c.dumps.Close()
	for _, sh := range c.neighDumps {
		sh.Close()
	}
	return nil
}

// RouteProtocol returns the protocol that marks this Configurer's routes.
func (c *Configurer) RouteProtocol() netlink.RouteProtocol { return c.proto }

// Stats returns a snapshot of the kernel operation counters.
func (c *Configurer) Stats() Stats { return c.stats.snapshot() }

// IPv6 reports whether this Configurer programs IPv6: the node had IPv6
// when it was created.
func (c *Configurer) IPv6() bool { return c.ipv6 }

// ConfigureHost applies the static host settings dpd needs once at start:
// net.ipv4.ip_forward=1, and net.ipv6.conf.all.forwarding=1 when the node
// has IPv6 (each written only if not already set).
func (c *Configurer) ConfigureHost() error {
	if err := c.ensureSysctls(hostSysctls(c.ipv6)); err != nil {
		return fmt.Errorf("configure host: %w", err)
	}
	return nil
}

// validIfaceName rejects names that could escape the sysctl tree.
func validIfaceName(name string) error {
	if name == "" || len(name) > unix.IFNAMSIZ-1 || name == "." || name == ".." ||
		strings.ContainsAny(name, "/ \x00") {
		return fmt.Errorf("invalid interface name %q", name)
	}
	return nil
}

// linkIndex resolves name to its ifindex, mapping "not found" to ErrNoLink.
func (c *Configurer) linkIndex(name string) (int, error) {
	l, err := c.h.LinkByName(name)
	if err != nil {
		if isLinkNotFound(err) {
			return 0, fmt.Errorf("%s: %w", name, ErrNoLink)
		}
		return 0, fmt.Errorf("look up %s: %w", name, err)
	}
	return l.Attrs().Index, nil
}

func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, syscall.ENODEV)
}

// noLink maps "the interface went away" errors to ErrNoLink, keeping err.
func noLink(err error) error {
	if err == nil || errors.Is(err, ErrNoLink) {
		return err
	}
	if isNotExist(err) || errors.Is(err, syscall.ENODEV) {
		return fmt.Errorf("%w: %w", ErrNoLink, err)
	}
	return err
}
