package linux

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// ConfigUpdate keys of the failsafe ports, Felix's, with Felix's defaults.
const (
	ConfigFailsafeInbound  = "FailsafeInboundHostPorts"
	ConfigFailsafeOutbound = "FailsafeOutboundHostPorts"

	ConfigEndpointToHost    = "DefaultEndpointToHostAction"
	DefaultFailsafeInbound  = "tcp:22,udp:68,tcp:179,tcp:2379,tcp:2380,tcp:5473,tcp:6443,tcp:6666,tcp:6667"
	DefaultFailsafeOutbound = "udp:53,udp:67,tcp:179,tcp:2379,tcp:2380,tcp:5473,tcp:6443,tcp:6666,tcp:6667"
)

// ParseFailsafes reads a Felix failsafe port list: comma-separated
// "proto:cidr:port", "proto:port" or "port" (TCP), IPv6 nets in brackets
// ("tcp:[fd00::/8]:22"; an address alone is a host net), or "none". An
// entry without a net is any peer of either family, so it becomes one
// failsafe per family, as Felix programs it into both.
func ParseFailsafes(s string, inbound bool) ([]tcbpf.Failsafe, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "none") {
		return nil, nil
	}
	var out []tcbpf.Failsafe
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		fs, err := parseFailsafe(f, inbound)
		if err != nil {
			return nil, fmt.Errorf("failsafe %q: %w", f, err)
		}
		out = append(out, fs...)
	}
	return out, nil
}

// parseFailsafe reads one entry of a failsafe list.
func parseFailsafe(f string, inbound bool) ([]tcbpf.Failsafe, error) {
	rest, cidr := f, ""
	if i := strings.Index(f, "["); i >= 0 {
		j := strings.Index(f, "]:")
		if j < i {
			return nil, fmt.Errorf("want [net]:port")
		}
		cidr, rest = f[i+1:j], f[:i]+f[j+2:]
	}
	proto, port := "tcp", rest
	switch parts := strings.Split(rest, ":"); len(parts) {
	case 1:
	case 2:
		proto, port = parts[0], parts[1]
	case 3:
		if cidr != "" {
			return nil, fmt.Errorf("two nets")
		}
		proto, cidr, port = parts[0], parts[1], parts[2]
	default:
		return nil, fmt.Errorf("want proto:net:port, proto:port or port")
	}
	fs := tcbpf.Failsafe{Inbound: inbound}
	switch strings.ToLower(proto) {
	case "tcp":
		fs.Proto = 6
	case "udp":
		fs.Proto = 17
	case "sctp":
		fs.Proto = protoSCTP
	default:
		return nil, fmt.Errorf("protocol %q is not tcp, udp or sctp", proto)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", port, err)
	}
	fs.Port = uint16(n)
	if cidr == "" {
		v6 := fs
		fs.Net = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		v6.Net = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		return []tcbpf.Failsafe{fs, v6}, nil
	}
	p, err := parsePrefixOrAddr(cidr)
	if err != nil {
		return nil, err
	}
	if p.Addr().Is4In6() {
		return nil, fmt.Errorf("net %v: an IPv4-mapped IPv6 net; write it as IPv4", p)
	}
	fs.Net = p
	return []tcbpf.Failsafe{fs}, nil
}

func parsePrefixOrAddr(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// protoSCTP is SCTP's protocol number. Felix accepts SCTP failsafe
// ports; the host entry programs read no SCTP ports, so such an entry is
// parsed (the rest of its list stays valid) and left out of the maps.
const protoSCTP = 132

// enforcedFailsafes splits out the SCTP entries, which are not enforced.
func enforcedFailsafes(fs []tcbpf.Failsafe) (enforced []tcbpf.Failsafe, sctp int) {
	for _, f := range fs {
		if f.Proto == protoSCTP {
			sctp++
			continue
		}
		enforced = append(enforced, f)
	}
	return enforced, sctp
}

// failsafesFromConfig is the failsafe list cfg asks for (Felix's
// defaults for a key it does not carry).
func failsafesFromConfig(cfg map[string]string) ([]tcbpf.Failsafe, error) {
	var all []tcbpf.Failsafe
	for _, d := range []struct {
		key, def string
		inbound  bool
	}{{ConfigFailsafeInbound, DefaultFailsafeInbound, true}, {ConfigFailsafeOutbound, DefaultFailsafeOutbound, false}} {
		v, ok := cfg[d.key]
		if !ok {
			v = d.def
		}
		fs, err := ParseFailsafes(v, d.inbound)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.key, err)
		}
		all = append(all, fs...)
	}
	return all, nil
}

// configureFailsafesLocked writes DefaultEndpointToHostAction and the
// failsafes cfg asks for. An invalid
// list keeps the failsafes in force (the defaults, before any valid one):
// a typo must not open or close a node's control plane.
func (k *Kernel) configureFailsafesLocked(cfg map[string]string) {
	k.configureToHostLocked(cfg)
	fs, err := failsafesFromConfig(cfg)
	if err != nil {
		k.log.Warn("failsafe ports ignored; keeping the ones in force", "err", err)
		if k.failsafesSet {
			return
		}
		fs, _ = failsafesFromConfig(nil)
	}
	if k.eps.host == nil {
		return
	}
	fs, sctp := enforcedFailsafes(fs)
	if sctp > 0 {
		k.log.Warn("SCTP failsafe ports are not enforced: host interfaces read no SCTP ports, so SCTP stays under policy",
			"entries", sctp)
	}
	if err := k.eps.host.SetFailsafes(fs); err != nil {
		k.log.Warn("write failsafe ports", "err", err)
		return
	}
	k.failsafesSet = true
}

// toHostAction reads DefaultEndpointToHostAction: Drop (Felix's
// default, also when unset), Return or Accept.
func toHostAction(cfg map[string]string) (uint32, error) {
	switch v := strings.TrimSpace(cfg[ConfigEndpointToHost]); strings.ToLower(v) {
	case "", "drop":
		return abi.ToHostDrop, nil
	case "return":
		return abi.ToHostReturn, nil
	case "accept":
		return abi.ToHostAccept, nil
	default:
		return 0, fmt.Errorf("%s %q: want Drop, Return or Accept", ConfigEndpointToHost, v)
	}
}

// configureToHostLocked writes DefaultEndpointToHostAction; an invalid
// value keeps the one in force.
func (k *Kernel) configureToHostLocked(cfg map[string]string) {
	a, err := toHostAction(cfg)
	if err != nil {
		k.log.Warn("ignored; keeping the action in force", "err", err)
		return
	}
	if k.eps.host == nil {
		return
	}
	if err := k.eps.writeToHost(a, k.eps.toHost.named); err != nil {
		k.log.Warn("write DefaultEndpointToHostAction", "err", err)
	}
}

// WatchHostLinks implements engine.HostEndpointKernel: every interface
// but the workload ones, with its addresses.
func (k *Kernel) WatchHostLinks(ctx context.Context, report func(model.HostLinkUpdate)) error {
	return nl.WatchHostLinks(ctx, nl.HostLinkOptions{Skip: k.links.Matches}, report)
}
