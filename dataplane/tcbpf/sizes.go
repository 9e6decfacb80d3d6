package tcbpf

import (
	"fmt"
	"os"
	"strconv"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// MapSizes are the max_entries of the configurable maps.
type MapSizes struct {
	Conntrack    int // dpd_conntrack flows; ConfigUpdate BPFMapSizeConntrack; default 512000
	IPSets       int // dpd_ipsets members of all sets; BPFMapSizeIPSets; default 1048576
	IfState      int // dpd_ifstate interfaces; BPFMapSizeIfState; default 1000
	RuleCounters int // dpd_rule_ctrs rules; BPFMapSizeRuleCounters; default 65536
	Jump         int // dpd_jump; BPFMapSizeJump; default abi.JumpPolBase + 2*IfState
	Chain        int // dpd_chain policy continuations; BPFMapSizeChain; default 8192
	// NATFrontend is dpd_nat_fe: service (address, port, protocol)
	// frontends; BPFMapSizeNATFrontend; default 65536.
	NATFrontend int
	// NATBackend is dpd_nat_be: backends of all service ports;
	// BPFMapSizeNATBackend; default 262144.
	NATBackend int
	// Routes is dpd_routes: RouteUpdate destinations; BPFMapSizeRoute;
	// default 262144. (A connection's NAT choice lives in conntrack, sized by
	// Conntrack.)
	Routes int
	// Fragments is dpd_frags: datagrams in flight in fragments, one entry
	// per hook that saw the first fragment; BPFMapSizeFragments (dpd's
	// own key); default 8192. An LRU: when full, the oldest datagram's
	// later fragments are dropped.
	Fragments int
	// Events is dpd_events, the flow-event ring buffer, in bytes: a power
	// of two of at least a page; BPFMapSizeFlowEvents; default 1 MiB
	// (about 9,800 events of abi.FlowEventLen + the ring's 8-byte header).
	Events int
	// EventDeny is dpd_ev_deny: slots of denied flows whose events are
	// being rate-limited (a direct-mapped cache: the largest power of two
	// of them is used); BPFMapSizeFlowEventDeny; default 65536.
	EventDeny int
}

// Config keys read by MapSizesFromConfig. Conntrack, IPSets, IfState and
// the NAT and route keys are Felix's; the others (rule counters, jump,
// chain, fragments) are dpd's own.
const (
	ConfigConntrack    = "BPFMapSizeConntrack"
	ConfigIPSets       = "BPFMapSizeIPSets"
	ConfigIfState      = "BPFMapSizeIfState"
	ConfigRuleCounters = "BPFMapSizeRuleCounters"
	ConfigJump         = "BPFMapSizeJump"
	ConfigChain        = "BPFMapSizeChain"
	ConfigNATFrontend  = "BPFMapSizeNATFrontend"
	ConfigNATBackend   = "BPFMapSizeNATBackend"
	ConfigRoutes       = "BPFMapSizeRoute"
	ConfigFragments    = "BPFMapSizeFragments"
	ConfigEvents       = "BPFMapSizeFlowEvents"
	ConfigEventDeny    = "BPFMapSizeFlowEventDeny"
)

// ipsetIDsSize bounds the number of distinct IP sets (dpd_ipset_ids).
const ipsetIDsSize = 65536

// DefaultMapSizes returns the documented defaults (Felix's for the maps
// Felix has a setting for).
func DefaultMapSizes() MapSizes {
	return MapSizes{
		Conntrack:    512000,
		IPSets:       1048576,
		IfState:      1000,
		RuleCounters: 65536,
		Jump:         abi.JumpPolBase + 2*1000,
		Chain:        8192,
		NATFrontend:  65536,
		NATBackend:   262144,
		Routes:       262144,
		Fragments:    8192,
		Events:       1 << 20,
		EventDeny:    65536,
	}
}

// sizeField is one field of MapSizes: its name in errors, its config key
// and where it is.
type sizeField struct {
	name, key string
	v         *int
}

// fields lists s's fields, in declaration order.
func (s *MapSizes) fields() []sizeField {
	return []sizeField{
		{"conntrack", ConfigConntrack, &s.Conntrack}, {"ipsets", ConfigIPSets, &s.IPSets},
		{"ifstate", ConfigIfState, &s.IfState}, {"rule counters", ConfigRuleCounters, &s.RuleCounters},
		{"jump", ConfigJump, &s.Jump}, {"chain", ConfigChain, &s.Chain},
		{"nat frontend", ConfigNATFrontend, &s.NATFrontend}, {"nat backend", ConfigNATBackend, &s.NATBackend},
		{"routes", ConfigRoutes, &s.Routes}, {"fragments", ConfigFragments, &s.Fragments},
		{"flow events", ConfigEvents, &s.Events}, {"flow event deny", ConfigEventDeny, &s.EventDeny},
	}
}

// withDefaults fills zero fields. A zero Jump follows IfState, so every
// interface can have a slot.
func (s MapSizes) withDefaults() MapSizes {
	d := DefaultMapSizes()
	defaults := d.fields()
	for i, f := range s.fields() {
		if *f.v == 0 && f.v != &s.Jump {
			*f.v = *defaults[i].v
		}
	}
	if s.Jump == 0 {
		s.Jump = abi.JumpPolBase + 2*s.IfState
	}
	return s
}

func (s MapSizes) validate() error {
	for _, f := range s.fields() {
		if *f.v <= 0 || *f.v > 1<<28 {
			return fmt.Errorf("map size %s %d out of range", f.name, *f.v)
		}
	}
	if s.Events < os.Getpagesize() || s.Events&(s.Events-1) != 0 {
		return fmt.Errorf("map size flow events %d: want a power of two of at least %d bytes", s.Events, os.Getpagesize())
	}
	if s.Jump < abi.JumpPolBase+2 {
		return fmt.Errorf("map size jump %d leaves no policy slot (need >= %d)", s.Jump, abi.JumpPolBase+2)
	}
	return nil
}

// Slots is the number of endpoint slots dpd_jump has room for.
func (s MapSizes) Slots() uint32 {
	return uint32((s.withDefaults().Jump - abi.JumpPolBase) / 2)
}

// MapSizesFromConfig reads the ConfigUpdate keys above over the defaults.
// Absent keys keep their default; a BPFMapSizeIfState without
// BPFMapSizeJump also grows the jump map to match.
func MapSizesFromConfig(cfg map[string]string) (MapSizes, error) {
	s := DefaultMapSizes()
	s.Jump = 0
	for _, f := range s.fields() {
		v, ok := cfg[f.key]
		if !ok || v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return MapSizes{}, fmt.Errorf("config %s=%q: want a positive integer", f.key, v)
		}
		*f.v = n
	}
	s = s.withDefaults()
	if err := s.validate(); err != nil {
		return MapSizes{}, err
	}
	return s, nil
}
