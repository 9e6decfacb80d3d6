package felixconv

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// IPSetType converts the Felix set type, refusing values this build does
// not know (their member syntax is unknown).
func IPSetType(typ felix.IPSetUpdate_IPSetType) (model.IPSetType, error) {
	switch typ {
	case felix.IPSetUpdate_IP:
		return model.IPSetIP, nil
	case felix.IPSetUpdate_IP_AND_PORT:
		return model.IPSetIPAndPort, nil
	case felix.IPSetUpdate_NET:
		return model.IPSetNet, nil
	}
	return 0, fmt.Errorf("unknown ip set type %d", typ)
}

// IPSetMembers parses the members of a set of type typ:
//   - IP: an address (a full-length CIDR such as 10.0.0.1/32 is the same);
//   - NET: a CIDR, or a bare address meaning /32 or /128;
//   - IP_AND_PORT: "addr,proto:port" with proto tcp, udp or sctp.
func IPSetMembers(typ felix.IPSetUpdate_IPSetType, members []string) ([]model.IPSetMember, error) {
	mt, err := IPSetType(typ)
	if err != nil {
		return nil, err
	}
	return membersOf(mt, members)
}

func membersOf(mt model.IPSetType, members []string) ([]model.IPSetMember, error) {
	if len(members) == 0 {
		return nil, nil
	}
	out := make([]model.IPSetMember, 0, len(members))
	for i, s := range members {
		m, err := parseMember(mt, s)
		if err != nil {
			return nil, fmt.Errorf("member %d: %w", i, err)
		}
		out = append(out, m)
	}
	return out, nil
}

func ipsetUpdate(u *felix.IPSetUpdate) (model.Update, error) {
	if err := required("ip set id", u.GetId()); err != nil {
		return nil, err
	}
	mt, err := IPSetType(u.GetType())
	if err != nil {
		return nil, err
	}
	members, err := membersOf(mt, u.GetMembers())
	if err != nil {
		return nil, err
	}
	return &model.IPSetUpdate{ID: u.GetId(), Type: mt, Members: members}, nil
}

// ipsetDelta parses a delta's members by their syntax (a delta names no
// set type); the engine checks them against the set's type.
func ipsetDelta(u *felix.IPSetDeltaUpdate) (model.Update, error) {
	if err := required("ip set id", u.GetId()); err != nil {
		return nil, err
	}
	added, err := anyMembers("added_members", u.GetAddedMembers())
	if err != nil {
		return nil, err
	}
	removed, err := anyMembers("removed_members", u.GetRemovedMembers())
	if err != nil {
		return nil, err
	}
	return &model.IPSetDeltaUpdate{ID: u.GetId(), Added: added, Removed: removed}, nil
}

func anyMembers(field string, ms []string) ([]model.IPSetMember, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	out := make([]model.IPSetMember, 0, len(ms))
	for i, s := range ms {
		m, _, err := IPSetMemberAny(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// IPSetMemberAny parses a member of a set whose type is not at hand (an
// IPSetDeltaUpdate carries none): an address, a CIDR or "addr,proto:port".
// It returns the type the syntax implies (an address is IPSetIP).
func IPSetMemberAny(s string) (model.IPSetMember, model.IPSetType, error) {
	if strings.Contains(s, ",") {
		m, err := parseMember(model.IPSetIPAndPort, s)
		return m, model.IPSetIPAndPort, err
	}
	if strings.Contains(s, "/") {
		m, err := parseMember(model.IPSetNet, s)
		return m, model.IPSetNet, err
	}
	m, err := parseMember(model.IPSetIP, s)
	return m, model.IPSetIP, err
}

func parseMember(typ model.IPSetType, s string) (model.IPSetMember, error) {
	switch typ {
	case model.IPSetIP:
		p, err := parsePrefix(s)
		if err != nil {
			return model.IPSetMember{}, err
		}
		if !p.IsSingleIP() {
			return model.IPSetMember{}, fmt.Errorf("%q is a network, not an address", s)
		}
		return model.IPSetMember{Prefix: p}, nil
	case model.IPSetNet:
		p, err := parsePrefix(s)
		if err != nil {
			return model.IPSetMember{}, err
		}
		return model.IPSetMember{Prefix: p}, nil
	case model.IPSetIPAndPort:
		return parseIPPort(s)
	}
	return model.IPSetMember{}, fmt.Errorf("unknown ip set type %d", typ)
}

// parseIPPort parses "addr,proto:port". The address may be an IPv6
// address, optionally in brackets; the last comma separates it.
func parseIPPort(s string) (model.IPSetMember, error) {
	i := strings.LastIndexByte(s, ',')
	if i < 0 {
		return model.IPSetMember{}, fmt.Errorf("%q is not addr,proto:port", s)
	}
	addrS, rest := s[:i], s[i+1:]
	if len(addrS) > 1 && addrS[0] == '[' && addrS[len(addrS)-1] == ']' {
		addrS = addrS[1 : len(addrS)-1]
	}
	addr, err := parseAddr(addrS)
	if err != nil {
		return model.IPSetMember{}, fmt.Errorf("%q: %w", s, err)
	}
	protoS, portS, ok := strings.Cut(rest, ":")
	if !ok {
		return model.IPSetMember{}, fmt.Errorf("%q is not addr,proto:port", s)
	}
	var proto uint8
	switch strings.ToLower(protoS) {
	case "tcp":
		proto = model.ProtoTCP
	case "udp":
		proto = model.ProtoUDP
	case "sctp":
		proto = model.ProtoSCTP
	default:
		return model.IPSetMember{}, fmt.Errorf("%q: protocol %q is not tcp, udp or sctp", s, protoS)
	}
	port, err := strconv.ParseUint(portS, 10, 16)
	if err != nil {
		return model.IPSetMember{}, fmt.Errorf("%q: port %q is not 0-65535", s, portS)
	}
	return model.IPSetMember{Prefix: netip.PrefixFrom(addr, addr.BitLen()), Proto: proto, Port: uint16(port)}, nil
}
