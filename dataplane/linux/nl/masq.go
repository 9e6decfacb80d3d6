package nl

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// MasqTable is the nftables table (family ip, and ip6 for IPv6 pools) that
// implements nat_outgoing.
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
// IPv6 pools get the same rule in a table of family ip6 (ip6 saddr/daddr,
// ipv6_addr sets), from the IPv6 prefixes among the pools, when the node
// has IPv6; a pool is only ever compared with pools of its family.
//
// SyncMasquerade replaces both tables in one nftables transaction, so
// there is never a moment without the rule. A family with no masquerading
// pool has no table.
func (c *Configurer) SyncMasquerade(masqPools, allPools []netip.Prefix) error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	for _, f := range c.masqFamilies() {
		t := &nftables.Table{Name: MasqTable, Family: f.table}
		masq, all := familyRanges(masqPools, f.v6), familyRanges(allPools, f.v6)
		// Add-then-delete makes the delete valid whether or not the
		// table exists; the kernel applies the batch atomically.
		conn.AddTable(t)
		conn.DelTable(t)
		if len(masq) > 0 {
			if err := buildMasq(conn, t, f, masq, all); err != nil {
				return err
			}
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("program nftables table %s: %w", MasqTable, err)
	}
	return nil
}

// masqFamily is how one family's table addresses its packets.
type masqFamily struct {
	table        nftables.TableFamily
	v6           bool
	keyType      nftables.SetDatatype
	saddr, daddr uint32 // offsets in the network header
	addrLen      uint32
}

var (
	masqIPv4 = masqFamily{table: nftables.TableFamilyIPv4, keyType: nftables.TypeIPAddr, saddr: 12, daddr: 16, addrLen: 4}
	masqIPv6 = masqFamily{table: nftables.TableFamilyIPv6, v6: true, keyType: nftables.TypeIP6Addr, saddr: 8, daddr: 24, addrLen: 16}
)

// masqFamilies are the tables this node programs: ip6 only with IPv6.
func (c *Configurer) masqFamilies() []masqFamily {
	if c.ipv6 {
		return []masqFamily{masqIPv4, masqIPv6}
	}
	return []masqFamily{masqIPv4}
}

// DeleteMasquerade removes the table; absent is not an error.
func (c *Configurer) DeleteMasquerade() error {
	return c.SyncMasquerade(nil, nil)
}

// MasqueradePools reads back the tables' pool sets, IPv4 first (nil, nil
// when neither table exists).
func (c *Configurer) MasqueradePools() (masq, all []netip.Prefix, err error) {
	conn, err := nftables.New()
	if err != nil {
		return nil, nil, fmt.Errorf("nftables: %w", err)
	}
	for _, f := range c.masqFamilies() {
		m, a, err := readMasq(conn, &nftables.Table{Name: MasqTable, Family: f.table})
		if err != nil {
			return nil, nil, err
		}
		masq, all = append(masq, m...), append(all, a...)
	}
	return masq, all, nil
}

// readMasq reads one table's pool sets (nil, nil when it is absent).
func readMasq(conn *nftables.Conn, t *nftables.Table) (masq, all []netip.Prefix, err error) {
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

func buildMasq(conn *nftables.Conn, t *nftables.Table, f masqFamily, masq, all []addrRange) error {
	conn.AddTable(t)
	masqSet := &nftables.Set{Table: t, Name: "masq-pools", KeyType: f.keyType, Interval: true}
	allSet := &nftables.Set{Table: t, Name: "all-pools", KeyType: f.keyType, Interval: true}
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
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: f.saddr, Len: f.addrLen},
		&expr.Lookup{SourceRegister: 1, SetName: masqSet.Name, SetID: masqSet.ID},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: f.daddr, Len: f.addrLen},
		&expr.Lookup{SourceRegister: 1, SetName: allSet.Name, SetID: allSet.ID, Invert: true},
		&expr.Masq{FullyRandom: true},
	}})
	return nil
}
