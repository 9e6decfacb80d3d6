package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// fanout is P2. Every endpoint of the cold start moves onto the one shared
// policy (untimed), then that policy changes: its first inbound rule turns
// from deny to allow for TCP to flipPort. A sample of endpoints, spread
// over the order dpd applies them in, is traced (Inspect Trace runs the
// attached program on a crafted packet) until each says allow; P2 is the
// time from sending the change to the last sampled flip.
func (r *runner) fanout(outer context.Context) error {
	s := r.o.Scale
	ctx, cancel := context.WithTimeout(outer, s.PhaseTimeout)
	defer cancel()
	n := s.Endpoints
	keys := make([]string, n)
	for i := range n {
		keys[i] = endpointKey(workloadID(batchColdStart, i))
	}
	r.res.Fanout = Fanout{Endpoints: n, Sampled: s.TraceSample}
	f := &r.res.Fanout

	start := time.Now()
	for i := range n {
		if err := r.ctl.send(endpointUpdate(batchColdStart, i, sharedPolicy)); err != nil {
			return err
		}
	}
	before, err := r.awaitOneProgram(ctx, keys, "")
	if err != nil {
		return fmt.Errorf("moving endpoints onto the shared policy: %w", err)
	}
	f.Prepare, f.ProgramsBefore = time.Since(start), 1
	r.progress("P2: %d endpoints share ingress program %s (moved in %s)", n, before, round(f.Prepare))

	r.awaitIdle(ctx, r.d.pid, 30*time.Second)
	ic := r.d.client.Inspect()
	sample := sampleIndexes(n, s.TraceSample)
	var rtts []time.Duration
	for _, i := range sample {
		t0 := time.Now()
		resp, err := ic.Trace(ctx, flipTrace(i))
		if err != nil {
			return fmt.Errorf("trace %s: %w", keys[i], err)
		}
		rtts = append(rtts, time.Since(t0))
		if resp.GetVerdict() != "deny" {
			return fmt.Errorf("trace %s before the change: %s (%s), want deny", keys[i], resp.GetVerdict(), resp.GetExplanation())
		}
	}
	slices.Sort(rtts)
	f.TraceRTT = rtts[len(rtts)/2]

	sent := time.Now()
	if err := r.ctl.send(sharedPolicyUpdate(true)); err != nil {
		return err
	}
	arrivals, lastDeny, err := pollFlips(ctx, ic, sample, "allow")
	if err != nil {
		return err
	}
	flips := make([]time.Duration, len(arrivals))
	for j, at := range arrivals {
		flips[j] = at.Sub(sent)
	}
	f.FirstFlip, f.LastFlip = slices.Min(flips), slices.Max(flips)
	if !lastDeny.IsZero() {
		f.LastDeny = lastDeny.Sub(sent)
	}
	after, err := r.awaitOneProgram(ctx, keys, before)
	if err != nil {
		return fmt.Errorf("after the policy change: %w", err)
	}
	f.AllChecked, f.ProgramsAfter = time.Since(sent), 1
	if bad := r.ctl.tr.notUp(keys); len(bad) > 0 {
		return fmt.Errorf("after the policy change the stream reports %d endpoints not up: %v", len(bad), bad[:min(len(bad), 5)])
	}
	if h := r.ctl.tr.happyCount(); int(h) != n {
		return fmt.Errorf("after the policy change the stream reports %d happy endpoints, want %d", h, n)
	}
	r.progress("P2: sampled endpoints enforce the change after %s..%s, the last deny traced at %s (trace round trip %s); all %d on program %s by %s",
		round(f.FirstFlip), round(f.LastFlip), round(f.LastDeny), round(f.TraceRTT), n, after, round(f.AllChecked))
	if err := r.moreChanges(outer, ic, sample); err != nil {
		return err
	}
	return r.ctl.healthy()
}

