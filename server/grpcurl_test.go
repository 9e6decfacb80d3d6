package server_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/server/servertest"
)

// grpcurlPath finds the grpcurl the Makefile installs (pinned) into the
// module's bin/; the test installs nothing itself.
func grpcurlPath(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	p := filepath.Join(dir, "bin", "grpcurl")
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s is missing: run `make tools` (it installs grpcurl at the pinned version)", p)
	}
	return p
}

// TestGrpcurl drives the real grpcurl binary against a running dpd:
// reflection lists the services, describes Inspect, and an Inspect call
// answers, using the form the README and DESIGN.md give:
// grpcurl -plaintext -unix <socket> ... (broken in grpcurl 1.9.2–1.9.3,
// fixed in the pinned 1.9.4).
func TestGrpcurl(t *testing.T) {
	bin := grpcurlPath(t)
	d := servertest.Start(t, "")
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append([]string{"-plaintext", "-unix", d.Socket}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("grpcurl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	list := run("list")
	for _, svc := range []string{"dpd.v1.Dataplane", "dpd.v1.Inspect", "felix.PolicySync", "grpc.health.v1.Health"} {
		if !strings.Contains(list, svc+"\n") {
			t.Errorf("grpcurl list lacks %s:\n%s", svc, list)
		}
	}
	desc := run("describe", "dpd.v1.Inspect")
	for _, rpc := range []string{"rpc GetStatus", "rpc ListEndpoints", "rpc ListPolicies", "rpc ListIPSets", "rpc GetCounters", "rpc Trace"} {
		if !strings.Contains(desc, rpc) {
			t.Errorf("grpcurl describe dpd.v1.Inspect lacks %q:\n%s", rpc, desc)
		}
	}
	var st struct {
		Version   string `json:"version"`
		Dataplane string `json:"dataplane"`
		Pid       int    `json:"pid"`
	}
	out := run("dpd.v1.Inspect/GetStatus")
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Dataplane != "memory" || st.Pid != os.Getpid() || st.Version != "test" {
		t.Errorf("grpcurl GetStatus = %+v (%v):\n%s", st, err, out)
	}
}
