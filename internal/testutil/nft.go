package testutil

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// NFTCounters is an nftables table (family inet: IPv4 and IPv6) of named counters that a
// test's rules count packets into, in a namespace ("" for the node's);
// deleted at cleanup. It counts what the host's stack saw.
type NFTCounters struct {
	ns, table string
}

// NewNFTCounters creates table with body (its counters, chains and
// rules).
func NewNFTCounters(t testing.TB, ns, table, body string) *NFTCounters {
	t.Helper()
	c := &NFTCounters{ns: ns, table: table}
	script := fmt.Sprintf("table inet %s {\n%s\n}\n", table, body)
	cmd := c.cmd("-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f: %v\n%s\n%s", err, out, script)
	}
	t.Cleanup(func() { _ = c.cmd("delete", "table", "inet", table).Run() })
	return c
}

func (c *NFTCounters) cmd(args ...string) *exec.Cmd {
	if c.ns != "" {
		return exec.Command("ip", append([]string{"netns", "exec", c.ns, "nft"}, args...)...)
	}
	return exec.Command("nft", args...)
}

var nftPackets = regexp.MustCompile(`packets (\d+)`)

// Packets reads the named counter.
func (c *NFTCounters) Packets(t testing.TB, name string) int {
	t.Helper()
	out, err := c.cmd("list", "counter", "inet", c.table, name).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list counter %s: %v\n%s", name, err, out)
	}
	m := nftPackets.FindSubmatch(out)
	if m == nil {
		t.Fatalf("nft list counter %s: no packet count in %s", name, out)
	}
	n, err := strconv.Atoi(string(m[1]))
	if err != nil {
		t.Fatalf("nft list counter %s: %v", name, err)
	}
	return n
}

// HostHooks counts, in the node's namespace, the packets between a and b
// (addresses of one family, both ways) that its prerouting hook
// ("prerouted") and its forward hook ("forwarded") saw: what the host's IP
// stack handled.
func HostHooks(t testing.TB, table, a, b string) *NFTCounters {
	ip := "ip"
	if strings.Contains(a, ":") {
		ip = "ip6"
	}
	return NewNFTCounters(t, "", table, fmt.Sprintf(`
	counter prerouted {}
	counter forwarded {}
	chain prerouting {
		type filter hook prerouting priority -300;
		%[3]s saddr %[1]s %[3]s daddr %[2]s counter name "prerouted"
		%[3]s saddr %[2]s %[3]s daddr %[1]s counter name "prerouted"
	}
	chain forward {
		type filter hook forward priority 0;
		%[3]s saddr %[1]s %[3]s daddr %[2]s counter name "forwarded"
		%[3]s saddr %[2]s %[3]s daddr %[1]s counter name "forwarded"
	}`, a, b, ip))
}
