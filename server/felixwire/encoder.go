package felixwire

import (
	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/proto/felix"
)

// Encoder encodes one outgoing stream's messages (policy sync) in either
// generation. An older client keys policies by (tier, name), and a
// current ActivePolicyRemove does not say the tier, so the encoder keeps
// the tier of every policy whose update it encoded: a removal must name the
// tier its update did, or the older client keeps the policy. It holds one
// entry per policy on the stream. Not safe for concurrent use.
type Encoder struct {
	tiers map[policyRef]string
}

// policyRef is a current PolicyID as a map key.
type policyRef struct{ kind, namespace, name string }

func refOf(id *felix.PolicyID) policyRef {
	return policyRef{kind: id.GetKind(), namespace: id.GetNamespace(), name: id.GetName()}
}

// NewEncoder returns an encoder for a new stream.
func NewEncoder() *Encoder { return &Encoder{tiers: map[policyRef]string{}} }

// Note records what m tells about policy tiers; Marshal does it too. Call
// it for messages sent without Marshal, so that a stream whose generation
// changes still removes what it sent before.
func (e *Encoder) Note(m *felix.ToDataplane) {
	switch {
	case m.GetActivePolicyUpdate().GetId() != nil:
		u := m.GetActivePolicyUpdate()
		e.tiers[refOf(u.GetId())] = u.GetPolicy().GetTier()
	case m.GetActivePolicyRemove().GetId() != nil:
		delete(e.tiers, refOf(m.GetActivePolicyRemove().GetId()))
	}
}

// Marshal encodes m in gen.
func (e *Encoder) Marshal(m *felix.ToDataplane, gen Generation) ([]byte, error) {
	if gen != Legacy {
		e.Note(m)
		return proto.Marshal(m)
	}
	tier := "default"
	if id := m.GetActivePolicyRemove().GetId(); id != nil {
		if t, ok := e.tiers[refOf(id)]; ok && t != "" {
			tier = t
		}
	}
	e.Note(m)
	lm, err := down(m, tier)
	if err != nil {
		return nil, err
	}
	return proto.Marshal(lm)
}
