package felixconv

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

func TestIPSetMembers(t *testing.T) {
	pfx := netip.MustParsePrefix
	tests := []struct {
		name    string
		typ     felix.IPSetUpdate_IPSetType
		members []string
		want    []model.IPSetMember
		err     string
	}{
		{"ip v4", felix.IPSetUpdate_IP, []string{"10.0.0.1"}, []model.IPSetMember{{Prefix: pfx("10.0.0.1/32")}}, ""},
		{"ip v6", felix.IPSetUpdate_IP, []string{"fd00::1"}, []model.IPSetMember{{Prefix: pfx("fd00::1/128")}}, ""},
		{"ip full-length cidr", felix.IPSetUpdate_IP, []string{"10.0.0.1/32"}, []model.IPSetMember{{Prefix: pfx("10.0.0.1/32")}}, ""},
		{"ip rejects network", felix.IPSetUpdate_IP, []string{"10.0.0.0/24"}, nil, "not an address"},
		{"ip rejects garbage", felix.IPSetUpdate_IP, []string{"10.0.0.1", "x"}, nil, "member 1"},
		{"ip rejects ip,port", felix.IPSetUpdate_IP, []string{"10.0.0.1,tcp:80"}, nil, "member 0"},
		{"net cidr masked", felix.IPSetUpdate_NET, []string{"10.1.2.3/16"}, []model.IPSetMember{{Prefix: pfx("10.1.0.0/16")}}, ""},
		{"net bare address", felix.IPSetUpdate_NET, []string{"fd00::5"}, []model.IPSetMember{{Prefix: pfx("fd00::5/128")}}, ""},
		{"net bad length", felix.IPSetUpdate_NET, []string{"10.0.0.0/40"}, nil, "member 0"},
		{"net empty", felix.IPSetUpdate_NET, []string{""}, nil, "empty"},
		{"ip,port tcp", felix.IPSetUpdate_IP_AND_PORT, []string{"10.0.0.1,tcp:80"},
			[]model.IPSetMember{{Prefix: pfx("10.0.0.1/32"), Proto: 6, Port: 80}}, ""},
		{"ip,port udp upper", felix.IPSetUpdate_IP_AND_PORT, []string{"10.0.0.1,UDP:53"},
			[]model.IPSetMember{{Prefix: pfx("10.0.0.1/32"), Proto: 17, Port: 53}}, ""},
		{"ip,port sctp v6", felix.IPSetUpdate_IP_AND_PORT, []string{"fd00::1,sctp:9"},
			[]model.IPSetMember{{Prefix: pfx("fd00::1/128"), Proto: 132, Port: 9}}, ""},
		{"ip,port bracketed v6", felix.IPSetUpdate_IP_AND_PORT, []string{"[fd00::1],tcp:65535"},
			[]model.IPSetMember{{Prefix: pfx("fd00::1/128"), Proto: 6, Port: 65535}}, ""},
		{"ip,port port 0", felix.IPSetUpdate_IP_AND_PORT, []string{"10.0.0.1,tcp:0"},
			[]model.IPSetMember{{Prefix: pfx("10.0.0.1/32"), Proto: 6, Port: 0}}, ""},
		{"ip,port icmp refused", felix.IPSetUpdate_IP_AND_PORT, []string{"10.0.0.1,icmp:8"}, nil, "not tcp, udp or sctp"},
		{"ip,port port too big", felix.IPSetUpdate_IP_AND_PORT, []string{"10.0.0.1,tcp:65536"}, nil, "not 0-65535"},
		{"ip,port negative port", felix.IPSetUpdate_IP_AND_PORT, []string{"10.0.0.1,tcp:-1"}, nil, "not 0-65535"},
		{"ip,port no port", felix.IPSetUpdate_IP_AND_PORT, []string{"10.0.0.1,tcp"}, nil, "not addr,proto:port"},
		{"ip,port no comma", felix.IPSetUpdate_IP_AND_PORT, []string{"10.0.0.1"}, nil, "not addr,proto:port"},
		{"ip,port cidr refused", felix.IPSetUpdate_IP_AND_PORT, []string{"10.0.0.0/8,tcp:80"}, nil, "member 0"},
		{"unknown type", felix.IPSetUpdate_IPSetType(9), []string{"10.0.0.1"}, nil, "unknown ip set type"},
		{"no members", felix.IPSetUpdate_NET, nil, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := IPSetMembers(tc.typ, tc.members)
			checkErr(t, err, tc.err)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestIPSetMemberAny(t *testing.T) {
	tests := []struct {
		in      string
		typ     model.IPSetType
		wantErr bool
	}{
		{"10.0.0.1", model.IPSetIP, false},
		{"10.0.0.0/8", model.IPSetNet, false},
		{"fd00::1,tcp:80", model.IPSetIPAndPort, false},
		{"10.0.0.1,tcp:x", model.IPSetIPAndPort, true},
		{"", model.IPSetIP, true},
		{"host.example", model.IPSetIP, true},
	}
	for _, tc := range tests {
		_, typ, err := IPSetMemberAny(tc.in)
		if (err != nil) != tc.wantErr || typ != tc.typ {
			t.Errorf("IPSetMemberAny(%q) = type %d, err %v; want type %d, err=%t", tc.in, typ, err, tc.typ, tc.wantErr)
		}
	}
}
