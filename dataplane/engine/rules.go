package engine

import (
	"reflect"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// rulesEntry is one policy's or profile's parsed rules. Rule slices are
// never modified after they are stored: resolved endpoints share them, and
// an unchanged policy keeps the same slices, which makes comparing
// resolved endpoints cheap.
type rulesEntry struct {
	inbound, outbound []model.Rule
	stale             bool // not re-sent yet in the current epoch
}

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
	m map[K]*rulesEntry
}

func (s *rulesStore[K]) init() { s.m = map[K]*rulesEntry{} }

func (s *rulesStore[K]) get(k K) *rulesEntry { return s.m[k] }

func (s *rulesStore[K]) len() int { return len(s.m) }

// update stores the rules and reports whether the parsed content changed
// (or the entry is new). An unchanged re-send only clears the stale mark.
func (s *rulesStore[K]) update(k K, in, out []model.Rule) bool {
	if e, ok := s.m[k]; ok {
		e.stale = false
		if reflect.DeepEqual(e.inbound, in) && reflect.DeepEqual(e.outbound, out) {
			return false
		}
		e.inbound, e.outbound = in, out
		return true
	}
	s.m[k] = &rulesEntry{inbound: in, outbound: out}
	return true
}

// remove deletes k and reports whether it existed.
func (s *rulesStore[K]) remove(k K) bool {
	if _, ok := s.m[k]; !ok {
		return false
	}
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
			delete(s.m, k)
			out = append(out, k)
		}
	}
	return out
}
