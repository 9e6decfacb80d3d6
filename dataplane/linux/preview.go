package linux

// Staged-policy preview (FlowOptions.StagedPreview): for an endpoint
// direction the engine resolved a preview for (model.Endpoint.Preview),
// a policy program compiled from it by the same compiler sits in the
// endpoint's slot of dpd_preview. The epilogue runs it after the real
// decision of every packet the policy decides and reports its verdict and
// rule in the flow event; it never decides the packet. Preview programs
// are neither shared nor pinned: a restarted dpd loads them again when the
// engine applies its endpoints, and until then events carry no preview.

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// previewSlots writes dpd_preview (tcbpf.Datapath).
type previewSlots interface {
	InstallPreview(slot uint32, dir int, prog *ebpf.Program) error
	ClearPreview(slot uint32, dir int) error
}

// previewProg is one installed preview program.
type previewProg struct {
	hash [32]byte
	slot uint32
	prog loadedProgram
}

// previewProgrammer keeps the installed preview programs; called under
// Kernel.mu.
type previewProgrammer struct {
	slots previewSlots
	load  func(*model.DirectionPolicy, model.Direction) (loadedProgram, error)
	log   *slog.Logger
	progs map[string]*[2]*previewProg // by interface, per direction
	// empty: (slot, direction) entries this process cleared and has not
	// written since, so an endpoint without previews costs no clear on
	// each apply (a policy change of a thousand endpoints).
	empty map[[2]uint32]bool
}

func newPreviewProgrammer(slots previewSlots, load func(*model.DirectionPolicy, model.Direction) (loadedProgram, error),
	log *slog.Logger) *previewProgrammer {
	return &previewProgrammer{slots: slots, load: load, log: log, progs: map[string]*[2]*previewProg{}, empty: map[[2]uint32]bool{}}
}

// apply makes ep's previews the ones in slot: loads what changed, clears
// what ep no longer has. A direction without a known preview is cleared
// too, so a slot another endpoint used never lends its preview.
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
			continue
		}
		prog, err := p.load(want, dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("load %s preview of %s: %w", dir, ep.Iface, err))
			continue
		}
		delete(p.empty, [2]uint32{slot, uint32(dir)})
		if err := p.slots.InstallPreview(slot, int(dir), prog.Head()); err != nil {
			_ = prog.Close()
			errs = append(errs, err)
			continue
		}
		if have != nil {
			if have.slot != slot {
				errs = append(errs, p.clear(have.slot, int(dir)))
			}
			_ = have.prog.Close()
		}
		cur[dir] = &previewProg{hash: want.Hash(), slot: slot, prog: prog}
	}
	if cur[0] == nil && cur[1] == nil {
		delete(p.progs, ep.Iface)
	} else {
		p.progs[ep.Iface] = cur
	}
	return errors.Join(errs...)
}

// drop clears pp's slot and closes it.
func (p *previewProgrammer) drop(pp *previewProg, dir int) error {
	err := p.clear(pp.slot, dir)
	_ = pp.prog.Close()
	return err
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

// program is iface's preview program for dir, nil if none.
func (p *previewProgrammer) program(iface string, dir model.Direction) loadedProgram {
	if cur := p.progs[iface]; cur != nil && cur[dir] != nil {
		return cur[dir].prog
	}
	return nil
}

// closeAll closes every preview program (the datapath is closing).
func (p *previewProgrammer) closeAll() {
	for _, cur := range p.progs {
		for _, pp := range cur {
			if pp != nil {
				_ = pp.prog.Close()
			}
		}
	}
	p.progs = map[string]*[2]*previewProg{}
	p.empty = map[[2]uint32]bool{}
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
