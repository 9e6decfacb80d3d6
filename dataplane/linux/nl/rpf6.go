package nl

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// RPFTable is the nftables table (family ip6) that drops IPv6 packets a
// workload sends from an address that is not routed back through its own
// interface.
const RPFTable = "dpd-rpf"

// SyncIPv6RPF gives IPv6 the source check that rp_filter=1 gives IPv4 on
// workload interfaces. IPv6 has no rp_filter sysctl (Felix uses
// ip6tables' rpfilter match in the raw table); dpd's equivalent is one
// nftables rule per workload interface prefix:
//
//	table ip6 dpd-rpf {
//	  chain prerouting {
//	    type filter hook prerouting priority raw; policy accept;
//	    iifname "cali*" ip6 saddr != :: fib saddr . iif oif 0 counter drop
//	  }
//	}
//
// so a workload cannot send from another workload's address, or any
// address the node does not route to it, and slip past the policy of the
// receiver, which matches on source addresses. The unspecified source
// (duplicate address detection) is exempt, as rpfilter exempts it;
// link-local sources pass, the interface's fe80::/64 route leads back to
// it. The table is replaced in one transaction; it is absent on a node
// without IPv6 and when the configured rp_filter is 0 (workloads allowed
// to spoof), or with no prefixes.
func (c *Configurer) SyncIPv6RPF(prefixes []string) error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Name: RPFTable, Family: nftables.TableFamilyIPv6}
	// Add-then-delete makes the delete valid whether or not it exists.
	conn.AddTable(t)
	conn.DelTable(t)
	if c.ipv6 && c.rpFilter != "0" && len(prefixes) > 0 {
		conn.AddTable(t)
		accept := nftables.ChainPolicyAccept
		ch := conn.AddChain(&nftables.Chain{
			Name: "prerouting", Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw, Policy: &accept,
		})
		for _, p := range prefixes {
			if err := validIfacePrefix(p); err != nil {
				return err
			}
			conn.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: rpfRule(p)})
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("program nftables table ip6 %s: %w", RPFTable, err)
	}
	return nil
}

// rpfRule is the rule for interfaces named prefix*: the name's first
// len(prefix) bytes compared, as nft's "prefix*" does.
func rpfRule(prefix string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(prefix)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 8, Len: 16},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 16)},
		&expr.Fib{Register: 1, ResultOIF: true, FlagSADDR: true, FlagIIF: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: make([]byte, 4)},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// validIfacePrefix rejects prefixes no interface name can start with.
func validIfacePrefix(p string) error {
	if p == "" || len(p) > unix.IFNAMSIZ-1 {
		return fmt.Errorf("invalid interface prefix %q", p)
	}
	return nil
}

// IPv6RPFDrops is the number of packets the table dropped (0 when it is
// absent); `nft list table ip6 dpd-rpf` shows the same counters.
func (c *Configurer) IPv6RPFDrops() (uint64, error) {
	conn, err := nftables.New()
	if err != nil {
		return 0, fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Name: RPFTable, Family: nftables.TableFamilyIPv6}
	rules, err := conn.GetRules(t, &nftables.Chain{Name: "prerouting", Table: t})
	if errors.Is(err, syscall.ENOENT) {
		return 0, nil // no table, no drops
	}
	if err != nil {
		return 0, fmt.Errorf("read nftables table ip6 %s: %w", RPFTable, err)
	}
	var n uint64
	for _, r := range rules {
		for _, e := range r.Exprs {
			if ctr, ok := e.(*expr.Counter); ok {
				n += ctr.Packets
			}
		}
	}
	return n, nil
}
