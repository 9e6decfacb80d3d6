package e2e

import (
	"fmt"
	"os"
	"testing"
)

// TestMain builds dpd and the namespace helper once, then runs the tests.
func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	// Without root every test skips (outside CI), so do not pay for a build.
	if os.Geteuid() == 0 || os.Getenv("CI") == "true" {
		dir, err := os.MkdirTemp("", "dpd-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		// Each test reports a failed build, so the failure names the tests
		// it blocks.
		errBuild = BuildBinaries(dir)
	}
	return m.Run()
}
