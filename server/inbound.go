package server

import (
	"context"
	"errors"
	"log/slog"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
	"github.com/dpd-dev/dpd/server/felixwire"
)

// inbound carries one controller's messages to its engine session. Each is
// translated once, at this edge, into the model update the engine
// consumes; one that fails is logged with its sequence number and
// rejected instead (the engine counts it in dpd_invalid_messages_total and
// errors the endpoint it names), and the stream stays up. The gRPC stream
// and the Felix pipe share it, so both feed the engine identically.
type inbound struct {
	sess   engine.Session
	mirror wireMirror // nil unless the session wants the wire messages too
	// statuses learns each endpoint as sent, to echo it in its statuses.
	statuses *felixStatuses
	log      *slog.Logger
}

// wireMirror is a session that also wants each message the engine
// accepted, as it came off the wire (policy sync serves per-workload
// subsets of the very messages).
type wireMirror interface {
	mirror(msg *felix.ToDataplane)
	// generation: the controller showed it speaks g.
	generation(g felixwire.Generation)
}

func newInbound(sess engine.Session, statuses *felixStatuses, log *slog.Logger) *inbound {
	in := &inbound{sess: sess, statuses: statuses, log: log}
	in.mirror, _ = sess.(wireMirror)
	return in
}

// submit translates msg and submits it, or rejects it.
func (in *inbound) submit(ctx context.Context, msg *felix.ToDataplane) error {
	in.statuses.observe(msg)
	u, err := felixconv.Translate(msg)
	if err != nil {
		return in.reject(ctx, msg, err)
	}
	if err := in.sess.Submit(ctx, u); err != nil {
		return err
	}
	if in.mirror != nil {
		in.mirror.mirror(msg)
	}
	return nil
}

// generation passes on which generation the controller speaks.
func (in *inbound) generation(g felixwire.Generation) {
	if in.mirror != nil {
		in.mirror.generation(g)
	}
}

func (in *inbound) reject(ctx context.Context, msg *felix.ToDataplane, err error) error {
	var fe *felixconv.Error
	if !errors.As(err, &fe) {
		fe = &felixconv.Error{Seq: msg.GetSequenceNumber(), Kind: felixconv.PayloadKind(msg), Reason: err.Error()}
	}
	attrs := []any{"seq", fe.Seq, "reason", err, "kind", fe.Kind}
	if fe.Endpoint != nil {
		attrs = append(attrs, "endpoint", fe.Endpoint.String())
	}
	if fe.HostEndpoint != "" {
		attrs = append(attrs, "host_endpoint", fe.HostEndpoint)
	}
	in.log.Warn("rejected invalid controller message", attrs...)
	return in.sess.Reject(ctx, fe.Rejection())
}
