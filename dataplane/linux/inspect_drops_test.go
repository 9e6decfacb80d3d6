package linux

import (
	"testing"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
)

var _ engine.DropInspector = (*Kernel)(nil)

// TestDrops: every reason the programs count is reported, by its metric
// label, and a fresh datapath has dropped nothing.
func TestDrops(t *testing.T) {
	k := openKernel(t, newPinDir(t))
	drops, err := k.Drops()
	if err != nil {
		t.Fatal(err)
	}
	if len(drops) != len(tcbpf.DropReasons()) {
		t.Fatalf("%d reasons reported, want %d: %+v", len(drops), len(tcbpf.DropReasons()), drops)
	}
	for i, d := range drops {
		if d.Reason != tcbpf.DropReasons()[i].String() || d.Packets != 0 || d.Bytes != 0 {
			t.Errorf("drop %d = %+v, want %s with nothing counted", i, d, tcbpf.DropReasons()[i])
		}
	}
}
