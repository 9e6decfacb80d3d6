package tcbpf

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

type (
	natFeKey = bpf.DpdDpdNatFeKey
	natFeVal = bpf.DpdDpdNatFeVal
	natBeKey = bpf.DpdDpdNatBeKey
	natBeVal = bpf.DpdDpdNatBeVal
)

// NATFrontend is one service frontend: the address, port and protocol a
// workload connects to.
type NATFrontend struct {
	Addr  netip.Addr
	Port  uint16
	Proto uint8
}

func (f NATFrontend) String() string {
	return fmt.Sprintf("%d/%s", f.Proto, netip.AddrPortFrom(f.Addr, f.Port))
}

// NATBackend is one backend of a service port.
type NATBackend struct {
	Addr netip.Addr
	Port uint16
}

func (b NATBackend) String() string { return netip.AddrPortFrom(b.Addr, b.Port).String() }

// addr16 is a's layout in the maps: IPv4 in the first 4 bytes, IPv6 whole.
// An IPv4-mapped IPv6 address is IPv4.
func addr16(a netip.Addr) (out [16]uint8, err error) {
	a = a.Unmap()
	switch {
	case a.Is4():
		a4 := a.As4()
		copy(out[:], a4[:])
	case a.Is6() && a.Zone() == "":
		out = a.As16()
	default:
		return out, fmt.Errorf("address %q: not an IPv4 or IPv6 address", a)
	}
	return out, nil
}

// addrOf16 reads an address laid out by addr16; the maps keep the family
// beside it.
func addrOf16(b [16]uint8, is6 bool) netip.Addr {
	if is6 {
		return netip.AddrFrom16(b)
	}
	return netip.AddrFrom4([4]byte(b[:4]))
}

func feKey(f NATFrontend) (natFeKey, error) {
	a, err := addr16(f.Addr)
	if err != nil {
		return natFeKey{}, err
	}
	return natFeKey{Addr: a, Port: f.Port, Proto: f.Proto, Family: abi.CTFamily(f.Addr.Unmap().Is6())}, nil
}

// natFilter mirrors dpd_nat_fe_bits: how many frontend keys set each bit.
// Loaded from dpd_nat_fe on first use, so a restart or a migrated map
// starts consistent.
type natFilter struct {
	mu     sync.Mutex
	loaded bool                  // guarded by mu
	keys   map[natFeKey]bool     // frontends in dpd_nat_fe; guarded by mu
	count  [abi.NATFEBits]uint32 // keys per bit; guarded by mu
	bits   bpf.DpdDpdNatFeBits   // as last written; guarded by mu
}

func feBit(k *natFeKey) uint32 { return abi.NATFEBit16(k.Addr) }

// loadLocked builds the counts from the map and writes the filter.
func (d *Datapath) loadFilterLocked() error {
	f := &d.feFilter
	if f.loaded {
		return nil
	}
	f.keys = map[natFeKey]bool{}
	f.count = [abi.NATFEBits]uint32{}
	var (
		k natFeKey
		v natFeVal
	)
	it := d.objs.DpdNatFe.Iterate()
	for it.Next(&k, &v) {
		f.keys[k] = true
		f.count[feBit(&k)]++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list nat frontends: %w", err)
	}
	f.loaded = true
	return d.writeFilterLocked()
}

// writeFilterLocked writes the bits the counts say, if they changed.
func (d *Datapath) writeFilterLocked() error {
	f := &d.feFilter
	var want bpf.DpdDpdNatFeBits
	for b, n := range f.count {
		if n > 0 {
			want.Bits[b/64] |= 1 << (b % 64)
		}
	}
	if want == f.bits {
		var have bpf.DpdDpdNatFeBits
		if err := d.objs.DpdNatFeBits.Lookup(uint32(0), &have); err == nil && have == want {
			return nil
		}
	}
	if err := d.objs.DpdNatFeBits.Update(uint32(0), &want, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write nat frontend filter: %w", err)
	}
	f.bits = want
	return nil
}

// filterAdd sets the bits of keys about to be added (before the entries
// exist, so no packet misses a new frontend).
func (d *Datapath) filterAdd(keys []natFeKey) error {
	f := &d.feFilter
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := d.loadFilterLocked(); err != nil {
		return err
	}
	changed := false
	for i := range keys {
		if !f.keys[keys[i]] {
			f.keys[keys[i]] = true
			b := feBit(&keys[i])
			f.count[b]++
			changed = changed || f.count[b] == 1
		}
	}
	if !changed {
		return nil
	}
	return d.writeFilterLocked()
}

