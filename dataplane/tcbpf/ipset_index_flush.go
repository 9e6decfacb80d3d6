package tcbpf

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/sorted"
)

// flush rewrites the entries the changes since the last flush affect: the
// changed prefixes, every entry inside one of them, and the unsure ones.
// Their combinations before and after the change are computed from the
// refs, and only entries whose combination differs are written; new
// combinations are announced before, and new and updated entries are
// written before stale ones are deleted, so a lookup never misses a set
// that keeps the address. Memory and time beyond the linear merge of the
// refs are bounded by the affected entries.
func (x *ipsetIndex) flush() error {
	if x == nil || (len(x.ops) == 0 && len(x.unsure) == 0) {
		return nil
	}
	ins, del := x.netOps()
	aff := make([]idxPfx, 0, len(ins)+len(del)+len(x.unsure))
	for _, r := range ins {
		aff = append(aff, r.pfx)
	}
	for _, r := range del {
		aff = append(aff, r.pfx)
	}
	// Entries inside a changed prefix that stay are among the current refs;
	// those that come or go are changed prefixes themselves.
	longest := x.longest()
	for i, n := 0, len(aff); i < n; i++ {
		if aff[i].bits < longest {
			aff = x.inside(aff[i], aff)
		}
	}
	for p := range x.unsure {
		aff = append(aff, p)
	}
	slices.SortFunc(aff, comparePfx)
	aff = slices.Compact(aff)

	before := make([]idxVal, len(aff))
	had := make([]bool, len(aff))
	for i, p := range aff {
		if _, ok := x.find(p); ok {
			had[i] = true
			before[i], _ = x.combos.id(x.value(p))
		}
	}
	x.merge(ins, del)
	var upd, gone []idxPfx
	var ids []idxVal
	for i, p := range aff {
		_, unsure := x.unsure[p]
		if _, ok := x.find(p); ok {
			after := x.combos.ref(x.value(p))
			if had[i] {
				x.combos.unref(before[i])
			}
			if !had[i] || unsure || after != before[i] {
				upd, ids = append(upd, p), append(ids, after)
			}
		} else {
			if had[i] {
				x.combos.unref(before[i])
			}
			if had[i] || unsure {
				gone = append(gone, p)
			}
		}
	}
	if err := x.combos.announce(); err != nil {
		x.markUnsure(upd)
		x.markUnsure(gone)
		return err
	}
	if err := x.write(upd, ids, gone); err != nil {
		return err
	}
	if len(x.unsure) > 0 {
		return nil
	}
	return x.combos.release()
}

// longest is the longest prefix length among the refs.
func (x *ipsetIndex) longest() uint8 {
	for l := len(x.lens) - 1; l > 0; l-- {
		if x.lens[l] > 0 {
			return uint8(l)
		}
	}
	return 0
}

// netOps folds the pending ops into the refs to insert and to delete,
// both sorted: the last op on a ref wins, and ops that leave a ref as it
// is are dropped.
func (x *ipsetIndex) netOps() (ins, del []idxRef) {
	ops := x.ops
	slices.SortStableFunc(ops, func(a, b idxOp) int { return compareRef(a.ref, b.ref) })
	w, adds := 0, 0
	for i, op := range ops {
		if i+1 < len(ops) && ops[i+1].ref == op.ref {
			continue
		}
		if sorted.Contains(x.refs, op.ref, compareRef) != op.add {
			ops[w] = op
			w++
			if op.add {
				adds++
			}
		}
	}
	ins = make([]idxRef, 0, adds)
	for _, op := range ops[:w] {
		if op.add {
			ins = append(ins, op.ref)
		} else {
			del = append(del, op.ref)
		}
	}
	if cap(x.ops) > 4*keyChunk {
		x.ops = nil // a bulk change's buffer
	} else {
		x.ops = x.ops[:0]
	}
	return ins, del
}

// merge applies netOps' result to the refs.
func (x *ipsetIndex) merge(ins, del []idxRef) {
	for _, r := range ins {
		x.lens[r.pfx.bits]++
	}
	for _, r := range del {
		x.lens[r.pfx.bits]--
	}
	if len(x.refs) == 0 && len(del) == 0 {
		x.refs = ins // fresh and exactly sized: a start or a first set
		return
	}
	x.refs = sorted.Apply(x.refs, ins, del, compareRef)
}

// write stores upd with their combination ids and deletes gone. Entries
// it cannot vouch for after an error become unsure, for the next flush.
func (x *ipsetIndex) write(upd []idxPfx, ids []idxVal, gone []idxPfx) error {
	var exact, rest []idxPfx
	var exactIDs, restIDs []idxVal
	for i, p := range upd {
		if p.full() {
			exact, exactIDs = append(exact, p), append(exactIDs, ids[i])
		} else {
			rest, restIDs = append(rest, p), append(restIDs, ids[i])
		}
	}
	spill, spillIDs, err := x.writeExact(exact, exactIDs)
	if err != nil {
		x.markUnsure(upd)
		x.markUnsure(gone)
		return err
	}
	for _, p := range exact {
		delete(x.unsure, p) // spilled ones become unsure below if their write fails
	}
	upd, ids = append(rest, spill...), append(restIDs, spillIDs...)
	keys := make([]idxKey, min(len(upd), keyChunk))
	vals := make([]idxVal, len(keys))
	for len(upd) > 0 {
		chunk := upd[:min(len(upd), keyChunk)]
		for i, p := range chunk {
			keys[i] = p.key()
		}
		copy(vals, ids[:len(chunk)])
		n, err := x.update(keys[:len(chunk)], vals[:len(chunk)])
		for _, p := range chunk[:n] {
			delete(x.unsure, p)
		}
		if err != nil {
			x.markUnsure(upd[n:])
			x.markUnsure(gone)
			return err
		}
		upd, ids = upd[len(chunk):], ids[len(chunk):]
	}
	for i, p := range gone {
		// The trie copy first: until the hash entry goes it shadows it.
		k := p.key()
		if err := x.m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			x.markUnsure(gone[i:])
			return fmt.Errorf("delete from %s: %w", abi.MapIPSetIdx, err)
		}
		if p.full() {
			if err := x.h.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				x.markUnsure(gone[i:])
				return fmt.Errorf("delete from %s: %w", abi.MapIPSetIdxHash, err)
			}
		}
		delete(x.unsure, p)
	}
	if len(x.unsure) == 0 {
		x.unsure = nil
	}
	return nil
}

// update writes keys and vals in one batch where the kernel supports it,
// else one by one, and returns how many were written.
func (x *ipsetIndex) update(keys []idxKey, vals []idxVal) (int, error) {
	n, err := x.m.BatchUpdate(keys, vals, nil)
	if err == nil {
		return len(keys), nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return n, fmt.Errorf("write %s: %w", abi.MapIPSetIdx, err)
	}
	for i := range keys {
		if err := x.m.Update(&keys[i], &vals[i], ebpf.UpdateAny); err != nil {
			return i, fmt.Errorf("write %s: %w", abi.MapIPSetIdx, err)
		}
	}
	return len(keys), nil
}

func (x *ipsetIndex) markUnsure(ps []idxPfx) {
	if len(ps) > 0 && x.unsure == nil {
		x.unsure = map[idxPfx]struct{}{}
	}
	for _, p := range ps {
		x.unsure[p] = struct{}{}
	}
}

func (x *ipsetIndex) close() error {
	if x == nil {
		return nil
	}
	return errors.Join(x.m.Close(), x.h.Close())
}
