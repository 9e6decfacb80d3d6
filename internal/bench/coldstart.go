package bench

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
)

// coldStart is P3 and P6: a fresh session's snapshot (IP sets, policies,
// endpoints on veths that exist already) until DataplaneInSync, then the
// daemon's peak resident set. It leaves the session open for the next
// phases.
func (r *runner) coldStart(ctx context.Context) error {
	s := r.o.Scale
	snap := policyState(s)
	keys := make([]string, s.Endpoints)
	for i := range s.Endpoints {
		snap = append(snap, endpointUpdate(batchColdStart, i, policyName(i%s.Policies)))
		keys[i] = endpointKey(workloadID(batchColdStart, i))
	}
	bytes := 0
	for _, m := range snap {
		bytes += proto.Size(m)
	}
	r.res.Cold = ColdStart{
		Endpoints: s.Endpoints, Policies: s.Policies, IPSets: s.IPSets, SetMembers: s.SetMembers,
		Messages: len(snap), Bytes: bytes,
	}
	r.progress("P3: cold start, %d messages (%.1f MiB): %d IP sets x %d, %d policies, %d endpoints",
		len(snap), float64(bytes)/(1<<20), s.IPSets, s.SetMembers, s.Policies, s.Endpoints)

	tr := newTracker()
	for _, k := range keys {
		tr.watchUp(k)
	}
	r.ctl = connect(r.d.client, snap, tr)
	ctx, cancel := context.WithTimeout(ctx, s.PhaseTimeout)
	defer cancel()
	inSync, err := tr.awaitInSync(ctx, 1)
	if err != nil {
		return err
	}
	if err := tr.awaitAllUp(ctx, keys); err != nil {
		return err
	}
	start := r.ctl.started()
	var last time.Time
	for _, k := range keys {
		if at, _ := tr.up(k); at.After(last) {
			last = at
		}
	}
	r.res.Cold.InSync, r.res.Cold.AllUp = inSync.Sub(start), last.Sub(start)
	r.progress("P3: DataplaneInSync after %s, all %d endpoints up after %s", round(r.res.Cold.InSync), s.Endpoints, round(r.res.Cold.AllUp))

	peak, cur, err := memory(r.d.pid)
	if err != nil {
		return fmt.Errorf("P6: read dpd's memory: %w", err)
	}
	r.res.Memory = Memory{Pid: r.d.pid, PeakRSS: peak, RSS: cur}
	r.progress("P6: dpd peak RSS %.1f MiB (now %.1f MiB)", float64(peak)/(1<<20), float64(cur)/(1<<20))
	return r.ctl.healthy()
}

// removeEndpoints removes n endpoints of batch and waits until dpd
// reports each gone; it returns how long that took.
func (r *runner) removeEndpoints(ctx context.Context, batch byte, n int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, r.o.Scale.PhaseTimeout)
	defer cancel()
	keys := make([]string, n)
	for i := range n {
		keys[i] = endpointKey(workloadID(batch, i))
		r.ctl.tr.forget(keys[i])
	}
	start := time.Now()
	for i := range n {
		if err := r.ctl.send(endpointRemove(batch, i)); err != nil {
			return 0, err
		}
	}
	if err := r.ctl.tr.awaitRemoved(ctx, keys); err != nil {
		return 0, err
	}
	took := time.Since(start)
	r.progress("removed %d endpoints in %s", n, round(took))
	return took, r.ctl.healthy()
}

// round shortens a duration for progress lines.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
