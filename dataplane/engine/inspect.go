package engine

// Read-only lists for Inspect. The managers belong to the Run goroutine, so
// each list is built there (query) and handed back as a copy; endpoints and
// the status summary come from the published snapshot instead (snapshot.go).

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// PolicyInfo is one active policy or profile, for Inspect.
type PolicyInfo struct {
	Kind string // "policy" or "profile"
	// Name is the policy key ("[kind:][namespace/]name") or the profile name.
	Name      string
	Namespace string
	// Tiers the endpoints using the policy place it in.
	Tiers                       []string
	InboundRules, OutboundRules int
	Endpoints                   int      // workload endpoints referencing it
	IPSets                      []string // IP sets its rules reference
}

// IPSetInfo is one IP set, for Inspect. Members holds at most the number
// asked for, the smallest addresses first.
type IPSetInfo struct {
	ID          string
	Type        string // "ip", "ip-and-port" or "net"
	MemberCount int
	Members     []string
	Endpoints   int // workload endpoints whose rules reference it
}

// query runs fn on the loop goroutine and waits for it.
func (e *Engine) query(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	select {
	case e.queries <- func() { fn(); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-e.stop:
		return ErrStopped
	}
	<-done // the loop runs a query as soon as it takes it
	return nil
}

// Policies lists the active policies and profiles, sorted by kind and name.
func (e *Engine) Policies(ctx context.Context) ([]PolicyInfo, error) {
	var out []PolicyInfo
	err := e.query(ctx, func() {
		for k, ent := range e.policies.m {
			out = append(out, PolicyInfo{
				Kind: "policy", Name: k.String(), Namespace: k.Namespace,
				Tiers:        e.policyTiers(k),
				InboundRules: len(ent.inbound), OutboundRules: len(ent.outbound),
				Endpoints: len(e.weps.polUsers.users(k)),
				IPSets:    model.ReferencedSets(ent.inbound, ent.outbound),
			})
		}
		for name, ent := range e.profiles.m {
			out = append(out, PolicyInfo{
				Kind: "profile", Name: name,
				InboundRules: len(ent.inbound), OutboundRules: len(ent.outbound),
				Endpoints: len(e.weps.profUsers.users(name)),
				IPSets:    model.ReferencedSets(ent.inbound, ent.outbound),
			})
		}
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out, err
}

// policyTiers names the tiers the endpoints using k place it in.
func (e *Engine) policyTiers(k model.PolicyKey) []string {
	seen := map[string]struct{}{}
	for id := range e.weps.polUsers.users(k) {
		ent := e.weps.eps[id]
		if ent == nil || ent.spec == nil {
			continue
		}
		for _, t := range ent.spec.Tiers {
			if slices.Contains(t.Ingress, k) || slices.Contains(t.Egress, k) {
				seen[t.Name] = struct{}{}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// IPSets lists the IP sets (present ones only), sorted by id, each with at
// most maxMembers members. A non-empty id lists only that set.
func (e *Engine) IPSets(ctx context.Context, id string, maxMembers int) ([]IPSetInfo, error) {
	var out []IPSetInfo
	err := e.query(ctx, func() {
		for sid, s := range e.ipsets.sets {
			if !s.present() || (id != "" && sid != id) {
				continue
			}
			info := IPSetInfo{ID: sid, Type: ipsetTypeName(s.typ), MemberCount: s.memberCount(),
				Endpoints: len(e.weps.setUsers.users(sid))}
			for _, m := range s.firstMembers(maxMembers) {
				info.Members = append(info.Members, MemberString(m))
			}
			out = append(out, info)
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}

func ipsetTypeName(t model.IPSetType) string {
	switch t {
	case model.IPSetIPAndPort:
		return "ip-and-port"
	case model.IPSetNet:
		return "net"
	}
	return "ip"
}

// MemberString prints a member as Felix sends it: an address, a CIDR, or
// "addr,proto:port".
func MemberString(m model.IPSetMember) string {
	s := m.Prefix.String()
	if m.Prefix.IsSingleIP() {
		s = m.Prefix.Addr().String()
	}
	if m.Proto == 0 && m.Port == 0 {
		return s
	}
	return fmt.Sprintf("%s,%s:%d", s, protoName(m.Proto), m.Port)
}

func protoName(p uint8) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 132:
		return "sctp"
	}
	return fmt.Sprint(p)
}

// Services lists the desired services (frontends merged with backends),
// sorted by namespace and name.
func (e *Engine) Services(ctx context.Context) ([]model.Service, error) {
	var out []model.Service
	err := e.query(ctx, func() {
		for _, ent := range e.services.obj.items {
			if ent.desired != nil {
				out = append(out, *ent.desired)
			}
		}
	})
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Key, out[j].Key
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	return out, err
}

// Routes lists the desired routes, sorted by destination.
func (e *Engine) Routes(ctx context.Context) ([]model.Route, error) {
	var out []model.Route
	err := e.query(ctx, func() {
		for _, ent := range e.routes.items {
			if ent.desired != nil {
				out = append(out, *ent.desired)
			}
		}
	})
	sort.Slice(out, func(i, j int) bool { return prefixLess(out[i].Dst, out[j].Dst) })
	return out, err
}

func prefixLess(a, b netip.Prefix) bool {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c < 0
	}
	return a.Bits() < b.Bits()
}

// RouteTypeNames spells a felix RouteType bitmap ("remote-workload",
// "local-host", ...); CIDR_INFO is the zero value.
func RouteTypeNames(types uint32) []string {
	names := []struct {
		bit  uint32
		name string
	}{{1, "remote-workload"}, {2, "remote-host"}, {4, "local-workload"}, {8, "local-host"},
		{16, "remote-tunnel"}, {32, "local-tunnel"}}
	var out []string
	for _, n := range names {
		if types&n.bit != 0 {
			out = append(out, n.name)
		}
	}
	if len(out) == 0 {
		return []string{"cidr-info"}
	}
	return out
}
