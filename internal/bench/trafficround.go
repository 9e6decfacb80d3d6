package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/dpd-dev/dpd/internal/bench/tcpload"
)

// A P7 round: every metric measured once per case, in turns.

// trafficMetricNames name the metrics in the order a round measures them.
var trafficMetricNames = [...]string{"rr", "crr", "bulk"}

type trafficMeasure struct {
	rr, crr, bulk float64
	verdicts      float64 // dpd's ingress policy verdicts per new connection
	// With Options.TrafficBPFStats: the entry programs' run time and runs
	// per new connection.
	bpfPerConn  time.Duration
	runsPerConn float64
}

// trafficPasses is how many times a round goes over the cases of a metric,
// each case measuring a share of the slice per pass. The shared machine's
// speed drifts over hundreds of milliseconds: cases measured in short turns
// meet the same drift, where back-to-back slices of the whole length met
// different parts of it.
const trafficPasses = 5

// trafficTally adds up one case's turns of a round.
type trafficTally struct {
	res      tcpload.Result
	verdicts uint64
	runs     progRun
}

// trafficRound measures each metric once per case: trafficPasses turns of
// d/trafficPasses each, the cases of a metric taking turns, starting with a
// different case each round so that none always follows another.
func (r *runner) trafficRound(ctx context.Context, t *trafficNet, keys []string, d time.Duration, round int) ([]trafficMeasure, error) {
	out := make([]trafficMeasure, len(keys))
	turn := d / trafficPasses
	for metric, name := range trafficMetricNames {
		if !r.o.measures(name) {
			continue
		}
		tally := make([]trafficTally, len(keys))
		for range trafficPasses {
			for k := range keys {
				j := (k + round) % len(keys)
				if err := r.trafficTurn(ctx, t, keys[j], metric, turn, &tally[j]); err != nil {
					return nil, err
				}
			}
		}
		for j, tl := range tally {
			switch metric {
			case 0:
				out[j].rr = tl.res.Rate()
			case 1:
				out[j].crr = tl.res.Rate()
				if trafficCases[trafficCaseIndex(keys[j])].path != pathDPD {
					break
				}
				ops := max(tl.res.Ops, 1)
				out[j].verdicts = float64(tl.verdicts) / float64(ops)
				if t.stats != nil {
					out[j].bpfPerConn = tl.runs.runtime / time.Duration(ops)
					out[j].runsPerConn = float64(tl.runs.runs) / float64(ops)
				}
			case 2:
				out[j].bulk = tl.res.BitsPerSecond()
			}
		}
	}
	return out, nil
}

// trafficTurn measures metric on case key for d and adds it to tl: for
// dpd's path's connection rate also the policy's verdicts and, with
// statistics on, its entry programs' runs, read around the turn.
func (r *runner) trafficTurn(ctx context.Context, t *trafficNet, key string, metric int, d time.Duration, tl *trafficTally) error {
	c := trafficCases[trafficCaseIndex(key)]
	p := t.paths[c.path]
	counted := metric == 1 && c.path == pathDPD
	var verdicts uint64
	var runs progRun
	var err error
	if counted {
		if verdicts, err = r.ingressVerdicts(ctx); err != nil {
			return err
		}
		if t.stats != nil {
			if runs, err = t.stats.read(); err != nil {
				return err
			}
		}
	}
	var res tcpload.Result
	switch metric {
	case 0:
		err = p.client.do(func() (err error) { res, err = tcpload.RequestResponse(p.dst, d); return err })
	case 1:
		err = p.client.do(func() (err error) { res, err = tcpload.ConnectionRate(p.dst, p.src, d); return err })
	case 2:
		err = p.client.do(func() (err error) { res, err = tcpload.Bulk(p.dst, d); return err })
	}
	if err != nil {
		return fmt.Errorf("%s: %w", c.key, err)
	}
	tl.res.Ops += res.Ops
	tl.res.Bytes += res.Bytes
	tl.res.Elapsed += res.Elapsed
	if !counted {
		return nil
	}
	after, err := r.ingressVerdicts(ctx)
	if err != nil {
		return err
	}
	tl.verdicts += after - verdicts
	if t.stats != nil {
		runsAfter, err := t.stats.read()
		if err != nil {
			return err
		}
		tl.runs.runtime += runsAfter.runtime - runs.runtime
		tl.runs.runs += runsAfter.runs - runs.runs
	}
	return nil
}
