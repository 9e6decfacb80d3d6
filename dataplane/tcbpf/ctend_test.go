package tcbpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// TestConntrackCountsAndEnd: an allowed flow's entry holds the allowing
// rule and each direction's packets and bytes, and the scan that expires
// it hands them over once; NAT entries never end as flows.
func TestConntrackCountsAndEnd(t *testing.T) {
	d := openTest(t, Options{})
	ifA := outboundOnly(t, d, 0xa11, 0xd11)

	out := tcpPkt(ipA, ipB, 40000, 80, tcpSYN)
	reply := tcpPkt(ipB, ipA, 80, 40000, tcpSYN|tcpACK)
	ack := tcpPkt(ipA, ipB, 40000, 80, tcpACK)
	for _, step := range []struct {
		dir   int
		frame []byte
	}{{abi.DirFromWEP, out}, {abi.DirToWEP, reply}, {abi.DirFromWEP, ack}, {abi.DirFromWEP, ack}, {abi.DirToWEP, reply}} {
		if got := run(t, d, step.dir, ifA, step.frame); got != abi.TCActOK {
			t.Fatalf("dir %d: %d, want pass", step.dir, got)
		}
	}
	var v ctVal
	key, _ := CTFlowKey(netip.AddrPortFrom(ipA, 40000), netip.AddrPortFrom(ipB, 80), 6, abi.DirFromWEP, uint32(ifA))
	mustNil(t, d.Maps().Conntrack.Lookup(&key, &v))
	fwdBytes := uint64(len(out) + 2*len(ack))
	if v.RuleId != 0xa11 || v.PktsFwd != 3 || v.BytesFwd != fwdBytes || v.PktsRev != 2 || v.BytesRev != uint64(2*len(reply)) {
		t.Fatalf("entry %+v: want rule a11, 3 packets %d bytes forward, 2 packets %d bytes back",
			v, fwdBytes, 2*len(reply))
	}
	// A NAT entry expires without being reported.
	nat := key
	nat.Dir = abi.DirNAT
	nat.Dport = 8080
	mustNil(t, d.Maps().Conntrack.Put(&nat, &ctVal{Created: v.Created, LastSeen: v.LastSeen}))

	var ended []ctVal
	record := func(k *CTKey, v *CTVal) {
		if *k != key {
			t.Errorf("ended %+v, want %+v", *k, key)
		}
		ended = append(ended, *v)
	}
	if n, err := d.ScanConntrackEnded(time.Now(), record); err != nil || n != 0 || len(ended) != 0 {
		t.Fatalf("scan now: %d expired, %d ended, %v", n, len(ended), err)
	}
	later := time.Now().Add(CTTimeout(6, v.Flags) + time.Hour)
	if n, err := d.ScanConntrackEnded(later, record); err != nil || n != 2 || len(ended) != 1 {
		t.Fatalf("scan past the timeout: %d expired, %d ended, %v; want 2 and 1", n, len(ended), err)
	}
	if e := ended[0]; e.PktsFwd != 3 || e.PktsRev != 2 || e.RuleId != 0xa11 {
		t.Fatalf("ended entry %+v", e)
	}
	if n, err := d.ScanConntrackEnded(later, record); err != nil || n != 0 || len(ended) != 1 {
		t.Fatalf("second scan: %d expired, %d ended, %v", n, len(ended), err)
	}
}
