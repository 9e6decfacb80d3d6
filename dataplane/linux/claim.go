package linux

import "github.com/dpd-dev/dpd/dataplane/model"

// Claiming pinned programs before IP sets change: after a restart, the
// policy programs an earlier dpd left keep enforcing, but one that
// classifies by IP sets learns of a new combination of sets only once this
// process adopts it and its set watch starts. An IP set change applied
// before that (the snapshot's membership changes come first in a pass)
// can map an address to a combination such a program has no entry for,
// which it reads as "in none of my sets": allow-from-set rules stop
// matching it until the endpoint is applied. Claiming the programs the
// snapshot's endpoints still compile to first starts their watches, so
// they hear of every combination before any address maps to it.

// UnclaimedPinnedPolicies implements engine.PinnedPolicyAdopter.
func (k *Kernel) UnclaimedPinnedPolicies() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.closed && k.pols != nil && len(k.pols.pinned) > 0
}

// AdoptPinnedPolicies implements engine.PinnedPolicyAdopter: it claims the
// pinned programs the endpoints' policies compile to exactly. No endpoint,
// slot or reference changes; a pinned program found out of date is given
// up as ApplyEndpoint would.
func (k *Kernel) AdoptPinnedPolicies(eps []*model.Endpoint) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || k.pols == nil {
		return
	}
	for _, ep := range eps {
		for _, dir := range []model.Direction{model.Ingress, model.Egress} {
			if len(k.pols.pinned) == 0 {
				return
			}
			pol := ep.Policy(dir)
			k.pols.claimPinned(progKey{hash: pol.Hash(), dir: dir}, pol, dir)
		}
	}
}
