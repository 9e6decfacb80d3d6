package tcbpf

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// IPv6 packets for the datapath tests, with valid L4 checksums where a test
// checks them (the programs themselves never verify checksums).

// pseudo6 is the IPv6 pseudo-header sum (RFC 8200 8.1) of an L4 segment.
func pseudo6(src, dst netip.Addr, proto uint8, l4len int) uint32 {
	s, d := src.As16(), dst.As16()
	return csumAdd(csumAdd(0, s[:]), d[:]) + uint32(l4len) + uint32(proto)
}

// l4csum6 fills the checksum of the TCP, UDP or ICMPv6 segment l4.
func l4csum6(src, dst netip.Addr, proto uint8, l4 []byte) {
	off := map[uint8]int{6: 16, 17: 6, 58: 2}[proto]
	binary.BigEndian.PutUint16(l4[off:], 0)
	c := csumFold(csumAdd(pseudo6(src, dst, proto, len(l4)), l4))
	if c == 0 && proto == 17 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(l4[off:], c)
}

func tcp6(src, dst netip.AddrPort, flags byte) []byte {
	l4 := make([]byte, 20, 32)
	binary.BigEndian.PutUint16(l4[0:], src.Port())
	binary.BigEndian.PutUint16(l4[2:], dst.Port())
	l4[12] = 5 << 4
	l4[13] = flags
	l4 = append(l4, []byte("dpd-v6-test!")...)
	l4csum6(src.Addr(), dst.Addr(), 6, l4)
	return ipv6Frame(src.Addr(), dst.Addr(), nil, 6, l4)
}

// udp6Datagram is a UDP header + n payload bytes with a valid checksum.
func udp6Datagram(src, dst netip.AddrPort, n int) []byte {
	l4 := make([]byte, 8+n)
	binary.BigEndian.PutUint16(l4[0:], src.Port())
	binary.BigEndian.PutUint16(l4[2:], dst.Port())
	binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	for i := 8; i < len(l4); i++ {
		l4[i] = byte(i)
	}
	l4csum6(src.Addr(), dst.Addr(), 17, l4)
	return l4
}

func udp6(src, dst netip.AddrPort) []byte {
	return ipv6Frame(src.Addr(), dst.Addr(), nil, 17, udp6Datagram(src, dst, 12))
}

// icmp6 is an ICMPv6 message of type/code; echo carries id in its
// identifier field; body follows the 8-byte header.
func icmp6(src, dst netip.Addr, typ, code uint8, id uint16, body []byte) []byte {
	l4 := make([]byte, 8, 8+len(body))
	l4[0], l4[1] = typ, code
	binary.BigEndian.PutUint16(l4[4:], id)
	l4 = append(l4, body...)
	l4csum6(src, dst, 58, l4)
	return ipv6Frame(src, dst, nil, 58, l4)
}

// icmp6Err is an ICMPv6 error of typ from src to dst quoting the IPv6
// packet of frame (as much as an error carries: here the header and 8
// bytes of L4).
func icmp6Err(src, dst netip.Addr, typ uint8, frame []byte) []byte {
	return icmp6(src, dst, typ, 0, 0, frame[14:14+48])
}

// frags6 splits an L4 datagram (header included) into IPv6 fragments of at
// most size bytes of it (size a multiple of 8).
func frags6(src, dst netip.Addr, proto uint8, id uint32, l4 []byte, size int) [][]byte {
	var out [][]byte
	for off := 0; off < len(l4); off += size {
		end := min(off+size, len(l4))
		out = append(out, ipv6Frame(src, dst, []ext6{frag6(uint16(off/8), end < len(l4), id)}, proto, l4[off:end]))
	}
	return out
}

// parsed6 reads an IPv6 frame without extension headers the program
// returned and fails t unless its L4 checksum is valid.
func parsed6(t *testing.T, frame []byte) parsed {
	t.Helper()
	if len(frame) < 14+40+8 || frame[14]>>4 != 6 {
		t.Fatalf("not an IPv6 frame: %x", frame)
	}
	ip := frame[14 : 14+40]
	n := int(binary.BigEndian.Uint16(ip[4:]))
	proto := ip[6]
	l4 := frame[14+40 : 14+40+n]
	src, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	p := parsed{dstMAC: frame[0:6], srcMAC: frame[6:12]}
	if proto == 58 {
		p.src, p.dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
		p.l4Csum = binary.BigEndian.Uint16(l4[2:])
	} else {
		p.src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(l4[0:]))
		p.dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(l4[2:]))
		p.l4Csum = binary.BigEndian.Uint16(l4[map[uint8]int{6: 16, 17: 6}[proto]:])
	}
	if csumFold(csumAdd(pseudo6(src, dst, proto, len(l4)), l4)) != 0 {
		t.Fatalf("bad L4 checksum %#04x for %s -> %s", p.l4Csum, p.src, p.dst)
	}
	return p
}
