package felixwire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/proto/felixlegacy"
)

// Error is a message that could not be decoded.
type Error struct {
	// N is the message's number in its session, from 1.
	N uint64
	// Seq is its sequence number when the envelope was readable.
	Seq uint64
	// Payload is the payload's field number (0: none or unreadable).
	Payload protowire.Number
	// Endpoint is the workload endpoint the message concerns, when its id
	// could still be read: that endpoint must stop enforcing what it had
	// (the caller rejects the message against it). nil: nothing tells what
	// the message would have changed, so the session must be resynced.
	Endpoint *felix.WorkloadEndpointID
	// HostEndpoint is likewise the host endpoint the message concerns.
	HostEndpoint string
	Err          error
}

func (e *Error) Error() string {
	what := "message"
	if e.Payload != 0 {
		what = fmt.Sprintf("message with payload field %d", e.Payload)
	}
	s := fmt.Sprintf("felix message #%d (seq %d): undecodable %s", e.N, e.Seq, what)
	if e.Endpoint != nil {
		s += fmt.Sprintf(" for endpoint %s/%s/%s", e.Endpoint.OrchestratorId, e.Endpoint.WorkloadId, e.Endpoint.EndpointId)
	}
	if e.HostEndpoint != "" {
		s += fmt.Sprintf(" for host endpoint %s", e.HostEndpoint)
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Resync reports whether the session must start over: no endpoint could
// be blamed, so whatever the message changed is unknown.
func (e *Error) Resync() bool { return e.Endpoint == nil && e.HostEndpoint == "" }

// Decoder decodes one session's messages in order; it keeps what the
// session has shown of its generation. Not safe for concurrent use.
type Decoder struct {
	n       uint64
	hosts   hostMeta
	seen    [2]uint64 // messages recognised per Generation
	unknown uint64    // messages without a payload this build knows
}

// NewDecoder returns a decoder for a new session.
func NewDecoder() *Decoder { return &Decoder{} }

// Result is one decoded message.
type Result struct {
	Msg *felix.ToDataplane
	// Gen is the encoding the message was recognised as.
	Gen Generation
	// Decided: the message shows which generation the controller speaks
	// (an older-only form, or a policy id, whose form differs between the
	// two); most messages read the same in both and say nothing.
	Decided bool
	// Unknown: the message has a payload field this build does not know
	// (Msg.Payload is nil); it carries nothing to apply. Unknown fields in
	// known payloads are not reported: they are ignored, as upstream adds
	// fields over time.
	Unknown protowire.Number
}

// Decode decodes b, one ToDataplane in either generation, into the current
// form. The error is an *Error.
func (d *Decoder) Decode(b []byte) (Result, error) {
	d.n++
	env, err := scanEnvelope(b)
	if err != nil {
		return Result{}, &Error{N: d.n, Err: err}
	}
	fail := func(err error) (Result, error) {
		e := &Error{N: d.n, Seq: env.seq, Payload: env.payload, Err: err}
		switch env.payload {
		case payloadWorkloadUpdate, payloadWorkloadRemove:
			e.Endpoint = workloadIDOf(env.body)
		case payloadHostEPUpdate, payloadHostEPRemove:
			e.HostEndpoint = hostEndpointIDOf(env.body)
		}
		return Result{}, e
	}
	gen, err := d.generation(env)
	if err != nil {
		return fail(err)
	}
	var msg *felix.ToDataplane
	if gen == Legacy {
		lm := &felixlegacy.ToDataplane{}
		if err := proto.Unmarshal(b, lm); err != nil {
			return fail(fmt.Errorf("as v3.28-v3.31: %w", err))
		}
		if msg, err = d.up(lm); err != nil {
			return fail(fmt.Errorf("as v3.28-v3.31: %w", err))
		}
	} else {
		msg = &felix.ToDataplane{}
		if err := proto.Unmarshal(b, msg); err != nil {
			return fail(err)
		}
		d.hosts.current(msg)
	}
	d.seen[gen]++
	r := Result{Msg: msg, Gen: gen, Decided: gen == Legacy || hasPolicyID(msg)}
	if msg.Payload == nil && env.payload != 0 {
		r.Unknown = env.payload
		d.unknown++
	}
	return r, nil
}

// hasPolicyID reports whether msg is a policy update or removal naming
// its policy: its id is encoded differently in each generation.
func hasPolicyID(msg *felix.ToDataplane) bool {
	return msg.GetActivePolicyUpdate().GetId() != nil || msg.GetActivePolicyRemove().GetId() != nil
}

// Fail accounts for a message the transport could not deliver as bytes
// and returns its *Error (always a resync).
func (d *Decoder) Fail(err error) *Error {
	d.n++
	return &Error{N: d.n, Err: err}
}

// generation decides how env is to be read.
func (d *Decoder) generation(env envelope) (Generation, error) {
	switch env.payload {
	case payloadPolicyUpdate, payloadPolicyRemove:
		return policyIDGen(env.body)
	case payloadWorkloadUpdate:
		return endpointGen(env.body, wepUpdateEndpoint, []protowire.Number{wepTiers})
	case payloadHostEPUpdate:
		return endpointGen(env.body, hepUpdateEndpoint, hepTierFields)
	case payloadRouteUpdate:
		return routeGen(env.body)
	case payloadHostMetaV6Up, payloadHostMetaV6Rm, payloadHostMetaV4V6Up, payloadHostMetaV4V6Rm:
		// Only the older Felix sends these (the current one reserved them);
		// from now on its 14 and 18 are per-family too.
		d.hosts.legacy = true
		return Legacy, nil
	case payloadHostMetaUpdate, payloadHostMetaRemove:
		// The bytes cannot tell an older IPv4-only update from a current
		// whole record: what the session sent before decides.
		if d.hosts.legacy {
			return Legacy, nil
		}
	}
	return Current, nil
}

// Seen reports how many messages of each generation the session sent.
func (d *Decoder) Seen() (current, legacy uint64) { return d.seen[Current], d.seen[Legacy] }
