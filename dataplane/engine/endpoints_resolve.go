package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// resolution is what an endpoint's policy references resolve to; endpoints
// with the same references share it within an apply pass.
type resolution struct {
	ingress, egress model.DirectionPolicy // with Digest filled in
	// The staged previews (Options.StagedPreview), nil for a direction
	// without staged policies.
	previewIn, previewOut *model.DirectionPolicy
	sets                  []string
	missing               string
	// group is the reference key, one string for the endpoints sharing r.
	group string
}

// resolve builds the endpoint's model with its policy: per direction, the
// tiers that have policies for that direction (in order, with their
// default action), then the profiles. It returns the IP sets the rules
// reference and, if anything referenced is missing, a reason naming it.
// During an apply pass (e.resolved set) endpoints with the same tier and
// profile references share one resolution, so a policy used by a thousand
// endpoints is resolved and hashed once.
func (e *Engine) resolve(ent *wepEntry) (*model.Endpoint, []string, string) {
	sp := ent.spec
	if ent.refKeyOf != sp {
		ent.refKey, ent.refKeyOf = referenceKey(sp), sp
	}
	key := ent.refKey
	var r *resolution
	if e.resolved != nil {
		if r = e.resolved[key]; r == nil {
			r = e.resolveRefs(sp)
			r.group = key
			e.resolved[key] = r
		}
	} else {
		r = e.resolveRefs(sp)
		r.group = key
	}
	ep := &model.Endpoint{
		ID:       ent.id,
		Iface:    sp.Iface,
		MAC:      sp.MAC,
		IPv4Nets: sp.IPv4Nets,
		IPv6Nets: sp.IPv6Nets,
		Ingress:  r.ingress,
		Egress:   r.egress,

		PreviewIngress: r.previewIn,
		PreviewEgress:  r.previewOut,
		// The same references resolve to the same policies: one group.
		PolicyGroup: r.group,
	}
	return ep, r.sets, r.missing
}

// resolveRefs resolves sp's tier and profile references.
func (e *Engine) resolveRefs(sp *model.WorkloadEndpoint) *resolution {
	var in, out model.DirectionPolicy
	var missing []string
	for _, t := range sp.Tiers {
		if tier, ok := e.resolveTier(t, t.Ingress, model.Ingress, &missing); ok {
			in.Tiers = append(in.Tiers, tier)
		}
		if tier, ok := e.resolveTier(t, t.Egress, model.Egress, &missing); ok {
			out.Tiers = append(out.Tiers, tier)
		}
	}
	for _, name := range sp.Profiles {
		pr := e.profiles.get(name)
		if pr == nil {
			missing = append(missing, "profile "+name)
			continue
		}
		in.Profiles = append(in.Profiles, model.PolicyRules{Name: name, Kind: "profile", Rules: pr.inbound})
		out.Profiles = append(out.Profiles, model.PolicyRules{Name: name, Kind: "profile", Rules: pr.outbound})
	}
	r := &resolution{ingress: in.WithDigest(), egress: out.WithDigest()}
	r.sets = (&model.Endpoint{Ingress: in, Egress: out}).ReferencedSets()
	for _, id := range r.sets {
		if !e.ipsets.exists(id) {
			missing = append(missing, "ip set "+id)
		}
	}
	r.missing = missingReason(missing)
	if e.opts.StagedPreview {
		r.previewIn = e.previewWithSets(r, e.resolvePreview(sp, model.Ingress, in.Profiles))
		r.previewOut = e.previewWithSets(r, e.resolvePreview(sp, model.Egress, out.Profiles))
	}
	return r
}

// previewWithSets adds the IP sets p references to r's, or drops p (nil)
// when one is missing: a preview never holds up or fails the endpoint.
func (e *Engine) previewWithSets(r *resolution, p *model.DirectionPolicy) *model.DirectionPolicy {
	if p == nil {
		return nil
	}
	sets := model.ReferencedSets(p.RuleLists()...)
	for _, id := range sets {
		if !e.ipsets.exists(id) {
			return nil
		}
	}
	for _, id := range sets {
		if !slices.Contains(r.sets, id) {
			r.sets = append(r.sets, id)
		}
	}
	return p
}

