package nl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// MasqTable is the nftables table (family ip) that implements nat_outgoing.
const MasqTable = "dpd-nat"

// Masquerade implements IP pools' nat_outgoing with one nftables rule:
//
//	table ip dpd-nat {
//	  set masq-pools { type ipv4_addr; flags interval; elements = <nat_outgoing pools> }
//	  set all-pools  { type ipv4_addr; flags interval; elements = <every pool> }
//	  chain postrouting {
//	    type nat hook postrouting priority srcnat;
//	    ip saddr @masq-pools ip daddr != @all-pools masquerade fully-random
//	  }
//	}
//
// which is Calico's rule: traffic from a masquerading pool to anywhere
// outside all pools leaves with the address of the interface it leaves by,
// and the kernel's conntrack reverses it for the replies. It is nftables,
// not BPF SNAT, because the translation must happen after routing on the
// way out of the node (a workload's packet with the node's address as
// source would be a martian on the workload interface) and be undone before
// routing on the way in: in BPF that needs programs on the uplinks and a
// port allocator. Nothing here depends on iptables.
//
// SyncMasquerade replaces the whole table in one nftables transaction, so
// there is never a moment without the rule. With no masquerading pool the
// table is deleted.
func (c *Configurer) SyncMasquerade(masqPools, allPools []netip.Prefix) error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Name: MasqTable, Family: nftables.TableFamilyIPv4}
	masq, all := ipv4Ranges(masqPools), ipv4Ranges(allPools)
	// Add-then-delete makes the delete valid whether or not the table
	// exists; the kernel applies the batch atomically.
	conn.AddTable(t)
	conn.DelTable(t)
	if len(masq) > 0 {
		if err := buildMasq(conn, t, masq, all); err != nil {
			return err
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("program nftables table %s: %w", MasqTable, err)
	}
	return nil
}

// DeleteMasquerade removes the table; absent is not an error.
func (c *Configurer) DeleteMasquerade() error {
	return c.SyncMasquerade(nil, nil)
}

// MasqueradePools reads back the table's pool sets (nil, nil when absent).
func (c *Configurer) MasqueradePools() (masq, all []netip.Prefix, err error) {
	conn, err := nftables.New()
	if err != nil {
		return nil, nil, fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Name: MasqTable, Family: nftables.TableFamilyIPv4}
	read := func(name string) ([]netip.Prefix, error) {
		s, err := conn.GetSetByName(t, name)
		if err != nil {
			return nil, err
		}
		els, err := conn.GetSetElements(s)
		if err != nil {
			return nil, err
		}
		return prefixesOfElements(els), nil
	}
	if masq, err = read("masq-pools"); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("read nftables set masq-pools: %w", err)
	}
	if all, err = read("all-pools"); err != nil {
		return nil, nil, fmt.Errorf("read nftables set all-pools: %w", err)
	}
	return masq, all, nil
}

func buildMasq(conn *nftables.Conn, t *nftables.Table, masq, all []ipRange) error {
	conn.AddTable(t)
	masqSet := &nftables.Set{Table: t, Name: "masq-pools", KeyType: nftables.TypeIPAddr, Interval: true}
	allSet := &nftables.Set{Table: t, Name: "all-pools", KeyType: nftables.TypeIPAddr, Interval: true}
	if err := conn.AddSet(masqSet, rangeElements(masq)); err != nil {
		return fmt.Errorf("nftables set masq-pools: %w", err)
	}
	if err := conn.AddSet(allSet, rangeElements(all)); err != nil {
		return fmt.Errorf("nftables set all-pools: %w", err)
	}
	ch := conn.AddChain(&nftables.Chain{
		Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	})
	conn.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: masqSet.Name, SetID: masqSet.ID},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: allSet.Name, SetID: allSet.ID, Invert: true},
		&expr.Masq{FullyRandom: true},
	}})
	return nil
}

// ipRange is an inclusive IPv4 range as integers.
type ipRange struct{ first, last uint32 }

// ipv4Ranges turns prefixes into sorted, disjoint, non-adjacent ranges: an
// nftables interval set rejects overlapping elements.
func ipv4Ranges(ps []netip.Prefix) []ipRange {
	var rs []ipRange
	for _, p := range ps {
		if !p.IsValid() || !p.Addr().Unmap().Is4() {
			continue
		}
		bits := p.Bits()
		if p.Addr().Is4In6() {
			bits -= 96
		}
		if bits < 0 {
			continue
		}
		a := p.Addr().Unmap().As4()
		first := binary.BigEndian.Uint32(a[:])
		mask := uint32(0)
		if bits < 32 {
			mask = ^uint32(0) >> bits
		}
		first &^= mask
		rs = append(rs, ipRange{first, first | mask})
	}
	slices.SortFunc(rs, func(a, b ipRange) int {
		switch {
		case a.first < b.first:
			return -1
		case a.first > b.first:
			return 1
		}
		return 0
	})
	var out []ipRange
	for _, r := range rs {
		if n := len(out); n > 0 && (out[n-1].last == ^uint32(0) || r.first <= out[n-1].last+1) {
			out[n-1].last = max(out[n-1].last, r.last)
			continue
		}
		out = append(out, r)
	}
	return out
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// rangeElements encodes ranges as interval set elements: a start key, and
// an interval end at the first address after the range (none when the
// range reaches the top of the space).
func rangeElements(rs []ipRange) []nftables.SetElement {
	var els []nftables.SetElement
	for _, r := range rs {
		els = append(els, nftables.SetElement{Key: be32(r.first)})
		if r.last != ^uint32(0) {
			els = append(els, nftables.SetElement{Key: be32(r.last + 1), IntervalEnd: true})
		}
	}
	return els
}

// prefixesOfElements decodes interval elements back into ranges and then
// into the fewest prefixes covering them exactly.
func prefixesOfElements(els []nftables.SetElement) []netip.Prefix {
	type bound struct {
		v   uint32
		end bool
	}
	var bs []bound
	for _, e := range els {
		if len(e.Key) != 4 {
			continue
		}
		bs = append(bs, bound{binary.BigEndian.Uint32(e.Key), e.IntervalEnd})
	}
	slices.SortFunc(bs, func(a, b bound) int {
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return 0
	})
	var out []netip.Prefix
	for i := 0; i < len(bs); i++ {
		if bs[i].end {
			continue
		}
		first, last := bs[i].v, ^uint32(0)
		if i+1 < len(bs) && bs[i+1].end {
			last = bs[i+1].v - 1
		}
		out = append(out, rangePrefixes(first, last)...)
	}
	return out
}

// rangePrefixes splits [first, last] into aligned prefixes.
func rangePrefixes(first, last uint32) []netip.Prefix {
	var out []netip.Prefix
	for {
		bits := 32
		for bits > 0 {
			size := uint64(1) << (32 - (bits - 1))
			if uint64(first)%size != 0 || uint64(first)+size-1 > uint64(last) {
				break
			}
			bits--
		}
		out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte(be32(first))), bits))
		end := uint64(first) + (uint64(1) << (32 - bits))
		if end > uint64(last) {
			return out
		}
		first = uint32(end)
	}
}
