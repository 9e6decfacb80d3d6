package e2e

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/dpd-dev/dpd/client/ctl"
	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

// dpdctl runs dpdctl against d in-process and returns its output.
func dpdctl(t *testing.T, d *Daemon, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := ctl.Main(append([]string{"--socket", d.Socket}, args...), &out, &errOut); code != 0 {
		t.Fatalf("dpdctl %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	return out.String()
}

// observed is what dpdctl observe -o json printed: the flows.
func observed(t *testing.T, d *Daemon, args ...string) []*dpdv1.Flow {
	t.Helper()
	var flows []*dpdv1.Flow
	for _, line := range strings.Split(strings.TrimSpace(dpdctl(t, d, append([]string{"observe", "-o", "json"}, args...)...)), "\n") {
		if line == "" {
			continue
		}
		var r dpdv1.ObserveResponse
		if err := protojson.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("observe line %q: %v", line, err)
		}
		if r.GetFlow() != nil {
			flows = append(flows, r.GetFlow())
		}
	}
	return flows
}

// TestObserve: real TCP connects through real veths show up in dpdctl
// observe with the tier, policy and rule that decided them.
func TestObserve(t *testing.T) {
	testutil.RequirePrivileged(t)
	// A short deny interval, so the flood below is reported within the
	// test, and a short conntrack scan, so the allowed flow's end is.
	d := StartDaemon(t, "--flow-deny-interval=200ms", "--conntrack-scan-interval=1s")
	a, b := NewWorkload(t, 1), NewWorkload(t, 2)
	b.Serve(t, []int{tcpPort, tcpOther}, nil)
	web := Policy("t1", "t1.web", Rules(
		Allow(Proto("tcp"), DstPorts(Port(tcpPort))),
		Deny(Proto("tcp"), DstPorts(Port(tcpOther))),
	), nil)
	snap := Scenario{
		Profile(profAllowAll, Rules(Allow()), Rules(Allow())),
		Endpoint(a, []string{profAllowAll}),
		Endpoint(b, []string{profAllowAll}, &felix.TierInfo{Name: "t1",
			IngressPolicies: []*felix.PolicyID{web.GetActivePolicyUpdate().GetId()}}),
		web,
	}
	msgs, err := snap.Messages(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := d.Connect(t, msgs)
	c.WaitInSync(t)
	c.WaitStatus(t, "up", a.ID(), b.ID())

	Expect(t, Denied(TCP(a, b.IP, tcpOther)), Allowed(TCP(a, b.IP, tcpPort)))

	bID := fmt.Sprintf("k8s/%s/eth0", b.ID().GetWorkloadId())
	aID := fmt.Sprintf("k8s/%s/eth0", a.ID().GetWorkloadId())
	find := func(verdict string, port uint32) *dpdv1.Flow {
		for _, f := range observed(t, d, "--endpoint", bID, "--verdict", verdict, "--policy", "t1.web") {
			if f.GetDestination().GetPort() == port && f.GetDirection() == "ingress" {
				return f
			}
		}
		return nil
	}
	var denied, allowed *dpdv1.Flow
	deadline := time.Now().Add(10 * time.Second)
	for {
		denied, allowed = find("deny", tcpOther), find("allow", tcpPort)
		if denied != nil && allowed != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the denied and the allowed connect not in observe after 10s; everything observed:\n%s",
				dpdctl(t, d, "observe"))
		}
		time.Sleep(50 * time.Millisecond) // polling a condition with a deadline
	}
	for _, tc := range []struct {
		f       *dpdv1.Flow
		verdict string
		index   int32
		action  string
	}{{denied, "deny", 1, "deny"}, {allowed, "allow", 0, "allow"}} {
		r := tc.f.GetRule()
		if tc.f.GetVerdict() != tc.verdict || tc.f.GetDecidedBy() != "policy" || r.GetTier() != "t1" ||
			!strings.HasSuffix(r.GetPolicy(), "t1.web") || r.GetIndex() != tc.index || r.GetAction() != tc.action ||
			tc.f.GetProtocol() != "tcp" || tc.f.GetSource().GetIp() != a.IP || tc.f.GetDestination().GetIp() != b.IP ||
			tc.f.GetSource().GetEndpoint() != aID || tc.f.GetDestination().GetEndpoint() != bID {
			t.Errorf("%s flow: %v", tc.verdict, tc.f)
		}
	}

	// The text form names the workloads and tier/policy#rule.
	text := dpdctl(t, d, "observe", "--endpoint", bID, "--verdict", "deny", "--port", fmt.Sprint(tcpOther))
	want := fmt.Sprintf("%s %s:", strings.TrimPrefix(a.ID().GetWorkloadId(), ""), a.IP)
	if !strings.Contains(text, want) || !strings.Contains(text, "DENIED") || !strings.Contains(text, "t1.web#1") {
		t.Errorf("dpdctl observe printed %q, want a line with %q, DENIED and t1.web#1", text, want)
	}

	t.Run("denied-flood-rate-limited-with-count", func(t *testing.T) { deniedFlood(t, d, a, b) })
	t.Run("allowed-flow-ends-with-byte-counts", func(t *testing.T) { flowEnds(t, d, allowed, bID) })
}

