package model

import (
	"fmt"
	"net/netip"
)

// Update is one controller message, parsed and validated: the engine's only
// input. The set is closed: there is one type below per kind of message the
// engine handles, each a pointer receiver, and the engine switches on them.
type Update interface {
	// Kind names the message as the controller's protocol does (the payload
	// field name, e.g. "workload_endpoint_update"); metrics and logs use it.
	Kind() string
	// Sequence is the controller's sequence number of the message.
	Sequence() uint64
	meta() *Meta
}

// Meta is what every update carries besides its payload.
type Meta struct {
	// Seq is the controller's sequence number (0 when it sent none).
	Seq uint64
}

// Sequence returns m.Seq.
func (m *Meta) Sequence() uint64 { return m.Seq }
func (m *Meta) meta() *Meta      { return m }

// WithSeq sets u's sequence number and returns u.
func WithSeq(u Update, seq uint64) Update {
	u.meta().Seq = seq
	return u
}

// Rejection is a controller message that failed translation: what the
// engine needs to count it and, when it concerns a workload or host
// endpoint whose id was readable, to put that endpoint into status "error".
type Rejection struct {
	Seq      uint64
	Kind     string      // as Update.Kind; "unknown" when unreadable
	Endpoint *WorkloadID // the workload endpoint concerned, if known
	// HostEndpoint is the host endpoint concerned, if known.
	HostEndpoint string
	// Policy and Profile: the policy or profile an update was for, if its
	// id was readable: its users fail closed on it.
	Policy  *PolicyKey
	Profile string
	Reason  string
}

func (r Rejection) String() string {
	if r.Endpoint != nil {
		return fmt.Sprintf("message %d (%s %s): %s", r.Seq, r.Kind, r.Endpoint, r.Reason)
	}
	if r.HostEndpoint != "" {
		return fmt.Sprintf("message %d (%s %s): %s", r.Seq, r.Kind, r.HostEndpoint, r.Reason)
	}
	if r.Policy != nil {
		return fmt.Sprintf("message %d (%s %s): %s", r.Seq, r.Kind, r.Policy, r.Reason)
	}
	if r.Profile != "" {
		return fmt.Sprintf("message %d (%s %s): %s", r.Seq, r.Kind, r.Profile, r.Reason)
	}
	return fmt.Sprintf("message %d (%s): %s", r.Seq, r.Kind, r.Reason)
}

// InSync ends the controller's snapshot: what it did not re-send goes.
type InSync struct{ Meta }

// ConfigUpdate is the controller's whole configuration, key by key.
type ConfigUpdate struct {
	Meta
	Config map[string]string
}

// IPSetUpdate replaces a set's members.
type IPSetUpdate struct {
	Meta
	ID      string
	Type    IPSetType
	Members []IPSetMember
}

// IPSetDeltaUpdate adds and removes members of a known set. The controller
// does not repeat the set's type; Type.Check tells whether a member fits.
type IPSetDeltaUpdate struct {
	Meta
	ID             string
	Added, Removed []IPSetMember
}

// IPSetRemove deletes a set.
type IPSetRemove struct {
	Meta
	ID string
}

// ActivePolicyUpdate stores a policy.
type ActivePolicyUpdate struct {
	Meta
	Policy Policy
}

// ActivePolicyRemove deletes a policy.
type ActivePolicyRemove struct {
	Meta
	Key PolicyKey
}

// ActiveProfileUpdate stores a profile.
type ActiveProfileUpdate struct {
	Meta
	Profile Profile
}

// ActiveProfileRemove deletes a profile.
type ActiveProfileRemove struct {
	Meta
	Name string
}

// WorkloadEndpointUpdate stores a workload endpoint.
type WorkloadEndpointUpdate struct {
	Meta
	Endpoint WorkloadEndpoint
}

// WorkloadEndpointRemove deletes a workload endpoint.
type WorkloadEndpointRemove struct {
	Meta
	ID WorkloadID
}

// HostEndpointUpdate stores a host endpoint.
type HostEndpointUpdate struct {
	Meta
	Endpoint HostEndpoint
}

// HostEndpointRemove deletes a host endpoint.
type HostEndpointRemove struct {
	Meta
	ID string
}

// RouteUpdate stores a route, keyed by its destination.
type RouteUpdate struct {
	Meta
	Route Route
}

// RouteRemove deletes the route to Dst (masked).
type RouteRemove struct {
	Meta
	Dst netip.Prefix
}

// ServiceUpdate stores a service's frontends.
type ServiceUpdate struct {
	Meta
	Service Service // Backends empty: they come in ServiceBackendsUpdate
}

// ServiceRemove deletes a service's frontends.
type ServiceRemove struct {
	Meta
	Key ServiceKey
}

