package linux

import (
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
)

// The programmers reach the kernel only through these narrow facilities,
// one per kind of kernel object they write, so that each programmer can be
// tested without root against a fake that records operations
// (fakekernel_test.go). facilities_real.go binds them to dataplane/tcbpf,
// polprog and dataplane/linux/nl.

// linkFacility is what is known of the node's interfaces: the monitor's
// cache (ahead of its reports) and direct lookups for adoption and GC.
type linkFacility interface {
	Ifindex(name string) (int, bool)
	Matches(name string) bool
	// LinkName is the name of ifindex; an error isNoDevice accepts when
	// the interface does not exist.
	LinkName(ifindex int) (string, error)
	// Links lists every interface of the namespace.
	Links() ([]linkRef, error)
}

// linkRef names one interface.
type linkRef struct {
	Name    string
	Ifindex int
}

// entryFacility attaches dpd's entry programs and writes the maps they
// read per interface: dpd_ifstate and the policy slots of dpd_jump.
type entryFacility interface {
	Attach(ifindex int, ifname string) (tcbpf.AttachMode, error)
	AttachedCurrent(ifindex int, ifname string) (tcbpf.AttachMode, bool)
	Detach(ifindex int, ifname string) error
	RemoveLinkPins(ifname string) error
	PinnedLinks() ([]string, error)
	EntryOwners(ifindex int) (ours, foreign bool, err error)
	OwnsAttachment(ifindex int) (bool, error)

	SetIfState(ifindex int, slot, flags uint32) error
	DeleteIfState(ifindex int) error
	IfStates() (map[int]tcbpf.IfStateEntry, error)

	InstallPolicy(slot uint32, dir int, p loadedProgram) error
	ClearPolicy(slot uint32, dir int) error
	Policies() ([]tcbpf.PolicyEntry, error)
}

// endpointNet writes an endpoint's routes, neighbours and sysctls.
type endpointNet interface {
	ConfigureEndpoint(iface string, ifindex int, mac net.HardwareAddr, nets []netip.Prefix) error
	ConfigureNewEndpoint(iface string, ifindex int, mac net.HardwareAddr, nets []netip.Prefix) error
	UnconfigureEndpoint(iface string, nets []netip.Prefix) error
	ListDpdRoutes() ([]netlink.Route, error)
}

// loadedProgram is a policy program this process loaded or adopted.
type loadedProgram interface {
	Head() *ebpf.Program
	Rules() []polprog.RuleInfo
	Pin(dir string) error
	PinDir() string
	Unpin() error
	Close() error
	Abandon()
	// DirectEpilogue: the program tail-calls the epilogue directly.
	DirectEpilogue() bool
}

// pinnedProgram is a policy program an earlier dpd pinned.
type pinnedProgram interface {
	HeadID() ebpf.ProgramID
	Dir() string
	Release(unpin bool) error
	Unpin() error
	Abandon()
}

// programFacility compiles, loads and pins policy programs and keeps the
// maps only they use (dpd_chain, dpd_rule_ctrs). Load and Adopt are safe
// for concurrent use (preloading runs them on every CPU).
type programFacility interface {
	// Load loads with the indirect epilogue call: with the direct one the
	// kernel patches the program's text at load (text_poke, whose IPIs
	// cost 0.3-1 ms a program on some VMs), which stays off the
	// endpoint's path.
	Load(pol *model.DirectionPolicy, dir model.Direction) (loadedProgram, error)
	// DirectEpilogue says the datapath chose the direct epilogue call
	// (cheaper per new flow); LoadDirect then loads with it, for the
	// reloader (directreload.go).
	DirectEpilogue() bool
	LoadDirect(pol *model.DirectionPolicy, dir model.Direction) (loadedProgram, error)
	Adopt(pol *model.DirectionPolicy, dir model.Direction, p pinnedProgram) (loadedProgram, error)
	// ProgsDir holds one pin directory per program; PinnedNames lists
	// them (none when the directory does not exist).
	ProgsDir() string
	PinnedNames() ([]string, error)
	OpenPinned(name string) (pinnedProgram, error)
	RemovePinDir(path string) error

	ChainIndices() ([]uint32, error)
	ChainIndexInUse(idx uint32) bool
	DeleteChainIndex(idx uint32) error
	CounterIDs() ([]uint64, error)
	EnsureCounters(ids []uint64) error
	DeleteCounters(ids []uint64) error
}

// sweepFacility removes what garbage collection finds of no one beyond
// interfaces and programs.
type sweepFacility interface {
	RetainIPSets(keep []string) (removed int, err error)
	ReleaseRetired(liveIfindexes []int) (kept int, err error)
}

// ipsetMaps are the IP set maps (members, and the index policies read).
type ipsetMaps interface {
	ReplaceIPSet(id string, typ model.IPSetType, members []model.IPSetMember) error
	UpdateIPSet(id string, added, removed []model.IPSetMember) error
	RemoveIPSet(id string) error
}

// routeMaps is the BPF route map (dpd_routes).
type routeMaps interface {
	SetRoute(dst netip.Prefix, info tcbpf.RouteInfo) error
	DeleteRoute(dst netip.Prefix) error
	Routes() (map[netip.Prefix]tcbpf.RouteInfo, error)
}

// routeNet writes kernel routes to other nodes' workloads.
type routeNet interface {
	ReplaceRemoteRoute(r nl.RemoteRoute) error
	DeleteRemoteRoute(r nl.RemoteRoute) error
	RemoteRoutes(vxlanIfindexes ...int) ([]netlink.Route, error)
	DeleteRoute(r *netlink.Route) error
}

// tunnelNet writes the VXLAN device and its peers.
type tunnelNet interface {
	EnsureVXLAN(d nl.VXLANDevice) (int, error)
	DeleteVXLAN(name string) error
	SetVXLANPeer(ifindex int, p nl.VXLANPeer) error
	DeleteVXLANPeer(ifindex int, p nl.VXLANPeer) error
	SyncVXLANPeers(ifindex int, peers []nl.VXLANPeer) error
}

// masqNet writes the nat_outgoing table.
type masqNet interface {
	SyncMasquerade(masqPools, allPools []netip.Prefix) error
}

// natMaps are the service NAT maps and the conntrack flush.
type natMaps interface {
	NATFrontends() ([]tcbpf.NATFrontendEntry, error)
	NATBackendsOf(id uint32) ([]tcbpf.NATBackend, error)
	ProgramNATPort(id uint32, fes []tcbpf.NATFrontend, bes []tcbpf.NATBackend, prevCount int) error
	DeleteNATFrontend(f tcbpf.NATFrontend) error
	DeleteNATPort(id uint32, count int) error
	DeleteNATBackendsExcept(keep map[uint32]bool) (int, error)
	FlushNATFlows(f tcbpf.NATFlowFilter) (int, error)
}

// bpfFacilities are the BPF side as the programmers see it; one value per
// opened datapath (Configure may reopen it before the first endpoint).
type bpfFacilities struct {
	entry    entryFacility
	programs programFacility
	sweep    sweepFacility
	ipsets   ipsetMaps
	routes   routeMaps
	nat      natMaps
	host     hostFacility // host endpoints (hostendpoints.go); nil: unsupported
}

// netFacilities are the netlink side as the programmers see it.
type netFacilities struct {
	links    linkFacility
	endpoint endpointNet
	routes   routeNet
	tunnel   tunnelNet
	masq     masqNet
	// ipv6: the node has IPv6 (nl.Configurer.IPv6); IPv6 routes and
	// pools are programmed only then.
	ipv6 bool
}
