package ctl_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/client/ctl"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/server/servertest"
)

func run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = ctl.Main(args, &o, &e)
	return code, o.String(), e.String()
}

// TestApplyThenInspect runs dpdctl's commands in-process against a real
// daemon: apply the basic example, then list and summarise.
func TestApplyThenInspect(t *testing.T) {
	d := servertest.Start(t, "")
	code, out, errOut := run("--socket", d.Socket, "apply", "-f", "../../examples/basic.yaml", "--fail-on-error")
	if code != 0 {
		t.Fatalf("apply exit %d: %s", code, errOut)
	}
	for _, want := range []string{"k8s/demo/demo-a/eth0 up\n", "k8s/demo/demo-b/eth0 up\n", "k8s/demo/demo-c/eth0 up\n", "dataplane in sync\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output lacks %q:\n%s", want, out)
		}
	}

	// Inspect reads a snapshot the engine publishes after the loop
	// iteration that sent the statuses, so it may lag them briefly.
	testutil.WaitFor(t, 10*time.Second, "dpdctl endpoints to list three up", func() bool {
		code, out, errOut = run("--socket", d.Socket, "endpoints")
		return code == 0 && strings.Contains(out, "ENDPOINT") && strings.Contains(out, "cali-demo-b") && strings.Count(out, " up ") == 3
	})
	code, out, _ = run("--socket", d.Socket, "endpoints", "-o", "json")
	var list struct {
		Endpoints []struct{ Interface, Status string }
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Endpoints) != 3 {
		t.Errorf("endpoints -o json exit %d, %v: %s", code, err, out)
	}

	code, out, _ = run("--socket", d.Socket, "hostendpoints")
	if code != 0 || !strings.Contains(out, "HOST ENDPOINT") {
		t.Errorf("hostendpoints exit %d:\n%s", code, out)
	}
	code, out, _ = run("--socket", d.Socket, "status")
	if code != 0 || !regexp.MustCompile(`dataplane in sync:\s+true`).MatchString(out) || !strings.Contains(out, "memory") {
		t.Errorf("status exit %d:\n%s", code, out)
	}
	code, out, _ = run("--socket", d.Socket, "status", "-o", "json")
	var st struct {
		Dataplane       string
		DataplaneInSync bool
	}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Dataplane != "memory" || !st.DataplaneInSync {
		t.Errorf("status -o json exit %d, %v: %s", code, err, out)
	}
}

// TestApplyFailOnError: an endpoint that ends in "error" fails the apply
// only with --fail-on-error.
func TestApplyFailOnError(t *testing.T) {
	d := servertest.Start(t, "")
	file := filepath.Join(t.TempDir(), "bad.yaml")
	scenario := `
- workloadEndpointUpdate:
    id: {orchestratorId: k8s, workloadId: demo/bad, endpointId: eth0}
    endpoint: {name: cali-bad, ipv4Nets: [10.65.0.300/32]}
- workloadEndpointUpdate:
    id: {orchestratorId: k8s, workloadId: demo/good, endpointId: eth0}
    endpoint: {name: cali-good, ipv4Nets: [10.65.0.9/32]}
`
	if err := os.WriteFile(file, []byte(scenario), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run("--socket", d.Socket, "apply", "-f", file, "--fail-on-error")
	if code != 1 || !strings.Contains(out, "k8s/demo/bad/eth0 error") || !strings.Contains(out, "k8s/demo/good/eth0 up") ||
		!strings.Contains(errOut, "k8s/demo/bad/eth0") {
		t.Errorf("apply --fail-on-error exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if code, out, errOut := run("--socket", d.Socket, "apply", "-f", file); code != 0 {
		t.Errorf("apply without --fail-on-error exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"apply"}, "-f FILE is required"},
		{[]string{"status", "-o", "xml"}, "-o must be text or json"},
		{[]string{"endpoints", "extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		code, _, errOut := run(tt.args...)
		if code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("dpdctl %v: exit %d, stderr %q; want 2 and %q", tt.args, code, errOut, tt.want)
		}
	}
}

// TestUnreachable: no dpd on the socket is a plain failure, not a hang.
func TestUnreachable(t *testing.T) {
	code, _, errOut := run("--socket", servertest.SocketPath(t), "--timeout", "200ms", "status")
	if code != 1 || !strings.Contains(errOut, "connect") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
