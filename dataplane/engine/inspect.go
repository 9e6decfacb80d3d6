package engine

// Read-only lists for Inspect. The managers belong to the Run goroutine, so
// each list is built there (query) and handed back as a copy; endpoints and
// the status summary come from the published snapshot instead (snapshot.go).

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
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
	// Staged: a staged policy (by its kind), listed but never enforced.
	Staged bool
}

// IPSetInfo is one IP set, for Inspect. Members holds at most the number
// asked for, the smallest addresses first (after the page token, if one
// was given).
type IPSetInfo struct {
	ID          string
	Type        string // "ip", "ip-and-port" or "net"
	MemberCount int
	Members     []string
	Endpoints   int // workload endpoints whose rules reference it
	// NextPage is the token that lists the members after these ones; ""
	// when none follow.
	NextPage string
}

// IPSetQuery selects what IPSets lists.
type IPSetQuery struct {
	ID         string // only this set; "" lists all
	MaxMembers int    // members per set
	MaxTotal   int    // members of all sets together; 0: no bound
	// PageToken is a NextPage from an earlier answer: the members after
	// the last one it showed (of the set ID, which must be given).
	PageToken string
}

// ErrBadPageToken is a page token IPSets did not hand out.
var ErrBadPageToken = errors.New("page token is not one ListIPSets returned")

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
				Staged:    model.IsStagedKind(k.Kind),
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
// most q.MaxMembers members and all together at most q.MaxTotal (0: no
// total bound; the sets past it show none). A page token is the last
// member shown, so a page follows on from where the last one ended even
// when the set changed in between.
func (e *Engine) IPSets(ctx context.Context, q IPSetQuery) ([]IPSetInfo, error) {
	var after *setMember
	if q.PageToken != "" {
		m, err := decodeMemberToken(q.PageToken)
		if err != nil || q.ID == "" {
			return nil, ErrBadPageToken
		}
		after = &m
	}
	var out []IPSetInfo
	err := e.query(ctx, func() {
		var ids []string
		for sid, s := range e.ipsets.sets {
			if s.present() && (q.ID == "" || sid == q.ID) {
				ids = append(ids, sid)
			}
		}
		sort.Strings(ids)
		budget := q.MaxTotal
		for _, sid := range ids {
			s := e.ipsets.sets[sid]
			info := IPSetInfo{ID: sid, Type: ipsetTypeName(s.typ), MemberCount: s.memberCount(),
				Endpoints: len(e.weps.setUsers.users(sid))}
			n := q.MaxMembers
			if q.MaxTotal > 0 {
				n = min(n, budget)
			}
			page, more := s.membersAfter(after, n)
			budget -= len(page)
			for _, m := range page {
				info.Members = append(info.Members, MemberString(m.model()))
			}
			if more && len(page) > 0 {
				info.NextPage = encodeMemberToken(page[len(page)-1])
			}
			out = append(out, info)
		}
	})
	return out, err
}

// A member token is the member's three words, base64url: opaque to
// clients, exact for the engine.
func encodeMemberToken(m setMember) string {
	var b [24]byte
	binary.BigEndian.PutUint64(b[0:], m.hi)
	binary.BigEndian.PutUint64(b[8:], m.lo)
	binary.BigEndian.PutUint64(b[16:], m.meta)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func decodeMemberToken(s string) (setMember, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return setMember{}, err
	}
	if len(b) != 24 {
		return setMember{}, fmt.Errorf("page token of %d bytes", len(b))
	}
	return setMember{hi: binary.BigEndian.Uint64(b[0:]), lo: binary.BigEndian.Uint64(b[8:]), meta: binary.BigEndian.Uint64(b[16:])}, nil
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
