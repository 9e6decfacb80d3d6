package linux

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
)

// realBPF binds the BPF facilities to an opened datapath.
func realBPF(d *tcbpf.Datapath) bpfFacilities {
	return bpfFacilities{entry: entryMaps{d}, programs: polprogFacility{d}, sweep: d, ipsets: d, routes: d, nat: d, host: d}
}

// realNet binds the netlink facilities to the monitor and configurer.
func realNet(mon *nl.Monitor, cfg *nl.Configurer) netFacilities {
	return netFacilities{links: monitorLinks{mon}, endpoint: cfg, routes: cfg, tunnel: cfg, masq: cfg, ipv6: cfg.IPv6()}
}

// entryMaps is the datapath as an entryFacility.
type entryMaps struct{ *tcbpf.Datapath }

func (e entryMaps) InstallPolicy(slot uint32, dir int, p loadedProgram) error {
	return e.Datapath.InstallPolicy(slot, dir, p.Head())
}

// monitorLinks is the monitor's cache plus netlink lookups.
type monitorLinks struct{ *nl.Monitor }

func (monitorLinks) LinkName(ifindex int) (string, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return "", err
	}
	return l.Attrs().Name, nil
}

func (monitorLinks) Links() ([]linkRef, error) {
	refs, err := nl.ListLinkRefs()
	if err != nil {
		return nil, err
	}
	out := make([]linkRef, len(refs))
	for i, r := range refs {
		out[i] = linkRef{Name: r.Name, Ifindex: r.Index}
	}
	return out, nil
}

// polprogFacility compiles with polprog against the datapath's maps.
type polprogFacility struct{ d *tcbpf.Datapath }

func (f polprogFacility) maps() polprog.Maps {
	m := f.d.Maps()
	return polprog.Maps{State: m.State, Jump: m.Jump, IPSets: m.IPSets, RuleCtrs: m.RuleCtrs, Chain: m.Chain,
		IPSetIdx: f.d.IPSetIndex(), SetIndex: f.d, IPSetIdxHash: f.d.IPSetIndexHash(),
		Epilogue: f.d.EpilogueArray(), Epilogues: f.d.EpilogueArrays()}
}

func (f polprogFacility) Load(pol *model.DirectionPolicy, dir model.Direction) (loadedProgram, error) {
	return f.compileLoad(pol, dir, polprog.Options{}, false)
}

func (f polprogFacility) DirectEpilogue() bool { return f.d.EpilogueArrays() != nil }

func (f polprogFacility) LoadDirect(pol *model.DirectionPolicy, dir model.Direction) (loadedProgram, error) {
	if !f.DirectEpilogue() {
		return nil, errors.New("load policy: the datapath calls the epilogue indirectly")
	}
	return f.compileLoad(pol, dir, polprog.Options{}, true)
}

