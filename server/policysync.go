package server

import "github.com/dpd-dev/dpd/proto/felix"

// policySyncService registers Calico's felix.PolicySync so clients and
// reflection see it. Sync and Report answer codes.Unimplemented until the
// per-workload sockets (each serving only its workload's state) exist.
type policySyncService struct {
	felix.UnimplementedPolicySyncServer
}
