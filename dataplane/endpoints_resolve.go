package dataplane

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/dpd-dev/dpd/dataplane/felixconv"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// resolve builds the endpoint's model with its policy: per direction, the
// tiers that have policies for that direction (in order, with their
// default action), then the profiles. It returns the IP sets the rules
// reference and, if anything referenced is missing, a reason naming it.
func (e *Engine) resolve(ent *wepEntry) (*model.Endpoint, []string, string) {
	sp := ent.spec
	ep := &model.Endpoint{
		ID:       ent.id,
		Iface:    sp.Iface,
		MAC:      sp.MAC,
		IPv4Nets: sp.IPv4Nets,
		IPv6Nets: sp.IPv6Nets,
	}
	var missing []string
	for _, t := range sp.Tiers {
		if len(t.Ingress) > 0 {
			ep.Ingress.Tiers = append(ep.Ingress.Tiers, e.resolveTier(t, t.Ingress, model.Ingress, &missing))
		}
		if len(t.Egress) > 0 {
			ep.Egress.Tiers = append(ep.Egress.Tiers, e.resolveTier(t, t.Egress, model.Egress, &missing))
		}
	}
	for _, name := range sp.Profiles {
		pr := e.profiles.get(name)
		if pr == nil {
			missing = append(missing, "profile "+name)
			continue
		}
		ep.Ingress.Profiles = append(ep.Ingress.Profiles, model.PolicyRules{Name: name, Kind: "profile", Rules: pr.inbound})
		ep.Egress.Profiles = append(ep.Egress.Profiles, model.PolicyRules{Name: name, Kind: "profile", Rules: pr.outbound})
	}
	sets := ep.ReferencedSets()
	for _, id := range sets {
		if !e.ipsets.exists(id) {
			missing = append(missing, "ip set "+id)
		}
	}
	return ep, sets, missingReason(missing)
}

// resolveTier resolves one tier's policies for direction d. A policy is
// named "tier/policy" in the model, as kernels and traces expect.
func (e *Engine) resolveTier(t felixconv.TierRef, keys []felixconv.PolicyKey, d model.Direction, missing *[]string) model.Tier {
	tier := model.Tier{Name: t.Name, DefaultAction: t.DefaultAction}
	for _, k := range keys {
		pol := e.policies.get(k)
		if pol == nil {
			*missing = append(*missing, "policy "+k.String())
			continue
		}
		rules := pol.outbound
		if d == model.Ingress {
			rules = pol.inbound
		}
		tier.Policies = append(tier.Policies, model.PolicyRules{Name: t.Name + "/" + k.String(), Kind: "policy", Rules: rules})
	}
	return tier
}

// missingReason names up to five missing references.
func missingReason(missing []string) string {
	if len(missing) == 0 {
		return ""
	}
	const show = 5
	r := "missing " + strings.Join(missing[:min(len(missing), show)], ", ")
	if len(missing) > show {
		r += fmt.Sprintf(" and %d more", len(missing)-show)
	}
	return r
}

// sameEndpoint reports whether a and b enforce the same thing. Unchanged
// policies share their rule slices, so the deep comparison is cheap.
func sameEndpoint(a, b *model.Endpoint) bool {
	return a.ID == b.ID && a.Iface == b.Iface &&
		reflect.DeepEqual(a.MAC, b.MAC) &&
		reflect.DeepEqual(a.IPv4Nets, b.IPv4Nets) &&
		reflect.DeepEqual(a.IPv6Nets, b.IPv6Nets) &&
		reflect.DeepEqual(a.Ingress, b.Ingress) &&
		reflect.DeepEqual(a.Egress, b.Egress)
}
