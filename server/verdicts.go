package server

import (
	"strconv"

	"github.com/dpd-dev/dpd/dataplane/model"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// The one vocabulary Trace and Observe share for a policy decision: the
// verdict ("allow", "deny"), who decided ("policy", "profile",
// "tier-default", "no-match", "no policy") and the deciding rule.

// decision names a policy decision. stage is TraceDecided or
// TraceNoPolicy; rule is the deciding rule's table entry when found.
func decision(stage model.TraceStage, allowed bool, ruleID uint64, rule model.RuleInfo, found bool, dir model.Direction) (verdict, decidedBy string, ref *dpdv1.RuleRef) {
	verdict = "deny"
	if stage == model.TraceNoPolicy {
		return verdict, "no policy", nil
	}
	if allowed {
		verdict = "allow"
	}
	decidedBy = "policy"
	switch {
	case found:
		ref = ruleRef(rule, dir)
		decidedBy = rule.Kind
		if rule.Synthetic != "" {
			decidedBy = rule.Synthetic
		}
	case ruleID != 0:
		ref = &dpdv1.RuleRef{CounterId: ruleID, Direction: dir.String()}
	}
	return verdict, decidedBy, ref
}

// protoName is "tcp", "udp", "icmp", "sctp" or the protocol number.
func protoName(p uint8) string {
	switch p {
	case protoTCP:
		return "tcp"
	case protoUDP:
		return "udp"
	case protoICMP:
		return "icmp"
	case 132:
		return "sctp"
	}
	return strconv.Itoa(int(p))
}
