package server

import (
	"errors"
	"log/slog"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
	"github.com/dpd-dev/dpd/server/felixwire"
)

// wireIn is one controller session's decode edge, shared by the gRPC
// stream and the Felix pipe: raw bytes of either Felix generation in,
// current-form messages out.
type wireIn struct {
	dec       *felixwire.Decoder
	met       *felixwire.Transport
	transport string
	log       *slog.Logger
	told      bool // the older generation was logged
}

func newWireIn(met *felixwire.Metrics, transport string, log *slog.Logger) *wireIn {
	return &wireIn{dec: felixwire.NewDecoder(), met: met.Transport(transport), transport: transport, log: log}
}

// wireSink is where decoded messages go: submit hands a message on,
// reject records one against the endpoint it concerns.
type wireSink struct {
	submit func(*felix.ToDataplane) error
	reject func(*felix.ToDataplane, error) error
	// generation, if set, hears which generation the controller speaks
	// whenever a message shows it, before that message is submitted.
	generation func(felixwire.Generation)
}

// errResync wraps a decode error after which the session must start over.
type errResync struct{ err *felixwire.Error }

func (e *errResync) Error() string { return e.err.Error() }
func (e *errResync) Unwrap() error { return e.err }

// take decodes b and hands the result to sink. A message that does not
// decode but names its workload endpoint is rejected against it (the
// engine puts it in error and fails it closed); one that names nothing
// returns an *errResync: what it would have changed is unknown, so the
// caller ends the session. Messages with a payload this build does not
// know carry nothing to apply and are skipped.
func (w *wireIn) take(b []byte, sink wireSink) error {
	return w.deliver(w.decode(b), sink)
}

// decoded is one message decoded, not yet delivered.
type decoded struct {
	r   felixwire.Result
	err error
}

// decode decodes b; the result does not reference b.
func (w *wireIn) decode(b []byte) decoded {
	r, err := w.dec.Decode(b)
	return decoded{r: r, err: err}
}

// deliver hands a decoded message to sink (see take).
func (w *wireIn) deliver(d decoded, sink wireSink) error {
	r, err := d.r, d.err
	if err != nil {
		// Only here: errors.As's target escapes, a heap object per call.
		var de *felixwire.Error
		if errors.As(err, &de) {
			return w.failed(de, sink)
		}
		return err
	}
	w.met.Decoded(r)
	if r.Gen == felixwire.Legacy && !w.told {
		w.told = true
		w.log.Info("controller speaks the Felix v3.28-v3.31 encoding; converting at the wire edge", "transport", w.transport)
	}
	if r.Decided && sink.generation != nil {
		sink.generation(r.Gen)
	}
	if r.Unknown != 0 {
		w.log.Debug("ignoring a message with a payload unknown to this build", "payload_field", r.Unknown, "seq", r.Msg.GetSequenceNumber())
		return nil
	}
	return sink.submit(r.Msg)
}

func (w *wireIn) failed(de *felixwire.Error, sink wireSink) error {
	w.met.Failed(de)
	attrs := []any{"transport", w.transport, "message", de.N, "seq", de.Seq, "payload_field", int(de.Payload), "err", de.Err}
	if de.Resync() {
		w.log.Error("undecodable controller message; ending the session so that the controller resends its state", attrs...)
		return &errResync{err: de}
	}
	msg := &felix.ToDataplane{SequenceNumber: de.Seq}
	if de.Endpoint == nil {
		w.log.Warn("undecodable controller message; its host endpoint goes to error and enforces no policy (deny, failsafes excepted)",
			append(attrs, "host_endpoint", de.HostEndpoint)...)
		kind, hid := "host_endpoint_update", &felix.HostEndpointID{EndpointId: de.HostEndpoint}
		if de.Payload == 10 {
			kind = "host_endpoint_remove"
			msg.Payload = &felix.ToDataplane_HostEndpointRemove{HostEndpointRemove: &felix.HostEndpointRemove{Id: hid}}
		} else {
			msg.Payload = &felix.ToDataplane_HostEndpointUpdate{HostEndpointUpdate: &felix.HostEndpointUpdate{Id: hid}}
		}
		return sink.reject(msg, &felixconv.Error{Seq: de.Seq, Kind: kind, HostEndpoint: de.HostEndpoint, Reason: de.Error()})
	}
	id := model.WorkloadID{Orchestrator: de.Endpoint.OrchestratorId, Workload: de.Endpoint.WorkloadId, Endpoint: de.Endpoint.EndpointId}
	w.log.Warn("undecodable controller message; its endpoint goes to error and drops traffic", append(attrs, "endpoint", id.String())...)
	kind := "workload_endpoint_update"
	if de.Payload == 12 {
		kind = "workload_endpoint_remove"
		msg.Payload = &felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: &felix.WorkloadEndpointRemove{Id: de.Endpoint}}
	} else {
		msg.Payload = &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{Id: de.Endpoint}}
	}
	return sink.reject(msg, &felixconv.Error{Seq: de.Seq, Kind: kind, Endpoint: &id, Reason: de.Error()})
}

// undecodable handles a message the transport could not even hand over as
// bytes (gRPC: its top level is not protobuf): nothing names what it
// concerns, so the session is resynced.
func (w *wireIn) undecodable(err error) error {
	return w.failed(w.dec.Fail(err), wireSink{})
}
