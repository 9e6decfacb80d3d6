package tcbpf

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// dpd_ipset_idx (see abi.MapIPSetIdx): every address prefix that is a member
// (without protocol and port) of a set, mapped to the id of its
// combination: the sets with a member containing it (ipset_combos.go).
// Userspace keeps one sorted ref per (prefix, set) and rewrites the entries
// a change affects; what the map holds is not mirrored: it is what the refs
// say, but for the prefixes in unsure.

// idxPfx is an index entry: family, prefix bits and address as in
// dpd_ipsets keys.
type idxPfx struct {
	addr   [16]byte
	bits   uint8
	family uint8
}

// idxVal is an entry's value: a combination id.
type idxVal = uint32

func (p idxPfx) truncate(l uint8) idxPfx {
	out := idxPfx{bits: l, family: p.family}
	copy(out.addr[:l/8], p.addr[:l/8])
	if rem := l % 8; rem > 0 {
		out.addr[l/8] = p.addr[l/8] & byte(0xff<<(8-rem))
	}
	return out
}

// last is the highest address inside p.
func (p idxPfx) last() [16]byte {
	a := p.addr
	for i := int(p.bits); i < 128; i++ {
		a[i/8] |= 0x80 >> (i % 8)
	}
	return a
}

type idxKey [abi.IPSetIdxKeySize]byte

func (p idxPfx) key() idxKey {
	var k idxKey
	binary.NativeEndian.PutUint32(k[abi.IPSetIdxKeyPrefixLen:], uint32(abi.IPSetIdxKeyFixedBits)+uint32(p.bits))
	k[abi.IPSetIdxKeyFamily] = p.family
	copy(k[abi.IPSetIdxKeyAddr:], p.addr[:])
	return k
}

func comparePfx(a, b idxPfx) int {
	if a.family != b.family {
		return cmp.Compare(a.family, b.family)
	}
	if c := compareAddr(&a.addr, &b.addr); c != 0 {
		return c
	}
	return cmp.Compare(a.bits, b.bits)
}

// idxRef says that the set with id set0+1 has prefix pfx as a member
// (ids are 1 to ipsetIDsSize: 16 bits keep a ref at 20 bytes).
type idxRef struct {
	pfx  idxPfx
	set0 uint16
}

func compareRef(a, b idxRef) int {
	if c := comparePfx(a.pfx, b.pfx); c != 0 {
		return c
	}
	return cmp.Compare(a.set0, b.set0)
}

// idxOp is a ref added or removed since the last flush.
type idxOp struct {
	ref idxRef
	add bool
}

// ipsetIndex mirrors dpd_ipset_idx. Guarded by Datapath.mu.
type ipsetIndex struct {
	m      *ebpf.Map           // the trie
	h      *ebpf.Map           // full-length entries (ipset_index_exact.go)
	refs   []idxRef            // sorted by compareRef; as of the last flush
	lens   [129]int32          // refs per prefix length
	ops    []idxOp             // changes since the last flush, in order
	unsure map[idxPfx]struct{} // entries a failed flush may have left wrong
	combos comboTable          // the combinations the entries map to, and who watches them
	buf    []uint32            // value's result
}

// openIPSetIndexLocked opens (or creates) the pinned index and rebuilds
// it from the sets' members, rewriting whatever differs.
func (d *Datapath) openIPSetIndexLocked() error {
	spec := &ebpf.MapSpec{
		Name: abi.MapIPSetIdx, Type: ebpf.LPMTrie, KeySize: abi.IPSetIdxKeySize,
		ValueSize: 4, MaxEntries: uint32(d.sizes.IPSets),
		Flags: unix.BPF_F_NO_PREALLOC, Pinning: ebpf.PinByName,
	}
	opts := ebpf.MapOptions{PinPath: d.opts.PinDir}
	m, err := ebpf.NewMapWithOptions(spec, opts)
	if err == nil {
		var old bool
		if old, err = familyLess(m, abi.IPSetIdxKeyFamily); old {
			_ = m.Close()
			err = ebpf.ErrMapIncompatible // a layout without families
		}
	}
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		// Another size or layout: the index is derived data, so start
		// afresh (programs still using the old map keep it).
		if err := os.Remove(filepath.Join(d.opts.PinDir, abi.MapIPSetIdx)); err != nil {
			return fmt.Errorf("replace %s: %w", abi.MapIPSetIdx, err)
		}
		m, err = ebpf.NewMapWithOptions(spec, opts)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", abi.MapIPSetIdx, err)
	}
	h, err := d.openIdxHash()
	if err != nil {
		_ = m.Close()
		return err
	}
	if d.setIdx != nil {
		_ = d.setIdx.close()
	}
	x := &ipsetIndex{m: m, h: h, combos: newComboTable()}
	d.setIdx = x
	for _, s := range d.sets {
		x.change(s.id, s.members, true)
	}
	x.merge(x.netOps())
	if err := x.reconcile(); err != nil {
		_ = x.close() // Open fails: nothing else closes it
		d.setIdx = nil
		return err
	}
	return nil
}

