package tcbpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/internal/sorted"
)

// keyChunk bounds the keys built per batch call, so the transient buffers
// stay small however large the change.
const keyChunk = 1024

// setChange is what applyLocked writes to one set: add, then del (both
// sorted; add disjoint from the members, del among them). With replace,
// want is the whole membership once both succeed, and becomes the
// members as it is instead of being merged.
type setChange struct {
	add, del []member
	want     []member
	replace  bool
}

// applyLocked writes the change and records what the kernel accepted;
// the IP set index follows it. Adds go before deletes, so a prefix
// replaced by a narrower one never leaves a moment with neither.
func (d *Datapath) applyLocked(s *ipset, c setChange) error {
	n, err := d.addMembers(s.id, c.add)
	d.setIdx.change(s.id, c.add[:n], true)
	if err != nil {
		s.members = sorted.Apply(s.members, c.add[:n], nil, compareMember)
		return errors.Join(err, d.setIdx.flush())
	}
	// The index drops members before dpd_ipsets does: a set test answered
	// by either map sees the member leave once, never leave and return.
	d.setIdx.change(s.id, c.del, false)
	if err := d.setIdx.flush(); err != nil {
		d.setIdx.change(s.id, c.del, true) // still members
		s.members = sorted.Apply(s.members, c.add, nil, compareMember)
		return errors.Join(err, d.setIdx.flush())
	}
	n, err = d.deleteMembers(s.id, c.del)
	d.setIdx.change(s.id, c.del[n:], true) // still members after all
	if err == nil && c.replace {
		s.members = c.want
	} else {
		// c.del may be (a part of) s.members itself: applySorted reads
		// deletions ahead of its writes, so that is safe.
		s.members = sorted.Apply(s.members, c.add, c.del[:n], compareMember)
	}
	return errors.Join(err, d.setIdx.flush())
}

// addMembers writes ms of set id to dpd_ipsets, a chunk at a time, and
// returns how many (from the start of ms) were written.
func (d *Datapath) addMembers(id uint32, ms []member) (int, error) {
	keys := make([]ipsetKey, min(len(ms), keyChunk))
	vals := make([]uint32, len(keys))
	for done := 0; done < len(ms); {
		chunk := ms[done:min(done+keyChunk, len(ms))]
		for i, m := range chunk {
			keys[i] = m.key(id)
		}
		n, err := d.addKeys(keys[:len(chunk)], vals[:len(chunk)])
		done += n
		if err != nil {
			return done, err
		}
	}
	return len(ms), nil
}

// deleteMembers removes ms of set id from dpd_ipsets, a chunk at a time,
// and returns how many (from the start of ms) are gone.
func (d *Datapath) deleteMembers(id uint32, ms []member) (int, error) {
	keys := make([]ipsetKey, min(len(ms), keyChunk))
	for done := 0; done < len(ms); {
		chunk := ms[done:min(done+keyChunk, len(ms))]
		for i, m := range chunk {
			keys[i] = m.key(id)
		}
		n, err := d.deleteKeys(keys[:len(chunk)])
		done += n
		if err != nil {
			return done, err
		}
	}
	return len(ms), nil
}

// addKeys writes keys (vals are their zero values), in one batch where the
// kernel supports it for LPM tries, else one by one. It returns how many
// were written.
func (d *Datapath) addKeys(keys []ipsetKey, vals []uint32) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	n, err := d.objs.DpdIpsets.BatchUpdate(keys, vals, nil)
	if err == nil {
		return len(keys), nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return n, fmt.Errorf("add members: %w", err)
	}
	for i := range keys {
		if err := d.objs.DpdIpsets.Update(&keys[i], uint32(0), ebpf.UpdateAny); err != nil {
			return i, fmt.Errorf("add member: %w", err)
		}
	}
	return len(keys), nil
}

// deleteKeys removes keys; ones already absent count as removed.
func (d *Datapath) deleteKeys(keys []ipsetKey) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	n, err := d.objs.DpdIpsets.BatchDelete(keys, nil)
	if err == nil {
		return len(keys), nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return n, fmt.Errorf("delete members: %w", err)
	}
	for i := range keys {
		err := d.objs.DpdIpsets.Delete(&keys[i])
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return i, fmt.Errorf("delete member: %w", err)
		}
	}
	return len(keys), nil
}
