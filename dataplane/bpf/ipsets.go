package bpf

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	bpfobj "github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/bpf/abi"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// ipset is the in-kernel state of one set, mirrored so that updates write
// only differences.
type ipset struct {
	key     ipsetName // dpd_ipset_ids key
	id      uint32
	typ     model.IPSetType
	members map[ipsetKey]struct{}
}

type ipsetKey = bpfobj.DpdDpdIpsetKey
type ipsetName = bpfobj.DpdDpdIpsetName

// encodeName is the dpd_ipset_ids key of a set name: the name itself, or
// "#" + base64(sha256(name)) when it does not fit (or could be mistaken for
// a hashed one).
func encodeName(name string) ipsetName {
	var k ipsetName
	s := name
	if len(s) > abi.IPSetNameLen || (len(s) > 0 && s[0] == '#') {
		sum := sha256.Sum256([]byte(name))
		s = "#" + base64.RawURLEncoding.EncodeToString(sum[:])
	}
	for i := 0; i < len(s); i++ {
		k.Name[i] = int8(s[i])
	}
	return k
}

func nameString(k ipsetName) string {
	b := make([]byte, 0, len(k.Name))
	for _, c := range k.Name {
		b = append(b, byte(c))
	}
	return string(b)
}

// htons converts a host-order port to the network-order field value.
func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// memberKey builds the LPM key of a member of set id.
func memberKey(id uint32, m model.IPSetMember) (ipsetKey, error) {
	if !m.Prefix.IsValid() {
		return ipsetKey{}, fmt.Errorf("invalid member %v", m.Prefix)
	}
	p := m.Prefix.Masked()
	k := ipsetKey{SetId: id, Proto: m.Proto, Port: htons(m.Port)}
	a := p.Addr()
	if a.Is4() {
		b := a.As4()
		copy(k.Addr[:], b[:])
	} else {
		b := a.As16()
		copy(k.Addr[:], b[:])
	}
	k.Prefixlen = uint32(abi.IPSetKeyFixedBits + p.Bits())
	return k, nil
}

// loadIPSetsLocked rebuilds the bookkeeping from the pinned maps after a
// restart, and deletes members of ids no name owns (left by a crash).
func (d *Dataplane) loadIPSetsLocked() error {
	byID := map[uint32]*ipset{}
	var name ipsetName
	var id uint32
	it := d.objs.DpdIpsetIds.Iterate()
	for it.Next(&name, &id) {
		s := &ipset{key: name, id: id, members: map[ipsetKey]struct{}{}}
		d.sets[nameString(name)] = s
		d.ids[id] = struct{}{}
		byID[id] = s
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read ip set ids: %w", err)
	}
	var k ipsetKey
	var v uint32
	var orphans []ipsetKey
	it = d.objs.DpdIpsets.Iterate()
	for it.Next(&k, &v) {
		if s, ok := byID[k.SetId]; ok {
			s.members[k] = struct{}{}
		} else {
			orphans = append(orphans, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read ip set members: %w", err)
	}
	if _, err := d.deleteKeys(orphans); err != nil {
		return fmt.Errorf("delete orphan ip set members: %w", err)
	}
	return d.openIPSetIndexLocked()
}

// SetID returns the id allocated to the named set.
func (d *Dataplane) SetID(name string) (uint32, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.sets[nameString(encodeName(name))]
	if !ok {
		return 0, false
	}
	return s.id, true
}

// ReplaceIPSet makes members the complete membership of the named set,
// allocating its id on first use. Only the difference is written.
func (d *Dataplane) ReplaceIPSet(name string, typ model.IPSetType, members []model.IPSetMember) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := d.ensureSetLocked(name)
	if err != nil {
		return fmt.Errorf("replace ip set %s: %w", name, err)
	}
	s.typ = typ
	want := make(map[ipsetKey]struct{}, len(members))
	for _, m := range members {
		k, err := memberKey(s.id, m)
		if err != nil {
			return fmt.Errorf("replace ip set %s: %w", name, err)
		}
		want[k] = struct{}{}
	}
	var add, del []ipsetKey
	for k := range want {
		if _, ok := s.members[k]; !ok {
			add = append(add, k)
		}
	}
	for k := range s.members {
		if _, ok := want[k]; !ok {
			del = append(del, k)
		}
	}
	// Add before delete, so a prefix replaced by a narrower one never leaves
	// a moment with neither.
	if err := d.applyLocked(s, add, del); err != nil {
		return fmt.Errorf("replace ip set %s: %w", name, err)
	}
	return nil
}

// UpdateIPSet applies a delta to a set previously replaced.
func (d *Dataplane) UpdateIPSet(name string, added, removed []model.IPSetMember) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.sets[nameString(encodeName(name))]
	if !ok {
		return fmt.Errorf("update ip set %s: unknown set", name)
	}
	var add, del []ipsetKey
	for _, m := range removed {
		k, err := memberKey(s.id, m)
		if err != nil {
			return fmt.Errorf("update ip set %s: %w", name, err)
		}
		if _, ok := s.members[k]; ok {
			del = append(del, k)
		}
	}
	for _, m := range added {
		k, err := memberKey(s.id, m)
		if err != nil {
			return fmt.Errorf("update ip set %s: %w", name, err)
		}
		if _, ok := s.members[k]; !ok {
			add = append(add, k)
		}
	}
	// A member both removed and added stays.
	addSet := make(map[ipsetKey]struct{}, len(add))
	for _, k := range add {
		addSet[k] = struct{}{}
	}
	kept := del[:0]
	for _, k := range del {
		if _, ok := addSet[k]; !ok {
			kept = append(kept, k)
		}
	}
	if err := d.applyLocked(s, add, kept); err != nil {
		return fmt.Errorf("update ip set %s: %w", name, err)
	}
	return nil
}

