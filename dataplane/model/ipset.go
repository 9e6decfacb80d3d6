package model

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// IPSetType mirrors felix.IPSetUpdate.IPSetType.
type IPSetType uint8

const (
	IPSetIP        IPSetType = 0 // members are addresses
	IPSetIPAndPort IPSetType = 1 // members are "addr,proto:port"
	IPSetNet       IPSetType = 2 // members are CIDRs
)

// Check reports why m cannot be a member of a set of type t: an IP set
// holds single addresses, a net set prefixes, an IP-and-port set
// addresses with a protocol and port. A delta names no type, so its
// members are checked against the set's.
func (t IPSetType) Check(m IPSetMember) error {
	hasPort := m.Proto != 0
	switch t {
	case IPSetIP:
		if hasPort {
			return fmt.Errorf("%v,%d:%d has a port; the set holds addresses", m.Prefix.Addr(), m.Proto, m.Port)
		}
		if !m.Prefix.IsSingleIP() {
			return fmt.Errorf("%v is a network, not an address", m.Prefix)
		}
	case IPSetNet:
		if hasPort {
			return fmt.Errorf("%v,%d:%d has a port; the set holds networks", m.Prefix.Addr(), m.Proto, m.Port)
		}
	case IPSetIPAndPort:
		if !hasPort {
			return fmt.Errorf("%v has no protocol and port; the set holds addr,proto:port", m.Prefix)
		}
	default:
		return fmt.Errorf("unknown ip set type %d", t)
	}
	return nil
}

// IPSetMember is one parsed member. Addresses are full-length prefixes;
// Proto and Port are set only for IPSetIPAndPort.
type IPSetMember struct {
	Prefix netip.Prefix
	Proto  uint8
	Port   uint16
}

// Compare orders members by address, then prefix length, then protocol,
// then port, returning -1, 0 or +1. Every listing of members (kernel
// writes, inspection, fakes) uses this one order so they can be compared.
func (m IPSetMember) Compare(o IPSetMember) int {
	if c := m.Prefix.Addr().Compare(o.Prefix.Addr()); c != 0 {
		return c
	}
	if c := cmp.Compare(m.Prefix.Bits(), o.Prefix.Bits()); c != 0 {
		return c
	}
	if c := cmp.Compare(m.Proto, o.Proto); c != 0 {
		return c
	}
	return cmp.Compare(m.Port, o.Port)
}

// Less reports whether m sorts before o in Compare order.
func (m IPSetMember) Less(o IPSetMember) bool { return m.Compare(o) < 0 }

// SortMembers sorts ms in Compare order.
func SortMembers(ms []IPSetMember) { slices.SortFunc(ms, IPSetMember.Compare) }

// SortedMembers returns the members of a set, in Compare order.
func SortedMembers(set map[IPSetMember]struct{}) []IPSetMember {
	out := make([]IPSetMember, 0, len(set))
	for m := range set {
		out = append(out, m)
	}
	SortMembers(out)
	return out
}
