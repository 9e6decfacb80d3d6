package linux

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
)

// The fake kernel's links and entry-program facilities (linkFacility,
// entryFacility) and the endpoint netlink side (endpointNet).

// --- linkFacility

func (f *fakeKernel) Ifindex(name string) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := f.links[name]
	return i, ok
}

func (f *fakeKernel) Matches(name string) bool { return strings.HasPrefix(name, f.prefix) }

func (f *fakeKernel) LinkName(ifindex int) (string, error) {
	if err := f.read("LinkName"); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for n, i := range f.links {
		if i == ifindex {
			return n, nil
		}
	}
	return "", netlink.LinkNotFoundError{}
}

func (f *fakeKernel) Links() ([]linkRef, error) {
	if err := f.read("Links"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []linkRef
	for n, i := range f.links {
		out = append(out, linkRef{Name: n, Ifindex: i})
	}
	slices.SortFunc(out, func(a, b linkRef) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// --- entryFacility

func (f *fakeKernel) Attach(ifindex int, ifname string) (tcbpf.AttachMode, error) {
	f.mu.Lock()
	hook := f.attachHook
	f.mu.Unlock()
	if hook != nil {
		hook(ifname)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.links[ifname] != ifindex {
		return "", fmt.Errorf("attach %s: %w", ifname, netlink.LinkNotFoundError{})
	}
	if err := f.opLocked("Attach", "%s", ifname); err != nil {
		return "", err
	}
	f.attached[ifindex] = tcbpf.AttachTCX
	delete(f.foreign, ifindex)
	f.linkPins[ifname] = true
	return tcbpf.AttachTCX, nil
}

func (f *fakeKernel) AttachedCurrent(ifindex int, ifname string) (tcbpf.AttachMode, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.attached[ifindex]
	return m, ok && f.linkPins[ifname] && f.fail["AttachedCurrent"] == nil
}

func (f *fakeKernel) Detach(ifindex int, ifname string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.opLocked("Detach", "%s", ifname); err != nil {
		return err
	}
	delete(f.attached, ifindex)
	delete(f.linkPins, ifname)
	return nil
}

func (f *fakeKernel) RemoveLinkPins(ifname string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.opLocked("RemoveLinkPins", "%s", ifname); err != nil {
		return err
	}
	delete(f.linkPins, ifname)
	return nil
}

func (f *fakeKernel) PinnedLinks() ([]string, error) {
	if err := f.read("PinnedLinks"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.linkPins)), nil
}

func (f *fakeKernel) EntryOwners(ifindex int) (ours, foreign bool, err error) {
	if err := f.read("EntryOwners"); err != nil {
		return false, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ours = f.attached[ifindex]
	return ours, f.foreign[ifindex], nil
}

func (f *fakeKernel) OwnsAttachment(ifindex int) (bool, error) {
	ours, _, err := f.EntryOwners(ifindex)
	return ours, err
}

func (f *fakeKernel) SetIfState(ifindex int, slot, flags uint32) error {
	if err := f.op("SetIfState", "%s slot=%d flags=%#x", f.nameOf(ifindex), slot, flags); err != nil {
		return err
	}
	f.ifstate[ifindex] = tcbpf.IfStateEntry{Slot: slot, Flags: flags}
	return nil
}

func (f *fakeKernel) DeleteIfState(ifindex int) error {
	if err := f.op("DeleteIfState", "%s", f.nameOf(ifindex)); err != nil {
		return err
	}
	delete(f.ifstate, ifindex)
	return nil
}

func (f *fakeKernel) IfStates() (map[int]tcbpf.IfStateEntry, error) {
	if err := f.read("IfStates"); err != nil {
		return nil, err
	}
	return maps.Clone(f.ifstate), nil
}

func (f *fakeKernel) InstallPolicy(slot uint32, dir int, p loadedProgram) error {
	fp := p.(*fakeProg)
	if err := f.op("InstallPolicy", "slot=%d dir=%d %s", slot, dir, fp.name); err != nil {
		return err
	}
	k := [2]uint32{slot, uint32(dir)}
	prev, had := f.jump[k]
	f.jump[k] = fp.id
	if had {
		f.unref(prev)
	}
	return nil
}

// unref frees a program a jump slot no longer holds, if nothing else does.
func (f *fakeKernel) unref(id ebpf.ProgramID) {
	if p := f.progs[id]; p != nil {
		f.gcProg(p)
	}
}

func (f *fakeKernel) ClearPolicy(slot uint32, dir int) error {
	if err := f.op("ClearPolicy", "slot=%d dir=%d", slot, dir); err != nil {
		return err
	}
	k := [2]uint32{slot, uint32(dir)}
	prev, had := f.jump[k]
	delete(f.jump, k)
	if had {
		f.unref(prev)
	}
	return nil
}

func (f *fakeKernel) Policies() ([]tcbpf.PolicyEntry, error) {
	if err := f.read("Policies"); err != nil {
		return nil, err
	}
	var out []tcbpf.PolicyEntry
	for k, id := range f.jump {
		out = append(out, tcbpf.PolicyEntry{Slot: k[0], Dir: int(k[1]), Prog: id})
	}
	slices.SortFunc(out, func(a, b tcbpf.PolicyEntry) int { return int(2*a.Slot) + a.Dir - int(2*b.Slot) - b.Dir })
	return out, nil
}

// --- endpointNet

func (f *fakeKernel) ConfigureEndpoint(iface string, _ int, _ net.HardwareAddr, nets []netip.Prefix) error {
	if err := f.read("ConfigureEndpoint"); err != nil {
		return err
	}
	if _, ok := f.Ifindex(iface); !ok {
		return nl.ErrNoLink
	}
	if slices.Equal(f.nets[iface], nets) {
		return nil // read back: nothing to write
	}
	return f.configure("ConfigureEndpoint", iface, nets)
}

func (f *fakeKernel) ConfigureNewEndpoint(iface string, _ int, _ net.HardwareAddr, nets []netip.Prefix) error {
	if _, ok := f.Ifindex(iface); !ok {
		return nl.ErrNoLink
	}
	return f.configure("ConfigureNewEndpoint", iface, nets)
}

func (f *fakeKernel) configure(op, iface string, nets []netip.Prefix) error {
	if err := f.op(op, "%s %v", iface, nets); err != nil {
		return err
	}
	f.nets[iface] = slices.Clone(nets)
	return nil
}

func (f *fakeKernel) UnconfigureEndpoint(iface string, nets []netip.Prefix) error {
	if err := f.op("UnconfigureEndpoint", "%s %v", iface, nets); err != nil {
		return err
	}
	f.nets[iface] = slices.DeleteFunc(f.nets[iface], func(p netip.Prefix) bool { return slices.Contains(nets, p) })
	if len(f.nets[iface]) == 0 {
		delete(f.nets, iface)
	}
	return nil
}

func (f *fakeKernel) ListDpdRoutes() ([]netlink.Route, error) {
	if err := f.read("ListDpdRoutes"); err != nil {
		return nil, err
	}
	var out []netlink.Route
	for iface, nets := range f.nets {
		for _, p := range nets {
			idx, _ := f.Ifindex(iface)
			out = append(out, netlink.Route{LinkIndex: idx,
				Dst: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}})
		}
	}
	return out, nil
}