// RemoveIPSet deletes the set's members and frees its id. Unknown sets are
// not an error.
func (d *Dataplane) RemoveIPSet(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.removeSetLocked(nameString(encodeName(name))); err != nil {
		return fmt.Errorf("remove ip set %s: %w", name, err)
	}
	return nil
}

// RetainIPSets removes every set not named in keep: the garbage collection
// after a restart, when sets the controller no longer sends are still pinned.
func (d *Dataplane) RetainIPSets(keep []string) (removed int, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	want := make(map[string]bool, len(keep))
	for _, n := range keep {
		want[nameString(encodeName(n))] = true
	}
	for key := range d.sets {
		if want[key] {
			continue
		}
		if err := d.removeSetLocked(key); err != nil {
			return removed, fmt.Errorf("retain ip sets: %w", err)
		}
		removed++
	}
	return removed, nil
}

func (d *Dataplane) removeSetLocked(key string) error {
	s, ok := d.sets[key]
	if !ok {
		return nil
	}
	del := make([]ipsetKey, 0, len(s.members))
	for k := range s.members {
		del = append(del, k)
	}
	if err := d.applyLocked(s, nil, del); err != nil {
		return err
	}
	if err := d.objs.DpdIpsetIds.Delete(&s.key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("free set id %d: %w", s.id, err)
	}
	delete(d.sets, key)
	delete(d.ids, s.id)
	return nil
}

// ensureSetLocked returns the set, allocating the lowest free id (0 means
// "no set") and persisting it before any member uses it.
func (d *Dataplane) ensureSetLocked(name string) (*ipset, error) {
	nk := encodeName(name)
	key := nameString(nk)
	if s, ok := d.sets[key]; ok {
		return s, nil
	}
	var id uint32 = 1
	for ; id <= ipsetIDsSize; id++ {
		if _, used := d.ids[id]; !used {
			break
		}
	}
	if id > ipsetIDsSize {
		return nil, fmt.Errorf("no free set id (max %d sets)", ipsetIDsSize)
	}
	if err := d.objs.DpdIpsetIds.Update(&nk, id, ebpf.UpdateAny); err != nil {
		return nil, fmt.Errorf("record set id: %w", err)
	}
	s := &ipset{key: nk, id: id, members: map[ipsetKey]struct{}{}}
	d.sets[key] = s
	d.ids[id] = struct{}{}
	return s, nil
}

// applyLocked writes add then del and records what the kernel accepted.
// The IP set index follows what the kernel accepted.
func (d *Dataplane) applyLocked(s *ipset, add, del []ipsetKey) error {
	n, err := d.addKeys(add)
	for _, k := range add[:n] {
		s.members[k] = struct{}{}
		d.setIdx.change(s.id, k, true)
	}
	if err != nil {
		return errors.Join(err, d.setIdx.flush())
	}
	// The index drops members before dpd_ipsets does: a set test answered
	// by either map sees the member leave once, never leave and return.
	for _, k := range del {
		d.setIdx.change(s.id, k, false)
	}
	if err := d.setIdx.flush(); err != nil {
		return err
	}
	n, err = d.deleteKeys(del)
	for _, k := range del[:n] {
		delete(s.members, k)
	}
	for _, k := range del[n:] {
		d.setIdx.change(s.id, k, true) // still a member after all
	}
	return errors.Join(err, d.setIdx.flush())
}

// addKeys writes keys, in one batch where the kernel supports it for LPM
// tries, else one by one. It returns how many were written.
func (d *Dataplane) addKeys(keys []ipsetKey) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	vals := make([]uint32, len(keys))
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
func (d *Dataplane) deleteKeys(keys []ipsetKey) (int, error) {
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
