package tcbpf

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// member is one set member as dpd_ipsets keys it, less the set id: 22
// bytes without pointers, so a set's members are one flat sorted slice
// (a map of keys cost ~70 bytes a member, and the GC scans it).
type member struct {
	addr   [16]byte // masked; an IPv4 address fills the first 4 bytes
	bits   uint8    // prefix length of addr
	family uint8    // 4 or 6
	proto  uint8
	port   uint16 // host order
}

// addrFamily is the key family of a: 4 or 6.
func addrFamily(a netip.Addr) uint8 {
	if a.Is4() {
		return 4
	}
	return 6
}

// compareAddr orders 16-byte addresses as big-endian numbers.
func compareAddr(a, b *[16]byte) int {
	if c := cmp.Compare(binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8])); c != 0 {
		return c
	}
	return cmp.Compare(binary.BigEndian.Uint64(a[8:]), binary.BigEndian.Uint64(b[8:]))
}

// compareMember orders by family, address, prefix length, protocol,
// port: the order of model.IPSetMember.Compare (IPv4 before IPv6), so the
// engine's sorted lists need no sorting here.
func compareMember(a, b member) int {
	if a.family != b.family {
		return cmp.Compare(a.family, b.family)
	}
	if c := compareAddr(&a.addr, &b.addr); c != 0 {
		return c
	}
	if a.bits != b.bits {
		return cmp.Compare(a.bits, b.bits)
	}
	if a.proto != b.proto {
		return cmp.Compare(a.proto, b.proto)
	}
	return cmp.Compare(a.port, b.port)
}

func toMember(m model.IPSetMember) (member, error) {
	if !m.Prefix.IsValid() {
		return member{}, fmt.Errorf("invalid member %v", m.Prefix)
	}
	p := m.Prefix.Masked()
	out := member{bits: uint8(p.Bits()), family: addrFamily(p.Addr()), proto: m.Proto, port: m.Port}
	if a := p.Addr(); a.Is4() {
		b := a.As4()
		copy(out.addr[:], b[:])
	} else {
		out.addr = a.As16()
	}
	return out, nil
}

// toMembers converts ms to a sorted slice without duplicates (members
// that differ only in masked-off bits are one key).
func toMembers(ms []model.IPSetMember) ([]member, error) {
	out := make([]member, len(ms))
	for i, m := range ms {
		k, err := toMember(m)
		if err != nil {
			return nil, err
		}
		out[i] = k
	}
	if !slices.IsSortedFunc(out, compareMember) {
		slices.SortFunc(out, compareMember)
	}
	return slices.Clip(slices.CompactFunc(out, func(a, b member) bool { return a == b })), nil
}

// key is the dpd_ipsets key of m in set id.
func (m member) key(id uint32) ipsetKey {
	return ipsetKey{Prefixlen: uint32(abi.IPSetKeyFixedBits) + uint32(m.bits), SetId: id,
		Proto: m.proto, Family: m.family, Port: htons(m.port), Addr: m.addr}
}

func keyMember(k ipsetKey) member {
	return member{addr: k.Addr, bits: uint8(k.Prefixlen - abi.IPSetKeyFixedBits), family: k.Family, proto: k.Proto, port: htons(k.Port)}
}

// memberKey builds the LPM key of a member of set id.
func memberKey(id uint32, m model.IPSetMember) (ipsetKey, error) {
	k, err := toMember(m)
	if err != nil {
		return ipsetKey{}, err
	}
	return k.key(id), nil
}
