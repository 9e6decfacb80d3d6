package felixconv

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

var errEmpty = errors.New("empty")

// parseAddr parses an IPv4 or IPv6 address. Zones are refused: nothing in
// Felix's model is link-scoped, and a zone would silently never match.
func parseAddr(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, errEmpty
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, err
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("address %q has a zone", s)
	}
	return a, nil
}

// parsePrefix parses a CIDR, or a bare address as its full-length prefix
// (/32 or /128). The result is masked, so "10.1.2.3/8" is 10.0.0.0/8:
// kernels key LPM tries by the masked prefix.
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := parseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return p.Masked(), nil
}

// parseHostAddr accepts an address or "address/len" and returns the
// address: node addresses arrive in either form (the Node resource stores
// its BGP address as a CIDR).
func parseHostAddr(s string) (netip.Addr, error) {
	if addr, _, ok := strings.Cut(s, "/"); ok {
		if _, err := netip.ParsePrefix(s); err != nil {
			return netip.Addr{}, err
		}
		s = addr
	}
	return parseAddr(s)
}

// parseMAC parses a 48-bit Ethernet MAC; veths and VXLAN devices have
// nothing else.
func parseMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	if err != nil {
		return nil, err
	}
	if len(mac) != 6 {
		return nil, fmt.Errorf("mac %q is not 48-bit", s)
	}
	return mac, nil
}

func prefixList(field string, ss []string) ([]netip.Prefix, error) {
	if len(ss) == 0 {
		return nil, nil
	}
	out := make([]netip.Prefix, 0, len(ss))
	for i, s := range ss {
		p, err := parsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func addrList(field string, ss []string) ([]netip.Addr, error) {
	if len(ss) == 0 {
		return nil, nil
	}
	out := make([]netip.Addr, 0, len(ss))
	for i, s := range ss {
		a, err := parseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// optAddr parses s when it is non-empty; "" is the zero Addr.
func optAddr(field, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	a, err := parseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s: %w", field, err)
	}
	return a, nil
}

// nonEmpty checks that every string in ss is non-empty (IDs, names).
func nonEmpty(field string, ss []string) error {
	for i, s := range ss {
		if s == "" {
			return fmt.Errorf("%s[%d]: %w", field, i, errEmpty)
		}
	}
	return nil
}

// required reports an empty required field.
func required(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s: %w", field, errEmpty)
	}
	return nil
}
