package policysync

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixwire"
)

// service is felix.PolicySync for one workload: whoever connects on the
// workload's socket is that workload.
type service struct {
	felix.UnimplementedPolicySyncServer
	proc  *Processor
	creds Credentials
	met   *Metrics
	log   *slog.Logger
}

// Sync streams the workload's subset until the client goes, a newer client
// of the same workload takes over (Aborted), the endpoint is removed (OK,
// after the WorkloadEndpointRemove), or the client falls too far behind
// (ResourceExhausted).
func (s *service) Sync(_ *felix.SyncRequest, stream felix.PolicySync_SyncServer) error {
	id := s.creds.WorkloadID()
	sub := s.proc.Join(id)
	defer sub.Leave()
	s.log.Info("policy-sync client connected", "workload", id.String())
	enc := felixwire.NewEncoder()
	for {
		m, err := sub.Next(stream.Context())
		if err != nil {
			s.log.Info("policy-sync client stream ended", "workload", id.String(), "reason", err)
			return streamStatus(err)
		}
		if err := s.send(stream, enc, m); err != nil {
			return err
		}
	}
}

// send sends m in the generation clients are served in now.
func (s *service) send(stream felix.PolicySync_SyncServer, enc *felixwire.Encoder, m *felix.ToDataplane) error {
	gen := s.proc.generation()
	if gen == felixwire.Current {
		enc.Note(m)
		return stream.Send(m)
	}
	b, err := enc.Marshal(m, gen)
	if err != nil {
		// A message the older form cannot carry (a policy kind it does not
		// know) is left out, as an older Felix would never have sent it.
		s.log.Warn("policy-sync message has no older form; not sent", "workload", s.creds.WorkloadID().String(), "err", err)
		return nil
	}
	return stream.SendMsg(rawMessage(b))
}

// rawMessage is b as a message the proto codec marshals as exactly b.
func rawMessage(b []byte) *emptypb.Empty {
	m := &emptypb.Empty{}
	m.ProtoReflect().SetUnknown(b)
	return m
}

func streamStatus(err error) error {
	switch {
	case errors.Is(err, ErrEndpointRemoved):
		return nil
	case errors.Is(err, ErrSuperseded):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, ErrTooSlow):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.FromContextError(err).Err()
}

// Report accepts a client's flow statistics: counted, and acknowledged.
func (s *service) Report(_ context.Context, st *felix.DataplaneStats) (*felix.ReportResult, error) {
	s.met.report(st)
	return &felix.ReportResult{Successful: true}, nil
}
