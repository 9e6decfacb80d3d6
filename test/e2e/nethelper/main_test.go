package main

import (
	"net"
	"testing"
	"time"
)

// The probes must both succeed and fail for real; exercise them on loopback
// (no privileges needed).
func TestHelperProbes(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go acceptLoop(ln)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go echoLoop(pc)

	// A port that was just free, so nothing answers on it.
	closed, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	_ = closed.Close()
	silent, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })

	const timeout = 300 * time.Millisecond
	tests := []struct {
		name    string
		probe   func() error
		wantErr bool
	}{
		{"tcp greeting", func() error { return tcpProbe(ln.Addr().String(), timeout) }, false},
		{"tcp refused", func() error { return tcpProbe(closedAddr, timeout) }, true},
		{"udp echo", func() error { return udpProbe(pc.LocalAddr().String(), timeout, 0) }, false},
		{"udp echo 4000 bytes", func() error { return udpProbe(pc.LocalAddr().String(), timeout, 4000) }, false},
		{"udp no echo", func() error { return udpProbe(silent.LocalAddr().String(), timeout, 0) }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.probe(); (err != nil) != tc.wantErr {
				t.Errorf("err = %v, wantErr %v", err, tc.wantErr)
			}
		})
	}
}

func TestRunRejectsBadCommands(t *testing.T) {
	if code := run([]string{"nope"}); code == 0 {
		t.Error("unknown command must fail")
	}
	if code := run(nil); code == 0 {
		t.Error("missing command must fail")
	}
}
