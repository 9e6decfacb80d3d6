package tcbpf

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

func TestMemberKey(t *testing.T) {
	tests := []struct {
		name     string
		m        model.IPSetMember
		prefix   uint32
		addr     []byte
		proto    uint8
		family   uint8
		portWire [2]byte // the key's port bytes as they sit in memory
		wantErr  bool
	}{
		{"ipv4 host", model.IPSetMember{Prefix: netip.MustParsePrefix("10.1.2.3/32")},
			abi.IPSetKeyFixedBits + 32, []byte{10, 1, 2, 3}, 0, 4, [2]byte{}, false},
		{"ipv4 net is masked", model.IPSetMember{Prefix: netip.MustParsePrefix("10.1.2.3/16")},
			abi.IPSetKeyFixedBits + 16, []byte{10, 1, 0, 0}, 0, 4, [2]byte{}, false},
		{"ip and port", model.IPSetMember{Prefix: netip.MustParsePrefix("10.0.0.9/32"), Proto: 6, Port: 8080},
			abi.IPSetKeyFixedBits + 32, []byte{10, 0, 0, 9}, 6, 4, [2]byte{0x1f, 0x90}, false},
		{"ipv6 and port", model.IPSetMember{Prefix: netip.MustParsePrefix("fd00::9/128"), Proto: 17, Port: 53},
			abi.IPSetKeyFixedBits + 128, netip.MustParseAddr("fd00::9").AsSlice(), 17, 6, [2]byte{0, 53}, false},
		{"ipv6 whose bytes start like ipv4", model.IPSetMember{Prefix: netip.MustParsePrefix("a01:203::/32")},
			abi.IPSetKeyFixedBits + 32, []byte{10, 1, 2, 3}, 0, 6, [2]byte{}, false},
		{"ipv6", model.IPSetMember{Prefix: netip.MustParsePrefix("fd00::1/128")},
			abi.IPSetKeyFixedBits + 128, netip.MustParseAddr("fd00::1").AsSlice(), 0, 6, [2]byte{}, false},
		{"invalid", model.IPSetMember{}, 0, nil, 0, 0, [2]byte{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := memberKey(7, tc.m)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v", err)
			}
			if tc.wantErr {
				return
			}
			if k.SetId != 7 || k.Prefixlen != tc.prefix || k.Proto != tc.proto || k.Family != tc.family {
				t.Fatalf("key %+v", k)
			}
			if string(k.Addr[:len(tc.addr)]) != string(tc.addr) {
				t.Fatalf("addr %v, want %v", k.Addr, tc.addr)
			}
			var wire [2]byte
			wire[0], wire[1] = byte(k.Port), byte(k.Port>>8) // little-endian host memory
			if wire != tc.portWire {
				t.Fatalf("port bytes %v, want %v", wire, tc.portWire)
			}
		})
	}
}

func TestEncodeName(t *testing.T) {
	short := "s:abc"
	long := strings.Repeat("x", abi.IPSetNameLen+1)
	if got := strings.TrimRight(nameString(encodeName(short)), "\x00"); got != short {
		t.Fatalf("short name encoded as %q", got)
	}
	a, b := nameString(encodeName(long)), nameString(encodeName(long+"y"))
	if a == b || a[0] != '#' {
		t.Fatalf("long names: %q %q", a, b)
	}
	if nameString(encodeName("#x")) == nameString(encodeName("x")) || nameString(encodeName("#x"))[0] != '#' {
		t.Fatal("names starting with # must be hashed")
	}
	if len(encodeName(strings.Repeat("z", abi.IPSetNameLen)).Name) != abi.IPSetNameLen {
		t.Fatal("key size")
	}
}
