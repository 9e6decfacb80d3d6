package linux

import "errors"

// slotAllocator hands out endpoint slots: each endpoint's policy programs
// live at dpd_jump[JumpPolBase + 2*slot + dir]. The lowest free slot is
// taken first so the jump map stays dense. After a restart the slots in
// dpd_ifstate are reserved again, so an adopted endpoint keeps its slot
// (and its installed programs) without a write.
type slotAllocator struct {
	used []bool
	n    int // slots in use
}

func newSlotAllocator(max uint32) slotAllocator { return slotAllocator{used: make([]bool, max)} }

var errNoSlots = errors.New("no free endpoint slot: raise BPFMapSizeIfState")

func (a *slotAllocator) get() (uint32, error) {
	for s, u := range a.used {
		if !u {
			a.used[s] = true
			a.n++
			return uint32(s), nil
		}
	}
	return 0, errNoSlots
}

// ensure gives *slot a slot unless *has says it holds one already.
func (a *slotAllocator) ensure(slot *uint32, has *bool) error {
	if *has {
		return nil
	}
	s, err := a.get()
	if err != nil {
		return err
	}
	*slot, *has = s, true
	return nil
}

// reserve marks s as taken; false when it is out of range or taken already.
func (a *slotAllocator) reserve(s uint32) bool {
	if int(s) >= len(a.used) || a.used[s] {
		return false
	}
	a.used[s] = true
	a.n++
	return true
}

func (a *slotAllocator) put(s uint32) {
	if int(s) < len(a.used) && a.used[s] {
		a.used[s] = false
		a.n--
	}
}

// inUse reports whether s is allocated.
func (a *slotAllocator) inUse(s uint32) bool { return int(s) < len(a.used) && a.used[s] }
