package tcbpf

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// hookState is what is attached to one interface, as the kernel reports it.
type hookState struct {
	tcxLinks [2]link.ID        // ingress, egress (0 = none of ours)
	tcxProgs [2]ebpf.ProgramID // program of each link
	tcProgs  [2]ebpf.ProgramID // legacy filter programs (0 = none)
	filters  int               // all filters on clsact, ours or not
	clsact   bool
	pins     []string
}

func inspectHooks(t *testing.T, d *Datapath, ifindex int) hookState {
	t.Helper()
	var s hookState
	for i, h := range d.hooks() {
		links, progs, err := ourTCXLinksKnown(ifindex, h, nil)
		mustNil(t, err)
		if len(links) > 1 {
			t.Fatalf("%d dpd tcx links on %s", len(links), h.suffix)
		}
		if len(links) == 1 {
			s.tcxLinks[i], s.tcxProgs[i] = links[0], progs[0]
		}
	}
	l, err := netlink.LinkByIndex(ifindex)
	mustNil(t, err)
	s.clsact, err = hasClsact(d.nl, l)
	mustNil(t, err)
	if s.clsact {
		for i, h := range d.hooks() {
			fs, err := netlink.FilterList(l, h.parent)
			mustNil(t, err)
			s.filters += len(fs)
			for _, f := range fs {
				if bf, ok := isOurFilter(f); ok {
					s.tcProgs[i] = ebpf.ProgramID(bf.Id)
				}
			}
		}
	}
	ents, _ := os.ReadDir(filepath.Join(d.PinDir(), "links"))
	for _, e := range ents {
		s.pins = append(s.pins, e.Name())
	}
	return s
}

func progID(t *testing.T, p *ebpf.Program) ebpf.ProgramID {
	t.Helper()
	id, err := identify(p)
	mustNil(t, err)
	return id.id
}

func TestAttachDetach(t *testing.T) {
	testutil.RequirePrivileged(t)
	tests := []struct {
		name   string
		legacy bool
		want   AttachMode
	}{
		{"tcx", false, AttachTCX},
		{"legacy tc", true, AttachTC},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pinDir := testPinDir(t)
			sizes := MapSizes{Conntrack: 1024, IPSets: 1024, IfState: 64, RuleCounters: 256, Chain: 64}
			opts := Options{PinDir: pinDir, ForceLegacyTC: tc.legacy, Sizes: sizes}
			d := openTest(t, opts)
			w := testutil.NewWorkload(t, "dpa", "10.66.0.1")
			l, err := netlink.LinkByName(w.HostIface)
			mustNil(t, err)
			ifindex := l.Attrs().Index

			attach := func(d *Datapath) hookState {
				t.Helper()
				mode, err := d.Attach(ifindex, w.HostIface)
				if err != nil || mode != tc.want {
					t.Fatalf("attach: %q %v, want %q", mode, err, tc.want)
				}
				return inspectHooks(t, d, ifindex)
			}
			first := attach(d)
			wantProgs := [2]ebpf.ProgramID{progID(t, d.Programs().FromWEP), progID(t, d.Programs().ToWEP)}
			if tc.legacy {
				if first.tcProgs != wantProgs || first.tcxLinks != [2]link.ID{} || len(first.pins) != 0 {
					t.Fatalf("legacy attach: %+v, want filters %v and no links", first, wantProgs)
				}
			} else {
				if first.tcxProgs != wantProgs || first.tcProgs != [2]ebpf.ProgramID{} || len(first.pins) != 2 {
					t.Fatalf("tcx attach: %+v, want links to %v, 2 pins", first, wantProgs)
				}
			}
			if again := attach(d); !equalHooks(again, first) {
				t.Fatalf("second attach changed things: %+v -> %+v", first, again)
			}

			// A restarted dpd loads equivalent programs: adopted, untouched.
			mustNil(t, d.Close())
			d = openTest(t, opts)
			if again := attach(d); !equalHooks(again, first) {
				t.Fatalf("attach after restart changed things: %+v -> %+v", first, again)
			}

			// Programs bound to other maps are not current: replaced in place.
			mustNil(t, d.Close())
			opts.Sizes.Conntrack = 2048
			d = openTest(t, opts)
			newProgs := [2]ebpf.ProgramID{progID(t, d.Programs().FromWEP), progID(t, d.Programs().ToWEP)}
			upd := attach(d)
			if tc.legacy && upd.tcProgs != newProgs {
				t.Fatalf("legacy filters not updated: %+v, want %v", upd, newProgs)
			}
			if !tc.legacy && (upd.tcxProgs != newProgs || upd.tcxLinks != first.tcxLinks) {
				t.Fatalf("tcx links not updated in place: %+v, want links %v with %v", upd, first.tcxLinks, newProgs)
			}

			// Switching mode leaves only the new mode's attachment.
			other := opts
			other.ForceLegacyTC = !tc.legacy
			d2 := openTest(t, other)
			mode, err := d2.Attach(ifindex, w.HostIface)
			mustNil(t, err)
			sw := inspectHooks(t, d2, ifindex)
			if mode == AttachTC && (sw.tcxLinks != [2]link.ID{} || len(sw.pins) != 0 || sw.tcProgs[0] == 0) {
				t.Fatalf("switch to tc left: %+v", sw)
			}
			if mode == AttachTCX && (sw.tcProgs != [2]ebpf.ProgramID{} || sw.clsact || sw.tcxProgs[0] == 0) {
				t.Fatalf("switch to tcx left: %+v", sw)
			}

			mustNil(t, d2.Detach(ifindex, w.HostIface))
			mustNil(t, d2.Detach(ifindex, w.HostIface))
			if gone := inspectHooks(t, d2, ifindex); !equalHooks(gone, hookState{}) {
				t.Fatalf("detach left: %+v", gone)
			}
			// Detach of an interface that no longer exists only drops pins.
			mustNil(t, d2.Detach(1<<30, "dpdnotthere"))
		})
	}
}

func equalHooks(a, b hookState) bool {
	return a.tcxLinks == b.tcxLinks && a.tcxProgs == b.tcxProgs && a.tcProgs == b.tcProgs &&
		a.filters == b.filters && a.clsact == b.clsact && len(a.pins) == len(b.pins)
}

func TestAttachRejectsBadNames(t *testing.T) {
	d := openTest(t, Options{})
	for _, name := range []string{"", "a/b"} {
		if _, err := d.Attach(1, name); err == nil {
			t.Fatalf("attach %q accepted", name)
		}
	}
}
