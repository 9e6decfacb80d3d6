package hostile_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// claimants is how many endpoints besides web name web's interface.
const (
	claimants  = 100
	ifaceLogs  = 40
	holderText = "k8s/ns/web/eth0"
)

// TestEndpointsClaimingOneInterface: endpoints that name an interface a
// live endpoint holds get status error with a reason naming the holder,
// and are reported so to the controller; the holder stays up; when it
// goes, the endpoint that named the interface first takes it.
func TestEndpointsClaimingOneInterface(t *testing.T) {
	d := startDaemon(t, nil)
	c := newLiveController(t, d)
	c.send(t, wepUpdate("web", "caliweb", 0), inSync())
	c.waitUp(t, "web")

	for i := range claimants {
		c.send(t, wepUpdate(fmt.Sprintf("dup%d", i), "caliweb", i+1))
	}
	testutil.WaitFor(t, 30*time.Second, "every claimant in error", func() bool {
		eps := listEndpoints(t, d)
		for i := range claimants {
			if eps[fmt.Sprintf("ns/dup%d", i)].status != "error" {
				return false
			}
		}
		return true
	})
	eps := listEndpoints(t, d)
	for i := range claimants {
		if r := eps[fmt.Sprintf("ns/dup%d", i)].reason; !strings.Contains(r, "caliweb") || !strings.Contains(r, holderText) {
			t.Fatalf("dup%d's reason %q, want it to name caliweb and its holder %s", i, r, holderText)
		}
	}
	t.Logf("claimant's reason: %q", eps["ns/dup0"].reason)
	testutil.WaitFor(t, 30*time.Second, "the controller told each claimant is in error", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i := range claimants {
			if c.status[fmt.Sprintf("ns/dup%d", i)] != "error" {
				return false
			}
		}
		return c.status["ns/web"] == "up"
	})
	checkUp(t, d, "web")
	d.answers(t)

	// The holder goes: the first claimant takes the interface.
	c.send(t, wepRemove("web"))
	c.waitUp(t, "dup0")
	if s := listEndpoints(t, d)["ns/dup1"]; s.status != "error" || !strings.Contains(s.reason, "k8s/ns/dup0/eth0") {
		t.Errorf("dup1 after the handover: %+v, want error naming dup0", s)
	}
	d.checkMemory(t, rssBound)
	d.checkLogLines(t, ifaceLogs)
}

// TestBadInterfaceNames: endpoints whose interface name Linux would refuse
// (longer than 15 bytes, '/', ':', NUL, whitespace, "." or "..") get status
// error with a reason saying what is wrong with the name; the endpoint
// applied before stays up and dpd keeps answering.
func TestBadInterfaceNames(t *testing.T) {
	bad := map[string]string{ // name: what the reason must say
		"cali0123456789ab": "longer than 15 bytes",
		"../../etc":        "/",
		"cali/x":           "/",
		"cali:0":           ":",
		"cali\x00x":        `\x00`,
		"cali x":           `' '`,
		"cali\tx":          `\t`,
		"cali\nx":          `\n`,
		".":                "not a valid interface name",
		"..":               "not a valid interface name",
	}
	d := startDaemon(t, nil)
	c := newLiveController(t, d)
	c.send(t, wepUpdate("web", "caliweb", 0), inSync())
	c.waitUp(t, "web")
	names := map[string]string{}
	i := 0
	for name := range bad {
		wl := fmt.Sprintf("bad%d", i)
		names[wl] = name
		c.send(t, testutil.ToDataplane(&felix.WorkloadEndpointUpdate{
			Id:       wepID(wl),
			Endpoint: &felix.WorkloadEndpoint{State: "active", Name: name, Ipv4Nets: []string{fmt.Sprintf("10.66.0.%d/32", i+1)}},
		}))
		i++
	}
	testutil.WaitFor(t, 30*time.Second, "every bad name in error", func() bool {
		eps := listEndpoints(t, d)
		for wl := range names {
			if eps["ns/"+wl].status != "error" {
				return false
			}
		}
		return true
	})
	eps := listEndpoints(t, d)
	for wl, name := range names {
		if r := eps["ns/"+wl].reason; !strings.Contains(r, bad[name]) {
			t.Errorf("interface %q: reason %q, want it to say %s", name, r, bad[name])
		}
	}
	checkUp(t, d, "web")
	d.answers(t)
	d.checkMemory(t, rssBound)
	d.checkLogLines(t, ifaceLogs)
}