// moreChanges times Scale.FanoutChanges more changes of the shared
// policy, each once the node is quiet: the rule turns back to deny, then
// to allow again, and so on, each the last sampled flip from its send.
func (r *runner) moreChanges(ctx context.Context, ic dpdv1.InspectClient, sample []int) error {
	f := &r.res.Fanout
	// The quiet wait before each change may take its 30 s on a busy
	// machine: each change has a phase timeout of its own.
	defer r.awaitIdle(ctx, r.d.pid, 30*time.Second) // the last change's pass ends before the next phase
	for k := range r.o.Scale.FanoutChanges {
		r.awaitIdle(ctx, r.d.pid, 30*time.Second)
		allow := k%2 == 1
		want := map[bool]string{true: "allow", false: "deny"}[allow]
		cctx, cancel := context.WithTimeout(ctx, r.o.Scale.PhaseTimeout)
		sent := time.Now()
		if err := r.ctl.send(sharedPolicyUpdate(allow)); err != nil {
			cancel()
			return err
		}
		arrivals, _, err := pollFlips(cctx, ic, sample, want)
		cancel()
		if err != nil {
			return fmt.Errorf("change %d: %w", k+2, err)
		}
		var last time.Duration
		for _, at := range arrivals {
			last = max(last, at.Sub(sent))
		}
		f.Changes = append(f.Changes, last)
		r.progress("P2 change %d (to %s): last sampled flip %s", k+2, want, round(last))
	}
	return nil
}

// flipTrace is the packet whose verdict the change flips: TCP to flipPort
// into workload i.
func flipTrace(i int) *dpdv1.TraceRequest {
	return &dpdv1.TraceRequest{
		Endpoint: endpointKey(workloadID(batchColdStart, i)), Direction: "ingress", Protocol: "tcp",
		SrcIp: "10.200.0.1", SrcPort: 40000, DstPort: flipPort,
	}
}

// sampleIndexes spreads k indexes over 0..n-1, both ends included: dpd
// applies endpoints in id order, so the last one is the last to flip.
func sampleIndexes(n, k int) []int {
	if k == 1 {
		return []int{n - 1}
	}
	out := make([]int, k)
	for j := range k {
		out[j] = j * (n - 1) / (k - 1)
	}
	return slices.Compact(out)
}

// pollFlips traces each sampled endpoint, each in a poller of its own,
// until its verdict is want, and returns when each did (the arrival of
// the first such answer) and when the last trace still answering the old
// verdict started. With one poller per sample a flip shows with that sample's
// next trace: with fewer, a poller's samples are traced in turn and a flip
// shows only when the round comes back to it (2 pollers for 20 samples
// read P2 11.6-13.5 ms where every endpoint had flipped by 4.4-4.8 ms).
// dpd admits 4 heavy Inspect calls at once and queues the rest for up to
// 2 s; a call it turns away as busy is asked again.
func pollFlips(ctx context.Context, ic dpdv1.InspectClient, sample []int, want string) (flips []time.Time, lastDeny time.Time, err error) {
	flips = make([]time.Time, len(sample))
	denied := make([]time.Time, len(sample)) // start of each sample's last deny answer
	errs := make([]error, len(sample))
	var wg sync.WaitGroup
	for j, ep := range sample {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t0 := time.Now()
				resp, err := ic.Trace(ctx, flipTrace(ep))
				if status.Code(err) == codes.ResourceExhausted && ctx.Err() == nil {
					continue // busy: the queue waited out its 2 s
				}
				if err != nil {
					errs[j] = fmt.Errorf("trace after the change: %w", err)
					return
				}
				if resp.GetVerdict() == want {
					flips[j] = time.Now()
					return
				}
				denied[j] = t0
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, time.Time{}, err
		}
	}
	for _, d := range denied {
		if d.After(lastDeny) {
			lastDeny = d
		}
	}
	return flips, lastDeny, nil
}

// awaitOneProgram polls Inspect until every endpoint of keys is up, clean
// and runs one and the same ingress program, other than not; it returns
// that program.
func (r *runner) awaitOneProgram(ctx context.Context, keys []string, not string) (string, error) {
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[k] = true
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	ic := r.d.client.Inspect()
	last := "no answer yet"
	for {
		resp, err := ic.ListEndpoints(ctx, &dpdv1.ListEndpointsRequest{})
		if err != nil {
			return "", fmt.Errorf("list endpoints: %w (%s)", err, last)
		}
		progs, done := map[string]int{}, 0
		for _, ep := range resp.GetEndpoints() {
			if !want[endpointKey(ep.GetId())] || ep.GetStatus() != "up" || ep.GetDirty() {
				continue
			}
			progs[ep.GetIngressProgram()]++
			done++
		}
		if done == len(keys) && len(progs) == 1 {
			for p := range progs {
				if p != "" && p != not {
					return p, nil
				}
			}
		}
		last = fmt.Sprintf("%d of %d endpoints up and clean, on %d ingress programs", done, len(keys), len(progs))
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w: %s", context.Cause(ctx), last)
		case <-tick.C:
		}
	}
}
