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

	// One echo flow: its first request takes the policy's path, and every
	// later packet both ways is established at both hooks.
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
	// B's hook counts every request and reply, whichever path they took.
	if got := ctPackets(t, d, ifB) - ctB; got != 2*n {
		t.Errorf("B's conntrack entries counted %d packets of the flow, want %d", got, 2*n)
	}

	// Fragments take the host side, where B's hook sees the first piece
	// of each datagram and passes the rest by it.
	const frags = 5
	txB = txPackets(t, ifB)
	out, err = wa.Exec("ping", "-n", "-c", strconv.Itoa(frags), "-i", "0.01", "-W", "1", "-s", "3000", ipB)
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
