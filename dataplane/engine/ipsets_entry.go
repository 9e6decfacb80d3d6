package engine

import (
	"slices"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// An ipsetEntry's membership is members (sorted) with pending on top;
// pending holds only real differences: true for a member not in members,
// false for one in it.

// has reports whether m is a member.
func (s *ipsetEntry) has(m setMember) bool {
	if p, ok := s.pending[m]; ok {
		return p
	}
	return containsSetMember(s.members, m)
}

// set makes m a member or not, and reports whether that changed anything.
func (s *ipsetEntry) set(m setMember, member bool) bool {
	if s.has(m) == member {
		return false
	}
	if containsSetMember(s.members, m) == member {
		delete(s.pending, m) // back to what members says
		return true
	}
	if s.pending == nil {
		s.pending = map[setMember]bool{}
	}
	s.pending[m] = member
	return true
}

func (s *ipsetEntry) memberCount() int {
	n := len(s.members)
	for _, added := range s.pending {
		if added {
			n++
		} else {
			n--
		}
	}
	return n
}

// equal reports whether the membership is want (sorted, no duplicates).
func (s *ipsetEntry) equal(want []setMember) bool {
	if len(s.pending) == 0 {
		return slices.Equal(s.members, want)
	}
	if s.memberCount() != len(want) {
		return false
	}
	for _, m := range want {
		if !s.has(m) {
			return false
		}
	}
	return true
}

// pendingSorted returns pending as sorted lists of the members to add and
// to remove.
func (s *ipsetEntry) pendingSorted() (add, del []setMember) {
	for m, added := range s.pending {
		if added {
			add = append(add, m)
		} else {
			del = append(del, m)
		}
	}
	slices.SortFunc(add, compareSetMember)
	slices.SortFunc(del, compareSetMember)
	return add, del
}

// pendingDelta is pending as the kernel delta.
func (s *ipsetEntry) pendingDelta() (added, removed []model.IPSetMember) {
	add, del := s.pendingSorted()
	return toModelMembers(add), toModelMembers(del)
}

// fold brings members up to date with pending.
func (s *ipsetEntry) fold() {
	if len(s.pending) == 0 {
		return
	}
	add, del := s.pendingSorted()
	s.members, s.pending = mergeSetMembers(s.members, add, del), nil
}

// foldPending is how many pending changes make foldIfLarge fold: a map
// entry costs several slice elements.
const foldPending = 1024

// foldIfLarge folds pending into members once it is large against them,
// as when deltas pile up on a set whose applies fail. members then no
// longer says what the kernel holds, so the next apply replaces the set
// (the kernel writes only the difference).
func (s *ipsetEntry) foldIfLarge() {
	if len(s.pending) < foldPending || len(s.pending) < len(s.members)/4 {
		return
	}
	s.fold()
	s.replace = true
}

// membersAfter returns, in order, the n smallest members greater than
// after (all members when after is nil), and whether more follow: sets can
// hold a million members, lists show a page of them.
func (s *ipsetEntry) membersAfter(after *setMember, n int) (page []setMember, more bool) {
	if n <= 0 {
		return nil, s.memberCount() > 0
	}
	beyond := func(m setMember) bool { return after == nil || compareSetMember(m, *after) > 0 }
	var added []setMember
	for m, a := range s.pending {
		if a && beyond(m) {
			added = append(added, m)
		}
	}
	slices.SortFunc(added, compareSetMember)
	i := 0
	if after != nil {
		i, _ = slices.BinarySearchFunc(s.members, *after, compareSetMember)
		if i < len(s.members) && s.members[i] == *after {
			i++
		}
	}
	j := 0
	for i < len(s.members) || j < len(added) {
		var m setMember
		if j == len(added) || (i < len(s.members) && compareSetMember(s.members[i], added[j]) < 0) {
			m = s.members[i]
			i++
			if p, ok := s.pending[m]; ok && !p {
				continue // removed
			}
		} else {
			m = added[j]
			j++
		}
		if len(page) == n {
			return page, true
		}
		page = append(page, m)
	}
	return page, false
}
