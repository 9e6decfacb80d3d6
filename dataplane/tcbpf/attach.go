package tcbpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// AttachMode says how the entry programs are attached to an interface.
type AttachMode string

const (
	AttachTCX AttachMode = "tcx" // bpf_link on the TCX hooks (kernel >= 6.6)
	AttachTC  AttachMode = "tc"  // clsact qdisc + direct-action cls_bpf filters
)

// hook is one of the two attach points of a workload interface.
type hook struct {
	dir    int
	suffix string          // link pin name suffix
	tcx    ebpf.AttachType // TCX attach type
	parent uint32          // legacy clsact parent
}

func (d *Datapath) hooks() []hook {
	return []hook{
		{dir: abi.DirFromWEP, suffix: "ingress", tcx: ebpf.AttachTCXIngress, parent: tcParentIngress},
		{dir: abi.DirToWEP, suffix: "egress", tcx: ebpf.AttachTCXEgress, parent: tcParentEgress},
	}
}

// progIdentity is what makes an attached program "the current one": the
// same instructions (tag) using the same map instances.
type progIdentity struct {
	id     ebpf.ProgramID
	name   string
	tag    string
	mapIDs []ebpf.MapID
}

func identify(p *ebpf.Program) (progIdentity, error) {
	info, err := p.Info()
	if err != nil {
		return progIdentity{}, fmt.Errorf("program info: %w", err)
	}
	id, _ := info.ID()
	maps, _ := info.MapIDs()
	slices.Sort(maps)
	return progIdentity{id: id, name: info.Name, tag: info.Tag, mapIDs: maps}, nil
}

// attachedIdentity opens the program by id to describe it.
func attachedIdentity(id ebpf.ProgramID) (progIdentity, error) {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return progIdentity{}, fmt.Errorf("open program %d: %w", id, err)
	}
	defer func() { _ = p.Close() }()
	return identify(p)
}

// isCurrent reports whether the program with id is equivalent to want.
func (d *Datapath) isCurrent(id ebpf.ProgramID, want *ebpf.Program) bool {
	w := d.want[want]
	if id == w.id {
		return true
	}
	got, err := attachedIdentity(id)
	if err != nil {
		return false
	}
	return got.tag == w.tag && slices.Equal(got.mapIDs, w.mapIDs)
}

// isEntryName recognises dpd's entry programs (kernel names are cut at 15).
func isEntryName(name string) bool { return strings.HasPrefix(name, "dpd_") }

// Attach attaches both entry programs to the interface. It is idempotent:
// current attachments are left alone, older ones are replaced in place, and
// leftovers of the other attach mode are removed after the new one is in.
func (d *Datapath) Attach(ifindex int, ifname string) (AttachMode, error) {
	return d.attach(ifindex, ifname, false)
}

// AttachHost attaches the host endpoint entry programs (dpd_hep_in,
// dpd_hep_out) to one of the node's own interfaces, as Attach does the
// workload ones: at the same hooks and pins, replacing in place whatever
// dpd entry program is there.
func (d *Datapath) AttachHost(ifindex int, ifname string) (AttachMode, error) {
	return d.attach(ifindex, ifname, true)
}

func (d *Datapath) attach(ifindex int, ifname string, host bool) (AttachMode, error) {
	if ifindex <= 0 || ifname == "" || strings.ContainsRune(ifname, '/') {
		return "", fmt.Errorf("attach %q (%d): bad interface", ifname, ifindex)
	}
	start := time.Now()
	if !d.opts.ForceLegacyTC {
		err := d.attachTCX(ifindex, ifname, host)
		if err == nil {
			if err := d.detachTC(ifindex); err != nil {
				return "", fmt.Errorf("attach %s: remove legacy filters: %w", ifname, err)
			}
			d.ops.tcxAttach.observe(start)
			return AttachTCX, nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return "", fmt.Errorf("attach %s: %w", ifname, err)
		}
		d.log.Info("TCX not supported, using legacy TC", "iface", ifname, "err", err)
	}
	if err := d.attachTC(ifindex, host); err != nil {
		return "", fmt.Errorf("attach %s: %w", ifname, err)
	}
	if err := d.detachTCX(ifindex, ifname); err != nil {
		return "", fmt.Errorf("attach %s: remove tcx links: %w", ifname, err)
	}
	d.ops.tcAttach.observe(start)
	return AttachTC, nil
}

// Detach removes everything Attach added: TCX links and their pins, and the
// legacy filters (plus the clsact qdisc when nothing else uses it). An
// interface that is already gone only has its pins removed.
func (d *Datapath) Detach(ifindex int, ifname string) error {
	defer d.ops.detach.observe(time.Now())
	if err := d.detachTCX(ifindex, ifname); err != nil {
		return fmt.Errorf("detach %s: %w", ifname, err)
	}
	if err := d.detachTC(ifindex); err != nil {
		return fmt.Errorf("detach %s: %w", ifname, err)
	}
	return nil
}

func (d *Datapath) linkPin(ifname string, h hook) string {
	return filepath.Join(d.opts.PinDir, "links", ifname+"_"+h.suffix)
}

