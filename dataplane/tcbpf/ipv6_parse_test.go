package tcbpf

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

var (
	ip6A = netip.MustParseAddr("fd00:65::1")
	ip6B = netip.MustParseAddr("fd00:65::2")
)

// ext6 is one IPv6 extension header: its type and the bytes after its
// next-header and length fields (for a fragment header, frag6's 6 bytes
// after next header and reserved). ipv6Frame fills in the rest and pads.
type ext6 struct {
	typ  uint8
	body []byte
}

// ipv6MaxExt is the walk's bound, DPD_IPV6_MAX_EXT in dpd_parse_types.h.
const ipv6MaxExt = 8

// ipv6Frame builds Ethernet + IPv6 + the extension headers + l4 (whose
// protocol is proto).
func ipv6Frame(src, dst netip.Addr, exts []ext6, proto uint8, l4 []byte) []byte {
	var chain []byte
	for i, e := range exts {
		next := proto
		if i+1 < len(exts) {
			next = exts[i+1].typ
		}
		switch e.typ {
		case 44: // fragment: fixed 8 bytes
			h := make([]byte, 8)
			h[0] = next
			copy(h[2:], e.body)
			chain = append(chain, h...)
		case 51: // AH: length in 4-byte units minus 2
			n := 8 + len(e.body)
			n = (n + 7) / 8 * 8
			h := make([]byte, n)
			h[0], h[1] = next, byte(n/4-2)
			copy(h[8:], e.body)
			chain = append(chain, h...)
		default: // 8-byte units minus 1
			n := 2 + len(e.body)
			n = (n + 7) / 8 * 8
			h := make([]byte, n)
			h[0], h[1] = next, byte(n/8-1)
			copy(h[2:], e.body)
			chain = append(chain, h...)
		}
	}
	first := proto
	if len(exts) > 0 {
		first = exts[0].typ
	}
	h := make([]byte, 40, 40+len(chain)+len(l4))
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(chain)+len(l4)))
	h[6] = first
	h[7] = 64
	s, d := src.As16(), dst.As16()
	copy(h[8:24], s[:])
	copy(h[24:40], d[:])
	h = append(h, chain...)
	return ether(ethIPv6, append(h, l4...))
}

// frag6 is a fragment header body: offset in 8-byte units, M, id.
func frag6(off8 uint16, more bool, id uint32) ext6 {
	b := make([]byte, 6)
	fo := off8 << 3
	if more {
		fo |= 1
	}
	binary.BigEndian.PutUint16(b[0:], fo)
	binary.BigEndian.PutUint32(b[2:], id)
	return ext6{typ: 44, body: b}
}

func ports(sport, dport uint16, n int) []byte {
	l4 := make([]byte, n)
	binary.BigEndian.PutUint16(l4[0:], sport)
	binary.BigEndian.PutUint16(l4[2:], dport)
	return l4
}

