package server

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestServerKnowsNoKernel: the server reaches the kernel only through the
// engine's interfaces, so none of its packages (tests aside) may depend on
// a concrete kernel or the BPF datapath; cmd/dpd wires those.
func TestServerKnowsNoKernel(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the server's dependencies: %v", err)
	}
	const mod = "github.com/dpd-dev/dpd/"
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}", mod+"server/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || !slices.Contains(deps, mod+"dataplane/engine") {
		t.Fatalf("go list gave %d packages without the engine: the check is stale\n%s", len(deps), out)
	}
	for _, d := range deps {
		for _, banned := range []string{"dataplane/linux", "dataplane/tcbpf"} {
			if d == mod+banned || strings.HasPrefix(d, mod+banned+"/") {
				t.Errorf("server depends on %s", d)
			}
		}
	}
}
