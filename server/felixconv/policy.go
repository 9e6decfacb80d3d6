package felixconv

import (
	"errors"
	"fmt"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// Policy is a parsed ActivePolicyUpdate.
type Policy struct {
	Key PolicyKey
	// Tier is the tier Felix placed the policy in ("" from senders older
	// than upstream's PolicyID change, where endpoints' TierInfo names it).
	Tier      string
	Inbound   []model.Rule
	Outbound  []model.Rule
	Untracked bool
	PreDNAT   bool
}

// ActivePolicy parses u; the policy body must be present.
func ActivePolicy(u *felix.ActivePolicyUpdate) (Policy, error) {
	if u == nil {
		return Policy{}, errors.New("nil update")
	}
	key, err := PolicyKeyOf(u.Id)
	if err != nil {
		return Policy{}, err
	}
	if u.Policy == nil {
		return Policy{}, errors.New("policy: missing")
	}
	out := Policy{Key: key, Tier: u.Policy.Tier, Untracked: u.Policy.Untracked, PreDNAT: u.Policy.PreDnat}
	if out.Inbound, err = Rules(u.Policy.InboundRules); err != nil {
		return Policy{}, fmt.Errorf("inbound_rules: %w", err)
	}
	if out.Outbound, err = Rules(u.Policy.OutboundRules); err != nil {
		return Policy{}, fmt.Errorf("outbound_rules: %w", err)
	}
	return out, nil
}

// Profile is a parsed ActiveProfileUpdate.
type Profile struct {
	Name     string
	Inbound  []model.Rule
	Outbound []model.Rule
}

// ActiveProfile parses u; the profile body must be present.
func ActiveProfile(u *felix.ActiveProfileUpdate) (Profile, error) {
	if u == nil {
		return Profile{}, errors.New("nil update")
	}
	if err := required("profile name", u.GetId().GetName()); err != nil {
		return Profile{}, err
	}
	if u.Profile == nil {
		return Profile{}, errors.New("profile: missing")
	}
	out := Profile{Name: u.Id.Name}
	var err error
	if out.Inbound, err = Rules(u.Profile.InboundRules); err != nil {
		return Profile{}, fmt.Errorf("inbound_rules: %w", err)
	}
	if out.Outbound, err = Rules(u.Profile.OutboundRules); err != nil {
		return Profile{}, fmt.Errorf("outbound_rules: %w", err)
	}
	return out, nil
}
