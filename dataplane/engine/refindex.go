package engine

import (
	"slices"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// refIndex maps a referenced object (policy, profile, IP set) to the
// endpoints that reference it, so a change to the object dirties exactly
// those endpoints.
type refIndex[K comparable] struct {
	byRef map[K]map[model.WorkloadID]struct{}
	byEP  map[model.WorkloadID][]K
}

func (x *refIndex[K]) init() {
	x.byRef = map[K]map[model.WorkloadID]struct{}{}
	x.byEP = map[model.WorkloadID][]K{}
}

// set replaces ep's references.
func (x *refIndex[K]) set(ep model.WorkloadID, refs []K) {
	if old, ok := x.byEP[ep]; ok && slices.Equal(old, refs) {
		return // unchanged: every endpoint of a changed policy is evaluated again
	}
	for _, k := range x.byEP[ep] {
		if u := x.byRef[k]; u != nil {
			delete(u, ep)
			if len(u) == 0 {
				delete(x.byRef, k)
			}
		}
	}
	if len(refs) == 0 {
		delete(x.byEP, ep)
		return
	}
	x.byEP[ep] = refs
	for _, k := range refs {
		u := x.byRef[k]
		if u == nil {
			u = map[model.WorkloadID]struct{}{}
			x.byRef[k] = u
		}
		u[ep] = struct{}{}
	}
}

// users returns the endpoints referencing k (do not modify).
func (x *refIndex[K]) users(k K) map[model.WorkloadID]struct{} { return x.byRef[k] }