// reconcile makes the map hold exactly what the refs say: after a restart
// it holds the previous run's entries, some of them stale. Combinations
// keep the ids the map gives them where it can, so the set maps of the
// previous run's programs, still attached, stay right.
func (x *ipsetIndex) reconcile() error {
	// had is what a policy sees: the hash's entry, else the trie's.
	had, inHash := map[idxPfx]idxVal{}, map[idxPfx]bool{}
	for _, m := range []*ebpf.Map{x.m, x.h} {
		err := readAll(m, func(k idxKey, v idxVal) {
			p := idxPfx{bits: uint8(binary.NativeEndian.Uint32(k[:]) - abi.IPSetIdxKeyFixedBits), family: k[abi.IPSetIdxKeyFamily]}
			copy(p.addr[:], k[abi.IPSetIdxKeyAddr:])
			had[p] = v
			inHash[p] = m == x.h
		})
		if err != nil {
			return fmt.Errorf("read %s: %w", m, err)
		}
	}
	var pfxs []idxPfx
	for i, r := range x.refs {
		if i == 0 || x.refs[i-1].pfx != r.pfx {
			pfxs = append(pfxs, r.pfx)
		}
	}
	for _, p := range pfxs {
		if id, ok := had[p]; ok {
			x.combos.claim(id, x.value(p))
		}
	}
	var upd, del []idxPfx
	var ids []idxVal
	for _, p := range pfxs {
		id := x.combos.ref(x.value(p))
		if v, ok := had[p]; !ok || v != id || (p.full() && !inHash[p]) {
			upd, ids = append(upd, p), append(ids, id)
		}
		delete(had, p)
	}
	for p := range had {
		del = append(del, p)
	}
	x.combos.fresh = nil // no one watches yet
	return x.write(upd, ids, del)
}

// IPSetIndex is dpd_ipset_idx, for polprog.Maps.IPSetIdx.
func (d *Datapath) IPSetIndex() *ebpf.Map {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.setIdx == nil {
		return nil
	}
	return d.setIdx.m
}

// change records that members ms of set id were added or removed. Members
// with a protocol or port are not indexed.
func (x *ipsetIndex) change(id uint32, ms []member, add bool) {
	if x == nil {
		return
	}
	for _, m := range ms {
		if m.proto == 0 && m.port == 0 {
			x.ops = append(x.ops, idxOp{ref: idxRef{pfx: idxPfx{addr: m.addr, bits: m.bits, family: m.family}, set0: uint16(id - 1)}, add: add})
		}
	}
}

// find returns the index of the first ref of prefix p.
func (x *ipsetIndex) find(p idxPfx) (int, bool) {
	i, _ := slices.BinarySearchFunc(x.refs, idxRef{pfx: p}, compareRef)
	return i, i < len(x.refs) && x.refs[i].pfx == p
}

// value is entry p's combination: the sets of every member containing p,
// sorted. The slice is valid until the next call.
func (x *ipsetIndex) value(p idxPfx) []uint32 {
	v := x.buf[:0]
	defer func() { x.buf = v[:0] }()
	for l := range p.bits + 1 {
		if x.lens[l] == 0 {
			continue
		}
		q := p.truncate(l)
		for i, _ := x.find(q); i < len(x.refs) && x.refs[i].pfx == q; i++ {
			v = append(v, uint32(x.refs[i].set0)+1)
		}
	}
	slices.Sort(v)
	return slices.Compact(v)
}

// inside appends to out the distinct prefixes of refs strictly inside p.
func (x *ipsetIndex) inside(p idxPfx, out []idxPfx) []idxPfx {
	hi := p.last()
	i, _ := x.find(p)
	for ; i < len(x.refs) && x.refs[i].pfx.family == p.family && compareAddr(&x.refs[i].pfx.addr, &hi) <= 0; i++ {
		q := x.refs[i].pfx
		if q.bits > p.bits && (len(out) == 0 || out[len(out)-1] != q) {
			out = append(out, q)
		}
	}
	return out
}
