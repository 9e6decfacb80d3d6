// Package tcpload is the TCP load generator of dpd-bench's real-traffic
// figure: request/response over one connection, a new connection per
// request, and bulk throughput, between a Server and the client functions
// here. Sockets are plain blocking system calls on raw descriptors, not Go's
// net package, so each operation costs the kernel's path and a system call
// rather than a netpoller wake-up too: the generator's own cost must be
// small beside what a dataplane adds, or it hides it.
//
// The package knows nothing of network namespaces: a socket belongs to the
// namespace of the thread that creates it, so callers create a Server, and
// run the client functions, on threads switched into the namespaces they
// mean (accepted connections stay in the listener's).
package tcpload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A connection's first byte says what the client measures.
const (
	modeRR   = 'r' // then 1-byte requests, each answered by 1 byte
	modeCRR  = 'c' // answered by 1 byte, then the server closes
	modeBulk = 'b' // then data until the client's FIN, answered by the byte count
)

// bulkBuffer is both ends' socket buffer in bulk mode, fixed (which takes
// CAP_NET_ADMIN beyond net.core's maximums): TCP's buffer autotuning
// reacts to timing, so it made measurements of one path differ by more than
// the paths do.
const bulkBuffer = 8 << 20

// Timeout bounds every blocking client call (connect, read, write), so a
// path that drops packets ends a measurement with an error, not a hang.
const Timeout = 2 * time.Second

// Result is one measurement.
type Result struct {
	Ops     int64 // requests answered (RR, CRR)
	Bytes   int64 // bytes the server received (Bulk)
	Elapsed time.Duration
}

// Rate is operations per second.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// BitsPerSecond is the bulk throughput.
func (r Result) BitsPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return 8 * float64(r.Bytes) / r.Elapsed.Seconds()
}

// Server answers every mode on one listening socket until Close.
type Server struct {
	fd   int
	port int

	mu     sync.Mutex
	conns  map[int]bool // open accepted descriptors; guarded by mu
	closed bool         // guarded by mu
	wg     sync.WaitGroup
}

// Listen opens a listening TCP socket on addr (port 0 picks one) in the
// calling thread's network namespace and starts serving it.
func Listen(addr netip.AddrPort) (*Server, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	fail := func(what string, err error) (*Server, error) {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("%s %s: %w", what, addr, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fail("reuseaddr", err)
	}
	if err := setTimeouts(fd, Timeout); err != nil {
		return fail("socket timeout", err)
	}
	if err := unix.Bind(fd, sockaddr(addr)); err != nil {
		return fail("bind", err)
	}
	if err := unix.Listen(fd, 4096); err != nil {
		return fail("listen", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	s := &Server{fd: fd, port: sa.(*unix.SockaddrInet4).Port, conns: map[int]bool{}}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Port is the port the server listens on.
func (s *Server) Port() int { return s.port }

// Close stops accepting, ends every open connection and waits for the
// server's goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	// shutdown, not close, wakes a thread blocked in accept or read.
	err := unix.Shutdown(s.fd, unix.SHUT_RDWR)
	for fd := range s.conns {
		_ = unix.Shutdown(fd, unix.SHUT_RDWR)
	}
	s.mu.Unlock()
	s.wg.Wait()
	if cerr := unix.Close(s.fd); err == nil || errors.Is(err, unix.ENOTCONN) {
		err = cerr
	}
	return err
}

// acceptLoop serves one connection at a time, in the accepting goroutine:
// each server has one client at a time, and a goroutine per connection put
// the Go scheduler into what is measured (the new goroutine waited in the
// run queue of a P whose thread had gone back into accept until sysmon took
// that P back: tens of microseconds to milliseconds per connection, with
// the CPU idle meanwhile). A client that connects and then says nothing
// holds the server for at most Timeout (the listener's socket timeouts,
// which accepted connections inherit).
func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		fd, _, err := unix.Accept4(s.fd, unix.SOCK_CLOEXEC)
		s.mu.Lock()
		closed := s.closed
		if err == nil && !closed {
			s.conns[fd] = true
		}
		s.mu.Unlock()
		switch {
		case err == nil && closed:
			_ = unix.Close(fd)
			return
		case err == nil:
			s.serve(fd)
		case closed:
			return
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.ECONNABORTED), errors.Is(err, unix.EAGAIN):
		default:
			// Out of descriptors or memory: clients see refused or
			// stalled connections and fail their measurement.
			time.Sleep(time.Millisecond)
		}
	}
}

