package engine

import (
	"context"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Kernel is the narrow surface through which the engine changes the node.
// Implementations: memkernel (in-memory, dry run and unit tests) and
// dataplane/linux (netlink + BPF). All calls come from the engine's single
// apply goroutine, in dependency order: IP sets, then endpoints (whose
// policy programs reference the sets), then host metadata and VTEPs, then
// routes and services; removals in the reverse order. Every method is
// idempotent: calling it again with the same arguments changes nothing.
type Kernel interface {
	IPSetKernel
	EndpointKernel
	RouteKernel
	ServiceKernel
	TunnelKernel

	// Configure passes the ConfigUpdate key/values the kernel cares about
	// (interface prefix, map sizes, ...). Called before the first apply and
	// whenever the config changes.
	Configure(cfg map[string]string) error
	// EndApply runs at the end of every apply pass: the kernel frees what
	// nothing references any more (unused policy programs, set ids).
	EndApply() error
	// WatchLinks reports interface changes until ctx ends. The engine feeds
	// them into its inbox, so an interface that appears or goes up gets its
	// endpoint (re)programmed.
	WatchLinks(ctx context.Context, report func(model.LinkUpdate)) error
}

// PolicyPreloader is implemented by kernels that can prepare the policy
// programs of many endpoints at once (load them in parallel) before the
// engine applies the endpoints one by one. Preloading is an optimisation:
// ApplyEndpoint must still work for a policy that was not preloaded.
type PolicyPreloader interface {
	PreloadPolicies(eps []*model.Endpoint)
}

// PinnedPolicyAdopter is implemented by kernels that, after a restart,
// enforce with programs an earlier process left until they take them
// over. The engine hands such a kernel the endpoints a pass will apply
// before the pass changes IP sets, so the programs they still compile to
// see those changes (a program not yet taken over may not).
type PinnedPolicyAdopter interface {
	UnclaimedPinnedPolicies() bool
	AdoptPinnedPolicies(eps []*model.Endpoint)
}

// Resyncer is implemented by kernels that skip re-reading kernel state for
// an endpoint whose interface-level settings they programmed and saw
// unchanged since. The engine calls Resync before a periodic full resync,
// so the applies that follow verify everything again and repair drift.
type Resyncer interface {
	Resync()
}

// IPSetKernel programs IP set membership.
type IPSetKernel interface {
	// ReplaceIPSet sets the complete membership of a set.
	ReplaceIPSet(id string, typ model.IPSetType, members []model.IPSetMember) error
	// UpdateIPSet applies a delta to a set previously replaced.
	UpdateIPSet(id string, added, removed []model.IPSetMember) error
	// RemoveIPSet deletes the set and its members.
	RemoveIPSet(id string) error
}

// EndpointKernel programs workload endpoints.
type EndpointKernel interface {
	// Link reports the current state of the named interface.
	Link(name string) model.LinkState
	// ApplyEndpoint makes the kernel enforce ep on ep.Iface: programs
	// attached, policy installed, routes and neighbours in place. When the
	// interface is absent it records ep and returns nil; the endpoint is
	// programmed when the interface appears.
	ApplyEndpoint(ep *model.Endpoint) error
	// RemoveEndpoint removes everything ApplyEndpoint added for ep.
	RemoveEndpoint(ep *model.Endpoint) error
}

// RouteKernel programs routes from RouteUpdate.
type RouteKernel interface {
	ApplyRoute(r *model.Route) error
	RemoveRoute(r *model.Route) error
}

// ServiceKernel programs service frontends and backends.
type ServiceKernel interface {
	ApplyService(s *model.Service) error
	RemoveService(s *model.Service) error
}

// TunnelKernel programs what routes to other nodes depend on: their VXLAN
// tunnel endpoints (felix VXLANTunnelEndpointUpdate/Remove) and addresses
// (HostMetadataUpdate/Remove). Routes may arrive before the VTEP or host
// they need; the kernel programs them once it arrives, and takes them back
// when it goes, so the order of the calls does not matter for correctness.
type TunnelKernel interface {
	// ApplyVTEP adds or replaces node v.Node's VTEP. The local node's VTEP
	// (its name is the ConfigUpdate's FelixHostname) creates the VXLAN
	// device; the others become its FDB and neighbour entries.
	ApplyVTEP(v *model.VTEP) error
	// RemoveVTEP removes the VTEP of node; unknown nodes are not an error.
	RemoveVTEP(node string) error
	// ApplyHostMetadata adds or replaces a node's addresses.
	ApplyHostMetadata(h *model.HostMetadata) error
	// RemoveHostMetadata forgets hostname's addresses.
	RemoveHostMetadata(hostname string) error
}

// HostEndpointKernel is implemented by kernels that enforce host
// endpoints. The engine binds host endpoints to the interfaces the host
// link monitor reports and applies, per bound interface, a model.Endpoint
// whose ID is model.HostIfaceID(host endpoint id, interface) and whose
// Ingress/Egress are the policy for traffic to/from the host itself
// through that interface. Without it, host endpoints are stored and
// reported "error" (not enforced).
type HostEndpointKernel interface {
	// WatchHostLinks reports every interface of the node (any name) with
	// its addresses, all of them first, then changes, until ctx ends.
	WatchHostLinks(ctx context.Context, report func(model.HostLinkUpdate)) error
	// ApplyHostEndpoint makes the kernel enforce ep on the host interface
	// ep.Iface. It never fails an interface closed: a host interface that
	// dpd does not (yet) police passes traffic.
	ApplyHostEndpoint(ep *model.Endpoint) error
	// RemoveHostEndpoint stops enforcing ep on ep.Iface: its traffic is
	// no longer policed.
	RemoveHostEndpoint(ep *model.Endpoint) error
}

// ToHostKernel is implemented by kernels that apply
// DefaultEndpointToHostAction Return: traffic from a workload to the host
// itself is decided by the wildcard host endpoint's ingress policy (as its
// "host-facing side"), which the engine hands over here (nil: there is no
// wildcard host endpoint, and Return accepts).
type ToHostKernel interface {
	ApplyToHostPolicy(pol *model.DirectionPolicy) error
}
