package engine

import (
	"reflect"
	"slices"
	"strings"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// rulesEntry is one policy's or profile's parsed rules. Rule slices are
// never modified after they are stored: resolved endpoints share them, and
// an unchanged policy keeps the same slices, which makes comparing
// resolved endpoints cheap.
type rulesEntry struct {
	inbound, outbound []model.Rule
	stale             bool // not re-sent yet in the current epoch
	// invalid: the controller's last update of it was rejected (why); its
	// rules are denyAll until a valid one arrives.
	invalid string
}

// denyAll stands in for the rules of a policy or profile whose update was
// rejected: no version of it the controller may have meant allows less,
// so what its users enforce is never more permissive than intended.
var denyAll = []model.Rule{{ID: "dpd-rejected-update", Action: model.ActionDeny}}

// rules are the entry's rules for direction d.
func (e *rulesEntry) rules(d model.Direction) []model.Rule {
	if d == model.Ingress {
		return e.inbound
	}
	return e.outbound
}

// inTier is the entry as policy k of tier, for direction d.
func (e *rulesEntry) inTier(tier string, k model.PolicyKey, d model.Direction) model.PolicyRules {
	return model.PolicyRules{Name: tier + "/" + k.String(), Kind: "policy", Rules: e.rules(d)}
}

// rulesStore holds active policies (keyed by policyKey) or profiles (keyed
// by name). Which endpoints use an entry is indexed by endpointManager.
type rulesStore[K comparable] struct {
	m       map[K]*rulesEntry
	invalid int // entries with invalid set
}

func (s *rulesStore[K]) init() { s.m = map[K]*rulesEntry{} }

func (s *rulesStore[K]) get(k K) *rulesEntry { return s.m[k] }

func (s *rulesStore[K]) len() int { return len(s.m) }

// update stores the rules and reports whether the parsed content changed
// (or the entry is new). An unchanged re-send only clears the stale mark.
func (s *rulesStore[K]) update(k K, in, out []model.Rule) bool {
	if e, ok := s.m[k]; ok {
		e.stale = false
		if e.invalid == "" && reflect.DeepEqual(e.inbound, in) && reflect.DeepEqual(e.outbound, out) {
			return false
		}
		s.setInvalid(e, "")
		e.inbound, e.outbound = in, out
		return true
	}
	s.m[k] = &rulesEntry{inbound: in, outbound: out}
	return true
}

// reject records that k's update could not be read (why): its users fail
// closed on denyAll and report the reason until a valid update arrives.
// It reports whether anything changed.
func (s *rulesStore[K]) reject(k K, why string) bool {
	e, ok := s.m[k]
	if !ok {
		e = &rulesEntry{}
		s.m[k] = e
	}
	e.stale = false
	if e.invalid == why {
		return false
	}
	s.setInvalid(e, why)
	e.inbound, e.outbound = denyAll, denyAll
	return true
}

func (s *rulesStore[K]) setInvalid(e *rulesEntry, why string) {
	switch {
	case e.invalid == "" && why != "":
		s.invalid++
	case e.invalid != "" && why == "":
		s.invalid--
	}
	e.invalid = why
}

// remove deletes k and reports whether it existed.
func (s *rulesStore[K]) remove(k K) bool {
	e, ok := s.m[k]
	if !ok {
		return false
	}
	s.setInvalid(e, "")
	delete(s.m, k)
	return true
}

func (s *rulesStore[K]) markStale() {
	for _, e := range s.m {
		e.stale = true
	}
}

// sweep removes what is still stale and returns its keys.
func (s *rulesStore[K]) sweep() []K {
	var out []K
	for k, e := range s.m {
		if e.stale {
			s.setInvalid(e, "")
			delete(s.m, k)
			out = append(out, k)
		}
	}
	return out
}

// invalidRefs names the policies and profiles sp references whose last
// update was rejected ("": none). Cheap when none is.
func (e *Engine) invalidRefs(tiers []model.TierRef, profiles []string) string {
	if e.policies.invalid == 0 && e.profiles.invalid == 0 {
		return ""
	}
	var why []string
	for _, t := range tiers {
		for _, keys := range [][]model.PolicyKey{t.Ingress, t.Egress} {
			for _, k := range keys {
				if pol := e.policies.get(k); pol != nil && pol.invalid != "" && !slices.Contains(why, "policy "+k.String()) {
					why = append(why, "policy "+k.String())
				}
			}
		}
	}
	for _, name := range profiles {
		if pr := e.profiles.get(name); pr != nil && pr.invalid != "" && !slices.Contains(why, "profile "+name) {
			why = append(why, "profile "+name)
		}
	}
	if len(why) == 0 {
		return ""
	}
	return "rejected update of " + strings.Join(why, ", ") + "; failing closed on it (deny)"
}
