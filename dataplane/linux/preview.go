package linux

// Staged-policy preview (FlowOptions.StagedPreview): for an endpoint
// direction the engine resolved a preview for (model.Endpoint.Preview),
// a policy program compiled from it by the same compiler sits in the
// endpoint's slot of dpd_preview. The epilogue runs it after the real
// decision of every packet the policy decides and reports its verdict and
// rule in the flow event; it never decides the packet. Preview programs
// are not shared (one per endpoint direction) but are pinned, under
// <pin>/previews, like the policy programs: a restarted dpd adopts the
// ones still installed in the slots of the endpoints it adopted, so
// events keep their preview across the restart, and its first apply
// verifies and keeps them (nothing loaded or written) or replaces them
// (previewadopt.go).

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
)

// previewSlots writes dpd_preview (tcbpf.Datapath).
type previewSlots interface {
	InstallPreview(slot uint32, dir int, prog *ebpf.Program) error
	ClearPreview(slot uint32, dir int) error
	Previews() ([]tcbpf.PolicyEntry, error)
	ClearPreviews() error
}

// previewFacility compiles, loads, pins and adopts preview programs
// (polprogFacility).
type previewFacility interface {
	LoadPreview(pol *model.DirectionPolicy, dir model.Direction) (loadedProgram, error)
	AdoptPreview(pol *model.DirectionPolicy, dir model.Direction, p pinnedProgram) (loadedProgram, error)
	// PreviewsDir holds one pin directory per preview program.
	PreviewsDir() string
	PinnedPreviewNames() ([]string, error)
	OpenPinnedPreview(name string) (pinnedProgram, error)
	RemovePinDir(path string) error
}

// previewProg is one installed preview program: exactly one of prog (this
// process loaded or verified it) and pinned (an earlier dpd left it in
// the slot, not yet claimed by an apply) is set.
type previewProg struct {
	hash   [32]byte
	slot   uint32
	prog   loadedProgram
	pinned pinnedProgram
}

// previewProgrammer keeps the installed preview programs; called under
// Kernel.mu.
type previewProgrammer struct {
	slots previewSlots
	fac   previewFacility
	log   *slog.Logger
	ops   *Ops
	progs map[string]*[2]*previewProg // by interface, per direction
	// empty: (slot, direction) entries this process cleared and has not
	// written since, so an endpoint without previews costs no clear on
	// each apply (a policy change of a thousand endpoints).
	empty map[[2]uint32]bool
}

func newPreviewProgrammer(slots previewSlots, fac previewFacility, log *slog.Logger, ops *Ops) *previewProgrammer {
	return &previewProgrammer{slots: slots, fac: fac, log: log, ops: ops, progs: map[string]*[2]*previewProg{},
		empty: map[[2]uint32]bool{}}
}

// apply makes ep's previews the ones in slot: keeps (adopting it if an
// earlier dpd left it) what is installed already, loads what changed,
// clears what ep no longer has. A direction without a known preview is
// cleared too, so a slot another endpoint used never lends its preview.
func (p *previewProgrammer) apply(ep *model.Endpoint, slot uint32) error {
	cur := p.progs[ep.Iface]
	if cur == nil {
		cur = &[2]*previewProg{}
	}
	var errs []error
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		want, have := ep.Preview(dir), cur[dir]
		switch {
		case want == nil && have == nil:
			errs = append(errs, p.clear(slot, int(dir)))
			continue
		case want == nil:
			errs = append(errs, p.drop(have, int(dir)))
			cur[dir] = nil
			continue
		case have != nil && have.hash == want.Hash() && have.slot == slot:
			if have.pinned == nil {
				continue
			}
			prog, err := p.fac.AdoptPreview(want, dir, have.pinned)
			if err == nil {
				have.prog, have.pinned = prog, nil
				p.ops.ProgramAdopts++
				continue
			}
			// Another compiler or other maps: it keeps labelling events
			// until the new one replaces it, but gives up its pin path.
			p.log.Info("pinned staged preview is out of date; loading a new one", "iface", ep.Iface, "dir", dir, "reason", err)
			if err := have.pinned.Unpin(); err != nil {
				p.log.Warn("unpin stale staged preview", "iface", ep.Iface, "err", err)
			}
		}
		pp, err := p.load(want, dir, slot)
		if err != nil {
			errs = append(errs, fmt.Errorf("load %s preview of %s: %w", dir, ep.Iface, err))
			continue
		}
		delete(p.empty, [2]uint32{slot, uint32(dir)})
		if err := p.slots.InstallPreview(slot, int(dir), pp.prog.Head()); err != nil {
			p.close(pp)
			errs = append(errs, err)
			continue
		}
		if have != nil {
			if have.slot != slot {
				errs = append(errs, p.clear(have.slot, int(dir)))
			}
			p.close(have)
		}
		cur[dir] = pp
	}
	if cur[0] == nil && cur[1] == nil {
		delete(p.progs, ep.Iface)
	} else {
		p.progs[ep.Iface] = cur
	}
	return errors.Join(errs...)
}

