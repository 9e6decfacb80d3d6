package model

import (
	"net/netip"
	"slices"
	"testing"
)

func TestIPSetMemberCompare(t *testing.T) {
	m := func(p string, proto uint8, port uint16) IPSetMember {
		return IPSetMember{Prefix: netip.MustParsePrefix(p), Proto: proto, Port: port}
	}
	// In order: address first, then prefix length, protocol, port.
	ordered := []IPSetMember{
		m("10.0.0.0/8", 0, 0),
		m("10.0.0.0/24", 0, 0),
		m("10.0.0.1/32", 0, 0),
		m("10.0.0.1/32", ProtoTCP, 80),
		m("10.0.0.1/32", ProtoTCP, 443),
		m("10.0.0.1/32", ProtoUDP, 53),
		m("10.0.0.2/32", 0, 0),
		m("fd00::1/128", 0, 0),
	}
	for i := range ordered {
		for j := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := ordered[i].Compare(ordered[j]); got != want {
				t.Errorf("%v.Compare(%v) = %d, want %d", ordered[i], ordered[j], got, want)
			}
			if got := ordered[i].Less(ordered[j]); got != (want < 0) {
				t.Errorf("%v.Less(%v) = %t", ordered[i], ordered[j], got)
			}
		}
	}
	set := map[IPSetMember]struct{}{}
	for _, x := range ordered {
		set[x] = struct{}{}
	}
	if got := SortedMembers(set); !slices.Equal(got, ordered) {
		t.Errorf("SortedMembers = %v, want %v", got, ordered)
	}
}

func TestReferencedSets(t *testing.T) {
	rules := func(rs ...Rule) PolicyRules { return PolicyRules{Rules: rs} }
	tests := []struct {
		name string
		ep   Endpoint
		want []string
	}{
		{"none", Endpoint{}, nil},
		{"every match field, sorted and unique", Endpoint{
			Ingress: DirectionPolicy{Tiers: []Tier{{Policies: []PolicyRules{rules(
				Rule{SrcIPSets: []string{"s9", "s1"}, NotSrcIPSets: []string{"s2"}, DstIPSets: []string{"s3"}},
				Rule{NotDstIPSets: []string{"s4"}, DstIPPortSets: []string{"s5"}, SrcNamedPortSets: []string{"s6"}},
			)}}}},
			Egress: DirectionPolicy{Profiles: []PolicyRules{rules(
				Rule{NotSrcNamedPortSets: []string{"s7"}, DstNamedPortSets: []string{"s8"}, NotDstNamedPortSets: []string{"s0", "s1"}},
			)}},
		}, []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.ep.ReferencedSets(); !slices.Equal(got, tc.want) {
				t.Errorf("ReferencedSets = %v, want %v", got, tc.want)
			}
		})
	}
	in := []Rule{{SrcIPSets: []string{"b"}}}
	out := []Rule{{DstIPSets: []string{"a", "b"}}}
	if got := ReferencedSets(in, out); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("ReferencedSets(in, out) = %v", got)
	}
}
