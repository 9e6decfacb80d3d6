package ctl_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/server/servertest"
)

// TestEndpointsShowIPv6: dpdctl lists and shows a dual-stack endpoint's
// IPv6 net beside its IPv4 one, and a dash for an IPv4-only endpoint.
func TestEndpointsShowIPv6(t *testing.T) {
	d := servertest.Start(t, "")
	file := filepath.Join(t.TempDir(), "dual.yaml")
	scenario := `
- workloadEndpointUpdate:
    id: {orchestratorId: k8s, workloadId: demo/dual, endpointId: eth0}
    endpoint: {name: cali-dual, ipv4Nets: [10.65.0.7/32], ipv6Nets: ["fd00:65::7/128"]}
- workloadEndpointUpdate:
    id: {orchestratorId: k8s, workloadId: demo/v4, endpointId: eth0}
    endpoint: {name: cali-v4, ipv4Nets: [10.65.0.8/32]}
`
	if err := os.WriteFile(file, []byte(scenario), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run("--socket", d.Socket, "apply", "-f", file, "--fail-on-error"); code != 0 {
		t.Fatalf("apply exit %d: %s", code, errOut)
	}
	var out string
	testutil.WaitFor(t, 10*time.Second, "dpdctl endpoints to list both", func() bool {
		var code int
		code, out, _ = run("--socket", d.Socket, "endpoints")
		return code == 0 && strings.Count(out, " up ") == 2
	})
	var dual, v4 string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(line, "cali-dual"):
			dual = line
		case strings.Contains(line, "cali-v4"):
			v4 = line
		}
	}
	if !strings.Contains(out, "IPV6") || !strings.Contains(dual, "10.65.0.7/32") || !strings.Contains(dual, "fd00:65::7/128") {
		t.Errorf("dpdctl endpoints lacks the IPv6 net:\n%s", out)
	}
	if f := strings.Fields(v4); len(f) < 5 || f[3] != "10.65.0.8/32" || f[4] != "-" {
		t.Errorf("IPv4-only endpoint row %q, want its IPv4 net and a dash for IPv6", v4)
	}
	code, out, errOut := run("--socket", d.Socket, "endpoint", "k8s/demo/dual/eth0")
	if code != 0 || !strings.Contains(out, "fd00:65::7/128") {
		t.Errorf("dpdctl endpoint exit %d (%s):\n%s", code, errOut, out)
	}
}
