package model

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
)

// Action is what a matching rule does.
type Action uint8

const (
	ActionAllow Action = iota + 1
	ActionDeny
	ActionPass // skip to the next tier
	ActionLog  // count and continue
)

func (a Action) String() string {
	switch a {
	case ActionAllow:
		return "allow"
	case ActionDeny:
		return "deny"
	case ActionPass:
		return "pass"
	case ActionLog:
		return "log"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// IP protocol numbers of the protocols Calico names: the values of
// Rule.Protocol, ServicePort.Protocol, Backend.Protocol and
// IPSetMember.Proto.
const (
	ProtoICMP    = 1
	ProtoTCP     = 6
	ProtoUDP     = 17
	ProtoICMPv6  = 58
	ProtoSCTP    = 132
	ProtoUDPLite = 136
)

// PortRange is an inclusive port range; a single port has First == Last.
type PortRange struct {
	First, Last uint16
}

// ICMPMatch matches an ICMP type, and the code when HasCode.
type ICMPMatch struct {
	Type    uint8
	Code    uint8
	HasCode bool
}

// Rule is one Calico rule with its matches parsed. Within a list, nets and
// ports are ORed; IP sets (SrcIPSets, DstIPSets) are ANDed; named-port and
// IP-and-port sets are ORed together with the numeric ports of the same side;
// every Not* list matches when the packet matches none of its entries.
type Rule struct {
	// ID is the upstream rule_id when given, else a stable generated one.
	ID     string
	Action Action
	// IPVersion is 0 (any), 4 or 6.
	IPVersion uint8

	Protocol    *uint8
	NotProtocol *uint8

	SrcNets, NotSrcNets []netip.Prefix
	DstNets, NotDstNets []netip.Prefix

	SrcPorts, NotSrcPorts []PortRange
	DstPorts, NotDstPorts []PortRange

	SrcNamedPortSets, NotSrcNamedPortSets []string
	DstNamedPortSets, NotDstNamedPortSets []string

	SrcIPSets, NotSrcIPSets []string
	DstIPSets, NotDstIPSets []string
	DstIPPortSets           []string

	ICMP    *ICMPMatch
	NotICMP *ICMPMatch
}

// PolicyRules is one policy's rules for one direction.
type PolicyRules struct {
	// Name is "tier/name" for policies and the profile name for profiles;
	// Kind says which.
	Name  string
	Kind  string // "policy" or "profile"
	Rules []Rule
}

// Tier is one tier's policies for one direction, in order.
type Tier struct {
	Name string
	// DefaultAction ends the tier when no policy decided: ActionDeny
	// (Calico's default) or ActionPass.
	DefaultAction Action
	Policies      []PolicyRules
}

// DirectionPolicy is everything that decides one direction of one endpoint:
// tiers in order (only tiers with policies for the direction), then profiles.
// No tiers and no profiles means drop.
type DirectionPolicy struct {
	Tiers    []Tier
	Profiles []PolicyRules
	// Digest is Hash's result when the builder stored it (WithDigest); the
	// zero value means Hash computes it. Hashing formats every rule, so the
	// engine stores it once for the many endpoints that share a policy.
	Digest [32]byte
}

// WithDigest returns p with its Digest filled in.
func (p DirectionPolicy) WithDigest() DirectionPolicy {
	p.Digest = [32]byte{}
	p.Digest = p.Hash()
	return p
}

// Hash is a content hash of the policy: equal hashes enforce identically,
// so kernels share one compiled program per hash.
func (p *DirectionPolicy) Hash() [32]byte {
	if p.Digest != ([32]byte{}) {
		return p.Digest
	}
	h := sha256.New()
	w := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	for _, t := range p.Tiers {
		w("tier")
		w(t.Name)
		w(t.DefaultAction.String())
		for _, pol := range t.Policies {
			w("policy")
			w(pol.Name)
			for i := range pol.Rules {
				w(fmt.Sprintf("%+v", ruleForHash(&pol.Rules[i])))
			}
		}
	}
	for _, pol := range p.Profiles {
		w("profile")
		w(pol.Name)
		for i := range pol.Rules {
			w(fmt.Sprintf("%+v", ruleForHash(&pol.Rules[i])))
		}
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// ruleForHash dereferences pointers so that %+v prints values, not addresses.
func ruleForHash(r *Rule) any {
	type flat struct {
		R                  Rule
		P, NP              int
		ICMP, NICMP        ICMPMatch
		HasICMP, HasNotICM bool
	}
	f := flat{R: *r, P: -1, NP: -1}
	if r.Protocol != nil {
		f.P = int(*r.Protocol)
	}
	if r.NotProtocol != nil {
		f.NP = int(*r.NotProtocol)
	}
	if r.ICMP != nil {
		f.ICMP, f.HasICMP = *r.ICMP, true
	}
	if r.NotICMP != nil {
		f.NICMP, f.HasNotICM = *r.NotICMP, true
	}
	f.R.Protocol, f.R.NotProtocol, f.R.ICMP, f.R.NotICMP = nil, nil, nil, nil
	return f
}

// ipSetLists returns r's IP-set id lists, one per match field; an id may
// stand in more than one.
func (r *Rule) ipSetLists() [][]string {
	return [][]string{
		r.SrcIPSets, r.NotSrcIPSets, r.DstIPSets, r.NotDstIPSets, r.DstIPPortSets,
		r.SrcNamedPortSets, r.NotSrcNamedPortSets, r.DstNamedPortSets, r.NotDstNamedPortSets,
	}
}

// ReferencedSets lists, sorted and unique, every IP set some rule of the
// given lists uses; nil when none does.
func ReferencedSets(rules ...[]Rule) []string {
	seen := map[string]struct{}{}
	for _, rs := range rules {
		for i := range rs {
			for _, l := range rs[i].ipSetLists() {
				for _, id := range l {
					seen[id] = struct{}{}
				}
			}
		}
	}
	if len(seen) == 0 {
		return nil
	}
	out := make([]string, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// ruleLists returns the rule lists of p: every tier's policies, then the
// profiles.
// RuleLists are p's rule lists, tiers' policies first, then profiles.
func (p *DirectionPolicy) RuleLists() [][]Rule { return p.ruleLists() }

func (p *DirectionPolicy) ruleLists() [][]Rule {
	var out [][]Rule
	for _, t := range p.Tiers {
		for _, pol := range t.Policies {
			out = append(out, pol.Rules)
		}
	}
	for _, pol := range p.Profiles {
		out = append(out, pol.Rules)
	}
	return out
}
