package tcbpf

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

var (
	fe6Addr = netip.MustParseAddrPort("[fd00:96::10]:80")
	be6B    = NATBackend{Addr: netip.MustParseAddr("fd00:65::2"), Port: 8080}
	be6C    = NATBackend{Addr: netip.MustParseAddr("fd00:65::3"), Port: 8080}
	fe6     = NATFrontend{Addr: fe6Addr.Addr(), Port: fe6Addr.Port(), Proto: 6}
)

func (e *natEnv) from6(t *testing.T, frame []byte) (int, parsed) {
	t.Helper()
	ret, out := runNAT(t, e.d.Programs().FromWEP, e.ifA, e.ifA, frame)
	if ret == abi.TCActShot {
		return ret, parsed{}
	}
	return ret, parsed6(t, out)
}

func (e *natEnv) to6(t *testing.T, ifindex, ingress int, frame []byte) (int, parsed) {
	t.Helper()
	ret, out := runNAT(t, e.d.Programs().ToWEP, ifindex, ingress, frame)
	if ret == abi.TCActShot {
		return ret, parsed{}
	}
	return ret, parsed6(t, out)
}

// TestIPv6NATTranslatesBothWays: an IPv6 frontend goes to IPv6 backends
// with valid checksums (pseudo-header over 16-byte addresses), keeps its
// backend, and its replies get the frontend back.
func TestIPv6NATTranslatesBothWays(t *testing.T) {
	e := newNATEnv(t)
	mustNil(t, e.d.ProgramNATPort(7, []NATFrontend{fe6}, []NATBackend{be6B, be6C}, 0))
	client := ap6(ip6A, 40000)

	ret, out := e.from6(t, tcp6(client, fe6Addr, tcpSYN))
	if ret != abi.TCActOK {
		t.Fatalf("SYN to frontend: verdict %d", ret)
	}
	if out.src != client || (out.dst.Addr() != be6B.Addr && out.dst.Addr() != be6C.Addr) || out.dst.Port() != 8080 {
		t.Fatalf("SYN translated to %s, want %s -> a backend:8080", out, client)
	}
	backend := out.dst
	for range 10 {
		if _, again := e.from6(t, tcp6(client, fe6Addr, tcpACK)); again.dst != backend {
			t.Fatalf("connection moved from %s to %s", backend, again.dst)
		}
	}
	ret, rep := e.to6(t, e.ifA, e.ifB, tcp6(backend, client, tcpSYN|tcpACK))
	if ret != abi.TCActOK || rep.src != fe6Addr || rep.dst != client {
		t.Fatalf("reply: verdict %d, %s; want %s -> %s", ret, rep, fe6Addr, client)
	}
	flows, err := e.d.NATFlows()
	mustNil(t, err)
	if len(flows) != 1 || flows[0].Src != client || flows[0].Frontend != fe6 || flows[0].Backend.Addr != backend.Addr() {
		t.Fatalf("NAT flows %+v", flows)
	}
	fes, err := e.d.NATFrontends()
	mustNil(t, err)
	if len(fes) != 1 || fes[0].Frontend != fe6 {
		t.Fatalf("frontends read back %+v", fes)
	}
	if bes, err := e.d.NATBackendsOf(7); err != nil || len(bes) != 2 || bes[0] != be6B || bes[1] != be6C {
		t.Fatalf("backends read back %v %v", bes, err)
	}

	// UDP: the checksum is fixed too.
	udpFE := NATFrontend{Addr: fe6Addr.Addr(), Port: 53, Proto: 17}
	mustNil(t, e.d.ProgramNATPort(8, []NATFrontend{udpFE}, []NATBackend{{Addr: be6B.Addr, Port: 5353}}, 0))
	ret, out = e.from6(t, udp6(client, ap6(fe6Addr.Addr(), 53)))
	if ret != abi.TCActOK || out.dst != ap6(be6B.Addr, 5353) {
		t.Fatalf("udp to frontend: verdict %d, %s", ret, out)
	}
	ret, rep = e.to6(t, e.ifA, e.ifB, udp6(ap6(be6B.Addr, 5353), client))
	if ret != abi.TCActOK || rep.src != ap6(fe6Addr.Addr(), 53) {
		t.Fatalf("udp reply: verdict %d, %s", ret, rep)
	}
}