// PinnedLinks lists the interface names that have TCX link pins, so the
// composition layer can detach interfaces that no longer exist.
func (d *Datapath) PinnedLinks() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(d.opts.PinDir, "links"))
	if err != nil {
		return nil, fmt.Errorf("list link pins: %w", err)
	}
	var names []string
	for _, e := range ents {
		n := e.Name()
		for _, sfx := range []string{"_ingress", "_egress"} {
			if base, ok := strings.CutSuffix(n, sfx); ok && !slices.Contains(names, base) {
				names = append(names, base)
			}
		}
	}
	return names, nil
}

// ourTCXLinks lists the TCX links on the hook whose program is a dpd entry,
// recognising this Datapath's own entry programs by id, without opening
// them (which reads their info from procfs): the common case of a current
// attachment costs one query.
func (d *Datapath) ourTCXLinks(ifindex int, h hook) ([]link.ID, []ebpf.ProgramID, error) {
	return ourTCXLinksKnown(ifindex, h, d.ownIDs)
}

// ourTCXLinksKnown lists the TCX links on the hook whose program is a dpd
// entry; programs in known are taken as such without a lookup.
func ourTCXLinksKnown(ifindex int, h hook, known map[ebpf.ProgramID]bool) ([]link.ID, []ebpf.ProgramID, error) {
	res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: h.tcx})
	if tcxMissing(err) {
		// A valid ifindex and an unknown attach type: a kernel before TCX.
		return nil, nil, fmt.Errorf("query tcx %s: %w", h.suffix, ebpf.ErrNotSupported)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("query tcx %s: %w", h.suffix, err)
	}
	var links []link.ID
	var progs []ebpf.ProgramID
	for _, ap := range res.Programs {
		lid, ok := ap.LinkID()
		if !ok {
			continue
		}
		if !known[ap.ID] {
			id, err := attachedIdentity(ap.ID)
			if err != nil || !isEntryName(id.name) {
				continue
			}
		}
		links = append(links, lid)
		progs = append(progs, ap.ID)
	}
	return links, progs, nil
}

func (d *Datapath) attachTCX(ifindex int, ifname string, host bool) error {
	for _, h := range d.hooks() {
		prog := d.entryFor(h, host)
		if err := d.attachTCXHook(ifindex, ifname, h, prog); err != nil {
			return err
		}
	}
	return nil
}

func (d *Datapath) attachTCXHook(ifindex int, ifname string, h hook, prog *ebpf.Program) error {
	pin := d.linkPin(ifname, h)
	links, progs, err := d.ourTCXLinks(ifindex, h)
	if err != nil {
		return err
	}
	if len(links) == 0 {
		l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: h.tcx})
		if err != nil {
			return fmt.Errorf("tcx %s: %w", h.suffix, err)
		}
		defer func() { _ = l.Close() }()
		return repin(l, pin)
	}
	// Adopt the first, drop duplicates (e.g. from a crash between attach and pin).
	l, err := link.NewFromID(links[0])
	if err != nil {
		return fmt.Errorf("open tcx link %d: %w", links[0], err)
	}
	defer func() { _ = l.Close() }()
	if !d.isCurrent(progs[0], prog) {
		if err := l.Update(prog); err != nil {
			return fmt.Errorf("update tcx %s: %w", h.suffix, err)
		}
	}
	if !pinnedIs(pin, links[0]) {
		if err := repin(l, pin); err != nil {
			return err
		}
	}
	for _, extra := range links[1:] {
		if err := detachLinkID(extra); err != nil {
			return err
		}
	}
	return nil
}

// pinnedIs reports whether pin holds the link with id.
func pinnedIs(pin string, id link.ID) bool {
	l, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		return false
	}
	defer func() { _ = l.Close() }()
	info, err := l.Info()
	return err == nil && info.ID == id
}

// repin pins l at path, replacing whatever was pinned there (a link of a
// previous incarnation of the interface).
func repin(l link.Link, path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale pin %s: %w", path, err)
	}
	if err := l.Pin(path); err != nil {
		return fmt.Errorf("pin link %s: %w", path, err)
	}
	return nil
}

func detachLinkID(id link.ID) error {
	l, err := link.NewFromID(id)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("open tcx link %d: %w", id, err)
	}
	defer func() { _ = l.Close() }()
	if err := l.Detach(); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("detach tcx link %d: %w", id, err)
	}
	return nil
}

func (d *Datapath) detachTCX(ifindex int, ifname string) error {
	for _, h := range d.hooks() {
		links, _, err := d.ourTCXLinks(ifindex, h)
		switch {
		case errors.Is(err, unix.ENODEV), errors.Is(err, ebpf.ErrNotSupported):
			// Interface gone (its links went with it) or no TCX at all.
		case err != nil:
			return err
		}
		for _, id := range links {
			if err := detachLinkID(id); err != nil {
				return err
			}
		}
		if err := os.Remove(d.linkPin(ifname, h)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("unpin tcx %s: %w", h.suffix, err)
		}
	}
	return nil
}
