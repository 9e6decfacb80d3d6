package server

import (
	"sync"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// endpointEcho keeps the last WorkloadEndpoint the controller sent for each
// endpoint, so that the statuses sent back carry it as Felix's own
// dataplane's do (Felix writes its endpoint status files from it). The
// engine keeps only the parsed endpoint; the wire form is the edge's. The
// receiver records and the sender fills, on different goroutines.
type endpointEcho struct {
	mu  sync.Mutex
	eps map[model.WorkloadID]*felix.WorkloadEndpoint // guarded by mu
}

// record notes what msg, translated into u, says about an endpoint.
func (e *endpointEcho) record(u model.Update, msg *felix.ToDataplane) {
	switch u := u.(type) {
	case *model.WorkloadEndpointUpdate:
		e.set(u.Endpoint.ID, msg.GetWorkloadEndpointUpdate().GetEndpoint())
	case *model.WorkloadEndpointRemove:
		e.mu.Lock()
		delete(e.eps, u.ID)
		e.mu.Unlock()
	}
}

// recordRejected notes a rejected update of endpoint id: its "error"
// status carries what was sent.
func (e *endpointEcho) recordRejected(id model.WorkloadID, msg *felix.ToDataplane) {
	if ep := msg.GetWorkloadEndpointUpdate().GetEndpoint(); ep != nil {
		e.set(id, ep)
	}
}

func (e *endpointEcho) set(id model.WorkloadID, ep *felix.WorkloadEndpoint) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.eps == nil {
		e.eps = map[model.WorkloadID]*felix.WorkloadEndpoint{}
	}
	e.eps[id] = ep
}

// fill puts the endpoint into a workload status update that lacks it.
func (e *endpointEcho) fill(m *felix.FromDataplane) {
	u := m.GetWorkloadEndpointStatusUpdate()
	if u == nil || u.Endpoint != nil {
		return
	}
	id := model.WorkloadID{Orchestrator: u.GetId().GetOrchestratorId(), Workload: u.GetId().GetWorkloadId(), Endpoint: u.GetId().GetEndpointId()}
	e.mu.Lock()
	u.Endpoint = e.eps[id]
	e.mu.Unlock()
}
