package felixconv

import (
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// Error says why one ToDataplane message cannot be applied.
type Error struct {
	Seq uint64
	// Kind is the payload's field name, e.g. "workload_endpoint_update".
	Kind string
	// Endpoint is set when the message concerns a workload endpoint whose
	// ID is itself valid, so status can be reported against it.
	Endpoint *model.WorkloadID
	// HostEndpoint is set likewise for a host endpoint's message.
	HostEndpoint string
	// Policy and Profile are set for an update of a policy or profile
	// whose id is valid.
	Policy  *model.PolicyKey
	Profile string
	Reason  string
}

func (e *Error) Error() string { return "felix " + e.Rejection().String() }

// Rejection is what the engine is told of the message: the same facts.
func (e *Error) Rejection() model.Rejection {
	return model.Rejection{Seq: e.Seq, Kind: e.Kind, Endpoint: e.Endpoint, HostEndpoint: e.HostEndpoint,
		Policy: e.Policy, Profile: e.Profile, Reason: e.Reason}
}

// KindUnknown is PayloadKind's answer for a message without a payload this
// build knows (none set, or a newer upstream case decoded as unknown).
const KindUnknown = model.KindUnknown

// PayloadKind names msg's payload by its proto field name, e.g.
// "ipset_update" or "service_backends_update".
func PayloadKind(msg *felix.ToDataplane) string {
	if msg == nil {
		return KindUnknown
	}
	m := msg.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("payload"))
	if fd == nil {
		return KindUnknown
	}
	return string(fd.Name())
}
