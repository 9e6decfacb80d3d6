package engine

import (
	"sort"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// outMsg is a status waiting in the engine's outbox for its session.
type outMsg struct {
	s *session
	m *felix.FromDataplane
}

// send queues m for the active session, if any. It reaches the session at
// the end of the loop iteration, after publish (flushOutbox).
func (e *Engine) send(m *felix.FromDataplane) {
	if s := e.loopSess; s != nil {
		e.outbox = append(e.outbox, outMsg{s: s, m: m})
	}
}

// flushOutbox hands the iteration's statuses to their sessions, in order.
func (e *Engine) flushOutbox() {
	for i, o := range e.outbox {
		o.s.enqueueOut(o.m)
		e.outbox[i] = outMsg{}
	}
	e.outbox = e.outbox[:0]
}

// reporting: the active session has had its first report, so changes are
// sent as they happen.
func (e *Engine) reporting() bool {
	s := e.loopSess
	return s != nil && s.reported && !s.isClosed()
}

func (e *Engine) emitWorkloadStatus(ent *wepEntry) {
	if e.reporting() {
		e.send(workloadStatusMsg(ent))
	}
}

func workloadStatusMsg(ent *wepEntry) *felix.FromDataplane {
	return &felix.FromDataplane{Payload: &felix.FromDataplane_WorkloadEndpointStatusUpdate{
		WorkloadEndpointStatusUpdate: &felix.WorkloadEndpointStatusUpdate{
			Id:     wepFID(ent.id),
			Status: &felix.EndpointStatus{Status: ent.status},
		}}}
}

func (e *Engine) emitWorkloadRemove(ent *wepEntry) {
	if e.reporting() {
		e.send(&felix.FromDataplane{Payload: &felix.FromDataplane_WorkloadEndpointStatusRemove{
			WorkloadEndpointStatusRemove: &felix.WorkloadEndpointStatusRemove{Id: wepFID(ent.id)}}})
	}
}

func (e *Engine) emitHostStatus(h *hepEntry) {
	if e.reporting() {
		e.send(hostStatusMsg(h))
	}
}

func hostStatusMsg(h *hepEntry) *felix.FromDataplane {
	return &felix.FromDataplane{Payload: &felix.FromDataplane_HostEndpointStatusUpdate{
		HostEndpointStatusUpdate: &felix.HostEndpointStatusUpdate{
			Id:     &felix.HostEndpointID{EndpointId: h.id},
			Status: &felix.EndpointStatus{Status: h.status},
		}}}
}

func (e *Engine) emitHostRemove(h *hepEntry) {
	if e.reporting() {
		e.send(&felix.FromDataplane{Payload: &felix.FromDataplane_HostEndpointStatusRemove{
			HostEndpointStatusRemove: &felix.HostEndpointStatusRemove{Id: &felix.HostEndpointID{EndpointId: h.id}}}})
	}
}

// afterApply reports the pass to the active session: after its InSync,
// first the status of every endpoint and the full happy set (once), later
// happy deltas; DataplaneInSync once nothing is failing.
func (e *Engine) afterApply(p *pass) {
	s := e.loopSess
	touched := e.weps.happyTouched
	e.weps.happyTouched = map[model.WorkloadID]struct{}{}
	if s == nil || s.isClosed() || !e.sessInSync {
		return
	}
	if !s.reported {
		e.fullReport(s)
	} else if len(touched) > 0 {
		var added, removed []*felix.WorkloadEndpointID
		for _, id := range sortedIDs(touched) {
			_, happy := e.weps.happy[id]
			_, sent := s.happySent[id]
			switch {
			case happy && !sent:
				s.happySent[id] = struct{}{}
				added = append(added, wepFID(id))
			case sent && !happy:
				delete(s.happySent, id)
				removed = append(removed, wepFID(id))
			}
		}
		if len(added)+len(removed) > 0 {
			e.send(e.happyMsg(false, added, removed))
		}
	}
	if !s.dpInSyncSent && p.failed == 0 && e.failing() == 0 {
		s.dpInSyncSent = true
		e.send(&felix.FromDataplane{Payload: &felix.FromDataplane_DataplaneInSync{DataplaneInSync: &felix.DataplaneInSync{}}})
		e.log.Info("dataplane in sync", "session", s.id)
	}
}

// fullReport sends the session the status of every endpoint and the whole
// happy set.
func (e *Engine) fullReport(s *session) {
	s.reported = true
	var ids []model.WorkloadID
	for id, ent := range e.weps.eps {
		if ent.status != "" && !ent.removed {
			ids = append(ids, id)
		}
	}
	for _, id := range sortIDs(ids) {
		e.send(workloadStatusMsg(e.weps.eps[id]))
	}
	for _, id := range e.heps.sortedIDs(true) {
		if h := e.heps.eps[id]; h.status != "" && !h.removed {
			e.send(hostStatusMsg(h))
		}
	}
	s.happySent = make(map[model.WorkloadID]struct{}, len(e.weps.happy))
	var added []*felix.WorkloadEndpointID
	for _, id := range sortedIDs(e.weps.happy) {
		s.happySent[id] = struct{}{}
		added = append(added, wepFID(id))
	}
	e.send(e.happyMsg(true, added, nil))
}

func (e *Engine) happyMsg(full bool, added, removed []*felix.WorkloadEndpointID) *felix.FromDataplane {
	return &felix.FromDataplane{Payload: &felix.FromDataplane_HappyEndpoints{HappyEndpoints: &felix.HappyEndpointsReport{
		Full:    full,
		Added:   added,
		Removed: removed,
		Happy:   uint32(len(e.weps.happy)),
		Dirty:   uint32(len(e.weps.dirty)),
		Errored: uint32(max(e.weps.counts[statusError], 0)),
	}}}
}

// wepFID builds the Felix id of an endpoint.
func wepFID(id model.WorkloadID) *felix.WorkloadEndpointID {
	return &felix.WorkloadEndpointID{OrchestratorId: id.Orchestrator, WorkloadId: id.Workload, EndpointId: id.Endpoint}
}

func sortedIDs(m map[model.WorkloadID]struct{}) []model.WorkloadID {
	ids := make([]model.WorkloadID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	return sortIDs(ids)
}

func sortIDs(ids []model.WorkloadID) []model.WorkloadID {
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	return ids
}

// heartbeat sends ProcessStatusUpdate when due: HeartbeatFirst after the
// session starts, then every ReportingIntervalSecs.
func (e *Engine) heartbeat(now time.Time) {
	s := e.loopSess
	if s == nil || s.isClosed() || now.Before(s.hbNext) {
		return
	}
	e.send(&felix.FromDataplane{Payload: &felix.FromDataplane_ProcessStatusUpdate{ProcessStatusUpdate: &felix.ProcessStatusUpdate{
		IsoTimestamp: now.UTC().Format(time.RFC3339),
		Uptime:       now.Sub(e.started).Seconds(),
	}}})
	s.hbLast = now
	s.hbNext = now.Add(e.cfg.reportInterval)
}

// rescheduleHeartbeat applies a new reporting interval to the next
// heartbeat instead of waiting out the old one.
func (e *Engine) rescheduleHeartbeat() {
	s := e.loopSess
	if s == nil || s.hbLast.IsZero() {
		return
	}
	if next := s.hbLast.Add(e.cfg.reportInterval); next.Before(s.hbNext) {
		s.hbNext = next
	}
}
