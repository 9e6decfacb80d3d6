package linux

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
)

// A restarted dpd finds the previous one's work in the kernel: entry
// programs attached (TCX links pinned under links/), dpd_ifstate entries,
// policy programs in dpd_jump (pinned under progs/), routes. adoptLocked
// rebuilds the in-memory view of it without writing anything, so that
// every packet keeps being policed as before until the controller's
// snapshot is in (the engine applies nothing before InSync). The first
// apply then claims what the controller still wants (unchanged endpoints
// cost no write at all) and garbage collection removes the rest.

// adoption summarises what adoptLocked found, for the log.
type adoption struct {
	endpoints, closed, programs, stale int
}

// adoptLocked rebuilds k.eps, the slots and k.pinned from the pins and
// maps. Anything it cannot make sense of is left for garbage collection.
func (k *Kernel) adoptLocked() (adoption, error) {
	var a adoption
	byHead := k.openPinnedProgsLocked()
	a.programs = len(k.pinned)
	states, err := k.bpf.IfStates()
	if err != nil {
		return a, err
	}
	pols, err := k.bpf.Policies()
	if err != nil {
		return a, err
	}
	installed := map[uint32][2]ebpf.ProgramID{}
	for _, p := range pols {
		v := installed[p.Slot]
		v[p.Dir] = p.Prog
		installed[p.Slot] = v
	}
	for ifindex, e := range states {
		l, err := netlink.LinkByIndex(ifindex)
		if isNoDevice(err) {
			a.stale++ // the interface is gone: garbage
			continue
		}
		if err != nil {
			// Not knowing it is not knowing it is gone: collecting its
			// entry would unpolice a live interface.
			return a, fmt.Errorf("interface %d: %w", ifindex, err)
		}
		name := l.Attrs().Name
		if _, dup := k.eps[name]; dup {
			a.stale++
			continue
		}
		st := &endpointState{ifindex: ifindex, adopted: true, ifsSlot: e.Slot}
		st.ready = e.Flags&abi.IfReady != 0
		st.closed = !st.ready
		if st.ready && k.slots.reserve(e.Slot) {
			st.slot, st.hasSlot = e.Slot, true
			for _, dir := range []model.Direction{model.Ingress, model.Egress} {
				if sp := byHead[installed[e.Slot][dir]]; sp != nil && sp.key.dir == dir {
					st.inst[dir] = sp
					sp.refs++
				}
			}
		}
		if mode, ok := k.bpf.AttachedCurrent(ifindex, name); ok {
			st.mode = mode
		}
		k.eps[name] = st
		if st.ready {
			a.endpoints++
		} else {
			a.closed++
		}
	}
	return a, nil
}

// openPinnedProgsLocked opens every complete pinned policy program into
// k.pinned, reserving its chain indices, and indexes them by head id.
func (k *Kernel) openPinnedProgsLocked() map[ebpf.ProgramID]*sharedProg {
	byHead := map[ebpf.ProgramID]*sharedProg{}
	ents, err := os.ReadDir(k.progsDirLocked())
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			k.log.Warn("list pinned policy programs", "err", err)
		}
		return byHead
	}
	chain := k.bpf.Maps().Chain
	for _, e := range ents {
		key, ok := parsePinName(e.Name())
		if !ok {
			continue // garbage collection removes it
		}
		p, err := polprog.OpenPinned(filepath.Join(k.progsDirLocked(), e.Name()), chain)
		if err != nil {
			k.log.Info("ignoring pinned policy program", "dir", e.Name(), "reason", err)
			continue
		}
		sp := &sharedProg{key: key, pinned: p}
		k.pinned[key] = sp
		byHead[p.HeadID()] = sp
	}
	return byHead
}

// parsePinName is the inverse of progKey.pinName.
func parsePinName(name string) (progKey, bool) {
	d, h, ok := strings.Cut(name, "-")
	if !ok {
		return progKey{}, false
	}
	var key progKey
	switch d {
	case model.Ingress.String():
		key.dir = model.Ingress
	case model.Egress.String():
		key.dir = model.Egress
	default:
		return progKey{}, false
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != len(key.hash) {
		return progKey{}, false
	}
	copy(key.hash[:], b)
	return key, key.pinName() == name
}

// abandonLocked forgets every program and endpoint state without touching
// the kernel: before Close, and before a reopen that adopts again.
func (k *Kernel) abandonLocked() {
	for _, sp := range k.progs {
		sp.prog.Abandon()
	}
	for _, sp := range k.pinned {
		sp.pinned.Abandon()
	}
	for _, sp := range k.stale {
		sp.pinned.Abandon()
	}
	k.progs = map[progKey]*sharedProg{}
	k.pinned = map[progKey]*sharedProg{}
	k.stale = nil
	k.eps = map[string]*endpointState{}
}

// claimedLocked reports whether the engine has applied any endpoint.
func (k *Kernel) claimedLocked() bool {
	for _, st := range k.eps {
		if st.ep != nil {
			return true
		}
	}
	return false
}
