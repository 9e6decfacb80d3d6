package tcbpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// The automatic epilogue choice is pinned (epilogue/choice, one u32:
// choiceDirect or choiceIndirect) and kept by every later dpd on the
// same bpffs. A probe that reads a few nanoseconds either way flips on a
// noisy machine; a restart that chose the other call would find none of
// the pinned policy programs current and reload every one of them.
const (
	epilogueChoicePin = "choice"
	choiceDirect      = uint32(1)
	choiceIndirect    = uint32(2)
)

// epilogueCall decides how policy programs call the epilogue: as
// configured, else as pinned by an earlier dpd, else measured. The
// decision is pinned: it is what the pinned programs call.
func (d *Datapath) epilogueCall(dir string) (direct bool, why string, err error) {
	m, err := openEpilogueChoice(dir)
	if err != nil {
		return false, "", err
	}
	defer func() { _ = m.Close() }()
	if d.opts.Epilogue == EpilogueAuto {
		var v uint32
		if err := m.Lookup(uint32(0), &v); err != nil {
			return false, "", fmt.Errorf("read epilogue choice: %w", err)
		}
		if v == choiceDirect || v == choiceIndirect {
			return v == choiceDirect, "kept from an earlier dpd on this boot (" + filepath.Join(dir, epilogueChoicePin) + ")", nil
		}
	}
	direct, why = chooseEpilogueCall(d.opts.Epilogue)
	v := choiceIndirect
	if direct {
		v = choiceDirect
	}
	if err := m.Update(uint32(0), v, ebpf.UpdateAny); err != nil {
		return false, "", fmt.Errorf("pin epilogue choice: %w", err)
	}
	return direct, why, nil
}

// openEpilogueChoice opens (or creates) the pinned choice; a new one
// holds 0, no choice.
func openEpilogueChoice(dir string) (*ebpf.Map, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create epilogue pin dir: %w", err)
	}
	path := filepath.Join(dir, epilogueChoicePin)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err == nil {
		return m, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open epilogue choice %s: %w", path, err)
	}
	m, err = ebpf.NewMap(&ebpf.MapSpec{Name: "dpd_epi_choice", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("create epilogue choice: %w", err)
	}
	if err := m.Pin(path); err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("pin epilogue choice %s: %w", path, err)
	}
	return m, nil
}