func (s *Server) serve(fd int) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, fd)
		s.mu.Unlock()
		_ = unix.Close(fd)
	}()
	buf := make([]byte, 1)
	if n, err := read(fd, buf); err != nil || n == 0 {
		return
	}
	switch buf[0] {
	case modeRR:
		for {
			if n, err := read(fd, buf); err != nil || n == 0 {
				return
			}
			if writeAll(fd, buf) != nil {
				return
			}
		}
	case modeCRR:
		_ = writeAll(fd, buf)
	case modeBulk:
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, bulkBuffer) != nil {
			return // the client's count read fails its measurement
		}
		big := make([]byte, 256<<10)
		var total uint64
		for {
			n, err := read(fd, big)
			if err != nil {
				return
			}
			if n == 0 {
				break
			}
			total += uint64(n)
		}
		_ = writeAll(fd, binary.BigEndian.AppendUint64(nil, total))
	}
}

// RequestResponse sends 1-byte requests over one connection to dst, each
// after the previous answer, for d.
func RequestResponse(dst netip.AddrPort, d time.Duration) (Result, error) {
	fd, err := dial(netip.AddrPort{}, dst)
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		return Result{}, fmt.Errorf("nodelay: %w", err)
	}
	if err := writeAll(fd, []byte{modeRR}); err != nil {
		return Result{}, err
	}
	buf := []byte{'x'}
	var res Result
	start := time.Now()
	for res.Elapsed < d {
		if err := writeAll(fd, buf); err != nil {
			return res, fmt.Errorf("request %d: %w", res.Ops, err)
		}
		if err := readFull(fd, buf); err != nil {
			return res, fmt.Errorf("answer %d: %w", res.Ops, err)
		}
		res.Ops++
		res.Elapsed = time.Since(start)
	}
	return res, nil
}

// ConnectionRate opens a new connection to dst per request, one after the
// other, for d: connect, 1-byte request, 1-byte answer, the server's close,
// then the client's. Each connection's source comes from src, so no source
// address and port is used twice (a reused one could meet the previous
// connection's state in a conntrack table and skip the policy a new
// connection pays).
func ConnectionRate(dst netip.AddrPort, src *Sources, d time.Duration) (Result, error) {
	buf := []byte{modeCRR}
	var res Result
	start := time.Now()
	for res.Elapsed < d {
		from, err := src.next()
		if err != nil {
			return res, err
		}
		fd, err := dial(from, dst)
		if errors.Is(err, unix.EADDRINUSE) {
			continue // something else holds that port: take the next
		}
		if err != nil {
			return res, fmt.Errorf("connection %d: %w", res.Ops, err)
		}
		err = writeAll(fd, buf)
		if err == nil {
			err = readFull(fd, buf[:1])
		}
		if err == nil {
			err = awaitEOF(fd)
		}
		_ = unix.Close(fd)
		if err != nil {
			return res, fmt.Errorf("connection %d from %s: %w", res.Ops, from, err)
		}
		buf[0] = modeCRR
		res.Ops++
		res.Elapsed = time.Since(start)
	}
	return res, nil
}

// Bulk sends data over one connection to dst for d, then half-closes and
// waits for the server's count of what arrived; Elapsed runs to that
// answer, so data still queued when the sending stops is counted fairly.
func Bulk(dst netip.AddrPort, d time.Duration) (Result, error) {
	fd, err := dial(netip.AddrPort{}, dst)
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, bulkBuffer); err != nil {
		return Result{}, fmt.Errorf("send buffer: %w", err)
	}
	if err := writeAll(fd, []byte{modeBulk}); err != nil {
		return Result{}, err
	}
	chunk := make([]byte, 128<<10)
	start := time.Now()
	for time.Since(start) < d {
		if err := writeAll(fd, chunk); err != nil {
			return Result{}, fmt.Errorf("send: %w", err)
		}
	}
	if err := unix.Shutdown(fd, unix.SHUT_WR); err != nil {
		return Result{}, fmt.Errorf("half-close: %w", err)
	}
	count := make([]byte, 8)
	if err := readFull(fd, count); err != nil {
		return Result{}, fmt.Errorf("read the count: %w", err)
	}
	return Result{Bytes: int64(binary.BigEndian.Uint64(count)), Elapsed: time.Since(start)}, nil
}

// Outcome is how a connection attempt ended.
type Outcome string

const (
	Connected Outcome = "connected"
	Refused   Outcome = "refused" // a RST: nothing listens, and nothing dropped the SYN
	Dropped   Outcome = "dropped" // no answer within the wait
)

