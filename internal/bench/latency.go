package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// endpointLatency is P1 for one batch. Endpoints arrive the way a CNI
// plugin and a controller bring them: every Pace the veth is created, then
// the WorkloadEndpointUpdate is sent at once (dpd learns of the interface
// and of the endpoint concurrently, as on a node). Each endpoint's latency
// runs from its Send to the "up" status on the stream. The arrivals are
// paced, not back to back, so an endpoint's figure is its own work and not
// a queue behind the previous ones.
func (r *runner) endpointLatency(ctx context.Context, batch byte, policy func(i int) string) (Latencies, error) {
	s := r.o.Scale
	n := s.Endpoints
	keys := make([]string, n)
	sent := make([]time.Time, n)
	distinct := map[string]bool{}
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := range n {
		timer.Reset(time.Until(start.Add(time.Duration(i) * s.Pace)))
		select {
		case <-ctx.Done():
			return Latencies{}, context.Cause(ctx)
		case <-timer.C:
		}
		if err := r.node.addVeth(batch, i); err != nil {
			return Latencies{}, err
		}
		keys[i] = endpointKey(workloadID(batch, i))
		r.ctl.tr.watchUp(keys[i])
		distinct[policy(i)] = true
		sent[i] = time.Now()
		if err := r.ctl.send(endpointUpdate(batch, i, policy(i))); err != nil {
			return Latencies{}, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, s.PhaseTimeout)
	defer cancel()
	err := r.ctl.tr.awaitAllUp(wctx, keys)
	if err != nil && (ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded)) {
		return Latencies{}, err
	}
	// Endpoints still not up after the deadline count as missing: the
	// figure says so rather than the run failing without one.
	var samples []time.Duration
	downFirst := 0
	for i, k := range keys {
		if up, ok := r.ctl.tr.up(k); ok {
			samples = append(samples, up.Sub(sent[i]))
		}
		if r.ctl.tr.wasDown(k) {
			downFirst++
		}
	}
	l := newLatencies(samples)
	l.DownFirst = downFirst
	l.Endpoints, l.Policies, l.Pace, l.Missing, l.Waited = n, len(distinct), s.Pace, n-len(samples), s.PhaseTimeout
	if l.Missing > 0 {
		l.MissingWhy = r.whyNotUp(ctx, batch, n)
		r.progress("P1: %d of %d endpoints not up %s after the last was sent; dpd says: %v", l.Missing, n, s.PhaseTimeout, l.MissingWhy)
	}
	return l, r.ctl.healthy()
}

// whyNotUp asks dpd for the status and reason of each endpoint of batch
// that never reported up, counted by reason (interface names elided).
func (r *runner) whyNotUp(ctx context.Context, batch byte, n int) map[string]int {
	why := map[string]int{}
	ic := r.d.client.Inspect()
	for i := range n {
		key := endpointKey(workloadID(batch, i))
		if _, ok := r.ctl.tr.up(key); ok {
			continue
		}
		ep, err := ic.GetEndpoint(ctx, &dpdv1.GetEndpointRequest{Id: key})
		var reason string
		switch {
		case err == nil:
			reason = ep.GetStatus() + ": " + strings.ReplaceAll(ep.GetReason(), ifaceName(batch, i), "<iface>")
		case status.Code(err) == codes.NotFound:
			// Inspect shows what the engine loop last published.
			reason = "unknown to dpd: its update not yet taken from the engine's inbox"
		default:
			reason = "no answer: " + status.Code(err).String()
		}
		why[reason]++
	}
	return why
}

// p1 runs both P1 variants: every endpoint with a policy of its own (each
// compiles and loads two programs) and every endpoint with the shared
// policy (its programs are loaded already). Each batch is removed after.
func (r *runner) p1(ctx context.Context) error {
	s := r.o.Scale
	variants := []struct {
		label  string
		batch  byte
		policy func(int) string
		out    *Latencies
	}{
		{"own policy each", batchOwnPolicy, func(i int) string { return policyName(i % s.Policies) }, &r.res.Own},
		{"shared policy", batchShared, func(int) string { return sharedPolicy }, &r.res.Shared},
	}
	for _, v := range variants {
		r.awaitIdle(ctx, r.d.pid, 30*time.Second)
		r.progress("P1 (%s): %d endpoints, one every %s", v.label, s.Endpoints, s.Pace)
		l, err := r.endpointLatency(ctx, v.batch, v.policy)
		if err != nil {
			return fmt.Errorf("P1 (%s): %w", v.label, err)
		}
		r.progress("P1 (%s): p50 %s, p99 %s, max %s", v.label, quantileText(l, 0.5), quantileText(l, 0.99), quantileText(l, 1))
		*v.out = l
		if v.out.Teardown, err = r.removeEndpoints(ctx, v.batch, s.Endpoints); err != nil {
			if ctx.Err() != nil {
				return err
			}
			// The next phase uses endpoints of its own; a daemon this
			// slow is a finding, not a reason to measure nothing more.
			r.warn("P1 (%s): removing the endpoints: %v", v.label, err)
		}
		r.deleteVeths(v.batch)
	}
	return nil
}

// quantileText is a quantile for progress lines and reports.
func quantileText(l Latencies, q float64) string {
	d, ok := l.Quantile(q)
	if !ok {
		return "> " + l.Waited.String()
	}
	return fmtDur(d)
}