// load compiles, loads and pins a preview for slot.
func (p *previewProgrammer) load(pol *model.DirectionPolicy, dir model.Direction, slot uint32) (*previewProg, error) {
	prog, err := p.fac.LoadPreview(pol, dir)
	if err != nil {
		return nil, err
	}
	p.ops.ProgramLoads++
	pp := &previewProg{hash: pol.Hash(), slot: slot, prog: prog}
	if err := prog.Pin(filepath.Join(p.fac.PreviewsDir(), previewPinName(slot, dir, pp.hash))); err != nil {
		// It still previews; only a restart loses it until the next apply.
		p.log.Warn("pin staged preview", "slot", slot, "dir", dir, "err", err)
	}
	return pp, nil
}

// close closes pp and removes its pins; no slot may hold it any more.
func (p *previewProgrammer) close(pp *previewProg) {
	if pp.pinned != nil {
		if err := pp.pinned.Release(true); err != nil {
			p.log.Warn("release staged preview", "slot", pp.slot, "err", err)
		}
		return
	}
	if err := pp.prog.Close(); err != nil {
		p.log.Warn("close staged preview", "slot", pp.slot, "err", err)
	}
	if err := pp.prog.Unpin(); err != nil {
		p.log.Warn("unpin staged preview", "slot", pp.slot, "err", err)
	}
}

// drop clears pp's slot, then closes it: a preview head left in the slot
// without its continuation would fail its tail call mid-policy.
func (p *previewProgrammer) drop(pp *previewProg, dir int) error {
	if err := p.clear(pp.slot, dir); err != nil {
		// Still installed: keep it whole. The slot's next endpoint
		// clears or replaces it.
		return err
	}
	p.close(pp)
	return nil
}

// clear empties the preview entry of (slot, dir) unless this process
// knows it is empty.
func (p *previewProgrammer) clear(slot uint32, dir int) error {
	key := [2]uint32{slot, uint32(dir)}
	if p.empty[key] {
		return nil
	}
	if err := p.slots.ClearPreview(slot, dir); err != nil {
		return err
	}
	p.empty[key] = true
	return nil
}

// release clears and closes iface's previews (its slot is being freed).
func (p *previewProgrammer) release(iface string) {
	cur := p.progs[iface]
	if cur == nil {
		return
	}
	delete(p.progs, iface)
	for dir, pp := range cur {
		if pp == nil {
			continue
		}
		if err := p.drop(pp, dir); err != nil {
			// The slot keeps a program that only labels events; the
			// next endpoint in the slot clears or replaces it.
			p.log.Warn("clear staged preview", "iface", iface, "err", err)
		}
	}
}

// program is iface's preview program for dir, nil if none (or adopted
// and not yet claimed: its rules are known once the apply verifies it).
func (p *previewProgrammer) program(iface string, dir model.Direction) loadedProgram {
	if cur := p.progs[iface]; cur != nil && cur[dir] != nil && cur[dir].prog != nil {
		return cur[dir].prog
	}
	return nil
}

// counterIDs are the rule counter ids of the previews this process
// loaded or verified (the compiler creates a counter per rule).
func (p *previewProgrammer) counterIDs() []uint64 {
	var out []uint64
	for _, cur := range p.progs {
		for _, pp := range cur {
			if pp == nil || pp.prog == nil {
				continue
			}
			for _, ri := range pp.prog.Rules() {
				out = append(out, ri.CounterID)
			}
		}
	}
	return out
}

// abandon forgets every preview program without touching the kernel or
// the pins (dpd stops, or the datapath reopens): the slots keep
// previewing and the next start adopts them.
func (p *previewProgrammer) abandon() {
	for _, cur := range p.progs {
		for _, pp := range cur {
			switch {
			case pp == nil:
			case pp.pinned != nil:
				pp.pinned.Abandon()
			default:
				pp.prog.Abandon()
			}
		}
	}
	p.progs = map[string]*[2]*previewProg{}
	p.empty = map[[2]uint32]bool{}
}

// openPreviewsLocked starts the preview programmer over an opened
// datapath, adopting the previews an earlier dpd installed, or, with
// previews off, removes them. Either failing costs previews only.
func (k *Kernel) openPreviewsLocked(d *tcbpf.Datapath) {
	fac := polprogFacility{d}
	if !k.opts.Flows.StagedPreview || k.opts.Flows.Off {
		if err := clearPreviews(d, fac.PreviewsDir()); err != nil {
			k.log.Warn("clear staged previews", "err", err)
		}
		return
	}
	k.preview = newPreviewProgrammer(d, fac, k.log, &k.ops)
	k.eps.releasePreview = k.preview.release
	k.pols.keepCounters = k.preview.counterIDs
	a, err := k.preview.adopt(k.eps.eps)
	if err != nil {
		k.log.Warn("adopt staged previews", "err", err)
	}
	if a != (previewAdoption{}) {
		k.log.Info("staged previews an earlier dpd installed", "adopted", a.adopted, "released", a.released, "cleared", a.cleared)
	}
}

// applyPreviewLocked installs ep's previews once its policies are; a
// failure only costs the preview, and is logged.
func (k *Kernel) applyPreviewLocked(ep *model.Endpoint) {
	if k.preview == nil {
		return
	}
	st := k.eps.eps[ep.Iface]
	if st == nil || !st.hasSlot {
		return
	}
	if err := k.preview.apply(ep, st.slot); err != nil {
		k.log.Warn("staged preview not installed", "iface", ep.Iface, "err", err)
	}
}
