package tcpload

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var loopback = netip.MustParseAddr("127.0.0.1")

func serve(t *testing.T) netip.AddrPort {
	t.Helper()
	s, err := Listen(netip.AddrPortFrom(loopback, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return netip.AddrPortFrom(loopback, uint16(s.Port()))
}

func TestModes(t *testing.T) {
	dst := serve(t)
	const d = 50 * time.Millisecond
	rr, err := RequestResponse(dst, d)
	if err != nil || rr.Ops == 0 || rr.Elapsed < d || rr.Rate() <= 0 {
		t.Errorf("request/response: %+v, %v", rr, err)
	}
	src := NewSources(loopback)
	left := src.Left()
	crr, err := ConnectionRate(dst, src, d)
	if err != nil || crr.Ops == 0 || crr.Elapsed < d {
		t.Errorf("connection rate: %+v, %v", crr, err)
	}
	// Every connection took a source of its own (skips for ports in use
	// only make the count larger).
	if used := left - src.Left(); used < int(crr.Ops) {
		t.Errorf("%d connections used %d sources", crr.Ops, used)
	}
	bulk, err := Bulk(dst, d)
	if err != nil || bulk.Bytes < 128<<10 || bulk.BitsPerSecond() <= 0 {
		t.Errorf("bulk: %+v, %v", bulk, err)
	}
}

// TestServerCloseEndsConnections: Close returns while a client still holds
// a connection open (blocked readers are woken), and later clients fail.
func TestServerCloseEndsConnections(t *testing.T) {
	s, err := Listen(netip.AddrPortFrom(loopback, 0))
	if err != nil {
		t.Fatal(err)
	}
	dst := netip.AddrPortFrom(loopback, uint16(s.Port()))
	fd, err := dial(netip.AddrPort{}, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(fd)
	if err := writeAll(fd, []byte{modeRR}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := Probe(dst, time.Second); err != nil || got != Refused {
		t.Errorf("after close: %v, %v; want refused", got, err)
	}
}

func TestProbeRefused(t *testing.T) {
	dst := serve(t)
	if got, err := Probe(dst, time.Second); err != nil || got != Connected {
		t.Errorf("listening port: %v, %v", got, err)
	}
	// The port just used is free again.
	s, err := Listen(netip.AddrPortFrom(loopback, 0))
	if err != nil {
		t.Fatal(err)
	}
	free := netip.AddrPortFrom(loopback, uint16(s.Port()))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := Probe(free, time.Second); err != nil || got != Refused {
		t.Errorf("closed port: %v, %v", got, err)
	}
}

func TestSourcesNeverRepeat(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	s := NewSources(a, b)
	total := s.Left()
	if want := 2 * (lastPort - firstPort + 1); total != want {
		t.Fatalf("left %d, want %d", total, want)
	}
	seen := map[netip.AddrPort]bool{}
	for range total {
		ap, err := s.next()
		if err != nil {
			t.Fatal(err)
		}
		if seen[ap] || ap.Port() < firstPort {
			t.Fatalf("%s handed out twice or below %d", ap, firstPort)
		}
		seen[ap] = true
	}
	if _, err := s.next(); err == nil || s.Left() != 0 {
		t.Errorf("after %d: no error (left %d)", total, s.Left())
	}
}

func closeFD(fd int) { _ = unix.Close(fd) }

// TestSilentClientReleasesServer: the server serves one connection at a
// time, so a client that connects and sends nothing must hold it only until
// the socket timeout its accepted connection inherits from the listener; a
// later client is then served.
func TestSilentClientReleasesServer(t *testing.T) {
	dst := serve(t)
	fd, err := dial(netip.AddrPort{}, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(fd)
	// The silent connection is accepted first: one made after it waits
	// behind it, longer than a client's own timeout, so this one waits
	// longer.
	late, err := socket(3 * Timeout)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(late)
	if err := connect(late, dst); err != nil {
		t.Fatal(err)
	}
	buf := []byte{modeCRR}
	if err := writeAll(late, buf); err != nil {
		t.Fatal(err)
	}
	if err := readFull(late, buf); err != nil || buf[0] != modeCRR {
		t.Fatalf("connection after a silent one: %q, %v", buf, err)
	}
	// The silent connection was closed by the server: its read sees EOF.
	var b [1]byte
	if n, err := unix.Read(fd, b[:]); n != 0 || err != nil {
		t.Errorf("silent connection: read %d, %v; want EOF", n, err)
	}
}
