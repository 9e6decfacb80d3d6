package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFloodMessagesAreLogged: every rate-limited message is still one
// dpd logs, so a reworded warning cannot silently escape the limit.
func TestFloodMessagesAreLogged(t *testing.T) {
	var src strings.Builder
	for _, glob := range []string{"*.go", "../dataplane/engine/*.go"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") || f == "floodlog.go" {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	for _, m := range floodMessages {
		if !strings.Contains(src.String(), `Warn("`+m+`"`) {
			t.Errorf("no Warn(%q, ...) left in server or engine: update floodMessages", m)
		}
	}
}
