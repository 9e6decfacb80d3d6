package server

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// IP protocol numbers a trace packet can carry an L4 header for.
const (
	protoICMP   = 1
	protoTCP    = 6
	protoUDP    = 17
	protoICMPv6 = 58
)

// tracePacket is the packet a trace runs: an IPv4 or IPv6 5-tuple, or
// ICMP/ICMPv6 with type and code. TCP packets are SYNs: a trace asks about
// a new flow.
type tracePacket struct {
	proto              uint8
	src, dst           netip.Addr
	sport, dport       uint16
	icmpType, icmpCode uint8
}

// parseProto reads "tcp", "udp", "icmp", "icmpv6" or a protocol number;
// "" is tcp. (traceInput takes "icmp" between IPv6 addresses as ICMPv6.)
func parseProto(s string) (uint8, error) {
	switch strings.ToLower(s) {
	case "", "tcp":
		return protoTCP, nil
	case "udp":
		return protoUDP, nil
	case "icmp":
		return protoICMP, nil
	case "icmpv6", "ipv6-icmp":
		return protoICMPv6, nil
	case "sctp":
		return 132, nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("protocol %q: want tcp, udp, icmp, icmpv6 or a number 0-255", s)
	}
	return uint8(n), nil
}

// frame builds the Ethernet frame: Calico's host-side MAC as destination,
// a valid IPv4 or IPv6 header (by the addresses' family), and a TCP SYN,
// UDP datagram or ICMP/ICMPv6 message with correct checksums (other
// protocols get 8 bytes of zero payload).
func (p tracePacket) frame() []byte {
	var l4 []byte
	switch p.proto {
	case protoTCP:
		l4 = make([]byte, 20)
		binary.BigEndian.PutUint16(l4[0:], p.sport)
		binary.BigEndian.PutUint16(l4[2:], p.dport)
		binary.BigEndian.PutUint32(l4[4:], 1) // seq
		l4[12] = 5 << 4                       // data offset
		l4[13] = 0x02                         // SYN
		binary.BigEndian.PutUint16(l4[14:], 64240)
		binary.BigEndian.PutUint16(l4[16:], l4Checksum(p, l4))
	case protoUDP:
		l4 = make([]byte, 8+4)
		binary.BigEndian.PutUint16(l4[0:], p.sport)
		binary.BigEndian.PutUint16(l4[2:], p.dport)
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		binary.BigEndian.PutUint16(l4[6:], l4Checksum(p, l4))
	case protoICMP, protoICMPv6:
		l4 = make([]byte, 8+8)
		l4[0], l4[1] = p.icmpType, p.icmpCode
		binary.BigEndian.PutUint16(l4[4:], 0x0d9d) // echo identifier
		binary.BigEndian.PutUint16(l4[6:], 1)      // echo sequence
		if p.proto == protoICMPv6 {
			binary.BigEndian.PutUint16(l4[2:], l4Checksum(p, l4)) // ICMPv6 has a pseudo-header
		} else {
			binary.BigEndian.PutUint16(l4[2:], checksum(l4, 0))
		}
	default:
		l4 = make([]byte, 8)
	}
	hdr := 20
	if p.src.Is6() {
		hdr = 40
	}
	f := make([]byte, 14+hdr+len(l4))
	copy(f[0:6], []byte{0xee, 0xee, 0xee, 0xee, 0xee, 0xee})
	copy(f[6:12], []byte{0x02, 0xd9, 0xd0, 0x00, 0x00, 0x01})
	ip := f[14 : 14+hdr]
	if p.src.Is6() {
		binary.BigEndian.PutUint16(f[12:], 0x86dd)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
		ip[6] = p.proto
		ip[7] = 64
		src, dst := p.src.As16(), p.dst.As16()
		copy(ip[8:24], src[:])
		copy(ip[24:40], dst[:])
	} else {
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		ip[8] = 64
		ip[9] = p.proto
		src, dst := p.src.As4(), p.dst.As4()
		copy(ip[12:16], src[:])
		copy(ip[16:20], dst[:])
		binary.BigEndian.PutUint16(ip[10:], checksum(ip, 0))
	}
	copy(f[14+hdr:], l4)
	return f
}

// l4Checksum is the TCP/UDP/ICMPv6 checksum over the pseudo-header of the
// packet's family and seg.
func l4Checksum(p tracePacket, seg []byte) uint16 {
	var sum uint32
	for _, b := range [][]byte{p.src.AsSlice(), p.dst.AsSlice()} {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
	}
	sum += uint32(p.proto) + uint32(len(seg))
	c := checksum(seg, sum)
	if c == 0 && p.proto == protoUDP {
		c = 0xffff // zero means "no checksum" in UDP
	}
	return c
}

// checksum is the Internet checksum of b, starting from a partial sum.
func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
