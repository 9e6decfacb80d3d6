package linux

import (
	"fmt"
	"maps"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
)

// The fake kernel's hostFacility, and a Kernel composed with it.

func (f *fakeKernel) AttachHost(ifindex int, ifname string) (tcbpf.AttachMode, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.links[ifname] != ifindex {
		return "", fmt.Errorf("attach host %s: %w", ifname, netlink.LinkNotFoundError{})
	}
	if err := f.opLocked("AttachHost", "%s", ifname); err != nil {
		return "", err
	}
	if f.hostProgs == nil {
		f.hostProgs = map[int]bool{}
	}
	f.attached[ifindex] = tcbpf.AttachTCX
	f.hostProgs[ifindex] = true
	f.linkPins[ifname] = true
	return tcbpf.AttachTCX, nil
}

func (f *fakeKernel) AttachedCurrentHost(ifindex int, ifname string) (tcbpf.AttachMode, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.attached[ifindex]
	return m, ok && f.hostProgs[ifindex] && f.linkPins[ifname]
}

func (f *fakeKernel) SetFailsafes(fs []tcbpf.Failsafe) error {
	return f.op("SetFailsafes", "%d", len(fs))
}

func (f *fakeKernel) SetHepStages(ifindex int, s tcbpf.HepStages) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.opLocked("SetHepStages", "%s untracked=%d prednat=%d", f.nameOfLocked(ifindex), s.Untracked, s.PreDNAT); err != nil {
		return err
	}
	if f.hepStages == nil {
		f.hepStages = map[int]tcbpf.HepStages{}
	}
	if s == (tcbpf.HepStages{}) {
		delete(f.hepStages, ifindex)
	} else {
		f.hepStages[ifindex] = s
	}
	return nil
}

func (f *fakeKernel) AllHepStages() (map[int]tcbpf.HepStages, error) {
	if err := f.read("AllHepStages"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.hepStages), nil
}

func (f *fakeKernel) SetToHostAction(action, slot uint32) error {
	if err := f.op("SetToHostAction", "%d slot=%d", action, slot); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.toHost = [2]uint32{action, slot}
	return nil
}

func (f *fakeKernel) ToHostAction() (action, slot uint32, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.toHost[0], f.toHost[1], nil
}

// hostKernel composes a Kernel over f with the host facility, as New does
// over the real kernel; calling it again is a restart over the same state.
func (f *fakeKernel) hostKernel() *Kernel {
	f.t.Helper()
	k := newKernel(Options{Log: quietLog(), Hostname: "node1", GCInterval: DefaultGCInterval},
		netFacilities{links: f, endpoint: f, routes: fakeRouteNet{f}, tunnel: f, masq: f})
	if err := k.attachBPFLocked(bpfFacilities{entry: f, programs: f, sweep: f, ipsets: f, routes: f, nat: f, host: f}, 64); err != nil {
		f.t.Fatalf("attach fake bpf: %v", err)
	}
	return k
}

// hostEndpoint is host endpoint id's policy on iface.
func (f *fakeKernel) hostEndpoint(id, iface, in, out string) *model.Endpoint {
	return &model.Endpoint{ID: model.HostIfaceID(id, iface), Iface: iface, Ingress: f.policy(in), Egress: f.policy(out)}
}