// TestIPv6NATFamilies: a port cannot mix families, and an IPv6 packet
// whose address has an IPv4 frontend's key bytes is not translated.
func TestIPv6NATFamilies(t *testing.T) {
	e := newNATEnv(t)
	if err := e.d.ProgramNATPort(7, []NATFrontend{fe6}, []NATBackend{beB}, 0); err == nil {
		t.Fatal("IPv6 frontend with an IPv4 backend programmed")
	}
	if err := e.d.ProgramNATPort(7, []NATFrontend{fe6, e.fe}, []NATBackend{be6B}, 0); err == nil {
		t.Fatal("frontends of both families in one port programmed")
	}
	mustNil(t, e.d.ProgramNATPort(7, []NATFrontend{e.fe}, []NATBackend{beB}, 0))
	a4 := feAddr.Addr().As4()
	var look [16]byte
	copy(look[:], a4[:])
	dst := ap6(netip.AddrFrom16(look), 80)
	ret, out := e.from6(t, tcp6(ap6(ip6A, 40000), dst, tcpSYN))
	if ret != abi.TCActOK || out.dst != dst {
		t.Fatalf("lookalike of an IPv4 frontend: verdict %d, %s; want untranslated", ret, out)
	}
}

// TestIPv6NATHairpin: a client that is its own backend gets the IPv6
// hairpin source, and the round trip works as for IPv4.
func TestIPv6NATHairpin(t *testing.T) {
	e := newNATEnv(t)
	self := NATBackend{Addr: ip6A, Port: 8080}
	mustNil(t, e.d.ProgramNATPort(7, []NATFrontend{fe6}, []NATBackend{self}, 0))
	client := ap6(ip6A, 40000)
	hairpin := netip.MustParseAddr("fd64:7064::fd")
	w := abi.HairpinAddr6
	if got := netip.AddrFrom16([16]byte{byte(w[0] >> 24), byte(w[0] >> 16), byte(w[0] >> 8), byte(w[0]),
		12: byte(w[3] >> 24), 13: byte(w[3] >> 16), 14: byte(w[3] >> 8), 15: byte(w[3])}); got != hairpin || w[1]|w[2] != 0 {
		t.Fatalf("abi.HairpinAddr6 is %s, documented %s", got, hairpin)
	}
	selfAP := ap6(ip6A, 8080)

	ret, out := e.from6(t, tcp6(client, fe6Addr, tcpSYN))
	if ret != tcActRedirect || out.src != ap6(hairpin, 40000) || out.dst != selfAP {
		t.Fatalf("hairpin request: verdict %d, %s", ret, out)
	}
	if !bytes.Equal(out.dstMAC, macWorkload) || !bytes.Equal(out.srcMAC, macHost) {
		t.Fatalf("hairpin request MACs %x <- %x, want swapped", out.dstMAC, out.srcMAC)
	}
	if ret, _ := e.to6(t, e.ifA, e.ifA, tcp6(out.src, out.dst, tcpSYN)); ret != abi.TCActOK {
		t.Fatalf("hairpinned request into the workload: verdict %d", ret)
	}
	mustNil(t, e.d.InstallPolicy(1, abi.DirToWEP, verdictProg(t, e.d, abi.VerdictDeny, 0)))
	if ret, _ := e.to6(t, e.ifA, e.ifB, tcp6(ap6(hairpin, 40001), selfAP, tcpSYN)); ret != abi.TCActShot {
		t.Fatalf("hairpin source from another interface: verdict %d, want drop", ret)
	}
	ret, rep := e.from6(t, tcp6(selfAP, ap6(hairpin, 40000), tcpSYN|tcpACK))
	if ret != abi.TCActOK || rep.src != selfAP || rep.dst != client {
		t.Fatalf("hairpin reply: verdict %d, %s", ret, rep)
	}
	ret, fin := e.to6(t, e.ifA, e.ifA, tcp6(rep.src, rep.dst, tcpSYN|tcpACK))
	if ret != abi.TCActOK || fin.src != fe6Addr || fin.dst != client {
		t.Fatalf("hairpin reply into the client: verdict %d, %s", ret, fin)
	}
}

// TestIPv6NATFragments: a fragmented datagram to an IPv6 frontend goes to
// one backend, every fragment rewritten (only the first carries ports).
func TestIPv6NATFragments(t *testing.T) {
	e := newNATEnv(t)
	udpFE := NATFrontend{Addr: fe6Addr.Addr(), Port: 53, Proto: 17}
	mustNil(t, e.d.ProgramNATPort(8, []NATFrontend{udpFE}, []NATBackend{{Addr: be6B.Addr, Port: 5353}}, 0))
	dg := udp6Datagram(ap6(ip6A, 40000), ap6(fe6Addr.Addr(), 53), 3000)
	for i, f := range frags6(ip6A, fe6Addr.Addr(), 17, 0x77, dg, 1232) {
		ret, out := runNAT(t, e.d.Programs().FromWEP, e.ifA, e.ifA, f)
		if ret != abi.TCActOK {
			t.Fatalf("fragment %d: verdict %d", i, ret)
		}
		if got := netip.AddrFrom16([16]byte(out[14+24 : 14+40])); got != be6B.Addr {
			t.Fatalf("fragment %d went to %s, want %s", i, got, be6B.Addr)
		}
	}
}
