package engine

import "github.com/dpd-dev/dpd/dataplane/model"

// onProfileUpdate stores a profile; if its rules changed, exactly the
// endpoints that list it are dirtied.
func (e *Engine) onProfileUpdate(u *model.ActiveProfileUpdate) {
	pr := &u.Profile
	if e.profiles.update(pr.Name, pr.Inbound, pr.Outbound) {
		e.weps.dirtyUsers(e.weps.profUsers.users(pr.Name))
		e.heps.refChanged()
	}
}

// onProfileRemove deletes a profile; endpoints still listing it go to
// "error" naming it.
func (e *Engine) onProfileRemove(r *model.ActiveProfileRemove) {
	if e.profiles.remove(r.Name) {
		e.weps.dirtyUsers(e.weps.profUsers.users(r.Name))
		e.heps.refChanged()
	}
}
