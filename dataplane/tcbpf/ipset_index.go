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
// (without protocol and port) of a set with a slot, mapped to the slots of
// all sets with a member containing it. Userspace keeps one sorted ref per
// (prefix, slot) and rewrites the entries a change affects; what the map
// holds is not mirrored: it is what the refs say, but for the prefixes in
// unsure.

// idxPfx is an index entry: family, prefix bits and address as in
// dpd_ipsets keys.
type idxPfx struct {
	addr   [16]byte
	bits   uint8
	family uint8
}

type idxVal [abi.IPSetIdxWords]uint64

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

// idxRef says that the set in slot has prefix pfx as a member.
type idxRef struct {
	pfx  idxPfx
	slot uint16
}

func compareRef(a, b idxRef) int {
	if c := comparePfx(a.pfx, b.pfx); c != 0 {
		return c
	}
	return cmp.Compare(a.slot, b.slot)
}

// idxOp is a ref added or removed since the last flush.
type idxOp struct {
	ref idxRef
	add bool
}

// ipsetIndex mirrors dpd_ipset_idx. Guarded by Datapath.mu.
type ipsetIndex struct {
	m      *ebpf.Map
	refs   []idxRef            // sorted by compareRef; as of the last flush
	lens   [129]int32          // refs per prefix length
	ops    []idxOp             // changes since the last flush, in order
	unsure map[idxPfx]struct{} // entries a failed flush may have left wrong
}

// openIPSetIndexLocked opens (or creates) the pinned index and rebuilds
// it from the sets' members, rewriting whatever differs.
func (d *Datapath) openIPSetIndexLocked() error {
	spec := &ebpf.MapSpec{
		Name: abi.MapIPSetIdx, Type: ebpf.LPMTrie, KeySize: abi.IPSetIdxKeySize,
		ValueSize: 8 * abi.IPSetIdxWords, MaxEntries: uint32(d.sizes.IPSets),
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
	if d.setIdx != nil {
		_ = d.setIdx.m.Close()
	}
	x := &ipsetIndex{m: m}
	d.setIdx = x
	for _, s := range d.sets {
		x.change(s.id, s.members, true)
	}
	x.merge(x.netOps())
	if err := x.reconcile(); err != nil {
		_ = m.Close() // Open fails: nothing else closes it
		d.setIdx = nil
		return err
	}
	return nil
}

// reconcile makes the map hold exactly what the refs say: after a restart
// it holds the previous run's entries, some of them stale.
func (x *ipsetIndex) reconcile() error {
	seen := make([]bool, len(x.refs))
	var upd, del []idxPfx
	err := readAll(x.m, func(k idxKey, v idxVal) {
		p := idxPfx{bits: uint8(binary.NativeEndian.Uint32(k[:]) - abi.IPSetIdxKeyFixedBits), family: k[abi.IPSetIdxKeyFamily]}
		copy(p.addr[:], k[abi.IPSetIdxKeyAddr:])
		i, ok := x.find(p)
		switch {
		case !ok:
			del = append(del, p)
		case x.value(p) != v:
			upd = append(upd, p)
			fallthrough
		default:
			seen[i] = true
		}
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", abi.MapIPSetIdx, err)
	}
	for i, r := range x.refs {
		if !seen[i] && (i == 0 || x.refs[i-1].pfx != r.pfx) {
			upd = append(upd, r.pfx)
		}
	}
	return x.write(upd, del)
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
// with a protocol or port and sets without a slot are not indexed.
func (x *ipsetIndex) change(id uint32, ms []member, add bool) {
	if x == nil || id < 1 || id > abi.IPSetIdxSlots {
		return
	}
	for _, m := range ms {
		if m.proto == 0 && m.port == 0 {
			x.ops = append(x.ops, idxOp{ref: idxRef{pfx: idxPfx{addr: m.addr, bits: m.bits, family: m.family}, slot: uint16(id)}, add: add})
		}
	}
}

// find returns the index of the first ref of prefix p.
func (x *ipsetIndex) find(p idxPfx) (int, bool) {
	i, _ := slices.BinarySearchFunc(x.refs, idxRef{pfx: p}, compareRef)
	return i, i < len(x.refs) && x.refs[i].pfx == p
}

// value is entry p's bitmap: the slots of every member containing p.
func (x *ipsetIndex) value(p idxPfx) idxVal {
	var v idxVal
	for l := range p.bits + 1 {
		if x.lens[l] == 0 {
			continue
		}
		q := p.truncate(l)
		for i, _ := x.find(q); i < len(x.refs) && x.refs[i].pfx == q; i++ {
			s := x.refs[i].slot - 1
			v[s/64] |= 1 << (s % 64)
		}
	}
	return v
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
