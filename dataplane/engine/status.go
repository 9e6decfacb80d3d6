package engine

import (
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Status is one report from the engine to a controller session: a
// *Heartbeat, *WorkloadStatus, *WorkloadRemoved, *HostStatus,
// *HostRemoved, *DataplaneInSync or *HappyReport. The server translates
// them into its wire's messages; the engine knows no wire types.
type Status interface {
	// key names what the status is about: a newer status with the same
	// key supersedes an unsent older one.
	key() statusKey
}

// statusKey identifies the subject of a Status for coalescing.
type statusKey struct {
	kind     statusKind
	workload model.WorkloadID
	host     string
}

type statusKind uint8

const (
	kindHeartbeat statusKind = iota + 1
	kindWorkload             // WorkloadStatus and WorkloadRemoved share it
	kindHost                 // HostStatus and HostRemoved share it
	kindInSync
	kindHappy
)

// Heartbeat says the engine is alive (Felix's ProcessStatusUpdate).
type Heartbeat struct {
	Time   time.Time
	Uptime time.Duration
}

// WorkloadStatus is a workload endpoint's status: "up", "down" or "error".
type WorkloadStatus struct {
	ID     model.WorkloadID
	Status string
}

// WorkloadRemoved says a workload endpoint is gone from the dataplane.
type WorkloadRemoved struct {
	ID model.WorkloadID
}

// HostStatus is a host endpoint's status: "up" or "down".
type HostStatus struct {
	ID     string
	Status string
}

// HostRemoved says a host endpoint is gone.
type HostRemoved struct {
	ID string
}

// DataplaneInSync says the dataplane has applied the complete snapshot
// that ended with the session's InSync. It is sent once per session.
type DataplaneInSync struct{}

// HappyReport tells which workload endpoints are fully programmed: the
// whole set when Full, else what changed since the previous report. No
// endpoint is in both Added and Removed. Happy, Dirty and Errored are the
// engine's counts when the report was made.
type HappyReport struct {
	Full           bool
	Added, Removed []model.WorkloadID
	Happy, Dirty   int
	Errored        int
}

func (*Heartbeat) key() statusKey         { return statusKey{kind: kindHeartbeat} }
func (s *WorkloadStatus) key() statusKey  { return statusKey{kind: kindWorkload, workload: s.ID} }
func (s *WorkloadRemoved) key() statusKey { return statusKey{kind: kindWorkload, workload: s.ID} }
func (s *HostStatus) key() statusKey      { return statusKey{kind: kindHost, host: s.ID} }
func (s *HostRemoved) key() statusKey     { return statusKey{kind: kindHost, host: s.ID} }
func (*DataplaneInSync) key() statusKey   { return statusKey{kind: kindInSync} }
func (*HappyReport) key() statusKey       { return statusKey{kind: kindHappy} }
