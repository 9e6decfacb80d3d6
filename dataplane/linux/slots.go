package linux

import "errors"

// slotAllocator hands out endpoint slots: each endpoint's policy programs
// live at dpd_jump[JumpPolBase + 2*slot + dir]. Freed slots are reused
// lowest first so the jump map stays dense.
type slotAllocator struct {
	max  uint32
	next uint32
	free []uint32
}

func newSlotAllocator(max uint32) slotAllocator { return slotAllocator{max: max} }

var errNoSlots = errors.New("no free endpoint slot: raise BPFMapSizeIfState")

func (a *slotAllocator) get() (uint32, error) {
	if n := len(a.free); n > 0 {
		best := 0
		for i, s := range a.free {
			if s < a.free[best] {
				best = i
			}
		}
		s := a.free[best]
		a.free = append(a.free[:best], a.free[best+1:]...)
		return s, nil
	}
	if a.next >= a.max {
		return 0, errNoSlots
	}
	a.next++
	return a.next - 1, nil
}

func (a *slotAllocator) put(s uint32) { a.free = append(a.free, s) }
