package memkernel

import (
	"encoding/hex"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// The memory kernel answers Inspect from what it records: which endpoint
// holds an interface and the rule tables its policies describe. It runs
// no programs and keeps no counters or maps, so it is an
// engine.EndpointInspector, not a KernelInspector (the engine's tests use
// this package, so it names the interface only in its own tests).

// AttachMode is what EndpointDetails reports as the attach mode.
const AttachMode = "memory"

// endpointOnLocked returns the recorded endpoint on iface.
func (k *Kernel) endpointOnLocked(iface string) *model.Endpoint {
	for _, ep := range k.endpoints {
		if ep.Iface == iface {
			return ep
		}
	}
	return nil
}

// EndpointDetails implements engine.EndpointInspector: an endpoint applied
// on iface is "installed" (ready when its interface is up); the program
// names are the policies' content hashes, as the linux kernel names them.
func (k *Kernel) EndpointDetails(iface string) (model.EndpointDetails, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ep := k.endpointOnLocked(iface)
	if ep == nil {
		return model.EndpointDetails{}, false
	}
	state := k.linkDefault
	if s, ok := k.links[iface]; ok {
		state = s
	}
	return model.EndpointDetails{
		AttachMode:     AttachMode,
		IngressProgram: programName(ep, model.Ingress),
		EgressProgram:  programName(ep, model.Egress),
		Ready:          state == model.LinkUp,
	}, true
}

func programName(ep *model.Endpoint, dir model.Direction) string {
	h := ep.Policy(dir).Hash()
	return dir.String() + ":" + hex.EncodeToString(h[:8])
}

// Rules implements engine.EndpointInspector with the table a compiled
// program of the endpoint's policy would have, in evaluation order. The
// memory kernel keeps no counters: every CounterID is 0.
func (k *Kernel) Rules(iface string, dir model.Direction) ([]model.RuleInfo, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ep := k.endpointOnLocked(iface)
	if ep == nil {
		return nil, false
	}
	return ruleTable(ep.Policy(dir)), true
}

func ruleTable(pol *model.DirectionPolicy) []model.RuleInfo {
	var out []model.RuleInfo
	add := func(tier string, pr *model.PolicyRules, kind string) {
		if pr.Kind != "" {
			kind = pr.Kind
		}
		for i := range pr.Rules {
			out = append(out, model.RuleInfo{Tier: tier, Policy: pr.Name, Kind: kind, Index: i,
				RuleID: pr.Rules[i].ID, Action: pr.Rules[i].Action})
		}
	}
	for _, t := range pol.Tiers {
		for i := range t.Policies {
			add(t.Name, &t.Policies[i], "policy")
		}
		def := model.ActionDeny // anything but Pass denies
		if t.DefaultAction == model.ActionPass {
			def = model.ActionPass
		}
		out = append(out, model.RuleInfo{Tier: t.Name, Index: -1, Action: def, Synthetic: model.SyntheticTierDefault})
	}
	for i := range pol.Profiles {
		add("", &pol.Profiles[i], "profile")
	}
	return append(out, model.RuleInfo{Index: -1, Action: model.ActionDeny, Synthetic: model.SyntheticNoMatch})
}
