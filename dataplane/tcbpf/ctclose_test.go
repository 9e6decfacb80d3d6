package tcbpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// TestConntrackClosedTimeout: a TCP flow with a FIN each way, or an RST,
// is closed and expires after the closed timeout; a half-closed one (FIN
// one way) keeps the longer one, since its other side may still send.
func TestConntrackClosedTimeout(t *testing.T) {
	d := openTest(t, Options{})
	ifA := outboundOnly(t, d, 0, 0)

	// Each flow's packets: out from A (its egress), back to A (replies).
	type pkt struct {
		reply bool
		flags uint8
	}
	open := []pkt{{false, tcpSYN}, {true, tcpSYN | tcpACK}, {false, tcpACK}}
	flows := []struct {
		name  string
		sport uint16
		close []pkt
		flags uint32 // the close flags the entry must carry
	}{
		{"FIN both ways", 41000, []pkt{{false, tcpFIN | tcpACK}, {true, tcpFIN | tcpACK}, {false, tcpACK}}, abi.CTFClosing | abi.CTFClosed},
		{"FIN from the server first", 41001, []pkt{{true, tcpFIN | tcpACK}, {false, tcpFIN | tcpACK}}, abi.CTFClosing | abi.CTFClosed},
		{"RST", 41002, []pkt{{true, tcpRST}}, abi.CTFClosing | abi.CTFClosed},
		{"half-closed", 41003, []pkt{{false, tcpFIN | tcpACK}, {true, tcpACK}}, abi.CTFClosing | abi.CTFFinOrig},
	}
	for _, f := range flows {
		for i, p := range append(append([]pkt{}, open...), f.close...) {
			dir, frame := abi.DirFromWEP, tcpPkt(ipA, ipB, f.sport, 80, p.flags)
			if p.reply {
				dir, frame = abi.DirToWEP, tcpPkt(ipB, ipA, 80, f.sport, p.flags)
			}
			if got := run(t, d, dir, ifA, frame); got != abi.TCActOK {
				t.Fatalf("%s: packet %d: %d, want pass", f.name, i, got)
			}
		}
		key, _ := CTFlowKey(netip.AddrPortFrom(ipA, f.sport), netip.AddrPortFrom(ipB, 80), 6, abi.DirFromWEP, uint32(ifA))
		var v ctVal
		mustNil(t, d.Maps().Conntrack.Lookup(&key, &v))
		if got := v.Flags & (abi.CTFClosing | abi.CTFClosed); got != f.flags {
			t.Errorf("%s: close flags %#x, want %#x", f.name, got, f.flags)
		}
	}
	closedPlus := time.Duration(abi.CTTimeoutTCPClosedS+1) * time.Second
	if n, err := d.ScanConntrack(time.Now().Add(closedPlus)); err != nil || n != 3 {
		t.Fatalf("scan past the closed timeout: %d expired, %v; want the 3 closed flows", n, err)
	}
	if n, _ := d.CountConntrack(); n != 1 {
		t.Fatalf("%d entries left, want the half-closed one", n)
	}
	otherPlus := time.Duration(abi.CTTimeoutTCPOtherS+1) * time.Second
	if n, err := d.ScanConntrack(time.Now().Add(otherPlus)); err != nil || n != 1 {
		t.Fatalf("scan past the half-closed timeout: %d expired, %v; want 1", n, err)
	}
}
