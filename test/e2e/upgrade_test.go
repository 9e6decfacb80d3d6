//go:build upgrade

package e2e

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestUpgrade replaces a running older dpd (the binary DPD_UPGRADE_FROM
// names, built from an earlier commit) with this one under traffic: no
// ping lost, no TCP segment retransmitted on an open connection whose
// replies only conntrack lets through, no new connection failing all
// along, and the older dpd's conntrack retired. It needs that binary, so
// it is not in the suite:
//
//	DPD_UPGRADE_FROM=/path/to/old/dpd go test -tags upgrade -run TestUpgrade ./test/e2e/
func TestUpgrade(t *testing.T) {
	testutil.RequirePrivileged(t)
	old := os.Getenv("DPD_UPGRADE_FROM")
	if old == "" {
		t.Fatal("DPD_UPGRADE_FROM must name the older dpd binary")
	}
	a, b, c, d := NewWorkload(t, 1), NewWorkload(t, 2), NewWorkload(t, 3), NewWorkload(t, 4)
	snap := messages(t, survivalScenario(a, b, c, d))
	n := newNode(t)
	current := dpdBinary
	dpdBinary = old
	n.start()
	ctl := n.connectUp(t, snap, a, b, c, d)
	dpdBinary = current
	Expect(t, Allowed(Ping(a, b.IP)), Denied(Ping(c, b.IP)))

	// C's ingress denies everything: the replies of C -> A pass by
	// conntrack alone. On the push stream they come unasked (the server
	// writes, the client only acknowledges), so no packet of the client
	// can get its connection a new entry first.
	st := startTCP(t, c, a, 9170)
	push := startPush(t, c, a, 9173)
	tr := startTraffic(t, a, b, 3000, 9171)
	conns := dialLoop(t, c, a, 9172)
	tr.waitRounds(t, 50)
	n.stop()
	tr.waitRounds(t, 50)
	n.start("DPD_CONNTRACK_SCAN_INTERVAL=1s")
	ctl.waitStreams(t, 2)
	testutil.WaitFor(t, time.Minute, "the older conntrack retired", func() bool {
		_, err := os.Stat(filepath.Join(n.pin, abi.MapConntrackLRU))
		return errors.Is(err, os.ErrNotExist)
	})
	tr.waitRounds(t, 100)
	ok, failed := conns.stop()
	t.Logf("new connections C -> A: %d completed, %d failed", ok, failed)
	if ok == 0 || failed > 0 {
		t.Errorf("new connections across the upgrade: %d completed, %d failed", ok, failed)
	}
	Expect(t, Allowed(Ping(a, b.IP)), Denied(Ping(c, b.IP)))
	tr.requireNoLoss(t, "upgrade")
	if n, retrans, err := push.stop(); err != nil || retrans != 0 || n == 0 {
		t.Errorf("push stream A -> C across the upgrade: %d writes, %d retransmitted, %v", n, retrans, err)
	} else {
		t.Logf("push stream A -> C: %d writes, none retransmitted", n)
	}
	r := st.stop()
	t.Logf("C -> A stream: %d rounds, retransmits %d/%d", r.Rounds, r.ClientRetrans, r.SrvRetrans)
	if r.Err != nil || r.ClientRetrans != 0 || r.SrvRetrans != 0 {
		t.Errorf("C -> A stream across the upgrade: %v, retransmits %d/%d", r.Err, r.ClientRetrans, r.SrvRetrans)
	}
}

// connLoop opens one connection after another and counts the outcomes.
type connLoop struct {
	ok, failed atomic.Int64
	stopc      chan struct{}
	done       chan struct{}
}

// dialLoop serves port in srv and connects to it from cli until stop.
func dialLoop(t *testing.T, cli, srv *Workload, port int) *connLoop {
	t.Helper()
	ln := listenIn(t, srv, port)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hi"))
			_ = c.Close()
		}
	}()
	l := &connLoop{stopc: make(chan struct{}), done: make(chan struct{})}
	go every(5*time.Millisecond, l.stopc, l.done, func() bool {
		err := testutil.InNetns(cli.NS, func() error {
			c, err := net.DialTimeout("tcp4", net.JoinHostPort(srv.IP, strconv.Itoa(port)), 2*time.Second)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			_, err = c.Read(make([]byte, 2))
			return err
		})
		if err != nil {
			l.failed.Add(1)
			t.Logf("connection %s -> %s:%d: %v", cli.Pod, srv.IP, port, err)
		} else {
			l.ok.Add(1)
		}
		return true
	})
	return l
}

func (l *connLoop) stop() (ok, failed int64) {
	close(l.stopc)
	<-l.done
	return l.ok.Load(), l.failed.Load()
}

// pushStream is a connection from a client to a server on which the server
// writes 8 bytes every 10 ms and the client only reads.
type pushStream struct {
	srv    net.Conn
	stopc  chan struct{}
	done   chan struct{}
	writes int
	err    error
}

func startPush(t *testing.T, cli, srv *Workload, port int) *pushStream {
	t.Helper()
	ln := listenIn(t, srv, port)
	var c net.Conn
	if err := testutil.InNetns(cli.NS, func() (err error) {
		c, err = net.DialTimeout("tcp4", net.JoinHostPort(srv.IP, strconv.Itoa(port)), 2*time.Second)
		return err
	}); err != nil {
		t.Fatalf("connect %s -> %s:%d: %v", cli.Pod, srv.IP, port, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	go func() { _, _ = io.Copy(io.Discard, c) }()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	p := &pushStream{srv: sc, stopc: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { _ = sc.Close() })
	go every(10*time.Millisecond, p.stopc, p.done, func() bool {
		if _, err := sc.Write([]byte("pushpush")); err != nil {
			p.err = err
			return false
		}
		p.writes++
		return true
	})
	return p
}

// stop ends the stream: the writes made, the server's retransmissions.
func (p *pushStream) stop() (writes int, retrans uint32, err error) {
	close(p.stopc)
	<-p.done
	return p.writes, retransmits(p.srv), p.err
}

// listenIn listens on port in w's namespace until the test ends.
func listenIn(t *testing.T, w *Workload, port int) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := testutil.InNetns(w.NS, func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", w.NS, err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// every calls fn each period until stop closes or fn returns false, then
// closes done.
func every(period time.Duration, stop <-chan struct{}, done chan<- struct{}, fn func() bool) {
	defer close(done)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if !fn() {
			return
		}
	}
}
