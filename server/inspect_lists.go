package server

import (
	"context"
	"errors"
	"net/netip"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// ListIPSets shows defaultMaxMembers members per set unless asked for
// more, never more than maxMembersPerSet per set or maxMembersTotal in one
// answer: a set can hold millions, and an answer must stay a few hundred
// kilobytes however large the request.
const (
	defaultMaxMembers = 10
	maxMembersPerSet  = 1000
	maxMembersTotal   = 10000
)

// queryError maps an engine query failure to a status.
func queryError(err error) error {
	if errors.Is(err, engine.ErrStopped) {
		return status.Error(codes.Unavailable, "dpd is shutting down")
	}
	return status.FromContextError(err).Err()
}

func (s *inspectService) ListPolicies(ctx context.Context, _ *dpdv1.ListPoliciesRequest) (*dpdv1.ListPoliciesResponse, error) {
	release, err := s.heavy.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	pols, err := s.engine.Policies(ctx)
	if err != nil {
		return nil, queryError(err)
	}
	resp := &dpdv1.ListPoliciesResponse{Policies: make([]*dpdv1.Policy, len(pols))}
	for i, p := range pols {
		resp.Policies[i] = &dpdv1.Policy{
			Kind: p.Kind, Name: p.Name, Namespace: p.Namespace, Tiers: p.Tiers,
			InboundRules: uint32(p.InboundRules), OutboundRules: uint32(p.OutboundRules),
			Endpoints: uint32(p.Endpoints), IpSets: p.IPSets, Staged: p.Staged,
		}
	}
	return resp, nil
}

func (s *inspectService) ListIPSets(ctx context.Context, req *dpdv1.ListIPSetsRequest) (*dpdv1.ListIPSetsResponse, error) {
	limit := min(int64(req.GetMaxMembers()), maxMembersPerSet)
	if limit == 0 {
		limit = defaultMaxMembers
	}
	if req.GetPageToken() != "" && req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "page_token needs the id of the set it pages")
	}
	release, err := s.heavy.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	sets, err := s.engine.IPSets(ctx, engine.IPSetQuery{ID: req.GetId(), MaxMembers: int(limit), MaxTotal: maxMembersTotal, PageToken: req.GetPageToken()})
	if errors.Is(err, engine.ErrBadPageToken) {
		return nil, status.Errorf(codes.InvalidArgument, "page_token: %v", err)
	}
	if err != nil {
		return nil, queryError(err)
	}
	if req.GetId() != "" && len(sets) == 0 {
		return nil, status.Errorf(codes.NotFound, "ip set %q not found", req.GetId())
	}
	resp := &dpdv1.ListIPSetsResponse{IpSets: make([]*dpdv1.IPSet, len(sets))}
	for i, s := range sets {
		resp.IpSets[i] = &dpdv1.IPSet{
			Id: s.ID, Type: s.Type, MemberCount: uint32(s.MemberCount), Members: s.Members,
			Truncated: s.MemberCount > len(s.Members), Endpoints: uint32(s.Endpoints), NextPageToken: s.NextPage,
		}
	}
	return resp, nil
}

func (s *inspectService) ListServices(ctx context.Context, _ *dpdv1.ListServicesRequest) (*dpdv1.ListServicesResponse, error) {
	release, err := s.heavy.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	svcs, err := s.engine.Services(ctx)
	if err != nil {
		return nil, queryError(err)
	}
	resp := &dpdv1.ListServicesResponse{Services: make([]*dpdv1.Service, len(svcs))}
	for i := range svcs {
		resp.Services[i] = serviceProto(&svcs[i])
	}
	return resp, nil
}

func serviceProto(sv *model.Service) *dpdv1.Service {
	out := &dpdv1.Service{
		Namespace: sv.Key.Namespace, Name: sv.Key.Name, Type: sv.Type,
		ClusterIps: addrStrings(sv.ClusterIPs), ExternalIps: addrStrings(sv.ExternalIPs),
	}
	if sv.LoadBalancerIP.IsValid() {
		out.LoadbalancerIp = sv.LoadBalancerIP.String()
	}
	for _, p := range sv.Ports {
		out.Ports = append(out.Ports, &dpdv1.ServicePort{Protocol: protoString(p.Protocol), Port: uint32(p.Port), NodePort: uint32(p.NodePort)})
	}
	for _, b := range sv.Backends {
		out.Backends = append(out.Backends, &dpdv1.ServiceBackend{
			Ip: b.Addr.String(), Port: uint32(b.Port), Protocol: protoString(b.Protocol), PortName: b.PortName, Ready: b.Ready,
		})
	}
	return out
}

func (s *inspectService) ListRoutes(ctx context.Context, _ *dpdv1.ListRoutesRequest) (*dpdv1.ListRoutesResponse, error) {
	release, err := s.heavy.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	routes, err := s.engine.Routes(ctx)
	if err != nil {
		return nil, queryError(err)
	}
	resp := &dpdv1.ListRoutesResponse{Routes: make([]*dpdv1.Route, len(routes))}
	for i, r := range routes {
		pr := &dpdv1.Route{
			Dst: r.Dst.String(), Types: engine.RouteTypeNames(r.Types), DstNodeName: r.DstNodeName,
			PoolType: poolTypeName(r.PoolType), NatOutgoing: r.NATOutgoing, LocalWorkload: r.LocalWorkload,
			SameSubnet: r.SameSubnet,
		}
		if r.DstNodeIP.IsValid() {
			pr.DstNodeIp = r.DstNodeIP.String()
		}
		switch {
		case r.TunnelVXLAN:
			pr.Tunnel = "vxlan"
		case r.TunnelIPIP:
			pr.Tunnel = "ipip"
		}
		resp.Routes[i] = pr
	}
	return resp, nil
}

// poolTypeName spells felix.IPPoolType.
func poolTypeName(t uint8) string {
	switch t {
	case 1:
		return "no-encap"
	case 2:
		return "vxlan"
	case 3:
		return "ipip"
	}
	return "none"
}

func protoString(p uint8) string {
	switch p {
	case protoTCP:
		return "tcp"
	case protoUDP:
		return "udp"
	case 132:
		return "sctp"
	case protoICMP:
		return "icmp"
	}
	return strconv.Itoa(int(p))
}

func addrStrings(as []netip.Addr) []string {
	if len(as) == 0 {
		return nil
	}
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}
