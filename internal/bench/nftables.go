package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// P7's nftables cases police the plain pods with the rules dpd enforces in
// the matching dpd case, written the way Calico's nftables dataplane
// writes a workload's policy: in the forward hook, established and related
// traffic accepted first, invalid dropped, then a jump on the output
// interface to the workload's chain, one nftables rule per policy rule in
// order, and a drop when none matched.

const nftTable = "dpdbench"

// nftRuleset is the table for the server pod's host side serverIface: the
// rule list of kind ("ports" or "ipsets", as trafficRules builds it).
func nftRuleset(kind, serverIface string, r trafficRules) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("table ip %s {\n", nftTable)
	if kind == "ipsets" {
		for i, members := range r.sets {
			w("\tset s%03d {\n\t\ttype ipv4_addr\n\t\telements = { %s }\n\t}\n", i, joinAddrs(members))
		}
	}
	w("\tchain forward {\n\t\ttype filter hook forward priority filter; policy accept;\n")
	w("\t\tct state established,related accept\n\t\tct state invalid drop\n")
	w("\t\toifname %q jump to-server\n\t}\n", serverIface)
	w("\tchain to-server {\n")
	switch kind {
	case "ports":
		for _, p := range r.denyPorts {
			w("\t\ttcp dport %d drop\n", p)
		}
		w("\t\ttcp dport %d accept\n", trafficPort)
	case "ipsets":
		for i := range r.sets {
			verdict := "drop"
			if i == len(r.sets)-1 {
				verdict = "accept"
			}
			w("\t\tip saddr @s%03d tcp dport %d %s\n", i, trafficPort, verdict)
		}
	}
	w("\t\tdrop\n\t}\n}\n")
	return b.String()
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// nft runs nft in the node's namespace with stdin.
func (n *node) nft(ctx context.Context, stdin string, args ...string) error {
	argv := append([]string{"nft"}, args...)
	if n.name != "" {
		argv = append([]string{"ip", "netns", "exec", n.name}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// loadNFT replaces the driver's table with ruleset.
func (n *node) loadNFT(ctx context.Context, ruleset string) error {
	_ = n.deleteNFT(ctx) // absent the first time
	return n.nft(ctx, ruleset, "-f", "-")
}

// deleteNFT deletes the driver's table: netfilter's connection tracking
// then leaves the namespace's hooks again, so the other cases do not pay
// for it.
func (n *node) deleteNFT(ctx context.Context) error {
	return n.nft(ctx, "", "delete", "table", "ip", nftTable)
}
