package polprog

import (
	"net/netip"

	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// Which family a rule applies to, as Calico renders it (FilterRuleToIPVersion
// in Felix's rules package): a rule for one ip_version never matches the
// other; a rule without one is rendered for each family with its CIDR lists
// cut down to that family, and dropped for a family that leaves one of its
// lists empty. So "not from 10.0.0.0/8" applies to IPv4 only, and never
// lets an IPv6 packet through, while "from 10.0.0.1 or fd00::1" applies to
// both.

// families reports which families a list of prefixes mentions.
func families(list []netip.Prefix) (v4, v6 bool) {
	for _, p := range list {
		if p.Addr().Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	return v4, v6
}

// ruleFamilies reports the families rule ru applies to.
func ruleFamilies(ru *model.Rule) (v4, v6 bool) {
	v4, v6 = ru.IPVersion == 0 || ru.IPVersion == 4, ru.IPVersion == 0 || ru.IPVersion == 6
	for _, l := range [][]netip.Prefix{ru.SrcNets, ru.NotSrcNets, ru.DstNets, ru.NotDstNets} {
		if len(l) > 0 {
			l4, l6 := families(l)
			v4, v6 = v4 && l4, v6 && l6
		}
	}
	return v4, v6
}

// family fails packets of a family ru does not apply to. The positive net
// matches would fail them anyway, so the family is only tested when
// ip_version or a negated list is what excludes it: rules with one
// family's CIDRs cost no more than before.
func (g *gen) family(ru *model.Rule, fail string) {
	v4, v6 := ruleFamilies(ru)
	// What the positive lists already exclude.
	p4, p6 := true, true
	for _, l := range [][]netip.Prefix{ru.SrcNets, ru.DstNets} {
		if len(l) > 0 {
			l4, l6 := families(l)
			p4, p6 = p4 && l4, p6 && l6
		}
	}
	switch {
	case !v4 && !v6:
		g.s.emit(asm.Ja.Label(fail))
	case (v4 || !p4) && (v6 || !p6):
		// Nothing to test beyond the net matches.
	case v4:
		g.s.emit(ldState(asm.R1, abi.StateFamily, asm.Byte), asm.JNE.Imm(asm.R1, 4, fail))
	default:
		g.s.emit(ldState(asm.R1, abi.StateFamily, asm.Byte), asm.JNE.Imm(asm.R1, 6, fail))
	}
}
