package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

func runApply(g *globals, args []string, w io.Writer) error {
	fs := subFlags("apply")
	file := fs.String("f", "", "scenario file (YAML or JSON)")
	failOnError := fs.Bool("fail-on-error", false, "exit 1 if an endpoint of the scenario ends in status error")
	wait := fs.Duration("wait", 30*time.Second, "how long to wait for DataplaneInSync and every endpoint's status")
	if err := parseSub(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return fmt.Errorf("%w: -f FILE is required", errUsage)
	}
	msgs, err := LoadScenario(*file)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *wait)
	defer cancel()
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()

	a := &applier{w: w, inspect: c.Inspect(), expected: expectedEndpoints(msgs), statuses: map[string]string{}}
	if err := a.run(ctx, c.Dataplane(), msgs); err != nil {
		return err
	}
	if errored := a.errored(); *failOnError && len(errored) > 0 {
		return &exitError{code: 1, err: fmt.Errorf("endpoints in error: %v", errored)}
	}
	return nil
}

// expectedEndpoints are the endpoints the scenario leaves in place (its last
// word on them is an update), sorted.
func expectedEndpoints(msgs []*felix.ToDataplane) []string {
	present := map[string]bool{}
	for _, m := range msgs {
		if u := m.GetWorkloadEndpointUpdate(); u != nil {
			present[endpointID(u.GetId())] = true
		} else if r := m.GetWorkloadEndpointRemove(); r != nil {
			present[endpointID(r.GetId())] = false
		}
	}
	var ids []string
	for id, ok := range present {
		if ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// applier sends one scenario and follows the statuses it causes.
type applier struct {
	w        io.Writer
	inspect  dpdv1.InspectClient
	expected []string
	statuses map[string]string // endpoint id -> latest status
	inSync   bool              // DataplaneInSync arrived
}

func (a *applier) run(ctx context.Context, dp dpdv1.DataplaneClient, msgs []*felix.ToDataplane) error {
	stream, err := dp.Sync(ctx)
	if err != nil {
		return fmt.Errorf("open sync stream: %w", err)
	}
	if !slices.ContainsFunc(msgs, func(m *felix.ToDataplane) bool { return m.GetInSync() != nil }) {
		msgs = append(msgs, &felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}})
	}
	for i, m := range msgs {
		m.SequenceNumber = uint64(i + 1)
		if err := stream.Send(m); err != nil {
			break // Recv below reports the stream's status
		}
	}
	for !a.done() {
		m, err := stream.Recv()
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("timed out: %s", a.missing())
			}
			return fmt.Errorf("sync stream: %w", err)
		}
		a.report(ctx, m)
	}
	return nil
}

func (a *applier) report(ctx context.Context, m *felix.FromDataplane) {
	switch {
	case m.GetWorkloadEndpointStatusUpdate() != nil:
		u := m.GetWorkloadEndpointStatusUpdate()
		id, st := endpointID(u.GetId()), u.GetStatus().GetStatus()
		a.statuses[id] = st
		if st == "error" {
			if ep, err := a.inspect.GetEndpoint(ctx, &dpdv1.GetEndpointRequest{Id: id}); err == nil && ep.GetReason() != "" {
				st += ": " + ep.GetReason()
			}
		}
		printf(a.w, "%s %s\n", id, st)
	case m.GetWorkloadEndpointStatusRemove() != nil:
		id := endpointID(m.GetWorkloadEndpointStatusRemove().GetId())
		delete(a.statuses, id)
		printf(a.w, "%s removed\n", id)
	case m.GetDataplaneInSync() != nil:
		a.inSync = true
		printf(a.w, "dataplane in sync\n")
	}
}

func (a *applier) done() bool { return a.inSync && a.missingIDs() == nil }

func (a *applier) missingIDs() []string {
	var ids []string
	for _, id := range a.expected {
		if _, ok := a.statuses[id]; !ok {
			ids = append(ids, id)
		}
	}
	return ids
}

func (a *applier) missing() string {
	var parts []string
	if !a.inSync {
		parts = append(parts, "no DataplaneInSync")
	}
	if ids := a.missingIDs(); ids != nil {
		parts = append(parts, fmt.Sprintf("no status for %v", ids))
	}
	return strings.Join(parts, "; ")
}

func (a *applier) errored() []string {
	var ids []string
	for _, id := range a.expected {
		if a.statuses[id] == "error" {
			ids = append(ids, id)
		}
	}
	return ids
}
