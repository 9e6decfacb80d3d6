package nl

import (
	"net/netip"
	"slices"

	"github.com/google/nftables"
)

// addrRange is an inclusive range of addresses of one family.
type addrRange struct{ first, last netip.Addr }

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// familyRanges turns the prefixes of one family (v6 false: IPv4, with
// IPv4-mapped IPv6 counted as IPv4) into sorted, disjoint, non-adjacent
// ranges: an nftables interval set rejects overlapping elements.
func familyRanges(ps []netip.Prefix, v6 bool) []addrRange {
	var rs []addrRange
	for _, p := range ps {
		if !p.IsValid() {
			continue
		}
		a, bits := p.Addr().WithZone(""), p.Bits()
		if a.Is4In6() {
			a, bits = a.Unmap(), bits-96
		}
		if bits < 0 || a.Is4() == v6 {
			continue
		}
		p = netip.PrefixFrom(a, bits).Masked()
		rs = append(rs, addrRange{p.Addr(), lastAddr(p)})
	}
	slices.SortFunc(rs, func(a, b addrRange) int { return a.first.Compare(b.first) })
	var out []addrRange
	for _, r := range rs {
		if n := len(out); n > 0 {
			next := out[n-1].last.Next() // invalid past the top of the space
			if !next.IsValid() || r.first.Compare(next) <= 0 {
				if r.last.Compare(out[n-1].last) > 0 {
					out[n-1].last = r.last
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// ipv4Ranges is familyRanges for IPv4.
func ipv4Ranges(ps []netip.Prefix) []addrRange { return familyRanges(ps, false) }

// rangeElements encodes ranges as interval set elements: a start key, and
// an interval end at the first address after the range (none when the
// range reaches the top of the space).
func rangeElements(rs []addrRange) []nftables.SetElement {
	var els []nftables.SetElement
	for _, r := range rs {
		els = append(els, nftables.SetElement{Key: r.first.AsSlice()})
		if next := r.last.Next(); next.IsValid() {
			els = append(els, nftables.SetElement{Key: next.AsSlice(), IntervalEnd: true})
		}
	}
	return els
}

// prefixesOfElements decodes interval elements (of one family) back into
// ranges and then into the fewest prefixes covering them exactly.
func prefixesOfElements(els []nftables.SetElement) []netip.Prefix {
	type bound struct {
		a   netip.Addr
		end bool
	}
	var bs []bound
	for _, e := range els {
		a, ok := netip.AddrFromSlice(e.Key)
		if !ok {
			continue
		}
		bs = append(bs, bound{a, e.IntervalEnd})
	}
	slices.SortFunc(bs, func(a, b bound) int { return a.a.Compare(b.a) })
	var out []netip.Prefix
	for i := 0; i < len(bs); i++ {
		if bs[i].end {
			continue
		}
		first := bs[i].a
		last := lastAddr(netip.PrefixFrom(first, 0))
		if i+1 < len(bs) && bs[i+1].end {
			last = bs[i+1].a.Prev()
		}
		out = append(out, rangePrefixes(first, last)...)
	}
	return out
}

// rangePrefixes splits [first, last] into aligned prefixes.
func rangePrefixes(first, last netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for {
		bits := first.BitLen()
		for bits > 0 {
			wider := netip.PrefixFrom(first, bits-1)
			if wider.Masked().Addr() != first || lastAddr(wider).Compare(last) > 0 {
				break
			}
			bits--
		}
		p := netip.PrefixFrom(first, bits)
		out = append(out, p)
		end := lastAddr(p)
		if end.Compare(last) >= 0 {
			return out
		}
		first = end.Next()
	}
}
