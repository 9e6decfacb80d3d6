package engine

import (
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// wepFID rebuilds a Felix id for a workload id. Only the inbound parsing
// (dispatch.go) still uses it; it goes with that parsing to the edge.
func wepFID(id model.WorkloadID) *felix.WorkloadEndpointID {
	return &felix.WorkloadEndpointID{OrchestratorId: id.Orchestrator, WorkloadId: id.Workload, EndpointId: id.Endpoint}
}
