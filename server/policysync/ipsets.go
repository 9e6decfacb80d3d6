package policysync

import "github.com/dpd-dev/dpd/proto/felix"

// IP sets are sent only to clients whose policies or profiles reference
// them: whole (split to fit) when a client first needs one, as deltas
// after that.

func (p *Processor) onIPSetUpdate(u *felix.IPSetUpdate) {
	id := u.GetId()
	s := p.ipsets[id]
	if s != nil && s.typ == u.GetType() && sameMembers(s.members, u.GetMembers()) {
		s.stale = false
		return
	}
	s = &ipsetEntry{typ: u.GetType(), members: make(map[string]struct{}, len(u.GetMembers()))}
	for _, m := range u.GetMembers() {
		s.members[m] = struct{}{}
	}
	p.ipsets[id] = s
	// A set can arrive after a policy that references it: clients that need
	// it get it now, whether or not they had an older version.
	for _, ep := range p.connected() {
		if p.needsSetLocked(ep, id) {
			p.sendSetLocked(ep, id)
		}
	}
}

func (p *Processor) onIPSetDelta(u *felix.IPSetDeltaUpdate) {
	id := u.GetId()
	s := p.ipsets[id]
	if s == nil {
		return // the controller never sends deltas for unknown sets
	}
	for _, m := range u.GetRemovedMembers() {
		delete(s.members, m)
	}
	for _, m := range u.GetAddedMembers() {
		s.members[m] = struct{}{}
	}
	var msgs []*felix.ToDataplane
	for _, ep := range p.connected() {
		if !ep.syncedSets[id] {
			continue
		}
		if msgs == nil {
			msgs = splitIPSetDelta(id, u.GetAddedMembers(), u.GetRemovedMembers(), p.opts.MaxMessageBytes)
		}
		for _, m := range msgs {
			if !p.sendLocked(ep, m) {
				break
			}
		}
	}
}

func sameMembers(have map[string]struct{}, want []string) bool {
	if len(have) > len(want) {
		return false
	}
	distinct := 0
	seen := make(map[string]struct{}, len(want))
	for _, m := range want {
		if _, ok := have[m]; !ok {
			return false
		}
		if _, dup := seen[m]; !dup {
			seen[m] = struct{}{}
			distinct++
		}
	}
	return distinct == len(have)
}
