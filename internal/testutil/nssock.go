package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// Sockets inside a namespace, opened from the test process itself (tests
// need servers that say who they are, and many connections, which one
// helper process per probe would make slow): a socket belongs to the
// namespace of the thread that created it, so the creating goroutine runs
// on a thread switched into the namespace. Once created, the socket works
// from any thread.

// InNetns runs fn on a thread switched into the named namespace and returns
// its error; sockets and netlink handles fn creates stay bound to ns. The
// thread is left locked on purpose: it exits with the goroutine instead of
// returning to the pool in the wrong namespace.
func InNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err != nil {
			errc <- fmt.Errorf("open netns %s: %w", ns, err)
			return
		}
		defer func() { _ = h.Close() }()
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// ServeName answers every TCP connection on port with name and every UDP
// datagram with name, until the test ends.
func ServeName(t testing.TB, ns string, port int, name string) {
	t.Helper()
	Serve(t, ns, port, func(net.Addr) string { return name })
}

// ServePeer answers every connection with the address it came from: what
// a server sees of a client, masqueraded or not.
func ServePeer(t testing.TB, ns string, port int) {
	t.Helper()
	Serve(t, ns, port, func(a net.Addr) string {
		host, _, _ := net.SplitHostPort(a.String())
		return host
	})
}

// Serve listens in ns on TCP and UDP port and answers every connection
// (with a line) and every datagram with answer(peer), until the test ends.
func Serve(t testing.TB, ns string, port int, answer func(from net.Addr) string) {
	t.Helper()
	var ln net.Listener
	var pc net.PacketConn
	err := InNetns(ns, func() error {
		var err error
		if ln, err = net.Listen("tcp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(port))); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
		return err
	})
	if err != nil {
		t.Fatalf("listen in %s: %v", ns, err)
	}
	t.Cleanup(func() { _ = ln.Close(); _ = pc.Close() })
	answerConns(ln, answer)
	answerPackets(pc, answer)
	// IPv6 too where ns has it (an IPv4-only namespace refuses the bind).
	var ln6 net.Listener
	var pc6 net.PacketConn
	if InNetns(ns, func() error {
		var err error
		if ln6, err = net.Listen("tcp6", net.JoinHostPort("::", strconv.Itoa(port))); err != nil {
			return err
		}
		if pc6, err = net.ListenPacket("udp6", net.JoinHostPort("::", strconv.Itoa(port))); err != nil {
			_ = ln6.Close()
		}
		return err
	}) == nil {
		t.Cleanup(func() { _ = ln6.Close(); _ = pc6.Close() })
		answerConns(ln6, answer)
		answerPackets(pc6, answer)
	}
}

func answerConns(ln net.Listener, answer func(from net.Addr) string) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(answer(c.RemoteAddr()) + "\n"))
			_ = c.Close()
		}
	}()
}

func answerPackets(pc net.PacketConn, answer func(from net.Addr) string) {
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(answer(from)), from)
		}
	}()
}

// AskName connects from ns to addr over network ("tcp4", "udp4", "tcp6"
// or "udp6") and returns the name a Serve server answered.
func AskName(ns, network, addr string) (string, error) {
	var c net.Conn
	err := InNetns(ns, func() error {
		var err error
		c, err = net.DialTimeout(network, addr, time.Second)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if strings.HasPrefix(network, "udp") {
		if _, err := c.Write([]byte("who")); err != nil {
			return "", err
		}
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	name := strings.TrimSpace(line)
	if name == "" {
		return "", errors.New("empty answer")
	}
	return name, nil
}
