package tcbpf

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestWorkloadRedirectPeer: once both hooks of a flow have passed it, the
// packets one workload sends the other go straight into the destination's
// namespace: the destination's host-side interface transmits none of them,
// and the destination hook's conntrack entry is refreshed and counted as
// its dpd_to_wep would have (TCP's established and closing states
// included). Fragments, which that hook tracks, still leave through the
// host-side interface, and so does every packet with HostSideDelivery.
func TestWorkloadRedirectPeer(t *testing.T) {
	testutil.RequirePrivileged(t)
	setSysctl(t, "/proc/sys/net/ipv4/ip_forward", "1")
	for _, hostSide := range []bool{false, true} {
		name := "peer"
		if hostSide {
			name = "host-side"
		}
		t.Run(name, func(t *testing.T) { workloadRedirectPeer(t, hostSide) })
	}
}

func workloadRedirectPeer(t *testing.T, hostSide bool) {
	d := openTest(t, Options{HostSideDelivery: hostSide})
	const ipA, ipB = "10.67.3.1", "10.67.3.2"
	wa, ifA := routedWorkload(t, ipA)
	wb, ifB := routedWorkload(t, ipB)
	allowBoth(t, d, ifA, wa, ifB, wb)
	testutil.WaitFor(t, 10*time.Second, "ping A->B", func() bool { return ping(wa, ipB) == nil })
	testutil.WaitFor(t, 10*time.Second, "ping B->A", func() bool { return ping(wb, ipA) == nil })

	peerHops(t, d, wa, ifA, ifB, ipB, hostSide)

	// Fragments take the host side, where B's hook sees the first piece
	// of each datagram and passes the rest by it.
	const frags = 5
	txB := txPackets(t, ifB)
	out, err := wa.Exec("ping", "-n", "-c", strconv.Itoa(frags), "-i", "0.01", "-W", "1", "-s", "3000", ipB)
	if err != nil {
		t.Fatalf("fragmented ping A->B: %v\n%s", err, out)
	}
	if got := txPackets(t, ifB) - txB; got < 3*frags {
		t.Errorf("B's host side transmitted %d packets of %d fragmented requests (3 pieces each)", got, frags)
	}

	// TCP: A's entry learns from B's SYN-ACK that the flow is established,
	// and from both FINs that it closed, on whichever path they came.
	testutil.ServeName(t, wb.NS, 8080, "b")
	if got, err := testutil.AskName(wa.NS, "tcp4", ipB+":8080"); err != nil || got != "b" {
		t.Fatalf("TCP A->B: %q, %v", got, err)
	}
	want := uint32(abi.CTFEstablished | abi.CTFClosed)
	testutil.WaitFor(t, 5*time.Second, "A's TCP entry established and closed", func() bool {
		f, ok := ctFlags(t, d, ifA, 8080)
		return ok && f&want == want
	})
}

// TestWorkloadRedirectPeer6 is TestWorkloadRedirectPeer's echo flow over
// IPv6.
func TestWorkloadRedirectPeer6(t *testing.T) {
	testutil.RequirePrivileged(t)
	setSysctl(t, "/proc/sys/net/ipv6/conf/all/forwarding", "1")
	d := openTest(t, Options{})
	const ipA, ipB = "fd67:3::1", "fd67:3::2"
	wa, ifA := routedWorkload6(t, "10.67.3.11", ipA)
	wb, ifB := routedWorkload6(t, "10.67.3.12", ipB)
	allowBoth(t, d, ifA, wa, ifB, wb)
	testutil.WaitFor(t, 10*time.Second, "ping A->B", func() bool { return ping(wa, ipB) == nil })
	testutil.WaitFor(t, 10*time.Second, "ping B->A", func() bool { return ping(wb, ipA) == nil })
	peerHops(t, d, wa, ifA, ifB, ipB, false)
}

// peerHops pings ipB from wa (on ifA) in one echo flow, whose first
// request takes the policy's path and whose later packets both ways are
// established at both hooks, and checks what the host sides of A and B
// transmitted of them: each flow's first only, or with hostSide every one;
// and that B's hooks counted every request and reply either way.
func peerHops(t *testing.T, d *Datapath, wa *testutil.Workload, ifA, ifB int, ipB string, hostSide bool) {
	t.Helper()
	const n = 20
	txA, txB := txPackets(t, ifA), txPackets(t, ifB)
	ctB := ctPackets(t, d, ifB)
	out, err := wa.Exec("ping", "-n", "-c", strconv.Itoa(n), "-i", "0.01", "-W", "1", ipB)
	if err != nil {
		t.Fatalf("ping A->B: %v\n%s", err, out)
	}
	if got := strings.Count(out, "ttl=63"); got != n {
		t.Errorf("want %d replies with ttl=63 (one hop each way), got %d:\n%s", n, got, out)
	}
	dA, dB := txPackets(t, ifA)-txA, txPackets(t, ifB)-txB
	// Slack of two for the neighbour traffic the host itself sends.
	if hostSide && (dA < n || dB < n) {
		t.Errorf("host-side delivery: the host sides transmitted %d (A) and %d (B) packets of %d each way", dA, dB, n)
	}
	if !hostSide && (dA > 2 || dB > 2) {
		t.Errorf("peer delivery: the host sides transmitted %d (A) and %d (B) packets of %d each way, want each flow's first only", dA, dB, n)
	}
	// Every request and reply counted once (a few more may come from
	// other flows of the pair meanwhile; twice would be 4n).
	if got := ctPackets(t, d, ifB) - ctB; got < 2*n || got > 2*n+4 {
		t.Errorf("B's conntrack entries counted %d packets of the flow, want %d", got, 2*n)
	}
}

// txPackets is what ifindex has transmitted.
func txPackets(t *testing.T, ifindex int) uint64 {
	t.Helper()
	l, err := netlink.LinkByIndex(ifindex)
	mustNil(t, err)
	return l.Attrs().Statistics.TxPackets
}

// ctPackets sums the packets every conntrack entry of ifindex's hooks has
// counted, both ways.
func ctPackets(t *testing.T, d *Datapath, ifindex int) uint64 {
	t.Helper()
	var n uint64
	mustNil(t, d.ctWalk(func(_ *ebpf.Map, k *ctKey, v *ctVal) {
		if k.Ifindex == uint32(ifindex) {
			n += v.PktsFwd + v.PktsRev
		}
	}))
	return n
}

// ctFlags is the flags of ifindex's TCP entry with port at either end.
func ctFlags(t *testing.T, d *Datapath, ifindex int, port uint16) (flags uint32, ok bool) {
	t.Helper()
	mustNil(t, d.ctWalk(func(_ *ebpf.Map, k *ctKey, v *ctVal) {
		if k.Ifindex == uint32(ifindex) && k.Proto == 6 && (k.Sport == port || k.Dport == port) {
			flags, ok = v.Flags, true
		}
	}))
	return flags, ok
}
