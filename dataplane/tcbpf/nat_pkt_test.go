package tcbpf

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
)

// Packets with real checksums, for the NAT tests: a translation must leave
// every checksum valid.

var (
	macWorkload = []byte{0x02, 0, 0, 0, 0, 0x01} // source of packets leaving the workload
	macHost     = []byte{0x02, 0, 0, 0, 0, 0x02}
)

func csumFold(sum uint32) uint16 {
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func csumAdd(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return sum
}

// pseudo is the IPv4 pseudo-header sum for an L4 segment.
func pseudo(ip []byte, l4len int) uint32 {
	sum := csumAdd(0, ip[12:20])
	return sum + uint32(ip[9]) + uint32(l4len)
}

// csumPkt builds an Ethernet + IPv4 + TCP/UDP frame with valid checksums.
// udpNoCsum leaves a UDP checksum of zero ("none").
func csumPkt(proto uint8, src, dst netip.AddrPort, tcpFlags byte, udpNoCsum bool) []byte {
	var l4 []byte
	payload := []byte("dpd-nat-test")
	if proto == 6 {
		l4 = make([]byte, 20, 20+len(payload))
		l4[12] = 5 << 4
		l4[13] = tcpFlags
	} else {
		l4 = make([]byte, 8, 8+len(payload))
		binary.BigEndian.PutUint16(l4[4:], uint16(8+len(payload)))
	}
	l4 = append(l4, payload...)
	binary.BigEndian.PutUint16(l4[0:], src.Port())
	binary.BigEndian.PutUint16(l4[2:], dst.Port())
	ip := make([]byte, 20)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
	ip[8] = 64
	ip[9] = proto
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:], csumFold(csumAdd(0, ip)))
	if proto == 6 || !udpNoCsum {
		off := 16
		if proto == 17 {
			off = 6
		}
		c := csumFold(csumAdd(pseudo(ip, len(l4)), l4))
		if c == 0 && proto == 17 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(l4[off:], c)
	}
	f := make([]byte, 0, 14+20+len(l4))
	f = append(f, macHost...)
	f = append(f, macWorkload...)
	f = append(f, 0x08, 0x00)
	f = append(f, ip...)
	return append(f, l4...)
}

// parsed is what a test checks of a frame the program returned.
type parsed struct {
	dstMAC, srcMAC []byte
	src, dst       netip.AddrPort
	l4Csum         uint16
}

// parseChecked reads frame and fails t unless every checksum is valid.
func parseChecked(t *testing.T, frame []byte) parsed {
	t.Helper()
	if len(frame) < 14+20+8 {
		t.Fatalf("frame too short: %d bytes", len(frame))
	}
	ip := frame[14 : 14+20]
	if csumFold(csumAdd(0, ip)) != 0 {
		t.Fatalf("bad IP checksum in %x", ip)
	}
	total := int(binary.BigEndian.Uint16(ip[2:]))
	l4 := frame[14+20 : 14+total]
	p := parsed{dstMAC: frame[0:6], srcMAC: frame[6:12]}
	p.src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), binary.BigEndian.Uint16(l4[0:]))
	p.dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), binary.BigEndian.Uint16(l4[2:]))
	off := 16
	if ip[9] == 17 {
		off = 6
	}
	p.l4Csum = binary.BigEndian.Uint16(l4[off:])
	if ip[9] == 17 && p.l4Csum == 0 {
		return p // no checksum
	}
	if csumFold(csumAdd(pseudo(ip, len(l4)), l4)) != 0 {
		t.Fatalf("bad L4 checksum %#04x for %s -> %s", p.l4Csum, p.src, p.dst)
	}
	return p
}

// runNAT runs prog on frame as received on ifindex (ingressIfindex is the
// device the packet originally came in on) and returns the verdict and the
// frame as the program left it.
func runNAT(t *testing.T, prog *ebpf.Program, ifindex, ingressIfindex int, frame []byte) (int, []byte) {
	t.Helper()
	ctx := skbContext{Ifindex: uint32(ifindex), IngressIfindex: uint32(ingressIfindex)}
	out := make([]byte, len(frame)+64)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out, Context: &ctx, Repeat: 1}
	ret, err := prog.Run(opts)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return int(int32(ret)), opts.DataOut
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func (p parsed) String() string { return fmt.Sprintf("%s -> %s", p.src, p.dst) }