// TestIPv6Parse runs IPv6 packets through the entry program in trace mode,
// under an allow-all egress policy, and reads what the parser gave the
// policy. Too many extension headers, malformed packets and a later
// fragment whose first piece was not seen drop before any policy; the
// walk's bound and the missing first piece are counted. (Conntrack hits of
// earlier cases are masked: the real runs create entries.)
func TestIPv6Parse(t *testing.T) {
	d := openTest(t, Options{})
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady|abi.IfWorkload))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, verdictProg(t, d, abi.VerdictAllow, 0)))
	hop := ext6{typ: 0, body: make([]byte, 6)}
	dst := ext6{typ: 60, body: make([]byte, 14)}
	rt := ext6{typ: 43, body: make([]byte, 22)}
	ah := ext6{typ: 51, body: make([]byte, 12)}
	tcpL4 := ports(40000, 443, 20)
	tcpL4[13] = tcpSYN
	finRst := ports(40001, 443, 20)
	finRst[13] = tcpFIN | tcpRST | tcpACK | 0x08 // and PSH, which dpd ignores
	icmpReq := make([]byte, 8)
	icmpReq[0] = 128
	binary.BigEndian.PutUint16(icmpReq[4:], 99)
	many := make([]ext6, ipv6MaxExt+1)
	for i := range many {
		many[i] = dst
	}
	tests := []struct {
		name                        string
		frame                       []byte
		proto                       uint8
		sport, dport                uint16
		icmpType                    uint8
		flags                       uint32
		malformed, tooMany, noFirst bool
	}{
		{"tcp", ipv6Frame(ip6A, ip6B, nil, 6, tcpL4), 6, 40000, 443, 0, abi.StTCPSyn, false, false, false},
		{"tcp fin, rst, psh, ack", ipv6Frame(ip6A, ip6B, nil, 6, finRst), 6, 40001, 443, 0,
			abi.StTCPFin | abi.StTCPRst | abi.StTCPAck, false, false, false},
		{"tcp after an extension header", ipv6Frame(ip6A, ip6B, []ext6{dst}, 6, finRst), 6, 40001, 443, 0,
			abi.StTCPFin | abi.StTCPRst | abi.StTCPAck, false, false, false},
		{"udp after hop-by-hop, routing, dst opts, AH", ipv6Frame(ip6A, ip6B, []ext6{hop, rt, dst, ah}, 17, ports(5353, 53, 8)),
			17, 5353, 53, 0, 0, false, false, false},
		{"icmpv6 echo request", ipv6Frame(ip6A, ip6B, nil, 58, icmpReq), 58, 99, 0, 128, 0, false, false, false},
		{"first fragment walks on", ipv6Frame(ip6A, ip6B, []ext6{frag6(0, true, 7), dst}, 17, ports(1, 2, 8)),
			17, 1, 2, 0, 0, false, false, false},
		{"atomic fragment is whole", ipv6Frame(ip6A, ip6B, []ext6{frag6(0, false, 7)}, 17, ports(1, 2, 8)),
			17, 1, 2, 0, 0, false, false, false},
		{"later fragment without its first", ipv6Frame(ip6A, ip6B, []ext6{hop, frag6(100, true, 8)}, 17, make([]byte, 64)),
			0, 0, 0, 0, 0, false, false, true},
		{"eight extension headers", ipv6Frame(ip6A, ip6B, many[:ipv6MaxExt], 6, tcpL4), 6, 40000, 443, 0, abi.StTCPSyn, false, false, false},
		{"nine extension headers", ipv6Frame(ip6A, ip6B, many, 6, tcpL4), 0, 0, 0, 0, 0, false, true, false},
		{"truncated tcp", ipv6Frame(ip6A, ip6B, nil, 6, make([]byte, 10)), 0, 0, 0, 0, 0, true, false, false},
		{"extension header past the end", ipv6Frame(ip6A, ip6B, nil, 60, nil), 0, 0, 0, 0, 0, true, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, beforeFrag := drops(t, d, DropIPv6Ext), drops(t, d, DropFragNoFirst)
			res, err := d.Trace(ifA, abi.DirFromWEP, tc.frame)
			mustNil(t, err)
			dropped := tc.malformed || tc.tooMany || tc.noFirst
			want := abi.TCActOK
			if dropped {
				want = abi.TCActShot
			}
			if res.Ret != want || res.Reached == dropped {
				t.Fatalf("trace ret %d reached %v, want %d", res.Ret, res.Reached, want)
			}
			if got := run(t, d, abi.DirFromWEP, ifA, tc.frame); got != want {
				t.Fatalf("verdict %d, want %d", got, want)
			}
			wantDrops, wantFrag := before, beforeFrag
			if tc.tooMany {
				wantDrops++
			}
			if tc.noFirst {
				wantFrag++
			}
			if n := drops(t, d, DropIPv6Ext); n != wantDrops {
				t.Fatalf("ipv6_too_many_ext_headers %d, want %d", n, wantDrops)
			}
			if n := drops(t, d, DropFragNoFirst); n != wantFrag {
				t.Fatalf("fragment_without_first %d, want %d", n, wantFrag)
			}
			st := res.State
			if dropped {
				if st.Family != 0 {
					t.Fatalf("state written for a dropped packet: %+v", st)
				}
				return
			}
			src, dst := ip6A.As16(), ip6B.As16()
			if st.Family != 6 || st.Saddr != src || st.Daddr != dst || st.Ifindex != uint32(ifA) {
				t.Fatalf("state %+v: want family 6, %s -> %s on %d", st, ip6A, ip6B, ifA)
			}
			if st.Proto != tc.proto || st.Sport != tc.sport || st.Dport != tc.dport || st.IcmpType != tc.icmpType ||
				st.Flags&^uint32(abi.StEpilogue|abi.StCTFwd) != tc.flags {
				t.Fatalf("parsed proto %d %d -> %d icmp %d flags %#x; want %d %d -> %d icmp %d flags %#x",
					st.Proto, st.Sport, st.Dport, st.IcmpType, st.Flags&^uint32(abi.StEpilogue|abi.StCTFwd),
					tc.proto, tc.sport, tc.dport, tc.icmpType, tc.flags)
			}
		})
	}
}
