package e2e

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/internal/testutil"
	"golang.org/x/sys/unix"
)

// Traffic that measures its own losses, for the survival tests: a 100 pps
// ping read from ping's summary (testutil.PingRun), and an open TCP connection exchanging 8
// bytes each way every 10 ms whose losses are TCP's own retransmission
// count.

// tcpStream is an open TCP connection from a client workload to a server
// workload that exchanges 8 bytes each way every 10 ms.
type tcpStream struct {
	ln       net.Listener
	cli, srv net.Conn
	stopc    chan struct{}
	done     chan struct{}
	// completed counts rounds; failed is set when the exchange broke.
	completed atomic.Int64
	failed    atomic.Bool
	// Written by loop only, read after done is closed.
	rounds int
	maxRTT time.Duration
	err    error
}

// startTCP opens the connection and starts the exchange.
func startTCP(t *testing.T, cli, srv *Workload, port int) *tcpStream {
	t.Helper()
	s := &tcpStream{stopc: make(chan struct{}), done: make(chan struct{})}
	network, wildcard := "tcp4", "0.0.0.0"
	if strings.Contains(srv.IP, ":") {
		network, wildcard = "tcp6", "::" // an IPv6 view of a dual-stack workload
	}
	if err := testutil.InNetns(srv.NS, func() error {
		var err error
		s.ln, err = net.Listen(network, net.JoinHostPort(wildcard, strconv.Itoa(port)))
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", srv.NS, err)
	}
	t.Cleanup(func() { _ = s.ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := s.ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
		_, _ = io.Copy(c, c) // echo until the client closes
		_ = c.Close()
	}()
	if err := testutil.InNetns(cli.NS, func() error {
		var err error
		s.cli, err = net.DialTimeout(network, net.JoinHostPort(srv.IP, strconv.Itoa(port)), 2*time.Second)
		return err
	}); err != nil {
		t.Fatalf("connect %s -> %s:%d: %v", cli.Pod, srv.IP, port, err)
	}
	t.Cleanup(func() { _ = s.cli.Close() })
	select {
	case s.srv = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("server did not accept")
	}
	go s.loop()
	return s
}

func (s *tcpStream) loop() {
	defer close(s.done)
	defer func() {
		if s.err != nil {
			s.failed.Store(true)
		}
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var out, in [8]byte
	for seq := uint64(1); ; seq++ {
		select {
		case <-s.stopc:
			return
		case <-tick.C:
		}
		binary.BigEndian.PutUint64(out[:], seq)
		start := time.Now()
		_ = s.cli.SetDeadline(start.Add(5 * time.Second))
		if _, err := s.cli.Write(out[:]); err != nil {
			s.err = fmt.Errorf("round %d: write: %w", seq, err)
			return
		}
		if _, err := io.ReadFull(s.cli, in[:]); err != nil {
			s.err = fmt.Errorf("round %d: read: %w", seq, err)
			return
		}
		if in != out {
			s.err = fmt.Errorf("round %d: echo %x, sent %x", seq, in, out)
			return
		}
		s.rounds++
		s.completed.Add(1)
		s.maxRTT = max(s.maxRTT, time.Since(start))
	}
}

// tcpResult is what the exchange saw: retransmits are TCP's own count of
// lost segments (TCP_INFO total_retrans) on each side.
type tcpResult struct {
	Rounds                    int
	MaxRTT                    time.Duration
	ClientRetrans, SrvRetrans uint32
	Err                       error
}

// stop ends the exchange and reports it.
func (s *tcpStream) stop() tcpResult {
	close(s.stopc)
	<-s.done
	r := tcpResult{Rounds: s.rounds, MaxRTT: s.maxRTT, Err: s.err,
		ClientRetrans: retransmits(s.cli), SrvRetrans: retransmits(s.srv)}
	_ = s.cli.Close()
	return r
}

// retransmits reads the connection's TCP_INFO total_retrans.
func retransmits(c net.Conn) uint32 {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0
	}
	var n uint32
	_ = raw.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			n = info.Total_retrans
		}
	})
	return n
}
