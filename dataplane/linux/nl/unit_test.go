package nl

import (
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/model"
)

func TestParsePrefixes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", []string{"cali"}},
		{"cali", []string{"cali"}},
		{"cali,tap", []string{"cali", "tap"}},
		{" cali , tap ,, ", []string{"cali", "tap"}},
		{",", []string{"cali"}},
	} {
		if got := ParsePrefixes(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("ParsePrefixes(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestMatchesAny(t *testing.T) {
	prefixes := []string{"cali", "tap"}
	for name, want := range map[string]bool{
		"cali1234": true, "tapabc": true, "cali": true,
		"eth0": false, "xcali1": false, "ta": false, "": false,
	} {
		if got := matchesAny(prefixes, name); got != want {
			t.Errorf("matchesAny(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestStateOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags net.Flags
		oper  netlink.LinkOperState
		want  model.LinkState
	}{
		{"admin down", 0, netlink.OperUp, model.LinkDown},
		{"up", net.FlagUp, netlink.OperUp, model.LinkUp},
		{"up unknown (dummy)", net.FlagUp, netlink.OperUnknown, model.LinkUp},
		{"veth peer down", net.FlagUp, netlink.OperLowerLayerDown, model.LinkDown},
		{"oper down", net.FlagUp, netlink.OperDown, model.LinkDown},
		{"dormant", net.FlagUp, netlink.OperDormant, model.LinkDown},
	} {
		a := &netlink.LinkAttrs{Flags: tc.flags, OperState: tc.oper}
		if got := stateOf(a); got != tc.want {
			t.Errorf("%s: stateOf = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestIPv4Nets(t *testing.T) {
	in := []netip.Prefix{
		netip.MustParsePrefix("10.65.0.1/32"),
		netip.MustParsePrefix("10.65.0.1/32"), // duplicate
		netip.MustParsePrefix("10.66.0.7/24"), // unmasked
		netip.MustParsePrefix("fd00::1/128"),  // IPv6: skipped
		netip.MustParsePrefix("::ffff:10.67.0.1/128"),
		{}, // invalid
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("10.65.0.1/32"),
		netip.MustParsePrefix("10.66.0.0/24"),
		netip.MustParsePrefix("10.67.0.1/32"),
	}
	if got := ipv4Nets(in); !slices.Equal(got, want) {
		t.Fatalf("ipv4Nets = %v, want %v", got, want)
	}
}

func TestPrefixRoundTrip(t *testing.T) {
	for _, s := range []string{"10.65.0.1/32", "10.0.0.0/8", "0.0.0.0/0"} {
		p := netip.MustParsePrefix(s)
		got, ok := prefixOf(ipNet(p))
		if !ok || got != p {
			t.Errorf("prefixOf(ipNet(%s)) = %s, %v", p, got, ok)
		}
	}
	if _, ok := prefixOf(nil); ok {
		t.Error("prefixOf(nil) reported ok")
	}
}

// TestEnsureSysctls runs the sysctl logic against a fake /proc/sys tree.
func TestEnsureSysctls(t *testing.T) {
	root := t.TempDir()
	write := func(rel, v string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(rel string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b)) // no O_TRUNC: a regular file keeps its newline
	}
	c := &Configurer{procSys: root, rpFilter: "1", log: slog.New(slog.DiscardHandler)}
	// proxy_arp already right, forwarding and rp_filter wrong; the IPv6 and
	// neigh settings are absent (best effort).
	write("net/ipv4/conf/cali1/proxy_arp", "1")
	write("net/ipv4/conf/cali1/forwarding", "0")
	write("net/ipv4/conf/cali1/rp_filter", "2")

	if err := c.ensureSysctls(endpointSysctls("cali1", c.rpFilter, false)); err != nil {
		t.Fatalf("first apply: %v", err)
	}
	if got := c.Stats().SysctlWrites; got != 2 {
		t.Fatalf("first apply wrote %d sysctls, want 2", got)
	}
	if read("net/ipv4/conf/cali1/forwarding") != "1" || read("net/ipv4/conf/cali1/rp_filter") != "1" {
		t.Fatal("sysctls not written")
	}
	before := c.Stats()
	if err := c.ensureSysctls(endpointSysctls("cali1", c.rpFilter, false)); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	if d := c.Stats().Sub(before); d.SysctlWrites != 0 || d.SysctlReads == 0 {
		t.Fatalf("second apply: %+v, want reads and no writes", d)
	}
	// A required setting that is missing means the interface is gone.
	err := c.ensureSysctls(endpointSysctls("cali2", c.rpFilter, false))
	if err == nil || !isNotExist(err) {
		t.Fatalf("missing interface: err = %v, want not-exist", err)
	}
}

func TestValidIfaceName(t *testing.T) {
	for name, ok := range map[string]bool{
		"cali1": true, "eth0.100": true, "": false, "..": false, "a/b": false,
		"abcdefghijklmnop": false, // 16 > IFNAMSIZ-1
	} {
		if err := validIfaceName(name); (err == nil) != ok {
			t.Errorf("validIfaceName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}
