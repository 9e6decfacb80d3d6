package tcbpf

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/sorted"
)

// ipset is the in-kernel state of one set, mirrored so that updates write
// only differences.
type ipset struct {
	key     ipsetName // dpd_ipset_ids key
	id      uint32
	typ     model.IPSetType
	members []member // what dpd_ipsets holds, sorted by compareMember
}

type ipsetKey = bpf.DpdDpdIpsetKey
type ipsetName = bpf.DpdDpdIpsetName

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

// loadIPSetsLocked rebuilds the bookkeeping from the pinned maps after a
// restart, and deletes members of ids no name owns (left by a crash).
func (d *Datapath) loadIPSetsLocked() error {
	byID := map[uint32]*ipset{}
	var name ipsetName
	var id uint32
	it := d.objs.DpdIpsetIds.Iterate()
	for it.Next(&name, &id) {
		s := &ipset{key: name, id: id}
		d.sets[nameString(name)] = s
		d.ids[id] = struct{}{}
		byID[id] = s
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read ip set ids: %w", err)
	}
	var orphans []ipsetKey
	err := readAll(d.objs.DpdIpsets, func(k ipsetKey, _ uint32) {
		if s, ok := byID[k.SetId]; ok {
			s.members = append(s.members, keyMember(k))
		} else {
			orphans = append(orphans, k)
		}
	})
	if err != nil {
		return fmt.Errorf("read ip set members: %w", err)
	}
	for _, s := range byID {
		// Trie keys are distinct, and so are their members.
		slices.SortFunc(s.members, compareMember)
		if cap(s.members)-len(s.members) > len(s.members)/8 {
			s.members = slices.Clone(s.members) // drop append's headroom
		}
	}
	if _, err := d.deleteKeys(orphans); err != nil {
		return fmt.Errorf("delete orphan ip set members: %w", err)
	}
	return d.openIPSetIndexLocked()
}

// SetID returns the id allocated to the named set.
func (d *Datapath) SetID(name string) (uint32, bool) {
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
func (d *Datapath) ReplaceIPSet(name string, typ model.IPSetType, members []model.IPSetMember) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	want, err := toMembers(members)
	if err != nil {
		return fmt.Errorf("replace ip set %s: %w", name, err)
	}
	s, err := d.ensureSetLocked(name)
	if err != nil {
		return fmt.Errorf("replace ip set %s: %w", name, err)
	}
	s.typ = typ
	add, del := sorted.Diff(s.members, want, compareMember)
	if err := d.applyLocked(s, setChange{add: add, del: del, want: want, replace: true}); err != nil {
		return fmt.Errorf("replace ip set %s: %w", name, err)
	}
	return nil
}

// UpdateIPSet applies a delta to a set previously replaced: removed, then
// added, so a member in both stays.
func (d *Datapath) UpdateIPSet(name string, added, removed []model.IPSetMember) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.sets[nameString(encodeName(name))]
	if !ok {
		return fmt.Errorf("update ip set %s: unknown set", name)
	}
	a, err := toMembers(added)
	if err != nil {
		return fmt.Errorf("update ip set %s: %w", name, err)
	}
	r, err := toMembers(removed)
	if err != nil {
		return fmt.Errorf("update ip set %s: %w", name, err)
	}
	var add, del []member
	for _, m := range a {
		if !sorted.Contains(s.members, m, compareMember) {
			add = append(add, m)
		}
	}
	for _, m := range r {
		if sorted.Contains(s.members, m, compareMember) && !sorted.Contains(a, m, compareMember) {
			del = append(del, m)
		}
	}
	if err := d.applyLocked(s, setChange{add: add, del: del}); err != nil {
		return fmt.Errorf("update ip set %s: %w", name, err)
	}
	return nil
}

// RemoveIPSet deletes the set's members and frees its id. Unknown sets are
// not an error.
func (d *Datapath) RemoveIPSet(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.removeSetLocked(nameString(encodeName(name))); err != nil {
		return fmt.Errorf("remove ip set %s: %w", name, err)
	}
	return nil
}

// RetainIPSets removes every set not named in keep: the garbage collection
// after a restart, when sets the controller no longer sends are still pinned.
func (d *Datapath) RetainIPSets(keep []string) (removed int, err error) {
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

func (d *Datapath) removeSetLocked(key string) error {
	s, ok := d.sets[key]
	if !ok {
		return nil
	}
	if err := d.applyLocked(s, setChange{del: s.members, replace: true}); err != nil {
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
func (d *Datapath) ensureSetLocked(name string) (*ipset, error) {
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
	s := &ipset{key: nk, id: id}
	d.sets[key] = s
	d.ids[id] = struct{}{}
	return s, nil
}
