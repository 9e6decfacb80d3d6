package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// ruleEntry is one counter id of the installed programs and the endpoints
// whose programs contain it (programs are shared, and so are counters).
type ruleEntry struct {
	ref       *dpdv1.RuleRef
	endpoints []string
}

// ruleTable collects the counter tables of eps' installed programs, in
// evaluation order per endpoint and direction, each counter id once.
func ruleTable(kv engine.EndpointInspector, eps []engine.EndpointInfo) []*ruleEntry {
	var out []*ruleEntry
	byID := map[uint64]*ruleEntry{}
	for i := range eps {
		ep := &eps[i]
		for _, dir := range []model.Direction{model.Ingress, model.Egress} {
			rules, ok := kv.Rules(ep.Iface, dir)
			if !ok {
				continue
			}
			for _, r := range rules {
				ent := byID[r.CounterID]
				if ent == nil {
					ent = &ruleEntry{ref: ruleRef(r, dir)}
					byID[r.CounterID] = ent
					out = append(out, ent)
				}
				id := ep.ID.String()
				if n := len(ent.endpoints); n == 0 || ent.endpoints[n-1] != id {
					ent.endpoints = append(ent.endpoints, id)
				}
			}
		}
	}
	return out
}

// readCounters reads every entry's counter. A counter the kernel has no
// entry for reads as zero (it was never created or already collected).
func readCounters(kv engine.KernelInspector, table []*ruleEntry, withEndpoints, nonzero bool) []*dpdv1.RuleCounter {
	out := make([]*dpdv1.RuleCounter, 0, len(table))
	for _, ent := range table {
		c, err := kv.ReadCounter(ent.ref.GetCounterId())
		if err != nil {
			c = model.RuleCounter{}
		}
		pk, by := c.Packets, c.Bytes
		if nonzero && pk == 0 {
			continue
		}
		rc := &dpdv1.RuleCounter{Rule: ent.ref, Packets: pk, Bytes: by}
		if withEndpoints {
			rc.Endpoints = ent.endpoints
		}
		out = append(out, rc)
	}
	return out
}

func (s *inspectService) GetCounters(ctx context.Context, req *dpdv1.GetCountersRequest) (*dpdv1.GetCountersResponse, error) {
	if s.kernel == nil {
		return nil, needsLinux("counters")
	}
	release, err := s.heavy.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	eps := s.engine.Endpoints()
	if id := req.GetEndpoint(); id != "" {
		ep, ok := s.engine.Endpoint(id)
		if !ok {
			return nil, status.Errorf(codes.NotFound, "endpoint %q not found", id)
		}
		eps = []engine.EndpointInfo{ep}
	}
	table := ruleTable(s.kernel, eps)
	return &dpdv1.GetCountersResponse{Counters: readCounters(s.kernel, table, true, req.GetNonzero())}, nil
}