// flowEnds waits for the end of the allowed connection: closed (FIN), its
// entry expires 30 s later and the next scan reports it with the rule that
// allowed it and what it carried both ways.
func flowEnds(t *testing.T, d *Daemon, allowed *dpdv1.Flow, bID string) {
	var end *dpdv1.Flow
	testutil.WaitFor(t, 60*time.Second, "the allowed connection's end in observe", func() bool {
		for _, f := range observed(t, d, "--endpoint", bID, "--type", "end", "--port", fmt.Sprint(allowed.GetSource().GetPort())) {
			if f.GetDirection() == "ingress" && f.GetSource().GetPort() == allowed.GetSource().GetPort() {
				end = f
				return true
			}
		}
		return false
	})
	r := end.GetRule()
	// A handshake, a close and its ACKs at least: three packets each way.
	if !end.GetEnded() || end.GetVerdict() != "allow" || r.GetTier() != "t1" || !strings.HasSuffix(r.GetPolicy(), "t1.web") ||
		r.GetIndex() != 0 || end.GetForward().GetPackets() < 3 || end.GetReply().GetPackets() < 2 ||
		end.GetForward().GetBytes() < 3*40 || end.GetReply().GetBytes() < 2*40 || end.GetStarted() == nil ||
		end.GetStarted().AsTime().Sub(allowed.GetTime().AsTime()).Abs() > time.Second {
		t.Fatalf("end of the allowed flow: %v", end)
	}
	text := dpdctl(t, d, "observe", "--endpoint", bID, "--type", "end", "--port", fmt.Sprint(allowed.GetSource().GetPort()))
	if !strings.Contains(text, "ENDED") || !strings.Contains(text, "t1.web#0") ||
		!strings.Contains(text, fmt.Sprintf("-> %d pkts %d B", end.GetForward().GetPackets(), end.GetForward().GetBytes())) {
		t.Errorf("dpdctl observe --type end printed %q", text)
	}
	t.Logf("ended: %s", strings.TrimSpace(text))
}

// deniedFlood sends a burst of UDP datagrams of one flow that B's tier
// denies (its default action: nothing allows UDP): the flow is reported a
// few times, and the events' counts add up to every datagram sent.
func deniedFlood(t *testing.T, d *Daemon, a, b *Workload) {
	const srcPort, burst = 45678, 200
	var conn *net.UDPConn
	err := testutil.InNetns(a.NS, func() error {
		var err error
		conn, err = net.DialUDP("udp4", &net.UDPAddr{Port: srcPort},
			&net.UDPAddr{IP: net.ParseIP(b.IP), Port: udpPort})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sent := 0
	send := func() {
		if _, err := conn.Write([]byte("flood")); err != nil {
			t.Fatalf("send datagram %d: %v", sent, err)
		}
		sent++
	}
	for range burst {
		send()
	}
	// Counted so far: each event stands for its packet and those denied
	// unreported before it. Past the interval, the next datagram's event
	// carries the rest of the burst.
	counted := func() (events, packets int) {
		for _, f := range observed(t, d, "--endpoint", fmt.Sprintf("k8s/%s/eth0", b.ID().GetWorkloadId()),
			"--verdict", "deny", "--protocol", "udp", "--port", fmt.Sprint(srcPort)) {
			if f.GetSource().GetPort() == srcPort && f.GetDirection() == "ingress" {
				events++
				packets += 1 + int(f.GetSuppressed())
			}
		}
		return events, packets
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		events, packets := counted()
		if packets == sent && events >= 2 {
			if events*10 > sent {
				t.Fatalf("%d events for %d denied datagrams of one flow: not rate-limited", events, sent)
			}
			t.Logf("%d denied datagrams reported in %d events", sent, events)
			return
		}
		if packets > sent {
			t.Fatalf("events count %d packets, only %d were sent", packets, sent)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %d events count %d of %d datagrams", events, packets, sent)
		}
		send() // paced by the observe round trip
	}
}