// filterRemove clears the bits of a deleted key (after the entry is gone).
func (d *Datapath) filterRemove(k natFeKey) error {
	f := &d.feFilter
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := d.loadFilterLocked(); err != nil {
		return err
	}
	if !f.keys[k] {
		return nil
	}
	delete(f.keys, k)
	b := feBit(&k)
	f.count[b]--
	if f.count[b] > 0 {
		return nil
	}
	return d.writeFilterLocked()
}

// ProgramNATPort makes service port id's backends exactly bes (ordinals
// 0..len-1) and points every frontend in fes at it. prevCount is how many
// backends were programmed before: the order of writes keeps every
// frontend's count within the backends present, so a packet racing the
// update never picks a missing ordinal.
func (d *Datapath) ProgramNATPort(id uint32, fes []NATFrontend, bes []NATBackend, prevCount int) error {
	keys := make([]natFeKey, len(fes))
	for i, f := range fes {
		k, err := feKey(f)
		if err != nil {
			return fmt.Errorf("nat frontend %s: %w", f, err)
		}
		keys[i] = k
	}
	// The programs rewrite a frontend's packet to a backend of the same
	// family: a port mixing them would put an address of one family into
	// the other's header.
	var is6 bool
	for i, f := range fes {
		if f6 := f.Addr.Unmap().Is6(); i == 0 {
			is6 = f6
		} else if f6 != is6 {
			return fmt.Errorf("nat port %d: frontends %s and %s of different families", id, fes[0], f)
		}
	}
	vals := make([]natBeVal, len(bes))
	for i, b := range bes {
		a, err := addr16(b.Addr)
		if err != nil {
			return fmt.Errorf("nat backend %s: %w", b, err)
		}
		b6 := b.Addr.Unmap().Is6()
		if len(fes) > 0 && b6 != is6 {
			return fmt.Errorf("nat backend %s: not of its frontends' family (%s)", b, fes[0])
		}
		vals[i] = natBeVal{Addr: a, Port: b.Port}
		if b6 {
			vals[i].Flags = abi.NATBeFV6
		}
	}
	if err := d.filterAdd(keys); err != nil {
		return err
	}
	n := len(bes)
	setFrontends := func() error {
		v := natFeVal{SvcId: id, Count: uint32(n)}
		for i := range keys {
			if err := d.objs.DpdNatFe.Update(&keys[i], &v, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("nat frontend %s: %w", fes[i], err)
			}
		}
		return nil
	}
	if n < prevCount {
		if err := setFrontends(); err != nil {
			return err
		}
	}
	for i := range vals {
		k := natBeKey{SvcId: id, Ordinal: uint32(i)}
		if err := d.objs.DpdNatBe.Update(&k, &vals[i], ebpf.UpdateAny); err != nil {
			return fmt.Errorf("nat backend %d/%d %s: %w", id, i, bes[i], err)
		}
	}
	if n >= prevCount {
		if err := setFrontends(); err != nil {
			return err
		}
	}
	return d.deleteNATBackends(id, n, prevCount)
}

// DeleteNATPort removes service port id's backends (ordinals below count).
// Its frontends must be deleted first.
func (d *Datapath) DeleteNATPort(id uint32, count int) error {
	return d.deleteNATBackends(id, 0, count)
}

func (d *Datapath) deleteNATBackends(id uint32, from, to int) error {
	for i := from; i < to; i++ {
		k := natBeKey{SvcId: id, Ordinal: uint32(i)}
		err := d.objs.DpdNatBe.Delete(&k)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete nat backend %d/%d: %w", id, i, err)
		}
	}
	return nil
}

// DeleteNATFrontend removes a frontend; absent is not an error. New
// connections to it are no longer translated.
func (d *Datapath) DeleteNATFrontend(f NATFrontend) error {
	k, err := feKey(f)
	if err != nil {
		return fmt.Errorf("delete nat frontend %s: %w", f, err)
	}
	err = d.objs.DpdNatFe.Delete(&k)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete nat frontend %s: %w", f, err)
	}
	return d.filterRemove(k)
}

// NATFrontendEntry is a frontend as found in the map.
type NATFrontendEntry struct {
	Frontend NATFrontend
	ID       uint32
	Count    int
}

// NATFrontends lists the programmed frontends (a restarted dpd adopts
// their service port ids so live connections keep their backends).
func (d *Datapath) NATFrontends() ([]NATFrontendEntry, error) {
	var (
		k   natFeKey
		v   natFeVal
		out []NATFrontendEntry
	)
	it := d.objs.DpdNatFe.Iterate()
	for it.Next(&k, &v) {
		out = append(out, NATFrontendEntry{
			Frontend: NATFrontend{Addr: addrOf16(k.Addr, k.Family == abi.CTFamilyV6), Port: k.Port, Proto: k.Proto},
			ID:       v.SvcId, Count: int(v.Count),
		})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list nat frontends: %w", err)
	}
	return out, nil
}

