package tcbpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// A choicePin is a decision dpd measured and pinned for the rest of the
// boot: a one-entry array holding 0 until the first dpd decides. Later
// dpds on auto keep it. A probe reads a few percent either way from one
// start to the next on a noisy machine, and a restart that decided
// otherwise would find nothing pinned current: it would reload every
// policy program (the epilogue call) or re-attach every interface (the
// attach mode).
type choicePin struct {
	path string
	m    *ebpf.Map
}

// openChoicePin opens the pin at path, or creates it: also in place of
// a pin of another layout, and after losing a race to create it.
func openChoicePin(path string) (*choicePin, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create pin dir of %s: %w", path, err)
	}
	for range 2 {
		m, err := loadChoicePin(path)
		if err != nil {
			return nil, err
		}
		if m != nil {
			return &choicePin{path: path, m: m}, nil
		}
		m, err = ebpf.NewMap(&choiceSpec)
		if err != nil {
			return nil, fmt.Errorf("create pinned choice %s: %w", path, err)
		}
		err = m.Pin(path)
		if err == nil {
			return &choicePin{path: path, m: m}, nil
		}
		_ = m.Close()
		if !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("pin choice %s: %w", path, err)
		}
	}
	return nil, fmt.Errorf("pin choice %s: created and removed while dpd opened it", path)
}

var choiceSpec = ebpf.MapSpec{Name: "dpd_choice", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}

// loadChoicePin opens the pin at path; nil without an error when there is
// none, or when it had another layout (then it is removed).
func loadChoicePin(path string) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open pinned choice %s: %w", path, err)
	}
	if choiceSpec.Compatible(m) == nil {
		return m, nil
	}
	_ = m.Close()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("replace pinned choice %s of another layout: %w", path, err)
	}
	return nil, nil
}

// get is the pinned decision, 0 for none.
func (c *choicePin) get() (uint32, error) {
	var v uint32
	if err := c.m.Lookup(uint32(0), &v); err != nil {
		return 0, fmt.Errorf("read pinned choice %s: %w", c.path, err)
	}
	return v, nil
}

func (c *choicePin) set(v uint32) error {
	if err := c.m.Update(uint32(0), v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write pinned choice %s: %w", c.path, err)
	}
	return nil
}

func (c *choicePin) close() { _ = c.m.Close() }

// keptReason says a decision came from the pin.
func (c *choicePin) keptReason() string {
	return "kept from an earlier dpd on this boot (" + c.path + ")"
}
