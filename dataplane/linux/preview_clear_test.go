package linux

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
)

// countingPreviewSlots counts dpd_preview writes.
type countingPreviewSlots struct{ installs, clears int }

func (c *countingPreviewSlots) InstallPreview(uint32, int, *ebpf.Program) error {
	c.installs++
	return nil
}

func (c *countingPreviewSlots) ClearPreview(uint32, int) error {
	c.clears++
	return nil
}

func (c *countingPreviewSlots) ClearPreviews() error                   { return nil }
func (c *countingPreviewSlots) Previews() ([]tcbpf.PolicyEntry, error) { return nil, nil }

// loadOnlyPreviews loads previews as load does and has nothing pinned.
type loadOnlyPreviews struct {
	load func() loadedProgram
	dir  string
}

func (l loadOnlyPreviews) LoadPreview(*model.DirectionPolicy, model.Direction) (loadedProgram, error) {
	return l.load(), nil
}

func (l loadOnlyPreviews) AdoptPreview(*model.DirectionPolicy, model.Direction, pinnedProgram) (loadedProgram, error) {
	return nil, errors.New("nothing is pinned")
}
func (l loadOnlyPreviews) PreviewsDir() string                   { return l.dir }
func (l loadOnlyPreviews) PinnedPreviewNames() ([]string, error) { return nil, nil }
func (l loadOnlyPreviews) OpenPinnedPreview(string) (pinnedProgram, error) {
	return nil, errors.New("nothing is pinned")
}
func (l loadOnlyPreviews) RemovePinDir(string) error { return nil }

// An endpoint without previews clears its slot's preview entries once,
// not at every apply (a policy change re-applies every endpoint of the
// policy); an entry written since is cleared again.
func TestPreviewClearsOnce(t *testing.T) {
	f := newFakeKernel(t)
	c := &countingPreviewSlots{}
	p := newPreviewProgrammer(c, loadOnlyPreviews{load: func() loadedProgram { return f.newProg("preview") }, dir: t.TempDir()},
		quietLog(), &Ops{})
	plain := f.endpoint("cali1", 1, "allow-web", "allow-all")
	for range 3 {
		if err := p.apply(plain, 3); err != nil {
			t.Fatal(err)
		}
	}
	if c.clears != 2 || c.installs != 0 {
		t.Fatalf("three applies without previews: %d clears, %d installs; want 2 (one per direction) and none", c.clears, c.installs)
	}
	staged := f.policy("staged")
	withPreview := f.endpoint("cali1", 1, "allow-web", "allow-all")
	withPreview.PreviewIngress = &staged
	if err := p.apply(withPreview, 3); err != nil {
		t.Fatal(err)
	}
	if err := p.apply(plain, 3); err != nil {
		t.Fatal(err)
	}
	if err := p.apply(plain, 3); err != nil {
		t.Fatal(err)
	}
	if c.installs != 1 || c.clears != 3 {
		t.Fatalf("a preview installed, then dropped: %d installs, %d clears; want 1 and 3", c.installs, c.clears)
	}
}
