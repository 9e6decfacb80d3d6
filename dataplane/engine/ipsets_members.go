package engine

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/sorted"
)

// setMember is a model.IPSetMember in 24 bytes without pointers, so a
// set's members are one flat sorted slice the GC need not scan (a map of
// model.IPSetMember cost ~110 bytes a member, too much at 100k members). Address zones
// are not kept: the edge refuses them.
type setMember struct {
	hi, lo uint64 // the address, big-endian; an IPv4 address is lo's low 32 bits
	meta   uint64 // family<<40 | (prefix bits+1)<<24 | proto<<16 | port
}

// Address families in netip.Addr.Compare order.
const (
	famNone = 0
	famV4   = 1
	famV6   = 2
)

func toSetMember(m model.IPSetMember) setMember {
	var s setMember
	a := m.Prefix.Addr()
	fam := uint64(famNone)
	switch {
	case a.Is4():
		b := a.As4()
		s.lo, fam = uint64(binary.BigEndian.Uint32(b[:])), famV4
	case a.Is6():
		b := a.As16()
		s.hi, s.lo, fam = binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:]), famV6
	}
	// Bits is -1 for an invalid prefix: +1 keeps it apart from /0.
	s.meta = fam<<40 | uint64(m.Prefix.Bits()+1)<<24 | uint64(m.Proto)<<16 | uint64(m.Port)
	return s
}

func (s setMember) model() model.IPSetMember {
	var a netip.Addr
	switch s.meta >> 40 {
	case famV4:
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(s.lo))
		a = netip.AddrFrom4(b)
	case famV6:
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], s.hi)
		binary.BigEndian.PutUint64(b[8:], s.lo)
		a = netip.AddrFrom16(b)
	}
	bits := int(s.meta>>24&0xff) - 1
	return model.IPSetMember{Prefix: netip.PrefixFrom(a, bits), Proto: uint8(s.meta >> 16), Port: uint16(s.meta)}
}

// compareSetMember is model.IPSetMember.Compare on the compact form:
// family, address, prefix length, protocol, port.
func compareSetMember(a, b setMember) int {
	if c := cmp.Compare(a.meta>>40, b.meta>>40); c != 0 {
		return c
	}
	if c := cmp.Compare(a.hi, b.hi); c != 0 {
		return c
	}
	if c := cmp.Compare(a.lo, b.lo); c != 0 {
		return c
	}
	return cmp.Compare(a.meta&(1<<40-1), b.meta&(1<<40-1))
}

// toSetMembers converts ms to an exactly sized sorted slice without
// duplicates.
func toSetMembers(ms []model.IPSetMember) []setMember {
	out := make([]setMember, len(ms))
	for i, m := range ms {
		out[i] = toSetMember(m)
	}
	if !slices.IsSortedFunc(out, compareSetMember) {
		slices.SortFunc(out, compareSetMember)
	}
	out = slices.Compact(out)
	if cap(out) > len(out) {
		out = slices.Clone(out) // duplicates left headroom
	}
	return out
}

func toModelMembers(ms []setMember) []model.IPSetMember {
	if len(ms) == 0 {
		return nil
	}
	out := make([]model.IPSetMember, len(ms))
	for i, m := range ms {
		out[i] = m.model()
	}
	return out
}

func containsSetMember(ms []setMember, m setMember) bool {
	return sorted.Contains(ms, m, compareSetMember)
}

// mergeSetMembers returns have with add merged in and del taken out, in
// place where have's capacity allows: all sorted, add disjoint from have,
// del within it. Linear in len(have); a delta allocates only when the set
// outgrows its capacity.
func mergeSetMembers(have, add, del []setMember) []setMember {
	return sorted.Apply(have, add, del, compareSetMember)
}
