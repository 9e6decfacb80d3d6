package nl

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// sysctl is one /proc/sys setting, path relative to the sysctl root.
type sysctl struct {
	path, value string
	// bestEffort settings may be missing (IPv6 disabled, old kernels); Felix
	// only warns about them too.
	bestEffort bool
}

// endpointSysctls are what a routed workload's host-side interface needs, as
// Felix's endpoint manager writes them (configureInterface):
//   - proxy_arp=1: the workload's default route is via 169.254.1.1, which no
//     host interface owns; the host answers its ARP with the veth's MAC.
//   - proxy_delay=0: answer proxy ARP at once, not after up to 0.8 s.
//   - forwarding=1: forward packets arriving from the workload.
//   - rp_filter: strict (1) unless configured otherwise. Felix writes the
//     host's default here and adds an iptables rpfilter drop for workloads
//     when WorkloadSourceSpoofing is off; dpd has no iptables, so strict
//     kernel RPF is what stops a workload from spoofing source addresses.
//   - IPv6 accept_ra=0: Felix disables router advertisements from workloads
//     even without IPv6 support, so a workload cannot inject host routes.
//
// With IPv6 (the node has it and the endpoint has an IPv6 net), as Felix's
// IPv6 endpoint manager and Calico's CNI plugin write them:
//   - IPv6 forwarding=1 and proxy_ndp=1 (Felix; the kernel answers
//     solicitations for proxied addresses only, dpd adds none: the
//     workload's gateway is the interface's own link-local address).
//   - IPv6 disable_ipv6=0 (the CNI plugin): without it the interface has no
//     link-local address, and the workload's default route is via it
//     (fe80::ecee:eeff:feee:eeee, from the host side's MAC
//     ee:ee:ee:ee:ee:ee, see WorkloadGatewayV6). Written last, after
//     accept_ra=0, so the interface never listens to a workload's router
//     advertisement.
//
// Felix's route_localnet=1 is left out on purpose: it only serves NAT to
// 127.0.0.1, which dpd does not do, and it widens what a workload can reach.
func endpointSysctls(iface, rpFilter string, ipv6 bool) []sysctl {
	list := []sysctl{
		{path: "net/ipv6/conf/" + iface + "/accept_ra", value: "0", bestEffort: !ipv6},
		{path: "net/ipv4/neigh/" + iface + "/proxy_delay", value: "0", bestEffort: true},
		{path: "net/ipv4/conf/" + iface + "/proxy_arp", value: "1"},
		{path: "net/ipv4/conf/" + iface + "/forwarding", value: "1"},
		{path: "net/ipv4/conf/" + iface + "/rp_filter", value: rpFilter},
	}
	if ipv6 {
		list = append(list,
			sysctl{path: "net/ipv6/conf/" + iface + "/forwarding", value: "1"},
			sysctl{path: "net/ipv6/conf/" + iface + "/proxy_ndp", value: "1"},
			sysctl{path: "net/ipv6/conf/" + iface + "/disable_ipv6", value: "0"},
		)
	}
	return list
}

// hostSysctls are written once at start. With IPv6, the node must forward
// IPv6 too: only net.ipv6.conf.all.forwarding makes the kernel forward
// (the per-interface flag sets host/router behaviour). It also makes the
// kernel ignore router advertisements on interfaces with accept_ra=1; an
// uplink configured by SLAAC needs accept_ra=2, as on any IPv6 router.
func hostSysctls(ipv6 bool) []sysctl {
	list := []sysctl{{path: "net/ipv4/ip_forward", value: "1"}}
	if ipv6 {
		list = append(list, sysctl{path: "net/ipv6/conf/all/forwarding", value: "1"})
	}
	return list
}

// ensureSysctls applies each setting that differs from the kernel's value.
func (c *Configurer) ensureSysctls(list []sysctl) error { return c.applySysctls(list, c.ensureSysctl) }

// applySysctls runs set on each setting; a best-effort one may fail.
func (c *Configurer) applySysctls(list []sysctl, set func(rel, value string) error) error {
	for _, s := range list {
		err := set(s.path, s.value)
		if err == nil {
			continue
		}
		if s.bestEffort {
			c.log.Debug("optional sysctl not applied", "path", s.path, "err", err)
			continue
		}
		return err
	}
	return nil
}

// ensureSysctl reads the setting and writes value only when it differs, so
// a steady-state resync makes no writes.
func (c *Configurer) ensureSysctl(rel, value string) error {
	p := filepath.Join(c.procSys, rel)
	c.stats.sysctlReads.Add(1)
	cur, err := readProcSys(p)
	if err != nil {
		return fmt.Errorf("read sysctl %s: %w", rel, err)
	}
	if strings.TrimSpace(cur) == value {
		return nil
	}
	return c.writeSysctl(rel, value)
}

// writeSysctls writes every setting without reading it first: for an
// interface that has just appeared, whose settings are the defaults.
func (c *Configurer) writeSysctls(list []sysctl) error { return c.applySysctls(list, c.writeSysctl) }

func (c *Configurer) writeSysctl(rel, value string) error {
	if err := writeProcSys(filepath.Join(c.procSys, rel), value); err != nil {
		return fmt.Errorf("write sysctl %s=%s: %w", rel, value, err)
	}
	c.stats.sysctlWrites.Add(1)
	return nil
}

// readProcSys reads a small /proc/sys file with plain syscalls: os.ReadFile
// adds a stat and a poller registration attempt, half again the cost of
// what is the bulk of a steady-state endpoint check.
func readProcSys(path string) (string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer func() { _ = unix.Close(fd) }() // read-only: nothing to lose
	var buf [64]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil {
		return "", &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return string(buf[:max(n, 0)]), nil
}

// writeProcSys writes without O_CREAT or O_TRUNC: /proc/sys files exist or
// the setting does not.
func writeProcSys(path, value string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	n, err := unix.Write(fd, []byte(value))
	if err == nil && n < len(value) {
		err = io.ErrShortWrite
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return &fs.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// isNotExist reports whether a sysctl error means the interface is gone.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
