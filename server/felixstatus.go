package server

import (
	"fmt"
	"sync"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// felixStatuses turns one session's engine statuses into FromDataplane
// messages, numbered from 1. A workload status echoes the endpoint as the
// controller last sent it (Felix reads it back), so the encoder also
// watches what the controller sends: the engine keeps no wire messages.
type felixStatuses struct {
	seq uint64 // owned by the one goroutine that encodes

	mu   sync.Mutex
	echo map[model.WorkloadID]echoed // guarded by mu
}

// echoed is the endpoint last sent for an id; removed: a remove came
// after it.
type echoed struct {
	ep      *felix.WorkloadEndpoint
	removed bool
}

func newFelixStatuses() *felixStatuses {
	return &felixStatuses{echo: map[model.WorkloadID]echoed{}}
}

// observe records the endpoint of a WorkloadEndpointUpdate, valid or not,
// for the status updates that follow. It is forgotten once its removal is
// reported, unless an update came after the remove; the rest ends with
// the session.
func (f *felixStatuses) observe(msg *felix.ToDataplane) {
	switch {
	case msg.GetWorkloadEndpointUpdate().GetEndpoint() != nil:
		u := msg.GetWorkloadEndpointUpdate()
		f.mu.Lock()
		f.echo[wireWorkloadID(u.GetId())] = echoed{ep: u.GetEndpoint()}
		f.mu.Unlock()
	case msg.GetWorkloadEndpointRemove() != nil:
		id := wireWorkloadID(msg.GetWorkloadEndpointRemove().GetId())
		f.mu.Lock()
		if ent, ok := f.echo[id]; ok {
			ent.removed = true
			f.echo[id] = ent
		}
		f.mu.Unlock()
	}
}

// release forgets every endpoint: the session is over, and statuses
// encoded from now on (none should be) carry no echo.
func (f *felixStatuses) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.echo = map[model.WorkloadID]echoed{}
}

func (f *felixStatuses) endpoint(id model.WorkloadID) *felix.WorkloadEndpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.echo[id].ep
}

func (f *felixStatuses) forget(id model.WorkloadID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.echo[id].removed {
		delete(f.echo, id)
	}
}

// encode translates s into its next FromDataplane message.
func (f *felixStatuses) encode(s engine.Status) (*felix.FromDataplane, error) {
	m := &felix.FromDataplane{}
	switch s := s.(type) {
	case *engine.Heartbeat:
		m.Payload = &felix.FromDataplane_ProcessStatusUpdate{ProcessStatusUpdate: &felix.ProcessStatusUpdate{
			IsoTimestamp: s.Time.UTC().Format(time.RFC3339),
			Uptime:       s.Uptime.Seconds(),
		}}
	case *engine.WorkloadStatus:
		m.Payload = &felix.FromDataplane_WorkloadEndpointStatusUpdate{WorkloadEndpointStatusUpdate: &felix.WorkloadEndpointStatusUpdate{
			Id:       felixWorkloadID(s.ID),
			Status:   &felix.EndpointStatus{Status: s.Status},
			Endpoint: f.endpoint(s.ID),
		}}
	case *engine.WorkloadRemoved:
		f.forget(s.ID)
		m.Payload = &felix.FromDataplane_WorkloadEndpointStatusRemove{WorkloadEndpointStatusRemove: &felix.WorkloadEndpointStatusRemove{
			Id: felixWorkloadID(s.ID),
		}}
	case *engine.HostStatus:
		m.Payload = &felix.FromDataplane_HostEndpointStatusUpdate{HostEndpointStatusUpdate: &felix.HostEndpointStatusUpdate{
			Id:     &felix.HostEndpointID{EndpointId: s.ID},
			Status: &felix.EndpointStatus{Status: s.Status},
		}}
	case *engine.HostRemoved:
		m.Payload = &felix.FromDataplane_HostEndpointStatusRemove{HostEndpointStatusRemove: &felix.HostEndpointStatusRemove{
			Id: &felix.HostEndpointID{EndpointId: s.ID},
		}}
	case *engine.DataplaneInSync:
		m.Payload = &felix.FromDataplane_DataplaneInSync{DataplaneInSync: &felix.DataplaneInSync{}}
	case *engine.HappyReport:
		m.Payload = &felix.FromDataplane_HappyEndpoints{HappyEndpoints: &felix.HappyEndpointsReport{
			Full:    s.Full,
			Added:   felixWorkloadIDs(s.Added),
			Removed: felixWorkloadIDs(s.Removed),
			Happy:   clampUint32(s.Happy),
			Dirty:   clampUint32(s.Dirty),
			Errored: clampUint32(s.Errored),
		}}
	default:
		return nil, fmt.Errorf("encode status: unknown %T", s)
	}
	f.seq++
	m.SequenceNumber = f.seq
	return m, nil
}

func wireWorkloadID(id *felix.WorkloadEndpointID) model.WorkloadID {
	return model.WorkloadID{Orchestrator: id.GetOrchestratorId(), Workload: id.GetWorkloadId(), Endpoint: id.GetEndpointId()}
}

func felixWorkloadID(id model.WorkloadID) *felix.WorkloadEndpointID {
	return &felix.WorkloadEndpointID{OrchestratorId: id.Orchestrator, WorkloadId: id.Workload, EndpointId: id.Endpoint}
}

func felixWorkloadIDs(ids []model.WorkloadID) []*felix.WorkloadEndpointID {
	if len(ids) == 0 {
		return nil
	}
	out := make([]*felix.WorkloadEndpointID, len(ids))
	for i, id := range ids {
		out[i] = felixWorkloadID(id)
	}
	return out
}

func clampUint32(n int) uint32 {
	return uint32(min(max(n, 0), int(^uint32(0))))
}
