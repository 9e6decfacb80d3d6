package linux

import (
	"bufio"
	"errors"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// Sockets inside a workload's namespace, opened from the test process: a
// socket belongs to the namespace of the thread that created it, so the
// creating goroutine runs on a thread switched into the namespace (and
// never unlocked: the thread dies with it instead of returning to the
// pool in the wrong namespace).

func inNS(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// serveName answers every TCP connection on port with name and every UDP
// datagram with name, until the test ends.
func serveName(t *testing.T, ns string, port int, name string) {
	t.Helper()
	var ln net.Listener
	var pc net.PacketConn
	err := inNS(ns, func() error {
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
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(name + "\n"))
			_ = c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(name), from)
		}
	}()
}

// askName connects from ns to addr over network ("tcp4" or "udp4") and
// returns the name the server answered.
func askName(ns, network, addr string) (string, error) {
	var c net.Conn
	err := inNS(ns, func() error {
		var err error
		c, err = net.DialTimeout(network, addr, time.Second)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if network == "udp4" {
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
