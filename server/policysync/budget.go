package policysync

import (
	"net"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Descriptor budget defaults. Every served workload costs a listening
// socket plus one descriptor per connected client, so both are bounded;
// what the daemon itself needs (its own sockets, /metrics, BPF objects, the
// files it reads) is kept free.
const (
	// DefaultMaxWorkloads is well above a node's pod limit (110 by
	// default in Kubernetes, rarely above 250).
	DefaultMaxWorkloads = 1024
	// DefaultConnsPerWorkload bounds concurrent connections on one
	// workload socket; a client needs one. Further connections wait in
	// the kernel's backlog, costing dpd no descriptor.
	DefaultConnsPerWorkload = 4
	// DefaultFDReserve is how many descriptors policy sync leaves free.
	DefaultFDReserve = 256
)

// fdBudget tells how many more workloads fit under RLIMIT_NOFILE, counting
// every served workload at its worst (all connection slots taken), so the
// reserve stays free whatever the clients do.
type fdBudget struct {
	perWorkload int // listener + connection slots
	reserve     int
	conns       atomic.Int64 // open workload connections, all sockets
	// openFDs counts the process's open descriptors (-1: unknown).
	openFDs func() int
	limit   func() int // soft RLIMIT_NOFILE
}

func newFDBudget(connsPerWorkload, reserve int) *fdBudget {
	return &fdBudget{perWorkload: 1 + connsPerWorkload, reserve: reserve, openFDs: countOpenFDs, limit: softFileLimit}
}

// room is how many workloads can be added to the served ones without
// eating into the reserve.
func (f *fdBudget) room(served int) int {
	open := f.openFDs()
	if open < 0 {
		return 0 // cannot even list /proc/self/fd: out of descriptors
	}
	// What the daemon holds apart from policy sync, plus every served
	// workload at its worst.
	own := open - served - int(f.conns.Load())
	worst := own + served*f.perWorkload
	free := f.limit() - f.reserve - worst
	if free <= 0 {
		return 0
	}
	return free / f.perWorkload
}

// countOpenFDs lists /proc/self/fd; it needs a descriptor itself, so at
// the limit it reports -1.
func countOpenFDs() int {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return -1
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return -1
	}
	return len(names) - 1 // the directory being read
}

func softFileLimit() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 1024
	}
	if rl.Cur > 1<<30 {
		return 1 << 30
	}
	return int(rl.Cur)
}

// limitListener accepts at most n connections at a time; Accept waits for
// a slot before taking a connection off the kernel's queue. Closing it
// closes every connection it accepted: gRPC's Stop waits for connections
// still in their HTTP/2 handshake (up to the connection timeout), and a
// client that connects and stays silent must not hold the binder up.
type limitListener struct {
	net.Listener
	slots  chan struct{}
	budget *fdBudget
	done   chan struct{}
	once   sync.Once

	mu    sync.Mutex
	conns map[*limitConn]struct{} // guarded by mu; nil once closed
}

func newLimitListener(l net.Listener, n int, b *fdBudget) *limitListener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n), budget: b, done: make(chan struct{}),
		conns: map[*limitConn]struct{}{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	l.budget.conns.Add(1)
	lc := &limitConn{Conn: c}
	lc.release = func() {
		l.mu.Lock()
		if l.conns != nil {
			delete(l.conns, lc)
		}
		l.mu.Unlock()
		l.budget.conns.Add(-1)
		<-l.slots
	}
	l.mu.Lock()
	closed := l.conns == nil
	if !closed {
		l.conns[lc] = struct{}{}
	}
	l.mu.Unlock()
	if closed {
		_ = lc.Close()
		return nil, net.ErrClosed
	}
	return lc, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	err := l.Listener.Close()
	l.mu.Lock()
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	return err
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