// referenceKey identifies sp's tier and profile references: equal keys
// resolve to the same policy.
func referenceKey(sp *model.WorkloadEndpoint) string {
	var b strings.Builder
	keys := func(ks []model.PolicyKey) {
		for _, k := range ks {
			b.WriteString(k.Kind)
			b.WriteByte(1)
			b.WriteString(k.Namespace)
			b.WriteByte(1)
			b.WriteString(k.Name)
			b.WriteByte(2)
		}
		b.WriteByte(3)
	}
	for _, t := range sp.Tiers {
		b.WriteString(t.Name)
		b.WriteByte(0)
		b.WriteString(t.DefaultAction.String())
		b.WriteByte(0)
		keys(t.Ingress)
		keys(t.Egress)
	}
	b.WriteByte(4)
	for _, p := range sp.Profiles {
		b.WriteString(p)
		b.WriteByte(0)
	}
	return b.String()
}

// resolveTier resolves one tier's policies for direction d. A policy is
// named "tier/policy" in the model, as kernels and traces expect. Staged
// policies are skipped without being looked up (Felix enforces none); a
// tier with no policy for d, or only staged ones, is not part of d's
// policy at all (ok false): it would end in Pass, not its default action.
func (e *Engine) resolveTier(t model.TierRef, keys []model.PolicyKey, d model.Direction, missing *[]string) (model.Tier, bool) {
	tier := model.Tier{Name: t.Name, DefaultAction: t.DefaultAction}
	enforced := false
	for _, k := range keys {
		if model.IsStagedKind(k.Kind) {
			continue
		}
		enforced = true
		pol := e.policies.get(k)
		if pol == nil {
			*missing = append(*missing, "policy "+k.String())
			continue
		}
		tier.Policies = append(tier.Policies, pol.inTier(t.Name, k, d))
	}
	return tier, enforced
}

// resolvePreview is direction d's policy with its staged policies
// enforced in their tier order, nil when d has none. A staged policy the
// engine does not have is left out: the preview never fails an endpoint.
func (e *Engine) resolvePreview(sp *model.WorkloadEndpoint, d model.Direction, profiles []model.PolicyRules) *model.DirectionPolicy {
	var p model.DirectionPolicy
	staged := false
	for _, t := range sp.Tiers {
		keys := t.Egress
		if d == model.Ingress {
			keys = t.Ingress
		}
		tier := model.Tier{Name: t.Name, DefaultAction: t.DefaultAction}
		for _, k := range keys {
			staged = staged || model.IsStagedKind(k.Kind)
			pol := e.policies.get(k)
			if pol == nil {
				continue
			}
			tier.Policies = append(tier.Policies, pol.inTier(t.Name, k, d))
		}
		if len(keys) > 0 {
			p.Tiers = append(p.Tiers, tier)
		}
	}
	if !staged {
		return nil
	}
	p.Profiles = profiles
	p = p.WithDigest()
	return &p
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

// sameEndpoint reports whether a and b enforce the same thing. Policies
// compare by content hash (stored by resolve), which is what kernels key
// their programs by.
func sameEndpoint(a, b *model.Endpoint) bool {
	return a.ID == b.ID && a.SameInterface(b) && a.PolicyGroup == b.PolicyGroup &&
		a.Ingress.Hash() == b.Ingress.Hash() &&
		a.Egress.Hash() == b.Egress.Hash() &&
		samePreview(a.PreviewIngress, b.PreviewIngress) && samePreview(a.PreviewEgress, b.PreviewEgress)
}

func samePreview(a, b *model.DirectionPolicy) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Hash() == b.Hash())
}
