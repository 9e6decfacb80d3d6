package engine

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// DefaultInterfaceExclude is Felix's default InterfaceExclude: kube-proxy's
// IPVS dummy device carries every service address and is no data path.
const DefaultInterfaceExclude = "kube-ipvs0"

// Interfaces host endpoints never bind besides the excluded ones: the
// loopback and dpd's own VXLAN devices (tunnel traffic is policed as it
// enters and leaves the node's data interfaces and its workloads).
var hostNeverBind = []string{"lo", "vxlan.calico", "vxlan-v6.calico"}

// defaultInterfacePrefix is Felix's InterfacePrefix default, for a
// ConfigUpdate without one.
var defaultInterfacePrefix = []string{"cali"}

// ifaceMatcher is Felix's InterfaceExclude: comma-separated interface
// names, or regular expressions between slashes ("/^veth.*/").
type ifaceMatcher struct {
	names []string
	res   []*regexp.Regexp
}

// parseIfaceMatcher parses an InterfaceExclude value.
func parseIfaceMatcher(s string) (ifaceMatcher, error) {
	var m ifaceMatcher
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
		case len(f) >= 2 && strings.HasPrefix(f, "/") && strings.HasSuffix(f, "/"):
			re, err := regexp.Compile(f[1 : len(f)-1])
			if err != nil {
				return ifaceMatcher{}, fmt.Errorf("interface exclude %q: %w", f, err)
			}
			m.res = append(m.res, re)
		default:
			m.names = append(m.names, f)
		}
	}
	return m, nil
}

func (m ifaceMatcher) match(name string) bool {
	if slices.Contains(m.names, name) {
		return true
	}
	for _, re := range m.res {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// hostIfaceExcluded says why host endpoints never bind iface ("": they may).
func (e *Engine) hostIfaceExcluded(iface string) string {
	if slices.Contains(hostNeverBind, iface) {
		return "loopback or tunnel device"
	}
	prefixes := e.cfg.interfacePrefix
	if len(prefixes) == 0 {
		prefixes = defaultInterfacePrefix
	}
	for _, p := range prefixes {
		if strings.HasPrefix(iface, p) {
			return "workload interface"
		}
	}
	if e.cfg.interfaceExclude.match(iface) {
		return "excluded by InterfaceExclude"
	}
	return ""
}

// bindHostEndpoints decides which host endpoint holds each of the node's
// interfaces, as Felix does: an endpoint naming an interface holds it;
// an endpoint without a name holds the interfaces carrying one of its
// expected addresses (unless named by another); the wildcard "*" holds
// every other interface. Where several endpoints compete at one level,
// the lowest id wins. Excluded interfaces are never bound. It returns the
// binding and, per endpoint, the excluded interfaces it named.
func (e *Engine) bindHostEndpoints() (bind map[string]string, excluded map[string]string) {
	m := &e.heps
	bind = map[string]string{}
	excluded = map[string]string{}
	ids := m.sortedIDs(false)
	take := func(iface, id string) {
		if _, taken := bind[iface]; !taken {
			bind[iface] = id
		}
	}
	for _, id := range ids {
		name := m.eps[id].spec.Iface
		if name == "" || name == "*" {
			continue
		}
		if why := e.hostIfaceExcluded(name); why != "" {
			excluded[id] = "interface " + name + ": " + why
			continue
		}
		if _, ok := m.links[name]; ok {
			take(name, id)
		}
	}
	links := make([]string, 0, len(m.links))
	for name := range m.links {
		if e.hostIfaceExcluded(name) == "" {
			links = append(links, name)
		}
	}
	sort.Strings(links)
	for _, id := range ids {
		sp := m.eps[id].spec
		if sp.Iface != "" || len(sp.ExpectedIPv4)+len(sp.ExpectedIPv6) == 0 {
			continue
		}
		for _, name := range links {
			if carriesAny(m.links[name].Addrs, sp.ExpectedIPv4, sp.ExpectedIPv6) {
				take(name, id)
			}
		}
	}
	for _, id := range ids {
		if m.eps[id].spec.Iface != "*" {
			continue
		}
		for _, name := range links {
			take(name, id)
		}
		break // the lowest id's wildcard takes them all
	}
	return bind, excluded
}

func carriesAny(addrs []netip.Addr, want ...[]netip.Addr) bool {
	for _, l := range want {
		for _, a := range l {
			if slices.Contains(addrs, a) {
				return true
			}
		}
	}
	return false
}
