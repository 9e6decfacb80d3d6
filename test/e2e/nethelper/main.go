package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// helperReady is what serve prints once every listener is bound; the suite
// waits for it.
const helperReady = "ready"

func main() { os.Exit(run(os.Args[1:])) }

// run runs one command and returns the process exit code:
//
//	serve -tcp 8080,8081 -udp 7007   listen until stdin closes (TCP accepts
//	                                 get "ok\n", UDP datagrams are echoed)
//	tcp -addr IP:PORT -timeout D     exit 0 if a connection gets "ok\n"
//	udp -addr IP:PORT -timeout D     exit 0 if a datagram comes back intact
//	    [-size N]                    (N bytes of payload: large ones fragment)
func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "nethelper: missing command")
		return 2
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	tcpPorts := fs.String("tcp", "", "comma-separated TCP ports to serve")
	udpPorts := fs.String("udp", "", "comma-separated UDP ports to echo")
	addr := fs.String("addr", "", "destination IP:PORT")
	timeout := fs.Duration("timeout", time.Second, "probe timeout")
	size := fs.Int("size", 0, "udp: payload bytes (0: a short message)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(*tcpPorts, *udpPorts)
	case "tcp":
		err = tcpProbe(*addr, *timeout)
	case "udp":
		err = udpProbe(*addr, *timeout, *size)
	default:
		err = fmt.Errorf("unknown command %q", args[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nethelper:", err)
		return 1
	}
	return 0
}

func parsePorts(s string) ([]int, error) {
	var ports []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parse port %q: %w", f, err)
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// serve binds everything first, reports ready, then serves until stdin
// reaches EOF: the suite holds the pipe, so the server cannot outlive a
// test binary that died without running its cleanups.
func serve(tcpList, udpList string) error {
	tcpPorts, err := parsePorts(tcpList)
	if err != nil {
		return err
	}
	udpPorts, err := parsePorts(udpList)
	if err != nil {
		return err
	}
	// IPv4 always; IPv6 too where the namespace has it (an IPv4-only
	// namespace refuses the IPv6 wildcard bind).
	for _, p := range tcpPorts {
		ln, err := net.Listen("tcp4", fmt.Sprintf(":%d", p))
		if err != nil {
			return fmt.Errorf("listen tcp %d: %w", p, err)
		}
		go acceptLoop(ln)
		if ln6, err := net.Listen("tcp6", fmt.Sprintf("[::]:%d", p)); err == nil {
			go acceptLoop(ln6)
		}
	}
	for _, p := range udpPorts {
		pc, err := net.ListenPacket("udp4", fmt.Sprintf(":%d", p))
		if err != nil {
			return fmt.Errorf("listen udp %d: %w", p, err)
		}
		go echoLoop(pc)
		if pc6, err := net.ListenPacket("udp6", fmt.Sprintf("[::]:%d", p)); err == nil {
			go echoLoop(pc6)
		}
	}
	fmt.Println(helperReady)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

func acceptLoop(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte("ok\n"))
		_ = c.Close()
	}
}

func echoLoop(pc net.PacketConn) {
	buf := make([]byte, 65536) // whole reassembled datagrams
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo(buf[:n], from)
	}
}

// tcpProbe succeeds only when the server's greeting arrives, so a SYN that
// passes but a SYN-ACK that is dropped still counts as a failure.
func tcpProbe(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read greeting: %w", err)
	}
	if line != "ok\n" {
		return fmt.Errorf("unexpected greeting %q", line)
	}
	return nil
}

// udpProbe sends one datagram and waits for the identical echo, which proves
// the reply direction passed too. A size pads the message to that many
// bytes, so it leaves in fragments and its echo comes back in fragments.
func udpProbe(addr string, timeout time.Duration, size int) error {
	c, err := net.DialTimeout("udp", addr, timeout)
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	msg := fmt.Sprintf("dpd-e2e-%d-%d", os.Getpid(), time.Now().UnixNano())
	if size > len(msg) {
		msg += strings.Repeat(".", size-len(msg))
	}
	if _, err := c.Write([]byte(msg)); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	buf := make([]byte, len(msg)+256)
	n, err := c.Read(buf)
	if err != nil {
		return fmt.Errorf("read echo: %w", err)
	}
	if string(buf[:n]) != msg {
		return errors.New("echo differs from request")
	}
	return nil
}
