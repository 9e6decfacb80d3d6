package engine

import "github.com/dpd-dev/dpd/dataplane/model"

// onPolicyUpdate stores a policy; if its rules changed, exactly the
// endpoints that use it are dirtied.
func (e *Engine) onPolicyUpdate(u *model.ActivePolicyUpdate) {
	pol := &u.Policy
	if e.policies.update(pol.Key, pol.Inbound, pol.Outbound) {
		e.weps.dirtyUsers(e.weps.polUsers.users(pol.Key))
		e.heps.refChanged()
	}
}

// onPolicyRemove deletes a policy; endpoints still using it go to "error"
// (naming it) and keep what the kernel enforces until it comes back.
func (e *Engine) onPolicyRemove(r *model.ActivePolicyRemove) {
	if e.policies.remove(r.Key) {
		e.weps.dirtyUsers(e.weps.polUsers.users(r.Key))
		e.heps.refChanged()
	}
}
