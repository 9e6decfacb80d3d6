package nl

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
)

func TestFamilyRanges(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{[]string{"fd00::/8", "fd00:1::/32"}, "[fd00::/8]"},
		{[]string{"fd00:1::/32", "fd00::/32"}, "[fd00::/31]"},
		{[]string{"::/0"}, "[::/0]"},
		{[]string{"fd00::5/128", "fd00::6/127"}, "[fd00::5/128 fd00::6/127]"},
		{[]string{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127"}, "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127]"},
		{[]string{"10.0.0.0/8", "::ffff:10.0.0.0/104"}, "[]"}, // IPv4 and IPv4-mapped: not IPv6
	}
	for _, tc := range tests {
		var ps []netip.Prefix
		for _, s := range tc.in {
			ps = append(ps, netip.MustParsePrefix(s))
		}
		if got := fmt.Sprint(prefixesOfElements(rangeElements(familyRanges(ps, true)))); got != tc.want {
			t.Errorf("%v: got %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestMasqueradeDualStack programs IPv4 and IPv6 pools: each family gets
// its table, a pool is only ever in its family's sets, and a family
// without masquerading pools has no table.
func TestMasqueradeDualStack(t *testing.T) {
	ns := namedNetns(t, "m6")
	c := configurerIn(t, ns)
	if !c.IPv6() {
		t.Fatal("a fresh namespace has IPv6, but the configurer says it has not")
	}
	pfx := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	var masq, all []netip.Prefix
	var err error
	inNetns(t, ns, func() {
		if err = c.SyncMasquerade(pfx("10.65.0.0/16", "fd00:65::/48"), pfx("10.65.0.0/16", "fd00:65::/48", "fd00:66::/48")); err != nil {
			return
		}
		masq, all, err = c.MasqueradePools()
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(masq) != "[10.65.0.0/16 fd00:65::/48]" || fmt.Sprint(all) != "[10.65.0.0/16 fd00:65::/48 fd00:66::/48]" {
		t.Fatalf("read back masq %v all %v", masq, all)
	}
	rules := testutil.Run(t, "ip", "netns", "exec", ns, "nft", "list", "table", "ip6", MasqTable)
	if !strings.Contains(rules, "ip6 saddr @masq-pools ip6 daddr != @all-pools masquerade fully-random") {
		t.Fatalf("ip6 table:\n%s", rules)
	}
	// Only IPv6 masquerades now: the ip table goes, the ip6 one stays.
	inNetns(t, ns, func() {
		if err = c.SyncMasquerade(pfx("fd00:65::/48"), pfx("10.65.0.0/16", "fd00:65::/48")); err != nil {
			return
		}
		masq, all, err = c.MasqueradePools()
	})
	if err != nil || fmt.Sprint(masq) != "[fd00:65::/48]" || fmt.Sprint(all) != "[fd00:65::/48]" {
		t.Fatalf("IPv6 only: masq %v all %v err %v", masq, all, err)
	}
	inNetns(t, ns, func() {
		if err = c.DeleteMasquerade(); err != nil {
			return
		}
		masq, all, err = c.MasqueradePools()
	})
	if err != nil || masq != nil || all != nil {
		t.Fatalf("after delete: %v %v %v", masq, all, err)
	}
}
