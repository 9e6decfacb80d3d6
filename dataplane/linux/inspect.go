package linux

// engine.KernelInspector: Inspect's questions answered under the kernel's
// lock, so the datapath (which Configure may close and reopen) is never
// used by anyone who does not hold it, and nothing kernel-typed leaves.

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
)

var _ engine.KernelInspector = (*Kernel)(nil)

var errClosed = errors.New("linux dataplane closed")

// EndpointDetails implements engine.KernelInspector.
func (k *Kernel) EndpointDetails(iface string) (model.EndpointDetails, bool) {
	d, ok := k.Endpoint(iface)
	if !ok {
		return model.EndpointDetails{}, false
	}
	return model.EndpointDetails{
		Ifindex: d.Ifindex, AttachMode: d.AttachMode, Ready: d.Ready, LastProgrammed: d.LastProgrammed,
		IngressProgram: d.IngressProgram, EgressProgram: d.EgressProgram,
	}, true
}

// Rules implements engine.KernelInspector: the counter table of the
// program installed for an interface's direction.
func (k *Kernel) Rules(iface string, dir model.Direction) ([]model.RuleInfo, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	prog := k.installedLocked(iface, dir)
	if prog == nil {
		return nil, false
	}
	rules := prog.Rules()
	out := make([]model.RuleInfo, len(rules))
	for i := range rules {
		out[i] = ruleInfo(&rules[i])
	}
	return out, true
}

func (k *Kernel) installedLocked(iface string, dir model.Direction) *polprog.Program {
	st, ok := k.eps[iface]
	if !ok || st.inst[dir] == nil {
		return nil
	}
	return st.inst[dir].prog
}

func ruleInfo(r *polprog.RuleInfo) model.RuleInfo {
	return model.RuleInfo{
		CounterID: r.CounterID, Tier: r.Tier, Policy: r.Policy, Kind: r.Kind, Index: r.Index,
		RuleID: r.RuleID, Action: r.Action, Synthetic: r.Synthetic,
	}
}

// Trace implements engine.KernelInspector: the interface's attached entry
// program runs on frame with the trace mark, and the deciding rule is
// looked up in the table of the program installed at that moment.
func (k *Kernel) Trace(iface string, dir model.Direction, frame []byte) (model.TraceResult, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return model.TraceResult{}, errClosed
	}
	st, ok := k.eps[iface]
	if !ok || st.ifindex == 0 {
		return model.TraceResult{}, engine.ErrNotProgrammed
	}
	// model.Egress is abi.DirFromWEP (0), model.Ingress abi.DirToWEP (1).
	res, err := k.bpf.Trace(st.ifindex, int(dir), frame)
	if err != nil {
		return model.TraceResult{}, err
	}
	out := traceResult(res)
	out.Ifindex = st.ifindex
	if out.RuleID != 0 {
		if prog := k.installedLocked(iface, dir); prog != nil {
			for _, r := range prog.Rules() {
				if r.CounterID == out.RuleID {
					out.Rule, out.RuleFound = ruleInfo(&r), true
					break
				}
			}
		}
	}
	return out, nil
}

// traceResult reads the final dpd_state of a trace run.
func traceResult(res tcbpf.TraceResult) model.TraceResult {
	st := res.State
	out := model.TraceResult{Return: res.Ret}
	switch {
	case !res.Reached && st.Flags&abi.StNoBackend != 0:
		out.Stage = model.TraceNoBackend
		return out
	case !res.Reached:
		out.Stage = model.TraceNotReady
		return out
	case st.Flags&abi.StNoPolicy != 0:
		out.Stage = model.TraceNoPolicy
	case st.Flags&abi.StEpilogue == 0:
		out.Stage = model.TraceIncomplete
	default:
		out.Stage = model.TraceDecided
		out.Allowed = st.Verdict == abi.VerdictAllow
		out.RuleID = st.RuleId
	}
	switch {
	case st.Flags&abi.StCTFwd != 0:
		out.Conntrack = "established"
	case st.Flags&abi.StCTRev != 0:
		out.Conntrack = "reply"
	case st.Flags&abi.StCTRelated != 0:
		out.Conntrack = "related"
	}
	return out
}

// ReadCounter implements engine.KernelInspector.
func (k *Kernel) ReadCounter(id uint64) (model.RuleCounter, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return model.RuleCounter{}, errClosed
	}
	p, b, err := k.bpf.ReadCounter(id)
	return model.RuleCounter{Packets: p, Bytes: b}, err
}

// ConntrackEntries implements engine.KernelInspector.
func (k *Kernel) ConntrackEntries() (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return 0, errClosed
	}
	return k.bpf.ConntrackEntries()
}

// MapUsage implements engine.KernelInspector: hash-like maps are walked key
// by key (batched for conntrack); arrays count their occupied slots.
func (k *Kernel) MapUsage() ([]model.MapUsage, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, errClosed
	}
	d := k.bpf
	m := d.Maps()
	maps := []struct {
		name string
		m    *ebpf.Map
	}{
		{"dpd_ct", m.Conntrack}, {"dpd_ipsets", m.IPSets}, {"dpd_ifstate", m.IfState},
		{"dpd_rule_ctrs", m.RuleCtrs}, {"dpd_jump", m.Jump}, {"dpd_chain", m.Chain},
		{"dpd_nat_fe", m.NATFrontends}, {"dpd_nat_be", m.NATBackends}, {"dpd_routes", m.Routes},
	}
	var out []model.MapUsage
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
		out = append(out, model.MapUsage{Name: mm.name, Entries: n, Capacity: int(mm.m.MaxEntries())})
	}
	return out, errors.Join(errs...)
}

// countEntries counts a map's entries: occupied slots of a program array,
// keys of anything else (one syscall per key).
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
