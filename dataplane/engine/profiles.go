package engine

import (
	"errors"

	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
)

// onProfileUpdate stores a profile; if its rules changed, exactly the
// endpoints that list it are dirtied.
func (e *Engine) onProfileUpdate(u *felix.ActiveProfileUpdate) error {
	pr, err := felixconv.ActiveProfile(u)
	if err != nil {
		return err
	}
	if e.profiles.update(pr.Name, pr.Inbound, pr.Outbound) {
		e.weps.dirtyUsers(e.weps.profUsers.users(pr.Name))
	}
	return nil
}

// onProfileRemove deletes a profile; endpoints still listing it go to
// "error" naming it.
func (e *Engine) onProfileRemove(r *felix.ActiveProfileRemove) error {
	name := r.GetId().GetName()
	if name == "" {
		return errors.New("profile remove without name")
	}
	if e.profiles.remove(name) {
		e.weps.dirtyUsers(e.weps.profUsers.users(name))
	}
	return nil
}