// ServiceBackendsUpdate replaces a service's backends.
type ServiceBackendsUpdate struct {
	Meta
	Key      ServiceKey
	Backends []Backend
}

// ServiceBackendsRemove deletes a service's backends.
type ServiceBackendsRemove struct {
	Meta
	Key ServiceKey
}

// HostMetadataUpdate stores a node's addresses.
type HostMetadataUpdate struct {
	Meta
	Host HostMetadata
}

// HostMetadataRemove deletes a node's addresses.
type HostMetadataRemove struct {
	Meta
	Hostname string
}

// VTEPUpdate stores a node's VXLAN tunnel endpoint.
type VTEPUpdate struct {
	Meta
	VTEP VTEP
}

// VTEPRemove deletes a node's VXLAN tunnel endpoint.
type VTEPRemove struct {
	Meta
	Node string
}

// StoredKind is a kind of object dpd stores and acknowledges but does not
// enforce yet. Its String is the object's name in the controller's
// message kinds ("ipam_pool" of "ipam_pool_update").
type StoredKind uint8

// The stored kinds.
const (
	StoredIPAMPool StoredKind = iota + 1
	StoredNamespace
	StoredServiceAccount
	StoredWireguard
	StoredWireguardV6
	StoredGlobalBGP
	StoredEncapsulation
)

var storedNames = [...]string{
	StoredIPAMPool:       "ipam_pool",
	StoredNamespace:      "namespace",
	StoredServiceAccount: "service_account",
	StoredWireguard:      "wireguard_endpoint",
	StoredWireguardV6:    "wireguard_endpoint_v6",
	StoredGlobalBGP:      "global_bgp_config",
	StoredEncapsulation:  "encapsulation",
}

func (k StoredKind) String() string {
	if int(k) < len(storedNames) && storedNames[k] != "" {
		return storedNames[k]
	}
	return fmt.Sprintf("stored(%d)", uint8(k))
}

// StoredUpdate stores an object of a kind dpd does not enforce yet; Key
// identifies it within its kind ("" for the node-wide ones).
type StoredUpdate struct {
	Meta
	Object StoredKind
	Key    string
	// Labels of a namespace or service account, as sent.
	Labels map[string]string
}

// StoredRemove deletes a stored object.
type StoredRemove struct {
	Meta
	Object StoredKind
	Key    string
}

// Unknown is a message without a payload this build knows: a newer
// controller's addition. It is counted, never applied.
type Unknown struct{ Meta }

// KindUnknown is Unknown's kind, and a Rejection's when the message could
// not be read at all.
const KindUnknown = "unknown"

func (*InSync) Kind() string                 { return "in_sync" }
func (*ConfigUpdate) Kind() string           { return "config_update" }
func (*IPSetUpdate) Kind() string            { return "ipset_update" }
func (*IPSetDeltaUpdate) Kind() string       { return "ipset_delta_update" }
func (*IPSetRemove) Kind() string            { return "ipset_remove" }
func (*ActivePolicyUpdate) Kind() string     { return "active_policy_update" }
func (*ActivePolicyRemove) Kind() string     { return "active_policy_remove" }
func (*ActiveProfileUpdate) Kind() string    { return "active_profile_update" }
func (*ActiveProfileRemove) Kind() string    { return "active_profile_remove" }
func (*WorkloadEndpointUpdate) Kind() string { return "workload_endpoint_update" }
func (*WorkloadEndpointRemove) Kind() string { return "workload_endpoint_remove" }
func (*HostEndpointUpdate) Kind() string     { return "host_endpoint_update" }
func (*HostEndpointRemove) Kind() string     { return "host_endpoint_remove" }
func (*RouteUpdate) Kind() string            { return "route_update" }
func (*RouteRemove) Kind() string            { return "route_remove" }
func (*ServiceUpdate) Kind() string          { return "service_update" }
func (*ServiceRemove) Kind() string          { return "service_remove" }
func (*ServiceBackendsUpdate) Kind() string  { return "service_backends_update" }
func (*ServiceBackendsRemove) Kind() string  { return "service_backends_remove" }
func (*HostMetadataUpdate) Kind() string     { return "host_metadata_update" }
func (*HostMetadataRemove) Kind() string     { return "host_metadata_remove" }
func (*VTEPUpdate) Kind() string             { return "vtep_update" }
func (*VTEPRemove) Kind() string             { return "vtep_remove" }
func (*Unknown) Kind() string                { return KindUnknown }

// Kind is the object's kind with "_update"; the encapsulation message has
// no suffix.
func (u *StoredUpdate) Kind() string {
	if u.Object == StoredEncapsulation {
		return u.Object.String()
	}
	return u.Object.String() + "_update"
}

func (u *StoredRemove) Kind() string { return u.Object.String() + "_remove" }