// Probe tries one connection to dst, waiting at most wait for an answer:
// a policy that drops the port shows as Dropped, a path without one as
// Refused (or Connected).
func Probe(dst netip.AddrPort, wait time.Duration) (Outcome, error) {
	fd, err := socket(wait)
	if err != nil {
		return "", err
	}
	defer func() { _ = unix.Close(fd) }()
	err = connect(fd, dst)
	switch {
	case err == nil:
		return Connected, nil
	case errors.Is(err, unix.ECONNREFUSED):
		return Refused, nil
	case errors.Is(err, unix.EINPROGRESS), errors.Is(err, unix.ETIMEDOUT):
		return Dropped, nil
	}
	return "", fmt.Errorf("connect %s: %w", dst, err)
}

// Sources hands out source addresses and ports, never the same pair twice:
// every port of the first address, then of the next.
type Sources struct {
	mu    sync.Mutex
	addrs []netip.Addr
	i     int    // current address; guarded by mu
	port  uint16 // next port of it; guarded by mu
}

// First and last source port handed out per address.
const (
	firstPort = 1024
	lastPort  = 65535
)

// NewSources uses addrs in order; they must be the client's own.
func NewSources(addrs ...netip.Addr) *Sources {
	return &Sources{addrs: addrs, port: firstPort}
}

// Left is how many source pairs are still unused.
func (s *Sources) Left() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.i >= len(s.addrs) {
		return 0
	}
	return (len(s.addrs)-s.i-1)*(lastPort-firstPort+1) + lastPort - int(s.port) + 1
}

func (s *Sources) next() (netip.AddrPort, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.i >= len(s.addrs) {
		return netip.AddrPort{}, errors.New("every source address and port is used up")
	}
	ap := netip.AddrPortFrom(s.addrs[s.i], s.port)
	if s.port == lastPort {
		s.i, s.port = s.i+1, firstPort
	} else {
		s.port++
	}
	return ap, nil
}

func sockaddr(ap netip.AddrPort) *unix.SockaddrInet4 {
	return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
}

// socket is a blocking TCP socket whose calls give up after timeout.
func socket(timeout time.Duration) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if err := setTimeouts(fd, timeout); err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("socket timeout: %w", err)
	}
	return fd, nil
}

// setTimeouts bounds fd's blocking receives and sends.
func setTimeouts(fd int, timeout time.Duration) error {
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	for _, opt := range []int{unix.SO_RCVTIMEO, unix.SO_SNDTIMEO} {
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, opt, &tv); err != nil {
			return err
		}
	}
	return nil
}

// dial connects from src (the zero value lets the kernel choose) to dst.
func dial(src, dst netip.AddrPort) (int, error) {
	fd, err := socket(Timeout)
	if err != nil {
		return -1, err
	}
	if src.IsValid() {
		if err := unix.Bind(fd, sockaddr(src)); err != nil {
			_ = unix.Close(fd)
			return -1, fmt.Errorf("bind %s: %w", src, err)
		}
	}
	if err := connect(fd, dst); err != nil {
		_ = unix.Close(fd)
		if errors.Is(err, unix.EINPROGRESS) {
			err = fmt.Errorf("no answer within %s: %w", Timeout, err)
		}
		return -1, fmt.Errorf("connect %s: %w", dst, err)
	}
	return fd, nil
}

// connect connects a blocking socket. A connect interrupted by a signal
// goes on in the kernel; asking again says when it is done.
func connect(fd int, dst netip.AddrPort) error {
	err := unix.Connect(fd, sockaddr(dst))
	for errors.Is(err, unix.EINTR) || errors.Is(err, unix.EALREADY) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if _, perr := unix.Poll(fds, int(Timeout/time.Millisecond)); perr != nil && !errors.Is(perr, unix.EINTR) {
			return perr
		}
		err = unix.Connect(fd, sockaddr(dst))
	}
	if errors.Is(err, unix.EISCONN) {
		return nil
	}
	return err
}

// read is read(2) that retries when a signal interrupts it; a timeout
// (EAGAIN on a blocking socket) is an error.
func read(fd int, p []byte) (int, error) {
	for {
		n, err := unix.Read(fd, p)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return n, fmt.Errorf("no data within %s: %w", Timeout, err)
		}
		return n, err
	}
}

func readFull(fd int, p []byte) error {
	for len(p) > 0 {
		n, err := read(fd, p)
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("connection closed early")
		}
		p = p[n:]
	}
	return nil
}

// awaitEOF reads until the server's close arrives.
func awaitEOF(fd int) error {
	var b [1]byte
	n, err := read(fd, b[:])
	switch {
	case err != nil:
		return err
	case n != 0:
		return errors.New("more answer than asked for")
	}
	return nil
}

func writeAll(fd int, p []byte) error {
	for len(p) > 0 {
		n, err := unix.Write(fd, p)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return fmt.Errorf("could not send within %s: %w", Timeout, err)
		}
		if err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}
