package tcbpf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/internal/testutil"
)

func TestChooseAttachMode(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name      string
		requested string
		costs     KernelCosts
		want      AttachMode
	}{
		{"cheap tcx", "auto", KernelCosts{TCXFirstAttach: ms / 2, LegacyAttach: ms}, AttachTCX},
		{"grace period", "auto", KernelCosts{TCXFirstAttach: 10 * ms, LegacyAttach: ms}, AttachTC},
		{"slow but legacy slower", "auto", KernelCosts{TCXFirstAttach: 10 * ms, LegacyAttach: 5 * ms}, AttachTCX},
		{"fast enough whatever legacy", "", KernelCosts{TCXFirstAttach: ms, LegacyAttach: ms / 10}, AttachTCX},
		{"no tcx", "auto", KernelCosts{TCXErr: errors.New("not supported"), LegacyAttach: ms}, AttachTC},
		{"forced tcx", "tcx", KernelCosts{TCXFirstAttach: time.Second}, AttachTCX},
		{"forced tc", "tc", KernelCosts{}, AttachTC},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			measured := 0
			got, err := ChooseAttachMode(c.requested, func() (KernelCosts, error) { measured++; return c.costs, nil })
			if err != nil {
				t.Fatal(err)
			}
			if got.Mode != c.want || got.Reason == "" {
				t.Fatalf("got %+v, want mode %s with a reason", got, c.want)
			}
			if forced := c.requested == "tcx" || c.requested == "tc"; forced != (measured == 0) {
				t.Fatalf("measured %d times for requested %q", measured, c.requested)
			}
		})
	}
	if _, err := ChooseAttachMode("tcx2", nil); err == nil {
		t.Fatal("bad mode accepted")
	}
	if _, err := ChooseAttachMode("auto", func() (KernelCosts, error) { return KernelCosts{}, errors.New("boom") }); err == nil {
		t.Fatal("measurement error swallowed")
	}
}

// TestPinAttachChoice: the first decision of a boot is pinned; a later
// automatic one keeps it (with what it measured in its reason), whichever
// way its own measurement went; a requested mode replaces it; a kernel
// without TCX is never held to a pinned TCX.
func TestPinAttachChoice(t *testing.T) {
	testutil.RequirePrivileged(t)
	dir := testPinDir(t)
	tcx := AttachChoice{Mode: AttachTCX, Reason: "cheap"}
	tc := AttachChoice{Mode: AttachTC, Reason: "grace period"}
	steps := []struct {
		in   AttachChoice
		auto bool
		want AttachMode
	}{
		{tc, true, AttachTC},    // first of the boot: pinned
		{tcx, true, AttachTC},   // a restart measuring otherwise keeps it
		{tcx, false, AttachTCX}, // requested: replaces it
		{tc, true, AttachTCX},
		{AttachChoice{Mode: AttachTC, Costs: KernelCosts{TCXErr: errors.New("no tcx")}}, true, AttachTC},
		{tcx, true, AttachTC},
	}
	for i, s := range steps {
		got, err := PinAttachChoice(dir, s.in, s.auto)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got.Mode != s.want {
			t.Fatalf("step %d: mode %s (%s), want %s", i, got.Mode, got.Reason, s.want)
		}
		if kept := got.Mode != s.in.Mode; kept && !strings.Contains(got.Reason, "kept") {
			t.Errorf("step %d: kept mode with reason %q", i, got.Reason)
		}
	}
}

// TestChoicePinReplacesOtherLayout: a pin of another layout at the path
// (a later dpd's, after a downgrade) is replaced by a fresh, undecided one.
func TestChoicePinReplacesOtherLayout(t *testing.T) {
	testutil.RequirePrivileged(t)
	path := filepath.Join(testPinDir(t), "choice")
	mustNil(t, os.MkdirAll(filepath.Dir(path), 0o700))
	other, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	mustNil(t, err)
	mustNil(t, other.Pin(path))
	_ = other.Close()
	pin, err := openChoicePin(path)
	mustNil(t, err)
	defer pin.close()
	if v, err := pin.get(); err != nil || v != 0 {
		t.Fatalf("replaced pin holds %d (%v), want an undecided 0", v, err)
	}
	mustNil(t, pin.set(pinnedTC))
	again, err := openChoicePin(path)
	mustNil(t, err)
	defer again.close()
	if v, err := again.get(); err != nil || v != pinnedTC {
		t.Fatalf("reopened pin holds %d (%v), want %d", v, err, pinnedTC)
	}
}
