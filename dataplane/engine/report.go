package engine

import (
	"sort"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// outMsg is a status waiting in the engine's outbox for its session.
type outMsg struct {
	s *session
	m Status
}

// send queues m for the active session, if any. It reaches the session at
// the end of the loop iteration, after publish (flushOutbox).
func (e *Engine) send(m Status) {
	if s := e.loopSess; s != nil {
		e.outbox = append(e.outbox, outMsg{s: s, m: m})
	}
}

// flushOutbox hands the iteration's statuses to their sessions, in order.
// A session may hold one status per endpoint the engine knows (a full
// report) plus Options.MaxPendingStatuses more, which only endpoints that
// came and went while the reader stayed behind can fill.
func (e *Engine) flushOutbox() {
	if len(e.outbox) == 0 {
		return
	}
	limit := e.opts.MaxPendingStatuses + len(e.weps.eps) + len(e.heps.eps)
	for i, o := range e.outbox {
		o.s.enqueueOut(o.m, limit)
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
		e.send(&WorkloadStatus{ID: ent.id, Status: ent.status})
	}
}

func (e *Engine) emitWorkloadRemove(ent *wepEntry) {
	if e.reporting() {
		e.send(&WorkloadRemoved{ID: ent.id})
	}
}

func (e *Engine) emitHostStatus(id string, h *hepEntry) {
	if e.reporting() {
		e.send(&HostStatus{ID: id, Status: h.status})
	}
}

func (e *Engine) emitHostRemove(id string) {
	if e.reporting() {
		e.send(&HostRemoved{ID: id})
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
		var added, removed []model.WorkloadID
		for _, id := range sortedIDs(touched) {
			_, happy := e.weps.happy[id]
			_, sent := s.happySent[id]
			switch {
			case happy && !sent:
				s.happySent[id] = struct{}{}
				added = append(added, id)
			case sent && !happy:
				delete(s.happySent, id)
				removed = append(removed, id)
			}
		}
		if len(added)+len(removed) > 0 {
			e.send(e.happyReport(false, added, removed))
		}
	}
	if !s.dpInSyncSent && p.failed == 0 && e.failing() == 0 {
		s.dpInSyncSent = true
		e.send(&DataplaneInSync{})
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
		e.send(&WorkloadStatus{ID: id, Status: e.weps.eps[id].status})
	}
	for _, id := range e.heps.sortedIDs(true) {
		if h := e.heps.eps[id]; h.status != "" && !h.removed {
			e.send(&HostStatus{ID: id, Status: h.status})
		}
	}
	s.happySent = make(map[model.WorkloadID]struct{}, len(e.weps.happy))
	added := sortedIDs(e.weps.happy)
	for _, id := range added {
		s.happySent[id] = struct{}{}
	}
	e.send(e.happyReport(true, added, nil))
}

func (e *Engine) happyReport(full bool, added, removed []model.WorkloadID) *HappyReport {
	return &HappyReport{
		Full:    full,
		Added:   added,
		Removed: removed,
		Happy:   len(e.weps.happy),
		Dirty:   len(e.weps.dirty),
		Errored: max(e.weps.counts[statusError], 0),
	}
}

func sortedIDs(m map[model.WorkloadID]struct{}) []model.WorkloadID {
	ids := make([]model.WorkloadID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	return sortIDs(ids)
}

// sortIDs sorts ids by their String form, built once per id: a happy
// report pending for a controller that is behind can list thousands, and
// it is merged and sorted again on every apply.
func sortIDs(ids []model.WorkloadID) []model.WorkloadID {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = id.String()
	}
	sort.Sort(idsByKey{ids, keys})
	return ids
}

type idsByKey struct {
	ids  []model.WorkloadID
	keys []string
}

func (s idsByKey) Len() int           { return len(s.ids) }
func (s idsByKey) Less(i, j int) bool { return s.keys[i] < s.keys[j] }
func (s idsByKey) Swap(i, j int) {
	s.ids[i], s.ids[j] = s.ids[j], s.ids[i]
	s.keys[i], s.keys[j] = s.keys[j], s.keys[i]
}

// heartbeat sends ProcessStatusUpdate when due: HeartbeatFirst after the
// session starts, then every ReportingIntervalSecs.
func (e *Engine) heartbeat(now time.Time) {
	s := e.loopSess
	if s == nil || s.isClosed() || now.Before(s.hbNext) {
		return
	}
	e.send(&Heartbeat{Time: now, Uptime: now.Sub(e.started)})
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
