package linux

import (
	"cmp"
	"fmt"
	"slices"
)

// slotDir is one policy entry of dpd_jump: an endpoint slot's direction.
type slotDir struct {
	slot uint32
	dir  int
}

// jumpSlots is the entry facility with a record of the policy programs
// this process installed in dpd_jump, so that a program can be replaced
// in every slot that runs it (directreload.go). Every policy write goes
// through it; like the programmers, it is used under Kernel.mu.
type jumpSlots struct {
	entryFacility
	held map[slotDir]loadedProgram
}

func newJumpSlots(entry entryFacility) *jumpSlots {
	return &jumpSlots{entryFacility: entry, held: map[slotDir]loadedProgram{}}
}

func (j *jumpSlots) InstallPolicy(slot uint32, dir int, p loadedProgram) error {
	sd := slotDir{slot, dir}
	if err := j.entryFacility.InstallPolicy(slot, dir, p); err != nil {
		return err // a failed update leaves the entry as it was
	}
	j.held[sd] = p
	return nil
}

func (j *jumpSlots) ClearPolicy(slot uint32, dir int) error {
	if err := j.entryFacility.ClearPolicy(slot, dir); err != nil {
		return err // the slot may still name the program
	}
	delete(j.held, slotDir{slot, dir})
	return nil
}

// replace installs nw in every slot this process installed old in. On a
// failed write the slots already written get old back and the error is
// returned; rolledBack is false when one of those rewrites failed too
// (that slot then runs nw, which must stay loaded).
func (j *jumpSlots) replace(old, nw loadedProgram) (rolledBack bool, err error) {
	var slots []slotDir
	for sd, p := range j.held {
		if p == old {
			slots = append(slots, sd)
		}
	}
	slices.SortFunc(slots, func(a, b slotDir) int { return cmp.Or(cmp.Compare(a.slot, b.slot), cmp.Compare(a.dir, b.dir)) })
	for i, sd := range slots {
		err := j.InstallPolicy(sd.slot, sd.dir, nw)
		if err == nil {
			continue
		}
		rolledBack = true
		for _, back := range slots[:i] {
			if j.InstallPolicy(back.slot, back.dir, old) != nil {
				rolledBack = false
			}
		}
		return rolledBack, fmt.Errorf("replace policy program in slot %d dir %d: %w", sd.slot, sd.dir, err)
	}
	return true, nil
}
