package ctl_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/server/servertest"
)

// TestInspectCommands runs the list commands against a daemon holding the
// basic example: tables for humans, JSON for scripts; the kernel-only
// commands say they need the linux dataplane.
func TestInspectCommands(t *testing.T) {
	d := servertest.Start(t, "")
	if code, _, errOut := run("--socket", d.Socket, "apply", "-f", "../../examples/basic.yaml", "--fail-on-error"); code != 0 {
		t.Fatalf("apply exit %d: %s", code, errOut)
	}
	tables := []struct {
		args []string
		want []string
	}{
		{[]string{"policies"}, []string{"KIND", "policy", "GlobalNetworkPolicy:security.web-from-clients", "security", "profile", "kns.demo"}},
		{[]string{"ipsets", "--members", "1"}, []string{"ID", "s:demo-blocked", "net", "192.0.2.0/24,…", "s:demo-clients"}},
		{[]string{"ipsets", "--id", "s:demo-clients"}, []string{"10.65.0.1,10.65.0.2"}},
		{[]string{"services"}, []string{"SERVICE"}},
		{[]string{"routes"}, []string{"DST"}},
		{[]string{"endpoint", "demo/demo-b"}, []string{"k8s/demo/demo-b/eth0", "cali-demo-b", "security"}},
	}
	for _, tt := range tables {
		var out string
		testutil.WaitFor(t, 10*time.Second, strings.Join(tt.args, " "), func() bool {
			var code int
			code, out, _ = run(append([]string{"--socket", d.Socket}, tt.args...)...)
			if code != 0 {
				return false
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					return false
				}
			}
			return true
		})
	}

	code, out, _ := run("--socket", d.Socket, "policies", "-o", "json")
	var pols struct {
		Policies []struct {
			Kind      string
			Name      string
			Endpoints int
		}
	}
	if err := json.Unmarshal([]byte(out), &pols); code != 0 || err != nil || len(pols.Policies) != 2 || pols.Policies[0].Endpoints != 3 {
		t.Errorf("policies -o json exit %d, %v: %s", code, err, out)
	}

	for _, args := range [][]string{
		{"counters"},
		{"trace", "--endpoint", "demo/demo-b", "--dir", "ingress", "--src", "10.65.0.1", "--dport", "80"},
	} {
		code, _, errOut := run(append([]string{"--socket", d.Socket}, args...)...)
		if code != 1 || !strings.Contains(errOut, "needs --dataplane=linux") {
			t.Errorf("dpdctl %v on memory: exit %d, %q", args, code, errOut)
		}
	}
	for _, args := range [][]string{{"trace", "--dir", "ingress"}, {"endpoint"}, {"ipsets", "-o", "xml"}} {
		if code, _, errOut := run(append([]string{"--socket", d.Socket}, args...)...); code != 2 {
			t.Errorf("dpdctl %v: exit %d (%s), want 2", args, code, errOut)
		}
	}
}
