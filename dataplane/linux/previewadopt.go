package linux

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// A restarted dpd finds the previews the previous one installed still in
// dpd_preview (pinned, like dpd_jump) and their programs pinned under
// <pin>/previews/s<slot>-<dir>-<hash>. Those in a slot of an endpoint
// that adoption kept go on previewing as they are; the first apply of
// the endpoint adopts each (same hash, and exactly what the compiler
// produces now) or replaces it. Everything else is cleared at start,
// slot first: a slot adoption did not keep may go to another endpoint,
// whose events must never carry a stranger's preview. Previews decide
// only what events report, never a packet.

// previewPinName is the pin directory of a preview program.
func previewPinName(slot uint32, dir model.Direction, hash [32]byte) string {
	return "s" + strconv.FormatUint(uint64(slot), 10) + "-" + dir.String() + "-" + hex.EncodeToString(hash[:])
}

// parsePreviewPinName is the inverse of previewPinName.
func parsePreviewPinName(name string) (slot uint32, dir model.Direction, hash [32]byte, ok bool) {
	rest, found := strings.CutPrefix(name, "s")
	if !found {
		return 0, 0, hash, false
	}
	ss, rest, found := strings.Cut(rest, "-")
	if !found {
		return 0, 0, hash, false
	}
	n, err := strconv.ParseUint(ss, 10, 32)
	if err != nil {
		return 0, 0, hash, false
	}
	key, ok := parsePinName(rest)
	if !ok {
		return 0, 0, hash, false
	}
	slot, dir, hash = uint32(n), key.dir, key.hash
	return slot, dir, hash, previewPinName(slot, dir, hash) == name
}

// previewAdoption counts what adopt found.
type previewAdoption struct {
	adopted, released, cleared int
}

// adopt takes over the pinned previews installed in the slots of the
// adopted workload endpoints eps, and clears and releases the rest.
func (p *previewProgrammer) adopt(eps map[string]*endpointState) (previewAdoption, error) {
	var a previewAdoption
	installed, err := p.slots.Previews()
	if err != nil {
		return a, err
	}
	type at struct {
		slot uint32
		dir  model.Direction
	}
	inSlot := map[at]ebpf.ProgramID{}
	for _, e := range installed {
		inSlot[at{e.Slot, model.Direction(e.Dir)}] = e.Prog
	}
	owner := map[uint32]string{}
	for name, st := range eps {
		if st.hasSlot && !st.host {
			owner[st.slot] = name
		}
	}
	names, err := p.fac.PinnedPreviewNames()
	if err != nil {
		return a, err
	}
	kept := map[at]bool{}
	var release []pinnedProgram
	var errs []error
	for _, name := range names {
		path := filepath.Join(p.fac.PreviewsDir(), name)
		slot, dir, hash, ok := parsePreviewPinName(name)
		if !ok {
			errs = append(errs, p.fac.RemovePinDir(path))
			continue
		}
		pp, err := p.fac.OpenPinnedPreview(name)
		if err != nil {
			p.log.Info("ignoring pinned staged preview", "dir", name, "reason", err)
			errs = append(errs, p.fac.RemovePinDir(path))
			continue
		}
		iface, owned := owner[slot]
		if !owned || kept[at{slot, dir}] || inSlot[at{slot, dir}] != pp.HeadID() {
			release = append(release, pp)
			continue
		}
		kept[at{slot, dir}] = true
		cur := p.progs[iface]
		if cur == nil {
			cur = &[2]*previewProg{}
			p.progs[iface] = cur
		}
		cur[dir] = &previewProg{hash: hash, slot: slot, pinned: pp}
		a.adopted++
	}
	for k := range inSlot {
		if kept[k] {
			continue
		}
		if err := p.slots.ClearPreview(k.slot, int(k.dir)); err != nil {
			// A pinned program that may still be in the slot stays whole.
			errs = append(errs, err)
			for _, pp := range release {
				pp.Abandon()
			}
			return a, errors.Join(errs...)
		}
		a.cleared++
	}
	for _, pp := range release {
		if err := pp.Release(true); err != nil {
			errs = append(errs, err)
		}
		a.released++
	}
	return a, errors.Join(errs...)
}

// clearPreviews empties dpd_preview and removes every pinned preview:
// this dpd runs without staged previews. Slots first, for the reason
// drop gives; the continuations left in dpd_chain are garbage collection's.
func clearPreviews(slots previewSlots, dir string) error {
	if err := slots.ClearPreviews(); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove pinned staged previews: %w", err)
	}
	return nil
}
