package server_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMetricsDocumented: every dpd_* metric the engine, the server and
// policy sync define has a row in the README's metrics table.
func TestMetricsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(dpd_[a-z0-9_]+)"`)
	names := map[string]bool{}
	for _, glob := range []string{"../dataplane/engine/*.go", "*.go", "policysync/*.go"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range defined.FindAllStringSubmatch(string(src), -1) {
				names[m[1]] = true
			}
		}
	}
	// The gRPC middleware's metrics, under the dpd namespace.
	for _, n := range []string{"started_total", "handled_total", "msg_received_total", "msg_sent_total", "handling_seconds"} {
		names["dpd_grpc_server_"+n] = true
	}
	if len(names) < 20 {
		t.Fatalf("found only %d metric definitions; the pattern is stale", len(names))
	}
	for n := range names {
		if !strings.Contains(string(readme), "| `"+n+"` |") {
			t.Errorf("metric %s has no row in the README's metrics table", n)
		}
	}
}
