// Package flowfmt prints flow events as dpdctl observe and dpd's flow log
// show them: one line a flow, the deciding rule as tier/policy#index.
package flowfmt

import (
	"fmt"
	"strings"
	"time"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// FlowLine is one flow as dpdctl observe prints it:
//
//	Dec  1 10:00:00.123  ns/web 10.65.0.2:40000 -> 10.65.0.9:80  tcp egress  DENIED  default/web#1
func FlowLine(f *dpdv1.Flow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %s -> %s", f.GetTime().AsTime().Local().Format(time.StampMilli),
		flowPeer(f.GetSource()), flowPeer(f.GetDestination()))
	if ip := f.GetServiceIp(); ip != "" {
		fmt.Fprintf(&b, " (service %s:%d)", ip, f.GetServicePort())
	}
	verdict := "DENIED"
	switch {
	case f.GetEnded():
		verdict = "ENDED"
	case f.GetVerdict() == "allow":
		verdict = "ALLOWED"
	}
	fmt.Fprintf(&b, "  %s %s  %s  %s", f.GetProtocol(), f.GetDirection(), verdict, RuleLabel(f.GetDecidedBy(), f.GetRule()))
	if n := f.GetSuppressed(); n > 0 {
		fmt.Fprintf(&b, "  (+%d denied since the last report)", n)
	}
	if v := f.GetStagedVerdict(); v != "" && !f.GetEnded() {
		fmt.Fprintf(&b, "  staged: would %s  %s", v, RuleLabel(f.GetStagedDecidedBy(), f.GetStagedRule()))
	}
	if f.GetEnded() {
		fw, rp := f.GetForward(), f.GetReply()
		fmt.Fprintf(&b, "  -> %d pkts %d B, <- %d pkts %d B", fw.GetPackets(), fw.GetBytes(), rp.GetPackets(), rp.GetBytes())
		if st := f.GetStarted(); st != nil {
			fmt.Fprintf(&b, ", %s", f.GetTime().AsTime().Sub(st.AsTime()).Round(time.Millisecond))
		}
		if f.GetEndReason() == "evicted" {
			b.WriteString("  (evicted: conntrack table full; counts as of the scan before)")
		}
	}
	return b.String()
}

// flowPeer is "workload ip:port" when the address is a local endpoint's.
func flowPeer(p *dpdv1.FlowPeer) string {
	addr := fmt.Sprintf("%s:%d", p.GetIp(), p.GetPort())
	ep := p.GetEndpoint()
	if ep == "" {
		return addr
	}
	// orchestrator/workload/endpoint: the workload is what people name.
	if parts := strings.Split(ep, "/"); len(parts) >= 3 {
		ep = strings.Join(parts[1:len(parts)-1], "/")
	}
	return ep + " " + addr
}

// RuleLabel is the deciding rule as tier/policy#index (a policy name that
// carries its tier is not prefixed twice), profile:name#index, or what
// decided without a rule.
func RuleLabel(decidedBy string, r *dpdv1.RuleRef) string {
	if r == nil {
		if decidedBy == "" {
			return "-"
		}
		return decidedBy
	}
	switch {
	case r.GetSynthetic() == "tier-default":
		return r.GetTier() + "/" + r.GetSynthetic()
	case r.GetSynthetic() != "":
		return r.GetSynthetic()
	case r.GetPolicy() == "":
		return fmt.Sprintf("counter %x", r.GetCounterId())
	case r.GetKind() == "profile":
		return fmt.Sprintf("profile:%s#%d", r.GetPolicy(), r.GetIndex())
	}
	name := r.GetPolicy()
	if t := r.GetTier(); t != "" && !strings.HasPrefix(name, t+"/") {
		name = t + "/" + name
	}
	return fmt.Sprintf("%s#%d", name, r.GetIndex())
}
