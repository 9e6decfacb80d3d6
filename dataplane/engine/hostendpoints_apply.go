package engine

import (
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// hostDesired is what one bound interface should enforce.
type hostDesired struct {
	id   string // host endpoint
	ep   *model.Endpoint
	sets []string
	// hold: the policy cannot be resolved (missing reference, set not
	// programmed): the kernel keeps what it enforces there.
	hold string
}

// applyHostEndpoints binds host endpoints to interfaces, resolves each
// bound interface's policy and writes the difference to the kernel:
// interfaces no host endpoint binds any more are released first (their
// traffic is no longer policed), then bound ones are applied. Statuses:
// "up" when every interface the endpoint binds is enforced, "down" when it
// binds none, "error" (with the reason for Inspect) otherwise.
func (e *Engine) applyHostEndpoints(now time.Time, p *pass) {
	m := &e.heps
	if !m.readyWork(now) {
		return
	}
	hk, _ := e.k.(HostEndpointKernel)
	bind, excluded := e.bindHostEndpoints()
	desired := map[string]*hostDesired{}
	resolved := map[string]hostResolution{} // by host endpoint
	for iface, id := range bind {
		r, ok := resolved[id]
		if !ok {
			r = e.resolveHostRefs(m.eps[id].enforced())
			resolved[id] = r
		}
		d := &hostDesired{id: id, sets: r.sets, hold: r.missing}
		d.ep = &model.Endpoint{ID: model.HostIfaceID(id, iface), Iface: iface, Ingress: r.ingress, Egress: r.egress,
			Forward: r.forward, Untracked: r.untracked, PreDNAT: r.prednat}
		for _, s := range r.sets {
			if d.hold == "" && !e.ipsets.programmed(s) {
				d.hold = "ip set " + s + " is not programmed yet"
			}
		}
		desired[iface] = d
	}
	failed := map[string]string{} // host endpoint -> first error
	anyFailed := false
	fail := func(id, iface, what string, err error) {
		anyFailed = true
		p.fail("host_endpoint", id+"/"+iface, err)
		if id != "" && failed[id] == "" {
			failed[id] = what + " " + iface + ": " + err.Error()
		}
	}
	if hk != nil {
		for _, iface := range sortedKeys(m.applied) {
			old := m.applied[iface]
			if desired[iface] != nil {
				continue // re-applied below, to its new owner if it has one
			}
			p.did = true
			if err := hk.RemoveHostEndpoint(old); err != nil {
				fail(old.ID.Workload, iface, "release", err)
				continue
			}
			e.setHostApplied(iface, nil, nil)
		}
		for _, iface := range sortedKeys(desired) {
			d := desired[iface]
			old := m.applied[iface]
			if d.hold != "" || (old != nil && !m.force && sameHostEndpoint(d.ep, old)) {
				continue
			}
			p.did = true
			if err := hk.ApplyHostEndpoint(d.ep); err != nil {
				fail(d.id, iface, "apply", err)
				continue
			}
			e.setHostApplied(iface, d.ep, d.sets)
		}
	}
	if err := e.applyToHost(resolved); err != nil {
		anyFailed = true
		p.did = true
		p.fail("host_endpoint", "to-host", err)
	}
	if anyFailed {
		m.retry.fail(now, e.opts.RetryMin, e.opts.RetryMax)
	} else {
		m.dirty, m.force = false, false
		m.retry.reset()
	}
	m.bound = bind
	e.hostStatuses(hk != nil, desired, excluded, failed)
	e.publishHosts()
}

// applyToHost hands the kernel the wildcard host endpoint's ingress
// policy for workload traffic to the host (DefaultEndpointToHostAction
// Return), when it changed. One that cannot be resolved keeps what the
// kernel has.
func (e *Engine) applyToHost(resolved map[string]hostResolution) error {
	m := &e.heps
	tk, ok := e.k.(ToHostKernel)
	if !ok {
		return nil
	}
	var pol *model.DirectionPolicy
	var sets []string
	for _, id := range m.sortedIDs(false) {
		if m.eps[id].spec.Iface != "*" {
			continue
		}
		r, ok := resolved[id]
		if !ok {
			r = e.resolveHostRefs(m.eps[id].spec)
		}
		if r.missing != "" {
			return nil
		}
		for _, s := range r.sets {
			if !e.ipsets.programmed(s) {
				return nil
			}
		}
		in := r.ingress
		pol, sets = &in, r.sets
		break
	}
	if !m.toHostSent && pol == nil {
		return nil // nothing to withdraw (the kernel collects an earlier dpd's)
	}
	if m.toHostSent && !m.force && ((pol == nil && m.toHost == nil) ||
		(pol != nil && m.toHost != nil && pol.Hash() == m.toHost.Hash())) {
		return nil
	}
	if err := tk.ApplyToHostPolicy(pol); err != nil {
		return err
	}
	e.swapSetRefs(sets, m.toHostSets)
	m.toHost, m.toHostSets, m.toHostSent = pol, sets, true
	return nil
}

// swapSetRefs counts add as applied references and drops old's, shared
// with workload endpoints: a removed set leaves the kernel only when
// nothing applied references it.
func (e *Engine) swapSetRefs(add, old []string) {
	refs := e.weps.appliedSetRefs
	for _, s := range add {
		refs[s]++
	}
	for _, s := range old {
		refs[s]--
		if refs[s] <= 0 {
			delete(refs, s)
			e.ipsets.undefer(s)
		}
	}
}

// hostStatuses sets every host endpoint's status after an apply, and
// forgets removed ones.
func (e *Engine) hostStatuses(enforcing bool, desired map[string]*hostDesired, excluded, failed map[string]string) {
	m := &e.heps
	byEP := map[string][]string{}
	for iface, d := range desired {
		byEP[d.id] = append(byEP[d.id], iface)
	}
	for _, id := range m.sortedIDs(true) {
		h := m.eps[id]
		if h.removed {
			delete(m.eps, id)
			e.emitHostRemove(id)
			continue
		}
		ifaces := byEP[id]
		sort.Strings(ifaces)
		h.ifaces = ifaces
		st, reason := statusUp, ""
		var held []string
		for _, iface := range ifaces {
			if d := desired[iface]; d.hold != "" {
				held = append(held, d.hold)
			}
		}
		switch {
		case !enforcing:
			st, reason = statusError, "this dataplane does not enforce host endpoints"
		case h.invalid != "":
			st, reason = statusError, "invalid: "+h.invalid+"; failing closed"
		case len(ifaces) > 0 && e.invalidRefs(hostTiers(h.spec), h.spec.Profiles) != "":
			st, reason = statusError, e.invalidRefs(hostTiers(h.spec), h.spec.Profiles)
		case failed[id] != "":
			st, reason = statusError, failed[id]
		case len(held) > 0:
			slices.Sort(held)
			st, reason = statusError, strings.Join(slices.Compact(held), "; ")
		case len(ifaces) == 0 && excluded[id] != "":
			st, reason = statusDown, excluded[id]
		case len(ifaces) == 0:
			st, reason = statusDown, "no interface matches"
		}
		h.reason = reason
		if st != h.status {
			h.status = st
			e.emitHostStatus(id, h)
		}
	}
}

// enforced is what h's interfaces enforce: its spec, or for an invalid
// endpoint its binding without any policy, which denies (failsafes
// excepted) as Felix's host endpoints without policy do.
func (h *hepEntry) enforced() *model.HostEndpoint {
	if h.invalid == "" {
		return h.spec
	}
	return &model.HostEndpoint{ID: h.id, Iface: h.spec.Iface, ExpectedIPv4: h.spec.ExpectedIPv4, ExpectedIPv6: h.spec.ExpectedIPv6}
}

// hostTiers are every tier sp references, of every stage.
func hostTiers(sp *model.HostEndpoint) []model.TierRef {
	return slices.Concat(sp.Tiers, sp.UntrackedTiers, sp.PreDNATTiers, sp.ForwardTiers)
}

// hostResolution is a host endpoint's resolved policy.
type hostResolution struct {
	*resolution
	forward, untracked, prednat *model.HostStage
}

// resolveHostRefs resolves a host endpoint's normal tiers and profiles
// into the policy for traffic to (ingress) and from (egress) the host, and
// its forward, untracked and pre-DNAT tiers (no profiles: Felix applies
// none to those) into its stages.
func (e *Engine) resolveHostRefs(sp *model.HostEndpoint) hostResolution {
	r := e.resolveRefs(&model.WorkloadEndpoint{Tiers: sp.Tiers, Profiles: sp.Profiles})
	out := hostResolution{resolution: r}
	merged := *r
	stage := func(tiers []model.TierRef, ingressOnly bool) *model.HostStage {
		if len(tiers) == 0 {
			return nil
		}
		sr := e.resolveRefs(&model.WorkloadEndpoint{Tiers: tiers})
		st := &model.HostStage{Ingress: sr.ingress, Egress: sr.egress,
			HasIngress: len(sr.ingress.Tiers) > 0, HasEgress: len(sr.egress.Tiers) > 0 && !ingressOnly}
		if !st.HasIngress && !st.HasEgress {
			return nil
		}
		merged.sets = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(merged.sets), sr.sets...))))
		if sr.missing != "" {
			merged.missing = strings.TrimPrefix(merged.missing+"; "+sr.missing, "; ")
		}
		return st
	}
	out.forward = stage(sp.ForwardTiers, false)
	out.untracked = stage(sp.UntrackedTiers, false)
	out.prednat = stage(sp.PreDNATTiers, true)
	out.resolution = &merged
	return out
}

// sameHostEndpoint: a and b enforce the same on their interface.
func sameHostEndpoint(a, b *model.Endpoint) bool {
	return sameEndpoint(a, b) && model.SameStage(a.Forward, b.Forward) &&
		model.SameStage(a.Untracked, b.Untracked) && model.SameStage(a.PreDNAT, b.PreDNAT)
}

// setHostApplied records what the kernel enforces on iface (nil:
// nothing) and keeps the per-set reference counts that hold back set
// removals, shared with workload endpoints.
func (e *Engine) setHostApplied(iface string, ep *model.Endpoint, sets []string) {
	m := &e.heps
	e.swapSetRefs(sets, m.appliedSets[iface])
	if ep == nil {
		delete(m.applied, iface)
		delete(m.appliedSets, iface)
		return
	}
	m.applied[iface], m.appliedSets[iface] = ep, sets
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
