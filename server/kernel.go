package server

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/linux"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
)

// KernelInspector is what Inspect's kernel questions (attach mode, program
// hashes, counters, trace, map usage) need of a dataplane. *linux.Kernel
// satisfies it; the memory dataplane does not, and those questions then
// answer FailedPrecondition.
type KernelInspector interface {
	Endpoint(iface string) (linux.EndpointDetails, bool)
	Rules(iface string, dir model.Direction) ([]polprog.RuleInfo, bool)
	BPF() *tcbpf.Datapath
}

var _ KernelInspector = (*linux.Kernel)(nil)

// kernelView is the narrow, fakeable surface the services use; linuxView
// implements it over a KernelInspector.
type kernelView interface {
	endpoint(iface string) (linux.EndpointDetails, bool)
	rules(iface string, dir model.Direction) ([]polprog.RuleInfo, bool)
	trace(ifindex int, dir model.Direction, frame []byte) (tcbpf.TraceResult, error)
	readCounter(id uint64) (packets, bytes uint64, err error)
	mapUsage() ([]mapUsage, error)
	conntrackEntries() (int, error)
}

// mapUsage is one BPF map's fill level.
type mapUsage struct {
	name              string
	entries, capacity int
}

// kernelViewOf returns the view of k, or nil when k cannot be inspected.
func kernelViewOf(k any) kernelView {
	if ki, ok := k.(KernelInspector); ok {
		return linuxView{ki}
	}
	return nil
}

type linuxView struct{ k KernelInspector }

func (v linuxView) endpoint(iface string) (linux.EndpointDetails, bool) { return v.k.Endpoint(iface) }

func (v linuxView) rules(iface string, dir model.Direction) ([]polprog.RuleInfo, bool) {
	return v.k.Rules(iface, dir)
}

func (v linuxView) trace(ifindex int, dir model.Direction, frame []byte) (tcbpf.TraceResult, error) {
	// model.Egress is abi.DirFromWEP (0), model.Ingress abi.DirToWEP (1).
	return v.k.BPF().Trace(ifindex, int(dir), frame)
}

func (v linuxView) readCounter(id uint64) (uint64, uint64, error) { return v.k.BPF().ReadCounter(id) }

func (v linuxView) conntrackEntries() (int, error) { return v.k.BPF().ConntrackEntries() }

// mapUsage counts the entries of dpd's maps. Hash-like maps are walked key
// by key (batched for conntrack); arrays count their occupied slots.
func (v linuxView) mapUsage() ([]mapUsage, error) {
	d := v.k.BPF()
	m, sz := d.Maps(), d.Sizes()
	maps := []struct {
		name string
		m    *ebpf.Map
		cap  int
	}{
		{"dpd_ct", m.Conntrack, sz.Conntrack},
		{"dpd_ipsets", m.IPSets, sz.IPSets},
		{"dpd_ifstate", m.IfState, sz.IfState},
		{"dpd_rule_ctrs", m.RuleCtrs, sz.RuleCounters},
		{"dpd_jump", m.Jump, sz.Jump},
		{"dpd_chain", m.Chain, sz.Chain},
		{"dpd_nat_fe", m.NATFrontends, sz.NATFrontend},
		{"dpd_nat_be", m.NATBackends, sz.NATBackend},
		{"dpd_routes", m.Routes, sz.Routes},
	}
	var out []mapUsage
	var errs []error
	for _, mm := range maps {
		if mm.m == nil {
			continue
		}
		var n int
		var err error
		if mm.name == "dpd_ct" {
			n, err = d.ConntrackEntries()
		} else {
			n, err = countEntries(mm.m)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("count %s: %w", mm.name, err))
			continue
		}
		out = append(out, mapUsage{name: mm.name, entries: n, capacity: int(mm.m.MaxEntries())})
	}
	return out, errors.Join(errs...)
}

// countEntries counts a map's entries: occupied slots of a program array,
// keys of anything else (one syscall per key; dpd's big maps are counted
// at scrape time only).
func countEntries(m *ebpf.Map) (int, error) {
	switch m.Type() {
	case ebpf.ProgramArray:
		n := 0
		var id uint32
		for i := uint32(0); i < m.MaxEntries(); i++ {
			err := m.Lookup(i, &id)
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				continue
			}
			if err != nil {
				return 0, err
			}
			n++
		}
		return n, nil
	case ebpf.Array, ebpf.PerCPUArray:
		return int(m.MaxEntries()), nil
	}
	key := make([]byte, m.KeySize())
	next := make([]byte, m.KeySize())
	n := 0
	var prev any // nil asks for the first key
	for {
		err := m.NextKey(prev, &next)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
		copy(key, next)
		prev = key
	}
}
