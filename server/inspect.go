package server

import (
	"context"
	"os"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// inspectService implements dpd.v1.Inspect from the engine's read-only
// views.
type inspectService struct {
	dpdv1.UnimplementedInspectServer
	engine  Engine
	eps     engine.EndpointInspector // nil when the kernel says nothing of endpoints
	kernel  engine.KernelInspector   // nil when it runs no programs (memory)
	heavy   *callLimiter             // bounds the calls that grow with the state
	version string
	dpName  string
	started time.Time
}

// newInspectService serves Inspect over eng and what kernel can answer.
func newInspectService(eng Engine, kernel any, version, dpName string) *inspectService {
	s := &inspectService{engine: eng, version: version, dpName: dpName, started: time.Now(),
		heavy: newCallLimiter(heavyCalls, heavyWait)}
	s.eps, _ = kernel.(engine.EndpointInspector)
	s.kernel, _ = kernel.(engine.KernelInspector)
	return s
}

func (s *inspectService) GetStatus(context.Context, *dpdv1.GetStatusRequest) (*dpdv1.GetStatusResponse, error) {
	st := s.engine.Status()
	name := st.Dataplane
	if name == "" {
		name = s.dpName
	}
	forwarding, peer := s.workloadForwarding()
	return &dpdv1.GetStatusResponse{
		Version:   s.version,
		Pid:       int32(os.Getpid()),
		Started:   timestamp(s.started),
		Dataplane: name,
		Session: &dpdv1.ControllerSession{
			Connected:        st.Connected,
			Id:               st.SessionID,
			Peer:             st.SessionPeer,
			Since:            timestamp(st.SessionSince),
			MessagesReceived: st.MessagesReceived,
			InvalidMessages:  st.InvalidMessages,
		},
		ControllerInSync: st.ControllerInSync,
		DataplaneInSync:  st.DataplaneInSync,
		Counts: &dpdv1.Counts{
			Endpoints:      uint32(st.Endpoints),
			EndpointsUp:    uint32(st.Up),
			EndpointsDown:  uint32(st.Down),
			EndpointsError: uint32(st.Errored),
			EndpointsDirty: uint32(st.Dirty),
			Policies:       uint32(st.Policies),
			Profiles:       uint32(st.Profiles),
			IpSets:         uint32(st.IPSets),
			Routes:         uint32(st.Routes),
			Services:       uint32(st.Services),
			HostEndpoints:  uint32(st.HostEndpoints),
		},
		LastApply:      timestamp(st.LastApply),
		LastApplyError: st.LastApplyError,
		Attach:         s.attachInfo(),

		WorkloadForwarding:   forwarding,
		WorkloadRedirectPeer: peer,
	}, nil
}

// workloadForwarding is how packets between workloads travel and whether
// established flows' go into the destination's namespace; empty for
// kernels that do not choose.
func (s *inspectService) workloadForwarding() (string, bool) {
	if f, ok := s.kernel.(engine.ForwardingInspector); ok {
		return f.WorkloadForwarding(), f.WorkloadRedirectPeer()
	}
	return "", false
}

// attachInfo is the kernel's attach mode and costs; nil for kernels that
// run no programs.
func (s *inspectService) attachInfo() *dpdv1.AttachInfo {
	if s.kernel == nil {
		return nil
	}
	a := s.kernel.AttachInfo()
	out := &dpdv1.AttachInfo{Mode: a.Mode, Reason: a.Reason}
	for _, c := range a.Costs {
		out.Costs = append(out.Costs, &dpdv1.KernelCost{Op: c.Op, ProbeSeconds: c.Probe.Seconds(),
			ObservedMeanSeconds: c.ObservedMean.Seconds(), ObservedCount: c.ObservedCount})
	}
	return out
}

func (s *inspectService) ListEndpoints(ctx context.Context, _ *dpdv1.ListEndpointsRequest) (*dpdv1.ListEndpointsResponse, error) {
	release, err := s.heavy.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	eps := s.engine.Endpoints()
	resp := &dpdv1.ListEndpointsResponse{Endpoints: make([]*dpdv1.Endpoint, len(eps))}
	for i := range eps {
		resp.Endpoints[i] = s.endpoint(&eps[i], false)
	}
	return resp, nil
}

func (s *inspectService) GetEndpoint(_ context.Context, req *dpdv1.GetEndpointRequest) (*dpdv1.Endpoint, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id is required")
	}
	ep, ok := s.engine.Endpoint(req.GetId())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "endpoint %q not found", req.GetId())
	}
	return s.endpoint(&ep, true), nil
}

// endpoint adds what the kernel knows of ep: interface index, attach
// mode, installed programs and, if asked and counted, its rule counters.
func (s *inspectService) endpoint(ep *engine.EndpointInfo, counters bool) *dpdv1.Endpoint {
	out := endpointProto(ep)
	if s.eps == nil {
		return out
	}
	if det, ok := s.eps.EndpointDetails(ep.Iface); ok {
		out.Ifindex = int32(det.Ifindex)
		out.AttachMode = det.AttachMode
		out.IngressProgram = det.IngressProgram
		out.EgressProgram = det.EgressProgram
		out.KernelReady = det.Ready
	}
	if counters && s.kernel != nil {
		out.Counters = readCounters(s.kernel, ruleTable(s.kernel, []engine.EndpointInfo{*ep}), false, false)
	}
	return out
}

func endpointProto(ep *engine.EndpointInfo) *dpdv1.Endpoint {
	return &dpdv1.Endpoint{
		Id: &felix.WorkloadEndpointID{
			OrchestratorId: ep.ID.Orchestrator,
			WorkloadId:     ep.ID.Workload,
			EndpointId:     ep.ID.Endpoint,
		},
		Interface:      ep.Iface,
		Status:         ep.Status,
		Reason:         ep.Reason,
		LastProgrammed: timestamp(ep.LastProgrammed),
		Ipv4Nets:       ep.IPv4Nets,
		Ipv6Nets:       ep.IPv6Nets,
		ProfileIds:     ep.ProfileIDs,
		Tiers:          ep.Tiers,
		Dirty:          ep.Dirty,
	}
}

// timestamp leaves unset times unset rather than sending year 1.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
