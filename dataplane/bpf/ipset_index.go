package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/bpf/abi"
)

// dpd_ipset_idx (see abi.MapIPSetIdx): every address prefix that is a member
// (without protocol and port) of a set with a slot, mapped to the slots of
// all sets with a member containing it. Userspace keeps the exact members
// per prefix and rewrites the entries a change affects.

// idxPfx is an index entry: prefix bits and address as in dpd_ipsets keys
// (families are not told apart there either).
type idxPfx struct {
	bits int
	addr [16]byte
}

type idxVal [abi.IPSetIdxWords]uint64

func (p idxPfx) truncate(l int) idxPfx {
	out := idxPfx{bits: l}
	copy(out.addr[:l/8], p.addr[:l/8])
	if rem := l % 8; rem > 0 {
		out.addr[l/8] = p.addr[l/8] & byte(0xff<<(8-rem))
	}
	return out
}

func (p idxPfx) key() []byte {
	k := make([]byte, abi.IPSetIdxKeySize)
	binary.NativeEndian.PutUint32(k[abi.IPSetIdxKeyPrefixLen:], uint32(abi.IPSetIdxKeyFixedBits+p.bits))
	copy(k[abi.IPSetIdxKeyAddr:], p.addr[:])
	return k
}

// ipsetIndex mirrors dpd_ipset_idx. Guarded by Dataplane.mu.
type ipsetIndex struct {
	m       *ebpf.Map
	own     map[idxPfx]idxVal // slots of the sets with exactly this member
	lens    map[int]int       // prefix length -> entries of that length
	written map[idxPfx]idxVal // what the map holds
	changed map[idxPfx]bool   // members changed since the last flush
}

// openIPSetIndexLocked opens (or creates) the pinned index and rebuilds
// it from the sets' members, rewriting whatever differs.
func (d *Dataplane) openIPSetIndexLocked() error {
	spec := &ebpf.MapSpec{
		Name: abi.MapIPSetIdx, Type: ebpf.LPMTrie, KeySize: abi.IPSetIdxKeySize,
		ValueSize: 8 * abi.IPSetIdxWords, MaxEntries: uint32(d.sizes.IPSets),
		Flags: unix.BPF_F_NO_PREALLOC, Pinning: ebpf.PinByName,
	}
	opts := ebpf.MapOptions{PinPath: d.opts.PinDir}
	m, err := ebpf.NewMapWithOptions(spec, opts)
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		// Another size: the index is derived data, so start afresh.
		if err := os.Remove(filepath.Join(d.opts.PinDir, abi.MapIPSetIdx)); err != nil {
			return fmt.Errorf("replace %s: %w", abi.MapIPSetIdx, err)
		}
		m, err = ebpf.NewMapWithOptions(spec, opts)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", abi.MapIPSetIdx, err)
	}
	x := &ipsetIndex{m: m, own: map[idxPfx]idxVal{}, lens: map[int]int{},
		written: map[idxPfx]idxVal{}, changed: map[idxPfx]bool{}}
	var k [abi.IPSetIdxKeySize]byte
	var v idxVal
	it := m.Iterate()
	for it.Next(&k, &v) {
		p := idxPfx{bits: int(binary.NativeEndian.Uint32(k[:])) - abi.IPSetIdxKeyFixedBits}
		copy(p.addr[:], k[abi.IPSetIdxKeyAddr:])
		x.written[p] = v
	}
	if err := it.Err(); err != nil {
		_ = m.Close()
		return fmt.Errorf("read %s: %w", abi.MapIPSetIdx, err)
	}
	if d.setIdx != nil {
		_ = d.setIdx.m.Close()
	}
	d.setIdx = x
	for _, s := range d.sets {
		for k := range s.members {
			x.change(s.id, k, true)
		}
	}
	for p := range x.written {
		x.changed[p] = true // stale entries of sets removed while down
	}
	return x.flush()
}

// IPSetIndex is dpd_ipset_idx, for polprog.Maps.IPSetIdx.
func (d *Dataplane) IPSetIndex() *ebpf.Map {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.setIdx == nil {
		return nil
	}
	return d.setIdx.m
}

// change records that member k of set id was added or removed. Members
// with a protocol or port and sets without a slot are not indexed.
func (x *ipsetIndex) change(id uint32, k ipsetKey, add bool) {
	if x == nil || id < 1 || id > abi.IPSetIdxSlots || k.Proto != 0 || k.Port != 0 {
		return
	}
	p := idxPfx{bits: int(k.Prefixlen) - abi.IPSetKeyFixedBits, addr: k.Addr}
	v, had := x.own[p]
	w, bit := (id-1)/64, uint64(1)<<((id-1)%64)
	if add {
		v[w] |= bit
	} else {
		v[w] &^= bit
	}
	switch {
	case v != idxVal{}:
		x.own[p] = v
		if !had {
			x.lens[p.bits]++
		}
	case had:
		delete(x.own, p)
		if x.lens[p.bits]--; x.lens[p.bits] == 0 {
			delete(x.lens, p.bits)
		}
	}
	x.changed[p] = true
}

// value is entry p's bitmap: the slots of every member containing p.
func (x *ipsetIndex) value(p idxPfx) idxVal {
	var v idxVal
	for l := range x.lens {
		if l > p.bits {
			continue
		}
		if o, ok := x.own[p.truncate(l)]; ok {
			for w := range v {
				v[w] |= o[w]
			}
		}
	}
	return v
}

// flush rewrites the entries the changes affect: the changed prefixes and
// every entry inside one of them. New and updated entries are written
// before stale ones are deleted, so a lookup never misses a set that keeps
// the address.
func (x *ipsetIndex) flush() error {
	if x == nil || len(x.changed) == 0 {
		return nil
	}
	affected := map[idxPfx]bool{}
	changedLens := map[int]bool{}
	for p := range x.changed {
		affected[p] = true
		changedLens[p.bits] = true
	}
	for p := range x.own {
		for l := range changedLens {
			if l < p.bits && x.changed[p.truncate(l)] {
				affected[p] = true
			}
		}
	}
	var upd, del []idxPfx
	for p := range affected {
		if _, ok := x.own[p]; !ok {
			if _, ok := x.written[p]; ok {
				del = append(del, p)
			}
			continue
		}
		if v := x.value(p); v != x.written[p] {
			upd = append(upd, p)
		}
	}
	for _, p := range upd {
		v := x.value(p)
		if err := x.m.Update(p.key(), v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write %s: %w", abi.MapIPSetIdx, err)
		}
		x.written[p] = v
	}
	for _, p := range del {
		if err := x.m.Delete(p.key()); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete from %s: %w", abi.MapIPSetIdx, err)
		}
		delete(x.written, p)
	}
	clear(x.changed)
	return nil
}

func (x *ipsetIndex) close() error {
	if x == nil {
		return nil
	}
	return x.m.Close()
}