// compileLoad compiles pol with opts and loads it over the datapath's
// maps, calling the epilogue directly when direct.
func (f polprogFacility) compileLoad(pol *model.DirectionPolicy, dir model.Direction, opts polprog.Options, direct bool) (loadedProgram, error) {
	spec, err := polprog.Compile(pol, dir, f.d, opts)
	if err != nil {
		return nil, err
	}
	m := f.maps()
	if !direct {
		m.Epilogue = nil
	}
	p, err := spec.Load(m)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// previewMaxChunks bounds a staged preview program: it runs after the
// real policy (at most polprog.DefaultMaxChunks chunks), and the two with
// their epilogue passes must stay within the kernel's 33 tail calls, or a
// chunk's failed tail call would drop the packet.
const previewMaxChunks = 2

// previewOptions compile every staged preview, loaded or adopted.
var previewOptions = polprog.Options{MaxChunks: previewMaxChunks, Name: "dpd_prev"}

// LoadPreview compiles and loads a staged preview program.
func (f polprogFacility) LoadPreview(pol *model.DirectionPolicy, dir model.Direction) (loadedProgram, error) {
	return f.compileLoad(pol, dir, previewOptions, false)
}

// AdoptPreview takes over a pinned preview program if it is exactly what
// LoadPreview would load now.
func (f polprogFacility) AdoptPreview(pol *model.DirectionPolicy, dir model.Direction, p pinnedProgram) (loadedProgram, error) {
	spec, err := polprog.Compile(pol, dir, f.d, previewOptions)
	if err != nil {
		return nil, err
	}
	return adoptSpec(f, spec, p)
}

func (f polprogFacility) PreviewsDir() string { return filepath.Join(f.d.PinDir(), "previews") }

func (f polprogFacility) PinnedPreviewNames() ([]string, error) { return pinDirNames(f.PreviewsDir()) }

func (f polprogFacility) OpenPinnedPreview(name string) (pinnedProgram, error) {
	p, err := polprog.OpenPinned(filepath.Join(f.PreviewsDir(), name), f.d.Maps().Chain)
	if err != nil {
		return nil, err
	}
	return pinnedPolprog{p}, nil
}

// adoptSpec adopts p as spec's program.
func adoptSpec(f polprogFacility, spec *polprog.Spec, p pinnedProgram) (loadedProgram, error) {
	pp, ok := p.(pinnedPolprog)
	if !ok {
		return nil, errors.New("not a pinned policy program")
	}
	prog, err := spec.Adopt(f.maps(), pp.Pinned)
	if err != nil {
		return nil, err
	}
	return prog, nil
}

func (f polprogFacility) Adopt(pol *model.DirectionPolicy, dir model.Direction, p pinnedProgram) (loadedProgram, error) {
	spec, err := polprog.Compile(pol, dir, f.d, polprog.Options{})
	if err != nil {
		return nil, err
	}
	return adoptSpec(f, spec, p)
}

func (f polprogFacility) ProgsDir() string { return filepath.Join(f.d.PinDir(), "progs") }

func (f polprogFacility) PinnedNames() ([]string, error) { return pinDirNames(f.ProgsDir()) }

// pinDirNames lists the program pin directories in dir (none when dir
// does not exist).
func pinDirNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list pinned programs in %s: %w", dir, err)
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, nil
}

func (f polprogFacility) OpenPinned(name string) (pinnedProgram, error) {
	p, err := polprog.OpenPinned(filepath.Join(f.ProgsDir(), name), f.d.Maps().Chain)
	if err != nil {
		return nil, err
	}
	return pinnedPolprog{p}, nil
}

func (polprogFacility) RemovePinDir(path string) error { return os.RemoveAll(path) }

func (f polprogFacility) ChainIndices() ([]uint32, error) { return f.d.ChainIndices() }

func (f polprogFacility) ChainIndexInUse(idx uint32) bool {
	return polprog.ChainIndexInUse(f.d.Maps().Chain, idx)
}

func (f polprogFacility) DeleteChainIndex(idx uint32) error { return f.d.DeleteChainIndex(idx) }
func (f polprogFacility) CounterIDs() ([]uint64, error)     { return f.d.CounterIDs() }
func (f polprogFacility) EnsureCounters(ids []uint64) error { return f.d.EnsureCounters(ids) }
func (f polprogFacility) DeleteCounters(ids []uint64) error { return f.d.DeleteCounters(ids) }

// pinnedPolprog is a polprog.Pinned as a pinnedProgram.
type pinnedPolprog struct{ *polprog.Pinned }

func (p pinnedPolprog) Dir() string { return p.Pinned.Dir }

var (
	_ entryFacility   = entryMaps{}
	_ programFacility = polprogFacility{}
	_ previewFacility = polprogFacility{}
	_ sweepFacility   = (*tcbpf.Datapath)(nil)
	_ ipsetMaps       = (*tcbpf.Datapath)(nil)
	_ routeMaps       = (*tcbpf.Datapath)(nil)
	_ natMaps         = (*tcbpf.Datapath)(nil)
	_ linkFacility    = monitorLinks{}
	_ endpointNet     = (*nl.Configurer)(nil)
	_ routeNet        = (*nl.Configurer)(nil)
	_ tunnelNet       = (*nl.Configurer)(nil)
	_ masqNet         = (*nl.Configurer)(nil)
	_ loadedProgram   = (*polprog.Program)(nil)
	_ pinnedProgram   = pinnedPolprog{}
)
