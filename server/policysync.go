package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dpd-dev/dpd/proto/felix"
)

// policySyncService is felix.PolicySync on dpd's own sockets, registered so
// reflection and clients see the service. A client here has no workload
// identity: the API is served per workload, on the sockets under
// --policysync-dir (package policysync).
type policySyncService struct {
	felix.UnimplementedPolicySyncServer
	dir string // --policysync-dir, "" when off
}

func (s *policySyncService) refusal() error {
	if s.dir == "" {
		return status.Error(codes.FailedPrecondition, "policy sync is off: start dpd with --policysync-dir")
	}
	return status.Errorf(codes.FailedPrecondition, "policy sync is served per workload on %s/mount/<uid>/socket, not on this socket", s.dir)
}

func (s *policySyncService) Sync(*felix.SyncRequest, felix.PolicySync_SyncServer) error {
	return s.refusal()
}

func (s *policySyncService) Report(context.Context, *felix.DataplaneStats) (*felix.ReportResult, error) {
	return nil, s.refusal()
}
