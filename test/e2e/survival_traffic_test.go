package e2e

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Traffic that measures its own losses, for the survival tests: a 100 pps
// ping read from ping's summary, and an open TCP connection exchanging 8
// bytes each way every 10 ms whose losses are TCP's own retransmission
// count.

// pingRun is a 100 pps ping whose losses are read from ping's summary.
type pingRun struct {
	name string
	done chan struct{}
	out  []byte
	err  error
}

var pingSummary = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (?:packets )?received`)

// startPing sends count pings 10 ms apart from src to dst.
func startPing(src *Workload, dst string, count int) *pingRun {
	r := &pingRun{name: fmt.Sprintf("ping -i 0.01 %s -> %s", src.Pod, dst), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		cmd := exec.Command("ip", "netns", "exec", src.NS, "ping", "-n", "-q", "-i", "0.01", "-W", "1",
			"-c", strconv.Itoa(count), dst)
		r.out, r.err = cmd.CombinedOutput()
	}()
	return r
}

// result waits for the ping and returns sent and received.
func (r *pingRun) result(t *testing.T) (sent, received int) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("%s did not finish", r.name)
	}
	m := pingSummary.FindSubmatch(r.out)
	if m == nil {
		t.Fatalf("%s: no summary (err %v): %s", r.name, r.err, r.out)
	}
	sent, _ = strconv.Atoi(string(m[1]))
	received, _ = strconv.Atoi(string(m[2]))
	return sent, received
}

// inNetns runs fn on a thread inside the named namespace; sockets fn creates
// belong to that namespace. The thread is never returned to the pool.
func inNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err != nil {
			errc <- err
			return
		}
		defer func() { _ = h.Close() }()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

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
	if err := inNetns(srv.NS, func() error {
		var err error
		s.ln, err = net.Listen("tcp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
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
	if err := inNetns(cli.NS, func() error {
		var err error
		s.cli, err = net.DialTimeout("tcp4", net.JoinHostPort(srv.IP, strconv.Itoa(port)), 2*time.Second)
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
