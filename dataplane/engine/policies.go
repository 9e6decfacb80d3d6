package engine

import (
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
)

// onPolicyUpdate stores a policy; if its rules changed, exactly the
// endpoints that use it are dirtied.
func (e *Engine) onPolicyUpdate(u *felix.ActivePolicyUpdate) error {
	pol, err := felixconv.ActivePolicy(u)
	if err != nil {
		return err
	}
	if e.policies.update(pol.Key, pol.Inbound, pol.Outbound) {
		e.weps.dirtyUsers(e.weps.polUsers.users(pol.Key))
	}
	return nil
}

// onPolicyRemove deletes a policy; endpoints still using it go to "error"
// (naming it) and keep what the kernel enforces until it comes back.
func (e *Engine) onPolicyRemove(r *felix.ActivePolicyRemove) error {
	k, err := felixconv.PolicyKeyOf(r.GetId())
	if err != nil {
		return err
	}
	if e.policies.remove(k) {
		e.weps.dirtyUsers(e.weps.polUsers.users(k))
	}
	return nil
}
