package policysync

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dpd-dev/dpd/proto/felix"
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
	for {
		m, err := sub.Next(stream.Context())
		if err != nil {
			s.log.Info("policy-sync client stream ended", "workload", id.String(), "reason", err)
			return streamStatus(err)
		}
		if err := stream.Send(m); err != nil {
			return err
		}
	}
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