// NATBackendsOf reads service port id's backends, ordinals 0 up to the
// first missing one.
func (d *Datapath) NATBackendsOf(id uint32) ([]NATBackend, error) {
	var out []NATBackend
	for i := uint32(0); ; i++ {
		var v natBeVal
		err := d.objs.DpdNatBe.Lookup(&natBeKey{SvcId: id, Ordinal: i}, &v)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read nat backend %d/%d: %w", id, i, err)
		}
		out = append(out, NATBackend{Addr: addrOf16(v.Addr, v.Flags&abi.NATBeFV6 != 0), Port: v.Port})
	}
}

// DeleteNATBackendsExcept deletes every backend entry whose service port
// id is not in keep: the leftovers of services that vanished while dpd was
// not running.
func (d *Datapath) DeleteNATBackendsExcept(keep map[uint32]bool) (int, error) {
	var (
		k    natBeKey
		v    natBeVal
		gone []natBeKey
	)
	it := d.objs.DpdNatBe.Iterate()
	for it.Next(&k, &v) {
		if !keep[k.SvcId] {
			gone = append(gone, k)
		}
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("list nat backends: %w", err)
	}
	for i := range gone {
		err := d.objs.DpdNatBe.Delete(&gone[i])
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return i, fmt.Errorf("delete nat backend %d/%d: %w", gone[i].SvcId, gone[i].Ordinal, err)
		}
	}
	return len(gone), nil
}

// NATFlowFilter selects NAT flow entries (conntrack entries with dir
// abi.DirNAT) to flush: those of a whole service port, or those pinned to
// one backend of a service port.
type NATFlowFilter struct {
	Services map[uint32]bool
	Backends map[NATFlowBackend]bool
}

// NATFlowBackend is a backend of one service port.
type NATFlowBackend struct {
	ID      uint32
	Backend NATBackend
}

// Empty reports whether the filter selects nothing.
func (f NATFlowFilter) Empty() bool { return len(f.Services) == 0 && len(f.Backends) == 0 }

func (f NATFlowFilter) match(k *ctKey, v *ctVal) bool {
	if k.Dir != abi.DirNAT {
		return false
	}
	if f.Services[v.NatSvc] {
		return true
	}
	return f.Backends[NATFlowBackend{ID: v.NatSvc, Backend: NATBackend{Addr: addrOf16(v.NatAddr, k.Family == abi.CTFamilyV6), Port: v.NatPort}}]
}

// FlushNATFlows deletes the NAT flow entries f selects, so the next packet
// of such a connection picks a current backend instead of staying pinned
// to one that is gone. One walk of conntrack serves any number of services.
func (d *Datapath) FlushNATFlows(f NATFlowFilter) (int, error) {
	if f.Empty() {
		return 0, nil
	}
	type cand struct {
		m *ebpf.Map
		k ctKey
	}
	var cands []cand
	if err := d.ctWalk(func(m *ebpf.Map, k *ctKey, v *ctVal) {
		if f.match(k, v) {
			cands = append(cands, cand{m, *k})
		}
	}); err != nil {
		return 0, err
	}
	n := 0
	for i := range cands {
		err := cands[i].m.Delete(&cands[i].k)
		if errors.Is(err, ebpf.ErrKeyNotExist) && cands[i].m == d.objs.DpdCt {
			// Moved into dpd_conntrack since the walk (NAT keys keep
			// their form).
			err = d.objs.DpdConntrack.Delete(&cands[i].k)
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("flush nat flow: %w", err)
		}
		n++
	}
	return n, nil
}

// NATFlow is a NAT flow entry: a workload's connection to a frontend and
// the backend it was given.
type NATFlow struct {
	Ifindex  int
	Src      netip.AddrPort
	Frontend NATFrontend
	ID       uint32
	Backend  NATBackend
}

// NATFlows lists the NAT flow entries (live or not), for Inspect and tests.
func (d *Datapath) NATFlows() ([]NATFlow, error) {
	var out []NATFlow
	err := d.ctWalk(func(_ *ebpf.Map, k *ctKey, v *ctVal) {
		if k.Dir != abi.DirNAT {
			return
		}
		out = append(out, NATFlow{
			Ifindex:  int(k.Ifindex),
			Src:      netip.AddrPortFrom(addrOf16(k.Saddr, k.Family == abi.CTFamilyV6), k.Sport),
			Frontend: NATFrontend{Addr: addrOf16(k.Daddr, k.Family == abi.CTFamilyV6), Port: k.Dport, Proto: k.Proto},
			ID:       v.NatSvc,
			Backend:  NATBackend{Addr: addrOf16(v.NatAddr, k.Family == abi.CTFamilyV6), Port: v.NatPort},
		})
	})
	return out, err
}
