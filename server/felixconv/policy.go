package felixconv

import (
	"errors"
	"fmt"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// ActivePolicy parses u; the policy body must be present.
func ActivePolicy(u *felix.ActivePolicyUpdate) (model.Policy, error) {
	if u == nil {
		return model.Policy{}, errors.New("nil update")
	}
	key, err := PolicyKeyOf(u.Id)
	if err != nil {
		return model.Policy{}, err
	}
	if u.Policy == nil {
		return model.Policy{}, errors.New("policy: missing")
	}
	out := model.Policy{Key: key, Tier: u.Policy.Tier, Untracked: u.Policy.Untracked, PreDNAT: u.Policy.PreDnat}
	if out.Inbound, err = Rules(u.Policy.InboundRules); err != nil {
		return model.Policy{}, fmt.Errorf("inbound_rules: %w", err)
	}
	if out.Outbound, err = Rules(u.Policy.OutboundRules); err != nil {
		return model.Policy{}, fmt.Errorf("outbound_rules: %w", err)
	}
	return out, nil
}

// ActiveProfile parses u; the profile body must be present.
func ActiveProfile(u *felix.ActiveProfileUpdate) (model.Profile, error) {
	if u == nil {
		return model.Profile{}, errors.New("nil update")
	}
	if err := required("profile name", u.GetId().GetName()); err != nil {
		return model.Profile{}, err
	}
	if u.Profile == nil {
		return model.Profile{}, errors.New("profile: missing")
	}
	out := model.Profile{Name: u.Id.Name}
	var err error
	if out.Inbound, err = Rules(u.Profile.InboundRules); err != nil {
		return model.Profile{}, fmt.Errorf("inbound_rules: %w", err)
	}
	if out.Outbound, err = Rules(u.Profile.OutboundRules); err != nil {
		return model.Profile{}, fmt.Errorf("outbound_rules: %w", err)
	}
	return out, nil
}
